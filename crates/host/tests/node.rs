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
    apply_setup, ApplyOptions, CpuList, Fault, HostError, IrqRule, Launch, Mechanism, NetRule, Node, NodeOptions, Reservation,
    Setup, ThreadRule, WorkloadSetup,
};
use rtslice_testkit::{root_or_skip, skip, skip_unless, KernelLock, OnDrop};

fn cpus(s: &str) -> CpuList {
    CpuList::parse(s).unwrap()
}

/// Where the node tests put their workloads, per backend.
/// - cgroup v1 with RT groups (this development VM): the reservations share CPU 0 as RT groups (no
///   partition), the dedicated workload takes CPU 1.
/// - cgroup v2 (the kernel matrix's guests): SCHED_DEADLINE is the only reservation mechanism; the
///   reservations share CPU 1 in one node partition at the root (`rtslice-partition-1`), the
///   dedicated workload takes CPU 2 in a partition of its own, CPU 0 stays the system's.
struct Layout {
    mechanism: Mechanism,
    shared: &'static str,
    dedicated: &'static str,
}

/// `None` having skipped for what this host lacks (only the first call of a test can: the others
/// come after its fixture found the layout).
fn layout() -> Option<Layout> {
    match node_mechanism_or_skip(3, "CPU 0 stays the system's, the reservations share CPU 1, the dedicated workload takes CPU 2")? {
        Mechanism::RtGroup => Some(Layout { mechanism: Mechanism::RtGroup, shared: "0", dedicated: "1" }),
        mechanism => Some(Layout { mechanism, shared: "1", dedicated: "2" }),
    }
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
    vec![ThreadRule { name: "^sleep$".into(), policy: Some(SchedAttr::Fifo { priority: 10 }), cpus: None, period_ns: None }]
}

fn name(n: &str) -> String {
    format!("nt{}-{n}", run_id())
}

/// A workload reserving `runtime_ms` every second on `on`, its sleep thread FIFO, with the kernel
/// parameters the planner gives it under the node's mechanism.
fn reserved(n: &str, on: &str, runtime_ms: u64) -> Setup {
    reserved_every(n, on, runtime_ms * 1000, 1_000_000)
}

/// [`reserved`] with a runtime and period in µs.
fn reserved_every(n: &str, on: &str, runtime_us: u64, period_us: u64) -> Setup {
    let s = Setup {
        name: "node-test".into(),
        workloads: vec![WorkloadSetup {
            name: name(n),
            cpus: cpus(on),
            reservation: Some(Reservation::from_micros(runtime_us, period_us)),
            threads: fifo_rule(),
            launch: sleeper(),
            ..Default::default()
        }],
        ..Default::default()
    };
    planned(s, layout().map(|l| l.mechanism))
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
    let mechanism = layout().map(|l| l.mechanism);
    NodeOptions { grace: Duration::from_secs(2), mechanism, ..NodeOptions::with_state_dir(dir) }
}

/// The node partitions' directory and their name prefix: v1 under the parent cpuset, v2 at the root.
fn partition_holder() -> (PathBuf, &'static str) {
    match backend() {
        rtslice_host::cgroup::Backend::V1 { .. } => (backend().parent().cpuset, "_partition-"),
        rtslice_host::cgroup::Backend::V2 { root } => (root, rtslice_host::cgroup::V2_PARTITION_PREFIX),
    }
}

/// The node partition that holds workloads on `cpus` (v1 only for SCHED_DEADLINE ones; v2 for
/// every workload that needs a partition).
fn partition_dir(cpus: &str) -> PathBuf {
    let (holder, prefix) = partition_holder();
    holder.join(format!("{prefix}{cpus}"))
}

/// Where a workload's groups are: its own under the parent, or a member of a node partition.
fn workload_group(n: &str) -> rtslice_host::cgroup::GroupPaths {
    let mut g = group(&name(n));
    if !g.cpuset.exists() {
        let (holder, prefix) = partition_holder();
        if let Some(dir) = std::fs::read_dir(&holder)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
            .map(|e| e.path().join(name(n)))
            .find(|d| d.exists())
        {
            if is_v2() {
                g.cpu = dir.clone();
            }
            g.cpuset = dir;
        }
    }
    g
}

/// A workload's reservation as the kernel holds it, (runtime µs, period µs): its RT group's budget
/// (v1), or its thread's SCHED_DEADLINE parameters (the one `sleep` thread takes the whole budget).
fn budget_of(n: &str) -> (u64, u64) {
    if !is_v2() {
        let g = group(&name(n));
        return (read(g.cpu.join("cpu.rt_runtime_us")).parse().unwrap(), read(g.cpu.join("cpu.rt_period_us")).parse().unwrap());
    }
    let pid = rtslice_host::workload_pids(&workload_group(n).cpuset)[0];
    match rtslice_host::sched::get_attr(pid) {
        Ok(SchedAttr::Deadline { runtime_ns, period_ns, .. }) => (runtime_ns / 1000, period_ns / 1000),
        other => panic!("{n}: its thread is not SCHED_DEADLINE: {other:?}"),
    }
}

/// The dedicated workload `n` holds its CPUs as a partition: v1 its own group, v2 the node
/// partition it is the only member of.
fn assert_dedicated_partition(n: &str) {
    if !is_v2() {
        return assert_partition(&name(n));
    }
    let part = workload_group(n).cpuset.parent().unwrap().to_path_buf();
    assert_eq!(read(part.join("cpuset.cpus.partition")), "root", "{n} is in a valid partition");
    let members: Vec<_> = std::fs::read_dir(&part).unwrap().flatten().filter(|e| e.path().is_dir()).collect();
    assert_eq!(members.len(), 1, "{n} is alone in {}", part.display());
}

/// What every node test starts from, in drop order: the node reset even when the test panics (the
/// test's own `Node` is dropped first), its state directory removed, then the kernel lock released.
struct Fixture {
    _cleanup: OnDrop<Box<dyn FnOnce()>>,
    dir: tempfile::TempDir,
    before: BTreeMap<String, String>,
    _lock: KernelLock,
}

impl Fixture {
    /// `None` (having skipped, in `layout`) where the node's mechanisms are not available.
    fn start() -> Option<Fixture> {
        layout()?;
        let lock = KernelLock::acquire();
        let before = snapshot();
        let dir = tempfile::tempdir().unwrap();
        Some(Fixture { _cleanup: reset_node_on_drop(dir.path().into()), dir, before, _lock: lock })
    }
}

/// Resets the node in `dir` even when a test panics (opened anew: the test's `Node` is dropped first).
fn reset_node_on_drop(dir: PathBuf) -> OnDrop<Box<dyn FnOnce()>> {
    OnDrop::new(Box::new(move || {
        if !dir.join("node").exists() {
            return;
        }
        match Node::open(opts(&dir)) {
            Ok((node, _)) => {
                if let Err(e) = node.reset() {
                    eprintln!("cleanup: node reset failed: {e}");
                }
            }
            Err(e) => eprintln!("cleanup: cannot open the node: {e}"),
        }
    }))
}

/// What another workload could notice: its processes, every cgroup file rtslice writes, and every
/// thread's policy and affinity.
fn view(n: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let g = workload_group(n);
    for dir in g.dirs() {
        for f in [
            "cgroup.procs",
            "tasks",
            "cpuset.cpus",
            "cpuset.mems",
            "cpuset.cpu_exclusive",
            "cpuset.sched_load_balance",
            "cpuset.cpus.effective",
            "cpuset.cpus.partition",
            "cpu.rt_runtime_us",
            "cpu.rt_period_us",
            "cpu.shares",
            "cpu.cfs_quota_us",
            "cpu.cfs_period_us",
            "cpu.max",
            "cpu.weight",
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
    let (holder, prefix) = partition_holder();
    for dir in [parent.cpuset, parent.cpu, holder] {
        let mut groups: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir() && e.file_name() != "system")
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        groups.sort();
        for g in &groups {
            if dir == partition_holder().0 && is_v2() && !g.starts_with(prefix) {
                continue; // the root cgroup's other children are the system's
            }
            if g.starts_with(prefix) {
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
    let l = layout().unwrap();
    let (before, dir) = (&fx.before, fx.dir.path());
    let (node, opened) = Node::open(opts(dir)).expect("open the node");
    assert!(opened.created);
    assert_eq!(node.base().mechanism, l.mechanism);
    // The node's cap for reservations on one CPU: RT groups hold every group against the node's
    // 95 %; SCHED_DEADLINE against the kernel's cap less the deadline servers' share (6.12: 90 %).
    let cap_ms = if is_v2() { ((node.facts().rt_ratio - node.facts().dl_server) * 1000.0).round() as u64 } else { 950 };
    eprintln!("{:?} on CPUs {} (shared) and {} (dedicated), cap {cap_ms} ms every second", l.mechanism, l.shared, l.dedicated);

    // Three reservations on one CPU: 25% each.
    for n in ["a", "b", "c"] {
        node.deploy(&reserved(n, l.shared, 250)).expect("deploy");
    }
    let three = views(&["a", "b", "c"]);
    assert_eq!(budget_of("a"), (250_000, 1_000_000));
    if is_v2() {
        // SCHED_DEADLINE needs a root domain: the three share the node partition of their CPU.
        let part = partition_dir(l.shared);
        assert_eq!(read(part.join("cpuset.cpus.partition")), "root");
        assert_eq!(workload_group("a").cpuset, part.join(name("a")));
    }
    // A fourth, a CPU to itself: the three see nothing.
    node.deploy(&dedicated(&node, "d", l.dedicated)).expect("deploy the dedicated one");
    if node.base().partitions {
        assert_dedicated_partition("d");
    }
    assert_eq!(views(&["a", "b", "c"]), three, "deploying d touched the others");
    // 30% more does not fit the cap: refused, untouched.
    let e = node.deploy(&reserved("e", l.shared, 300)).unwrap_err();
    assert!(matches!(e, HostError::Rejected(_)), "{e}");
    assert!(e.to_string().contains("105.0%"), "{e}");
    assert!(!workload_group("e").cpuset.exists());
    // Resize a in place (same PID), the others untouched: grow to the cap, refused beyond it, then
    // shrink to 20%.
    let pid_a = node.record(&name("a")).unwrap().unwrap().workloads[0].pids[0];
    let others = views(&["b", "c", "d"]);
    let grown_ms = cap_ms - 520;
    node.resize(&reserved("a", l.shared, grown_ms)).expect("grow a");
    assert_eq!(budget_of("a"), (grown_ms * 1000, 1_000_000));
    let e = node.resize(&reserved("a", l.shared, 500)).unwrap_err();
    assert!(e.to_string().contains("100.0%"), "{e}");
    assert_eq!(budget_of("a"), (grown_ms * 1000, 1_000_000), "a refused resize changes nothing");
    node.resize(&reserved("a", l.shared, 200)).expect("shrink a");
    assert_eq!(budget_of("a"), (200_000, 1_000_000));
    assert_eq!(node.record(&name("a")).unwrap().unwrap().workloads[0].pids[0], pid_a);
    assert!(pid_a.alive());
    assert_eq!(views(&["b", "c", "d"]), others, "resizing a touched the others");
    assert!(node.status(&name("a")).unwrap().drift.is_empty());
    // e (30%) still does not fit: 70% + 30% = 100%.
    assert!(node.deploy(&reserved("e", l.shared, 300)).is_err());
    // Remove b: its process stops, its group goes, its 25% is free: e (30%) fits now.
    let pid_b = node.record(&name("b")).unwrap().unwrap().workloads[0].pids[0];
    let gb = workload_group("b");
    let others = views(&["a", "c", "d"]);
    let removed = node.remove(&name("b")).expect("remove b");
    assert!(removed.undone > 0);
    assert!(!pid_b.alive());
    assert!(!gb.cpuset.exists() && !gb.cpu.exists());
    assert_eq!(views(&["a", "c", "d"]), others, "removing b touched the others");
    node.deploy(&reserved("e", l.shared, 300)).expect("e fits once b is gone");
    assert_consistent(&node);
    // Removing the dedicated workload gives its CPU back to the system.
    let part_d = workload_group("d").cpuset.parent().unwrap().to_path_buf();
    node.remove(&name("d")).expect("remove d");
    if node.base().partitions && !is_v2() {
        assert_eq!(read(backend().group("system").cpuset.join("cpuset.cpus")), "0-1");
    }
    if is_v2() {
        assert!(!part_d.exists(), "d's partition went with it");
        let root = backend().root().cpuset;
        let effective = CpuList::parse(&read(root.join("cpuset.cpus.effective"))).unwrap();
        assert!(cpus(l.dedicated).is_subset(&effective), "CPU {} is the root's again ({effective})", l.dedicated);
    }

    node.reset().expect("reset the node");
    assert!(launched_processes().is_empty());
    assert_restored(before);
}

/// Deploys `setup` (one workload) `n` times, failing its k-th change the k-th time: each deploy
/// reports the injected fault, rolls back without error and leaves no segment, the host is as in
/// `base_line`, and `also(k)` holds.
fn fail_each_change_of_deploy(node: &mut Node, setup: &Setup, n: usize, base_line: &BTreeMap<String, String>, also: impl Fn(usize)) {
    let w = &setup.workloads[0].name;
    for k in 0..n {
        node.set_fault(Fault { fail_change: Some(k) });
        let e = node.deploy(setup).unwrap_err();
        match &e {
            HostError::StepFailed { rollback_errors, .. } => assert!(rollback_errors.is_empty(), "change {k}: {rollback_errors:?}"),
            other => panic!("deploy change {k}: expected StepFailed, got {other}"),
        }
        assert!(e.to_string().contains("injected fault"), "{e}");
        node.set_fault(Fault::default());
        assert!(node.record(w).unwrap().is_none(), "no segment of {w} left after fault {k}");
        assert_restored(base_line);
        also(k);
    }
}

#[test]
fn a_fault_at_any_step_of_deploy_resize_or_remove_rolls_back_that_operation_only() {
    root_or_skip!();
    let Some(fx) = Fixture::start() else { return };
    let (before, dir) = (&fx.before, fx.dir.path());
    let l = layout().unwrap();
    let (mut node, _) = Node::open(opts(dir)).expect("open the node");
    node.deploy(&reserved("a", l.shared, 200)).expect("deploy a");
    node.deploy(&dedicated(&node, "b", l.dedicated)).expect("deploy b");
    let base_line = snapshot();
    let others = views(&["a", "b"]);
    // Every process a failed deploy started, its rollback stopped and reaped: only a's and b's remain.
    let kids = children();

    // Deploy: count the changes of a clean deploy, then fail each one in turn.
    let c = reserved("c", l.shared, 200);
    node.deploy(&c).expect("deploy c");
    let n = node.status(&name("c")).unwrap().changes;
    node.remove(&name("c")).expect("remove c");
    assert_restored(&base_line);
    assert!(n >= 5, "{n} changes");
    fail_each_change_of_deploy(&mut node, &c, n, &base_line, |k| {
        assert_eq!(views(&["a", "b"]), others, "deploy fault {k} touched the others");
        assert_eq!(children(), kids, "deploy fault {k}: a process it started is left");
    });
    eprintln!("deploy: {n} changes, each failed in turn, each rolled back exactly");

    // Resize: fail each change of a resize of a; a keeps its old budget and its process.
    let pid_a = node.record(&name("a")).unwrap().unwrap().workloads[0].pids[0];
    let a_before = view("a");
    let others = views(&["b"]);
    let bigger = {
        reserved_every("a", l.shared, 150_000, 500_000)
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
    // RT groups: the period and the runtime files; SCHED_DEADLINE: the thread's one sched_setattr.
    let least = if is_v2() { 1 } else { 2 };
    assert!(k >= least, "a resize of runtime and period is at least {least} change(s) ({k})");
    eprintln!("resize: {k} changes, each failed in turn, each rolled back exactly");
    assert_eq!(budget_of("a"), (150_000, 500_000));
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
        assert!(!workload_group("c").cpuset.exists());
    }
    assert_consistent(&node);
    node.reset().expect("reset");
    assert_restored(before);
}

/// Helper role for the crash test: open the node and run a scripted sequence of operations for
/// ever (the test SIGKILLs it at a random point).
#[test]
fn helper_node_operations_role() {
    let Ok(dir) = std::env::var("RTSLICE_NODE_TEST_DIR") else { return };
    let l = layout().expect("the test checked the layout");
    let (node, _) = Node::open(opts(Path::new(&dir))).expect("open the node");
    for round in 0u64.. {
        for (i, n) in ["a", "b", "c"].into_iter().enumerate() {
            let deployed = node.record(&name(n)).unwrap().is_some();
            let r = match (deployed, (round + i as u64) % 3) {
                (false, _) if n == "c" => node.deploy(&dedicated(&node, n, l.dedicated)).map(|_| ()),
                (false, _) => node.deploy(&reserved(n, l.shared, 200)).map(|_| ()),
                (true, 0) if n != "c" => node.resize(&reserved(n, l.shared, 100 + 50 * (round % 3))).map(|_| ()),
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
    assert_restored(before);
}

#[test]
fn one_shot_apply_and_the_node_refuse_each_other() {
    root_or_skip!();
    let Some(fx) = Fixture::start() else { return };
    let (before, dir) = (&fx.before, fx.dir.path());
    let (node, _) = Node::open(opts(dir)).expect("open");
    drop(node);
    let e = apply_setup(&reserved("x", layout().unwrap().shared, 100), &ApplyOptions::with_state_dir(dir)).unwrap_err();
    assert!(e.to_string().contains("holds a node"), "{e}");
    // A one-shot apply's node (the apply ran one in-process) is not the node service's to take.
    let (node, _) = Node::open(opts(dir)).expect("open");
    node.reset().unwrap();
    let applied = apply_setup(&reserved("x", layout().unwrap().shared, 100), &ApplyOptions::with_state_dir(dir)).expect("a one-shot apply");
    assert!(rtslice_host::one_shot_applied(&rtslice_host::StateDir::new(dir)) && applied.workloads.len() == 1);
    let e = Node::open(opts(dir)).err().expect("the node service refuses a one-shot apply's node").to_string();
    assert!(e.contains("holds a one-shot `rtslice apply`"), "{e}");
    let e = apply_setup(&reserved("y", layout().unwrap().shared, 100), &ApplyOptions::with_state_dir(dir)).unwrap_err();
    assert!(e.to_string().contains("already holds workloads"), "{e}");
    rtslice_host::reset(&rtslice_host::StateDir::new(dir), rtslice_host::ResetOptions::default()).expect("reset the apply");
    let (node, _) = Node::open(opts(dir)).expect("open");
    // Two writers on one node: the second is refused while the first holds it (after 3 s).
    let e = Node::open(opts(dir)).err().expect("a second open is refused").to_string();
    assert!(e.contains("another rtslice"), "{e}");
    node.reset().unwrap();
    assert_restored(before);
}

/// A node whose daemon stopped (its workloads keep running) is given back by `reset`, the command
/// `rtslice reset` and the package's prerm run: every workload stopped, every change undone. While a
/// node holds the directory, reset says a daemon runs there.
#[test]
fn reset_undoes_a_stopped_nodes_workloads_and_base() {
    root_or_skip!();
    let Some(fx) = Fixture::start() else { return };
    let l = layout().unwrap();
    let (before, dir) = (&fx.before, fx.dir.path());
    let (node, _) = Node::open(opts(dir)).expect("open the node");
    node.deploy(&reserved("a", l.shared, 200)).expect("deploy a");
    node.deploy(&dedicated(&node, "b", l.dedicated)).expect("deploy b");
    let pids: Vec<_> = ["a", "b"].iter().map(|n| node.record(&name(n)).unwrap().unwrap().workloads[0].pids[0]).collect();
    let state = rtslice_host::StateDir::new(dir);
    let e = rtslice_host::reset(&state, rtslice_host::ResetOptions::default()).unwrap_err();
    assert!(e.to_string().contains("a node service (rtslice daemon) is running"), "{e}");
    let e = rtslice_host::reset(&state, rtslice_host::ResetOptions { keep_workloads: true, ..Default::default() }).unwrap_err();
    assert!(e.to_string().contains("--keep-workloads is for a one-shot apply"), "{e}");
    drop(node); // the daemon stops; its workloads run on
    assert!(pids.iter().all(|p| p.alive()));
    let report = rtslice_host::reset(&state, rtslice_host::ResetOptions { grace: Duration::from_secs(2), ..Default::default() }).expect("reset");
    assert_eq!(report.stopped, 2, "{report:?}");
    assert!(report.undone > 0 && !report.nothing_applied, "{report:?}");
    assert!(pids.iter().all(|p| !p.alive()), "reset stopped the workloads");
    assert!(!rtslice_host::node_active(&state));
    assert!(launched_processes().is_empty());
    assert_restored(before);
}

/// A workload reserving `runtime_ms` every second on `on`, its sleep thread SCHED_DEADLINE.
fn deadline_reserved(n: &str, on: &str, runtime_ms: u64) -> Setup {
    let mut s = reserved(n, on, runtime_ms);
    s.workloads[0].threads = vec![ThreadRule {
        name: "^sleep$".into(),
        policy: Some(SchedAttr::Deadline { runtime_ns: runtime_ms * 1_000_000, deadline_ns: 1_000_000_000, period_ns: 1_000_000_000, reclaim: false }),
        cpus: None,
        period_ns: None,
    }];
    planned(s, Some(Mechanism::Deadline))
}

/// Several vBS on one CPU under SCHED_DEADLINE: workloads on exactly the same CPUs share one
/// partition (a root domain of their own), each in its own group; one on other CPUs overlapping
/// them is refused with the reason; the partition goes with the last of them and the system gets
/// the CPU back (v1: `system`; v2: the root cgroup's effective CPUs).
#[test]
fn deadline_workloads_on_the_same_cpus_share_a_partition() {
    root_or_skip!();
    let Some(fx) = Fixture::start() else { return };
    let l = layout().unwrap();
    let (before, dir) = (&fx.before, fx.dir.path());
    let (node, _) = Node::open(NodeOptions { mechanism: Some(Mechanism::Deadline), ..opts(dir) }).expect("open the node");
    if !node.base().partitions {
        skip::skip(skip::PARTITIONS, format!("partitions unavailable here ({:?})", node.base().warnings));
        return;
    }
    // On v1 the shared CPU is CPU 0's neighbour: a deadline partition cannot be the RT groups' CPU 0.
    let on = if is_v2() { l.shared } else { "1" };
    let part = partition_dir(on);
    node.deploy(&deadline_reserved("a", on, 200)).expect("deploy a");
    if is_v2() {
        assert_eq!(read(part.join("cpuset.cpus.partition")), "root");
    } else {
        assert_eq!(read(part.join("cpuset.cpu_exclusive")), "1");
    }
    let a = views_in(&part, "a");
    // b reclaims (a demand pool the agent splits, as a spec's reservation does by default).
    let reclaiming = |mut s: Setup| {
        s.workloads[0].reclaim = true;
        for r in &mut s.workloads[0].threads {
            if let Some(SchedAttr::Deadline { reclaim, .. }) = r.policy.as_mut() {
                *reclaim = true;
            }
        }
        s
    };
    node.deploy(&reclaiming(deadline_reserved("b", on, 300))).expect("b shares a's partition");
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
    if !is_v2() {
        assert!(!read(backend().group("system").cpuset.join("cpuset.cpus")).contains('1'), "CPU 1 is out of system");
    }
    // A dedicated CPU overlapping the partition: refused, nothing changed.
    let e = node.deploy(&dedicated(&node, "c", on)).unwrap_err();
    assert!(e.to_string().contains("is in an exclusive partition"), "{e}");
    // More than the partition admits: refused by the node before the kernel is asked.
    let e = node.deploy(&deadline_reserved("big", on, 500)).unwrap_err();
    assert!(e.to_string().contains("would sum to 100.0%"), "{e}");
    assert_eq!(views_in(&part, "a"), a, "a refused deploy touched a");
    // A resize of b in place keeps it in the partition, and its thread holds the smaller budget at
    // once (a pool's split is the agent's only while it fits the pool).
    node.resize(&reclaiming(deadline_reserved("b", on, 100))).expect("shrink b");
    assert_eq!(views_in(&part, "a"), a, "resizing b touched a");
    let b_pid = node.record(&name("b")).unwrap().unwrap().workloads[0].pids[0].pid;
    assert!(
        matches!(rtslice_host::sched::get_attr(b_pid), Ok(SchedAttr::Deadline { runtime_ns: 100_000_000, reclaim: true, .. })),
        "b after its shrink: {:?}",
        rtslice_host::sched::get_attr(b_pid)
    );
    assert_consistent(&node);
    node.remove(&name("a")).expect("remove a");
    assert!(part.exists(), "b is still in it");
    node.remove(&name("b")).expect("remove b");
    assert!(!part.exists(), "the last one out removes the partition");
    if !is_v2() {
        assert_eq!(read(backend().group("system").cpuset.join("cpuset.cpus")), "0-1");
    }
    assert_consistent(&node);
    node.reset().expect("reset the node");
    assert!(launched_processes().is_empty());
    assert_restored(before);
}

/// What `view` shows of a workload whose cpuset group is inside a shared partition.
fn views_in(part: &Path, n: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let dir = part.join(name(n));
    for f in ["cgroup.procs", "cpuset.cpus", "cpuset.mems", "cpuset.cpu_exclusive", "cpuset.cpus.effective", "cpu.max"] {
        if let Ok(v) = std::fs::read_to_string(dir.join(f)) {
            m.insert(f.to_string(), v.trim().to_string());
        }
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

/// IRQ affinity and RPS masks through the node: a workload's rules write its files; a second
/// workload whose rules name the same files is refused with the holder named and changes nothing; a
/// resize keeps the holder's files and refuses to change which files it holds; removing the holder
/// puts back what every file held, after which the other may take them; a bystander is not touched.
#[test]
fn irq_and_rps_rules_have_one_holder_and_are_put_back_on_remove() {
    root_or_skip!();
    let Some(fx) = Fixture::start() else { return };
    let (before, dir) = (&fx.before, fx.dir.path());
    let l = layout().unwrap();
    let (irq, iface) = (movable_irq(), rps_interface());
    skip_unless!(irq.is_some() || iface.is_some(), rtslice_testkit::skip::IRQ_STEERING, "no IRQ whose affinity can be written, no interface with RPS files");
    let rules = |on: &str| {
        let mut s = Setup::default();
        if let Some(irq) = &irq {
            s.irqs.push(IrqRule { action: format!("^{}$", regex_escape(&irq.actions[0])), cpus: cpus(on) });
        }
        if let Some(iface) = &iface {
            s.nets.push(NetRule { iface: format!("^{iface}$"), rps: Some(cpus(on)), xps: None });
        }
        s
    };
    // The files, each with whether it holds a mask (RPS) or a list (IRQ affinity).
    let mut files: Vec<(PathBuf, bool)> = irq.iter().map(|i| (i.affinity_file(), false)).collect();
    if let Some(iface) = &iface {
        files.extend(rtslice_host::irq::steering_files(Path::new("/sys/class/net"), iface).0.into_iter().map(|f| (f, true)));
    }
    let held = |f: &(PathBuf, bool)| {
        let s = read(&f.0);
        if f.1 { CpuList::parse_mask(&s).unwrap() } else { CpuList::parse(&s).unwrap() }
    };
    let original: Vec<String> = files.iter().map(|f| read(&f.0)).collect();
    let with_rules = |mut s: Setup, on: &str| {
        let r = rules(on);
        s.irqs = r.irqs;
        s.nets = r.nets;
        s
    };

    let (node, _) = Node::open(opts(dir)).expect("open the node");
    node.deploy(&reserved("b", l.shared, 100)).expect("deploy b");
    let bystander = views(&["b"]);
    let a = with_rules(reserved("a", l.shared, 200), l.shared);
    node.deploy(&a).expect("deploy a with IRQ and RPS rules");
    for f in &files {
        assert_eq!(held(f), cpus(l.shared), "{}: a's rule", f.0.display());
    }
    assert!(node.status(&name("a")).unwrap().drift.is_empty());

    // A second holder: refused before anything changes, the holder named.
    let c = with_rules(reserved("c", l.shared, 100), l.dedicated);
    let snap = snapshot();
    match node.deploy(&c) {
        Err(HostError::Rejected(why)) => assert!(why.contains("is held by workload") && why.contains(&name("a")), "{why}"),
        other => panic!("a second holder of a's files: expected a refusal, got {:?}", other.map(|r| r.name)),
    }
    assert!(node.record(&name("c")).unwrap().is_none(), "c left no segment");
    assert_restored(&snap);

    // Resize: new budget, same files, still on a's CPUs; other files refused.
    let bigger = with_rules(reserved("a", l.shared, 250), l.shared);
    node.resize(&bigger).expect("resize a");
    for f in &files {
        assert_eq!(held(f), cpus(l.shared), "{}: after a's resize", f.0.display());
    }
    let mut fewer = bigger.clone();
    (fewer.irqs, fewer.nets) = (Vec::new(), Vec::new());
    match node.resize(&fewer) {
        Err(HostError::Rejected(why)) => assert!(why.contains("which IRQs, queues or PCI devices"), "{why}"),
        other => panic!("a resize dropping a's rules: expected a refusal, got {:?}", other.map(|r| r.name)),
    }

    // Remove: every file holds what it held before a; then c may take them.
    node.remove(&name("a")).expect("remove a");
    let now: Vec<String> = files.iter().map(|f| read(&f.0)).collect();
    assert_eq!(now, original, "a's files put back");
    node.deploy(&c).expect("deploy c once a is gone");
    for f in &files {
        assert_eq!(held(f), cpus(l.dedicated), "{}: c's rule", f.0.display());
    }
    node.remove(&name("c")).expect("remove c");
    assert_eq!(files.iter().map(|f| read(&f.0)).collect::<Vec<_>>(), original, "c's files put back");
    assert_eq!(views(&["b"]), bystander, "b was not touched");
    node.reset().expect("reset");
    assert_restored(before);
}

/// `fair_server_off` and `hrtick` through the node. The fair server of a CPU that holds only reserved
/// real-time work (a dedicated workload's partition with a FIFO rule) gets runtime 0 while that
/// workload is deployed and its runtime back when it leaves; a CPU no such workload holds keeps its
/// own; HRTICK and HRTICK_DL are on for the node's life (or the base says why not: a kernel without
/// CONFIG_SCHED_HRTICK, as here natively); reset gives everything back.
#[test]
fn the_node_turns_fair_servers_off_under_reserved_partitions_while_they_are_deployed() {
    root_or_skip!();
    let Some(fx) = Fixture::start() else { return };
    let (before, dir) = (&fx.before, fx.dir.path());
    let l = layout().unwrap();
    let runtime = |cpu: &str| std::fs::read_to_string(format!("/sys/kernel/debug/sched/fair_server/cpu{cpu}/runtime")).map(|s| s.trim().to_string());
    let was = runtime(l.dedicated);
    skip_unless!(was.is_ok(), skip::FAIR_SERVER, "no fair server runtime for CPU {}: {:?}", l.dedicated, was);
    let was = was.unwrap();
    skip_unless!(was != "0", skip::FAIR_SERVER, "CPU {}'s fair server is off already", l.dedicated);
    let (node, _) = Node::open(NodeOptions { hrtick: true, fair_server_off: true, ..opts(dir) }).expect("open the node");
    skip_unless!(node.base().partitions, rtslice_testkit::skip::PARTITIONS, "{:?}", node.base().warnings);
    match std::fs::read_to_string(rtslice_host::SCHED_FEATURES) {
        Ok(list) if list.contains("HRTICK") => assert!(list.split_whitespace().any(|f| f == "HRTICK"), "HRTICK on: {list}"),
        _ => assert!(node.base().warnings.iter().any(|w| w.contains("hrtick")), "the base says why HRTICK is not on: {:?}", node.base().warnings),
    }
    let shared_was = runtime(l.shared).unwrap();
    node.deploy(&reserved("r", l.shared, 100)).expect("deploy r");
    node.deploy(&dedicated(&node, "d", l.dedicated)).expect("deploy d");
    assert_eq!(runtime(l.dedicated).unwrap(), "0", "CPU {}: d's partition holds only reserved RT work", l.dedicated);
    if l.mechanism == Mechanism::RtGroup {
        assert_eq!(runtime(l.shared).unwrap(), shared_was, "CPU {}: r shares it, no partition", l.shared);
    }
    assert!(node.base_status().unwrap().drift.is_empty(), "{:?}", node.base_status().unwrap().drift);
    node.remove(&name("d")).expect("remove d");
    assert_eq!(runtime(l.dedicated).unwrap(), was, "CPU {}: its runtime back once d is gone", l.dedicated);
    node.deploy(&dedicated(&node, "d", l.dedicated)).expect("deploy d again");
    assert_eq!(runtime(l.dedicated).unwrap(), "0");
    // The node keeps what it was created with: opened again without the flags (a daemon restarted
    // with others), d's CPU stays off and the opening says why.
    drop(node);
    let (node, opened) = Node::open(opts(dir)).expect("open the node again");
    assert!(opened.recovered.iter().any(|r| r.contains("keeps the settings it was created with")), "{:?}", opened.recovered);
    assert_eq!(runtime(l.dedicated).unwrap(), "0", "CPU {}: still off with d deployed", l.dedicated);
    node.reset().expect("reset");
    assert_eq!(runtime(l.dedicated).unwrap(), was);
    assert_restored(before);
}

/// Fault injection at every change of a deploy that claims what is node-wide: a shielded workload on
/// its own CPU whose rules steer an IRQ and a queue's RPS mask there. Each change of a clean deploy
/// fails in turn; each time the deploy reports the step, its rollback has no error, the host is as
/// before (IRQ affinities and RPS masks included, in the snapshot), the running workload keeps its
/// PIDs, files and thread policies, no process of the failed deploy is left, and a bystander process
/// of the root cpuset stays where it was (v1's shield moves it only once the deploy has succeeded).
#[test]
fn a_fault_at_any_change_of_a_deploy_claiming_an_irq_and_a_shield_rolls_back_exactly() {
    root_or_skip!();
    let Some(fx) = Fixture::start() else { return };
    let (before, dir) = (&fx.before, fx.dir.path());
    let l = layout().unwrap();
    let (irq, iface) = (movable_irq(), rps_interface());
    skip_unless!(irq.is_some() || iface.is_some(), rtslice_testkit::skip::IRQ_STEERING, "no IRQ whose affinity can be written, no interface with RPS files");
    let (mut node, _) = Node::open(opts(dir)).expect("open the node");
    skip_unless!(node.base().partitions, rtslice_testkit::skip::PARTITIONS, "{:?}", node.base().warnings);
    node.deploy(&reserved("b", l.shared, 100)).expect("deploy b");
    let mut s = dedicated(&node, "s", l.dedicated);
    s.workloads[0].partition = false;
    s.workloads[0].shield = true;
    if let Some(irq) = &irq {
        s.irqs.push(IrqRule { action: format!("^{}$", regex_escape(&irq.actions[0])), cpus: cpus(l.dedicated) });
    }
    if let Some(iface) = &iface {
        s.nets.push(NetRule { iface: format!("^{iface}$"), rps: Some(cpus(l.dedicated)), xps: None });
    }
    let bystander = rtslice_testkit::KillOnDrop(std::process::Command::new("sleep").arg("60").spawn().expect("spawn sleep"));
    let cpuset_of = |pid: u32| Some(cgroup_of(pid as i32)).filter(|c| !c.is_empty()).unwrap_or_else(|| "/".into());
    let was = cpuset_of(bystander.id());
    let base_line = snapshot();
    let others = views(&["b"]);
    let kids = children();

    node.deploy(&s).expect("deploy the shielded workload with its IRQ and RPS rules");
    if let Some(irq) = &irq {
        assert_eq!(CpuList::parse(&read(irq.affinity_file())).unwrap(), cpus(l.dedicated), "the IRQ is on the shielded CPU");
    }
    let n = node.status(&name("s")).unwrap().changes;
    node.remove(&name("s")).expect("remove s");
    assert_restored(&base_line);
    assert_eq!(cpuset_of(bystander.id()), was, "the bystander is back where it was");
    assert!(n >= 3, "{n} changes");
    fail_each_change_of_deploy(&mut node, &s, n, &base_line, |k| {
        assert_eq!(views(&["b"]), others, "fault {k} touched b");
        assert_eq!(children(), kids, "fault {k}: a process it started is left");
        assert_eq!(cpuset_of(bystander.id()), was, "fault {k} moved the bystander");
    });
    eprintln!("deploy with a shield, IRQ {:?} and RPS {:?}: {n} changes, each failed in turn, each rolled back exactly", irq.map(|i| i.number), iface);
    // The same deploy goes through once nothing fails, and its removal restores the host.
    node.deploy(&s).expect("deploy s after the faults");
    node.remove(&name("s")).expect("remove s");
    drop(bystander);
    node.reset().expect("reset");
    assert_restored(before);
}

/// A shield through the node: the shielded workload's CPUs are its own exclusive partition; on v2
/// the kernel takes them from every other task by itself, on v1 the node moves every other process
/// of the root cpuset into `system` while the shielded workload is deployed and back when it goes.
#[test]
fn a_shield_is_the_workload_s_partition_and_on_v1_moves_the_others_off_its_cpus() {
    root_or_skip!();
    let Some(fx) = Fixture::start() else { return };
    let (before, dir) = (&fx.before, fx.dir.path());
    let l = layout().unwrap();
    let (node, _) = Node::open(opts(dir)).expect("open the node");
    skip_unless!(node.base().partitions, rtslice_testkit::skip::PARTITIONS, "{:?}", node.base().warnings);
    let mut s = dedicated(&node, "s", l.dedicated);
    s.workloads[0].partition = false;
    s.workloads[0].shield = true;
    // A process of the host that is not the node's: where the shield must (not) move it.
    let bystander = rtslice_testkit::KillOnDrop(std::process::Command::new("sleep").arg("60").spawn().expect("spawn sleep"));
    // Its cpuset (from /proc/PID/cgroup: /proc/PID/cpuset exists only with CONFIG_CPUSETS_V1, which
    // 7.x kernels built for cgroup v2 alone leave out).
    let cpuset_of = |pid: u32| Some(cgroup_of(pid as i32)).filter(|c| !c.is_empty()).unwrap_or_else(|| "/".into());
    let was = cpuset_of(bystander.id());
    node.deploy(&s).expect("deploy a shielded workload");
    if is_v2() {
        let group = workload_group("s").cpuset;
        let part = if read(group.join("cpuset.cpus.partition")) == "member" { group.parent().unwrap().to_path_buf() } else { group };
        assert!(matches!(read(part.join("cpuset.cpus.partition")).as_str(), "root" | "isolated"), "{}: a valid partition", part.display());
        assert_eq!(CpuList::parse(&read(part.join("cpuset.cpus.effective"))).unwrap(), cpus(l.dedicated));
    } else {
        let group = workload_group("s").cpuset;
        assert_eq!(read(group.join("cpuset.cpu_exclusive")), "1", "the shielded group is exclusive");
        let system = group.parent().unwrap().join("system");
        let sys_cpus = CpuList::parse(&read(system.join("cpuset.cpus"))).unwrap();
        assert!(sys_cpus.intersection(&cpus(l.dedicated)).is_empty(), "system {sys_cpus} keeps off the shielded CPUs {}", l.dedicated);
        let now = cpuset_of(bystander.id());
        if was == "/" {
            assert!(now.ends_with("/system"), "a root-cpuset process moved into system while shielded: {now}");
        } else {
            assert_eq!(now, was, "only the root cpuset's processes move");
        }
    }
    node.remove(&name("s")).expect("remove s");
    assert_eq!(cpuset_of(bystander.id()), was, "back where it was once the shield is gone");
    drop(bystander);
    node.reset().expect("reset");
    assert_restored(before);
}
