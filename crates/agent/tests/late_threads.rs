//! Threads born after `apply` returns get their rules from the agent. The workload and the agent are
//! this test binary re-executed in a helper role (selected by environment variable), so the test
//! needs nothing but the kernel: apply launches the spawner inside the workload's cgroups and starts
//! the agent; the spawner waits 1 s, creates named threads, and each thread measures how long it ran
//! before its rule (SCHED_FIFO + pinning) was in force.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{self_as_agent, reset_on_drop};
use rtslice_host::Mechanism;
use rtslice_host::sched::{self, SchedAttr};
use rtslice_host::{apply_setup, status, ApplyOptions, CpuList, Launch, Setup, StateDir, ThreadRule, WorkloadSetup};
use rtslice_sys::time::monotonic_ns as now_ns;
use rtslice_testkit::{root_or_skip, skip, KernelLock};

const ROLE: &str = "RTSLICE_AGENT_TEST_ROLE";
const THREADS: usize = 20;
// SCHED_BATCH rather than FIFO: on this shared VM other people's RT spinners may hold the CPUs, and a
// low-priority FIFO thread would then starve before it could observe its rule (the agent's path is the
// same for every policy; the benchmark uses FIFO).
const RULE: SchedAttr = SchedAttr::Batch { nice: 3 };

/// Helper role: the agent (polling when RTSLICE_AGENT_TEST_POLL is set).
#[test]
fn helper_agent_role() {
    common::run_as_agent_with(ROLE, || rtslice_agent::AgentOptions {
        force_polling: std::env::var("RTSLICE_AGENT_TEST_POLL").is_ok(),
        ..Default::default()
    });
}

/// Helper role: the workload. After 1 s it starts THREADS threads named "late-worker", one after the
/// other; each records the time from its start (name already set by std) until its policy and
/// affinity match the rule, and writes all reaction times (µs) to RESULT_FILE.
#[test]
fn helper_spawner_role() {
    if std::env::var(ROLE).as_deref() != Ok("spawner") {
        return;
    }
    let out = PathBuf::from(std::env::var("RESULT_FILE").unwrap());
    std::thread::sleep(Duration::from_secs(1));
    let mut reactions = Vec::new();
    for _ in 0..THREADS {
        let h = std::thread::Builder::new()
            .name("late-worker".into())
            .spawn(|| {
                let t0 = now_ns();
                let tid = sched::gettid();
                let deadline = Instant::now() + Duration::from_secs(2);
                while Instant::now() < deadline {
                    if sched::get_attr(tid).ok() == Some(RULE) && sched::get_affinity(tid).ok() == CpuList::parse("1").ok() {
                        return Some((now_ns() - t0) as f64 / 1000.0);
                    }
                    std::thread::sleep(Duration::from_micros(20));
                }
                None
            })
            .unwrap();
        reactions.push(h.join().unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(&out, serde_json::to_string(&reactions).unwrap()).unwrap();
    std::thread::sleep(Duration::from_secs(30)); // stay alive until reset stops us
}

fn run(poll: bool) -> (Vec<Option<f64>>, Option<rtslice_agent::AgentStats>) {
    let dir = tempfile::tempdir().unwrap();
    let result = dir.path().join("reactions.json");
    let exe = std::env::current_exe().unwrap();
    let agent_env = if poll { vec![("RTSLICE_AGENT_TEST_POLL".to_string(), "1".to_string())] } else { vec![] };
    let setup = Setup {
        workloads: vec![WorkloadSetup {
            name: format!("agent-{}-{}", std::process::id(), if poll { "poll" } else { "nl" }),
            cpus: CpuList::parse("0-1").unwrap(),
            threads: vec![ThreadRule {
                name: "^late-worker$".into(),
                policy: Some(RULE),
                cpus: Some(CpuList::parse("1").unwrap()),
                period_ns: None,
            }],
            launch: Launch::Command {
                argv: vec![exe.display().to_string(), "--exact".into(), "helper_spawner_role".into(), "--nocapture".into()],
                env: vec![(ROLE.into(), "spawner".into()), ("RESULT_FILE".into(), result.display().to_string())],
                cwd: None,
            },
            ..Default::default()
        }],
        ..Default::default()
    };
    let opts = ApplyOptions {
        mechanism: Some(Mechanism::None),
        agent: Some(self_as_agent(ROLE, agent_env)),
        ..ApplyOptions::with_state_dir(dir.path())
    };
    let applied = apply_setup(&setup, &opts).expect("apply");
    let _guard = reset_on_drop(dir.path());
    assert!(applied.agent.is_some());
    let st = status(&StateDir::new(dir.path())).unwrap();
    assert!(st.agent.as_ref().is_some_and(|a| a.alive), "status shows the agent: {:?}", st.agent);
    // The file may exist before the spawner finished writing it (seen under emulation): wait for a
    // complete JSON document.
    let start = Instant::now();
    let parse = || std::fs::read_to_string(&result).ok().and_then(|t| serde_json::from_str::<Vec<Option<f64>>>(&t).ok());
    let mut reactions = parse();
    while reactions.is_none() && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
        reactions = parse();
    }
    let reactions = reactions.expect("the spawner reported within 20 s");
    std::thread::sleep(Duration::from_millis(600)); // one stats write of the agent
    let stats = rtslice_agent::read_stats(&StateDir::new(dir.path()));
    (reactions, stats)
}

fn summary(v: &[Option<f64>]) -> (f64, f64, f64) {
    let mut x: Vec<f64> = v.iter().flatten().copied().collect();
    x.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (x[0], x[x.len() / 2], x[x.len() - 1])
}

#[test]
fn threads_born_after_apply_get_their_rules_quickly() {
    root_or_skip!();
    if !skip::cpus_or_skip(2) {
        return;
    }
    let _lock = KernelLock::acquire();
    for poll in [false, true] {
        let (reactions, stats) = run(poll);
        assert_eq!(reactions.len(), THREADS);
        assert!(reactions.iter().all(|r| r.is_some()), "every late thread got its rule: {reactions:?}");
        let (min, p50, max) = summary(&reactions);
        eprintln!(
            "MEASURED: agent ({}) reaction to {THREADS} threads born 1 s after apply: min {min:.0} µs, median {p50:.0} µs, max {max:.0} µs; agent stats {stats:?}",
            if poll { "polling 2 ms" } else { "netlink" }
        );
        // Generous bound (a noisy 2-CPU VM); the goal is 10 ms. In an emulated (TCG) guest
        // of the kernel matrix only "every thread got its rule" is meaningful; the bounds relax.
        let p50_bound = rtslice_testkit::timing_bound("agent median reaction µs", 10_000.0, 200_000.0);
        let max_bound = rtslice_testkit::timing_bound("agent max reaction µs", 200_000.0, 2_000_000.0);
        assert!(p50 < p50_bound, "median reaction {p50} µs");
        assert!(max < max_bound, "max reaction {max} µs");
    }
}
