#![allow(dead_code)] // each test binary uses a different part of these helpers
//! Shared helpers of the bench's integration tests: the rtslice binary the runner drives, and a
//! quick run of an experiment into a temporary directory.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rtslice_bench::results::{Results, RunStatus};
use rtslice_bench::runner::{self, Options};
use rtslice_bench::Experiment;

/// The `rtslice` executable the runner drives (its children are its subcommands): `RTSLICE_BIN`,
/// else the one `cargo test --workspace` built beside this test (target/debug/rtslice: the
/// emulator and model crates are optimised in the dev profile, so its vBS computes at full speed),
/// else a `cargo build -p rtslice` of the dev profile when this crate's tests run alone.
pub fn rtslice_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(p) = std::env::var("RTSLICE_BIN") {
            return PathBuf::from(p);
        }
        // This test runs as target/<profile>/deps/<name>-<hash>; the binaries are one level up.
        let exe = std::env::current_exe().expect("the test's own path");
        if let Some(bin) = exe.parent().and_then(Path::parent).map(|d| d.join("rtslice")).filter(|b| b.is_file()) {
            return bin;
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut build = std::process::Command::new(env!("CARGO"));
        build
            .args(["build", "-q", "-p", "rtslice"])
            // `make test` hands its jobserver to cargo test through these; inherited by this nested
            // build they would reach libbpf-sys's vendored `make`, whose jobserver descriptors are
            // not ours.
            .env_remove("MAKEFLAGS")
            .env_remove("MFLAGS")
            .env_remove("CARGO_MAKEFLAGS")
            .current_dir(&root);
        let status = build.status().expect("run cargo build -p rtslice");
        assert!(status.success(), "cargo build -p rtslice failed");
        let target = std::env::var("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|_| root.join("target"));
        let bin = target.join("debug").join("rtslice");
        assert!(bin.is_file(), "{} missing after cargo build", bin.display());
        bin
    })
    .clone()
}

pub fn experiment_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/experiments").join(name)
}

/// Runs `name` from examples/experiments/ in --quick mode; returns results and the directory.
pub fn run_quick(name: &str) -> (Results, tempfile::TempDir) {
    let exp = Experiment::load(&experiment_path(name)).unwrap_or_else(|e| panic!("{e}")).into_quick();
    run(&exp)
}

pub fn run(exp: &Experiment) -> (Results, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut opt = Options::new(rtslice_bin(), dir.path().to_path_buf());
    opt.progress = false;
    let t0 = std::time::Instant::now();
    let r = runner::run(exp, &opt).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{}: {} runs in {:.1} s", exp.name, r.runs.len(), t0.elapsed().as_secs_f64());
    for run in &r.runs {
        if let RunStatus::Failed { error } = &run.status {
            eprintln!("  run {} {} failed: {error}", run.seq, run.cell);
        }
    }
    (r, dir)
}

/// The report files exist, the HTML is self-contained and has the named sections.
pub fn check_report(dir: &Path, sections: &[&str]) -> String {
    let html = std::fs::read_to_string(dir.join("report.html")).expect("report.html written");
    let md = std::fs::read_to_string(dir.join("report.md")).expect("report.md written");
    assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
    // Self-contained: no scripts, nothing fetched from anywhere.
    assert!(!html.contains("<script") && !html.contains("http://") || html.matches("http://").all(|_| html.contains("http://www.w3.org/2000/svg")));
    assert!(!html.contains("https://"), "report.html must not reference the network");
    for s in sections {
        assert!(html.contains(&format!("<section id=\"{s}\"")), "section {s} missing from report.html");
    }
    assert!(md.contains("| cell |"), "report.md has the headline table");
    for f in ["results.json", "runs.csv", "threads.csv", "samples.csv"] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
    html
}

/// Every run either completed or was skipped with a reason; print failures for diagnosis.
pub fn assert_no_failures(r: &Results) {
    let failed: Vec<String> = r
        .runs
        .iter()
        .filter_map(|x| match &x.status {
            RunStatus::Failed { error } => Some(format!("{}: {error}", x.cell)),
            _ => None,
        })
        .collect();
    assert!(failed.is_empty(), "failed runs:\n{}", failed.join("\n"));
}
