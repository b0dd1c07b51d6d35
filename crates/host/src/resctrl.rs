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
//! the kernel's file system in three ways this module models, and only these: `mkdir` there
//! creates no `schemata`/`tasks` files (made here, `schemata` a copy of the root's, as the kernel
//! initializes a new group to the default allocation), `rmdir` of a non-empty plain directory fails
//! (the modelled files are removed first), and a write to `tasks` replaces the file instead of
//! moving one thread. Invalid masks are not refused there: the planner and `check` refuse them
//! before anything is written. On the real file system (`statfs` says RDTGROUP_SUPER_MAGIC) none of
//! this modelling runs.

use std::path::{Path, PathBuf};

use rtslice_plan::{CachePlan, WorkloadCache};
use rtslice_spec::{CacheDomain, Mba, NodeCache};

use crate::error::{HostError, Result};
use crate::fsio;
use crate::txn::Txn;

pub use rtslice_sys::resctrl::DEFAULT_ROOT;
pub const SCHEMATA: &str = "schemata";
pub const TASKS: &str = "tasks";
/// The kernel's reason for the last refused write.
pub const LAST_CMD_STATUS: &str = "info/last_cmd_status";
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

    /// LLC occupancy (bytes) and memory traffic (bytes, a counter) of `workload`'s own group.
    pub fn monitor(&self, workload: &str) -> Option<(u64, u64)> {
        rtslice_sys::resctrl::monitor(&self.group(workload))
    }
}

/// `mkdir` of a control group; on a directory shaped like resctrl, also the files the kernel would
/// create (see the module comment).
pub(crate) fn make_group(dir: &Path) -> Result<()> {
    fsio::mkdir(dir)?;
    let root = dir.parent().unwrap_or(dir);
    if rtslice_sys::resctrl::is_resctrl(root) {
        return Ok(());
    }
    let schemata = fsio::read(root.join(SCHEMATA)).unwrap_or_default();
    let made = fsio::create(dir.join(SCHEMATA), &schemata).and_then(|_| fsio::create(dir.join(TASKS), ""));
    made.inspect_err(|_| {
        let _ = remove_group(dir);
    })
}

/// `rmdir` of a control group (the kernel hands its tasks to the default group); on a directory
/// shaped like resctrl, the modelled files go first. Gone already is fine.
pub(crate) fn remove_group(dir: &Path) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    let root = dir.parent().unwrap_or(dir);
    if !rtslice_sys::resctrl::is_resctrl(root) {
        for f in [SCHEMATA, TASKS] {
            let _ = std::fs::remove_file(dir.join(f));
        }
    }
    match fsio::rmdir(dir) {
        Err(HostError::Remove { source, .. }) if source.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        other => other,
    }
}

/// One write to a resctrl file; a refusal carries the kernel's reason (`info/last_cmd_status`).
pub(crate) fn write(path: &Path, value: &str) -> Result<()> {
    fsio::write(path, value).map_err(|e| match e {
        HostError::Write { path, value, source } => {
            let status = root_of(&path)
                .and_then(|r| fsio::read_trim(r.join(LAST_CMD_STATUS)).ok())
                .unwrap_or_else(|| "(no info/last_cmd_status)".into());
            HostError::Resctrl { path, value, source, status }
        }
        other => other,
    })
}

/// The resctrl root above a group's file: the nearest ancestor with an `info` directory.
fn root_of(path: &Path) -> Option<&Path> {
    path.ancestors().skip(1).find(|a| a.join("info").is_dir())
}
