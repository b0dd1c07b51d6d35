//! The runner's own behaviour with cheap workloads: a failing run is recorded with its error and
//! the others continue; Ctrl-C (the stop flag) ends cleanly and still writes what was measured.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rtslice_bench::results::RunStatus;
use rtslice_bench::runner::{self, Options};
use rtslice_bench::Experiment;

const FAILING: &str = r#"
apiVersion: rtslice/v1
kind: Experiment
name: failing
duration: 1s
warmup: 500ms
blocks:
  - name: broken
    workloads:
      - name: crasher
        command: [sh, -c, "echo 'no such device' >&2; exit 3"]
    strategies: [none]
  - name: fine
    workloads:
      - name: sleeper
        command: [sleep, "30"]
    strategies: [none]
"#;

#[test]
fn a_failing_run_is_recorded_and_the_rest_continue() {
    let exp = Experiment::parse(FAILING, "failing.yaml").unwrap();
    let (r, dir) = common::run(&exp);
    assert_eq!(r.runs.len(), 2);
    match &r.runs[0].status {
        RunStatus::Failed { error } => {
            assert!(error.contains("crasher") && error.contains("exit code 3") && error.contains("no such device"), "{error}")
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_eq!(r.runs[1].status, RunStatus::Ok);
    // The survivor was measured: CPU samples and a context-switch rate for the sleeper.
    let sleeper = &r.runs[1].instances[0];
    assert!(!sleeper.cpu_samples.is_empty());
    assert!(sleeper.cpu_samples.iter().all(|c| *c < 0.2), "sleep uses no CPU: {:?}", sleeper.cpu_samples);
    let html = common::check_report(dir.path(), &["overview", "broken", "fine", "problems", "machine"]);
    assert!(html.contains("no such device"), "the error is in the report");
    // No process of the run survives it.
    let pid = sleeper.pid.unwrap();
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "sleeper {pid} still running");
}

const LONG: &str = r#"
apiVersion: rtslice/v1
kind: Experiment
name: long
duration: 2s
warmup: 200ms
repetitions: 3
blocks:
  - name: b
    workloads:
      - name: w
        command: [sleep, "60"]
    strategies: [none]
"#;

#[test]
fn stopping_keeps_what_was_measured() {
    let exp = Experiment::parse(LONG, "long.yaml").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut opt = Options::new(common::rtslice_bin(), dir.path().to_path_buf());
    opt.progress = false;
    let stop = opt.stop.clone();
    // Ctrl-C during the second run: one second after the first run's results are written (the
    // runner writes them after every run). A fixed 3.5 s from the start was before the end of the
    // first run once on a loaded CI machine (its start-up in a debug build took over 1.3 s).
    let out = dir.path().to_path_buf();
    std::thread::spawn(move || {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(30) {
            if rtslice_bench::results::Results::load(&out).is_ok_and(|r| !r.runs.is_empty()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(1000));
        stop.store(true, Ordering::SeqCst);
    });
    let t0 = Instant::now();
    let r = runner::run(&exp, &opt).unwrap();
    // Two runs' worth of time at most, the second cut short: promptly, with room for a slow start.
    assert!(t0.elapsed() < Duration::from_secs(15), "stopped promptly ({:?})", t0.elapsed());
    assert!(r.interrupted);
    assert!(!r.runs.is_empty() && r.runs.len() < 3, "{} runs", r.runs.len());
    assert_eq!(r.runs[0].status, RunStatus::Ok);
    assert_eq!(r.runs.last().unwrap().status, RunStatus::Interrupted);
    let html = common::check_report(dir.path(), &["overview", "b"]);
    assert!(html.contains("stopped by Ctrl-C"));
    let back = rtslice_bench::results::Results::load(dir.path()).unwrap();
    assert_eq!(back.runs.len(), r.runs.len());
}

/// Every journal segment of the node in `state` holds no workload.
fn assert_node_left_nothing(state: &std::path::Path) {
    let segments = state.join("node").join("workloads");
    for seg in std::fs::read_dir(&segments).into_iter().flatten().flatten() {
        let left = rtslice_host::StateDir::new(seg.path()).load().unwrap_or_else(|e| panic!("{e}"));
        assert!(left.and_then(|s| s.record).is_none_or(|r| r.workloads.is_empty()), "the node service left {}", seg.path().display());
    }
}

const VIA: &str = r#"
apiVersion: rtslice/v1
kind: Experiment
name: via
duration: 1s
warmup: 500ms
blocks:
  - name: sleeper
    workloads:
      - name: sleeper
        command: [sleep, "30"]
        threads:
          - {match: "^sleep$", slot: 0, policy: fifo, priority: 10}
    # A dedicated CPU and a FIFO rule: a reservation would make the sleeping `sleep` a deadline
    # thread, which the kernel admits only where it last ran (possibly the other CPU).
    strategies: [dedicated]
    variants:
      - {name: apply}
      - {name: node, via: node}
      - {name: node-deadline, via: node, mechanism: deadline}
"#;

#[test]
fn a_variant_s_mechanism_is_checked_when_the_experiment_is_read() {
    let bad = VIA.replace("mechanism: deadline", "mechanism: edf");
    let e = Experiment::parse(&bad, "via.yaml").unwrap_err().to_string();
    assert!(e.contains("mechanism") && e.contains("edf") && e.contains("rt_group"), "{e}");
}

/// `via: node`: the same cell deployed by the node service instead of one-shot apply, both runs
/// measured, each path's state undone after its window (the node's in a directory of its own).
#[test]
fn a_via_node_variant_deploys_through_the_node_service() {
    rtslice_testkit::root_or_skip!();
    let _lock = rtslice_testkit::KernelLock::acquire();
    let exp = Experiment::parse(VIA, "via.yaml").unwrap();
    let (r, dir) = common::run(&exp);
    assert_eq!(r.runs.len(), 3);
    for run in &r.runs {
        assert_eq!(run.status, RunStatus::Ok, "{}: {:?}", run.variant, run.notes);
        let sleeper = &run.instances[0];
        let pid = sleeper.pid.unwrap();
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "{}: sleeper {pid} still running", run.variant);
    }
    let by = |v: &str| r.runs.iter().find(|x| x.variant == v).unwrap_or_else(|| panic!("no {v} run"));
    let node = by("node");
    assert!(node.notes.iter().any(|n| n.starts_with("via node: the node service deployed 1 workload(s)")), "{:?}", node.notes);
    assert!(node.applied.is_none(), "one-shot apply did not run: {:?}", node.applied);
    // A variant's mechanism is the node's, whatever the node would choose itself.
    let forced = by("node-deadline");
    assert!(forced.notes.iter().any(|n| n.starts_with("via node:") && n.ends_with("(Deadline)")), "{:?}", forced.notes);
    assert!(by("apply").applied.is_some() && !by("apply").notes.iter().any(|n| n.starts_with("via node")));
    // The node's journal segments are empty after the run: every workload undone.
    assert_node_left_nothing(&dir.path().join("state.node"));
}

const TWO_ON_ONE_CPU: &str = r#"
apiVersion: rtslice/v1
node:
  name: refuses
  cpus: 0-1
  housekeeping: 0
workloads:
  - name: first
    launch: {command: [sleep, "30"]}
    demand:
      reservation: {runtime: 60ms, period: 100ms, count: 1}
  - name: second
    launch: {command: [sleep, "30"]}
    demand:
      reservation: {runtime: 60ms, period: 100ms, count: 1}
"#;

/// A node that admits the first workload and not the second: `ClosedLoop::start` says so as a
/// refusal (which the runner records as the cell's result, not an error of the run), with the
/// planner's reason, and undoes the one it had deployed.
#[test]
fn a_node_that_does_not_admit_every_workload_is_a_refusal_and_is_undone() {
    rtslice_testkit::root_or_skip!();
    let _lock = rtslice_testkit::KernelLock::acquire();
    let spec = rtslice_spec::parse(TWO_ON_ONE_CPU, "two.yaml").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.node");
    let r = rtslice_bench::closed_loop::ClosedLoop::start(&spec, &state, &dir.path().join("report.sock"), None);
    match r {
        Err(e @ rtslice_bench::closed_loop::StartError::Refused(_)) => {
            let msg = e.to_string();
            assert!(msg.contains("second:") && !msg.contains("first:"), "{msg}");
        }
        Err(e) => panic!("expected a refusal, got a failure: {e}"),
        Ok(_) => panic!("two 60% reservations on one CPU were both admitted"),
    }
    // Every journal segment of the node is empty: the admitted workload was undone.
    assert_node_left_nothing(&state);
}

const POOL: &str = r#"
apiVersion: rtslice/v1
node:
  name: pool
  cpus: 0-1
  housekeeping: 0
workloads:
  - name: pool
    launch: {command: [sh, -c, "sh -c 'while :; do :; done; : 6007' & sleep 6007 & wait"]}
    demand:
      reservation: {runtime: 60ms, period: 100ms, count: 1}
    threads:
      - {match: "^(sh|sleep)$", policy: fifo, priority: 10}
"#;

/// The pids whose command line contains `needle`.
fn pids_with(needle: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").contains(needle)))
        .collect()
}

fn deadline_runtime(pid: i32) -> Option<u64> {
    match rtslice_host::sched::get_attr(pid).ok()? {
        rtslice_host::sched::SchedAttr::Deadline { runtime_ns, .. } => Some(runtime_ns),
        _ => None,
    }
}

/// The bench's node path runs the thread-rule agent as the daemon does: a reclaiming
/// SCHED_DEADLINE pool deployed with an equal split (a busy shell, an idle shell and an idle
/// `sleep` under one rule: 20 ms each of 60 ms) is re-split by measured use, the busy thread's
/// runtime growing past the others'. Without the agent the deploy's split stays.
#[test]
fn the_node_path_re_splits_a_reclaiming_deadline_pool_by_demand() {
    rtslice_testkit::root_or_skip!();
    if !rtslice_testkit::skip::cpus_or_skip(2) {
        return;
    }
    let facts = rtslice_host::facts::HostFacts::detect().unwrap();
    rtslice_testkit::skip_unless!(
        facts.available.contains(&rtslice_host::Mechanism::Deadline),
        rtslice_testkit::skip::DEADLINE,
        "SCHED_DEADLINE with partitions, available: {:?}",
        facts.available
    );
    let _lock = rtslice_testkit::KernelLock::acquire();
    let spec = rtslice_spec::parse(POOL, "pool.yaml").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let node = rtslice_bench::closed_loop::ClosedLoop::start(&spec, &dir.path().join("state.node"), &dir.path().join("report.sock"), Some(rtslice_host::Mechanism::Deadline))
        .unwrap_or_else(|e| panic!("{e}"));
    // The launched shell forks both after the deploy returns: wait for them (a bound no host reaches
    // unless the launch failed).
    let find = || {
        let busy = pids_with("while :; do :; done; : 6007").into_iter().find(|p| !pids_with("& sleep 6007").contains(p));
        let idle = pids_with("sleep 6007").into_iter().find(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "sleep"));
        busy.zip(idle)
    };
    let waited = Instant::now();
    let mut found = find();
    while found.is_none() && waited.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
        found = find();
    }
    let (busy, idle) = found.expect("the pool's busy shell and its sleep started");
    // The agent rescans every 500 ms and re-splits from a few readings: a bound far above what it
    // takes, only reached if nothing re-splits.
    let started = Instant::now();
    let (mut b, mut i) = (deadline_runtime(busy), deadline_runtime(idle));
    while started.elapsed() < Duration::from_secs(30) && !matches!((b, i), (Some(b), Some(i)) if b >= 2 * i) {
        std::thread::sleep(Duration::from_millis(200));
        (b, i) = (deadline_runtime(busy), deadline_runtime(idle));
    }
    let decisions = node.finish();
    assert!(decisions.is_ok(), "{decisions:?}");
    let (b, i) = (b.expect("the busy shell is a deadline thread"), i.expect("the sleep is a deadline thread"));
    assert!(b >= 2 * i, "busy {b} ns against idle {i} ns every 100 ms after {:?}: the pool was not re-split by demand", started.elapsed());
    assert!(pids_with("sleep 6007").iter().all(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).map_or(true, |c| c.trim() != "sleep")), "the node's reset stopped what it launched");
}
