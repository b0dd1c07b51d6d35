//! No input may make the spec parser panic; whatever parses must plan, and survive to_yaml → parse.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match rtslice_spec::parse(text, "fuzz.yaml") {
        Ok(spec) => {
            let again = rtslice_spec::parse(&rtslice_spec::to_yaml(&spec), "again.yaml").expect("to_yaml output parses");
            assert_eq!(again, spec);
            let _ = rtslice_plan::plan(&spec, &rtslice_plan::NodeFacts::with_cpus(8));
        }
        Err(errors) => assert!(!errors.is_empty()),
    }
});
