//! No input may make the TOSCA importer panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = rtslice_spec::import_tosca(text, "fuzz.yaml");
    }
});
