//! Real-kernel tests of the node (one journal segment per workload): deploy, resize and remove one
//! workload at a time while the others keep their PIDs, cgroup files and thread attributes; fault
//! injection at every step; kill -9 at random points and recovery. Root; every test holds the
//! host-wide KernelLock.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use rtslice_host::sched::SchedAttr;
use rtslice_host::{
    apply_setup, ApplyOptions, CpuList, Fault, HostError, Launch, Mechanism, Node, NodeOptions, Reservation, Setup,
    ThreadRule, WorkloadSetup,
};
use rtslice_testkit::{root_or_skip, KernelLock};

fn cpus(s: &str) -> CpuList {
    CpuList::parse(s).unwrap()
}

/// The node tests need two CPUs, cgroup v1 (exclusive partitions in a node are v1-only so far) and
/// RT groups (several reservations sharing a CPU).
fn usable() -> bool {
    if rtslice_host::doctor::online_cpus().len() < 2 {
        eprintln!("SKIPPED: needs 2 CPUs");
        return false;
    }
    if !backend().is_v1() || !rtslice_host::doctor().mechanisms.contains(&Mechanism::RtGroup) {
        eprintln!("SKIPPED: the node's partitions and RT groups need cgroup v1 with RT_GROUP_SCHED");
        return false;
    }
    true
}

/// This test run's id: the test process's pid, handed down to the crash test's helpers.
fn run_id() -> u32 {
    std::env::var("RTSLICE_NODE_TEST_RUN").ok().and_then(|v| v.parse().ok()).unwrap_or_else(std::process::id)
}

/// A marker in the workloads' command lines, so the test finds every process it launched.
fn marker() -> String {
    format!("{}", 500_000 + run_id())
}

fn sleeper() -> Launch {
    Launch::Command { argv: vec!["sleep".into(), marker()], env: vec![], cwd: None }
}

fn fifo_rule() -> Vec<ThreadRule> {
    vec![ThreadRule { name: "^sleep$".into(), policy: Some(SchedAttr::Fifo { priority: 10 }), cpus: None, budget_share: None }]
}

fn name(n: &str) -> String {
    format!("nt{}-{n}", run_id())
}

/// A workload reserving `runtime_ms` every second on `on`, its sleep thread FIFO.
fn reserved(n: &str, on: &str, runtime_ms: u64) -> Setup {
    Setup {
        name: "node-test".into(),
        workloads: vec![WorkloadSetup {
            name: name(n),
            cpus: cpus(on),
            reservation: Some(Reservation::from_micros(runtime_ms * 1000, 1_000_000)),
            threads: fifo_rule(),
            launch: sleeper(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A workload with CPU `on` to itself (an exclusive partition) when the node can make partitions;
/// else (another tool's cpuset overlaps the root's CPUs, see `NodeBase::warnings`) the same
/// workload sharing the CPU, without a reservation.
fn dedicated(node: &Node, n: &str, on: &str) -> Setup {
    if !node.base().partitions {
        eprintln!("NOTE: partitions unavailable ({:?}): {n} shares CPU {on}", node.base().warnings);
    }
    Setup {
        name: "node-test".into(),
        workloads: vec![WorkloadSetup {
            name: name(n),
            cpus: cpus(on),
            partition: node.base().partitions,
            threads: fifo_rule(),
            launch: sleeper(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn opts(dir: &Path) -> NodeOptions {
    NodeOptions { grace: Duration::from_secs(2), ..NodeOptions::with_state_dir(dir) }
}

/// What every node test starts from, in drop order: the node reset even when the test panics (the
/// test's own `Node` is dropped first), its state directory removed, then the kernel lock released.
struct Fixture {
    _cleanup: ResetNodeOnDrop,
    dir: tempfile::TempDir,
    before: BTreeMap<String, String>,
    _lock: KernelLock,
}

impl Fixture {
    /// `None` (with the reason printed by `usable`) where the node's mechanisms are not available.
    fn start() -> Option<Fixture> {
        if !usable() {
            return None;
        }
        let lock = KernelLock::acquire();
        let before = snapshot();
        let dir = tempfile::tempdir().unwrap();
        Some(Fixture { _cleanup: ResetNodeOnDrop(dir.path().into()), dir, before, _lock: lock })
    }
}

/// Resets the node even when a test panics (opened anew: the test's `Node` is dropped first).
struct ResetNodeOnDrop(PathBuf);

impl Drop for ResetNodeOnDrop {
    fn drop(&mut self) {
        if !self.0.join("node").exists() {
            return;
        }
        match Node::open(opts(&self.0)) {
            Ok((node, _)) => {
                if let Err(e) = node.reset() {
                    eprintln!("cleanup: node reset failed: {e}");
                }
            }
            Err(e) => eprintln!("cleanup: cannot open the node: {e}"),
        }
    }
}

/// What another workload could notice: its processes, every cgroup file rtslice writes, and every
/// thread's policy and affinity.
fn view(n: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let g = group(&name(n));
    for dir in g.dirs() {
        for f in [
            "cgroup.procs",
            "tasks",
            "cpuset.cpus",
            "cpuset.mems",
            "cpuset.cpu_exclusive",
            "cpuset.sched_load_balance",
            "cpu.rt_runtime_us",
            "cpu.rt_period_us",
            "cpu.shares",
            "cpu.cfs_quota_us",
            "cpu.cfs_period_us",
        ] {
            if let Ok(s) = std::fs::read_to_string(dir.join(f)) {
                m.insert(dir.join(f).display().to_string(), s.trim().to_string());
            }
        }
    }
    for pid in rtslice_host::workload_pids(&g.cpuset) {
        for tid in rtslice_host::sched::threads_of(pid) {
            let policy = rtslice_host::sched::get_attr(tid).map(|p| format!("{p:?}")).unwrap_or_default();
            let aff = rtslice_host::sched::get_affinity(tid).map(|c| c.to_string()).unwrap_or_default();
            m.insert(format!("thread {pid}/{tid}"), format!("{policy} [{aff}]"));
        }
    }
    assert!(!m.is_empty(), "workload {n} has a cgroup");
    m
}

fn views(ns: &[&str]) -> BTreeMap<String, BTreeMap<String, String>> {
    ns.iter().map(|n| (n.to_string(), view(n))).collect()
}

/// Every live process whose command line carries this test's marker.
fn launched_processes() -> Vec<i32> {
    let want = format!("sleep\0{}\0", marker());
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else { continue };
        if cmd == want.as_bytes() && rtslice_sys::proc_ref::ProcRef::of(pid).is_some_and(|p| p.alive()) {
            v.push(pid);
        }
    }
    v.sort();
    v
}

/// The node is consistent: no interrupted operation left, no drift in any segment, every launched
/// process belongs to a deployed workload, every workload cgroup belongs to one.
fn assert_consistent(node: &Node) {
    let names = node.names();
    let mut recorded = Vec::new();
    for n in &names {
        let st = node.status(n).unwrap();
        assert!(st.drift.is_empty(), "{n}: {:?}", st.drift);
        let rec = node.record(n).unwrap().expect("a record");
        recorded.extend(rec.workloads[0].pids.iter().map(|p| p.pid));
    }
    assert!(node.base_status().unwrap().drift.is_empty(), "{:?}", node.base_status().unwrap().drift);
    recorded.sort();
    assert_eq!(launched_processes(), recorded, "no orphaned process: every launched sleep belongs to a deployed workload");
    let parent = backend().parent();
    for dir in [parent.cpuset, parent.cpu] {
        let mut groups: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir() && e.file_name() != "system")
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        groups.sort();
        for g in &groups {
            if g.starts_with("_partition-") {
                // A shared partition holds deployed SCHED_DEADLINE workloads, and is gone with the last.
                let inside: Vec<String> = std::fs::read_dir(dir.join(g))
                    .unwrap()
                    .flatten()
                    .filter(|e| e.path().is_dir())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                assert!(!inside.is_empty(), "empty shared partition {}/{g} left", dir.display());
                for w in &inside {
                    assert!(names.contains(w), "leaked cgroup {}/{g}/{w} (deployed: {names:?})", dir.display());
                }
                continue;
            }
            assert!(names.contains(g), "leaked cgroup {}/{g} (deployed: {names:?})", dir.display());
        }
    }
}

#[test]
fn workloads_come_and_go_one_at_a_time_and_the_others_never_notice() {
    root_or_skip!();
    let Some(fx) = Fixture::start() else { return };
    let (before, dir) = (&fx.before, fx.dir.path());
    let (node, opened) = Node::open(opts(dir)).expect("open the node");
    assert!(opened.created);
    assert_eq!(node.base().mechanism, Mechanism::RtGroup);

    // Three reservations on CPU 0: 25% each.
    for n in ["a", "b", "c"] {
        node.deploy(&reserved(n, "0", 250)).expect("deploy");
    }
    let three = views(&["a", "b", "c"]);
    assert_eq!(read(group(&name("a")).cpu.join("cpu.rt_runtime_us")), "250000");
    // A fourth, CPU 1 to itself: the three see nothing.
    node.deploy(&dedicated(&node, "d", "1")).expect("deploy the dedicated one");
    if node.base().partitions {
        assert_partition(&name("d"));
    }
    assert_eq!(views(&["a", "b", "c"]), three, "deploying d touched the others");
    // 30% more does not fit the node's 95% (RT groups account the groups' sum): refused untouched.
    let e = node.deploy(&reserved("e", "0", 300)).unwrap_err();
    assert!(matches!(e, HostError::Rejected(_)), "{e}");
    assert!(e.to_string().contains("105.0%"), "{e}");
    assert!(!group(&name("e")).cpuset.exists());
    // Resize a in place (same PID), the others untouched: grow to 40% (90% in all), refused at 50%
    // (100%), shrink to 20%.
    let pid_a = node.record(&name("a")).unwrap().unwrap().workloads[0].pids[0];
    let others = views(&["b", "c", "d"]);
    node.resize(&reserved("a", "0", 400)).expect("grow a");
    assert_eq!(read(group(&name("a")).cpu.join("cpu.rt_runtime_us")), "400000");
    let e = node.resize(&reserved("a", "0", 500)).unwrap_err();
    assert!(e.to_string().contains("100.0%"), "{e}");
    assert_eq!(read(group(&name("a")).cpu.join("cpu.rt_runtime_us")), "400000", "a refused resize changes nothing");
    node.resize(&reserved("a", "0", 200)).expect("shrink a");
    assert_eq!(read(group(&name("a")).cpu.join("cpu.rt_runtime_us")), "200000");
    assert_eq!(node.record(&name("a")).unwrap().unwrap().workloads[0].pids[0], pid_a);
    assert!(pid_a.alive());
    assert_eq!(views(&["b", "c", "d"]), others, "resizing a touched the others");
    assert!(node.status(&name("a")).unwrap().drift.is_empty());
    // e (30%) still does not fit: 70% + 30% = 100%.
    assert!(node.deploy(&reserved("e", "0", 300)).is_err());
    // Remove b: its process stops, its group goes, its 25% is free: e (30%) fits now.
    let pid_b = node.record(&name("b")).unwrap().unwrap().workloads[0].pids[0];
    let others = views(&["a", "c", "d"]);
    let removed = node.remove(&name("b")).expect("remove b");
    assert!(removed.undone > 0);
    assert!(!pid_b.alive());
    assert!(!group(&name("b")).cpuset.exists() && !group(&name("b")).cpu.exists());
    assert_eq!(views(&["a", "c", "d"]), others, "removing b touched the others");
    node.deploy(&reserved("e", "0", 300)).expect("e fits once b is gone");
    assert_consistent(&node);
    // Removing the dedicated workload gives CPU 1 back to the system cpuset.
    node.remove(&name("d")).expect("remove d");
    if node.base().partitions {
        assert_eq!(read(backend().group("system").cpuset.join("cpuset.cpus")), "0-1");
    }

    node.reset().expect("reset the node");
    assert!(launched_processes().is_empty());
    assert_same(before, &snapshot());
}

#[test]
fn a_fault_at_any_step_of_deploy_resize_or_remove_rolls_back_that_operation_only() {
    root_or_skip!();
    let Some(fx) = Fixture::start() else { return };
    let (before, dir) = (&fx.before, fx.dir.path());
    let (mut node, _) = Node::open(opts(dir)).expect("open the node");
    node.deploy(&reserved("a", "0", 200)).expect("deploy a");
    node.deploy(&dedicated(&node, "b", "1")).expect("deploy b");
    let base_line = snapshot();
    let others = views(&["a", "b"]);

    // Deploy: count the changes of a clean deploy, then fail each one in turn.
    let c = reserved("c", "0", 200);
    node.deploy(&c).expect("deploy c");
    let n = node.status(&name("c")).unwrap().changes;
    node.remove(&name("c")).expect("remove c");
    assert_same(&base_line, &snapshot());
    assert!(n >= 5, "{n} changes");
    for k in 0..n {
        node.set_fault(Fault { fail_change: Some(k) });
        let e = node.deploy(&c).unwrap_err();
        match &e {
            HostError::StepFailed { rollback_errors, .. } => assert!(rollback_errors.is_empty(), "{rollback_errors:?}"),
            other => panic!("deploy change {k}: expected StepFailed, got {other}"),
        }
        assert!(e.to_string().contains("injected fault"), "{e}");
        node.set_fault(Fault::default());
        assert!(node.record(&name("c")).unwrap().is_none(), "no segment left after deploy fault {k}");
        assert_same(&base_line, &snapshot());
        assert_eq!(views(&["a", "b"]), others, "deploy fault {k} touched the others");
    }
    eprintln!("deploy: {n} changes, each failed in turn, each rolled back exactly");

    // Resize: fail each change of a resize of a; a keeps its old budget and its process.
    let pid_a = node.record(&name("a")).unwrap().unwrap().workloads[0].pids[0];
    let a_before = view("a");
    let others = views(&["b"]);
    let bigger = {
        let mut s = reserved("a", "0", 300);
        s.workloads[0].reservation = Some(Reservation::from_micros(150_000, 500_000));
        s
    };
    let mut k = 0;
    loop {
        node.set_fault(Fault { fail_change: Some(k) });
        match node.resize(&bigger) {
            Ok(_) => break,
            Err(e) => {
                assert!(e.to_string().contains("injected fault"), "{e}");
                assert_eq!(view("a"), a_before, "resize fault {k}: a as before");
                assert_eq!(views(&["b"]), others);
            }
        }
        k += 1;
    }
    node.set_fault(Fault::default());
    assert!(k >= 2, "a resize of runtime and period is at least two changes ({k})");
    eprintln!("resize: {k} changes, each failed in turn, each rolled back exactly");
    assert_eq!(read(group(&name("a")).cpu.join("cpu.rt_period_us")), "500000");
    assert_eq!(read(group(&name("a")).cpu.join("cpu.rt_runtime_us")), "150000");
    assert!(pid_a.alive());

    // Remove: stop after k undone changes (a crash or a refusal midway), then finish it.
    let removals = node.status(&name("a")).unwrap().changes;
    for k in 1..removals {
        node.deploy(&c).expect("deploy c");
        let others = views(&["a", "b"]);
        node.set_fault(Fault { fail_change: Some(k) });
        let e = node.remove(&name("c")).unwrap_err();
        assert!(e.to_string().contains("injected fault"), "{e}");
        node.set_fault(Fault::default());
        node.remove(&name("c")).expect("the second remove finishes the first");
        assert_eq!(views(&["a", "b"]), others, "remove fault {k} touched the others");
        assert!(!group(&name("c")).cpuset.exists());
    }
    assert_consistent(&node);
    node.reset().expect("reset");
    assert_same(before, &snapshot());
}

/// Helper role for the crash test: open the node and run a scripted sequence of operations for
/// ever (the test SIGKILLs it at a random point).
#[test]
fn helper_node_operations_role() {
    let Ok(dir) = std::env::var("RTSLICE_NODE_TEST_DIR") else { return };
    let (node, _) = Node::open(opts(Path::new(&dir))).expect("open the node");
    for round in 0u64.. {
        for (i, n) in ["a", "b", "c"].into_iter().enumerate() {
            let deployed = node.record(&name(n)).unwrap().is_some();
            let r = match (deployed, (round + i as u64) % 3) {
                (false, _) if n == "c" => node.deploy(&dedicated(&node, n, "1")).map(|_| ()),
                (false, _) => node.deploy(&reserved(n, "0", 200)).map(|_| ()),
                (true, 0) if n != "c" => node.resize(&reserved(n, "0", 100 + 50 * (round % 3))).map(|_| ()),
                (true, _) => node.remove(&name(n)).map(|_| ()),
            };
            if let Err(e) = r {
                eprintln!("round {round} {n}: {e}");
            }
        }
    }
}

#[test]
fn kill_9_at_random_points_then_the_node_recovers_without_drift_orphans_or_leaks() {
    root_or_skip!();
    let Some(fx) = Fixture::start() else { return };
    let (before, dir) = (&fx.before, fx.dir.path());
    let mut seed: u64 = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    eprintln!("seed {seed}");
    let mut recovered = Vec::new();
    let mut adopted = 0;
    for round in 0..24 {
        // xorshift: a delay between 0 and 1.2 s, the helper's start-up included.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = Duration::from_millis(seed % 1200);
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "helper_node_operations_role", "--nocapture"])
            .env("RTSLICE_NODE_TEST_DIR", dir)
            .env("RTSLICE_NODE_TEST_RUN", run_id().to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let (node, opened) = Node::open(opts(dir)).unwrap_or_else(|e| panic!("round {round}: open after kill -9: {e}"));
        assert!(!opened.rebooted);
        assert!(opened.exited.is_empty(), "round {round}: workloads died with the helper: {:?}", opened.exited);
        adopted += opened.adopted.len();
        recovered.extend(opened.recovered.iter().cloned());
        assert_consistent(&node);
    }
    eprintln!("24 kill -9 rounds: {adopted} workloads re-adopted, {} interrupted operations recovered: {recovered:?}", recovered.len());
    let (node, _) = Node::open(opts(dir)).unwrap();
    node.reset().expect("reset");
    assert!(launched_processes().is_empty());
    assert_same(before, &snapshot());
}

#[test]
fn one_shot_apply_and_the_node_refuse_each_other() {
    root_or_skip!();
    let Some(fx) = Fixture::start() else { return };
    let (before, dir) = (&fx.before, fx.dir.path());
    let (node, _) = Node::open(opts(dir)).expect("open");
    drop(node);
    let e = apply_setup(&reserved("x", "0", 100), &ApplyOptions::with_state_dir(dir)).unwrap_err();
    assert!(e.to_string().contains("holds a node"), "{e}");
    let (node, _) = Node::open(opts(dir)).expect("open");
    // Two writers on one node: the second is refused while the first holds it (after 3 s).
    let e = Node::open(opts(dir)).err().expect("a second open is refused").to_string();
    assert!(e.contains("another rtslice"), "{e}");
    node.reset().unwrap();
    assert_same(before, &snapshot());
}

/// A workload reserving `runtime_ms` every second on `on`, its sleep thread SCHED_DEADLINE.
fn deadline_reserved(n: &str, on: &str, runtime_ms: u64) -> Setup {
    let mut s = reserved(n, on, runtime_ms);
    s.workloads[0].threads = vec![ThreadRule {
        name: "^sleep$".into(),
        policy: Some(SchedAttr::Deadline { runtime_ns: runtime_ms * 1_000_000, deadline_ns: 1_000_000_000, period_ns: 1_000_000_000, reclaim: false }),
        cpus: None,
        budget_share: None,
    }];
    s
}

/// Several vBS on one CPU under SCHED_DEADLINE: workloads on exactly the same CPUs share one
/// partition (a root domain of their own), each in its own group; one on other CPUs overlapping
/// them is refused with the reason; the partition goes with the last of them and `system` gets the
/// CPU back.
#[test]
fn deadline_workloads_on_the_same_cpus_share_a_partition() {
    root_or_skip!();
    let Some(fx) = Fixture::start() else { return };
    let (before, dir) = (&fx.before, fx.dir.path());
    let (node, _) = Node::open(NodeOptions { mechanism: Some(Mechanism::Deadline), ..opts(dir) }).expect("open the node");
    if !node.base().partitions {
        eprintln!("SKIPPED: partitions unavailable here ({:?})", node.base().warnings);
        return;
    }
    let part = backend().parent().cpuset.join("_partition-1");
    node.deploy(&deadline_reserved("a", "1", 200)).expect("deploy a");
    assert_eq!(read(part.join("cpuset.cpu_exclusive")), "1");
    let a = views_in(&part, "a");
    node.deploy(&deadline_reserved("b", "1", 300)).expect("b shares a's partition");
    assert_eq!(views_in(&part, "a"), a, "deploying b touched a");
    for n in ["a", "b"] {
        let rec = node.record(&name(n)).unwrap().unwrap();
        assert_eq!(rec.workloads[0].group.cpuset, part.join(name(n)));
        let pid = rec.workloads[0].pids[0].pid;
        assert!(
            matches!(rtslice_host::sched::get_attr(pid), Ok(SchedAttr::Deadline { .. })),
            "{n}: {:?}",
            rtslice_host::sched::get_attr(pid)
        );
    }
    assert!(!read(backend().group("system").cpuset.join("cpuset.cpus")).contains('1'), "CPU 1 is out of system");
    // A dedicated CPU 1 overlaps the partition: refused, nothing changed.
    let e = node.deploy(&dedicated(&node, "c", "1")).unwrap_err();
    assert!(e.to_string().contains("is in an exclusive partition"), "{e}");
    // A resize of b in place keeps it in the partition.
    node.resize(&deadline_reserved("b", "1", 100)).expect("shrink b");
    assert_eq!(views_in(&part, "a"), a, "resizing b touched a");
    assert_consistent(&node);
    node.remove(&name("a")).expect("remove a");
    assert!(part.exists(), "b is still in it");
    node.remove(&name("b")).expect("remove b");
    assert!(!part.exists(), "the last one out removes the partition");
    assert_eq!(read(backend().group("system").cpuset.join("cpuset.cpus")), "0-1");
    assert_consistent(&node);
    node.reset().expect("reset the node");
    assert!(launched_processes().is_empty());
    assert_same(before, &snapshot());
}

/// What `view` shows of a workload whose cpuset group is inside a shared partition.
fn views_in(part: &Path, n: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let dir = part.join(name(n));
    for f in ["cgroup.procs", "cpuset.cpus", "cpuset.mems", "cpuset.cpu_exclusive"] {
        m.insert(f.to_string(), read(dir.join(f)));
    }
    for pid in rtslice_host::workload_pids(&dir) {
        for tid in rtslice_host::sched::threads_of(pid) {
            let policy = rtslice_host::sched::get_attr(tid).map(|p| format!("{p:?}")).unwrap_or_default();
            let aff = rtslice_host::sched::get_affinity(tid).map(|c| c.to_string()).unwrap_or_default();
            m.insert(format!("thread {pid}/{tid}"), format!("{policy} [{aff}]"));
        }
    }
    m
}
