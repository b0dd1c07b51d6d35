//! Pure operation generation: the cgroup directories and knob writes of one workload's own groups,
//! in the order the kernel accepts them (a group before its knobs, its budget before its threads'
//! policies). What the workloads share — the parent groups, v1's `system` and load balancing, v2's
//! partition directories, HCBS's root budget — is the node's (`node::base`, `node::partitions`,
//! `node::hcbs`).

use std::path::PathBuf;

use crate::cgroup::{Backend, Op};
use crate::facts::HostFacts;
use crate::prepare::Prepared;
use crate::setup::Launch;

/// The cgroup operations of one prepared workload, in order: only directories of its own (the
/// node's base made their parents). Pure: unit-tested for both backends.
pub fn workload_ops(p: &Prepared, facts: &HostFacts) -> Vec<Op> {
    let mut ops = Vec::new();
    let b = &facts.backend;
    let root = b.root();
    let w = |ops: &mut Vec<Op>, v: Vec<(PathBuf, String)>| {
        ops.extend(v.into_iter().map(|(path, value)| Op::Write { path, value }));
    };
    let mems = p.ws.mems.clone().unwrap_or_else(|| facts.mems.clone());
    ops.push(Op::Mkdir { path: p.group.cpuset.clone(), evacuate_to: root.cpuset.join("cgroup.procs") });
    w(&mut ops, b.cpuset_writes(&p.group, &p.ws.cpus, &mems));
    match b {
        Backend::V1 { .. } => {
            if p.partition {
                ops.push(Op::Write { path: p.group.cpuset.join("cpuset.cpu_exclusive"), value: "1".into() });
            }
            if p.cpu_group {
                ops.push(Op::Mkdir { path: p.group.cpu.clone(), evacuate_to: root.cpu.join("cgroup.procs") });
                if let Some(r) = p.rt_budget {
                    w(&mut ops, b.rt_budget_writes(&p.group, r.runtime_us(), r.period_us()));
                }
                cfs_ops(&mut ops, b, p);
            }
            let oci = matches!(p.ws.launch, Launch::Oci(_));
            let mut seen = vec![root.cpuset.clone(), root.cpu.clone()];
            if let Some(mem) = memory_mount(facts).filter(|_| p.ws.memory.is_some() || oci) {
                let dir = mem.join(crate::cgroup::V1_PARENT).join(&p.ws.name);
                ops.push(Op::Mkdir { path: dir.clone(), evacuate_to: mem.join("cgroup.procs") });
                if let Some(bytes) = p.ws.memory {
                    ops.push(Op::Write { path: dir.join("memory.limit_in_bytes"), value: bytes.to_string() });
                }
                seen.push(mem);
            }
            // runc creates the container's cgroup in every v1 hierarchy (on hybrid layouts in the
            // cgroup2 mount too): created here so that removing the workload removes them.
            if oci {
                let hybrid_v2 = facts.layout.v2.iter().filter(|_| facts.layout.mode == crate::cgroup::CgroupMode::Hybrid);
                for mount in facts.layout.v1.values().chain(hybrid_v2) {
                    if !seen.contains(mount) {
                        seen.push(mount.clone());
                        let dir = mount.join(crate::cgroup::V1_PARENT).join(&p.ws.name);
                        ops.push(Op::Mkdir { path: dir, evacuate_to: mount.join("cgroup.procs") });
                    }
                }
            }
        }
        Backend::V2 { .. } => {
            if p.partition {
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
    ops
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
    use crate::record::Mechanism;
    use crate::setup::Setup;
    use crate::txn::{Fault, Txn};

    fn wr(path: impl Into<PathBuf>, value: &str) -> Op {
        Op::Write { path: path.into(), value: value.into() }
    }

    #[test]
    fn v2_ops_touch_only_the_workloads_group() {
        let f = facts(Backend::V2 { root: "/cg".into() });
        let s = Setup { workloads: vec![wl("du", "2-3", Some((300, 1000)))], ..Default::default() };
        let (mut p, _) = prepare(&s, &f, Mechanism::Hcbs).unwrap();
        p[0].partition = true;
        let ops = workload_ops(&p[0], &f);
        assert_eq!(ops[0], Op::Mkdir { path: "/cg/rtslice.slice/du".into(), evacuate_to: "/cg/cgroup.procs".into() });
        assert!(ops.contains(&wr("/cg/rtslice.slice/du/cpuset.cpus", "2-3")));
        assert!(ops.contains(&wr("/cg/rtslice.slice/du/cpuset.cpus.partition", "root")));
        assert!(ops.contains(&wr("/cg/rtslice.slice/du/cpu.rt.max", "300 1000")));
        let mine = |path: &PathBuf| path.starts_with("/cg/rtslice.slice/du");
        assert!(ops.iter().all(|o| match o {
            Op::Mkdir { path, .. } | Op::Write { path, .. } => mine(path),
        }), "{ops:?}");
    }

    #[test]
    fn v1_ops_put_the_budget_in_the_cpu_group_and_the_partition_in_the_cpuset() {
        let f = facts(Backend::V1 { cpuset: "/cs".into(), cpu: "/cpu".into() });
        let s = Setup { workloads: vec![wl("du", "1", Some((300, 1000)))], ..Default::default() };
        let (mut p, _) = prepare(&s, &f, Mechanism::RtGroup).unwrap();
        p[0].partition = true;
        let ops = workload_ops(&p[0], &f);
        let at = |o: Op| ops.iter().position(|x| x == &o).unwrap_or_else(|| panic!("{o:?} missing from {ops:?}"));
        let cpus = at(wr("/cs/rtslice/du/cpuset.cpus", "1"));
        let exclusive = at(wr("/cs/rtslice/du/cpuset.cpu_exclusive", "1"));
        assert!(cpus < exclusive, "a partition gets its CPUs first");
        let group = at(Op::Mkdir { path: "/cpu/rtslice/du".into(), evacuate_to: "/cpu/cgroup.procs".into() });
        let budget = at(wr("/cpu/rtslice/du/cpu.rt_runtime_us", "300"));
        assert!(group < budget);
    }

    #[test]
    fn v2_ops_run_against_a_temp_tree() {
        // A temp dir stands in for a cgroup2 mount (cgroup2 cannot be mounted here: the controllers are
        // bound to v1). Knob files are pre-created as the kernel would; mkdir creates them too.
        let root = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let f = facts(Backend::V2 { root: root.path().into() });
        std::fs::create_dir(root.path().join("rtslice.slice")).unwrap();
        std::fs::write(root.path().join("cgroup.procs"), "").unwrap();
        let s = Setup { workloads: vec![wl("du", "2-3", Some((300, 1000)))], ..Default::default() };
        let (p, _) = prepare(&s, &f, Mechanism::Hcbs).unwrap();
        let ops = workload_ops(&p[0], &f);
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
        for entry in std::fs::read_dir(root.path().join("rtslice.slice/du")).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
        let errors = txn.rollback();
        assert!(errors.is_empty(), "{errors:?}");
        assert!(!root.path().join("rtslice.slice/du").exists());
        assert!(root.path().join("rtslice.slice").exists(), "the parent is the node's");
    }
}
