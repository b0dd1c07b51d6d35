//! The periodic-task model against real SCHED_DEADLINE reservations (`rtslice_bench::periodic`):
//! the sweep of docs/model.md ("Periodic tasks: validation"), predicted against measured misses
//! and response percentiles per (period, runtime), written to
//! crates/bench/validation/results/periodic.{md,json}. Root; about 3 minutes of real-time
//! measurement: `cargo bench -p rtslice-bench --bench periodic_validate`.

use rtslice_bench::periodic::{validate_periodic, PeriodicValidation};

fn main() {
    if !rtslice_testkit::is_root() {
        rtslice_testkit::skip::skip(rtslice_testkit::skip::ROOT, "the sweep runs SCHED_DEADLINE reservations");
        return;
    }
    let _lock = rtslice_testkit::KernelLock::acquire();
    let cfg = PeriodicValidation::default_sweep();
    let report = validate_periodic(&cfg, &mut |l| eprintln!("{l}")).unwrap_or_else(|e| panic!("{e}"));
    let table = report.table();
    println!("{table}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("validation/results");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    std::fs::write(dir.join("periodic.md"), &table).unwrap_or_else(|e| panic!("periodic.md: {e}"));
    // The predicted response distributions are long; the percentiles next to them stay.
    let mut json = serde_json::to_value(&report).unwrap_or_else(|e| panic!("{e}"));
    strip(&mut json, "response");
    std::fs::write(dir.join("periodic.json"), serde_json::to_string_pretty(&json).unwrap_or_default()).unwrap_or_else(|e| panic!("periodic.json: {e}"));
}

fn strip(v: &mut serde_json::Value, key: &str) {
    match v {
        serde_json::Value::Object(m) => {
            m.remove(key);
            m.values_mut().for_each(|x| strip(x, key));
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| strip(x, key)),
        _ => {}
    }
}
