//! Real-kernel tests of apply / status / reset (root; CI runs as root). Every test holds the
//! host-wide KernelLock: they change the root cpuset, RT budgets and IRQ affinities.

mod common;

use std::time::Duration;

use common::*;
use rtslice_host::Mechanism;
use rtslice_host::sched::{self, SchedAttr};
use rtslice_host::Fault;
use rtslice_host::{
    apply_setup, reset, status, ApplyOptions, Cfs, CpuList, HostError, IrqRule, Launch, NetRule, ResetOptions, Reservation,
    Setup, StateDir, ThreadRule, WorkloadSetup,
};
use rtslice_testkit::{root_or_skip, skip, KernelLock, OnDrop};

fn cpus(s: &str) -> CpuList {
    CpuList::parse(s).unwrap()
}

/// The reservation mechanism tests use when any will do: RT groups where they exist (the development
/// VM), else SCHED_DEADLINE in partitions (cgroup v2 kernels).
fn reserving_mechanism() -> Mechanism {
    if rtslice_host::doctor().mechanisms.contains(&Mechanism::RtGroup) {
        Mechanism::RtGroup
    } else {
        Mechanism::Deadline
    }
}

fn opts(dir: &tempfile::TempDir, mech: Mechanism) -> ApplyOptions {
    ApplyOptions { mechanism: Some(mech), ..ApplyOptions::with_state_dir(dir.path()) }
}

/// The smoke setup scaled to 2 CPUs: a reserved RT workload on CPU 1 with a FIFO thread rule, a
/// best-effort workload on CPU 0 with CFS weight and quota, an IRQ rule and an RPS rule.
fn smoke_setup(mech: Mechanism) -> Setup {
    let mut s = Setup {
        name: "kernel-test".into(),
        housekeeping: cpus("0"),
        workloads: vec![
            WorkloadSetup {
                name: format!("rt-{}", std::process::id()),
                cpus: cpus("1"),
                reservation: Some(Reservation::from_micros(300_000, 1_000_000)),
                threads: vec![ThreadRule { name: "^sleep$".into(), policy: Some(SchedAttr::Fifo { priority: 10 }), cpus: None, period_ns: None }],
                launch: Launch::Command { argv: vec!["sleep".into(), "60".into()], env: vec![], cwd: None },
                ..Default::default()
            },
            WorkloadSetup {
                name: format!("be-{}", std::process::id()),
                cpus: cpus("0"),
                cfs: Some(Cfs { quota_us: Some(50_000), period_us: Some(100_000), weight: Some(50), idle: false }),
                memory: Some(64 << 20),
                launch: Launch::Command { argv: vec!["sleep".into(), "60".into()], env: vec![], cwd: None },
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    if let Some(irq) = movable_irq() {
        s.irqs.push(IrqRule { action: format!("^{}$", regex_escape(&irq.actions[0])), cpus: cpus("0") });
    }
    if let Some(iface) = rps_interface() {
        s.nets.push(NetRule { iface: format!("^{iface}$"), rps: Some(cpus("1")), xps: None });
    }
    planned(s, Some(mech))
}

/// The online CPUs without `cpus`.
fn online_except(cpus: &CpuList) -> CpuList {
    CpuList::from_cpus(rtslice_host::facts::online_cpus().iter().filter(|c| !cpus.contains(*c)))
}

#[test]
fn rt_group_apply_sets_every_file_and_reset_restores_them() {
    root_or_skip!();
    if !skip::cpus_or_skip(2) || !has_mechanism(Mechanism::RtGroup) {
        return;
    }
    let _lock = KernelLock::acquire();
    let before = snapshot();
    let dir = tempfile::tempdir().unwrap();
    let setup = smoke_setup(Mechanism::RtGroup);
    let applied = apply_setup(&setup, &opts(&dir, Mechanism::RtGroup)).expect("apply");
    let _cleanup = reset_on_drop(dir.path());
    assert_eq!(applied.mechanism, Mechanism::RtGroup);
    let rt = &setup.workloads[0].name;
    let be = &setup.workloads[1].name;

    // cgroup files: the parent holds the node's cap, the group its reservation.
    assert_eq!(read("/sys/fs/cgroup/cpu/rtslice/cpu.rt_runtime_us"), node_cap_us().to_string());
    assert_eq!(read(format!("/sys/fs/cgroup/cpu/rtslice/{rt}/cpu.rt_runtime_us")), "300000");
    assert_eq!(read(format!("/sys/fs/cgroup/cpu/rtslice/{rt}/cpu.rt_period_us")), "1000000");
    assert_eq!(read(format!("/sys/fs/cgroup/cpuset/rtslice/{rt}/cpuset.cpus")), "1");
    assert_eq!(read(format!("/sys/fs/cgroup/cpuset/rtslice/{be}/cpuset.cpus")), "0");
    assert_eq!(read(format!("/sys/fs/cgroup/cpu/rtslice/{be}/cpu.shares")), "512");
    assert_eq!(read(format!("/sys/fs/cgroup/cpu/rtslice/{be}/cpu.cfs_quota_us")), "50000");
    assert_eq!(read(format!("/sys/fs/cgroup/memory/rtslice/{be}/memory.limit_in_bytes")), (64u64 << 20).to_string());
    let be_pid = applied.workloads[1].pids[0].pid;
    assert!(read(format!("/proc/{be_pid}/cgroup")).contains(&format!("memory:/rtslice/{be}")));
    // Thread rule on the launched process, inside its cgroups.
    let pid = applied.workloads[0].pids[0].pid;
    assert_eq!(sched::get_attr(pid).unwrap(), SchedAttr::Fifo { priority: 10 });
    assert_eq!(sched::get_affinity(pid).unwrap(), cpus("1"));
    assert!(read(format!("/proc/{pid}/cgroup")).contains(&format!("cpu:/rtslice/{rt}")));
    // IRQ and RPS.
    for rule in &setup.irqs {
        let re = regex::Regex::new(&rule.action).unwrap();
        for irq in rtslice_host::irq::matching(&rtslice_host::irq::read_interrupts().unwrap(), &re) {
            assert_eq!(read(irq.affinity_file()), "0");
        }
    }
    for rule in &setup.nets {
        let iface = rule.iface.trim_matches(|c| c == '^' || c == '$');
        for f in rtslice_host::irq::steering_files(std::path::Path::new("/sys/class/net"), iface).0 {
            assert_eq!(CpuList::parse_mask(&read(&f)).unwrap(), cpus("1"));
        }
    }
    // status: no drift, pids and mechanism.
    let st = status(&StateDir::new(dir.path())).unwrap();
    assert!(st.drift.is_empty(), "{:?}", st.drift);
    assert_eq!(st.mechanism, Some(Mechanism::RtGroup));
    assert_eq!(st.workloads[0].pids, vec![pid]);
    // Drift is seen: change a value behind rtslice's back.
    sched::set_attr(pid, SchedAttr::Other { nice: 0 }).unwrap();
    let st = status(&StateDir::new(dir.path())).unwrap();
    assert_eq!(st.drift.len(), 1, "{:?}", st.drift);
    assert!(st.drift[0].actual.contains("SCHED_OTHER"));

    let report = reset(&StateDir::new(dir.path()), ResetOptions::default()).unwrap();
    assert_eq!(report.stopped, 2);
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists() || read(format!("/proc/{pid}/stat")).contains(") Z"));
    assert_restored(&before);
    assert!(!dir.path().join("node").exists());
}

#[test]
fn deadline_thread_pinned_through_a_partition_runs_and_is_admitted() {
    root_or_skip!();
    if !skip::cpus_or_skip(2) {
        return;
    }
    let _lock = KernelLock::acquire();
    let before = snapshot();
    let dir = tempfile::tempdir().unwrap();
    let name = format!("dl-{}", std::process::id());
    // A spinner whose budget is 20 ms every 100 ms on CPU 1: under SCHED_DEADLINE it may use 20%.
    let setup = Setup {
        workloads: vec![WorkloadSetup {
            name: name.clone(),
            cpus: cpus("1"),
            reservation: Some(Reservation::from_micros(20_000, 100_000)),
            threads: vec![ThreadRule { name: "^sh$".into(), policy: Some(SchedAttr::Fifo { priority: 10 }), cpus: None, period_ns: None }],
            launch: Launch::Command {
                argv: vec!["sh".into(), "-c".into(), "while :; do :; done".into()],
                env: vec![],
                cwd: None,
            },
            ..Default::default()
        }],
        ..Default::default()
    };
    let applied = apply_setup(&planned(setup, Some(Mechanism::Deadline)), &opts(&dir, Mechanism::Deadline)).expect("apply");
    let _cleanup = reset_on_drop(dir.path());
    let pid = applied.workloads[0].pids[0].pid;
    assert_partition(&name);
    if !is_v2() {
        assert_eq!(read("/sys/fs/cgroup/cpuset/rtslice/system/cpuset.cpus"), "0");
    } else {
        // v2: the partition took CPU 1 from the root, which keeps the rest.
        assert_eq!(read("/sys/fs/cgroup/cpuset.cpus.effective"), online_except(&cpus("1")).to_string());
    }
    assert_eq!(
        sched::get_attr(pid).unwrap(),
        SchedAttr::Deadline { runtime_ns: 20_000_000, deadline_ns: 100_000_000, period_ns: 100_000_000, reclaim: false }
    );
    assert_eq!(sched::get_affinity(pid).unwrap(), cpus("1"));
    let share = measure_share(pid, Duration::from_millis(1500));
    eprintln!("MEASURED: SCHED_DEADLINE 20ms/100ms spinner on a 1-CPU partition used {:.1}% of CPU 1", share * 100.0);
    assert!(share > 0.05, "the deadline thread runs ({share})");
    // Under TCG the guest's clock and the vCPU's progress are decoupled; throttling still holds.
    assert!(share < rtslice_testkit::timing_bound("deadline share", 0.40, 0.60), "and is throttled near its 20% budget ({share})");
    let st = status(&StateDir::new(dir.path())).unwrap();
    assert!(st.drift.is_empty(), "{:?}", st.drift);
    reset(&StateDir::new(dir.path()), ResetOptions::default()).unwrap();
    assert_restored(&before);
}

/// Two reservations of 60 % on CPU 1: the planner refuses the second and apply touches nothing; a
/// setup built past the planner asking too much is refused by the kernel's own admission (RT groups:
/// two groups' budgets above their parent's; SCHED_DEADLINE: a thread above its partition's cap)
/// and rolled back exactly.
#[test]
fn over_budget_requests_are_refused_and_nothing_is_left() {
    root_or_skip!();
    if !skip::cpus_or_skip(2) {
        return;
    }
    let _lock = KernelLock::acquire();
    let before = snapshot();
    let dir = tempfile::tempdir().unwrap();
    let id = std::process::id();
    let text = format!(
        "apiVersion: rtslice/v1\nworkloads:\n  - name: a-{id}\n    demand: {{ reservation: {{ runtime: 600ms, period: 1s, cpus: 1 }} }}\n  \
         - name: b-{id}\n    demand: {{ reservation: {{ runtime: 600ms, period: 1s, cpus: 1 }} }}\n"
    );
    let spec = rtslice_spec::parse(&text, "over.yaml").unwrap();
    let host = rtslice_host::HostFacts::detect().unwrap();
    let facts = rtslice_host::facts::planning_facts().unwrap();
    let sleeper = || Launch::Command { argv: vec!["sleep".into(), "60".into()], env: vec![], cwd: None };
    for mech in [Mechanism::RtGroup, Mechanism::Deadline] {
        if !has_mechanism(mech) {
            continue;
        }
        let plan = rtslice_plan::plan_for_kernel(&spec, &facts, &host.kernel_facts(), Some(mech));
        assert_eq!(plan.rejected.iter().map(|r| r.name.clone()).collect::<Vec<_>>(), vec![format!("b-{id}")], "{mech}");
        let err = rtslice_host::apply(&plan, rtslice_host::OciDefaults::default(), &opts(&dir, mech)).unwrap_err();
        assert!(matches!(err, HostError::Rejected(_)) && err.to_string().contains("the plan rejected"), "{err}");
        assert!(!dir.path().join("node").exists(), "no state written");
        assert_restored(&before);

        // Past the planner: RT groups, two groups of 60 % under one parent (the node's own
        // admission refuses the second against its cap); SCHED_DEADLINE, a thread asking 96 % of
        // its one-CPU partition (the kernel refuses it).
        let w = |n: &str, threads: Vec<ThreadRule>| WorkloadSetup {
            name: format!("{n}-{id}"),
            cpus: cpus("1"),
            reservation: Some(Reservation::from_micros(600_000, 1_000_000)),
            threads,
            launch: sleeper(),
            ..Default::default()
        };
        let setup = match mech {
            Mechanism::RtGroup => planned(Setup { workloads: vec![w("a", vec![]), w("b", vec![])], ..Default::default() }, Some(mech)),
            _ => {
                let most = SchedAttr::Deadline { runtime_ns: 960_000_000, deadline_ns: 1_000_000_000, period_ns: 1_000_000_000, reclaim: false };
                let rule = ThreadRule { name: "^sleep$".into(), policy: Some(most), cpus: None, period_ns: None };
                Setup { workloads: vec![w("a", vec![rule])], ..Default::default() }
            }
        };
        let err = apply_setup(&setup, &opts(&dir, mech)).unwrap_err();
        eprintln!("{mech}, past the planner: {err}");
        match (&err, mech) {
            (HostError::StepFailed { rollback_errors, .. }, Mechanism::Deadline) => assert!(rollback_errors.is_empty(), "{err}"),
            // RT groups: the node admits each workload against its cap before the kernel would.
            (HostError::Rejected(why), Mechanism::RtGroup) => assert!(why.contains("would sum to 120.0%"), "{why}"),
            (other, _) => panic!("{mech}: expected a refusal, got {other}"),
        }
        assert!(!dir.path().join("node").exists(), "{mech}: the journal of a rolled-back apply is gone");
        assert_no_children_left(&format!("{mech}: the refused apply"));
        assert_restored(&before);
    }
}

#[test]
fn a_failure_at_any_step_rolls_back_exactly() {
    root_or_skip!();
    if !skip::cpus_or_skip(2) {
        return;
    }
    let _lock = KernelLock::acquire();
    let before = snapshot();
    let dir = tempfile::tempdir().unwrap();
    let mut setup = smoke_setup(reserving_mechanism());
    setup.workloads[0].shield = true; // also exercises partitions, the system cpuset and moving tasks
    let o = opts(&dir, reserving_mechanism());
    let applied = apply_setup(&setup, &o).expect("apply");
    let _cleanup = reset_on_drop(dir.path());
    let n = applied.changes;
    reset(&StateDir::new(dir.path()), ResetOptions::default()).unwrap();
    assert_restored(&before);
    assert!(n > 10, "{n} changes");
    // Fail at every change in turn, until an apply makes them all with the fault index past the last
    // one: then every step has had its fault injected and rolled back.
    for k in 0.. {
        let o = ApplyOptions { fault: Fault { fail_change: Some(k) }, ..o.clone() };
        let err = match apply_setup(&setup, &o) {
            Ok(applied) => {
                // The same setup on the same host journals the same changes (also with kernel
                // workers coming and going: root-cgroup affinities are one change).
                assert_eq!((k, applied.changes), (n, n), "no fault left to inject at change {k}, but the first apply made {n} changes");
                reset(&StateDir::new(dir.path()), ResetOptions::default()).unwrap();
                assert_restored(&before);
                break;
            }
            Err(e) => e,
        };
        match &err {
            HostError::StepFailed { rollback_errors, .. } => assert!(rollback_errors.is_empty(), "change {k}: {rollback_errors:?}"),
            // The node's base failing to set up partitions leaves it without them, and it refuses the
            // workload that needs one, with the reason.
            HostError::Rejected(why) if why.contains("exclusive partitions are unavailable") => {}
            other => panic!("change {k}: expected StepFailed, got {other}"),
        }
        assert!(err.to_string().contains("injected fault at change #"), "change {k}: {err}");
        assert!(!dir.path().join("node").exists(), "change {k}: state removed after a clean rollback");
        assert_restored(&before);
    }
}

#[test]
fn a_real_kernel_refusal_mid_apply_rolls_back() {
    root_or_skip!();
    if !skip::cpus_or_skip(2) {
        return;
    }
    let _lock = KernelLock::acquire();
    let before = snapshot();
    let dir = tempfile::tempdir().unwrap();
    // SCHED_DEADLINE with runtime = period on a pinned thread: the kernel's admission (95% per CPU)
    // refuses it with EBUSY only once the cgroups exist and the workload runs.
    let name = format!("ref-{}", std::process::id());
    let setup = Setup {
        workloads: vec![WorkloadSetup {
            name,
            cpus: cpus("1"),
            partition: true,
            threads: vec![ThreadRule {
                name: "^sleep$".into(),
                policy: Some(SchedAttr::Deadline { runtime_ns: 99_000_000, deadline_ns: 100_000_000, period_ns: 100_000_000, reclaim: false }),
                cpus: None,
                period_ns: None,
            }],
            launch: Launch::Command { argv: vec!["sleep".into(), "60".into()], env: vec![], cwd: None },
            ..Default::default()
        }],
        ..Default::default()
    };
    let err = apply_setup(&setup, &opts(&dir, Mechanism::None)).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("thread rules of"), "the error names the step: {text}");
    assert!(text.contains("sched_setattr"), "{text}");
    assert_restored(&before);
}

#[test]
fn corrupt_or_foreign_state_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sd = StateDir::new(dir.path());
    std::fs::write(sd.file(), "{ not json").unwrap();
    let e = reset(&sd, ResetOptions::default()).unwrap_err().to_string();
    assert!(e.contains("corrupt"), "{e}");
    assert!(status(&sd).is_err());
    std::fs::write(sd.file(), r#"{"format":"kubelet-cpu-manager","version":1}"#).unwrap();
    assert!(reset(&sd, ResetOptions::default()).unwrap_err().to_string().contains("not an rtslice state file"));
    // Another apply refuses to overwrite it too.
    let e = apply_setup(&Setup::default(), &ApplyOptions::with_state_dir(dir.path())).unwrap_err().to_string();
    assert!(e.contains("not an rtslice state file"), "{e}");
}

/// Helper role for the crash test: apply, then die without cleaning up (like a SIGKILLed apply).
#[test]
fn helper_crash_after_apply_role() {
    let Ok(dir) = std::env::var("RTSLICE_HOST_TEST_CRASH_DIR") else { return };
    let o = opts_at(&dir, reserving_mechanism());
    apply_setup(&smoke_setup(reserving_mechanism()), &o).expect("apply");
    // SAFETY: immediate exit without unwinding or destructors — the point of the test.
    unsafe { libc::_exit(9) };
}

fn opts_at(dir: &str, mech: Mechanism) -> ApplyOptions {
    ApplyOptions { mechanism: Some(mech), ..ApplyOptions::with_state_dir(dir) }
}

#[test]
fn reset_after_a_crashed_apply_restores_the_host() {
    root_or_skip!();
    if !skip::cpus_or_skip(2) {
        return;
    }
    let _lock = KernelLock::acquire();
    let before = snapshot();
    let dir = tempfile::tempdir().unwrap();
    let status_code = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "helper_crash_after_apply_role", "--nocapture"])
        .env("RTSLICE_HOST_TEST_CRASH_DIR", dir.path())
        .status()
        .unwrap();
    assert_eq!(status_code.code(), Some(9), "the helper applied and crashed");
    assert!(group("x").cpu.parent().unwrap().exists(), "the crashed apply left its changes");
    let st = status(&StateDir::new(dir.path())).unwrap();
    assert!(st.applied && st.drift.is_empty(), "{:?}", st.drift);
    let r = reset(&StateDir::new(dir.path()), ResetOptions::default()).unwrap();
    assert_eq!(r.stopped, 2, "the launched workloads of the dead apply are stopped");
    assert_restored(&before);
}

#[test]
fn attach_moves_an_existing_process_and_reset_gives_it_back_alive() {
    root_or_skip!();
    if !skip::cpus_or_skip(2) {
        return;
    }
    let _lock = KernelLock::acquire();
    let mut child = std::process::Command::new("sleep").arg("60").spawn().unwrap();
    let pid = child.id() as i32;
    let cg_before = read(format!("/proc/{pid}/cgroup"));
    let before = snapshot();
    let dir = tempfile::tempdir().unwrap();
    let name = format!("attach-{}", std::process::id());
    let setup = Setup {
        workloads: vec![WorkloadSetup {
            name: name.clone(),
            cpus: cpus("1"),
            threads: vec![ThreadRule { name: "^sleep$".into(), policy: Some(SchedAttr::Batch { nice: 5 }), cpus: None, period_ns: None }],
            launch: Launch::Attach { pids: vec![pid] },
            ..Default::default()
        }],
        ..Default::default()
    };
    apply_setup(&setup, &opts(&dir, Mechanism::None)).unwrap();
    let _cleanup = reset_on_drop(dir.path());
    assert_eq!(cgroup_of(pid), format!("/{}/{name}", parent_name()));
    assert_eq!(sched::get_attr(pid).unwrap(), SchedAttr::Batch { nice: 5 });
    assert_eq!(sched::get_affinity(pid).unwrap(), cpus("1"));
    let r = reset(&StateDir::new(dir.path()), ResetOptions::default()).unwrap();
    assert_eq!(r.stopped, 0);
    assert!(child.try_wait().unwrap().is_none(), "an attached process is not killed");
    assert_eq!(read(format!("/proc/{pid}/cgroup")), cg_before);
    assert_eq!(sched::get_attr(pid).unwrap(), SchedAttr::Other { nice: 0 });
    assert_restored(&before);
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn fair_server_request_is_applied_or_reported_and_leaves_no_mount() {
    root_or_skip!();
    if !skip::cpus_or_skip(2) {
        return;
    }
    let _lock = KernelLock::acquire();
    let mounts_before = read("/proc/mounts").lines().filter(|l| l.contains(" debugfs ")).count();
    let before = snapshot();
    let dir = tempfile::tempdir().unwrap();
    let mut setup = smoke_setup(Mechanism::Deadline);
    setup.workloads.truncate(1);
    setup.workloads[0].partition = true;
    let o = ApplyOptions { fair_server_off: true, hrtick: true, ..opts(&dir, Mechanism::Deadline) };
    let applied = apply_setup(&setup, &o).unwrap();
    let _cleanup = reset_on_drop(dir.path());
    let fs = "/sys/kernel/debug/sched/fair_server/cpu1/runtime";
    match std::fs::read_to_string(fs) {
        Ok(v) => assert_eq!(v.trim(), "0", "fair_server runtime 0 on the reserved CPU"),
        Err(_) => assert!(
            applied.warnings.iter().any(|w| w.contains("fair_server")),
            "when debugfs is unusable (lockdown) the request is reported: {:?}",
            applied.warnings
        ),
    }
    // HRTICK and HRTICK_DL on (writable debugfs: the matrix's guests), else reported.
    match std::fs::read_to_string(rtslice_host::SCHED_FEATURES) {
        Ok(list) => {
            let flags: Vec<&str> = list.split_whitespace().collect();
            assert!(flags.contains(&"HRTICK"), "{list}");
            assert!(flags.contains(&"HRTICK_DL") || !list.contains("HRTICK_DL"), "{list}");
        }
        Err(_) => assert!(applied.warnings.iter().any(|w| w.contains("hrtick")), "{:?}", applied.warnings),
    }
    let st = status(&StateDir::new(dir.path())).unwrap();
    assert!(st.drift.is_empty(), "{:?}", st.drift);
    reset(&StateDir::new(dir.path()), ResetOptions::default()).unwrap();
    assert_restored(&before);
    assert_eq!(read("/proc/mounts").lines().filter(|l| l.contains(" debugfs ")).count(), mounts_before);
}

/// The same smoke setup with the mechanism the host offers by default for disjoint reservations
/// (SCHED_DEADLINE in a partition), checking each file as the driven backend spells it — on cgroup
/// v2 (the matrix's guests) `cpu.max`, `cpu.weight`, `memory.max`, `cpuset.cpus.partition`.
#[test]
fn deadline_cfs_and_memory_knobs_of_the_driven_backend_are_set_and_reset_restores_them() {
    root_or_skip!();
    if !skip::cpus_or_skip(2) || !has_mechanism(Mechanism::Deadline) {
        return;
    }
    let _lock = KernelLock::acquire();
    let before = snapshot();
    let dir = tempfile::tempdir().unwrap();
    let setup = smoke_setup(Mechanism::Deadline);
    let applied = apply_setup(&setup, &opts(&dir, Mechanism::Deadline)).expect("apply");
    let _cleanup = reset_on_drop(dir.path());
    let (rt, be) = (&setup.workloads[0].name, &setup.workloads[1].name);
    let (rt_pid, be_pid) = (applied.workloads[0].pids[0].pid, applied.workloads[1].pids[0].pid);
    assert_partition(rt);
    assert_eq!(read(group(rt).cpuset.join("cpuset.cpus")), "1");
    assert_eq!(read(group(be).cpuset.join("cpuset.cpus")), "0");
    // The FIFO rule became SCHED_DEADLINE with the workload's whole budget (300 ms per second).
    assert_eq!(
        sched::get_attr(rt_pid).unwrap(),
        SchedAttr::Deadline { runtime_ns: 300_000_000, deadline_ns: 1_000_000_000, period_ns: 1_000_000_000, reclaim: false }
    );
    assert_eq!(sched::get_affinity(rt_pid).unwrap(), cpus("1"));
    assert_eq!(cgroup_of(rt_pid), group_path(rt));
    assert_eq!(cgroup_of(be_pid), group_path(be));
    let cpu = group(be).cpu;
    if is_v2() {
        assert_eq!(read(cpu.join("cpu.weight")), "50");
        assert_eq!(read(cpu.join("cpu.max")), "50000 100000");
    } else {
        assert_eq!(read(cpu.join("cpu.shares")), "512");
        assert_eq!(read(cpu.join("cpu.cfs_quota_us")), "50000");
    }
    assert_eq!(read(memory_limit_file(be)), (64u64 << 20).to_string());
    let st = status(&StateDir::new(dir.path())).unwrap();
    assert!(st.drift.is_empty(), "{:?}", st.drift);
    assert_eq!(st.mechanism, Some(Mechanism::Deadline));
    let report = reset(&StateDir::new(dir.path()), ResetOptions::default()).unwrap();
    assert_eq!(report.stopped, 2);
    assert_restored(&before);
}

/// A best-effort workload marked idle gets `cpu.idle` 1 (SCHED_IDLE for the whole group).
#[test]
fn idle_best_effort_group_sets_cpu_idle_and_reset_removes_it() {
    root_or_skip!();
    if !skip::cpus_or_skip(2) {
        return;
    }
    let _lock = KernelLock::acquire();
    if !backend().root().cpu.join("cpu.idle").exists() && !is_v2() {
        skip::skip(skip::CPU_IDLE, "this kernel has no cpu.idle (before 5.15)");
        return;
    }
    let before = snapshot();
    let dir = tempfile::tempdir().unwrap();
    let name = format!("idle-{}", std::process::id());
    let setup = Setup {
        workloads: vec![WorkloadSetup {
            name: name.clone(),
            cpus: cpus("0"),
            cfs: Some(Cfs { quota_us: None, period_us: None, weight: None, idle: true }),
            launch: Launch::Command { argv: vec!["sleep".into(), "60".into()], env: vec![], cwd: None },
            ..Default::default()
        }],
        ..Default::default()
    };
    let applied = apply_setup(&setup, &opts(&dir, Mechanism::None)).expect("apply");
    let _cleanup = reset_on_drop(dir.path());
    assert_eq!(read(group(&name).cpu.join("cpu.idle")), "1");
    assert_eq!(cgroup_of(applied.workloads[0].pids[0].pid), format!("/{}/{name}", parent_name()));
    assert!(status(&StateDir::new(dir.path())).unwrap().drift.is_empty());
    reset(&StateDir::new(dir.path()), ResetOptions::default()).unwrap();
    assert_restored(&before);
}

/// cgroup v2: another cgroup holds CPU 1 and rtslice is asked for a partition on it.
/// (a) The other cgroup is a valid partition: apply refuses before touching anything (the kernel
///     would accept the writes and leave both partitions invalid — on 6.12 the other one stays
///     "root invalid" even after a rollback), naming the other partition.
/// (b) The other cgroup only reserves a CPU of ours (`cpuset.cpus.exclusive`, 6.7+): 6.12 takes the
///     write of "root" and reads back "root invalid (...)", 7.2 a valid partition without that CPU;
///     apply refuses before touching anything, naming the reservation.
#[test]
fn a_partition_another_cgroup_holds_or_reserves_is_refused_before_anything_is_touched() {
    root_or_skip!();
    if !skip::cpus_or_skip(2) {
        return;
    }
    if !is_v2() {
        skip::skip(skip::CGROUP_V2, "cgroup v1 has no partition states (make test-kernels runs this on v2)");
        return;
    }
    let _lock = KernelLock::acquire();
    let root = backend().root().cpuset;
    let enabled = read(root.join("cgroup.subtree_control"));
    let had_cpuset = enabled.split_whitespace().any(|c| c == "cpuset");
    if !had_cpuset {
        std::fs::write(root.join("cgroup.subtree_control"), "+cpuset").unwrap();
    }
    // Undoes another cgroup the test made (its partition, its exclusive CPUs, the directory) and
    // the root's cpuset controller when the test enabled it.
    let cleanup = |other: std::path::PathBuf| {
        let (root, enabled_here) = (root.clone(), !had_cpuset);
        OnDrop::new(move || {
            let _ = std::fs::write(other.join("cpuset.cpus.partition"), "member");
            let _ = std::fs::write(other.join("cpuset.cpus.exclusive"), "");
            let _ = std::fs::remove_dir(&other);
            if enabled_here {
                let _ = std::fs::write(root.join("cgroup.subtree_control"), "-cpuset");
            }
        })
    };
    let name = format!("part-{}", std::process::id());
    let setup = Setup {
        workloads: vec![WorkloadSetup {
            name: name.clone(),
            cpus: cpus("1"),
            partition: true,
            launch: Launch::Command { argv: vec!["sleep".into(), "60".into()], env: vec![], cwd: None },
            ..Default::default()
        }],
        ..Default::default()
    };
    let try_apply = |dir: &tempfile::TempDir| match apply_setup(&setup, &opts(dir, Mechanism::None)) {
        Err(e) => e,
        Ok(applied) => {
            let state = read(group(&name).cpuset.join("cpuset.cpus.partition"));
            let _ = reset(&StateDir::new(dir.path()), ResetOptions::default());
            panic!("apply accepted a partition the kernel reads back as {state:?}: {applied:?}");
        }
    };

    // (a) A valid partition of someone else on CPU 1.
    let intruder = root.join(format!("intruder-{}", std::process::id()));
    std::fs::create_dir(&intruder).unwrap();
    let guard = cleanup(intruder.clone());
    std::fs::write(intruder.join("cpuset.cpus"), "1").unwrap();
    std::fs::write(intruder.join("cpuset.cpus.partition"), "root").unwrap();
    assert_eq!(read(intruder.join("cpuset.cpus.partition")), "root", "the intruder holds CPU 1");
    let before = snapshot();
    let dir = tempfile::tempdir().unwrap();
    let err = try_apply(&dir);
    let text = err.to_string();
    eprintln!("(a) apply said: {text}");
    assert!(matches!(err, HostError::Rejected(_)), "{text}");
    assert!(text.contains(&intruder.display().to_string()) && text.contains("CPUs [1]"), "names the other partition: {text}");
    assert!(!dir.path().join("node").exists());
    assert_restored(&before);
    assert_eq!(read(intruder.join("cpuset.cpus.partition")), "root", "the other partition is untouched");
    drop(guard);

    // (b) A CPU only reserved by a sibling (cpuset.cpus.exclusive): 6.12 makes a partition of ours
    //     holding it invalid, 7.2 (hcbs-4cpu) makes it valid without that CPU — the workload would
    //     not get the CPUs it was given either way, so apply refuses it before touching anything.
    //     The workload asks for CPUs 1-2 and the sibling reserves CPU 2 alone: had it reserved all of
    //     the workload's CPUs, rtslice's parent (holding exactly them) would be a cpuset whose CPUs
    //     lie wholly inside a sibling's exclusive ones, and 6.12 refuses every write to such a
    //     group with EINVAL (its cpuset.mems first) before any partition is asked for.
    // (a) has run: what follows is a partial skip.
    if rtslice_host::facts::online_cpus().len() < 3 {
        skip::skip(skip::CPUS_3, "(b) needs 3 CPUs (the workload on 1-2, a sibling reserving 2; make test-kernels runs it on 4 and 8)");
        return;
    }
    if !had_cpuset {
        std::fs::write(root.join("cgroup.subtree_control"), "+cpuset").unwrap(); // (a)'s cleanup took it away
    }
    let reserver = root.join(format!("reserver-{}", std::process::id()));
    std::fs::create_dir(&reserver).unwrap();
    let _guard = cleanup(reserver.clone());
    if !reserver.join("cpuset.cpus.exclusive").exists() {
        skip::skip(skip::CPUS_EXCLUSIVE, "(b) this kernel has no cpuset.cpus.exclusive (before 6.7)");
        return;
    }
    std::fs::write(reserver.join("cpuset.cpus"), "2").unwrap();
    std::fs::write(reserver.join("cpuset.cpus.exclusive"), "2").unwrap();
    let mut setup = setup.clone();
    setup.workloads[0].cpus = cpus("1-2");
    let before = snapshot();
    let dir = tempfile::tempdir().unwrap();
    let err = match apply_setup(&setup, &opts(&dir, Mechanism::None)) {
        Err(e) => e,
        Ok(applied) => {
            let state = read(group(&name).cpuset.join("cpuset.cpus.partition"));
            let _ = reset(&StateDir::new(dir.path()), ResetOptions::default());
            panic!("apply accepted a partition the kernel reads back as {state:?}: {applied:?}");
        }
    };
    let text = err.to_string();
    eprintln!("(b) apply said: {text}");
    assert!(matches!(err, HostError::Rejected(_)), "{text}");
    assert!(text.contains(&reserver.display().to_string()) && text.contains("CPUs [2]") && text.contains("cpuset.cpus.exclusive"), "names the sibling's reservation: {text}");
    assert!(!dir.path().join("node").exists(), "no state written");
    assert_restored(&before);
    assert_eq!(read(reserver.join("cpuset.cpus.exclusive")), "2", "the sibling is untouched");
}

/// A sleeping SCHED_DEADLINE thread switched to another class keeps its bandwidth in the kernel's
/// admission total until the root domain is rebuilt — also after it exits (the kernel frees it from
/// an inactive timer that is not armed then; measured on 6.1, 6.12-rt and 6.18). Every policy
/// restore rtslice makes goes through `sched::set_attr`, which shrinks the bandwidth first: here a
/// 90 % budget is taken and handed back that way more times than the root domain could hold if
/// any of it stayed behind.
#[test]
fn leaving_sched_deadline_while_asleep_gives_the_bandwidth_back() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    if !has_mechanism(Mechanism::Deadline) {
        return;
    }
    let n = rtslice_host::facts::online_cpus().len();
    // The default root domain (no partition exists while the lock is held) holds at most 95 % of each
    // CPU: with a leak the (n+1)-th round at the latest is refused.
    let rounds = n + 2;
    let dl = SchedAttr::Deadline { runtime_ns: 900_000_000, deadline_ns: 1_000_000_000, period_ns: 1_000_000_000, reclaim: false };
    for round in 1..=rounds {
        let mut child = std::process::Command::new("sleep").arg("1000").spawn().unwrap();
        let pid = child.id() as i32;
        // Asleep for certain: its state is S before the policy changes.
        assert!(wait_until(Duration::from_secs(5), || read(format!("/proc/{pid}/stat")).split(' ').nth(2) == Some("S")));
        let r = sched::set_attr(pid, dl);
        if let Err(e) = &r {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "round {round} of {rounds}: a 90 % SCHED_DEADLINE budget was refused ({e}) after {} earlier one(s) were handed \
                 back: {}",
                round - 1,
                if round == 1 {
                    "the root domain already held bandwidth before this test (another program's deadline threads, or a leak from before; a cpuset partition change rebuilds the accounting)"
                } else {
                    "their bandwidth stayed in the kernel's admission total"
                }
            );
        }
        sched::set_attr(pid, SchedAttr::Other { nice: 0 }).expect("back to SCHED_OTHER");
        assert_eq!(sched::get_attr(pid).unwrap(), SchedAttr::Other { nice: 0 });
        child.kill().unwrap();
        child.wait().unwrap();
    }
    eprintln!("{rounds} rounds of a 90 % deadline budget on a sleeping process handed back, {n} CPU(s): nothing stayed behind");
}
