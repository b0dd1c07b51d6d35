//! `apply`: validate a `Setup` against this host (rejecting before anything is touched), then make it
//! real in one transaction — cgroups, budgets, partitions, fair_server, IRQs, RPS/XPS, the agent,
//! launches, thread rules, shields — rolling everything back if any step fails.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::cgroup::{Backend, CgroupLayout, GroupPaths};
use crate::cpus::CpuList;
use crate::error::{HostError, Result};
use crate::fsio;
use crate::journal::{Change, ProcRef, State, StateDir};
use crate::record::{AppliedRecord, Mechanism, WorkloadRecord};
use crate::rules::CompiledRules;
use crate::sched::Policy;
use crate::setup::{Launch, Setup, WorkloadSetup};
use crate::txn::{Fault, Txn};

/// How to start the agent that gives threads born later their rules: `program args.. --state-dir DIR`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Extra environment. The agent also always gets RTSLICE_STATE_DIR.
    pub env: Vec<(String, String)>,
    /// Append `--state-dir DIR` to the arguments (the `rtslice agent` CLI form).
    pub state_dir_arg: bool,
}

impl AgentCommand {
    /// `rtslice agent --state-dir DIR` from an rtslice binary (e.g. `std::env::current_exe()`).
    pub fn rtslice_binary(exe: PathBuf) -> AgentCommand {
        AgentCommand { program: exe, args: vec!["agent".into()], env: Vec::new(), state_dir_arg: true }
    }
}

#[derive(Clone, Debug, Default)]
pub struct ApplyOptions {
    pub state_dir: StateDir,
    /// Force a reservation mechanism; `None` picks the best the host has (HCBS > SCHED_DEADLINE in
    /// partitions (when reserved CPU sets are disjoint) > RT groups).
    pub mechanism: Option<Mechanism>,
    /// Start an agent for threads born after apply returns; `None` = rules only for threads that exist.
    pub agent: Option<AgentCommand>,
    /// Set fair_server runtime to 0 on CPUs that hold only reserved RT work.
    pub fair_server_off: bool,
    /// Turn the scheduler features HRTICK and HRTICK_DL on (debugfs `sched/features`): CFS slices
    /// and SCHED_DEADLINE runtimes are then enforced by high-resolution timers instead of the tick
    /// (4 ms at HZ=250). Journaled; reset restores the previous settings.
    pub hrtick: bool,
    /// runc binary (default: from PATH).
    pub runc: Option<PathBuf>,
    /// Network namespace and seccomp choices for OCI launches of a plan (a `Setup` carries its own).
    pub oci: crate::from_plan::OciDefaults,
    /// Test hook: make the n-th change fail (rollback tests).
    pub fault: Fault,
}

impl ApplyOptions {
    pub fn with_state_dir(path: impl Into<PathBuf>) -> ApplyOptions {
        ApplyOptions { state_dir: StateDir::new(path), ..Default::default() }
    }
}

/// What an apply did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Applied {
    pub mechanism: Mechanism,
    pub workloads: Vec<WorkloadRecord>,
    pub warnings: Vec<String>,
    /// Number of journaled changes (what `reset` will undo).
    pub changes: usize,
    pub agent: Option<ProcRef>,
}

/// What apply needs to know about the host.
#[derive(Clone, Debug)]
pub struct HostFacts {
    pub online: CpuList,
    pub mems: String,
    pub layout: CgroupLayout,
    pub backend: Backend,
    pub available: Vec<Mechanism>,
    /// Global RT ratio (sched_rt_runtime_us / sched_rt_period_us), the kernel's admission cap.
    pub rt_ratio: f64,
}

impl HostFacts {
    pub fn detect() -> Result<HostFacts> {
        let layout = CgroupLayout::detect().map_err(|e| HostError::Unsupported {
            what: format!("cannot read /proc/self/mountinfo: {e}"),
            fix: "run on Linux with /proc mounted".into(),
        })?;
        let backend = layout
            .backend()
            .map_err(|fix| HostError::Unsupported { what: "no usable cpuset+cpu cgroup controllers".into(), fix })?;
        let mems = fsio::read_trim(backend.root().cpuset.join("cpuset.mems"))
            .or_else(|_| fsio::read_trim(backend.root().cpuset.join("cpuset.mems.effective")))
            .unwrap_or_else(|_| "0".into());
        let runtime: i64 = fsio::read_trim("/proc/sys/kernel/sched_rt_runtime_us")?.parse().unwrap_or(950000);
        let period: f64 = fsio::read_trim("/proc/sys/kernel/sched_rt_period_us")?.parse().unwrap_or(1e6);
        Ok(HostFacts {
            online: crate::doctor::online_cpus(),
            mems: if mems.is_empty() { "0".into() } else { mems },
            available: crate::doctor::mechanisms(&layout),
            layout,
            backend,
            rt_ratio: if runtime < 0 { 1.0 } else { runtime as f64 / period },
        })
    }
}

/// A workload after validation and mechanism translation.
#[derive(Clone, Debug, PartialEq)]
pub struct Prepared {
    pub ws: WorkloadSetup,
    pub group: GroupPaths,
    /// v1: a group in the cpu hierarchy (RT budget or CFS controls); v2: always one group.
    pub cpu_group: bool,
    pub partition: bool,
    /// RT budget (runtime_us, period_us) written to the group (HCBS or RT groups).
    pub rt_budget: Option<(u64, u64)>,
}

/// A cgroup filesystem operation, computed purely from the setup (see `cgroup_ops`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Mkdir { path: PathBuf, evacuate_to: PathBuf },
    Write { path: PathBuf, value: String },
}

fn rejected(msg: impl Into<String>) -> HostError {
    HostError::Rejected(msg.into())
}

/// Picks the mechanism: the requested one if the host has it, else the best that fits.
pub fn resolve_mechanism(setup: &Setup, facts: &HostFacts, requested: Option<Mechanism>) -> Result<Mechanism> {
    let reserved: Vec<&WorkloadSetup> = setup.workloads.iter().filter(|w| w.reservation.is_some()).collect();
    if let Some(m) = requested {
        if m != Mechanism::None && !facts.available.contains(&m) {
            return Err(rejected(format!(
                "reservation mechanism {m} is not available on this host (available: [{}]); see `rtslice doctor`",
                facts.available.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", ")
            )));
        }
        return Ok(if reserved.is_empty() { Mechanism::None } else { m });
    }
    if reserved.is_empty() {
        return Ok(Mechanism::None);
    }
    let disjoint = reserved.iter().enumerate().all(|(i, a)| {
        reserved[i + 1..].iter().all(|b| a.cpus.intersection(&b.cpus).is_empty())
    });
    let has = |m| facts.available.contains(&m);
    if has(Mechanism::Hcbs) {
        Ok(Mechanism::Hcbs)
    } else if has(Mechanism::Deadline) && disjoint {
        Ok(Mechanism::Deadline)
    } else if has(Mechanism::RtGroup) {
        Ok(Mechanism::RtGroup)
    } else if has(Mechanism::Deadline) {
        Ok(Mechanism::Deadline)
    } else {
        Err(rejected("this host has no reservation mechanism (no HCBS, no cpuset partitions, no RT groups); see `rtslice doctor`"))
    }
}

/// Validates everything that can be checked without touching the host, and translates rules for the
/// mechanism. Errors are `Rejected`: nothing has been changed.
pub fn prepare(setup: &Setup, facts: &HostFacts, mech: Mechanism) -> Result<(Vec<Prepared>, Vec<String>)> {
    let mut warnings = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    let v1 = facts.backend.is_v1();
    for w in &setup.workloads {
        if !crate::setup::valid_name(&w.name) || w.name == "system" {
            return Err(rejected(format!(
                "workload name {:?} is not usable as a cgroup name (letters, digits, _ . -; not \"system\")",
                w.name
            )));
        }
        if !names.insert(&w.name) {
            return Err(rejected(format!("workload {} appears twice", w.name)));
        }
        if w.cpus.is_empty() || !w.cpus.is_subset(&facts.online) {
            return Err(rejected(format!(
                "workload {}: CPUs [{}] are not a non-empty subset of the online CPUs [{}]",
                w.name, w.cpus, facts.online
            )));
        }
        for r in &w.threads {
            crate::setup::pattern(&r.name).map_err(|e| rejected(format!("workload {}: {e}", w.name)))?;
            if let Some(p) = &r.policy {
                p.validate().map_err(|e| rejected(format!("workload {} rule {:?}: {e}", w.name, r.name)))?;
            }
            if let Some(c) = &r.cpus {
                if !c.is_subset(&w.cpus) {
                    return Err(rejected(format!(
                        "workload {} rule {:?}: CPUs [{c}] lie outside the workload's [{}]",
                        w.name, r.name, w.cpus
                    )));
                }
            }
        }
        if let Some(r) = &w.reservation {
            if r.runtime_us == 0 || r.runtime_us > r.period_us {
                return Err(rejected(format!("workload {}: reservation needs 0 < runtime ≤ period", w.name)));
            }
        }
    }
    for rule in &setup.irqs {
        crate::setup::pattern(&rule.action).map_err(rejected)?;
        if rule.cpus.is_empty() || !rule.cpus.is_subset(&facts.online) {
            return Err(rejected(format!("IRQ rule {:?}: CPUs [{}] not online", rule.action, rule.cpus)));
        }
    }
    for rule in &setup.nets {
        crate::setup::pattern(&rule.iface).map_err(rejected)?;
    }

    // Admission: per CPU, reserved bandwidth must fit the kernel's RT cap.
    for cpu in facts.online.iter() {
        let sum: f64 = setup
            .workloads
            .iter()
            .filter(|w| w.cpus.contains(cpu))
            .filter_map(|w| w.reservation.map(|r| r.utilization()))
            .sum();
        if sum > facts.rt_ratio + 1e-9 {
            return Err(rejected(format!(
                "CPU {cpu} would carry {:.1}% of reserved real-time bandwidth, above the kernel's cap {:.1}% \
                 (sched_rt_runtime_us/sched_rt_period_us); shrink the reservations or spread them",
                sum * 100.0,
                facts.rt_ratio * 100.0
            )));
        }
    }
    if mech == Mechanism::RtGroup {
        let total: f64 = setup.workloads.iter().filter_map(|w| w.reservation.map(|r| r.utilization())).sum();
        if total > facts.rt_ratio + 1e-9 {
            return Err(rejected(format!(
                "RT group scheduling (cgroup v1) accounts every group's runtime/period against one per-CPU ratio: \
                 the reservations sum to {:.1}%, above the cap {:.1}%; use --mechanism deadline or fewer reservations",
                total * 100.0,
                facts.rt_ratio * 100.0
            )));
        }
    }

    let mut out = Vec::new();
    for w in &setup.workloads {
        let mut ws = w.clone();
        let has_deadline_rule = |ws: &WorkloadSetup| ws.threads.iter().any(|r| matches!(r.policy, Some(Policy::Deadline { .. })));
        let rt_rules = ws.threads.iter().filter(|r| matches!(r.policy, Some(Policy::Fifo { .. } | Policy::Rr { .. }))).count();
        let mut rt_budget = None;
        if let Some(res) = ws.reservation {
            match mech {
                Mechanism::Deadline => {
                    // The workload's budget (runtime on each of its CPUs) is split over its RT rules.
                    let total_ns = res.runtime_us as f64 * 1000.0 * ws.cpus.len() as f64;
                    let period_ns = res.period_us * 1000;
                    let n = rt_rules.max(1) as f64;
                    for r in ws.threads.iter_mut() {
                        if let Some(Policy::Fifo { .. } | Policy::Rr { .. }) = r.policy {
                            let share = r.budget_share.unwrap_or(1.0 / n);
                            let mut runtime_ns = (total_ns * share) as u64;
                            if runtime_ns > period_ns {
                                warnings.push(format!(
                                    "workload {} rule {:?}: its share ({:.0} µs) exceeds one CPU per period; capped at the period",
                                    w.name,
                                    r.name,
                                    runtime_ns as f64 / 1000.0
                                ));
                                runtime_ns = period_ns;
                            }
                            r.policy = Some(Policy::Deadline { runtime_ns, deadline_ns: period_ns, period_ns });
                        }
                    }
                    if rt_rules == 0 && !has_deadline_rule(&ws) {
                        warnings.push(format!(
                            "workload {}: a reservation under SCHED_DEADLINE applies to real-time thread rules, and it has none; \
                             add a rule (policy fifo/rr/deadline) naming its real-time threads",
                            w.name
                        ));
                    }
                    let dl: f64 = ws
                        .threads
                        .iter()
                        .filter_map(|r| match r.policy {
                            Some(Policy::Deadline { runtime_ns, period_ns, .. }) => Some(runtime_ns as f64 / period_ns as f64),
                            _ => None,
                        })
                        .sum();
                    if dl > facts.rt_ratio * ws.cpus.len() as f64 + 1e-9 {
                        return Err(rejected(format!(
                            "workload {}: its SCHED_DEADLINE threads need {:.1}% of a CPU, its partition offers {:.1}%",
                            w.name,
                            dl * 100.0,
                            facts.rt_ratio * 100.0 * ws.cpus.len() as f64
                        )));
                    }
                }
                Mechanism::RtGroup | Mechanism::Hcbs => rt_budget = Some((res.runtime_us, res.period_us)),
                Mechanism::None => {}
            }
        }
        let spans_all = ws.cpus == facts.online;
        let partition = !spans_all && (ws.partition || ws.shield || has_deadline_rule(&ws));
        if mech == Mechanism::Hcbs && v1 {
            return Err(rejected("HCBS needs the cgroup v2 cpu.rt.max interface"));
        }
        let has_rt_rules = ws.threads.iter().any(|r| matches!(r.policy, Some(Policy::Fifo { .. } | Policy::Rr { .. })));
        let cfs = ws.cfs.is_some_and(|c| c.quota_us.is_some() || c.weight.is_some() || c.idle);
        let mut cpu_group = !v1 || rt_budget.is_some() || matches!(ws.launch, Launch::Oci(_));
        if v1 && cfs && rt_budget.is_none() {
            if has_rt_rules {
                warnings.push(format!(
                    "workload {}: CFS controls skipped — on cgroup v1 with RT group scheduling its FIFO/RR threads need \
                     the root cpu group (or a reservation)",
                    w.name
                ));
            } else {
                cpu_group = true;
            }
        }
        if v1 && cpu_group && rt_budget.is_none() && has_rt_rules {
            warnings.push(format!(
                "workload {}: its FIFO/RR threads sit in a cpu cgroup without RT budget (OCI launch); the kernel will refuse \
                 their policy unless the workload has a reservation",
                w.name
            ));
        }
        out.push(Prepared { group: facts.backend.group(&ws.name), ws, cpu_group, partition, rt_budget });
    }
    // Exclusive partitions cannot overlap anything else.
    for (i, a) in out.iter().enumerate() {
        for b in out.iter().skip(i + 1) {
            if (a.partition || b.partition) && !a.ws.cpus.intersection(&b.ws.cpus).is_empty() {
                return Err(rejected(format!(
                    "workloads {} [{}] and {} [{}] overlap, but {} needs an exclusive partition (SCHED_DEADLINE, dedicated or \
                     shielded CPUs); give them disjoint CPUs{}",
                    a.ws.name,
                    a.ws.cpus,
                    b.ws.name,
                    b.ws.cpus,
                    if a.partition { &a.ws.name } else { &b.ws.name },
                    if mech == Mechanism::Deadline { " or use --mechanism rt_group" } else { "" }
                )));
            }
        }
    }
    let exclusive: CpuList = out.iter().filter(|p| p.partition).fold(CpuList::new(), |acc, p| acc.union(&p.ws.cpus));
    if !exclusive.is_empty() && facts.online.difference(&exclusive).is_empty() {
        return Err(rejected(format!(
            "exclusive partitions would take every online CPU [{}]; leave at least one CPU for the rest of the system",
            facts.online
        )));
    }
    // v2: a CPU another cgroup holds as a valid partition cannot join ours; the kernel would take the
    // write and leave both partitions invalid (6.12: the other one stays "root invalid" even after
    // our rollback), so refuse before touching anything.
    if let (Backend::V2 { root }, false) = (&facts.backend, exclusive.is_empty()) {
        for (dir, state, cpus) in crate::cgroup::foreign_partitions(root) {
            let taken = cpus.intersection(&exclusive);
            if !taken.is_empty() {
                return Err(rejected(format!(
                    "CPUs [{taken}] belong to the partition {} (cpuset.cpus.partition = {state}); free them there or plan with other CPUs",
                    dir.display()
                )));
            }
        }
    }
    Ok((out, warnings))
}

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
                let total: f64 = prepared.iter().filter_map(|p| p.rt_budget.map(|(r, per)| r as f64 / per as f64)).sum();
                if mech == Mechanism::RtGroup && total > 0.0 {
                    let runtime = ((total * 1e6).ceil() as u64).min((facts.rt_ratio * 1e6) as u64);
                    w(&mut ops, b.rt_budget_writes(&parent, runtime, 1_000_000));
                }
                for p in prepared.iter().filter(|p| p.cpu_group) {
                    ops.push(Op::Mkdir { path: p.group.cpu.clone(), evacuate_to: evac.clone() });
                    if let Some((r, per)) = p.rt_budget {
                        w(&mut ops, b.rt_budget_writes(&p.group, r, per));
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
            ops.push(Op::Mkdir { path: parent.cpuset.clone(), evacuate_to: evac.clone() });
            enable(&mut ops, &parent.cpuset);
            let all: CpuList = prepared.iter().fold(CpuList::new(), |acc, p| acc.union(&p.ws.cpus));
            // A partition's parent must be a partition root too; then the parent holds only the
            // workloads' CPUs and the rest stays with the root cgroup.
            let parent_cpus = if exclusive.is_empty() { facts.online.clone() } else { all };
            w(&mut ops, b.cpuset_writes(&parent, &parent_cpus, &facts.mems));
            if !exclusive.is_empty() {
                ops.push(Op::Write { path: parent.cpuset.join("cpuset.cpus.partition"), value: "root".into() });
            }
            let total: f64 = prepared.iter().filter_map(|p| p.rt_budget.map(|(r, per)| r as f64 / per as f64)).sum();
            if mech == Mechanism::Hcbs && total > 0.0 {
                let runtime = ((total * 1e6).ceil() as u64).min(1_000_000);
                w(&mut ops, b.rt_budget_writes(&parent, runtime, 1_000_000));
            }
            for p in prepared {
                ops.push(Op::Mkdir { path: p.group.cpuset.clone(), evacuate_to: evac.clone() });
                w(&mut ops, b.cpuset_writes(&p.group, &p.ws.cpus, &mems_of(p)));
                if p.partition {
                    w(&mut ops, b.partition_writes(&p.group, false));
                }
                if let Some((r, per)) = p.rt_budget {
                    w(&mut ops, b.rt_budget_writes(&p.group, r, per));
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

/// The v1 memory hierarchy, when it is mounted on its own (not co-mounted with cpuset or cpu).
fn memory_mount(facts: &HostFacts) -> Option<PathBuf> {
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

/// Applies a setup. On failure everything done is rolled back and the error names the step.
pub fn apply_setup(setup: &Setup, opts: &ApplyOptions) -> Result<Applied> {
    let facts = HostFacts::detect()?;
    apply_with_facts(setup, opts, &facts)
}

pub fn apply_with_facts(setup: &Setup, opts: &ApplyOptions, facts: &HostFacts) -> Result<Applied> {
    let mech = resolve_mechanism(setup, facts, opts.mechanism)?;
    let (prepared, mut warnings) = prepare(setup, facts, mech)?;
    let runc = if setup.workloads.iter().any(|w| matches!(w.launch, Launch::Oci(_))) {
        Some(opts.runc.clone().or_else(crate::oci::find_runc).ok_or_else(|| {
            rejected("an OCI launch needs runc, which is not installed (apt-get install runc)")
        })?)
    } else {
        None
    };
    for w in &setup.workloads {
        if let Launch::Oci(o) = &w.launch {
            if !o.bundle.join("rootfs").is_dir() {
                return Err(rejected(format!(
                    "workload {}: OCI bundle {} has no rootfs/ directory",
                    w.name,
                    o.bundle.display()
                )));
            }
        }
        if let Launch::Attach { pids } = &w.launch {
            for pid in pids {
                if ProcRef::of(*pid).is_none() {
                    return Err(rejected(format!("workload {}: pid {pid} does not exist", w.name)));
                }
            }
        }
    }
    let _lock = opts.state_dir.lock()?;
    if let Some(existing) = opts.state_dir.load()? {
        if !existing.changes.is_empty() {
            return Err(rejected(format!(
                "{} already holds an applied plan ({} changes); run `rtslice reset` first",
                opts.state_dir.file().display(),
                existing.changes.len()
            )));
        }
    }
    let mut state = State::new();
    opts.state_dir.save(&state)?;
    let mut txn = Txn::begin(&opts.state_dir, &mut state, opts.fault);
    let mut ctx = Ctx { facts, mech, prepared: &prepared, setup, opts, runc: runc.as_deref(), warnings: Vec::new() };
    match run_steps(&mut txn, &mut ctx) {
        Ok((workloads, agent)) => {
            warnings.append(&mut ctx.warnings);
            let record = AppliedRecord {
                setup: setup.clone(),
                mechanism: mech,
                backend: facts.backend.clone(),
                workloads: workloads.clone(),
                agent,
                warnings: warnings.clone(),
            };
            txn.state.record = Some(record);
            txn.save()?;
            Ok(Applied { mechanism: mech, workloads, warnings, changes: txn.state.changes.len(), agent })
        }
        Err((step, err)) => {
            let rollback_errors = txn.rollback();
            if rollback_errors.is_empty() {
                let _ = opts.state_dir.remove();
            }
            Err(HostError::StepFailed { step, source: Box::new(err), rollback_errors })
        }
    }
}

struct Ctx<'a> {
    facts: &'a HostFacts,
    mech: Mechanism,
    prepared: &'a [Prepared],
    setup: &'a Setup,
    opts: &'a ApplyOptions,
    runc: Option<&'a Path>,
    warnings: Vec<String>,
}

type StepResult<T> = std::result::Result<T, (String, HostError)>;

fn step<T>(name: impl Into<String>, r: Result<T>) -> StepResult<T> {
    r.map_err(|e| (name.into(), e))
}

fn run_steps(txn: &mut Txn, ctx: &mut Ctx) -> StepResult<(Vec<WorkloadRecord>, Option<ProcRef>)> {
    journal_root_affinities(txn, ctx)?;
    for op in cgroup_ops(ctx.prepared, ctx.facts, ctx.mech) {
        match op {
            Op::Mkdir { path, evacuate_to } => step(format!("create cgroup {}", path.display()), txn.mkdir(&path, &evacuate_to))?,
            Op::Write { path, value } => {
                step(format!("write {value:?} to {}", path.display()), txn.write_if_changed(&path, &value))?;
                // v2 takes an impossible partition request without an error: read the state back.
                if path.ends_with("cpuset.cpus.partition") {
                    let state = step(format!("read {}", path.display()), crate::fsio::read_trim(&path))?;
                    if let Some(explanation) = crate::cgroup::invalid_partition(&state) {
                        let e = HostError::InvalidPartition { path: path.clone(), wanted: value, state, explanation };
                        return Err((format!("make {} a partition", path.parent().unwrap_or(&path).display()), e));
                    }
                }
            }
        }
    }
    let mut records: Vec<WorkloadRecord> = ctx
        .prepared
        .iter()
        .map(|p| WorkloadRecord {
            name: p.ws.name.clone(),
            cpus: p.ws.cpus.clone(),
            group: p.group.clone(),
            pids: Vec::new(),
            container: None,
            rules: p.ws.threads.clone(),
        })
        .collect();
    // The agent reads the record (groups and rules) when it starts, before anything is launched.
    txn.state.record = Some(AppliedRecord {
        setup: ctx.setup.clone(),
        mechanism: ctx.mech,
        backend: ctx.facts.backend.clone(),
        workloads: records.clone(),
        agent: None,
        warnings: Vec::new(),
    });
    step("save state", txn.save())?;

    fair_server(txn, ctx)?;
    hrtick(txn, ctx)?;
    irqs_and_nets(txn, ctx)?;

    let agent = match &ctx.opts.agent {
        Some(cmd) if ctx.prepared.iter().any(|p| !p.ws.threads.is_empty() || p.ws.wide_affinity) => {
            Some(step("start the agent", start_agent(txn, cmd, &ctx.opts.state_dir))?)
        }
        _ => None,
    };
    if let Some(rec) = txn.state.record.as_mut() {
        rec.agent = agent;
    }

    for (i, p) in ctx.prepared.iter().enumerate() {
        let procs_files = procs_files_for(p, ctx);
        match &p.ws.launch {
            Launch::None => {}
            Launch::Command { argv, env, cwd } => {
                let proc = step(
                    format!("launch {} ({})", p.ws.name, argv.join(" ")),
                    launch_command(txn, &p.ws.name, argv, env, cwd.as_deref(), &procs_files, &ctx.opts.state_dir),
                )?;
                records[i].pids.push(proc);
            }
            Launch::Attach { pids } => {
                for &pid in pids {
                    step(format!("attach pid {pid} to {}", p.ws.name), attach(txn, pid, ctx, p))?;
                    if let Some(r) = ProcRef::of(pid) {
                        records[i].pids.push(r);
                    }
                }
            }
            Launch::Oci(o) => {
                let runc = ctx.runc.expect("checked in validation");
                let id = o.id.clone().unwrap_or_else(|| format!("rtslice-{}", p.ws.name));
                let (pid, root) = step(format!("create container {id} for {}", p.ws.name), oci_create(txn, ctx, p, o, &id, runc))?;
                step(format!("thread rules in container {id}"), rules_for_workload(txn, p, ctx))?;
                step(format!("start container {id}"), crate::oci::runc_start(runc, &root, &id))?;
                wait_for_exec(pid);
                records[i].container = Some(id);
                if let Some(r) = ProcRef::of(pid) {
                    records[i].pids.push(r);
                }
            }
        }
        step(format!("thread rules of {}", p.ws.name), rules_for_workload(txn, p, ctx))?;
    }
    shield(txn, ctx)?;
    Ok((records, agent))
}

/// cgroup v2 with boot isolation (`isolcpus=`): creating or removing a partition gives every task of
/// the root cgroup all CPUs no partition holds — the isolated ones included (6.12's cpuset resets
/// the top cpuset's tasks to the possible CPUs minus partitions). Found by the kernels matrix
/// (guest rt-8cpu-iso): after apply + reset, kernel threads and user processes ran on 4-7 again.
/// Journal each such thread's affinity unchanged, so rollback and reset put the boot isolation back.
fn journal_root_affinities(txn: &mut Txn, ctx: &Ctx) -> StepResult<()> {
    let Backend::V2 { root } = &ctx.facts.backend else { return Ok(()) };
    let isolated = crate::fsio::read_trim("/sys/devices/system/cpu/isolated").unwrap_or_default();
    if isolated.is_empty() || !ctx.prepared.iter().any(|p| p.partition) {
        return Ok(());
    }
    for tid in crate::cgroup::read_pids(&root.join("cgroup.threads")) {
        // The kernel owns the affinity of threads flagged PF_NO_SETAFFINITY (per-CPU kthreads,
        // workqueue rescuers): user space can neither set nor restore it.
        if crate::sched::no_setaffinity(tid) {
            continue;
        }
        let (Some(thread), Ok(cur)) = (ProcRef::of(tid), crate::sched::get_affinity(tid)) else { continue };
        step(format!("journal the affinity of thread {tid}"), txn.record(Change::Affinity { thread, old: cur.clone(), new: cur }))?;
    }
    Ok(())
}

fn procs_files_for(p: &Prepared, ctx: &Ctx) -> Vec<PathBuf> {
    let mut v = vec![p.group.cpuset.join("cgroup.procs")];
    if ctx.facts.backend.is_v1() && p.cpu_group {
        v.push(p.group.cpu.join("cgroup.procs"));
    }
    if let (true, Some(mem)) = (ctx.facts.backend.is_v1() && p.ws.memory.is_some(), memory_mount(ctx.facts)) {
        v.push(mem.join(crate::cgroup::V1_PARENT).join(&p.ws.name).join("cgroup.procs"));
    }
    v
}

fn fair_server(txn: &mut Txn, ctx: &mut Ctx) -> StepResult<()> {
    if !ctx.opts.fair_server_off {
        return Ok(());
    }
    let cpus: CpuList = if ctx.setup.fair_server_off.is_empty() {
        ctx.prepared
            .iter()
            .filter(|p| p.partition && p.ws.threads.iter().any(|r| r.policy.is_some_and(|x| x.is_realtime())))
            .fold(CpuList::new(), |a, p| a.union(&p.ws.cpus))
    } else {
        ctx.setup.fair_server_off.clone()
    };
    if cpus.is_empty() {
        ctx.warnings.push("fair_server: no CPU holds only reserved RT work; left unchanged".into());
        return Ok(());
    }
    let debug = Path::new("/sys/kernel/debug");
    let base = debug.join("sched/fair_server");
    let mut mounted = false;
    if !debug.join("sched").exists() {
        let (src, tgt, fs) = (c"none", c"/sys/kernel/debug", c"debugfs");
        // SAFETY: constant NUL-terminated strings.
        if unsafe { libc::mount(src.as_ptr(), tgt.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) } != 0 {
            ctx.warnings.push(format!("fair_server: cannot mount debugfs ({}); left unchanged", std::io::Error::last_os_error()));
            return Ok(());
        }
        mounted = true;
    }
    let probe = base.join(format!("cpu{}/runtime", cpus.iter().next().unwrap_or(0)));
    if let Err(e) = std::fs::read_to_string(&probe) {
        ctx.warnings.push(format!(
            "fair_server: {} is not usable ({e}; kernel lockdown restricts debugfs?); fair_server left unchanged",
            probe.display()
        ));
        if mounted {
            let _ = crate::txn::undo(&Change::Mounted { target: debug.to_path_buf() });
        }
        return Ok(());
    }
    if mounted {
        step("journal debugfs mount", txn.record(Change::Mounted { target: debug.to_path_buf() }))?;
    }
    for cpu in cpus.iter() {
        let f = base.join(format!("cpu{cpu}/runtime"));
        step(format!("fair_server runtime 0 on CPU {cpu}"), txn.write_if_changed(&f, "0"))?;
    }
    ctx.warnings.push(format!("fair_server runtime set to 0 on CPUs [{cpus}]: CFS tasks there may starve behind RT work"));
    Ok(())
}

/// The debugfs file of the scheduler's feature flags: reads as the whole list ("... NO_HRTICK ..."),
/// takes one flag per write ("HRTICK" or "NO_HRTICK").
pub const SCHED_FEATURES: &str = "/sys/kernel/debug/sched/features";

fn hrtick(txn: &mut Txn, ctx: &mut Ctx) -> StepResult<()> {
    if !ctx.opts.hrtick {
        return Ok(());
    }
    let path = Path::new(SCHED_FEATURES);
    let list = match std::fs::read_to_string(path) {
        Ok(l) => l,
        Err(e) => {
            ctx.warnings.push(format!(
                "hrtick: {SCHED_FEATURES} is not usable ({e}; debugfs not mounted or locked down); HRTICK/HRTICK_DL left unchanged"
            ));
            return Ok(());
        }
    };
    for feature in ["HRTICK", "HRTICK_DL"] {
        let off = format!("NO_{feature}");
        if !list.split_whitespace().any(|f| f == off) {
            continue; // already on, or this kernel lacks the flag (HRTICK_DL is 6.x)
        }
        // Journaled as the flag's old spelling: undo writes "NO_<feature>" back (one flag per write).
        step(format!("journal {feature}"), txn.record(Change::Wrote { path: path.into(), old: off, new: feature.into() }))?;
        step(format!("turn {feature} on"), crate::fsio::write(path, feature))?;
    }
    Ok(())
}

fn irqs_and_nets(txn: &mut Txn, ctx: &mut Ctx) -> StepResult<()> {
    if !ctx.setup.irqs.is_empty() {
        let irqs = step("read /proc/interrupts", crate::irq::read_interrupts().map_err(|e| HostError::Read {
            path: "/proc/interrupts".into(),
            source: e,
        }))?;
        let balancers = crate::irq::pids_named("irqbalance");
        if !balancers.is_empty() {
            ctx.warnings.push(format!(
                "irqbalance is running (pid {balancers:?}) and may move the IRQs back: set IRQBALANCE_BANNED_CPULIST to the \
                 reserved CPUs in /etc/default/irqbalance and restart it"
            ));
        }
        for rule in &ctx.setup.irqs {
            let re = crate::setup::pattern(&rule.action).expect("validated");
            let hits = crate::irq::matching(&irqs, &re);
            if hits.is_empty() {
                ctx.warnings.push(format!("IRQ rule {:?}: no IRQ action matches on this host", rule.action));
            }
            for irq in hits {
                step(
                    format!("IRQ {} ({}) affinity {}", irq.number, irq.actions.join(","), rule.cpus),
                    txn.write_if_changed(&irq.affinity_file(), &rule.cpus.to_string()),
                )?;
            }
        }
    }
    let net = Path::new("/sys/class/net");
    for rule in &ctx.setup.nets {
        let re = crate::setup::pattern(&rule.iface).expect("validated");
        let ifaces: Vec<String> = crate::irq::interfaces(net).into_iter().filter(|i| re.is_match(i)).collect();
        if ifaces.is_empty() {
            ctx.warnings.push(format!("net rule {:?}: no interface matches", rule.iface));
        }
        for iface in ifaces {
            let (rps, xps) = crate::irq::steering_files(net, &iface);
            for (want, files, what) in [(&rule.rps, rps, "rps_cpus"), (&rule.xps, xps, "xps_cpus")] {
                let Some(cpus) = want else { continue };
                if files.is_empty() {
                    ctx.warnings.push(format!("{iface}: no {what} files (single-queue or virtual device); skipped"));
                }
                for f in files {
                    let cur = fsio::read_trim(&f).ok().and_then(|s| CpuList::parse_mask(&s).ok());
                    if cur.as_ref() == Some(cpus) {
                        continue;
                    }
                    step(format!("{what} of {iface}: {}", f.display()), txn.write(&f, &cpus.to_mask()))?;
                }
            }
        }
    }
    Ok(())
}

fn start_agent(txn: &mut Txn, cmd: &AgentCommand, state_dir: &StateDir) -> Result<ProcRef> {
    let ready = state_dir.path.join("agent.ready");
    let _ = std::fs::remove_file(&ready);
    let log = std::fs::File::create(state_dir.path.join("agent.log"))
        .map_err(|source| HostError::Create { path: state_dir.path.join("agent.log"), source })?;
    let mut c = Command::new(&cmd.program);
    c.args(&cmd.args);
    if cmd.state_dir_arg {
        c.arg("--state-dir").arg(&state_dir.path);
    }
    c.envs(cmd.env.iter().map(|(k, v)| (k, v))).env("RTSLICE_STATE_DIR", &state_dir.path);
    c.stdin(Stdio::null()).stdout(log.try_clone().map_err(|e| HostError::other(e.to_string()))?).stderr(log);
    // SAFETY: setsid is async-signal-safe; the agent must outlive this process and its terminal.
    unsafe {
        c.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let child = c.spawn().map_err(|e| HostError::Launch { what: format!("agent {}", cmd.program.display()), reason: e.to_string() })?;
    let pid = child.id() as i32;
    let proc = ProcRef::of(pid).ok_or_else(|| HostError::Launch { what: "agent".into(), reason: "exited at once".into() })?;
    txn.record(Change::Agent { proc })?;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if std::fs::read_to_string(&ready).map(|s| s.trim() == pid.to_string()).unwrap_or(false) {
            return Ok(proc);
        }
        if !proc.alive() || Instant::now() > deadline {
            let log = std::fs::read_to_string(state_dir.path.join("agent.log")).unwrap_or_default();
            return Err(HostError::Launch {
                what: "agent".into(),
                reason: format!("it did not report ready within 5 s: {}", log.trim()),
            });
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn launch_command(
    txn: &mut Txn,
    name: &str,
    argv: &[String],
    env: &[(String, String)],
    cwd: Option<&Path>,
    procs_files: &[PathBuf],
    state_dir: &StateDir,
) -> Result<ProcRef> {
    let fail = |reason: String| HostError::Launch { what: format!("workload {name}"), reason };
    let (prog, args) = argv.split_first().ok_or_else(|| fail("empty command".into()))?;
    let log_path = state_dir.path.join(format!("{name}.log"));
    let log = std::fs::File::create(&log_path).map_err(|e| fail(format!("creating {}: {e}", log_path.display())))?;
    let mut c = Command::new(prog);
    c.args(args).envs(env.iter().map(|(k, v)| (k, v)));
    if let Some(d) = cwd {
        c.current_dir(d);
    }
    c.stdin(Stdio::null()).stdout(log.try_clone().map_err(|e| fail(e.to_string()))?).stderr(log);
    let files: Vec<std::ffi::CString> = procs_files
        .iter()
        .map(|p| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).map_err(|e| fail(e.to_string())))
        .collect::<Result<_>>()?;
    // SAFETY: between fork and exec only async-signal-safe calls (setsid, open, write, close) run.
    // The child joins its cgroups itself ("0" = the writer), so every thread it ever creates starts
    // inside them; its own session lets reset kill the whole process group.
    unsafe {
        c.pre_exec(move || {
            libc::setsid();
            for f in &files {
                let fd = libc::open(f.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                if n != 1 {
                    return Err(err);
                }
            }
            Ok(())
        });
    }
    let child = c.spawn().map_err(|e| fail(format!("{prog}: {e}")))?;
    let proc = ProcRef::of(child.id() as i32).ok_or_else(|| fail("exited immediately".into()))?;
    txn.record(Change::Launched { proc, what: format!("{name}: {}", argv.join(" ")) })?;
    Ok(proc)
}

/// The cgroup.procs file a process is in now, in the hierarchy mounted at `mount`.
fn current_procs_file(pid: i32, mount: &Path, ctrl: Option<&str>) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit = match ctrl {
            Some(c) => ctrls.split(',').any(|x| x == c),
            None => ctrls.is_empty(),
        };
        if hit {
            return Some(mount.join(path.trim_start_matches('/')).join("cgroup.procs"));
        }
    }
    None
}

fn attach(txn: &mut Txn, pid: i32, ctx: &Ctx, p: &Prepared) -> Result<()> {
    match &ctx.facts.backend {
        Backend::V1 { cpuset, cpu } => {
            let from = current_procs_file(pid, cpuset, Some("cpuset")).unwrap_or_else(|| cpuset.join("cgroup.procs"));
            txn.move_process(pid, &from, &p.group.cpuset.join("cgroup.procs"))?;
            if p.cpu_group {
                let from = current_procs_file(pid, cpu, Some("cpu")).unwrap_or_else(|| cpu.join("cgroup.procs"));
                txn.move_process(pid, &from, &p.group.cpu.join("cgroup.procs"))?;
            }
            if let (Some(_), Some(mem)) = (p.ws.memory, memory_mount(ctx.facts)) {
                let from = current_procs_file(pid, &mem, Some("memory")).unwrap_or_else(|| mem.join("cgroup.procs"));
                txn.move_process(pid, &from, &mem.join(crate::cgroup::V1_PARENT).join(&p.ws.name).join("cgroup.procs"))?;
            }
        }
        Backend::V2 { root } => {
            let from = current_procs_file(pid, root, None).unwrap_or_else(|| root.join("cgroup.procs"));
            txn.move_process(pid, &from, &p.group.cpuset.join("cgroup.procs"))?;
        }
    }
    Ok(())
}

fn oci_create(
    txn: &mut Txn,
    ctx: &Ctx,
    p: &Prepared,
    o: &crate::setup::OciLaunch,
    id: &str,
    runc: &Path,
) -> Result<(i32, PathBuf)> {
    let state = &ctx.opts.state_dir.path;
    let runc_root = state.join("runc");
    // rtslice's own bundle dir: config.json here, rootfs by absolute path — the user's bundle is not modified.
    let bundle = state.join("oci-configs").join(id);
    std::fs::create_dir_all(&bundle).map_err(|source| HostError::Create { path: bundle.clone(), source })?;
    let user_cfg: Option<serde_json::Value> =
        std::fs::read_to_string(o.bundle.join("config.json")).ok().and_then(|t| serde_json::from_str(&t).ok());
    let args = if o.args.is_empty() {
        user_cfg
            .as_ref()
            .and_then(|c| c["process"]["args"].as_array().cloned())
            .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
            .unwrap_or_else(|| vec!["sh".to_string()])
    } else {
        o.args.clone()
    };
    let cgroups_path = match &ctx.facts.backend {
        Backend::V1 { .. } => format!("/{}/{}/{id}", crate::cgroup::V1_PARENT, p.ws.name),
        Backend::V2 { .. } => format!("/{}/{}/{id}", crate::cgroup::V2_PARENT, p.ws.name),
    };
    let scheduler = p.ws.threads.iter().find_map(|r| r.policy.filter(|x| x.is_realtime()));
    let cc = crate::oci::ContainerConfig {
        id: id.to_string(),
        args,
        cgroups_path,
        cpus: p.ws.cpus.clone(),
        mems: p.ws.mems.clone().unwrap_or_else(|| ctx.facts.mems.clone()),
        rt: if ctx.facts.backend.is_v1() { p.rt_budget } else { None },
        scheduler,
        netns: o.netns,
        seccomp: o.seccomp,
    };
    let mut cfg = crate::oci::config_json(&cc, crate::oci::runc_version(runc));
    let rootfs = std::fs::canonicalize(o.bundle.join("rootfs"))
        .map_err(|source| HostError::Read { path: o.bundle.join("rootfs"), source })?;
    cfg["root"]["path"] = serde_json::json!(rootfs);
    if let Some(env) = user_cfg.as_ref().and_then(|c| c["process"].get("env").cloned()) {
        cfg["process"]["env"] = env;
    }
    crate::oci::write_config(&bundle, &cfg)?;
    txn.record(Change::Container { id: id.to_string(), runc_root: runc_root.clone(), runc: runc.to_path_buf() })?;
    let pid = crate::oci::runc_run(runc, &runc_root, &bundle, id, &state.join(format!("{id}.log")))?;
    Ok((pid, runc_root))
}

/// After `runc start` the init process execs the container's program; rules match its new name, so
/// wait (briefly) until it no longer runs as runc's init.
fn wait_for_exec(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
            Ok(c) if c.starts_with("runc") => std::thread::sleep(Duration::from_millis(1)),
            _ => return,
        }
    }
}

/// All processes in a workload's cgroup tree (runc puts containers in a child group).
pub fn workload_pids(group_dir: &Path) -> Vec<i32> {
    let mut pids = crate::cgroup::read_pids(&group_dir.join("cgroup.procs"));
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

fn rules_for_workload(txn: &mut Txn, p: &Prepared, ctx: &Ctx) -> Result<()> {
    let wide = if p.ws.wide_affinity { Some(p.ws.cpus.clone()) } else { None };
    let rules = CompiledRules::new(&p.ws.threads, wide).map_err(HostError::Invalid)?;
    if rules.is_empty() {
        return Ok(());
    }
    let _ = ctx;
    for pid in workload_pids(&p.group.cpuset) {
        for tid in crate::sched::threads_of(pid) {
            let Some(comm) = crate::sched::comm_of(pid, tid) else { continue };
            let Some(w) = rules.wanted(&comm) else { continue };
            let deadline = matches!(w.policy, Some(Policy::Deadline { .. }));
            let r = (|| {
                if let (Some(cpus), false) = (&w.cpus, deadline) {
                    txn.set_affinity(tid, cpus)?;
                }
                if let Some(pol) = w.policy {
                    txn.set_policy(tid, pol)?;
                }
                Ok(())
            })();
            match r {
                // A thread that exited meanwhile is not an error.
                Err(HostError::Sched { source, .. }) if source.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => {
                    return Err(HostError::other(format!("thread {tid} ({comm}) of workload {}: {e}", p.ws.name)))
                }
                Ok(()) => {}
            }
        }
    }
    Ok(())
}

fn is_kernel_thread(pid: i32) -> bool {
    const PF_KTHREAD: u64 = 0x0020_0000;
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 2..];
            rest.split_whitespace().nth(6)?.parse::<u64>().ok()
        })
        .map(|flags| flags & PF_KTHREAD != 0)
        .unwrap_or(true)
}

/// Shield (v1): every user process in the root cpuset moves to `rtslice/system` (the CPUs no
/// partition holds). On v2 an "isolated"/"root" partition already takes its CPUs from everyone else.
fn shield(txn: &mut Txn, ctx: &mut Ctx) -> StepResult<()> {
    if !ctx.prepared.iter().any(|p| p.ws.shield) {
        return Ok(());
    }
    let Backend::V1 { cpuset, .. } = &ctx.facts.backend else { return Ok(()) };
    let from = cpuset.join("cgroup.procs");
    let to = ctx.facts.backend.group("system").cpuset.join("cgroup.procs");
    let procs: Vec<ProcRef> = crate::cgroup::read_pids(&from)
        .into_iter()
        .filter(|&pid| !is_kernel_thread(pid))
        .filter_map(ProcRef::of)
        .collect();
    step("journal shield", txn.record(Change::MovedProcesses { procs: procs.clone(), from: from.clone(), to: to.clone() }))?;
    let mut stuck = 0;
    for p in &procs {
        if fsio::write(&to, &p.pid.to_string()).is_err() && p.alive() {
            stuck += 1;
        }
    }
    if stuck > 0 {
        ctx.warnings.push(format!("shield: {stuck} processes could not leave the root cpuset (they may be pinned)"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::setup::{Reservation, ThreadRule};

    fn facts(backend: Backend) -> HostFacts {
        HostFacts {
            online: CpuList::parse("0-3").unwrap(),
            mems: "0".into(),
            layout: CgroupLayout { mode: crate::cgroup::CgroupMode::V2, v1: Default::default(), v2: None, v2_controllers: vec![] },
            backend,
            available: vec![Mechanism::Hcbs, Mechanism::Deadline],
            rt_ratio: 0.95,
        }
    }

    fn wl(name: &str, cpus: &str, res: Option<(u64, u64)>) -> WorkloadSetup {
        WorkloadSetup {
            name: name.into(),
            cpus: CpuList::parse(cpus).unwrap(),
            reservation: res.map(|(r, p)| Reservation { runtime_us: r, period_us: p }),
            threads: vec![ThreadRule { name: "^rt".into(), policy: Some(Policy::Fifo { priority: 50 }), cpus: None, budget_share: None }],
            ..Default::default()
        }
    }

    #[test]
    fn over_budget_and_overlap_are_rejected() {
        let f = facts(Backend::V2 { root: "/cg".into() });
        let s = Setup { workloads: vec![wl("a", "1", Some((600, 1000))), wl("b", "1", Some((400, 1000)))], ..Default::default() };
        let e = prepare(&s, &f, Mechanism::Hcbs).unwrap_err().to_string();
        assert!(e.contains("CPU 1 would carry 100.0%"), "{e}");
        let s = Setup { workloads: vec![wl("a", "1", Some((300, 1000))), wl("b", "1-2", Some((300, 1000)))], ..Default::default() };
        assert_eq!(resolve_mechanism(&s, &f, None).unwrap(), Mechanism::Hcbs);
        let e = prepare(&s, &f, Mechanism::Deadline).unwrap_err().to_string();
        assert!(e.contains("overlap"), "{e}");
    }

    #[test]
    fn deadline_splits_the_budget_over_rt_rules() {
        let f = facts(Backend::V2 { root: "/cg".into() });
        let mut w = wl("du", "2-3", Some((300, 1000)));
        w.threads.push(ThreadRule { name: "^l1".into(), policy: Some(Policy::Rr { priority: 9 }), cpus: None, budget_share: Some(0.25) });
        let s = Setup { workloads: vec![w], ..Default::default() };
        let (p, _) = prepare(&s, &f, Mechanism::Deadline).unwrap();
        assert!(p[0].partition);
        // total = 300 µs × 2 CPUs = 600 µs; rule 1 gets 1/2 (default), rule 2 a quarter.
        assert_eq!(p[0].ws.threads[0].policy, Some(Policy::Deadline { runtime_ns: 300_000, deadline_ns: 1_000_000, period_ns: 1_000_000 }));
        assert_eq!(p[0].ws.threads[1].policy, Some(Policy::Deadline { runtime_ns: 150_000, deadline_ns: 1_000_000, period_ns: 1_000_000 }));
    }

    #[test]
    fn v2_ops_use_partitions_subtree_control_and_cpu_rt_max() {
        let f = facts(Backend::V2 { root: "/cg".into() });
        let s = Setup { workloads: vec![wl("du", "2-3", Some((300, 1000)))], ..Default::default() };
        let (mut p, _) = prepare(&s, &f, Mechanism::Hcbs).unwrap();
        p[0].partition = true;
        let ops = cgroup_ops(&p, &f, Mechanism::Hcbs);
        let wr = |path: &str, value: &str| Op::Write { path: path.into(), value: value.into() };
        assert_eq!(ops[0], wr("/cg/cgroup.subtree_control", "+cpuset +cpu"));
        assert_eq!(ops[1], Op::Mkdir { path: "/cg/rtslice.slice".into(), evacuate_to: "/cg/cgroup.procs".into() });
        assert!(ops.contains(&wr("/cg/rtslice.slice/cpuset.cpus", "2-3")));
        assert!(ops.contains(&wr("/cg/rtslice.slice/cpuset.cpus.partition", "root")));
        assert!(ops.contains(&wr("/cg/rtslice.slice/cpu.rt.max", "300000 1000000")));
        assert!(ops.contains(&wr("/cg/rtslice.slice/du/cpuset.cpus.partition", "root")));
        assert!(ops.contains(&wr("/cg/rtslice.slice/du/cpu.rt.max", "300 1000")));
        let parent_budget = ops.iter().position(|o| o == &wr("/cg/rtslice.slice/cpu.rt.max", "300000 1000000")).unwrap();
        let child_budget = ops.iter().position(|o| o == &wr("/cg/rtslice.slice/du/cpu.rt.max", "300 1000")).unwrap();
        assert!(parent_budget < child_budget, "parents are budgeted before children");
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
    }
}
