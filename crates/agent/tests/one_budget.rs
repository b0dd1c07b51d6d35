//! One budget per workload, however many processes its rules match (issue 15): a workload that forks
//! four CPU-bound workers under `reservation: 20ms / 100ms` with one `.*` FIFO rule uses at most its
//! 20% of a CPU in total, every process is under the rule, and `status` shows no drift — under
//! SCHED_DEADLINE (the budget split over the matched threads, re-split by the agent as the workers
//! appear) and under an RT group (the group's budget is the one budget).
//!
//! The agent is this test binary re-executed in a helper role, as in late_threads.rs.

mod common;

use std::time::{Duration, Instant};

use common::{cpu_ticks, self_as_agent, reset_on_drop};
use rtslice_host::sched::{self, SchedAttr};
use rtslice_host::{
    apply_setup, status, ApplyOptions, CpuList, Launch, Mechanism, Reservation, Setup, StateDir, ThreadRule, WorkloadSetup,
};
use rtslice_testkit::{root_or_skip, skip, KernelLock};

const ROLE: &str = "RTSLICE_ONE_BUDGET_ROLE";

/// The agent's demand interval, when a test sets one (in ms) for its helper.
const DEMAND_INTERVAL_MS: &str = "RTSLICE_ONE_BUDGET_DEMAND_INTERVAL_MS";

#[test]
fn helper_agent_role() {
    if std::env::var(ROLE).as_deref() == Ok("stack") {
        // A stack for the agent to split: one thread spins, two sleep, until killed.
        for _ in 0..2 {
            std::thread::Builder::new().name("sleeper".into()).spawn(|| std::thread::sleep(Duration::from_secs(600))).unwrap();
        }
        std::thread::Builder::new().name("spinner".into()).spawn(|| loop { std::hint::spin_loop() }).unwrap().join().unwrap();
    }
    common::run_as_agent_with(ROLE, || {
        let defaults = rtslice_agent::AgentOptions::default();
        match std::env::var(DEMAND_INTERVAL_MS).ok().and_then(|v| v.parse().ok()) {
            Some(ms) => rtslice_agent::AgentOptions { demand_interval: Duration::from_millis(ms), ..defaults },
            None => defaults,
        }
    });
}

/// Runs the forking workload under `mech` and returns (CPU share of all its processes together,
/// number of processes).
/// A rule's SCHED_DEADLINE policy as the planner writes it (deadline = period).
fn deadline(runtime_ns: u64, period_ns: u64, reclaim: bool) -> SchedAttr {
    SchedAttr::Deadline { runtime_ns, deadline_ns: period_ns, period_ns, reclaim }
}

fn run(mech: Mechanism) -> Option<(f64, usize)> {
    if !skip::cpus_or_skip(2) || !common::has_mechanism(mech) {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let name = format!("fork4-{mech}-{}", std::process::id());
    // The parent waits 0.3 s, so the workers appear after apply: the agent gives them their share.
    let script = "sleep 0.3; for i in 1 2 3 4; do (while :; do :; done) & done; wait";
    // The kernel parameters the planner gives the reservation: under SCHED_DEADLINE the one rule
    // holds all of it (shared by the threads it matches), under RT groups the group does.
    let reservation = Reservation::from_micros(20_000, 100_000);
    let (policy, group_budget) = match mech {
        Mechanism::Deadline => (deadline(20_000_000, 100_000_000, false), None),
        _ => (SchedAttr::Fifo { priority: 10 }, Some(reservation)),
    };
    let setup = Setup {
        workloads: vec![WorkloadSetup {
            name: name.clone(),
            cpus: CpuList::parse("1").unwrap(),
            reservation: Some(reservation),
            group_budget,
            threads: vec![ThreadRule { name: ".*".into(), policy: Some(policy), cpus: None, period_ns: None }],
            launch: Launch::Command { argv: vec!["sh".into(), "-c".into(), script.into()], env: vec![], cwd: None },
            ..Default::default()
        }],
        mechanism: Some(mech),
        ..Default::default()
    };
    let opts = ApplyOptions {
        mechanism: Some(mech),
        agent: Some(self_as_agent(ROLE, vec![])),
        ..ApplyOptions::with_state_dir(dir.path())
    };
    let applied = apply_setup(&setup, &opts).expect("apply");
    let _cleanup = reset_on_drop(dir.path());
    let group = applied.workloads[0].group.cpuset.clone();
    let sd = StateDir::new(dir.path());
    // The parent and its four workers, every one under the rule — eventually: how fast is
    // late_threads' measure; a TCG guest beside two others needed most of the 10 s once allowed
    // here for the sibling cfs_pool test (docs/testing.md, flaky failures).
    let started = Instant::now();
    let deadline = started + Duration::from_secs(60);
    let pids = loop {
        let pids = rtslice_host::workload_pids(&group);
        let st = status(&sd).unwrap();
        let ruled = pids.iter().all(|&p| sched::get_attr(p).is_ok_and(|a| a.is_realtime()));
        if pids.len() == 5 && ruled && st.drift.is_empty() {
            eprintln!("settled after {:.1} s", started.elapsed().as_secs_f64());
            break pids;
        }
        assert!(Instant::now() < deadline, "the workload never settled: pids {pids:?}, drift {:?}", st.drift);
        std::thread::sleep(Duration::from_millis(50));
    };
    for &p in &pids {
        let want = match mech {
            Mechanism::Deadline => SchedAttr::Deadline { runtime_ns: 4_000_000, deadline_ns: 100_000_000, period_ns: 100_000_000, reclaim: false },
            _ => SchedAttr::Fifo { priority: 10 },
        };
        assert_eq!(sched::get_attr(p).unwrap(), want, "pid {p}: every process is under the rule with its share");
    }
    let hz = rtslice_sys::procfs::ticks_per_second() as f64;
    let t0 = Instant::now();
    let c0: u64 = pids.iter().map(|&p| cpu_ticks(p)).sum();
    std::thread::sleep(Duration::from_secs(3));
    let c1: u64 = pids.iter().map(|&p| cpu_ticks(p)).sum();
    let share = (c1 - c0) as f64 / hz / t0.elapsed().as_secs_f64();
    let st = status(&sd).unwrap();
    assert!(st.drift.is_empty(), "no drift after 3 s: {:?}", st.drift);
    Some((share, pids.len()))
}

#[test]
fn a_forking_workload_under_deadline_gets_one_budget() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let Some((share, n)) = run(Mechanism::Deadline) else { return };
    eprintln!("MEASURED: deadline, 20ms/100ms, {n} processes under one `.*` rule used {:.1}% of a CPU in total", share * 100.0);
    assert!(share <= 0.23, "one budget (20%), not {n} × 20%: used {:.1}%", share * 100.0);
    // How much of its budget a spinning workload gets in 3 s is timing: a loaded host's TCG guest
    // (one host thread for 4 vCPUs) measured 5.9% once; the upper bound above never relaxes.
    let runs = rtslice_testkit::timing_bound("the deadline workload's CPU share, lower", 0.10, 0.01);
    assert!(share >= runs, "the workload runs: {:.1}%", share * 100.0);
}

#[test]
fn a_forking_workload_under_an_rt_group_gets_one_budget() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let Some((share, n)) = run(Mechanism::RtGroup) else { return };
    eprintln!("MEASURED: rt_group, 20ms/100ms, {n} processes under one `.*` rule used {:.1}% of a CPU in total", share * 100.0);
    assert!(share <= 0.23, "one budget (20%), not {n} × 20%: used {:.1}%", share * 100.0);
    assert!(share >= 0.10, "the workload runs: {:.1}%", share * 100.0);
}

/// The SCHED_DEADLINE bandwidth a thread holds now, in ns per 100 ms (the reservation's period);
/// 0 for any other policy or a gone thread.
fn held_per_100ms(tid: i32) -> u64 {
    match sched::get_attr(tid) {
        Ok(SchedAttr::Deadline { runtime_ns, period_ns, .. }) => (u128::from(runtime_ns) * 100_000_000).div_ceil(u128::from(period_ns.max(1))) as u64,
        _ => 0,
    }
}

/// A reclaiming reservation (`reclaim: true`) follows demand, still within its one budget: one
/// process spins, two sleep, the parent waits, all under one `.*` rule of a 40 ms / 100 ms
/// reservation. The agent re-splits the budget by measured use every rescan: the spinner ends up
/// holding most of it, and at every sample over 3 s the runtimes of all the workload's threads
/// together stay within the 40 ms — never more than the one budget — and `status` shows no drift.
#[test]
fn a_reclaiming_workload_splits_its_one_budget_by_measured_demand() {
    demand_split(None);
}

/// The same with the spinner under a rule of its own at a quarter of the period (`period: 25ms` on
/// a FIFO rule): one pool in bandwidth across both periods — the spinner keeps its 25 ms period and
/// holds most of the 40 %, and all of them together never more than the 40 %.
#[test]
fn a_rule_at_its_own_period_draws_on_the_same_one_budget() {
    demand_split(Some(25_000_000));
}

fn demand_split(spinner_period_ns: Option<u64>) {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    if !skip::cpus_or_skip(2) || !common::has_mechanism(Mechanism::Deadline) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let name = format!("demand-{}", std::process::id());
    // The spinner names itself (a comm event), the sleepers keep `sleep`.
    let script = "sleep 0.3; sh -c 'echo spinner > /proc/self/comm; while :; do :; done' & sleep 60 & sleep 60 & wait";
    let budget_ns = 40_000_000u64;
    // The planner's split of the 40 ms: all of it to one rule; over two, half each, the spinner's at
    // its own period (the same bandwidth).
    let threads = match spinner_period_ns {
        None => vec![ThreadRule { name: ".*".into(), policy: Some(deadline(budget_ns, 100_000_000, true)), cpus: None, period_ns: None }],
        Some(p) => vec![
            ThreadRule { name: "^spinner$".into(), policy: Some(deadline(budget_ns / 2 * p / 100_000_000, p, true)), cpus: None, period_ns: Some(p) },
            ThreadRule { name: ".*".into(), policy: Some(deadline(budget_ns / 2, 100_000_000, true)), cpus: None, period_ns: None },
        ],
    };
    let setup = Setup {
        workloads: vec![WorkloadSetup {
            name: name.clone(),
            cpus: CpuList::parse("1").unwrap(),
            reservation: Some(Reservation::from_micros(40_000, 100_000)),
            reclaim: true,
            threads,
            launch: Launch::Command { argv: vec!["sh".into(), "-c".into(), script.into()], env: vec![], cwd: None },
            ..Default::default()
        }],
        ..Default::default()
    };
    let opts = ApplyOptions {
        mechanism: Some(Mechanism::Deadline),
        agent: Some(self_as_agent(ROLE, vec![])),
        ..ApplyOptions::with_state_dir(dir.path())
    };
    let applied = apply_setup(&setup, &opts).expect("apply");
    let _cleanup = reset_on_drop(dir.path());
    let group = applied.workloads[0].group.cpuset.clone();
    let sd = StateDir::new(dir.path());
    let threads = || -> Vec<(i32, String)> {
        rtslice_host::rules::workload_threads(&group).into_iter().map(|(_, tid, comm)| (tid, comm)).collect()
    };
    // Four processes (parent, spinner, two sleepers), every one under a rule. A TCG guest on a
    // busy host is slow to start them (the spinner's shell renames itself late), hence its bound.
    let settle = rtslice_testkit::timing_bound("settle time (s)", 10.0, 30.0);
    let deadline = Instant::now() + Duration::from_secs_f64(settle);
    while !(threads().len() == 4 && threads().iter().any(|(_, c)| c == "spinner") && threads().iter().all(|(t, _)| held_per_100ms(*t) > 0)) {
        assert!(Instant::now() < deadline, "the workload never settled: {:?}", threads());
        std::thread::sleep(Duration::from_millis(50));
    }
    // The one budget is never exceeded while the agent re-splits it (checked at every sample); the
    // split reaches the busy thread within 3 s natively. A TCG guest's agent sees its demand
    // windows stretched by the host, so there it is given up to 30 s: what is judged is where the
    // split goes, not how fast.
    let converge = Duration::from_secs_f64(rtslice_testkit::timing_bound("demand split convergence (s)", 3.0, 30.0));
    let busy_holds_most = || {
        let ts = threads();
        ts.iter().find(|(_, c)| c == "spinner").is_some_and(|(t, _)| held_per_100ms(*t) > budget_ns / 2)
    };
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(3) || (t0.elapsed() < converge && !busy_holds_most()) {
        // A consistent sample: the agent may re-split between two reads (shrinking one thread, then
        // growing another), so read until two passes agree.
        let (ts, total) = loop {
            let ts = threads();
            let a: Vec<u64> = ts.iter().map(|(t, _)| held_per_100ms(*t)).collect();
            let b: Vec<u64> = ts.iter().map(|(t, _)| held_per_100ms(*t)).collect();
            if a == b {
                break (ts, a.iter().sum::<u64>());
            }
        };
        assert!(total <= budget_ns, "the threads hold {total} ns per 100 ms, above the one budget {budget_ns} ns: {ts:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let ts = threads();
    let tid_of = |name: &str| ts.iter().find(|(_, c)| c == name).map(|(t, _)| *t).unwrap();
    let spinner = held_per_100ms(tid_of("spinner"));
    let others: Vec<u64> = ts.iter().filter(|(_, c)| c != "spinner").map(|(t, _)| held_per_100ms(*t)).collect();
    eprintln!(
        "MEASURED: reclaim, 40ms/100ms, spinner at period {:?} ns holds {spinner} ns per 100 ms, the three idle threads {others:?} (an equal split: {} ns each)",
        spinner_period_ns,
        budget_ns / 4
    );
    assert!(spinner > budget_ns / 2, "the busy thread holds most of the budget after {:.1} s: {spinner} ns, others {others:?}", t0.elapsed().as_secs_f64());
    assert!(others.iter().all(|&o| o > 0 && o < spinner), "the idle ones keep a part: {others:?}");
    for (tid, comm) in &ts {
        let SchedAttr::Deadline { period_ns, deadline_ns, reclaim: true, .. } = sched::get_attr(*tid).unwrap() else {
            panic!("thread {tid}: SCHED_DEADLINE with reclaim")
        };
        let want = if comm == "spinner" { spinner_period_ns.unwrap_or(100_000_000) } else { 100_000_000 };
        assert_eq!((period_ns, deadline_ns), (want, want), "thread {tid} ({comm}) at its rule's period");
    }
    let st = status(&sd).unwrap();
    assert!(st.drift.is_empty(), "no drift: {:?}", st.drift);
}

/// A stack that ran before apply (attached by pid) gets its first split by demand as soon as the
/// agent sees its threads, from each thread's CPU time so far, not one demand interval later: with
/// the agent's interval at a minute, the spinning thread of a process that has run for a second (three in a TCG guest)
/// holds most of the 40 ms / 100 ms within two seconds of apply (apply's equal split gives it a
/// fifth: the process has the test harness's two threads too), and the threads together never more
/// than the budget.
#[test]
fn a_stack_with_a_history_is_split_by_its_use_as_soon_as_the_agent_sees_it() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    if !skip::cpus_or_skip(2) || !common::has_mechanism(Mechanism::Deadline) {
        return;
    }
    // Killed when dropped: an attached workload is not rtslice's to stop (reset leaves it running).
    let stack = rtslice_testkit::KillOnDrop(
        // On CPU 1 from its start: the kernel admits a sleeping thread (the harness's, the
        // sleepers) to SCHED_DEADLINE only where it last ran, and CPU 1 is the partition.
        std::process::Command::new("taskset")
            .args(["-c", "1"])
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", "helper_agent_role", "--nocapture"])
            .env(ROLE, "stack")
            .spawn()
            .unwrap(),
    );
    let pid = stack.0.id() as i32;
    // The history the agent splits by: a second natively. In a TCG guest the harness's own start
    // (exec, test listing) takes a large part of a second on a loaded host, and its main thread's
    // use can then rival the spinner's: three seconds of spinning there make the spinner the busy
    // thread it is.
    std::thread::sleep(Duration::from_secs_f64(rtslice_testkit::timing_bound("the stack's history before apply (s)", 1.0, 3.0)));
    let dir = tempfile::tempdir().unwrap();
    let budget_ns = 40_000_000u64;
    let setup = Setup {
        workloads: vec![WorkloadSetup {
            name: format!("history-{}", std::process::id()),
            cpus: CpuList::parse("1").unwrap(),
            reservation: Some(Reservation::from_micros(40_000, 100_000)),
            reclaim: true,
            threads: vec![ThreadRule { name: ".*".into(), policy: Some(deadline(budget_ns, 100_000_000, true)), cpus: None, period_ns: None }],
            launch: Launch::Attach { pids: vec![pid] },
            ..Default::default()
        }],
        ..Default::default()
    };
    let opts = ApplyOptions {
        mechanism: Some(Mechanism::Deadline),
        agent: Some(self_as_agent(ROLE, vec![(DEMAND_INTERVAL_MS.into(), "60000".into())])),
        ..ApplyOptions::with_state_dir(dir.path())
    };
    let applied = apply_setup(&setup, &opts).expect("apply");
    let _cleanup = reset_on_drop(dir.path());
    let group = applied.workloads[0].group.cpuset.clone();
    let t0 = Instant::now();
    // Thread by thread, the agent may re-split between two reads: the sum is the budget in force
    // only when two reads in a row agree.
    let read = || -> Vec<(String, u64)> {
        rtslice_host::rules::workload_threads(&group).into_iter().map(|(_, tid, comm)| (comm, held_per_100ms(tid))).collect()
    };
    let held = || -> Vec<(String, u64)> {
        let mut last = read();
        loop {
            let now = read();
            if now == last {
                return now;
            }
            last = now;
        }
    };
    let spinner = |h: &[(String, u64)]| h.iter().find(|(c, _)| c == "spinner").map_or(0, |(_, n)| *n);
    let mut now = held();
    while spinner(&now) <= budget_ns / 2 {
        assert!(now.iter().map(|(_, n)| n).sum::<u64>() <= budget_ns, "never more than the one budget: {now:?}");
        assert!(t0.elapsed() < Duration::from_secs(2), "after 2 s the threads hold {now:?} ns per 100 ms: the agent kept apply's equal split");
        std::thread::sleep(Duration::from_millis(20));
        now = held();
    }
    eprintln!("MEASURED: {} ms after apply returned the threads hold {now:?} ns per 100 ms", t0.elapsed().as_millis());
    assert!(now.iter().map(|(_, n)| n).sum::<u64>() <= budget_ns, "never more than the one budget: {now:?}");
    assert!(now.iter().all(|(_, n)| *n > 0), "the idle ones keep a part: {now:?}");
}
