//! Pure operation generation: the cgroup directories and knob writes a prepared setup needs, in the
//! order the kernel accepts them (parents before children, budgets before children's budgets).

use std::path::{Path, PathBuf};

use crate::cgroup::{Backend, Op};
use crate::cpus::CpuList;
use crate::facts::HostFacts;
use crate::prepare::Prepared;
use crate::record::Mechanism;
use crate::setup::Launch;

/// The cgroup operations for a prepared setup, in order (parents before children, budgets before
/// children's budgets). Pure: unit-tested for both backends.
pub fn cgroup_ops(prepared: &[Prepared], facts: &HostFacts, mech: Mechanism) -> Vec<Op> {
    let mut ops = Vec::new();
    let b = &facts.backend;
    let root = b.root();
    let parent = b.parent();
    let w = |ops: &mut Vec<Op>, v: Vec<(PathBuf, String)>| {
        ops.extend(v.into_iter().map(|(path, value)| Op::Write { path, value }));
    };
    let exclusive: CpuList = prepared.iter().filter(|p| p.partition).fold(CpuList::new(), |acc, p| acc.union(&p.ws.cpus));
    let rest = facts.online.difference(&exclusive);
    let shield = prepared.iter().any(|p| p.ws.shield);
    let mems_of = |p: &Prepared| p.ws.mems.clone().unwrap_or_else(|| facts.mems.clone());
    match b {
        Backend::V1 { .. } => {
            let evac = root.cpuset.join("cgroup.procs");
            ops.push(Op::Mkdir { path: parent.cpuset.clone(), evacuate_to: evac.clone() });
            w(&mut ops, b.cpuset_writes(&parent, &facts.online, &facts.mems));
            if !exclusive.is_empty() {
                // Scheduling domains come from the load-balanced cpusets once the root stops balancing:
                // each partition becomes its own root domain, `system` keeps the rest balanced. v1 lets a
                // cpuset be exclusive only under an exclusive parent.
                ops.push(Op::Write { path: parent.cpuset.join("cpuset.cpu_exclusive"), value: "1".into() });
                ops.push(Op::Write { path: parent.cpuset.join("cpuset.sched_load_balance"), value: "0".into() });
                ops.push(Op::Write { path: root.cpuset.join("cpuset.sched_load_balance"), value: "0".into() });
            }
            if !exclusive.is_empty() || shield {
                let sys = b.group("system");
                ops.push(Op::Mkdir { path: sys.cpuset.clone(), evacuate_to: evac.clone() });
                w(&mut ops, b.cpuset_writes(&sys, &rest, &facts.mems));
            }
            for p in prepared {
                ops.push(Op::Mkdir { path: p.group.cpuset.clone(), evacuate_to: evac.clone() });
                w(&mut ops, b.cpuset_writes(&p.group, &p.ws.cpus, &mems_of(p)));
                if p.partition {
                    ops.push(Op::Write { path: p.group.cpuset.join("cpuset.cpu_exclusive"), value: "1".into() });
                }
            }
            if prepared.iter().any(|p| p.cpu_group) {
                let evac = root.cpu.join("cgroup.procs");
                ops.push(Op::Mkdir { path: parent.cpu.clone(), evacuate_to: evac.clone() });
                // Whatever groups hold RT runtime (RT groups; a CFS pool's group under SCHED_DEADLINE),
                // the parent holds their sum, as the plan says (`KernelPlan::parent_runtime_us`).
                let budgets: Vec<rtslice_plan::kernel::GroupBudget> =
                    prepared.iter().filter_map(|p| p.rt_budget.map(rtslice_plan::kernel::GroupBudget::from)).collect();
                if let Some(runtime) = rtslice_plan::kernel::parent_runtime_us(&budgets, facts.rt_ratio) {
                    w(&mut ops, b.rt_budget_writes(&parent, runtime, 1_000_000));
                }
                for p in prepared.iter().filter(|p| p.cpu_group) {
                    ops.push(Op::Mkdir { path: p.group.cpu.clone(), evacuate_to: evac.clone() });
                    if let Some(r) = p.rt_budget {
                        w(&mut ops, b.rt_budget_writes(&p.group, r.runtime_us(), r.period_us()));
                    }
                    cfs_ops(&mut ops, b, p);
                }
            }
            let mut seen = vec![root.cpuset.clone(), root.cpu.clone()];
            if let Some(mem) = memory_mount(facts).filter(|_| prepared.iter().any(|p| p.ws.memory.is_some())) {
                let evac = mem.join("cgroup.procs");
                ops.push(Op::Mkdir { path: mem.join(crate::cgroup::V1_PARENT), evacuate_to: evac.clone() });
                for p in prepared.iter().filter(|p| p.ws.memory.is_some() || matches!(p.ws.launch, Launch::Oci(_))) {
                    let dir = mem.join(crate::cgroup::V1_PARENT).join(&p.ws.name);
                    ops.push(Op::Mkdir { path: dir.clone(), evacuate_to: evac.clone() });
                    if let Some(bytes) = p.ws.memory {
                        ops.push(Op::Write { path: dir.join("memory.limit_in_bytes"), value: bytes.to_string() });
                    }
                }
                seen.push(mem);
            }
            // runc creates the container's cgroup in every v1 hierarchy; pre-create its parents so reset
            // removes them.
            if prepared.iter().any(|p| matches!(p.ws.launch, Launch::Oci(_))) {
                // On hybrid layouts runc also creates the path in the cgroup2 mount.
                let hybrid_v2 = facts.layout.v2.iter().filter(|_| facts.layout.mode == crate::cgroup::CgroupMode::Hybrid);
                for mount in facts.layout.v1.values().chain(hybrid_v2) {
                    if seen.contains(mount) {
                        continue;
                    }
                    seen.push(mount.clone());
                    let evac = mount.join("cgroup.procs");
                    ops.push(Op::Mkdir { path: mount.join(crate::cgroup::V1_PARENT), evacuate_to: evac.clone() });
                    for p in prepared.iter().filter(|p| matches!(p.ws.launch, Launch::Oci(_))) {
                        ops.push(Op::Mkdir { path: mount.join(crate::cgroup::V1_PARENT).join(&p.ws.name), evacuate_to: evac.clone() });
                    }
                }
            }
        }
        Backend::V2 { .. } => {
            let evac = root.cpuset.join("cgroup.procs");
            let memory = prepared.iter().any(|p| p.ws.memory.is_some());
            let enable = |ops: &mut Vec<Op>, dir: &Path| {
                for (path, value) in b.enable_controllers_writes(dir) {
                    ops.push(Op::Write { path, value: if memory { format!("{value} +memory") } else { value } });
                }
            };
            enable(&mut ops, &root.cpuset);
            if mech == Mechanism::Hcbs {
                // HCBS: the groups' budgets come out of the root group's, which boots at 0 (no group
                // may have one then): raise it first, as far as the kernel requires and no further.
                // rtslice's parent stays `max` (a new group's value), so its groups draw on the root.
                w(&mut ops, hcbs_root_writes(prepared, facts));
            }
            ops.push(Op::Mkdir { path: parent.cpuset.clone(), evacuate_to: evac.clone() });
            enable(&mut ops, &parent.cpuset);
            let all: CpuList = prepared.iter().fold(CpuList::new(), |acc, p| acc.union(&p.ws.cpus));
            // A partition's parent must be a partition root too; then the parent holds only the
            // workloads' CPUs and the rest stays with the root cgroup. Unless some workload sits on
            // CPUs isolated at boot without a partition (prepare: the kernel refuses partitions
            // holding them): the parent must then hold those CPUs as a plain cpuset, so the
            // partitions become remote ones (6.7+): their CPUs handed down through
            // cpuset.cpus.exclusive from the root, the parent staying a member.
            let remote = !exclusive.is_empty() && !all.intersection(&facts.boot_isolated).is_empty();
            let parent_cpus = if exclusive.is_empty() || remote { facts.online.clone() } else { all };
            w(&mut ops, b.cpuset_writes(&parent, &parent_cpus, &facts.mems));
            if remote {
                ops.push(Op::Write { path: parent.cpuset.join("cpuset.cpus.exclusive"), value: exclusive.to_string() });
            } else if !exclusive.is_empty() {
                ops.push(Op::Write { path: parent.cpuset.join("cpuset.cpus.partition"), value: "root".into() });
            }
            for p in prepared {
                ops.push(Op::Mkdir { path: p.group.cpuset.clone(), evacuate_to: evac.clone() });
                w(&mut ops, b.cpuset_writes(&p.group, &p.ws.cpus, &mems_of(p)));
                if p.partition {
                    if remote {
                        ops.push(Op::Write { path: p.group.cpuset.join("cpuset.cpus.exclusive"), value: p.ws.cpus.to_string() });
                    }
                    w(&mut ops, b.partition_writes(&p.group, false));
                }
                if let Some(r) = p.rt_budget {
                    w(&mut ops, b.rt_budget_writes(&p.group, r.runtime_us(), r.period_us()));
                }
                cfs_ops(&mut ops, b, p);
                if let Some(bytes) = p.ws.memory {
                    ops.push(Op::Write { path: p.group.cpu.join("memory.max"), value: bytes.to_string() });
                }
            }
        }
    }
    ops
}

/// HCBS: the root group's `cpu.rt.max` when it must hold more than it does for the prepared
/// workloads' budgets (with the other groups' it holds: `HostFacts::hcbs_root`, a freshly booted
/// kernel's when unknown) — what `rtslice plan` prints (`rtslice_plan::HcbsRoot::raised_for`).
pub(crate) fn hcbs_root_writes(prepared: &[Prepared], facts: &HostFacts) -> Vec<(PathBuf, String)> {
    let ours: Vec<rtslice_plan::kernel::GroupBudget> = prepared
        .iter()
        .filter_map(|p| p.rt_budget.map(rtslice_plan::kernel::GroupBudget::from))
        .collect();
    if ours.is_empty() {
        return Vec::new();
    }
    let root = facts.hcbs_root.clone().unwrap_or_else(rtslice_plan::HcbsRoot::boot_default);
    match root.raised_for(&ours) {
        Some(b) => facts.backend.rt_budget_writes(&facts.backend.root(), b.runtime_us, b.period_us),
        None => Vec::new(),
    }
}

/// The v1 memory hierarchy, when it is mounted on its own (not co-mounted with cpuset or cpu).
pub(crate) fn memory_mount(facts: &HostFacts) -> Option<PathBuf> {
    let m = facts.layout.v1.get("memory")?;
    let root = facts.backend.root();
    (m != &root.cpuset && m != &root.cpu).then(|| m.clone())
}

fn cfs_ops(ops: &mut Vec<Op>, b: &Backend, p: &Prepared) {
    let Some(cfs) = p.ws.cfs else { return };
    let mut v = Vec::new();
    if cfs.quota_us.is_some() {
        v.extend(b.cfs_writes(&p.group, cfs.quota_us, cfs.period_us.unwrap_or(100_000)));
    }
    if let Some(weight) = cfs.weight {
        v.extend(b.weight_writes(&p.group, weight));
    }
    if cfs.idle {
        v.extend(b.idle_writes(&p.group));
    }
    ops.extend(v.into_iter().map(|(path, value)| Op::Write { path, value }));
}

/// What a resize must write to take back the CFS settings a workload's group had (`old`) and no
/// longer asks for: a fresh group starts with them unset, so [`cfs_ops`] writes only what is asked,
/// and a pool (or weight, or idle flag) dropped by a resize would otherwise stay on the group.
pub(crate) fn cfs_clear_ops(b: &Backend, p: &Prepared, old: Option<crate::setup::Cfs>) -> Vec<Op> {
    let Some(old) = old else { return Vec::new() };
    let new = p.ws.cfs.unwrap_or_default();
    let mut v = Vec::new();
    if old.quota_us.is_some() && new.quota_us.is_none() {
        // The kernel's default period with no quota: what the group had before any was written.
        v.extend(b.cfs_writes(&p.group, None, 100_000));
    }
    if old.weight.is_some() && new.weight.is_none() {
        v.extend(b.weight_writes(&p.group, 100));
    }
    if old.idle && !new.idle {
        v.push((p.group.cpu.join("cpu.idle"), "0".into()));
    }
    v.into_iter().map(|(path, value)| Op::Write { path, value }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{State, StateDir};
    use crate::prepare::fixtures::{facts, wl};
    use crate::prepare::prepare;
    use crate::setup::Setup;
    use crate::txn::{Fault, Txn};

    #[test]
    fn v2_ops_use_partitions_subtree_control_and_cpu_rt_max() {
        let f = facts(Backend::V2 { root: "/cg".into() });
        let s = Setup { workloads: vec![wl("du", "2-3", Some((300, 1000)))], ..Default::default() };
        let (mut p, _) = prepare(&s, &f, Mechanism::Hcbs).unwrap();
        p[0].partition = true;
        let ops = cgroup_ops(&p, &f, Mechanism::Hcbs);
        let wr = |path: &str, value: &str| Op::Write { path: path.into(), value: value.into() };
        assert_eq!(ops[0], wr("/cg/cgroup.subtree_control", "+cpuset +cpu"));
        assert_eq!(ops[1], wr("/cg/cpu.rt.max", "300000 1000000"));
        assert_eq!(ops[2], Op::Mkdir { path: "/cg/rtslice.slice".into(), evacuate_to: "/cg/cgroup.procs".into() });
        assert!(ops.contains(&wr("/cg/rtslice.slice/cpuset.cpus", "2-3")));
        assert!(ops.contains(&wr("/cg/rtslice.slice/cpuset.cpus.partition", "root")));
        assert!(ops.contains(&wr("/cg/rtslice.slice/du/cpuset.cpus.partition", "root")));
        assert!(ops.contains(&wr("/cg/rtslice.slice/du/cpu.rt.max", "300 1000")));
        // The root (a freshly booted kernel's, at 0) holds the budget; rtslice's parent stays `max`.
        assert!(!ops.iter().any(|o| matches!(o, Op::Write { path, .. } if path == Path::new("/cg/rtslice.slice/cpu.rt.max"))), "{ops:?}");
        let root_budget = ops.iter().position(|o| o == &wr("/cg/cpu.rt.max", "300000 1000000")).unwrap();
        let child_budget = ops.iter().position(|o| o == &wr("/cg/rtslice.slice/du/cpu.rt.max", "300 1000")).unwrap();
        assert!(root_budget < child_budget, "the root is budgeted before any group");
        // A root that holds the budget already is left as it is; one that holds others' too grows by ours.
        let mut f2 = f.clone();
        f2.hcbs_root = Some(rtslice_plan::HcbsRoot { runtime_us: 500_000, period_us: 1_000_000, others: vec![] });
        assert!(!cgroup_ops(&p, &f2, Mechanism::Hcbs).iter().any(|o| matches!(o, Op::Write { path, .. } if path == Path::new("/cg/cpu.rt.max"))));
        let other = rtslice_plan::kernel::GroupBudget { runtime_us: 250_000, period_us: 1_000_000 };
        f2.hcbs_root = Some(rtslice_plan::HcbsRoot { runtime_us: 500_000, period_us: 1_000_000, others: vec![other] });
        assert!(cgroup_ops(&p, &f2, Mechanism::Hcbs).contains(&wr("/cg/cpu.rt.max", "550000 1000000")));
    }

    #[test]
    fn v2_partitions_next_to_boot_isolated_cpus_are_remote() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("cpuset.cpus.isolated"), "").unwrap();
        let mut f = facts(Backend::V2 { root: root.path().into() });
        f.boot_isolated = CpuList::parse("3").unwrap();
        let mut dedicated = wl("du", "1-2", None);
        dedicated.partition = true;
        let mut isolated = wl("iso", "3", None);
        isolated.partition = true;
        let s = Setup { workloads: vec![dedicated, isolated], ..Default::default() };
        let (p, _) = prepare(&s, &f, Mechanism::None).unwrap();
        assert_eq!((p[0].partition, p[1].partition), (true, false));
        let ops = cgroup_ops(&p, &f, Mechanism::None);
        let g = |rel: &str| root.path().join(rel);
        let wr = |rel: &str, value: &str| Op::Write { path: g(rel), value: value.into() };
        // The parent stays a member holding every CPU; the CPUs of du come down as exclusive ones.
        assert!(ops.contains(&wr("rtslice.slice/cpuset.cpus", "0-3")));
        assert!(!ops.iter().any(|o| matches!(o, Op::Write { path, .. } if path == &g("rtslice.slice/cpuset.cpus.partition"))));
        let at = |o: Op| ops.iter().position(|x| x == &o).unwrap_or_else(|| panic!("{o:?} missing from {ops:?}"));
        let parent_x = at(wr("rtslice.slice/cpuset.cpus.exclusive", "1-2"));
        let child_x = at(wr("rtslice.slice/du/cpuset.cpus.exclusive", "1-2"));
        let child_p = at(wr("rtslice.slice/du/cpuset.cpus.partition", "root"));
        assert!(parent_x < child_x && child_x < child_p, "{ops:?}");
        assert!(ops.contains(&wr("rtslice.slice/iso/cpuset.cpus", "3")));
        assert!(!ops.iter().any(|o| matches!(o, Op::Write { path, .. } if path == &g("rtslice.slice/iso/cpuset.cpus.partition"))));
        // Without boot isolation the layout is the usual one: the parent is a partition root.
        f.boot_isolated = CpuList::new();
        let (p, _) = prepare(&s, &f, Mechanism::None).unwrap();
        let ops = cgroup_ops(&p, &f, Mechanism::None);
        assert!(ops.contains(&wr("rtslice.slice/cpuset.cpus.partition", "root")));
        assert!(!ops.iter().any(|o| matches!(o, Op::Write { path, .. } if path.ends_with("cpuset.cpus.exclusive"))));
    }

    #[test]
    fn v2_ops_run_against_a_temp_tree() {
        // A temp dir stands in for a cgroup2 mount (cgroup2 cannot be mounted here: the controllers are
        // bound to v1). Knob files are pre-created as the kernel would; mkdir creates them too.
        let root = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let f = facts(Backend::V2 { root: root.path().into() });
        std::fs::write(root.path().join("cgroup.subtree_control"), "memory\n").unwrap();
        std::fs::write(root.path().join("cgroup.procs"), "").unwrap();
        std::fs::write(root.path().join("cpu.rt.max"), "0 1000000\n").unwrap();
        let s = Setup { workloads: vec![wl("du", "2-3", Some((300, 1000)))], ..Default::default() };
        let (p, _) = prepare(&s, &f, Mechanism::Hcbs).unwrap();
        let ops = cgroup_ops(&p, &f, Mechanism::Hcbs);
        let sd = StateDir::new(state.path());
        let mut st = State::new();
        let mut txn = Txn::begin(&sd, &mut st, Fault::default());
        for op in &ops {
            match op {
                Op::Mkdir { path, evacuate_to } => {
                    txn.mkdir(path, evacuate_to).unwrap();
                    for knob in ["cgroup.subtree_control", "cpuset.cpus", "cpuset.mems", "cpuset.cpus.partition", "cpu.rt.max", "cgroup.procs"] {
                        std::fs::write(path.join(knob), "").unwrap();
                    }
                }
                Op::Write { path, value } => txn.write_if_changed(path, value).unwrap(),
            }
        }
        assert_eq!(std::fs::read_to_string(root.path().join("rtslice.slice/du/cpu.rt.max")).unwrap(), "300 1000");
        // Rollback: the controller enable is undone with "-cpuset -cpu" semantics; a regular file just gets the text.
        for entry in std::fs::read_dir(root.path().join("rtslice.slice/du")).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
        for entry in std::fs::read_dir(root.path().join("rtslice.slice")).unwrap().flatten() {
            if entry.path().is_file() {
                std::fs::remove_file(entry.path()).unwrap();
            }
        }
        let errors = txn.rollback();
        assert!(errors.is_empty(), "{errors:?}");
        assert!(!root.path().join("rtslice.slice").exists());
        assert_eq!(std::fs::read_to_string(root.path().join("cgroup.subtree_control")).unwrap(), "-cpuset -cpu");
        assert_eq!(std::fs::read_to_string(root.path().join("cpu.rt.max")).unwrap(), "0 1000000", "the root's budget is given back");
    }
}
