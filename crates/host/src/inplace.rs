//! In-place application to a cgroup someone else owns (a Kubernetes container's, created by kubelet
//! and runc): rtslice writes attributes of that cgroup, of its ancestors' RT budgets and of its
//! threads, and never moves a process (moving them out of kubelet's hierarchy breaks kubelet's
//! accounting and eviction). Every old value is kept in [`InPlace`] so [`InPlace::release`] undoes
//! exactly what was done; it is serializable so a restarted node service can still release.
//!
//! What is possible inside a foreign tree (docs/kubernetes.md, "Per mechanism"):
//! - cpuset: the container's own `cpuset.cpus`/`cpuset.mems` (v1 and v2);
//! - RT group budget (v1 `cpu.rt_runtime_us`): the kernel requires each group's RT bandwidth to be
//!   at least the sum of its children's, so each ancestor's budget grows by the container's
//!   bandwidth (top-down) and shrinks by it at release (bottom-up). When the root's budget is all
//!   given to rtslice's own parent group, that group lends the difference (if it has it unused);
//! - HCBS group budget (v2 `cpu.rt.max`, the HCBS kernels): the container's own group gets the
//!   budget and its ancestors stay `max` (kubelet's groups: they defer to the nearest budgeted
//!   ancestor, the root), so the one ancestor that must hold it is the root group, whose budget the
//!   node raises before (`Node::hcbs_hold`) and settles after the release (`Node::hcbs_settle_root`):
//!   the node is that file's one writer;
//! - thread policies and affinities (first matching rule), threads born later by [`InPlace::rescan`];
//! - IRQ affinities (host-wide files, old values restored).
//!
//! SCHED_DEADLINE and exclusive partitions are refused by the caller (the node service) before this
//! is reached: they need partitions whose ancestors are partitions, which kubelet's groups are not.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cgroup::{Backend, CgroupLayout};
use crate::cpus::CpuList;
use crate::error::{HostError, Result};
use crate::rules::{self, CompiledRules};
use crate::sched::{self, SchedAttr};
use crate::setup::{IrqRule, WorkloadSetup};

/// One RT budget change a release could not undo when it ran (the kernel refused the lower value
/// while a child still counted), kept to be tried again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Unreturned {
    /// Write this value back.
    Set(PathBuf, i64),
    /// Lower the budget by this many µs (an ancestor raised for the container).
    Lower(PathBuf, i64),
    /// Raise it by this many µs (rtslice's own group, which lent them).
    Raise(PathBuf, i64),
}

impl Unreturned {
    /// One write, no waiting: the service tries again on its next tick.
    fn try_once(&self) -> Result<()> {
        let cur = |f: &Path| read(f).map(|s| s.parse::<i64>().unwrap_or(0));
        match self {
            Unreturned::Set(f, v) => write(f, &v.to_string()),
            Unreturned::Lower(f, d) => cur(f).and_then(|c| write(f, &(c - d).to_string())),
            Unreturned::Raise(f, d) => cur(f).and_then(|c| write(f, &(c + d).to_string())),
        }
    }

    fn file(&self) -> &Path {
        match self {
            Unreturned::Set(f, _) | Unreturned::Lower(f, _) | Unreturned::Raise(f, _) => f,
        }
    }
}

/// What an in-place application changed, with the values it replaced.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InPlace {
    /// The container's cpuset and cpu cgroup directories (the same directory on v2).
    pub cpuset_dir: PathBuf,
    pub cpu_dir: PathBuf,
    /// Files of the container's own cgroups written, with their old values (restored in reverse).
    pub writes: Vec<(PathBuf, String)>,
    /// Ancestors whose `cpu.rt_runtime_us` grew, top-down, and by how many µs.
    pub budget_raised: Vec<(PathBuf, i64)>,
    /// rtslice's own parent group lent this many µs of its budget to the root's other children.
    pub lent_by: Option<(PathBuf, i64)>,
    /// Threads given a rule: their policy and affinity before.
    pub threads: BTreeMap<i32, (SchedAttr, CpuList)>,
    /// IRQ affinity files written, with their old values.
    pub irqs: Vec<(PathBuf, String)>,
    /// The rules, kept for [`InPlace::rescan`].
    pub rules: Vec<crate::setup::ThreadRule>,
    /// Budget changes a release could not undo yet, in order (see [`InPlace::retry_release`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreturned: Vec<Unreturned>,
    pub wide: Option<CpuList>,
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).map_err(|source| HostError::Read { path: path.into(), source })
}

fn write(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value).map_err(|source| HostError::Write { path: path.into(), value: value.into(), source })
}

/// RT budgets freed by a write elsewhere come back asynchronously: a write refused with EBUSY is
/// tried again for a short while.
fn write_budget(path: &Path, value: i64) -> Result<()> {
    write_busy(path, &value.to_string())
}

fn write_busy(path: &Path, value: &str) -> Result<()> {
    let mut last = None;
    for _ in 0..50 {
        match write(path, value) {
            Ok(()) => return Ok(()),
            Err(HostError::Write { source, .. }) if source.raw_os_error() == Some(libc::EBUSY) => {
                last = Some(source);
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e),
        }
    }
    Err(HostError::Write { path: path.into(), value: value.into(), source: last.expect("retried") })
}

/// A budget given back at release, where a lowering refused with EINVAL (the kernel's "the
/// children's sum must fit") is tried again for a few seconds: the kernel can still count a removed
/// child's runtime for a moment after runc removed its cgroup, and a pod's and QoS class's budgets
/// left raised would leave the next container no RT budget (docs/testing.md: seen once in the DRA
/// end-to-end test, mechanism not established); the retry covers a child that goes away shortly.
fn release_budget(path: &Path, value: i64) -> Result<()> {
    let until = std::time::Instant::now() + Duration::from_secs(3);
    loop {
        match write_budget(path, value) {
            Err(HostError::Write { source, .. }) if source.raw_os_error() == Some(libc::EINVAL) && path.exists() && std::time::Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

/// The cpuset and cpu cgroup directories of process `pid`, from /proc/PID/cgroup.
pub fn cgroup_dirs(pid: i32, backend: &Backend) -> Result<(PathBuf, PathBuf)> {
    let path = PathBuf::from(format!("/proc/{pid}/cgroup"));
    let text = read(&path)?;
    let cpuset = backend.cgroup_of(&text).ok_or_else(|| HostError::other(format!("{}: no cpuset cgroup in it", path.display())))?;
    let cpu = match backend {
        Backend::V2 { .. } => cpuset.clone(),
        Backend::V1 { cpu, .. } => {
            let line = text
                .lines()
                .find(|l| l.splitn(3, ':').nth(1).is_some_and(|c| c.split(',').any(|x| x == "cpu")))
                .ok_or_else(|| HostError::other(format!("{}: no cpu cgroup in it", path.display())))?;
            cpu.join(line.splitn(3, ':').nth(2).unwrap_or("/").trim_start_matches('/'))
        }
    };
    Ok((cpuset, cpu))
}

impl InPlace {
    /// Applies `ws` (cpuset, its group's RT budget, thread rules) and `irqs` to the cgroup of process
    /// `pid`, in place. On failure everything done so far is undone. On HCBS the root group's budget
    /// must already hold the group's (`Node::hcbs_hold`).
    pub fn apply(ws: &WorkloadSetup, irqs: &[IrqRule], pid: i32) -> Result<InPlace> {
        let layout = CgroupLayout::detect().map_err(|e| HostError::other(format!("reading the cgroup mounts: {e}")))?;
        let backend = layout.backend().map_err(|e| HostError::Unsupported { what: "cgroups".into(), fix: e })?;
        let (cpuset_dir, cpu_dir) = cgroup_dirs(pid, &backend)?;
        let mut done = InPlace { cpuset_dir, cpu_dir, rules: ws.threads.clone(), wide: ws.wide_affinity.then(|| ws.cpus.clone()), ..InPlace::default() };
        match done.apply_steps(ws, irqs, &backend) {
            Ok(()) => Ok(done),
            Err(e) => {
                let undo = done.release();
                if !undo.is_empty() {
                    tracing_note(&undo);
                }
                Err(e)
            }
        }
    }

    fn apply_steps(&mut self, ws: &WorkloadSetup, irqs: &[IrqRule], backend: &Backend) -> Result<()> {
        if !ws.cpus.is_empty() {
            self.set(&self.cpuset_dir.join("cpuset.cpus"), &ws.cpus.to_string())?;
        }
        if let Some(mems) = &ws.mems {
            self.set(&self.cpuset_dir.join("cpuset.mems"), mems)?;
        }
        // The group's budget as the plan gave it (RT groups, HCBS: the reservation's real-time part).
        if let Some(r) = &ws.group_budget {
            match backend {
                Backend::V1 { cpu: root, .. } => self.budget(root, r.runtime_us() as i64, r.period_us() as i64)?,
                Backend::V2 { .. } if self.cpu_dir.join(HCBS_FILE).exists() => {
                    // Written before the threads get FIFO/RR: the kernel lets an RT thread into a
                    // group only once the group has a runtime.
                    let file = self.cpu_dir.join(HCBS_FILE);
                    let old = read(&file)?;
                    write_busy(&file, &format!("{} {}", r.runtime_us(), r.period_us()))?;
                    self.writes.push((file, old));
                }
                Backend::V2 { .. } => return Err(HostError::Rejected(V2_WITHOUT_HCBS.into())),
            }
        }
        self.rescan()?;
        for rule in irqs {
            let re = crate::setup::pattern(&rule.action).map_err(HostError::Invalid)?;
            let all = crate::irq::read_interrupts().map_err(|e| HostError::other(format!("reading /proc/interrupts: {e}")))?;
            for irq in crate::irq::matching(&all, &re) {
                let file = irq.affinity_file();
                let old = read(&file)?;
                write(&file, &rule.cpus.to_string())?;
                self.irqs.push((file, old));
            }
        }
        Ok(())
    }

    fn set(&mut self, file: &Path, value: &str) -> Result<()> {
        let old = read(file)?;
        if old == value {
            return Ok(());
        }
        write(file, value)?;
        self.writes.push((file.to_path_buf(), old));
        Ok(())
    }

    /// The container's RT budget, after raising each ancestor's by the same bandwidth.
    fn budget(&mut self, root: &Path, runtime_us: i64, period_us: i64) -> Result<()> {
        let rel = self.cpu_dir.strip_prefix(root).map_err(|_| HostError::other(format!("{} is not under {}", self.cpu_dir.display(), root.display())))?.to_path_buf();
        let mut ancestors = Vec::new();
        let mut p = root.to_path_buf();
        let comps: Vec<_> = rel.components().collect();
        for c in &comps[..comps.len().saturating_sub(1)] {
            p = p.join(c);
            ancestors.push(p.clone());
        }
        for (i, a) in ancestors.iter().enumerate() {
            let a_period: i64 = read(&a.join("cpu.rt_period_us"))?.parse().unwrap_or(1_000_000);
            // The same bandwidth in the ancestor's period, rounded up (the kernel compares ratios).
            let add = (runtime_us * a_period + period_us - 1) / period_us;
            let file = a.join("cpu.rt_runtime_us");
            let cur: i64 = read(&file)?.parse().map_err(|_| HostError::other(format!("{}: not a number", file.display())))?;
            if cur < 0 {
                continue; // unlimited (-1): nothing to raise
            }
            let r = write_budget(&file, cur + add);
            if let (Err(_), 0) = (&r, i) {
                // The root's budget may be all rtslice's own group's: borrow what it does not use.
                self.lend(root, add)?;
                write_budget(&file, cur + add)?;
            } else {
                r?;
            }
            self.budget_raised.push((file, add));
        }
        self.set(&self.cpu_dir.join("cpu.rt_period_us"), &period_us.to_string())?;
        let file = self.cpu_dir.join("cpu.rt_runtime_us");
        let old = read(&file)?;
        write_budget(&file, runtime_us)?;
        self.writes.push((file, old));
        Ok(())
    }

    fn lend(&mut self, root: &Path, us: i64) -> Result<()> {
        let own = root.join(crate::cgroup::V1_PARENT);
        let file = own.join("cpu.rt_runtime_us");
        let refuse = |why: String| {
            HostError::Rejected(format!(
                "no RT budget left for kubelet's cgroups: the root's {} is taken and {why}; lower the node's cap (rtslice daemon --node) or remove workloads",
                root.join("cpu.rt_runtime_us").display()
            ))
        };
        let cur: i64 = match read(&file) {
            Ok(s) => s.parse().unwrap_or(0),
            Err(_) => return Err(refuse("rtslice's own group does not exist".into())),
        };
        // What rtslice's own workloads hold: the sum of its children's budgets (same 1 s period).
        let mut used = 0i64;
        if let Ok(rd) = std::fs::read_dir(&own) {
            for e in rd.flatten().filter(|e| e.path().is_dir()) {
                let rt: i64 = read(&e.path().join("cpu.rt_runtime_us")).ok().and_then(|s| s.parse().ok()).unwrap_or(0);
                let per: i64 = read(&e.path().join("cpu.rt_period_us")).ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
                used += (rt.max(0) * 1_000_000 + per - 1) / per.max(1);
            }
        }
        if cur - us < used {
            return Err(refuse(format!("rtslice's own workloads use {used} of {cur} µs/s")));
        }
        write_budget(&file, cur - us)?;
        let prev = self.lent_by.take().map_or(0, |(_, n)| n);
        self.lent_by = Some((file, prev + us));
        Ok(())
    }

    /// Gives every thread of the container that has none yet its rule (threads born or renamed since).
    /// Returns how many threads were newly placed.
    pub fn rescan(&mut self) -> Result<usize> {
        let compiled = CompiledRules::new(&self.rules, self.wide.clone()).map_err(HostError::Invalid)?;
        if compiled.is_empty() {
            return Ok(0);
        }
        let threads: Vec<(i32, String)> =
            rules::workload_threads(&self.cpu_dir).into_iter().map(|(_, tid, comm)| (tid, comm)).collect();
        let mut fresh = Vec::new();
        for (tid, w) in compiled.assign(&threads) {
            if self.threads.contains_key(&tid) {
                if rules::conforms(tid, &w).is_ok() {
                    continue;
                }
            } else {
                let (Ok(attr), Ok(aff)) = (sched::get_attr(tid), sched::get_affinity(tid)) else { continue };
                self.threads.insert(tid, (attr, aff));
            }
            fresh.push((tid, w));
        }
        let n = fresh.len();
        let (_, errors) = rules::enforce_all(fresh);
        if let Some((tid, e)) = errors.into_iter().next() {
            return Err(HostError::other(format!("thread {tid} of {}: {e}", self.cpu_dir.display())));
        }
        Ok(n)
    }

    /// Undoes everything, most recent first; returns what could not be undone (e.g. a cgroup already
    /// removed with its container: nothing left to restore there).
    pub fn release(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        // Threads first: an RT thread keeps its group's budget busy.
        for (tid, (attr, aff)) in std::mem::take(&mut self.threads) {
            let back = if attr.is_realtime() { SchedAttr::Other { nice: 0 } } else { attr };
            if let Err(e) = sched::set_attr(tid, back).and_then(|_| sched::set_affinity(tid, &aff)) {
                if !matches!(&e, HostError::Sched { source, .. } if source.raw_os_error() == Some(libc::ESRCH)) {
                    problems.push(e.to_string());
                }
            }
        }
        for (file, old) in std::mem::take(&mut self.irqs).into_iter().rev() {
            if let Err(e) = write(&file, &old) {
                problems.push(e.to_string());
            }
        }
        for (file, old) in std::mem::take(&mut self.writes).into_iter().rev() {
            if file.ends_with("cpu.rt_runtime_us") {
                self.undo_budget(Unreturned::Set(file, old.parse().unwrap_or(0)), &mut problems);
            } else if let Err(e) = write_busy(&file, &old) {
                if file.exists() {
                    problems.push(e.to_string());
                }
            }
        }
        for (file, add) in std::mem::take(&mut self.budget_raised).into_iter().rev() {
            self.undo_budget(Unreturned::Lower(file, add), &mut problems);
        }
        if let Some((file, us)) = self.lent_by.take() {
            self.undo_budget(Unreturned::Raise(file, us), &mut problems);
        }
        problems
    }

    /// One budget change undone, or kept in `unreturned` (with the problem said) when the kernel
    /// refuses it; nothing to do when its cgroup is gone. Once one is kept, the ones after it (its
    /// ancestors) are kept too without trying: lowering them first would fail the same way.
    fn undo_budget(&mut self, u: Unreturned, problems: &mut Vec<String>) {
        if !self.unreturned.is_empty() {
            self.unreturned.push(u);
            return;
        }
        let r = match &u {
            Unreturned::Set(f, v) => release_budget(f, *v),
            Unreturned::Lower(f, d) => read(f).and_then(|c| release_budget(f, c.parse::<i64>().unwrap_or(*d) - d)),
            Unreturned::Raise(f, d) => read(f).and_then(|c| write_budget(f, c.parse::<i64>().unwrap_or(0) + d)),
        };
        if let Err(e) = r {
            if u.file().exists() {
                problems.push(format!("{e} (tried again later)"));
                self.unreturned.push(u);
            }
        }
    }

    /// Tries the budget changes a release could not undo again, in order, stopping at the first
    /// the kernel still refuses; those whose cgroup is gone are dropped. True when none is left.
    pub fn retry_release(&mut self) -> bool {
        while let Some(u) = self.unreturned.first() {
            if !u.file().exists() || u.try_once().is_ok() {
                self.unreturned.remove(0);
            } else {
                break;
            }
        }
        self.unreturned.is_empty()
    }
}

fn tracing_note(problems: &[String]) {
    eprintln!("rtslice: warning: undoing a failed in-place application left: {}", problems.join("; "));
}

/// HCBS's group budget file (cgroup v2, the HCBS kernels).
const HCBS_FILE: &str = "cpu.rt.max";

const V2_WITHOUT_HCBS: &str = "cgroup v2 has no RT group budgets on this kernel (no cpu.rt.max: not an HCBS kernel) and pinned \
     SCHED_DEADLINE needs partitions kubelet's cgroups are not: a reservation inside a pod cannot be enforced on this node; \
     ask for dedicated CPUs (rtslice.io/dedicated), or boot a kernel with HCBS (docs/host.md)";

/// Whether a reservation can be enforced inside a foreign cgroup tree here, by a node that
/// reserves with `mechanism`: RT group budgets on a cgroup v1 `cpu` hierarchy
/// (CONFIG_RT_GROUP_SCHED), or HCBS budgets on cgroup v2 when the node reserves with HCBS (it
/// budgets the root group they need). The reason says what to do otherwise.
pub fn reservations_supported(mechanism: crate::Mechanism) -> std::result::Result<(), String> {
    let layout = CgroupLayout::detect().map_err(|e| format!("reading the cgroup mounts: {e}"))?;
    if crate::cgroup::hcbs_available(&layout) {
        return match mechanism {
            crate::Mechanism::Hcbs => Ok(()),
            m => Err(format!(
                "this kernel has HCBS group budgets, but the node reserves with {m}: a reservation inside a pod needs a group budget; \
                 restart the node service without --mechanism (HCBS is its default here) or with --mechanism hcbs"
            )),
        };
    }
    match layout.backend()? {
        Backend::V1 { cpu, .. } if cpu.join("cpu.rt_runtime_us").exists() => Ok(()),
        Backend::V1 { cpu, .. } => Err(format!(
            "{} has no cpu.rt_runtime_us (kernel without CONFIG_RT_GROUP_SCHED): a reservation inside kubelet's cgroups cannot be enforced; ask for dedicated CPUs (rtslice.io/dedicated)",
            cpu.display()
        )),
        Backend::V2 { .. } => Err(V2_WITHOUT_HCBS.into()),
    }
}
