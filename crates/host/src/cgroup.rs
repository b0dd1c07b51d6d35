//! cgroup layout detection and the knobs rtslice writes, for cgroup v1 (cpuset and cpu hierarchies,
//! RT group scheduling) and cgroup v2 (unified: cpuset partitions, cpu.max, cpu.weight, HCBS cpu.rt.max).
//!
//! This module only computes paths and values; the transaction (`txn`) performs and journals them,
//! so the same logic is testable against a temporary directory that mimics either layout.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cpus::CpuList;

/// The name of the parent group rtslice owns in each hierarchy.
pub const V1_PARENT: &str = "rtslice";
pub const V2_PARENT: &str = "rtslice.slice";
/// cgroup v2: the node service's partitions, directly under the root cgroup (`rtslice-partition-<cpus>`).
/// A v2 partition root's parent must be a partition root too, and the one every kernel has is the
/// root cgroup (remote partitions under a member parent need 6.7+), so the node's partitions live
/// beside `rtslice.slice` rather than in it; each holds its workloads' groups as members.
pub const V2_PARTITION_PREFIX: &str = "rtslice-partition-";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupMode {
    /// Only v1 hierarchies.
    V1,
    /// v1 controller hierarchies plus a cgroup2 mount (systemd "hybrid"); controllers may sit on either.
    Hybrid,
    /// Only the unified hierarchy.
    V2,
}

/// Where the controllers rtslice needs are mounted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupLayout {
    pub mode: CgroupMode,
    /// v1 controller → mount point (co-mounted controllers appear under each name).
    pub v1: BTreeMap<String, PathBuf>,
    /// The cgroup2 mount, if any, and the controllers it offers (cgroup.controllers of its root).
    pub v2: Option<PathBuf>,
    pub v2_controllers: Vec<String>,
}

/// Which hierarchy rtslice drives for cpuset+cpu.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Backend {
    V1 { cpuset: PathBuf, cpu: PathBuf },
    V2 { root: PathBuf },
}

impl CgroupLayout {
    /// Reads /proc/self/mountinfo.
    pub fn detect() -> std::io::Result<CgroupLayout> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
        let mut layout = Self::from_mountinfo(&mountinfo);
        if let Some(root) = &layout.v2 {
            layout.v2_controllers = std::fs::read_to_string(root.join("cgroup.controllers"))
                .map(|s| s.split_whitespace().map(String::from).collect())
                .unwrap_or_default();
        }
        Ok(layout)
    }

    /// Parses mountinfo text (fields: ... mount_point ... - fstype source super_options).
    pub fn from_mountinfo(text: &str) -> CgroupLayout {
        let mut v1 = BTreeMap::new();
        let mut v2 = None;
        for m in rtslice_sys::procfs::parse_cgroup_mounts(text) {
            if m.unified {
                v2.get_or_insert(m.path);
                continue;
            }
            for opt in &m.options {
                if matches!(opt.as_str(), "rw" | "ro" | "relatime" | "noexec" | "nosuid" | "nodev" | "clone_children")
                    || opt.starts_with("release_agent")
                {
                    continue;
                }
                v1.entry(opt.clone()).or_insert_with(|| m.path.clone());
            }
        }
        let mode = match (v1.is_empty(), v2.is_some()) {
            (true, _) => CgroupMode::V2,
            (false, true) => CgroupMode::Hybrid,
            (false, false) => CgroupMode::V1,
        };
        CgroupLayout { mode, v1, v2, v2_controllers: Vec::new() }
    }

    /// v1 when both cpuset and cpu are v1 controllers; v2 when the unified hierarchy offers cpuset
    /// and cpu; otherwise none (the reason says what is missing).
    pub fn backend(&self) -> Result<Backend, String> {
        if let (Some(cpuset), Some(cpu)) = (self.v1.get("cpuset"), self.v1.get("cpu")) {
            return Ok(Backend::V1 { cpuset: cpuset.clone(), cpu: cpu.clone() });
        }
        if let Some(root) = &self.v2 {
            let has = |c: &str| self.v2_controllers.iter().any(|x| x == c);
            if has("cpuset") && has("cpu") {
                return Ok(Backend::V2 { root: root.clone() });
            }
            return Err(format!(
                "the cgroup2 mount {} offers [{}] but rtslice needs cpuset and cpu; \
                 free them from v1 (remove the v1 mounts) or boot with systemd.unified_cgroup_hierarchy=1",
                root.display(),
                self.v2_controllers.join(" ")
            ));
        }
        Err("no cpuset and cpu controllers are mounted; mount cgroup2 at /sys/fs/cgroup or the v1 \
             cpuset and cpu hierarchies"
            .into())
    }
}

/// Paths of one rtslice-owned group in the driven backend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupPaths {
    /// v1: the cpuset dir; v2: the unified dir.
    pub cpuset: PathBuf,
    /// v1: the cpu dir; v2: same as `cpuset`.
    pub cpu: PathBuf,
}

impl GroupPaths {
    /// The directories to create, parents first, without duplicates.
    pub fn dirs(&self) -> Vec<PathBuf> {
        if self.cpuset == self.cpu {
            vec![self.cpuset.clone()]
        } else {
            vec![self.cpuset.clone(), self.cpu.clone()]
        }
    }

    /// Files a task is written into to join this group (one per hierarchy).
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs().into_iter().map(|d| d.join("cgroup.procs")).collect()
    }
}

impl Backend {
    pub fn is_v1(&self) -> bool {
        matches!(self, Backend::V1 { .. })
    }

    /// The parent group rtslice owns.
    pub fn parent(&self) -> GroupPaths {
        match self {
            Backend::V1 { cpuset, cpu } => GroupPaths { cpuset: cpuset.join(V1_PARENT), cpu: cpu.join(V1_PARENT) },
            Backend::V2 { root } => GroupPaths { cpuset: root.join(V2_PARENT), cpu: root.join(V2_PARENT) },
        }
    }

    /// A child group of the parent (workload names are validated to be path-safe).
    pub fn group(&self, name: &str) -> GroupPaths {
        let p = self.parent();
        GroupPaths { cpuset: p.cpuset.join(name), cpu: p.cpu.join(name) }
    }

    pub fn root(&self) -> GroupPaths {
        match self {
            Backend::V1 { cpuset, cpu } => GroupPaths { cpuset: cpuset.clone(), cpu: cpu.clone() },
            Backend::V2 { root } => GroupPaths { cpuset: root.clone(), cpu: root.clone() },
        }
    }

    /// The file writes that give a group its CPUs and memory nodes. v1 requires both before a task
    /// can join; v2 allows empty (inherit) but we set them for clarity.
    pub fn cpuset_writes(&self, g: &GroupPaths, cpus: &CpuList, mems: &str) -> Vec<(PathBuf, String)> {
        vec![(g.cpuset.join("cpuset.cpus"), cpus.to_string()), (g.cpuset.join("cpuset.mems"), mems.to_string())]
    }

    /// Makes a group an exclusive scheduling partition.
    /// v1: cpu_exclusive=1 and sched_load_balance=1 on the group (its own root domain; the caller turns
    /// load balancing off on the parent chain). v2: cpuset.cpus.partition=root ("isolated" for a shield
    /// without load balancing).
    pub fn partition_writes(&self, g: &GroupPaths, isolated: bool) -> Vec<(PathBuf, String)> {
        match self {
            Backend::V1 { .. } => vec![
                (g.cpuset.join("cpuset.cpu_exclusive"), "1".into()),
                (g.cpuset.join("cpuset.sched_load_balance"), if isolated { "0" } else { "1" }.into()),
            ],
            Backend::V2 { .. } => {
                vec![(g.cpuset.join("cpuset.cpus.partition"), if isolated { "isolated" } else { "root" }.into())]
            }
        }
    }

    /// RT group budget. v1: cpu.rt_period_us then cpu.rt_runtime_us (the period first so the ratio check
    /// sees the final period). v2 (HCBS series): cpu.rt.max "runtime period".
    pub fn rt_budget_writes(&self, g: &GroupPaths, runtime_us: u64, period_us: u64) -> Vec<(PathBuf, String)> {
        match self {
            Backend::V1 { .. } => vec![
                (g.cpu.join("cpu.rt_period_us"), period_us.to_string()),
                (g.cpu.join("cpu.rt_runtime_us"), runtime_us.to_string()),
            ],
            Backend::V2 { .. } => vec![(g.cpu.join("cpu.rt.max"), format!("{runtime_us} {period_us}"))],
        }
    }

    /// CFS bandwidth (quota `None` = unlimited).
    pub fn cfs_writes(&self, g: &GroupPaths, quota_us: Option<u64>, period_us: u64) -> Vec<(PathBuf, String)> {
        match self {
            Backend::V1 { .. } => vec![
                (g.cpu.join("cpu.cfs_period_us"), period_us.to_string()),
                (g.cpu.join("cpu.cfs_quota_us"), quota_us.map_or("-1".to_string(), |q| q.to_string())),
            ],
            Backend::V2 { .. } => {
                vec![(g.cpu.join("cpu.max"), format!("{} {period_us}", quota_us.map_or("max".to_string(), |q| q.to_string())))]
            }
        }
    }

    /// CFS weight on the v2 scale 1..10000 (default 100); v1 cpu.shares = weight * 1024 / 100.
    pub fn weight_writes(&self, g: &GroupPaths, weight: u64) -> Vec<(PathBuf, String)> {
        match self {
            Backend::V1 { .. } => vec![(g.cpu.join("cpu.shares"), (weight * 1024 / 100).max(2).to_string())],
            Backend::V2 { .. } => vec![(g.cpu.join("cpu.weight"), weight.to_string())],
        }
    }

    pub fn idle_writes(&self, g: &GroupPaths) -> Vec<(PathBuf, String)> {
        vec![(g.cpu.join("cpu.idle"), "1".into())]
    }

    /// v2 only: controllers must be enabled in the parent's subtree_control before children get knobs.
    pub fn enable_controllers_writes(&self, parent_dir: &Path) -> Vec<(PathBuf, String)> {
        match self {
            Backend::V1 { .. } => vec![],
            Backend::V2 { .. } => vec![(parent_dir.join("cgroup.subtree_control"), "+cpuset +cpu".into())],
        }
    }

    /// Which cgroup (relative to each hierarchy root) a process is in, from /proc/<pid>/cgroup text.
    pub fn cgroup_of(&self, proc_cgroup: &str) -> Option<PathBuf> {
        for line in proc_cgroup.lines() {
            let mut parts = line.splitn(3, ':');
            let (_id, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
            let hit = match self {
                Backend::V1 { .. } => ctrls.split(',').any(|c| c == "cpuset"),
                Backend::V2 { .. } => ctrls.is_empty(),
            };
            if hit {
                let base = match self {
                    Backend::V1 { cpuset, .. } => cpuset,
                    Backend::V2 { root } => root,
                };
                return Some(base.join(path.trim_start_matches('/')));
            }
        }
        None
    }
}

/// cgroup v2 accepts a write of `root`/`isolated` to `cpuset.cpus.partition` even when the group
/// cannot become a partition, and then reads back "root invalid (<reason>)" (6.x): the CPUs stay
/// shared and SCHED_DEADLINE admission or isolation silently do not hold. Returns the explanation
/// for the user when `state` is such an invalid state (None for a valid one).
pub fn invalid_partition(state: &str) -> Option<String> {
    let state = state.trim();
    if !state.contains("invalid") {
        return None;
    }
    let reason = state.split_once('(').map(|(_, r)| r.trim_end_matches(')').trim()).unwrap_or("");
    let fix = if reason.contains("not exclusive") || reason.contains("exclusive") {
        "another cgroup already holds some of these CPUs exclusively (a sibling partition or its \
         cpuset.cpus.exclusive): find it with `grep . /sys/fs/cgroup/*/cpuset.cpus.partition` and free the CPUs, \
         or plan with other CPUs"
    } else if reason.contains("housekeeping") {
        "the partition contains CPUs isolated at boot (isolcpus=domain; 6.12 refuses them in any partition, \
         'root' or 'isolated'): plan the reserved and dedicated workloads on housekeeping CPUs, or boot without \
         isolcpus=domain for those CPUs (see `rtslice doctor`, isolation)"
    } else if reason.contains("Parent") || reason.contains("parent") {
        "the parent is not a valid partition root, so no child can be one: check the parent's cpuset.cpus.partition"
    } else if reason.contains("hotplug") || reason.contains("No cpu") {
        "none of its CPUs is online: bring them online or plan with online CPUs"
    } else if reason.contains("task") {
        "the parent still has tasks on these CPUs: move them away first"
    } else {
        "the kernel refused to make this group a partition (see cpuset.cpus.partition in the kernel's cgroup-v2 documentation)"
    };
    Some(if reason.is_empty() { fix.to_string() } else { format!("the kernel says \"{reason}\": {fix}") })
}

/// The cgroups of a cgroup2 tree, except rtslice's own (its parent, the node's partitions at the
/// root), that keep CPUs from any partition of ours: valid partitions (`root`, `isolated`) with the
/// CPUs they hold (`cpuset.cpus.effective`), and cgroups reserving CPUs for one (a non-empty
/// `cpuset.cpus.exclusive`, state `member`). A partition of ours asking for such a CPU is made
/// invalid by 6.12, and valid without that CPU by 7.2 (kernels matrix, hcbs-4cpu): either way it
/// would not hold what the workload was given.
pub fn foreign_partitions(root: &Path) -> Vec<(PathBuf, String, CpuList)> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let path = e.path();
            let ours = path == root.join(V2_PARENT) || (dir == root && e.file_name().to_string_lossy().starts_with(V2_PARTITION_PREFIX));
            if !e.file_type().is_ok_and(|t| t.is_dir()) || ours {
                continue;
            }
            let read = |f: &str| std::fs::read_to_string(path.join(f)).map(|s| s.trim().to_string()).unwrap_or_default();
            let state = read("cpuset.cpus.partition");
            if state == "root" || state == "isolated" {
                if let Ok(cpus) = CpuList::parse(&read("cpuset.cpus.effective")) {
                    found.push((path.clone(), state, cpus));
                }
            } else if let Ok(cpus) = CpuList::parse(&read("cpuset.cpus.exclusive")).map(|c| c.intersection(&CpuList::parse(&read("cpuset.cpus")).unwrap_or_default())) {
                // What a member reserves: its exclusive CPUs among its own (the kernel drops the rest).
                if !cpus.is_empty() {
                    found.push((path.clone(), state, cpus));
                }
            }
            stack.push(path);
        }
    }
    found
}

/// HCBS (hierarchical CBS) is present when the kernel exposes cpu.rt.max on the unified hierarchy.
pub fn hcbs_available(layout: &CgroupLayout) -> bool {
    match &layout.v2 {
        Some(root) => {
            root.join("cpu.rt.max").exists()
                || std::fs::read_dir(root)
                    .map(|rd| rd.filter_map(|e| e.ok()).any(|e| e.path().join("cpu.rt.max").exists()))
                    .unwrap_or(false)
        }
        None => false,
    }
}

/// HCBS `cpu.rt.max` as read: the runtime (`None` for `max`: the group takes its tasks' time from
/// the nearest ancestor with a budget) and the period, in µs.
pub fn parse_rt_max(text: &str) -> Option<(Option<u64>, u64)> {
    let mut it = text.split_whitespace();
    let runtime = match it.next()? {
        "max" => None,
        r => Some(r.parse().ok()?),
    };
    let period = it.next()?.parse().ok()?;
    Some((runtime, period))
}

/// HCBS: every group whose budget the root group's holds — a group with a budget whose ancestors
/// below the root are all `max` (a budgeted group holds its own children's) — with its budget.
/// Groups without the cpu controller (no `cpu.rt.max`) hold none, nor do their descendants.
pub fn hcbs_root_groups(root: &Path) -> Vec<(PathBuf, rtslice_plan::kernel::GroupBudget)> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let path = e.path();
            match std::fs::read_to_string(path.join("cpu.rt.max")).ok().as_deref().and_then(parse_rt_max) {
                Some((Some(runtime_us), period_us)) => {
                    found.push((path, rtslice_plan::kernel::GroupBudget { runtime_us, period_us }))
                }
                Some((None, _)) => stack.push(path),
                None => {}
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// HCBS: the root group's budget and every group budget it holds now (see [`hcbs_root_groups`]);
/// `None` without HCBS (no `cpu.rt.max` at the root of the cgroup2 tree).
pub fn hcbs_root(root: &Path) -> Option<rtslice_plan::HcbsRoot> {
    let (runtime, period_us) = parse_rt_max(&std::fs::read_to_string(root.join("cpu.rt.max")).ok()?)?;
    Some(rtslice_plan::HcbsRoot {
        // The root cannot be `max` (the kernel refuses it); read so, it holds nothing to give.
        runtime_us: runtime.unwrap_or(0),
        period_us,
        others: hcbs_root_groups(root).into_iter().map(|(_, b)| b).collect(),
    })
}

/// PIDs listed in a cgroup.procs (or tasks) file.
pub fn read_pids(file: &Path) -> Vec<i32> {
    std::fs::read_to_string(file)
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// The user processes in a cgroup.procs file, as references that survive pid reuse. Kernel threads
/// are left out: the kernel places them, and most refuse a move.
pub(crate) fn user_processes(file: &Path) -> Vec<rtslice_sys::proc_ref::ProcRef> {
    read_pids(file)
        .into_iter()
        .filter(|&pid| !rtslice_sys::procfs::is_kernel_thread(pid))
        .filter_map(rtslice_sys::proc_ref::ProcRef::of)
        .collect()
}

/// Moves processes into the cgroup whose cgroup.procs is `to` (a shield and its undo). Returns how
/// many are still running where they were: pinned by their owner, which the caller reports. One
/// that has exited is skipped (its pid may be another process's by now) and not counted.
pub(crate) fn move_processes(procs: &[rtslice_sys::proc_ref::ProcRef], to: &Path) -> usize {
    procs.iter().filter(|p| p.alive() && crate::fsio::write(to, &p.pid.to_string()).is_err() && p.alive()).count()
}

/// All processes in a workload's cgroup tree (runc puts containers in a child group).
pub fn workload_pids(group_dir: &Path) -> Vec<i32> {
    let mut pids = read_pids(&group_dir.join("cgroup.procs"));
    if let Ok(rd) = std::fs::read_dir(group_dir) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                pids.extend(workload_pids(&e.path()));
            }
        }
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// A cgroup filesystem operation, as data: `ops::workload_ops` and the node's base compute them, `Txn::run` carries them out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Mkdir { path: PathBuf, evacuate_to: PathBuf },
    Write { path: PathBuf, value: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
30 25 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:28 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
33 30 0:29 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
34 30 0:30 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const UNIFIED: &str = "\
30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";
    const COMOUNT: &str = "\
31 30 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
32 30 0:28 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
";

    #[test]
    fn detects_hybrid_v2_and_v1() {
        let h = CgroupLayout::from_mountinfo(HYBRID);
        assert_eq!(h.mode, CgroupMode::Hybrid);
        assert_eq!(h.v1["cpu"], PathBuf::from("/sys/fs/cgroup/cpu"));
        assert!(h.v1.contains_key("name=systemd"));
        assert_eq!(h.v2, Some(PathBuf::from("/sys/fs/cgroup/unified")));
        assert!(h.backend().unwrap().is_v1());

        let mut u = CgroupLayout::from_mountinfo(UNIFIED);
        assert_eq!(u.mode, CgroupMode::V2);
        assert!(u.backend().is_err(), "no controllers listed yet");
        u.v2_controllers = vec!["cpuset".into(), "cpu".into(), "memory".into()];
        assert_eq!(u.backend().unwrap(), Backend::V2 { root: "/sys/fs/cgroup".into() });

        let c = CgroupLayout::from_mountinfo(COMOUNT);
        assert_eq!(c.mode, CgroupMode::V1);
        assert_eq!(c.v1["cpuacct"], PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"));
    }

    #[test]
    fn v2_knobs_are_the_unified_names() {
        let b = Backend::V2 { root: "/cg".into() };
        let g = b.group("du1");
        assert_eq!(g.dirs(), vec![PathBuf::from("/cg/rtslice.slice/du1")]);
        assert_eq!(
            b.rt_budget_writes(&g, 300, 1000),
            vec![(PathBuf::from("/cg/rtslice.slice/du1/cpu.rt.max"), "300 1000".to_string())]
        );
        assert_eq!(b.partition_writes(&g, false)[0].1, "root");
        assert_eq!(b.cfs_writes(&g, None, 100000)[0].1, "max 100000");
        assert_eq!(b.weight_writes(&g, 50)[0], (PathBuf::from("/cg/rtslice.slice/du1/cpu.weight"), "50".into()));
        assert_eq!(b.enable_controllers_writes(Path::new("/cg"))[0].1, "+cpuset +cpu");
        assert_eq!(b.cgroup_of("0::/rtslice.slice/du1\n"), Some(PathBuf::from("/cg/rtslice.slice/du1")));
    }

    #[test]
    fn hcbs_groups_under_max_ancestors_draw_on_the_root() {
        assert_eq!(parse_rt_max("max 0\n"), Some((None, 0)));
        assert_eq!(parse_rt_max("0 1000000"), Some((Some(0), 1_000_000)));
        assert_eq!(parse_rt_max("20000 100000"), Some((Some(20_000), 100_000)));
        assert_eq!(parse_rt_max("bogus"), None);
        let root = tempfile::tempdir().unwrap();
        let mk = |rel: &str, rt_max: Option<&str>| {
            let d = root.path().join(rel);
            std::fs::create_dir_all(&d).unwrap();
            if let Some(v) = rt_max {
                std::fs::write(d.join("cpu.rt.max"), v).unwrap();
            }
        };
        std::fs::write(root.path().join("cpu.rt.max"), "300000 1000000\n").unwrap();
        mk("a", Some("max 0\n"));
        mk("a/b", Some("20000 100000\n"));
        mk("a/b/c", Some("10000 100000\n")); // b's own context: not the root's
        mk("d", Some("50000 1000000\n"));
        mk("e", None); // no cpu controller
        mk("e/f", None);
        let got = hcbs_root_groups(root.path());
        let rel: Vec<String> = got.iter().map(|(p, b)| format!("{} {} {}", p.strip_prefix(root.path()).unwrap().display(), b.runtime_us, b.period_us)).collect();
        assert_eq!(rel, vec!["a/b 20000 100000", "d 50000 1000000"]);
        let r = hcbs_root(root.path()).unwrap();
        assert_eq!((r.runtime_us, r.period_us, r.others.len()), (300_000, 1_000_000, 2));
    }

    #[test]
    fn invalid_partition_states_are_explained() {
        assert_eq!(invalid_partition("root"), None);
        assert_eq!(invalid_partition("isolated\n"), None);
        assert_eq!(invalid_partition("member"), None);
        let e = invalid_partition("root invalid (Cpu list in cpuset.cpus not exclusive)").unwrap();
        assert!(e.contains("Cpu list in cpuset.cpus not exclusive") && e.contains("another cgroup"), "{e}");
        let e = invalid_partition("isolated invalid (Parent is not a partition root)").unwrap();
        assert!(e.contains("parent"), "{e}");
        assert!(invalid_partition("root invalid").is_some());
    }

    #[test]
    fn v1_knobs_follow_the_legacy_names() {
        let b = Backend::V1 { cpuset: "/c/cpuset".into(), cpu: "/c/cpu".into() };
        let g = b.group("du1");
        assert_eq!(g.procs_files().len(), 2);
        let w = b.rt_budget_writes(&g, 300, 1000);
        assert!(w[0].0.ends_with("cpu.rt_period_us") && w[1].0.ends_with("cpu.rt_runtime_us"));
        assert_eq!(b.weight_writes(&g, 100)[0].1, "1024");
        assert_eq!(b.cgroup_of("3:cpuset:/rtslice/du1\n1:cpu:/\n"), Some(PathBuf::from("/c/cpuset/rtslice/du1")));
    }
}
