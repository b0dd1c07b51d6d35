//! Helpers for the real-kernel tests: snapshots of every kernel value apply may touch, so a test can
//! assert that reset/rollback restored the host exactly.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rtslice_host::cgroup::{Backend, CgroupLayout, GroupPaths};
use rtslice_host::{irq, Mechanism};
use rtslice_testkit::{skip, OnDrop};

/// The cgroup backend rtslice drives here: v1 (cpuset + cpu hierarchies) on the development VM, the
/// unified v2 hierarchy in the real-kernel matrix's guests (`make test-kernels`).
pub fn backend() -> Backend {
    CgroupLayout::detect().expect("/proc/self/mountinfo").backend().expect("a cpuset+cpu backend")
}

/// True when the backend rtslice drives here is the unified (v2) hierarchy: the one cgroup-mode
/// check of the host and node tests (node's include this module). It fails the test on a host
/// where rtslice has no backend, which stays a failure rather than becoming a skip.
pub fn is_v2() -> bool {
    !backend().is_v1()
}

/// True when this host offers `mech` (see `rtslice doctor`); else records a skip for its need, and
/// the caller returns (or goes on without that mechanism: a partial skip).
pub fn has_mechanism(mech: Mechanism) -> bool {
    let ok = rtslice_host::doctor().mechanisms.contains(&mech);
    if !ok {
        skip::skip(skip::mechanism_need(&mech), format!("this host does not offer {mech}, {} (see rtslice doctor)", mech.describe()));
    }
    ok
}

/// The reservation mechanism the node's tests run under here, or `None` having skipped for what is
/// missing: cgroup v1 (the development VM) reserves with RT groups and needs 2 CPUs; cgroup v2 (the
/// kernel matrix's guests) with SCHED_DEADLINE in the node's partitions, CPU 0 kept as the
/// system's, on `v2_cpus` CPUs as `v2_layout` uses them.
pub fn node_mechanism_or_skip(v2_cpus: usize, v2_layout: &str) -> Option<Mechanism> {
    let online = rtslice_host::facts::online_cpus().len();
    let (mech, cpus, layout) = if is_v2() { (Mechanism::Deadline, v2_cpus, v2_layout) } else { (Mechanism::RtGroup, 2, "the reservations as RT groups") };
    let mode = if is_v2() { "cgroup v2" } else { "cgroup v1" };
    if online < cpus {
        skip::skip(skip::cpus_need(cpus), format!("on {mode} the node tests need {cpus} CPUs ({layout}), this host has {online}"));
        return None;
    }
    has_mechanism(mech).then_some(mech)
}

/// A workload's group in the driven hierarchy (v1: its cpuset and cpu dirs; v2: one dir), where the
/// node put it: under rtslice's parent, or inside the partition directory it shares or holds alone
/// (v1 `rtslice/_partition-<cpus>/<name>`, its cpu group staying `rtslice/<name>`; v2
/// `<root>/rtslice-partition-<cpus>/<name>`).
pub fn group(name: &str) -> GroupPaths {
    let b = backend();
    let g = b.group(name);
    if g.cpuset.exists() {
        return g;
    }
    let (dirs, prefix) = match &b {
        Backend::V1 { .. } => (b.parent().cpuset, "_partition-"),
        Backend::V2 { root } => (root.clone(), rtslice_host::cgroup::V2_PARTITION_PREFIX),
    };
    let inside = std::fs::read_dir(&dirs)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path().join(name))
        .find(|d| d.is_dir());
    match (inside, &b) {
        (Some(d), Backend::V1 { .. }) => GroupPaths { cpuset: d, cpu: g.cpu },
        (Some(d), Backend::V2 { .. }) => GroupPaths { cpuset: d.clone(), cpu: d },
        (None, _) => g,
    }
}

/// The cpuset directory that is a workload's scheduling partition: its own group, or the partition
/// directory the node put it in (see [`group`]).
pub fn partition_dir(name: &str) -> PathBuf {
    let g = group(name).cpuset;
    let parent = g.parent().map(Path::to_path_buf).unwrap_or_default();
    let named = parent.file_name().is_some_and(|n| {
        let n = n.to_string_lossy();
        n.starts_with("_partition-") || n.starts_with(rtslice_host::cgroup::V2_PARTITION_PREFIX)
    });
    if named { parent } else { g }
}

/// The file holding a workload's memory limit: v1 `memory.limit_in_bytes` in the memory hierarchy,
/// v2 `memory.max` in its unified group.
pub fn memory_limit_file(name: &str) -> PathBuf {
    match backend() {
        Backend::V1 { .. } => {
            let layout = CgroupLayout::detect().unwrap();
            layout.v1["memory"].join(rtslice_host::cgroup::V1_PARENT).join(name).join("memory.limit_in_bytes")
        }
        Backend::V2 { .. } => group(name).cpu.join("memory.max"),
    }
}

/// Asserts a workload's group is an exclusive scheduling partition, as each backend spells it: v1
/// `cpuset.cpu_exclusive=1` with load balancing off at the root; v2 `cpuset.cpus.partition` reading
/// back exactly `root` or `isolated` (never "root invalid (...)").
pub fn assert_partition(name: &str) {
    let g = GroupPaths { cpuset: partition_dir(name), cpu: group(name).cpu };
    match backend() {
        Backend::V1 { cpuset, .. } => {
            assert_eq!(read(g.cpuset.join("cpuset.cpu_exclusive")), "1", "{name}: an exclusive cpuset");
            assert_eq!(read(cpuset.join("cpuset.sched_load_balance")), "0", "the root stops balancing");
        }
        Backend::V2 { .. } => {
            let state = read(g.cpuset.join("cpuset.cpus.partition"));
            assert!(state == "root" || state == "isolated", "{name}: cpuset.cpus.partition reads {state:?}");
            assert_eq!(
                read(g.cpuset.join("cpuset.cpus.effective")),
                read(g.cpuset.join("cpuset.cpus")),
                "{name}: a valid partition gets all its CPUs"
            );
        }
    }
}

/// The cgroup of a process in the driven hierarchy, relative to its root ("/rtslice/x" on v1,
/// "/rtslice.slice/x" on v2).
pub fn cgroup_of(pid: i32) -> String {
    let b = backend();
    let abs = b.cgroup_of(&read(format!("/proc/{pid}/cgroup"))).expect("the process's cgroup");
    let root = b.root().cpuset;
    format!("/{}", abs.strip_prefix(&root).unwrap().display()).trim_end_matches('/').to_string()
}

/// Where a workload's group is, relative to the driven hierarchy's root, as [`cgroup_of`] spells it.
pub fn group_path(name: &str) -> String {
    let root = backend().root().cpuset;
    format!("/{}", group(name).cpuset.strip_prefix(&root).unwrap().display())
}

/// The RT budget the node's base gives rtslice's parent group (RT groups), µs every second: the
/// spec's default cap, at most the kernel's RT ratio.
pub fn node_cap_us() -> u64 {
    let rt_ratio = rtslice_host::HostFacts::detect().unwrap().rt_ratio;
    (rtslice_spec::DEFAULT_CAP.min(rt_ratio) * 1e6).floor() as u64
}

/// The driven parent's name (`rtslice` on v1, `rtslice.slice` on v2).
pub fn parent_name() -> &'static str {
    if is_v2() {
        rtslice_host::cgroup::V2_PARENT
    } else {
        rtslice_host::cgroup::V1_PARENT
    }
}

/// Everything apply may change, as path → content (cgroup dirs as "exists"): the root cpusets and
/// RT budgets, every cgroup directory of the driven hierarchies with its cpuset files and partition
/// state (v2: also the root's subtree_control and effective/isolated CPUs), IRQ affinities, RPS/XPS
/// masks and this process's cgroups. In a matrix guest (where nothing else runs) also every
/// thread's policy and affinity; natively other programs legitimately change their own threads.
pub fn snapshot() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut read = |p: &Path| {
        if let Ok(s) = std::fs::read_to_string(p) {
            m.insert(p.display().to_string(), s.trim().to_string());
        }
    };
    for f in [
        "/sys/fs/cgroup/cpuset/cpuset.sched_load_balance",
        "/sys/fs/cgroup/cpuset/cpuset.cpus",
        "/sys/fs/cgroup/cpu/cpu.rt_runtime_us",
        "/sys/fs/cgroup/cpu/cpu.rt_period_us",
        "/proc/sys/kernel/sched_rt_runtime_us",
        "/sys/fs/cgroup/cgroup.subtree_control",
        // HCBS: the root group's budget, which apply raises and reset gives back.
        "/sys/fs/cgroup/cpu.rt.max",
        "/sys/fs/cgroup/cpuset.cpus.effective",
        "/sys/fs/cgroup/cpuset.cpus.isolated",
        "/sys/kernel/debug/sched/features",
    ] {
        read(Path::new(f));
    }
    for cpu in rtslice_host::facts::online_cpus().iter() {
        for f in ["runtime", "period"] {
            read(Path::new(&format!("/sys/kernel/debug/sched/fair_server/cpu{cpu}/{f}")));
        }
    }
    for i in irq::read_interrupts().unwrap() {
        read(&i.affinity_file());
    }
    for iface in irq::interfaces(Path::new("/sys/class/net")) {
        let (rps, xps) = irq::steering_files(Path::new("/sys/class/net"), &iface);
        for f in rps.iter().chain(xps.iter()) {
            read(f);
        }
    }
    // Our own cgroups (the test process must end where it started). The memory hierarchy's root
    // cgroup.procs is not listed (it changes with every process on the host).
    read(Path::new("/proc/self/cgroup"));
    // The cgroup tree of the hierarchies rtslice drives (v1 cpuset and cpu, or the unified one).
    let root = backend().root();
    let mut dirs = vec![root.cpuset.clone()];
    if root.cpu != root.cpuset {
        dirs.push(root.cpu.clone());
    }
    let mut tree = Vec::new();
    for d in dirs {
        walk_dirs(&d, &mut tree);
    }
    for d in tree {
        m.insert(d.display().to_string(), "exists".into());
        for f in ["cpuset.cpus", "cpuset.cpu_exclusive", "cpuset.cpus.partition", "cpuset.cpus.exclusive", "cgroup.subtree_control"] {
            if let Ok(s) = std::fs::read_to_string(d.join(f)) {
                m.insert(d.join(f).display().to_string(), s.trim().to_string());
            }
        }
    }
    for e in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        for name in ["rtslice", "rtslice.slice"] {
            let d = e.path().join(name);
            if d.exists() {
                m.insert(d.display().to_string(), "exists".into());
            }
        }
    }
    if rtslice_testkit::in_guest() {
        for (tid, v) in thread_attributes() {
            m.insert(format!("thread {tid}"), v);
        }
    }
    m
}

fn walk_dirs(d: &Path, out: &mut Vec<PathBuf>) {
    out.push(d.to_path_buf());
    let Ok(rd) = std::fs::read_dir(d) else { return };
    for e in rd.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            walk_dirs(&e.path(), out);
        }
    }
}

/// "comm policy affinity" of every thread on the host, by "pid/tid".
fn thread_attributes() -> Vec<(String, String)> {
    let mut v = Vec::new();
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = p.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(tasks) = std::fs::read_dir(p.path().join("task")) else { continue };
        for t in tasks.flatten() {
            let Ok(tid) = t.file_name().to_string_lossy().parse::<i32>() else { continue };
            // IRQ threads (threaded IRQs; all of them on PREEMPT_RT) copy their IRQ's *effective*
            // affinity, which the kernel re-chooses at every smp_affinity write and the thread picks
            // up lazily at its next interrupt: not a value reset can or should restore. The IRQ's
            // own smp_affinity_list is compared above. (A kworker's comm names its current work
            // item, so only policy and affinity are compared.)
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if comm.starts_with("irq/") || rtslice_host::sched::no_setaffinity(tid) {
                continue; // and the kernel owns the affinity of PF_NO_SETAFFINITY threads
            }
            // An exited thread runs nothing: the kernel's cpuset updates skip it, so its affinity is
            // whatever it had, or was set to, when it died (sched_setaffinity still succeeds on a
            // zombie), not a state a reset owns. The processes a test started are checked apart
            // (assert_no_children_left).
            if rtslice_sys::procfs::process_stat(tid).is_none_or(|s| matches!(s.state, 'Z' | 'X')) {
                continue;
            }
            let (Ok(policy), Ok(aff)) = (rtslice_host::sched::get_attr(tid), rtslice_host::sched::get_affinity(tid)) else {
                continue;
            };
            v.push((format!("{pid}/{tid} {}", comm.split('-').next().unwrap_or("").trim()), format!("{policy:?} [{aff}]")));
        }
    }
    v
}

/// Threads that exist in only one of two snapshots came or went (a test's own workloads, kernel
/// workers): only the threads present in both must match.
fn comparable(k: &str, other: &BTreeMap<String, String>) -> bool {
    !k.starts_with("thread ") || other.contains_key(k)
}

pub fn assert_same(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) {
    let diffs = differences(before, after);
    assert!(diffs.is_empty(), "kernel state differs:\n{}\n{}", diffs.join("\n"), who_else_runs());
}

/// The kernel state after a reset or a rollback is `before`, once the kernel has finished what the
/// reset started. cgroup v2 hands a removed partition's CPUs back to its parent when it takes the
/// group offline, asynchronously, and updates the effective CPUs first and the affinity of the
/// parent's tasks after, one by one, under a lock userspace cannot wait on: a snapshot can run in
/// between (docs/testing.md, flaky runs, has the leaked process first blamed on this). So while
/// every difference is a thread's attributes, the snapshot is taken again, for at most 10 s; any
/// other difference fails at once.
pub fn assert_restored(before: &BTreeMap<String, String>) {
    let end = Instant::now() + Duration::from_secs(10);
    let mut after = snapshot();
    loop {
        let diffs = differences(before, &after);
        let settling = !diffs.is_empty() && diffs.iter().all(|d| d.starts_with("thread "));
        if !settling || Instant::now() >= end {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        after = snapshot();
    }
    assert_same(before, &after);
}

fn differences(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Vec<String> {
    let mut diffs = Vec::new();
    for (k, v) in before.iter().filter(|(k, _)| comparable(k, after)) {
        match after.get(k) {
            Some(a) if a == v => {}
            other => diffs.push(format!("{k}: before {v:?}, after {other:?}")),
        }
    }
    for (k, v) in after.iter().filter(|(k, _)| comparable(k, before)) {
        if !before.contains_key(k) {
            diffs.push(format!("{k}: new {v:?}"));
        }
    }
    diffs
}

/// Every process an apply started, the rollback or reset that followed stopped and reaped: none of
/// this test process's children is left, running or unreaped: a process a rollback missed lives on
/// in the root cgroup and changes what later tests see (docs/testing.md, flaky runs).
pub fn assert_no_children_left(what: &str) {
    let left = children();
    assert!(left.is_empty(), "{what}: processes this test started are still there: {left:?}");
}

/// This test process's children, alive ("pid comm") or exited and unreaped ("pid comm (unreaped)"),
/// by PID. Not the scheduler state itself: a live child reads R or S depending on the instant (a CI
/// run compared "S" with "R" for the same sleep, on two guests).
pub fn children() -> Vec<String> {
    let me = std::process::id() as i32;
    let mut v: Vec<(i32, String)> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter_map(|pid| Some((pid, rtslice_sys::procfs::process_stat(pid)?)))
        .filter(|(_, s)| s.ppid == me)
        .map(|(pid, s)| (pid, if matches!(s.state, 'Z' | 'X') { format!("{pid} {} (unreaped)", s.comm) } else { format!("{pid} {}", s.comm) }))
        .collect();
    v.sort();
    v.into_iter().map(|(_, s)| s).collect()
}

/// Other rtslice processes alive now (their command lines): a difference nobody in this test wrote
/// may be an earlier test's child still resetting or re-ruling.
fn who_else_runs() -> String {
    let v: Vec<String> = rtslice_host::irq::pids_named("rtslice")
        .into_iter()
        .map(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            format!("{pid}: {}", String::from_utf8_lossy(&cmd).replace('\0', " ").trim())
        })
        .collect();
    if v.is_empty() { "no other rtslice process runs".to_string() } else { format!("other rtslice processes: {}", v.join("; ")) }
}

/// `s` as a regex matching itself (an IRQ action's name in a rule).
pub fn regex_escape(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c.to_string() } else { format!("\\{c}") }).collect()
}

/// An IRQ whose affinity can be written here (managed IRQs refuse any write, even of the same value).
pub fn movable_irq() -> Option<irq::Irq> {
    irq::read_interrupts().ok()?.into_iter().find(|i| {
        let f = i.affinity_file();
        std::fs::read_to_string(&f).map(|cur| std::fs::write(&f, cur.trim()).is_ok()).unwrap_or(false)
    })
}

/// An interface with RPS files.
pub fn rps_interface() -> Option<String> {
    irq::interfaces(Path::new("/sys/class/net"))
        .into_iter()
        .find(|i| !irq::steering_files(Path::new("/sys/class/net"), i).0.is_empty())
}

pub fn read(p: impl AsRef<Path>) -> String {
    std::fs::read_to_string(p.as_ref()).unwrap_or_else(|e| panic!("{}: {e}", p.as_ref().display())).trim().to_string()
}

/// CPU time (utime + stime, in clock ticks) of one thread/process.
pub fn cpu_ticks(pid: i32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some(i) = s.rfind(')') else { return 0 };
    let f: Vec<&str> = s[i + 2..].split_whitespace().collect();
    f.get(11).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0) + f.get(12).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0)
}

/// Fraction of one CPU a process used over `window` (from /proc ticks, so resolution is 1/HZ).
pub fn measure_share(pid: i32, window: Duration) -> f64 {
    let hz = rtslice_sys::procfs::ticks_per_second() as f64;
    let t0 = Instant::now();
    let c0 = cpu_ticks(pid);
    std::thread::sleep(window);
    let c1 = cpu_ticks(pid);
    (c1 - c0) as f64 / hz / t0.elapsed().as_secs_f64()
}

pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    f()
}

pub fn sh() -> PathBuf {
    PathBuf::from("/bin/sh")
}

/// Resets the state directory `path` on drop, so a failing assertion does not leave the host
/// modified (the temp state dir must outlive it: declare the guard after the dir). A second reset
/// after the test's own is a no-op. Boxed, so a fixture struct can hold it as a field.
pub fn reset_on_drop(path: &Path) -> OnDrop<Box<dyn FnOnce()>> {
    let dir = rtslice_host::StateDir::new(path);
    OnDrop::new(Box::new(move || {
        if let Err(e) = rtslice_host::reset(&dir, rtslice_host::ResetOptions::default()) {
            eprintln!("cleanup reset failed: {e}");
        }
    }))
}

/// The shipped example files (the top level of examples/), sorted.
pub fn shipped_examples() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(examples_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    v.sort();
    v
}

/// The repository's examples/ directory.
pub fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// `s` with the kernel parameters the planner gives its reservations under `mech` (`None`: the
/// mechanism apply takes on this host), as `rtslice_plan::kernel::kernel_workload` computes them for
/// a planned workload: under SCHED_DEADLINE the reservation split over its FIFO/RR rules (each at its
/// rule's period), SCHED_FLAG_RECLAIM where it reclaims; under RT groups and HCBS the group's budget
/// (HCBS: what its SCHED_DEADLINE rules leave). A setup built by hand states these itself; the host
/// computes none.
pub fn planned(mut s: rtslice_host::Setup, mech: Option<Mechanism>) -> rtslice_host::Setup {
    use rtslice_host::SchedAttr;
    let mech = mech.unwrap_or_else(|| {
        let facts = rtslice_host::HostFacts::detect().expect("this host's facts");
        rtslice_host::resolve_mechanism(&s, &facts, None).expect("a reservation mechanism")
    });
    s.mechanism = Some(mech);
    for w in s.workloads.iter_mut() {
        let Some(res) = w.reservation.map(|r| r.whole_micros()) else { continue };
        let is_rt = |p: &Option<SchedAttr>| matches!(p, Some(SchedAttr::Fifo { .. } | SchedAttr::Rr { .. }));
        let deadline = |p: &Option<SchedAttr>| match *p {
            Some(SchedAttr::Deadline { runtime_ns, period_ns, .. }) => Some((runtime_ns, period_ns)),
            _ => None,
        };
        w.group_budget = None;
        match mech {
            Mechanism::Deadline => {
                let shares: Vec<(Option<f64>, Option<Duration>)> =
                    w.threads.iter().filter(|r| is_rt(&r.policy)).map(|r| (None, r.period_ns.map(Duration::from_nanos))).collect();
                let mut parts = rtslice_plan::kernel::deadline_budgets(res, w.cpus.len() as u32, &shares).into_iter();
                for r in w.threads.iter_mut().filter(|r| is_rt(&r.policy)) {
                    let b = parts.next().expect("one part per real-time rule");
                    r.policy = Some(SchedAttr::Deadline { runtime_ns: b.runtime_ns, deadline_ns: b.period_ns, period_ns: b.period_ns, reclaim: false });
                }
            }
            Mechanism::RtGroup => w.group_budget = Some(res),
            Mechanism::Hcbs => {
                let dl: Vec<(u64, u64)> = w.threads.iter().filter_map(|r| deadline(&r.policy)).collect();
                w.group_budget = rtslice_plan::kernel::hcbs_group_budget(res, w.cpus.len() as u32, &dl)
                    .map(|b| rtslice_host::Reservation::from_micros(b.runtime_us, b.period_us));
            }
            Mechanism::None => {}
        }
        for r in w.threads.iter_mut() {
            if let Some(SchedAttr::Deadline { reclaim, .. }) = r.policy.as_mut() {
                *reclaim = w.reclaim;
            }
        }
    }
    s
}
