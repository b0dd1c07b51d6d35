//! The base segment: what every workload of the node shares and nothing else touches, applied once
//! (parent cgroups, the parent's RT budget or HCBS's root budget, v1's root load balancing and `system`).

use super::*;

/// Applies the node's base as one journaled transaction (rolled back whole on failure).
pub(super) fn apply_base(dir: &StateDir, facts: &HostFacts, opts: &NodeOptions) -> Result<NodeBase> {
    let mechanism = node_mechanism(facts, opts.mechanism)?;
    let b = &facts.backend;
    // v1: the root and parent stop balancing and `system` keeps the rest; v2: partitions are made
    // at the root as workloads need them (`Node::ensure_shared_partition`).
    let partitions = facts.online.len() > 1;
    let rt_groups = facts.available.contains(&Mechanism::RtGroup);
    let parent_budget_us = rtslice_plan::kernel::parent_runtime_us(mechanism, rt_groups, opts.cap, facts.rt_ratio);
    let mut base = NodeBase {
        mechanism,
        backend: b.clone(),
        online: facts.online.clone(),
        partitions,
        parent_budget_us,
        warnings: Vec::new(),
        hrtick: opts.hrtick,
        fair_server_off: opts.fair_server_off,
    };
    std::fs::create_dir_all(&dir.path).map_err(|e| HostError::State { path: dir.path.clone(), reason: e.to_string() })?;
    write_json(&dir.path.join(INTENT), &"base", true)?;
    let mut state = State::new();
    // The id `Node::open` compares with after a restart (the kernel's, unless a test injects one).
    state.boot_id = opts.boot_id();
    dir.save(&state)?;
    let mut txn = Txn::begin(dir, &mut state, opts.base_fault);
    let root = b.root();
    let parent = b.parent();
    let mut ops: Vec<Op> = Vec::new();
    let mut partition_ops: Vec<Op> = Vec::new();
    let w = |ops: &mut Vec<Op>, v: Vec<(PathBuf, String)>| ops.extend(v.into_iter().map(|(path, value)| Op::Write { path, value }));
    match b {
        Backend::V1 { .. } => {
            ops.push(Op::Mkdir { path: parent.cpuset.clone(), evacuate_to: root.cpuset.join("cgroup.procs") });
            w(&mut ops, b.cpuset_writes(&parent, &facts.online, &facts.mems));
            if partitions {
                partition_ops.push(Op::Write { path: parent.cpuset.join("cpuset.cpu_exclusive"), value: "1".into() });
                let sys = b.group("system");
                partition_ops.push(Op::Mkdir { path: sys.cpuset.clone(), evacuate_to: root.cpuset.join("cgroup.procs") });
                w(&mut partition_ops, b.cpuset_writes(&sys, &facts.online, &facts.mems));
                // `system` balances every CPU no partition holds; the parent chain stops balancing so
                // each partition becomes a root domain of its own.
                partition_ops.push(Op::Write { path: parent.cpuset.join("cpuset.sched_load_balance"), value: "0".into() });
                partition_ops.push(Op::Write { path: root.cpuset.join("cpuset.sched_load_balance"), value: "0".into() });
            }
            ops.push(Op::Mkdir { path: parent.cpu.clone(), evacuate_to: root.cpu.join("cgroup.procs") });
            if let Some(runtime) = parent_budget_us {
                w(&mut ops, b.rt_budget_writes(&parent, runtime, 1_000_000));
            }
            // runc creates a container's cgroup in every hierarchy, under the workload's directory.
            let hybrid_v2 = facts.layout.v2.iter().filter(|_| facts.layout.mode == CgroupMode::Hybrid);
            let mut seen = vec![root.cpuset.clone(), root.cpu.clone()];
            for mount in facts.layout.v1.values().chain(hybrid_v2) {
                if seen.contains(mount) {
                    continue;
                }
                seen.push(mount.clone());
                ops.push(Op::Mkdir { path: mount.join(crate::cgroup::V1_PARENT), evacuate_to: mount.join("cgroup.procs") });
            }
        }
        Backend::V2 { .. } => {
            let memory = facts.layout.v2_controllers.iter().any(|c| c == "memory");
            let enable = |ops: &mut Vec<Op>, d: &Path| {
                for (path, value) in b.enable_controllers_writes(d) {
                    ops.push(Op::Write { path, value: if memory { format!("{value} +memory") } else { value } });
                }
            };
            enable(&mut ops, &root.cpuset);
            ops.push(Op::Mkdir { path: parent.cpuset.clone(), evacuate_to: root.cpuset.join("cgroup.procs") });
            enable(&mut ops, &parent.cpuset);
            // The parent's cpuset.cpus stays empty (the root's effective CPUs): a partition at the
            // root cannot take CPUs a sibling lists in its cpuset.cpus ("not exclusive"), and each
            // workload's group lists its own.
            if let Some(runtime) = parent_budget_us {
                w(&mut ops, b.rt_budget_writes(&parent, runtime, 1_000_000));
            }
        }
    }
    // The CPUs of `system` follow the partitions (`Node::set_system`): written, not journaled (the
    // directory is the base's, removing it undoes them), so status does not call them drift.
    let system_cpus = b.group("system").cpuset.join("cpuset.cpus");
    let run = |txn: &mut Txn, ops: &[Op]| -> Result<()> {
        for op in ops {
            match op {
                Op::Mkdir { path, evacuate_to } => txn.mkdir(path, evacuate_to)?,
                Op::Write { path, value } if *path == system_cpus => fsio::write(path, value)?,
                Op::Write { path, value } => txn.write_if_changed(path, value)?,
            }
        }
        Ok(())
    };
    let mut result = run(&mut txn, &ops);
    if let (Ok(()), Mechanism::Hcbs) = (&result, mechanism) {
        // The root group's HCBS budget as it is now: what reset gives back after the workloads
        // (which raise and lower it, `Node::hcbs_settle_root`) are gone. Journaled, not written.
        let file = root.cpu.join("cpu.rt.max");
        result = fsio::read_trim(&file).and_then(|now| txn.record(Change::Wrote { path: file, old: now.clone(), new: now }));
    }
    if result.is_ok() && opts.hrtick {
        result = crate::sched_debug::hrtick_on(&mut txn, &mut base.warnings).map_err(|(_, e)| e);
    }
    if result.is_ok() && opts.fair_server_off {
        // Mounted here, if at all, so that no workload's removal unmounts it under another's.
        result = crate::sched_debug::mount_debugfs(&mut txn, &mut base.warnings).map(drop).map_err(|(_, e)| e);
    }
    if result.is_ok() && !partition_ops.is_empty() {
        // An exclusive parent cannot overlap its siblings: another tool's cpuset at the root holding
        // the same CPUs makes the kernel refuse it. The node then runs without partitions (shared
        // CPU sets work; dedicated CPUs and SCHED_DEADLINE are refused with this reason).
        let from = txn.state.changes.len();
        if let Err(e) = run(&mut txn, &partition_ops) {
            let errors = undo_range(&mut txn.state.changes, from);
            result = txn.save();
            if !errors.is_empty() {
                result = Err(HostError::other(format!("undoing the partition set-up: {}", errors.join("; "))));
            }
            base.partitions = false;
            base.warnings.push(format!(
                "exclusive partitions are unavailable: {e}. Other cpusets at the root of the cpuset hierarchy overlap \
                 rtslice's (see ls {}); dedicated CPUs and SCHED_DEADLINE are refused until they are gone and the node \
                 is reset",
                root.cpuset.display()
            ));
        }
    }
    if let Err(e) = result {
        let rollback_errors = txn.rollback();
        if rollback_errors.is_empty() {
            let _ = std::fs::remove_dir_all(&dir.path);
        }
        return Err(HostError::StepFailed { step: "apply the node's base".into(), source: Box::new(e), rollback_errors });
    }
    write_json(&dir.path.join(BASE_INFO), &base, true)?;
    let _ = std::fs::remove_file(dir.path.join(INTENT));
    Ok(base)
}

/// Node-wide values the base journals once and the node keeps current (HCBS's root budget, the
/// default resctrl group's schemata): the entry's `old` is what reset restores, its `new` what the
/// node wrote last, which status compares.
impl Node {
    pub(super) fn base_dir(&self) -> StateDir {
        StateDir::new(node_dir(&self.root).join("base"))
    }

    /// The value `file` had before the node (its base journal entry's `old`), if the base journals it.
    pub(super) fn base_old(&self, file: &Path) -> Option<String> {
        let state = self.base_dir().load().ok()??;
        state.changes.into_iter().find_map(|c| match c {
            Change::Wrote { path, old, .. } if path == file => Some(old),
            _ => None,
        })
    }

    /// Journals `file`'s present value in the base, once (the first time the node is about to change
    /// it): what reset restores. Nothing when the base journals it already.
    pub(super) fn base_journal_once(&self, file: &Path) -> Result<()> {
        if self.base_old(file).is_some() {
            return Ok(());
        }
        let dir = self.base_dir();
        let Some(mut state) = dir.load()? else { return Ok(()) };
        let now = fsio::read(file)?;
        state.changes.push(Change::Wrote { path: file.to_path_buf(), old: now.clone(), new: now });
        dir.save(&state)
    }

    /// Records `value` as what the node holds in `file` now (the entry's `new`); saved only when
    /// it changed.
    pub(super) fn set_base_new(&self, file: &Path, value: &str) -> Result<()> {
        let dir = self.base_dir();
        let Some(mut state) = dir.load()? else { return Ok(()) };
        let mut changed = false;
        for c in state.changes.iter_mut() {
            if let Change::Wrote { path, new, .. } = c {
                if path == file && new != value {
                    *new = value.to_string();
                    changed = true;
                }
            }
        }
        if changed {
            dir.save(&state)?;
        }
        Ok(())
    }
}
