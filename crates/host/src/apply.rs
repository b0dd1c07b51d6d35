//! `apply`: validate a `Setup` against this host (rejecting before anything is touched), then make it
//! real in one transaction — cgroups, budgets, partitions, fair_server, IRQs, RPS/XPS, the agent,
//! launches, thread rules, shields — rolling everything back if any step fails.

use std::path::{Path, PathBuf};

use rtslice_sys::proc_ref::ProcRef;
use serde::{Deserialize, Serialize};

use crate::cgroup::Backend;
use crate::cpus::CpuList;
use crate::error::{HostError, Result};
use crate::journal::{Change, State, StateDir};
use crate::launch::{self, AgentCommand};
use crate::cgroup::Op;
use crate::ops::cgroup_ops;
use crate::facts::HostFacts;
use crate::prepare::{prepare, rejected, resolve_mechanism, Prepared};
use crate::record::{AppliedRecord, Mechanism, WorkloadRecord};
use crate::resctrl::Resctrl;
use crate::setup::Setup;
use crate::txn::{step, Fault, StepResult, Txn};

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
    /// The resctrl root for cache allocation (default `/sys/fs/resctrl`); only touched when a
    /// workload has a cache allocation or a memory-bandwidth ceiling.
    pub resctrl: Option<PathBuf>,
    /// runc binary (default: from PATH).
    pub runc: Option<PathBuf>,
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

/// Applies a setup. On failure everything done is rolled back and the error names the step.
pub fn apply_setup(setup: &Setup, opts: &ApplyOptions) -> Result<Applied> {
    let facts = HostFacts::detect()?;
    apply_with_facts(setup, opts, &facts)
}

pub fn apply_with_facts(setup: &Setup, opts: &ApplyOptions, facts: &HostFacts) -> Result<Applied> {
    let mech = resolve_mechanism(setup, facts, opts.mechanism)?;
    let (prepared, mut warnings) = prepare(setup, facts, mech)?;
    let mut runc = None;
    for w in &setup.workloads {
        runc = launch::check_launch(w, opts.runc.as_deref())?.or(runc);
    }
    // PCI devices: every one present, bound to a driver and named once, before anything is touched.
    let (devices, device_warnings) = crate::devices::resolve(Path::new("/"), setup)?;
    warnings.extend(device_warnings);
    let resctrl = opts.resctrl.clone().map(Resctrl::new).unwrap_or_default();
    if let Some(plan) = &setup.cache {
        resctrl.check(plan)?;
    } else if let Some(w) = setup.workloads.iter().find(|w| w.cache.is_some()) {
        return Err(rejected(format!("workload {} has a resctrl group but the setup has no cache plan (a bug of its producer)", w.name)));
    }
    let _lock = opts.state_dir.lock()?;
    if crate::journal::node_active(&opts.state_dir) {
        return Err(rejected(format!(
            "{} holds a node (the `rtslice daemon`'s workloads); deploy through it, or reset the node first",
            opts.state_dir.path.join("node").display()
        )));
    }
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
    let mut ctx = Ctx { facts, mech, prepared: &prepared, setup, opts, runc: runc.as_deref(), resctrl, devices, warnings: Vec::new() };
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
    resctrl: Resctrl,
    /// The workloads' PCI devices as resolved before the transaction.
    devices: crate::devices::Resolved,
    warnings: Vec<String>,
}

fn run_steps(txn: &mut Txn, ctx: &mut Ctx) -> StepResult<(Vec<WorkloadRecord>, Option<ProcRef>)> {
    journal_root_affinities(txn, ctx)?;
    let parent_partition = ctx.facts.backend.parent().cpuset.join("cpuset.cpus.partition");
    let mut fair_server_done = false;
    let mut parent_is_partition = false;
    for op in cgroup_ops(ctx.prepared, ctx.facts, ctx.mech) {
        if let Op::Write { path, .. } = &op {
            // cgroup v2, 6.12.117 (kernels matrix, read from /sys/kernel/debug/sched/debug's
            // dl_bw->total_bw): when child partitions take every CPU of the parent partition,
            // the root domains are rebuilt without the deadline servers' bandwidth (total_bw 0
            // on every CPU), and setting a fair_server's runtime to 0 then fails (EBUSY/EIO:
            // the kernel subtracts the server's bandwidth from a total that lacks it). The
            // same at boot, before any partition exists. With the parent alone a partition
            // the accounting is rebuilt right, so the fair_server is set there, before the
            // workloads' partitions; its undo (runtime back, adding bandwidth) works in any state.
            // Remote partitions (boot isolation, no parent partition): a single-level rebuild,
            // after which the accounting is right (measured), so it is set after them instead.
            if *path == parent_partition {
                parent_is_partition = true;
            }
            if !fair_server_done && parent_is_partition && path.ends_with("cpuset.cpus.partition") && *path != parent_partition {
                fair_server(txn, ctx)?;
                fair_server_done = true;
            }
        }
        txn.run(op)?;
    }
    let mut records: Vec<WorkloadRecord> = ctx.prepared.iter().map(|p| launch::planned_record(p, &ctx.resctrl)).collect();
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

    if !fair_server_done {
        fair_server(txn, ctx)?;
    }
    cache_groups(txn, ctx)?;
    hrtick(txn, ctx)?;
    irqs_and_nets(txn, ctx)?;

    let agent = match &ctx.opts.agent {
        Some(cmd) if ctx.prepared.iter().any(|p| !p.ws.threads.is_empty() || p.ws.wide_affinity) => {
            Some(step("start the agent", launch::start_agent(txn, cmd, &ctx.opts.state_dir))?)
        }
        _ => None,
    };
    if let Some(rec) = txn.state.record.as_mut() {
        rec.agent = agent;
    }

    for (p, rec) in ctx.prepared.iter().zip(&mut records) {
        let devices = crate::devices::nodes_of(&ctx.devices, &p.ws.name);
        launch::start(txn, ctx.facts, &ctx.opts.state_dir, p, ctx.runc, &devices, &ctx.resctrl, rec)?;
    }
    shield(txn, ctx)?;
    Ok((records, agent))
}

/// The default group narrowed first, so no best-effort task can fill the ways a workload's group
/// is about to hold exclusively; then one group per workload with its schemata.
fn cache_groups(txn: &mut Txn, ctx: &Ctx) -> StepResult<()> {
    let Some(plan) = &ctx.setup.cache else { return Ok(()) };
    let rc = &ctx.resctrl;
    step(format!("narrow the default resctrl group to {}", plan.default_schemata()), rc.narrow_default(txn, plan))?;
    for w in &ctx.setup.workloads {
        if let Some(cache) = &w.cache {
            step(format!("create the resctrl group of {} ({})", w.name, cache.schemata().replace('\n', " ")), rc.create_group(txn, &w.name, cache))?;
        }
    }
    Ok(())
}

/// cgroup v2 with boot isolation (`isolcpus=`): creating or removing a partition gives every task of
/// the root cgroup all CPUs no partition holds — the isolated ones included (6.12's cpuset resets
/// the top cpuset's tasks to the possible CPUs minus partitions). Found by the kernels matrix
/// (guest rt-8cpu-iso): after apply + reset, kernel threads and user processes ran on 4-7 again.
/// Journal each such thread's affinity unchanged, so rollback and reset put the boot isolation back.
/// Unbound kernel threads are among them (the kernel moves them too); per-CPU kthreads are not (the
/// kernel skips them, and they carry PF_NO_SETAFFINITY like every workqueue worker). All in one
/// change: kernel workers come and go, and a journal whose length varied with them made the position
/// of every later change differ between two applies of the same setup on the same host.
fn journal_root_affinities(txn: &mut Txn, ctx: &Ctx) -> StepResult<()> {
    let Backend::V2 { root } = &ctx.facts.backend else { return Ok(()) };
    let isolated = crate::fsio::read_trim("/sys/devices/system/cpu/isolated").unwrap_or_default();
    if isolated.is_empty() || !ctx.prepared.iter().any(|p| p.partition) {
        return Ok(());
    }
    // A thread that exited since the read needs no restore.
    let threads: Vec<(ProcRef, CpuList)> =
        crate::sched::movable_affinities(&root.join("cgroup.threads")).into_iter().filter_map(|(tid, cpus)| Some((ProcRef::of(tid)?, cpus))).collect();
    step("journal the affinities of the root cgroup's threads", txn.record(Change::RootAffinities { threads }))
}

fn hrtick(txn: &mut Txn, ctx: &mut Ctx) -> StepResult<()> {
    if !ctx.opts.hrtick {
        return Ok(());
    }
    crate::sched_debug::hrtick_on(txn, &mut ctx.warnings)
}

/// The fair servers of the CPUs that hold only reserved real-time work (partitions with RT rules, or
/// the setup's own list) get runtime 0.
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
    if !crate::sched_debug::mount_debugfs(txn, &mut ctx.warnings)? {
        return Ok(());
    }
    if let Err(why) = crate::sched_debug::fair_server_usable(cpus.iter().next().unwrap_or(0)) {
        ctx.warnings.push(format!("{why}; fair_server left unchanged"));
        return Ok(());
    }
    step(format!("fair_server runtime 0 on CPUs [{cpus}]"), crate::sched_debug::fair_server_off(txn, &cpus))?;
    ctx.warnings.push(format!("fair_server runtime set to 0 on CPUs [{cpus}]: CFS tasks there may starve behind RT work"));
    Ok(())
}

fn irqs_and_nets(txn: &mut Txn, ctx: &mut Ctx) -> StepResult<()> {
    crate::devices::steer_irqs(txn, ctx.setup, &ctx.devices, &mut ctx.warnings)?;
    let targets = step("read the IRQs and queues the rules name", crate::steering::targets(ctx.setup, &mut ctx.warnings))?;
    crate::steering::steer(txn, &targets)
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
    let procs = crate::cgroup::user_processes(&from);
    step("journal shield", txn.record(Change::MovedProcesses { procs: procs.clone(), from: from.clone(), to: to.clone() }))?;
    let stuck = crate::cgroup::move_processes(&procs, &to);
    if stuck > 0 {
        ctx.warnings.push(format!("shield: {stuck} processes could not leave the root cpuset (they may be pinned)"));
    }
    Ok(())
}
