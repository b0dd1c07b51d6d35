//! Issue 16: a workload stating an SLO gets the reservation sized for it, on the real kernel (root).
//!
//! 1. `rtslice profile` (real BPF) measures an `rtslice emulate --profile oai-lte` run's on-CPU
//!    time per 1 ms window; its per-TTI demand must agree with what the emulator itself reports
//!    (its process CPU time per TTI, and its per-TTI processing time from data to done): the two
//!    read the same run's CPU time by different means.
//! 2. A spec with `slo` + `profile: <that file>` and no runtime is planned (a sized reservation whose
//!    predicted miss ratio meets the SLO) and applied (`rtslice apply`) with the emulator as the
//!    workload: the sized budget is what the kernel holds, read back with sched_getattr from the
//!    emulator's threads, and the workload runs to its end under it.
//!
//! Whether the sized reservation then meets the SLO on a host is a measurement, not a verdict this
//! VM can give (the hypervisor's steal alone made an unreserved vBS miss 1-43 % here): the density
//! benchmark (`rtslice bench examples/experiments/density.yaml`, docs/results.md) measures it with
//! intervals; this test prints the run's miss ratio beside the prediction for the log.
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use rtslice_sys::sched::{get_attr, SchedAttr};
use rtslice_testkit::{root_or_skip, skip::cpus_or_skip, KernelLock, OnDrop};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_rtslice");
const SLO_MISS_RATIO: f64 = 0.05;

fn rtslice(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run rtslice")
}

fn json_file(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}: {text}", path.display()))
}

fn us(v: &Value) -> f64 {
    rtslice_spec::units::parse_duration(v.as_str().unwrap_or_else(|| panic!("a duration, got {v}"))).unwrap().as_secs_f64() * 1e6
}

#[test]
fn a_workload_with_an_slo_is_sized_and_applied_as_planned() {
    root_or_skip!();
    // One housekeeping CPU, one for the reservation.
    if !cpus_or_skip(2) {
        return;
    }
    let _k = KernelLock::acquire();
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name);

    // The VM's speed drifts within minutes (the same vBS has used nearly twice the CPU per TTI from
    // one run to the next): a profile measured while it ran slow can need more than the node's cap
    // for the SLO, and the planner then refuses it — rightly.
    // Such a refusal is taken as the host's once: the vBS is profiled again. A second refusal, or
    // any other failure, fails the test with the planner's own words.
    let rt = ["ru-thread", "fep_processing", "lte-softmodem", "feptx_thread"];
    let mut attempt = 0;
    let (unreserved, plan, spec_path, out_json) = loop {
        attempt += 1;
        // 1. Profile an emulator run with the real tracer.
        let emu = Command::new(BIN)
            .args(["emulate", "--profile", "oai-lte", "--load", "20%", "--duration", "8s", "--json", "-q"])
            .stdout(std::fs::File::create(p("profiled-emu.json")).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        let prof = rtslice(&[
            "profile", "--pid", &emu.id().to_string(), "--period", "1ms", "--deadline", "3ms", "--duration", "5s", "-o",
            p("vbs.profile.json").to_str().unwrap(),
        ]);
        let emu_out = emu.wait_with_output().unwrap();
        assert!(emu_out.status.success(), "emulate failed");
        assert!(prof.status.success(), "profile: {}", String::from_utf8_lossy(&prof.stderr));
        eprintln!("{}", String::from_utf8_lossy(&prof.stderr));
        let profile = json_file(&p("vbs.profile.json"));
        let summary = json_file(&p("profiled-emu.json"));
        let hist = profile["histogram"].as_array().expect("the profile's histogram");
        let windows: f64 = hist.iter().map(|b| b["count"].as_f64().unwrap()).sum();
        let mean_us: f64 = hist.iter().map(|b| us(&b["value"]) * b["count"].as_f64().unwrap()).sum::<f64>() / windows;
        let p50_us = us(&profile["execution"]["p50"]);
        let emu_cpu_per_tti_us = summary["cpu_percent_total"].as_f64().unwrap() / 100.0 * summary["tti_us"].as_f64().unwrap();
        let emu_proc_p50_us = summary["proc_p50_us"].as_f64().unwrap();
        // This vBS's misses with no reservation at all, on this host now: printed beside the
        // reserved run's for the log.
        let unreserved = summary["deadline_misses"].as_f64().unwrap() / summary["ttis"].as_f64().unwrap().max(1.0);
        eprintln!("the profiled run (no reservation) missed {} of {} TTIs = {unreserved:.4}", summary["deadline_misses"], summary["ttis"]);
        eprintln!(
            "profile: {windows} windows, mean {mean_us:.0} µs, p50 {p50_us:.0} µs per TTI; emulator: CPU {emu_cpu_per_tti_us:.0} µs per TTI, \
             processing p50 {emu_proc_p50_us:.0} µs"
        );
        // ~5000 windows of 1 ms in 5 s (a few idle ones may be left out).
        assert!(windows > 4000.0, "{windows} windows");
        // The windows sum the same CPU time the emulator's process used (histogram values are rounded up
        // to 10 µs; the emulator's figure covers its whole run, start-up included): within 25 %.
        assert!((mean_us / emu_cpu_per_tti_us - 1.0).abs() < 0.25, "profile mean {mean_us} µs vs emulator {emu_cpu_per_tti_us} µs");
        // A TTI's processing time (data in to done, wall clock) is at least its CPU time on the median.
        assert!(p50_us <= emu_proc_p50_us * 1.25, "profile p50 {p50_us} µs vs emulator processing p50 {emu_proc_p50_us} µs");

        // Each real-time thread's share of the budget, from its measured CPU time in the profiled run
        // (SCHED_DEADLINE gives every thread its own budget; the profile is their sum).
        let cpu_of = |name: &str| -> f64 {
            summary["threads"].as_array().unwrap().iter().filter(|t| t["name"] == name).map(|t| t["cpu_s"].as_f64().unwrap()).sum()
        };
        let total: f64 = rt.iter().map(|n| cpu_of(n)).sum();
        // A floor of 5 % keeps a thread that barely ran from getting a budget too small to wake on.
        let raw: Vec<f64> = rt.iter().map(|n| (cpu_of(n) / total).max(0.05)).collect();
        let shares: Vec<f64> = raw.iter().map(|s| s / raw.iter().sum::<f64>()).collect();

        // 2. The spec: an SLO and the profile file, no runtime. The emulator leaves its threads' classes
        // to the spec (`--sched other`): the rules make its real-time threads SCHED_DEADLINE.
        let out_json = p("vbs.json");
        let mut spec = format!(
            "apiVersion: rtslice/v1\nnode: {{ housekeeping: [0] }}\nworkloads:\n  - name: vbs\n    launch:\n      command: [sh, -c, \"exec {BIN} emulate --profile oai-lte --load 20% --sched other --duration 12s --json -q > {}\"]\n    slo: {{ deadlineMissRatio: {SLO_MISS_RATIO} }}\n    profile: vbs.profile.json\n    threads:\n",
            out_json.display()
        );
        for (n, s) in rt.iter().zip(&shares) {
            spec.push_str(&format!("      - {{ match: ^{n}$, policy: deadline, share: {:.4} }}\n", s * 0.999));
        }
        std::fs::write(p("vbs.yaml"), &spec).unwrap();
        let spec_path = p("vbs.yaml");
        let spec_arg = spec_path.to_str().unwrap();

        let plan = rtslice(&["plan", spec_arg, "--json"]);
        let said = format!("{}{}", String::from_utf8_lossy(&plan.stdout), String::from_utf8_lossy(&plan.stderr));
        if plan.status.code() == Some(1) && attempt == 1 && (said.contains("above the node's cap") || said.contains("no reservation meets its SLO")) {
            eprintln!("attempt 1: the planner refused the SLO for this profile; profiling again: {said}");
            continue;
        }
        assert_eq!(plan.status.code(), Some(0), "plan (attempt {attempt}): {said}\n{spec}");
        break (unreserved, serde_json::from_slice::<Value>(&plan.stdout).unwrap(), spec_path, out_json);
    };
    let spec_arg = spec_path.to_str().unwrap();
    let w = &plan["workloads"][0];
    let (runtime_ns, period_ns) = (w["allocation"]["runtime_ns"].as_u64().unwrap(), w["allocation"]["period_ns"].as_u64().unwrap());
    let sizing = &w["sizing"];
    eprintln!("sized: {runtime_ns} ns every {period_ns} ns; {sizing}");
    assert_eq!(sizing["basis"], "sized");
    assert!(sizing["predicted_miss_ratio"].as_f64().unwrap() <= SLO_MISS_RATIO);
    // The rules are explicit SCHED_DEADLINE whatever enforces the reservation (RT groups on cgroup
    // v1 add a group budget the deadline threads are not charged to): a mechanism, not none.
    assert!(["deadline", "rt_group", "hcbs"].contains(&plan["kernel"]["mechanism"].as_str().unwrap_or_default()), "{}", plan["kernel"]);

    let state = p("state").to_str().unwrap().to_string();
    let out = rtslice(&["apply", spec_arg, "--state-dir", &state, "--json"]);
    let _reset = OnDrop::new(|| {
        let out = rtslice(&["reset", "--state-dir", &state]);
        if !out.status.success() {
            eprintln!("reset --state-dir {state}: {}", String::from_utf8_lossy(&out.stderr));
        }
    });
    assert_eq!(out.status.code(), Some(0), "apply: {}", String::from_utf8_lossy(&out.stderr));
    let applied: Value = serde_json::from_slice(&out.stdout).unwrap();
    let pid = applied["workloads"][0]["pids"][0]["pid"].as_u64().expect("the launched emulator's pid") as u32;

    // The kernel holds the sized budget: the rules' runtimes every period, summing to it.
    std::thread::sleep(Duration::from_secs(3));
    let mut held = 0u64;
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let tid: i32 = entry.file_name().to_string_lossy().parse().unwrap();
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default().trim().to_string();
        if let Ok(SchedAttr::Deadline { runtime_ns: r, period_ns: per, .. }) = get_attr(tid) {
            assert_eq!(per, period_ns, "{comm}: period");
            held += r;
            seen.push(comm);
        }
    }
    seen.sort();
    eprintln!("SCHED_DEADLINE threads: {seen:?}, runtimes summing to {held} ns");
    assert_eq!(seen.len(), rt.len(), "every real-time thread under SCHED_DEADLINE: {seen:?}");
    assert!(held <= runtime_ns && held as f64 >= runtime_ns as f64 * 0.99 - 4000.0, "held {held} ns of the sized {runtime_ns} ns");

    // The run's own miss ratio.
    let mut done = false;
    for _ in 0..60 {
        if std::fs::metadata(&out_json).map(|m| m.len() > 0).unwrap_or(false) && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_err() {
            done = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(done, "the emulator did not finish its 12 s run");
    let run = json_file(&out_json);
    let (ttis, misses) = (run["ttis"].as_f64().unwrap(), run["deadline_misses"].as_f64().unwrap());
    let ratio = misses / ttis;
    eprintln!(
        "under {runtime_ns} ns every {period_ns} ns: {misses} of {ttis} TTIs missed = {ratio:.4} (SLO {SLO_MISS_RATIO}, predicted {}; \
         unreserved {unreserved:.4})",
        sizing["predicted_miss_ratio"]
    );
    // The workload ran to its end under the reservation, the whole time admitted (its threads kept
    // their budgets: a thread the kernel throttled for good would have stopped the pipeline).
    assert!(ttis >= 11_000.0, "the vBS ran {ttis} TTIs of its 12 s");
}
