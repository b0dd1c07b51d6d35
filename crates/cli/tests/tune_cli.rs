//! `rtslice tune` on the real binary: a dry run changes nothing and says what it would; bad input
//! exits 2; as root, --apply then `rtslice reset` leaves every knob as it was (KernelLock held).

use std::path::PathBuf;
use std::process::{Command, Output};

use rtslice_host::tune::{self, TuneRequest};
use rtslice_host::CpuList;
use rtslice_testkit::{root_or_skip, skip, KernelLock};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rtslice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rtslice")).args(args).current_dir(root()).output().expect("run rtslice")
}

fn request() -> TuneRequest {
    TuneRequest::new(CpuList::parse("1").unwrap(), CpuList::parse("0").unwrap())
}

#[test]
fn dry_run_changes_nothing_and_lists_every_knob() {
    if !skip::cpus_or_skip(2) {
        return;
    }
    let _k = KernelLock::acquire();
    let before = tune::snapshot(&request());
    let out = rtslice(&["tune", "--reserved", "1", "--housekeeping", "0", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let knobs: Vec<&str> = plan["writes"].as_array().unwrap().iter().chain(plan["absent"].as_array().unwrap()).map(|w| w["knob"].as_str().unwrap()).collect();
    for k in ["timer_migration", "irq_default_affinity", "watchdog_cpumask", "thp", "governor", "cstates"] {
        assert!(knobs.contains(&k), "{k} neither planned nor said absent: {knobs:?}");
    }
    assert_eq!(tune::snapshot(&request()), before);
    // The human view names the kernel command line words to add.
    let out = rtslice(&["tune", "--reserved", "1", "--housekeeping", "0"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("dry run: nothing was changed"), "{text}");
    assert!(text.contains("kernel command line"), "{text}");
}

#[test]
fn bad_input_exits_2_with_the_reason() {
    for (args, says) in [
        (vec!["tune"], "which CPUs?"),
        (vec!["tune", "--reserved", "1", "--housekeeping", "x"], "--housekeeping"),
        (vec!["tune", "--reserved", "0", "--housekeeping", "0"], "both reserved and housekeeping"),
        (vec!["tune", "--reserved", "1", "--housekeeping", "0", "--hugepages", "0:2M"], "NODE:SIZE:COUNT"),
        (vec!["tune", "--reserved", "1", "--housekeeping", "0", "--skip", "nope"], "unknown knob"),
        (vec!["tune", "examples/does-not-exist.yaml"], "cannot read spec"),
    ] {
        let out = rtslice(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        // A missing spec file is a host failure (3) like in `plan`; everything else is invalid input.
        let want = if says == "cannot read spec" { 3 } else { 2 };
        assert_eq!(out.status.code(), Some(want), "{args:?}: {err}");
        assert!(err.starts_with("rtslice: error: ") && err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn apply_then_reset_restores_the_host() {
    root_or_skip!();
    if !skip::cpus_or_skip(2) {
        return;
    }
    let _k = KernelLock::acquire();
    let dir = tempfile_dir();
    let before = tune::snapshot(&request());
    let out = rtslice(&["tune", "--apply", "--reserved", "1", "--housekeeping", "0", "--state-dir", &dir]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("undo with `rtslice tune --undo` or `rtslice reset`"));
    assert_ne!(tune::snapshot(&request()), before);
    let again = rtslice(&["tune", "--apply", "--reserved", "1", "--housekeeping", "0", "--state-dir", &dir]);
    assert_eq!(again.status.code(), Some(1), "tuning twice is refused");
    let out = rtslice(&["reset", "--state-dir", &dir]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(tune::snapshot(&request()), before);
    // --undo on an untuned host says so.
    let out = rtslice(&["tune", "--undo", "--state-dir", &dir]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("not tuned"));
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir() -> String {
    let d = std::env::temp_dir().join(format!("rtslice-tune-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d.display().to_string()
}
