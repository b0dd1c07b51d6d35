//! Cache allocation (CAT) and memory-bandwidth ceilings (MBA) through Linux resctrl: one control
//! group per workload that asked (`<root>/rtslice-<workload>`), its `schemata` (the L3 and MB lines
//! of the plan), its threads in `tasks`, and the default group's `schemata` narrowed to the ways no
//! workload holds. Every write goes through the transaction (`Txn::mkdir_resctrl`,
//! `Txn::write_resctrl`, `Txn::move_task`), journaled before it is made, so rollback, `reset` and
//! crash recovery restore exactly. The root is a parameter (default `/sys/fs/resctrl`); reading and
//! parsing resctrl's files is `rtslice_sys::resctrl`'s.
//!
//! Threads born later need nothing from the agent: the kernel puts a new task in its parent's
//! control group (Documentation/arch/x86/resctrl.rst, "Resource alloc and monitor groups"), so
//! every thread a moved thread creates is in the workload's group from birth.
//!
//! A directory shaped like resctrl (tests; this development machine has no resctrl) differs from
//! the kernel's file system in four ways this module models, and only these: `mkdir` there
//! creates no `schemata`/`tasks` files (made here, `schemata` a copy of the root's, as the kernel
//! initializes a new group to the default allocation), `rmdir` of a non-empty plain directory fails
//! (the modelled files are removed first), a write to `tasks` replaces the file instead of
//! moving one thread, and a write to `schemata` is merged into it as the kernel changes only the
//! entries written (`resctrl_files::write`). Invalid masks are not refused there: the planner and `check` refuse them
//! before anything is written. On the real file system (`statfs` says RDTGROUP_SUPER_MAGIC) none of
//! this modelling runs.

use std::path::{Path, PathBuf};

use rtslice_plan::{CachePlan, WorkloadCache};
use rtslice_spec::{CacheDomain, Mba, NodeCache};

use crate::error::{HostError, Result};
use crate::txn::Txn;

pub use rtslice_sys::resctrl::DEFAULT_ROOT;
pub use crate::resctrl_files::{LAST_CMD_STATUS, SCHEMATA, TASKS};
/// Groups rtslice creates are named `rtslice-<workload>` so they never collide with another tool's.
pub const GROUP_PREFIX: &str = "rtslice-";

/// A resctrl file system (or a directory shaped like one) at `root`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resctrl {
    pub root: PathBuf,
}

impl Default for Resctrl {
    fn default() -> Resctrl {
        Resctrl { root: PathBuf::from(DEFAULT_ROOT) }
    }
}

impl Resctrl {
    pub fn new(root: impl Into<PathBuf>) -> Resctrl {
        Resctrl { root: root.into() }
    }

    /// The control group of `workload`.
    pub fn group(&self, workload: &str) -> PathBuf {
        self.root.join(format!("{GROUP_PREFIX}{workload}"))
    }

    /// The node's L3 as the planner takes it, from `info/L3`, `info/MB` and the CPUs' cache ids
    /// (`sysfs_root`: "/" on a host); `Ok(None)` without L3 allocation (or with CDP on, whose
    /// L3CODE/L3DATA lines rtslice does not write).
    pub fn discover(&self, sysfs_root: &Path, online: &[u32]) -> Result<Option<NodeCache>> {
        let info = rtslice_sys::resctrl::read_info(&self.root).map_err(|e| HostError::other(e.to_string()))?;
        let Some(info) = info.filter(|i| !i.cdp) else { return Ok(None) };
        let ways = info.cbm_mask.count_ones();
        let mut domains: Vec<CacheDomain> = info.domains.iter().map(|&id| CacheDomain { id, cpus: Vec::new() }).collect();
        for &cpu in online {
            // Without cache ids (some VMs) one domain holds every CPU.
            let id = rtslice_sys::topology::llc_id(sysfs_root, cpu).or(info.domains.first().copied()).unwrap_or(0);
            match domains.iter_mut().find(|d| d.id == id) {
                Some(d) => d.cpus.push(cpu),
                None => domains.push(CacheDomain { id, cpus: vec![cpu] }),
            }
        }
        domains.retain(|d| !d.cpus.is_empty());
        Ok(Some(NodeCache {
            ways,
            min_ways: info.min_cbm_bits.max(1),
            closids: info.num_closids,
            shareable_mask: info.shareable_bits,
            domains,
            mba: info.mba.map(|(min, granularity)| Mba { min, granularity }),
        }))
    }

    /// Refuses, before anything is touched, a cache plan this resctrl cannot take: no L3 allocation
    /// here, fewer ways or classes of service than planned, an L3 id the host lacks.
    pub fn check(&self, plan: &CachePlan) -> Result<()> {
        let info = rtslice_sys::resctrl::read_info(&self.root).map_err(|e| HostError::other(e.to_string()))?;
        let Some(info) = info else {
            return Err(HostError::Unsupported {
                what: format!("cache allocation: no resctrl L3 at {}", self.root.display()),
                fix: format!(
                    "mount it (`mount -t resctrl resctrl {}`) on a CPU with CAT (flags cat_l3/rdt_a in /proc/cpuinfo), or drop \
                     `cache`/`memoryBandwidth` from the spec",
                    self.root.display()
                ),
            });
        };
        let mut problems = Vec::new();
        if info.cdp {
            problems.push("code/data prioritization is on (L3CODE/L3DATA); remount resctrl without `-o cdp`".to_string());
        }
        if plan.cbm_mask & !info.cbm_mask != 0 {
            problems.push(format!("the plan's cbm_mask {:x} exceeds the host's {:x}", plan.cbm_mask, info.cbm_mask));
        }
        if plan.closids_used > info.num_closids {
            problems.push(format!("the plan uses {} classes of service, the host has {}", plan.closids_used, info.num_closids));
        }
        for d in plan.domains.iter().filter(|d| !info.domains.contains(&d.id)) {
            problems.push(format!("L3 id {} is not in {}/schemata (ids: {:?})", d.id, self.root.display(), info.domains));
        }
        if plan.mba.is_some() && info.mba.is_none() {
            problems.push("the plan sets memory bandwidth but the host has no info/MB".into());
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(HostError::Rejected(format!(
                "the cache plan does not fit resctrl at {}: {}; plan against this host (drop node.cache from the spec to discover it)",
                self.root.display(),
                problems.join("; ")
            )))
        }
    }

    /// The default group's schemata narrowed to the ways no workload holds (journaled; undo writes
    /// the previous schemata back). Nothing is written when no way is reserved.
    pub fn narrow_default(&self, txn: &mut Txn, plan: &CachePlan) -> Result<()> {
        if !plan.narrows_default() {
            return Ok(());
        }
        txn.write_resctrl(&self.root.join(SCHEMATA), &plan.default_schemata())
    }

    /// Creates `workload`'s group and writes its schemata (both journaled).
    pub fn create_group(&self, txn: &mut Txn, workload: &str, cache: &WorkloadCache) -> Result<PathBuf> {
        let dir = self.group(workload);
        txn.mkdir_resctrl(&dir)?;
        txn.write_resctrl(&dir.join(SCHEMATA), &cache.schemata())?;
        Ok(dir)
    }

    /// Moves each of `tids` into `workload`'s group, journaling the group each was in; returns how
    /// many moved (threads that exited meanwhile are skipped).
    pub fn assign(&self, txn: &mut Txn, workload: &str, tids: &[i32]) -> Result<usize> {
        let to = self.group(workload).join(TASKS);
        let mut moved = 0;
        for &tid in tids {
            let from = match rtslice_sys::resctrl::task_group(tid) {
                Some(g) if !g.is_empty() => self.root.join(g).join(TASKS),
                _ => self.root.join(TASKS),
            };
            if from == to {
                continue;
            }
            if txn.move_task(tid, &from, &to)? {
                moved += 1;
            }
        }
        Ok(moved)
    }

    /// Moves every thread of a launched workload (its cpuset group `cpuset`) into its group. Threads they create later are born
    /// in it (the kernel's inheritance); threads created while this runs by a thread not yet moved
    /// are caught by reading the thread list again until it stops growing.
    pub fn assign_workload(&self, txn: &mut Txn, workload: &str, cpuset: &Path) -> Result<()> {
        let mut done: Vec<i32> = Vec::new();
        for _ in 0..5 {
            let fresh: Vec<i32> = crate::rules::workload_threads(cpuset)
                .into_iter()
                .map(|(_, tid, _)| tid)
                .filter(|t| !done.contains(t))
                .collect();
            if fresh.is_empty() {
                break;
            }
            self.assign(txn, workload, &fresh)?;
            done.extend(fresh);
        }
        Ok(())
    }

    /// LLC occupancy (bytes) and memory traffic (bytes, a counter) of `workload`'s own group.
    pub fn monitor(&self, workload: &str) -> Option<(u64, u64)> {
        rtslice_sys::resctrl::monitor(&self.group(workload))
    }
}


#[cfg(test)]
mod tests {
    //! Against a plain directory shaped like resctrl (rtslice_testkit::resctrl), not the kernel's
    //! file system: this machine has no RDT (no `resctrl` in /proc/filesystems, no `cat_l3`/`rdt_a`
    //! CPU flag) and qemu cannot emulate it. What the shaped directory does not model (the kernel
    //! refusing a bad mask, a task leaving its old group) is said in the module comment.

    use super::*;
    use crate::journal::{State, StateDir};
    use crate::txn::Fault;
    use rtslice_plan::{plan, NodeFacts};
    use rtslice_testkit::resctrl::{make, snapshot, xeon_2s};

    /// Threads of this test process parked until dropped: real thread ids to move.
    struct Parked {
        tids: Vec<i32>,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
        handles: Vec<std::thread::JoinHandle<()>>,
    }

    impl Parked {
        fn spawn(n: usize) -> Parked {
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (tx, rx) = std::sync::mpsc::channel();
            let handles = (0..n)
                .map(|_| {
                    let (tx, stop) = (tx.clone(), stop.clone());
                    std::thread::spawn(move || {
                        tx.send(rtslice_sys::thread::gettid()).unwrap();
                        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                            std::thread::park_timeout(std::time::Duration::from_millis(20));
                        }
                    })
                })
                .collect();
            let tids = (0..n).map(|_| rx.recv().unwrap()).collect();
            Parked { tids, stop, handles }
        }
    }

    impl Drop for Parked {
        fn drop(&mut self) {
            self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
            for h in self.handles.drain(..) {
                h.thread().unpark();
                let _ = h.join();
            }
        }
    }

    /// The shaped directory's L3 (discovered, as on a host), and a plan with two workloads holding
    /// ways and a bandwidth ceiling.
    fn planned(root: &Path) -> rtslice_plan::Plan {
        let rc = Resctrl::new(root);
        let cache = rc.discover(Path::new("/nonexistent-sysfs"), &[0, 1, 2, 3]).unwrap().unwrap();
        let spec = rtslice_spec::parse(
            "apiVersion: rtslice/v1\nnode: {cpus: 0-3}\nworkloads:\n\
             - {name: du, demand: {dedicated: {count: 1}}, cache: {ways: 4}, memoryBandwidth: 50%}\n\
             - {name: cu, demand: {reservation: {runtime: 10ms, period: 100ms}}, cache: {share: 20%}}\n",
            "t.yaml",
        )
        .unwrap();
        let p = plan(&spec, &NodeFacts { online: vec![0, 1, 2, 3], cache: Some(cache), ..NodeFacts::default() });
        assert!(p.rejected.is_empty(), "{:?}", p.rejected);
        p
    }

    /// Narrow, create both groups, move the threads: what apply's cache steps do.
    fn run(rc: &Resctrl, txn: &mut Txn, p: &rtslice_plan::Plan, tids: &[i32]) -> Result<()> {
        let cp = p.cache.as_ref().unwrap();
        rc.check(cp)?;
        rc.narrow_default(txn, cp)?;
        for w in &p.workloads {
            rc.create_group(txn, &w.name, w.cache.as_ref().unwrap())?;
        }
        rc.assign(txn, "du", &tids[..2])?;
        rc.assign(txn, "cu", &tids[2..])?;
        Ok(())
    }

    #[test]
    fn discovered_l3_of_a_resctrl_shaped_directory() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(Resctrl::new(d.path()).discover(Path::new("/"), &[0]).unwrap(), None, "empty: no resctrl");
        make(d.path(), &xeon_2s());
        let c = Resctrl::new(d.path()).discover(Path::new("/nonexistent-sysfs"), &[0, 1]).unwrap().unwrap();
        assert_eq!((c.ways, c.min_ways, c.closids, c.shareable_mask), (11, 1, 16, 0x600));
        // Without the CPUs' cache ids every CPU falls in the first L3.
        assert_eq!(c.domains, vec![CacheDomain { id: 0, cpus: vec![0, 1] }]);
        assert_eq!(c.mba, Some(Mba { min: 10, granularity: 10 }));
        // With cache ids in sysfs (a copied tree: CPUs 0-1 on L3 0, 2-3 on L3 1), one domain per L3.
        let sysfs = tempfile::tempdir().unwrap();
        for cpu in 0..4u32 {
            let idx = sysfs.path().join(format!("sys/devices/system/cpu/cpu{cpu}/cache/index3"));
            std::fs::create_dir_all(&idx).unwrap();
            std::fs::write(idx.join("level"), "3\n").unwrap();
            std::fs::write(idx.join("id"), format!("{}\n", cpu / 2)).unwrap();
        }
        let c = Resctrl::new(d.path()).discover(sysfs.path(), &[0, 1, 2, 3]).unwrap().unwrap();
        assert_eq!(c.domains, vec![CacheDomain { id: 0, cpus: vec![0, 1] }, CacheDomain { id: 1, cpus: vec![2, 3] }]);
    }

    /// A resctrl-shaped directory, its snapshot before anything, the plan, and threads to move.
    struct Fixture {
        root: tempfile::TempDir,
        before: std::collections::BTreeMap<String, String>,
        plan: rtslice_plan::Plan,
        rc: Resctrl,
        threads: Parked,
    }

    impl Fixture {
        fn new() -> Fixture {
            let root = tempfile::tempdir().unwrap();
            make(root.path(), &xeon_2s());
            let before = snapshot(root.path());
            let plan = planned(root.path());
            let rc = Resctrl::new(root.path());
            Fixture { root, before, plan, rc, threads: Parked::spawn(3) }
        }

        /// The cache steps with a fresh journal in `sd`, the fault given.
        fn run(&self, sd: &StateDir, state: &mut State, fault: Fault, rollback: bool) -> Result<usize> {
            let mut txn = Txn::begin(sd, state, fault);
            let r = run(&self.rc, &mut txn, &self.plan, &self.threads.tids).map(|()| txn.state.changes.len());
            if rollback {
                let errors = txn.rollback();
                assert!(errors.is_empty(), "{fault:?}: {errors:?}");
            }
            r
        }

        fn unchanged(&self) -> bool {
            snapshot(self.root.path()) == self.before
        }
    }

    #[test]
    fn apply_writes_the_groups_and_reset_restores_the_resctrl_shaped_directory_exactly() {
        let f = Fixture::new();
        let state_dir = tempfile::tempdir().unwrap();
        let sd = StateDir::new(state_dir.path());
        f.run(&sd, &mut State::new(), Fault::default(), false).unwrap();
        let (root, rc, tids) = (f.root.path(), &f.rc, &f.threads.tids);
        // 11 ways, the top two shareable: du's 4 ways and cu's 3 (20% of 11, rounded up) come from
        // the bottom, the default group keeps the rest (shareable ways included).
        // Only the entries written change (L3 1 and the MB lines stay as they were, as the kernel's do).
        assert_eq!(std::fs::read_to_string(root.join("schemata")).unwrap(), "L3:0=780;1=7ff\nMB:0=100;1=100\n");
        assert_eq!(std::fs::read_to_string(rc.group("du").join(SCHEMATA)).unwrap(), "L3:0=f;1=7ff\nMB:0=50;1=100\n");
        assert_eq!(std::fs::read_to_string(rc.group("cu").join(SCHEMATA)).unwrap(), "L3:0=70;1=7ff\nMB:0=100;1=100\n");
        // A plain file keeps only the last id written; the kernel's `tasks` would list both.
        assert_eq!(std::fs::read_to_string(rc.group("du").join(TASKS)).unwrap(), format!("{}\n", tids[1]));
        let journal = sd.load().unwrap().unwrap().changes;
        let moved = journal.iter().filter(|c| matches!(c, crate::journal::Change::ResctrlTask { .. })).count();
        assert_eq!(moved, 3, "each thread's move is journaled");
        // Reset from the journal on disk, as `rtslice reset` does.
        let report = crate::reset::reset(&sd, crate::reset::ResetOptions::default()).unwrap();
        assert_eq!(report.undone, journal.len());
        assert!(f.unchanged(), "reset leaves the resctrl-shaped directory as it found it");
    }

    #[test]
    fn a_fault_at_every_change_rolls_back_exactly() {
        let f = Fixture::new();
        let scratch = tempfile::tempdir().unwrap();
        let total = f.run(&StateDir::new(scratch.path()), &mut State::new(), Fault::default(), true).unwrap();
        // narrow, 2 × (mkdir + schemata), 3 threads
        assert_eq!(total, 8);
        assert!(f.unchanged());
        for k in 0..total {
            let sd_dir = tempfile::tempdir().unwrap();
            let mut state = State::new();
            let e = f.run(&StateDir::new(sd_dir.path()), &mut state, Fault { fail_change: Some(k) }, true).unwrap_err();
            assert!(e.to_string().contains(&format!("injected fault at change #{k}")), "{e}");
            assert!(state.changes.is_empty(), "rollback emptied the journal");
            assert!(f.unchanged(), "fault at change #{k} left the directory changed");
        }
    }

    #[test]
    fn a_crash_mid_apply_is_undone_by_reset_from_the_journal() {
        let f = Fixture::new();
        for crash_at in [1, 3, 5, 7] {
            let sd_dir = tempfile::tempdir().unwrap();
            let sd = StateDir::new(sd_dir.path());
            // The process "dies" where the fault hits: no rollback runs, the journal on disk holds
            // every change made so far.
            assert!(f.run(&sd, &mut State::new(), Fault { fail_change: Some(crash_at) }, false).is_err());
            assert!(!f.unchanged(), "the crash at #{crash_at} left changes behind");
            assert_eq!(sd.load().unwrap().unwrap().changes.len(), crash_at);
            crate::reset::reset(&sd, crate::reset::ResetOptions::default()).unwrap();
            assert!(f.unchanged(), "reset after a crash at change #{crash_at}");
        }
    }

    #[test]
    fn a_refused_write_carries_resctrls_reason() {
        let root = tempfile::tempdir().unwrap();
        make(root.path(), &xeon_2s());
        std::fs::write(root.path().join("info/last_cmd_status"), "Mask not contiguous\n").unwrap();
        // A directory where the file should be: the write fails like a refused one would.
        std::fs::create_dir(root.path().join("rtslice-x")).unwrap();
        std::fs::create_dir(root.path().join("rtslice-x/schemata")).unwrap();
        let e = crate::resctrl_files::write(&root.path().join("rtslice-x/schemata"), "L3:0=5").unwrap_err().to_string();
        assert!(e.contains("Mask not contiguous") && e.contains("rtslice-x/schemata"), "{e}");
    }

    #[test]
    fn check_refuses_a_plan_the_host_cannot_take_before_anything_is_written() {
        let root = tempfile::tempdir().unwrap();
        let e = Resctrl::new(root.path()).check(&rtslice_plan::CachePlan::default()).unwrap_err().to_string();
        assert!(e.contains("mount -t resctrl"), "{e}");
        make(root.path(), &rtslice_sys::resctrl::ResctrlInfo { num_closids: 2, ..xeon_2s() });
        let p = planned(&{
            let other = tempfile::tempdir().unwrap();
            make(other.path(), &xeon_2s());
            other.keep()
        });
        let before = snapshot(root.path());
        let e = Resctrl::new(root.path()).check(p.cache.as_ref().unwrap()).unwrap_err().to_string();
        assert!(e.contains("3 classes of service, the host has 2"), "{e}");
        assert_eq!(snapshot(root.path()), before);
    }
}
