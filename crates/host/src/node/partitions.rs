//! The node-wide cpuset state that follows the set of workloads: v1's `system` group kept off the
//! exclusive partitions, the shared partitions workloads on the same CPUs join, and the CPUs isolated
//! at boot kept out of every partition change.

use super::*;

impl Node {
    /// v1 with partitions: `system` holds every online CPU that no exclusive workload group holds,
    /// less `also` (CPUs a workload is about to take). Read from the kernel, so it is right after
    /// any failure or crash too.
    pub(super) fn set_system(&self, also: &CpuList) -> Result<()> {
        // v2 has no `system`: the root cgroup's effective CPUs leave out its partitions by themselves.
        if !self.base.partitions || !self.facts.backend.is_v1() {
            return Ok(());
        }
        let parent = self.facts.backend.parent().cpuset;
        let mut exclusive = also.clone();
        if let Ok(rd) = std::fs::read_dir(&parent) {
            for e in rd.flatten() {
                let dir = e.path();
                if dir.is_dir() && e.file_name() != "system" && partition_of(&dir) {
                    if let Some(c) = fsio::read_trim(dir.join("cpuset.cpus")).ok().and_then(|s| CpuList::parse(&s).ok()) {
                        exclusive = exclusive.union(&c);
                    }
                }
            }
        }
        let rest = self.base.online.difference(&exclusive);
        let file = self.facts.backend.group("system").cpuset.join("cpuset.cpus");
        let cur = fsio::read_trim(&file)?;
        if crate::txn::same_value(&cur, &rest.to_string()) {
            return Ok(());
        }
        fsio::write(&file, &rest.to_string())
    }

    /// v1 shields: while a deployed workload is shielded, every user process of the root cpuset lives
    /// in `system` (the CPUs no partition holds, so none of the shielded ones); with none, `system`'s
    /// processes go back to the root. Derived from the deployed workloads after every operation and
    /// recovery, not journaled per workload: two shields removed in either order must leave the
    /// processes where the remaining one needs them. The base's undo (removing `system`) puts every
    /// process back into the root too. Returns what could not move (pinned tasks), as warnings.
    pub(super) fn sync_shield(&self) -> Vec<String> {
        let Backend::V1 { cpuset: root, .. } = &self.facts.backend else { return Vec::new() };
        if !self.base.partitions {
            return Vec::new();
        }
        let shielded = self.records().is_ok_and(|recs| recs.iter().any(|r| r.setup.workloads.iter().any(|w| w.shield)));
        let system = self.facts.backend.group("system").cpuset;
        let (from, to) = if shielded { (root.clone(), system) } else { (system, root.clone()) };
        let stuck = crate::cgroup::move_processes(&crate::cgroup::user_processes(&from.join("cgroup.procs")), &to.join("cgroup.procs"));
        match (stuck, shielded) {
            (0, _) => Vec::new(),
            (n, true) => vec![format!("shield: {n} process(es) could not leave the root cpuset (pinned by their owner?) and may still run on the shielded CPUs")],
            (n, false) => vec![format!("shield: {n} process(es) could not go back from {} to the root cpuset", from.display())],
        }
    }

    /// Removes shared partitions no workload is in any more, then gives `system` back what no
    /// partition holds (after every remove, failed operation and recovery).
    pub(super) fn refresh_system(&self) {
        let (holder, prefix) = match &self.facts.backend {
            Backend::V1 { .. } => (self.facts.backend.parent().cpuset, SHARED_PARTITION_PREFIX),
            Backend::V2 { root } => (root.clone(), crate::cgroup::V2_PARTITION_PREFIX),
        };
        if let Ok(rd) = std::fs::read_dir(&holder) {
            for e in rd.flatten() {
                let dir = e.path();
                let empty = || std::fs::read_dir(&dir).is_ok_and(|mut r| !r.any(|x| x.is_ok_and(|x| x.path().is_dir())));
                if e.file_name().to_string_lossy().starts_with(prefix) && dir.is_dir() && empty() {
                    // A failure (a task someone moved in) leaves it for the next operation to retry;
                    // its CPUs stay out of `system` meanwhile, which set_system reads from the kernel.
                    // v2: the CPUs go back to the root asynchronously; remove_cgroup waits for them.
                    let held = fsio::read_trim(dir.join("cpuset.cpus.effective")).ok().and_then(|c| CpuList::parse(&c).ok());
                    let evacuate = self.facts.backend.root().cpuset.join("cgroup.procs");
                    let _ = self.keep_boot_isolation(&held.unwrap_or_default(), || crate::txn::remove_cgroup(&dir, &evacuate));
                }
            }
        }
        let _ = self.set_system(&CpuList::new());
    }

    /// The partition SCHED_DEADLINE workloads on exactly `cpus` share: created when the first one is
    /// deployed, removed with the last (`refresh_system`). Not journaled: it is derived from the
    /// workloads in it (like `system`'s CPUs), so a crash can only leave an empty one, which the
    /// next operation or `Node::open` removes.
    pub(super) fn ensure_shared_partition(&self, dir: &Path, cpus: &CpuList) -> Result<()> {
        if partition_of(dir) {
            return Ok(());
        }
        self.set_system(cpus)?;
        if !dir.exists() {
            fsio::mkdir(dir)?;
        }
        fsio::write(dir.join("cpuset.cpus"), &cpus.to_string())?;
        fsio::write(dir.join("cpuset.mems"), &self.facts.mems)?;
        if self.facts.backend.is_v1() {
            return fsio::write(dir.join("cpuset.cpu_exclusive"), "1");
        }
        // Its members get the cpu (and memory) knobs, then it becomes a partition root. v2 takes an
        // impossible request without an error and reads back "root invalid (<why>)": check it.
        let memory = self.facts.layout.v2_controllers.iter().any(|c| c == "memory");
        fsio::write(dir.join("cgroup.subtree_control"), if memory { "+cpuset +cpu +memory" } else { "+cpuset +cpu" })?;
        let file = dir.join("cpuset.cpus.partition");
        self.keep_boot_isolation(&CpuList::new(), || fsio::write(&file, "root"))?;
        let state = fsio::read_trim(&file)?;
        match crate::cgroup::invalid_partition(&state) {
            None => Ok(()),
            Some(explanation) => Err(HostError::InvalidPartition { path: file, wanted: "root".into(), state, explanation }),
        }
    }

    /// cgroup v2 with boot isolation (`isolcpus=domain`): creating or removing a partition makes
    /// the kernel give every task of the root cgroup all CPUs no partition holds — the isolated ones
    /// included (6.12 resets the top cpuset's tasks to the possible CPUs less the partitions' CPUs).
    /// Around such a
    /// change (`change`), the root cgroup's threads get back what they had, within what the root
    /// now has: a thread that ran on every housekeeping CPU the root had also gets the
    /// housekeeping CPUs a removed partition gave back (`freed`); a thread pinned narrower keeps its
    /// pin. Not journaled, like the partitions themselves: it follows them.
    pub(super) fn keep_boot_isolation<T>(&self, freed: &CpuList, change: impl FnOnce() -> Result<T>) -> Result<T> {
        let Backend::V2 { root } = &self.facts.backend else { return change() };
        let isolated = &self.facts.boot_isolated;
        if isolated.is_empty() {
            return change();
        }
        let effective = || fsio::read_trim(root.join("cpuset.cpus.effective")).ok().and_then(|c| CpuList::parse(&c).ok());
        let housekeeping = effective().map(|e| e.difference(isolated));
        let before = crate::sched::movable_affinities(&root.join("cgroup.threads"));
        let out = change();
        let now = effective();
        let freed = freed.difference(isolated);
        for (tid, had) in before {
            let wide = housekeeping.as_ref().is_some_and(|hk| !hk.is_empty() && hk.is_subset(&had));
            let mut want = if wide { had.union(&freed) } else { had };
            if let Some(now) = &now {
                want = want.intersection(now);
            }
            if !want.is_empty() && crate::sched::get_affinity(tid).is_ok_and(|cur| cur != want) {
                // A thread that exited or that the kernel will not move needs nothing.
                let _ = crate::sched::set_affinity(tid, &want);
            }
        }
        out
    }
}

/// Shared partitions are named `_partition-<cpus>` under the parent cpuset: no workload can have
/// such a name (workload names start with a letter or digit).
pub(super) const SHARED_PARTITION_PREFIX: &str = "_partition-";

/// The node's partition for workloads on `cpus`: v1 under the parent cpuset, v2 at the root.
pub(super) fn shared_partition_dir(backend: &Backend, cpus: &CpuList) -> PathBuf {
    match backend {
        Backend::V1 { .. } => backend.parent().cpuset.join(format!("{SHARED_PARTITION_PREFIX}{cpus}")),
        Backend::V2 { root } => root.join(format!("{}{cpus}", crate::cgroup::V2_PARTITION_PREFIX)),
    }
}

/// The node partition a workload's cpuset group is in, if it is in one.
pub(super) fn shared_partition_of(group_cpuset: &Path) -> Option<PathBuf> {
    let dir = group_cpuset.parent()?;
    let name = dir.file_name()?.to_string_lossy();
    (name.starts_with(SHARED_PARTITION_PREFIX) || name.starts_with(crate::cgroup::V2_PARTITION_PREFIX)).then(|| dir.to_path_buf())
}

/// The partition a workload's cpuset group is (an exclusive group of its own) or is in (shared).
pub(super) fn partition_dir_of(group_cpuset: &Path) -> Option<PathBuf> {
    if partition_of(group_cpuset) {
        return Some(group_cpuset.to_path_buf());
    }
    shared_partition_of(group_cpuset).filter(|d| partition_of(d))
}

/// A v1 cpuset that is an exclusive partition (reads `cpuset.cpu_exclusive` = 1), or a valid v2 one.
pub(super) fn partition_of(cpuset_dir: &Path) -> bool {
    fsio::read_trim(cpuset_dir.join("cpuset.cpu_exclusive")).is_ok_and(|v| v == "1")
        || fsio::read_trim(cpuset_dir.join("cpuset.cpus.partition")).is_ok_and(|v| v == "root" || v == "isolated")
}
