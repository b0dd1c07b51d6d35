//! The node: rtslice as a long-lived owner of a host, one workload at a time.
//!
//! The node service's daemon holds one for its life; one-shot `apply` runs one in-process (its base,
//! each workload deployed in turn, all or nothing). A node splits the journal into *segments*, each a
//! journal of its own (the usual `state.json`, in its own directory):
//!
//! - the **base** (`<state>/node/base`): what every workload shares and nothing else touches — the
//!   parent cgroups in every hierarchy, the parent's RT budget (the node's cap; under HCBS the root
//!   group's budget as it was, which reset restores), and on cgroup v1 the root's load balancing and
//!   the `system` cpuset that lets workloads become exclusive partitions;
//! - one **workload segment** per deployed workload (`<state>/node/workloads/<name>`): its cgroups
//!   (only files under its own directories), its launch, its thread rules, later its resizes.
//!
//! An operation (deploy, resize, remove) writes only its own segment, so undoing it — on failure, on
//! removal, after a crash — cannot touch another workload: same PIDs, cgroup files, thread attributes.
//! The few node-wide values that depend on the set of workloads (v1: the CPUs of `system`, which must
//! stay off exclusive partitions) live in directories the base created, are recomputed from the
//! kernel after every operation and need no journal (removing the base removes them). HCBS's root
//! group budget follows the workloads too (raised before a budget needs it, lowered after one goes,
//! never below its value before the node): the base journals its first value, which reset restores,
//! and keeps the value it holds now as the entry's new one, which status compares.
//!
//! Crash safety: before an operation starts, an intent file (`op.json`) is written into the segment;
//! it is removed when the operation ends. [`Node::open`] finds leftover intents and finishes or rolls
//! back what they describe: an interrupted deploy is rolled back, an interrupted remove is finished,
//! an interrupted resize is rolled back to the reservation before it. A base written before the last
//! boot is forgotten (the kernel values it would restore are gone), and [`Opened::rebooted`] tells
//! the caller to re-create its desired state.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rtslice_sys::proc_ref::ProcRef;
use serde::{Deserialize, Serialize};

use crate::cgroup::{Backend, CgroupMode};
use crate::cpus::CpuList;
use crate::error::{HostError, Result};
use crate::fsio;
use crate::journal::{boot_id, node_dir, Change, State, StateDir, StateLock, ONE_SHOT_MARK};
use crate::launch;
use crate::cgroup::Op;
use crate::ops::workload_ops;
use crate::facts::HostFacts;
use crate::prepare::{prepare, rejected, Prepared};
use crate::record::{AppliedRecord, Mechanism, WorkloadRecord};
use crate::setup::{Launch, Setup, WorkloadSetup};
use crate::status::{journal_status, Status};
use crate::txn::{undo, undo_all, Fault, Txn, Undo};

mod agent;
mod base;
mod offline;
mod cache;
mod fair_server;
mod hcbs;
mod partitions;
mod workload_check;

use workload_check::Claims;

use offline::{names_in, segment_in};
pub use offline::{applied_records, records_in, status};
use base::apply_base;
use partitions::{partition_dir_of, partition_of, shared_partition_dir, shared_partition_of};

const BASE_INFO: &str = "base.json";
const INTENT: &str = "op.json";

/// How a node is opened.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// The state directory; the node keeps its journal segments in `<state_dir>/node`.
    pub state_dir: StateDir,
    /// The reservation mechanism; `None` picks HCBS, else RT groups, else SCHED_DEADLINE (a node takes
    /// workloads one at a time, and of these only SCHED_DEADLINE needs disjoint CPU sets).
    pub mechanism: Option<Mechanism>,
    /// The share of each CPU reservations may take (the spec's node cap; the kernel's RT ratio bounds it).
    pub cap: f64,
    /// runc binary for OCI launches (default: from PATH).
    pub runc: Option<PathBuf>,
    /// How long a removed workload gets between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// Test hook: make the n-th change of the next operation fail.
    pub fault: Fault,
    /// Test hook: make the n-th change of the base fail, when the node is created.
    pub base_fault: Fault,
    /// The resctrl root for cache allocation (default `/sys/fs/resctrl`); only touched when a
    /// workload has a cache allocation or a memory-bandwidth ceiling.
    pub resctrl: Option<PathBuf>,
    /// Test hook: the file holding "this boot's id" compared with the journal's (default: the kernel's
    /// /proc/sys/kernel/random/boot_id). Tests point it at a file of their own to emulate a reboot.
    pub boot_id_file: Option<PathBuf>,
    /// Turn the scheduler features HRTICK and HRTICK_DL on in the base (as `apply --hrtick`):
    /// budgets enforced by high-resolution timers instead of the tick. Reset restores them.
    /// Like the mechanism, taken when the node is created and kept for its life (`NodeBase`).
    pub hrtick: bool,
    /// Give the fair server of every CPU that holds only reserved real-time work (a partition with
    /// real-time rules) runtime 0 while such a workload is deployed there (as `apply
    /// --fair-server-off`). Taken when the node is created, as `hrtick`.
    pub fair_server_off: bool,
    /// The opener is a one-shot `apply` or `reset`: a node a one-shot apply made (marked so) opens.
    /// Anyone else (the node service) refuses it, as it would share the host with a plan applied whole.
    pub one_shot: bool,
}

impl NodeOptions {
    pub fn with_state_dir(path: impl Into<PathBuf>) -> NodeOptions {
        NodeOptions {
            state_dir: StateDir::new(path),
            mechanism: None,
            cap: rtslice_spec::DEFAULT_CAP,
            runc: None,
            grace: crate::txn::DEFAULT_GRACE,
            fault: Fault::default(),
            base_fault: Fault::default(),
            resctrl: None,
            boot_id_file: None,
            hrtick: false,
            fair_server_off: false,
            one_shot: false,
        }
    }

    /// The id of the boot the node runs in (see `boot_id_file`).
    fn boot_id(&self) -> String {
        match &self.boot_id_file {
            Some(f) => std::fs::read_to_string(f).map(|s| s.trim().to_string()).unwrap_or_default(),
            None => boot_id(),
        }
    }
}

/// What the base holds: fixed for the node's life (until [`Node::reset`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeBase {
    pub mechanism: Mechanism,
    pub backend: Backend,
    pub online: CpuList,
    /// cgroup v1: the root stopped load balancing and `system` holds the CPUs no partition holds,
    /// so workloads can be exclusive partitions (dedicated CPUs, SCHED_DEADLINE).
    pub partitions: bool,
    /// The parent's RT budget in µs every 1 s (RT groups): the node's cap. HCBS budgets none: the
    /// parent stays `max` and the root group's budget follows the workloads (`Node::hcbs_settle_root`).
    pub parent_budget_us: Option<u64>,
    /// What the base could not do (e.g. partitions refused by the kernel), with the reason.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// HRTICK/HRTICK_DL asked on by the base ([`NodeOptions::hrtick`] when the node was created).
    #[serde(default)]
    pub hrtick: bool,
    /// Fair servers off under reserved real-time partitions ([`NodeOptions::fair_server_off`] when
    /// the node was created; `Node::fair_server_settle`).
    #[serde(default)]
    pub fair_server_off: bool,
}

/// What [`Node::open`] found and did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Opened {
    /// The base was applied now (a fresh node).
    pub created: bool,
    /// The node's journal came from an earlier boot: it was dropped, nothing runs; re-deploy.
    pub rebooted: bool,
    /// Workloads found running and re-adopted (their launched processes alive, same start time).
    pub adopted: Vec<String>,
    /// Workloads whose launched processes are gone (exited while nobody watched).
    pub exited: Vec<String>,
    /// What was done about interrupted operations ("rolled back deploy of x", ...).
    pub recovered: Vec<String>,
}

/// Why an operation was interrupted; persisted before it starts.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Intent {
    Deploy,
    Remove,
    /// Changes from index `from` on belong to the resize; `before` is the record to restore.
    Resize { from: usize, before: Box<AppliedRecord> },
}

/// What removing a workload did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Removed {
    pub undone: usize,
    pub terminated: usize,
    pub killed: usize,
}

/// An open node: holds the state directory's lock (one writer) until dropped.
pub struct Node {
    root: StateDir,
    facts: HostFacts,
    base: NodeBase,
    opts: NodeOptions,
    _lock: StateLock,
}

/// Writes `value` atomically; `durable` also fsyncs it (the base's files; a workload's intent is as
/// volatile as its segment).
fn write_json<T: Serialize>(path: &Path, value: &T, durable: bool) -> Result<()> {
    let err = |e: String| HostError::State { path: path.to_path_buf(), reason: e };
    let json = serde_json::to_vec_pretty(value).map_err(|e| err(e.to_string()))?;
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&json)?;
        if durable {
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)?;
        if let (true, Some(dir)) = (durable, path.parent()) {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    };
    write().map_err(|e| err(format!("cannot write it: {e}")))
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>> {
    match std::fs::read_to_string(path) {
        Ok(t) => serde_json::from_str(&t).map(Some).map_err(|e| HostError::State {
            path: path.to_path_buf(),
            reason: format!("corrupt ({e}); inspect it, or `rtslice reset` the node"),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(HostError::State { path: path.to_path_buf(), reason: e.to_string() }),
    }
}

/// The node's mechanism: the requested one, else the planner's rule for a node
/// (`rtslice_plan::kernel::node_default_mechanism`, which `rtslice plan` also reports).
fn node_mechanism(facts: &HostFacts, requested: Option<Mechanism>) -> Result<Mechanism> {
    if let Some(m) = requested {
        if m != Mechanism::None && !facts.available.contains(&m) {
            return Err(rejected(format!(
                "reservation mechanism {m} is not available on this host (available: [{}]); see `rtslice doctor`",
                facts.available.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", ")
            )));
        }
        return Ok(m);
    }
    Ok(rtslice_plan::kernel::node_default_mechanism(&facts.available))
}

impl Node {
    /// Opens the node under `opts.state_dir`: applies the base if there is none, forgets a journal
    /// from an earlier boot, and finishes or rolls back operations a crash interrupted.
    pub fn open(opts: NodeOptions) -> Result<(Node, Opened)> {
        let facts = HostFacts::detect()?;
        Node::open_with_facts(opts, facts)
    }

    pub fn open_with_facts(opts: NodeOptions, facts: HostFacts) -> Result<(Node, Opened)> {
        let root = opts.state_dir.clone();
        // A process forked by a writer that just died may hold the lock until it execs (its copy of
        // the descriptor closes then): wait a moment before calling the directory busy.
        let started = std::time::Instant::now();
        let lock = loop {
            match root.lock() {
                Ok(l) => break l,
                Err(e) if started.elapsed() > Duration::from_secs(3) => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        if let Some(existing) = root.load()? {
            if !existing.changes.is_empty() {
                return Err(rejected(format!(
                    "{} holds a one-shot `rtslice apply` ({} changes); the node service cannot share the host with it: \
                     run `rtslice reset` first",
                    root.file().display(),
                    existing.changes.len()
                )));
            }
        }
        let dir = node_dir(&root);
        if !opts.one_shot && dir.join(ONE_SHOT_MARK).exists() {
            return Err(rejected(format!(
                "{} holds a one-shot `rtslice apply`; the node service cannot share the host with it: run `rtslice reset` first",
                root.path.display()
            )));
        }
        let base_dir = StateDir::new(dir.join("base"));
        let mut opened = Opened::default();
        let mut base: Option<NodeBase> = read_json(&base_dir.path.join(BASE_INFO))?;
        if let Some(state) = base_dir.load()? {
            if state.boot_id != opts.boot_id() {
                // Nothing of what the journal lists survived the reboot: drop every segment.
                std::fs::remove_dir_all(&dir).map_err(|e| HostError::State {
                    path: dir.clone(),
                    reason: format!("cannot remove the journal of an earlier boot: {e}"),
                })?;
                opened.rebooted = true;
                base = None;
            } else if base.is_none() || base_dir.path.join(INTENT).exists() {
                // The base was being applied when rtslice died: undo it and start over.
                let mut state = state;
                let errors = undo_all(&mut state.changes, 0, &mut Undo::default());
                if !errors.is_empty() {
                    base_dir.save(&state)?;
                    return Err(HostError::State {
                        path: base_dir.path.clone(),
                        reason: format!("an interrupted node start could not be undone: {}", errors.join("; ")),
                    });
                }
                let _ = std::fs::remove_dir_all(&base_dir.path);
                opened.recovered.push("rolled back an interrupted node start".into());
                base = None;
            }
        }
        let base = match base {
            Some(b) => {
                if b.backend != facts.backend {
                    return Err(HostError::State {
                        path: base_dir.path.clone(),
                        reason: format!(
                            "the node was started on cgroup backend {:?}, the host now has {:?}; `rtslice reset` the node",
                            b.backend, facts.backend
                        ),
                    });
                }
                if (b.hrtick, b.fair_server_off) != (opts.hrtick, opts.fair_server_off) {
                    opened.recovered.push(format!(
                        "the node keeps the settings it was created with (hrtick {}, fair_server_off {}), not this start's \
                         (hrtick {}, fair_server_off {}); `rtslice reset` the node and start it again to change them",
                        b.hrtick, b.fair_server_off, opts.hrtick, opts.fair_server_off
                    ));
                }
                b
            }
            None => {
                opened.created = true;
                apply_base(&base_dir, &facts, &opts).inspect_err(|_| {
                    // A base rolled back leaves no node (the directory is removed only when empty).
                    let _ = std::fs::remove_dir(&dir);
                })?
            }
        };
        let node = Node { root, facts, base, opts, _lock: lock };
        // Whoever holds the node changes its workloads or runs an agent of its own (the daemon).
        node.stop_agent()?;
        node.recover(&mut opened)?;
        // A crash between raising the root's HCBS budget and the operation it was for leaves more
        // than the groups need.
        node.hcbs_settle_root();
        if let Err(e) = node.cache_settle() {
            opened.recovered.push(format!("could not settle the default resctrl group ({e}); the next operation tries again"));
        }
        // Derived again: a crash may have come between an operation and its settle.
        opened.recovered.extend(node.fair_server_settle());
        Ok((node, opened))
    }

    pub fn base(&self) -> &NodeBase {
        &self.base
    }

    pub fn facts(&self) -> &HostFacts {
        &self.facts
    }

    /// Marks the node as a one-shot apply's: the node service refuses it ([`NodeOptions::one_shot`]).
    pub(crate) fn mark_one_shot(&self) -> Result<()> {
        let mark = node_dir(&self.root).join(ONE_SHOT_MARK);
        std::fs::write(&mark, "").map_err(|e| HostError::State { path: mark, reason: e.to_string() })
    }

    /// The number of journaled changes of a deployed workload's segment.
    pub(crate) fn journal_len(&self, name: &str) -> usize {
        changes_of(&self.segment(name)).len()
    }

    /// How many processes the deployed workloads launched (attached ones not counted).
    pub(crate) fn launched(&self) -> usize {
        self.names().iter().map(|n| changes_of(&self.segment(n)).iter().filter(|c| c.is_a_launch()).count()).sum()
    }

    /// The number of journaled changes of the base.
    pub(crate) fn journal_len_base(&self) -> usize {
        changes_of(&self.base_dir()).len()
    }

    /// The number of journaled changes of the whole node: base, workloads, agent (what reset undoes).
    pub(crate) fn journal_len_total(&self) -> usize {
        let agent = changes_of(&StateDir::new(node_dir(&self.root).join("agent"))).len();
        self.journal_len_base() + agent + self.names().iter().map(|n| self.journal_len(n)).sum::<usize>()
    }

    /// Sets the fault injected into the next operations (tests).
    pub fn set_fault(&mut self, fault: Fault) {
        self.opts.fault = fault;
    }

    /// A workload's segment: saved without fsync (`StateDir::volatile`) — its changes do not survive
    /// a reboot, and after one `open` drops the segments unread (the base, synced, says the boot
    /// changed). Most of a deploy's time was these fsyncs (two per journaled change).
    fn segment(&self, name: &str) -> StateDir {
        segment_in(&node_dir(&self.root), name)
    }

    /// Names of the workloads with a segment, in deploy order.
    pub fn names(&self) -> Vec<String> {
        names_in(&node_dir(&self.root))
    }

    /// The record of a deployed workload.
    pub fn record(&self, name: &str) -> Result<Option<AppliedRecord>> {
        Ok(self.segment(name).load()?.and_then(|s| s.record))
    }

    /// The records of every deployed workload, in deploy order.
    pub fn records(&self) -> Result<Vec<AppliedRecord>> {
        let mut v = Vec::new();
        for n in self.names() {
            if let Some(r) = self.record(&n)? {
                v.push(r);
            }
        }
        Ok(v)
    }

    /// `status` of one workload's segment: its journaled values, threads against rules, processes.
    pub fn status(&self, name: &str) -> Result<Status> {
        journal_status(&self.segment(name))
    }

    /// `status` of the base segment (drift of node-wide values).
    pub fn base_status(&self) -> Result<Status> {
        journal_status(&self.base_dir())
    }

    /// Adds `warnings` to a deployed workload's record, where status and the API show them.
    fn note_warnings(&self, seg: &StateDir, warnings: Vec<String>) {
        if warnings.is_empty() {
            return;
        }
        if let Ok(Some(mut state)) = seg.load() {
            if let Some(rec) = state.record.as_mut() {
                rec.warnings.extend(warnings);
                let _ = seg.save(&state);
            }
        }
    }

    /// Deploys one workload as its own transaction. `setup` holds exactly one workload and its IRQ and
    /// network rules (files no other workload holds). On failure that workload's changes are rolled
    /// back and no other workload is touched.
    pub fn deploy(&self, setup: &Setup) -> Result<WorkloadRecord> {
        let ws = self.single(setup)?;
        let seg = self.segment(&ws.name);
        if seg.file().exists() {
            return Err(rejected(format!("workload {} is already deployed", ws.name)));
        }
        let prepared = self.prepare_one(setup, &[])?;
        let runc = self.runc_for(ws)?;
        let mut warnings = Vec::new();
        let claims = self.claims_of(setup, &mut warnings)?;
        self.cache_check(setup)?;
        self.hcbs_raise_root(&prepared)?;
        std::fs::create_dir_all(&seg.path).map_err(|e| HostError::State { path: seg.path.clone(), reason: e.to_string() })?;
        write_json(&seg.path.join(INTENT), &Intent::Deploy, false)?;
        let _ = std::fs::write(seg.path.join("created"), "");
        let mut state = State::new();
        seg.save(&state)?;
        let mut txn = Txn::begin(&seg, &mut state, self.opts.fault);
        let result = self.deploy_steps(&mut txn, setup, &prepared, runc.as_deref(), &claims, warnings);
        match result {
            Ok(rec) => {
                let _ = std::fs::remove_file(seg.path.join(INTENT));
                self.note_warnings(&seg, self.sync_shield());
                self.note_warnings(&seg, self.fair_server_settle());
                Ok(rec)
            }
            Err((step, err)) => {
                // A launch whose journal entry failed is stopped here (no entry would stop it).
                stop_unjournaled_launches(&seg);
                let rollback_errors = txn.rollback();
                self.refresh_system();
                self.hcbs_settle_root();
                if rollback_errors.is_empty() {
                    let _ = std::fs::remove_dir_all(&seg.path);
                }
                // Derived again without it (a failure is retried by the next operation).
                let _ = self.cache_settle();
                self.fair_server_settle();
                Err(HostError::StepFailed { step, source: Box::new(err), rollback_errors })
            }
        }
    }

    fn deploy_steps(
        &self,
        txn: &mut Txn,
        setup: &Setup,
        p: &Prepared,
        runc: Option<&Path>,
        claims: &Claims,
        mut warnings: Vec<String>,
    ) -> std::result::Result<WorkloadRecord, (String, HostError)> {
        let name = &p.ws.name;
        let step = |s: String, r: Result<()>| r.map_err(|e| (s, e));
        if p.partition {
            // Exclusive siblings cannot overlap: `system` gives the CPUs up before the group takes them.
            step("take the CPUs out of the system cpuset".into(), self.set_system(&p.ws.cpus))?;
        }
        if let Some(dir) = shared_partition_of(&p.group.cpuset) {
            step(format!("create the shared partition {}", dir.display()), self.ensure_shared_partition(&dir, &p.ws.cpus))?;
        }
        for op in workload_ops(p, &self.facts) {
            txn.run(op)?;
        }
        crate::steering::steer(txn, &claims.targets)?;
        crate::devices::steer_irqs(txn, setup, &claims.devices, &mut warnings)?;
        let mut rec = launch::planned_record(p, &self.resctrl());
        let record = |rec: &WorkloadRecord| AppliedRecord {
            setup: setup.clone(),
            mechanism: self.base.mechanism,
            backend: self.facts.backend.clone(),
            workloads: vec![rec.clone()],
            agent: None,
            warnings: warnings.clone(),
        };
        txn.state.record = Some(record(&rec));
        step("save state".into(), txn.save())?;
        if let Some(cache) = &p.ws.cache {
            step(format!("create the resctrl group of {name} and settle the default group's ways"), self.cache_group(txn, name, cache).map(drop))?;
        }
        let state_dir = self.segment(name);
        let runc = runc.or(self.opts.runc.as_deref());
        launch::start(txn, &self.facts, &state_dir, p, runc, &crate::devices::nodes_of(&claims.devices, name), &self.resctrl(), &mut rec)?;
        txn.state.record = Some(record(&rec));
        step("save state".into(), txn.save())?;
        Ok(rec)
    }

    /// Removes a workload: stops what it launched (SIGTERM, grace, SIGKILL), undoes its segment,
    /// returns its CPUs. The other workloads are not touched.
    pub fn remove(&self, name: &str) -> Result<Removed> {
        let seg = self.segment(name);
        if seg.load()?.is_none() {
            return Err(HostError::Invalid(format!("no workload named {name} is deployed")));
        }
        write_json(&seg.path.join(INTENT), &Intent::Remove, false)?;
        if let Some(k) = self.opts.fault.fail_change {
            // Test hook: stop after k undone changes, as a crash or a kernel refusal would; the intent
            // stays, so the next remove or `Node::open` finishes the job.
            if let Some(mut state) = seg.load()? {
                let keep = state.changes.len().saturating_sub(k);
                let errors = undo_range(&mut state.changes, keep);
                seg.save(&state)?;
                return Err(HostError::StepFailed {
                    step: format!("remove {name}"),
                    source: Box::new(HostError::other(format!("<injected fault after {k} undone changes>"))),
                    rollback_errors: errors,
                });
            }
        }
        self.finish_remove(&seg, self.opts.grace, false)
    }

    /// `keep_launched`: what the workload launched keeps running (moved out of its groups).
    fn finish_remove(&self, seg: &StateDir, grace: Duration, keep_launched: bool) -> Result<Removed> {
        let Some(mut state) = seg.load()? else {
            let _ = std::fs::remove_dir_all(&seg.path);
            return Ok(Removed::default());
        };
        if keep_launched {
            state.changes.retain(|c| !c.is_a_launch());
        }
        let undone = state.changes.len();
        let mut ctx = Undo { grace, ..Default::default() };
        // undo_all stops what the workload launched before it restores anything else.
        let errors = undo_all(&mut state.changes, 0, &mut ctx);
        self.refresh_system();
        self.hcbs_settle_root();
        if !errors.is_empty() {
            seg.save(&state)?;
            return Err(HostError::State {
                path: seg.path.clone(),
                reason: format!(
                    "could not undo {} change(s) of the workload (kept in its journal; remove it again): {}",
                    errors.len(),
                    errors.join("; ")
                ),
            });
        }
        std::fs::remove_dir_all(&seg.path).map_err(|e| HostError::State { path: seg.path.clone(), reason: e.to_string() })?;
        self.sync_shield();
        // After the partition is gone (refresh_system): the CPU's runtime comes back to a root domain
        // that accounts it.
        self.fair_server_settle();
        self.cache_settle().map_err(|e| HostError::other(format!("the workload is removed, but {e}; the next operation tries again")))?;
        Ok(Removed { undone, terminated: ctx.terminated, killed: ctx.killed })
    }

    /// Resizes a deployed workload in place: new CPUs, reservation or rules, written into its own
    /// groups and threads (its processes keep running). `setup` holds the workload as it should be now.
    /// On failure the resize is rolled back to the workload as it was.
    pub fn resize(&self, setup: &Setup) -> Result<WorkloadRecord> {
        let ws = self.single(setup)?;
        let seg = self.segment(&ws.name);
        let Some(mut state) = seg.load()? else {
            return Err(HostError::Invalid(format!("no workload named {} is deployed", ws.name)));
        };
        let before = state.record.clone().ok_or_else(|| HostError::State {
            path: seg.path.clone(),
            reason: "the workload's journal has no record (an interrupted deploy?); remove it and deploy again".into(),
        })?;
        let old = before.setup.workloads[0].clone();
        if std::mem::discriminant(&old.launch) != std::mem::discriminant(&ws.launch) || old.launch != ws.launch {
            return Err(rejected(format!("workload {}: a resize cannot change how it is launched; remove and deploy it", ws.name)));
        }
        if !cache::same_holding(old.cache.as_ref(), ws.cache.as_ref()) {
            return Err(rejected(format!(
                "workload {}: a resize cannot change its cache ways or memory-bandwidth ceiling (its resctrl group); remove and deploy it",
                ws.name
            )));
        }
        let p = self.prepare_one(setup, &[ws.name.as_str()])?;
        if p.group.cpuset != before.workloads[0].group.cpuset {
            return Err(rejected(format!(
                "workload {}: SCHED_DEADLINE workloads share a partition by their CPUs, and a resize cannot move one to \
                 other CPUs [{}] (it holds [{}]); remove and deploy it",
                ws.name, p.ws.cpus, before.workloads[0].cpus
            )));
        }
        let was_partition = partition_of(&before.workloads[0].group.cpuset);
        if p.partition != was_partition {
            return Err(rejected(format!(
                "workload {}: a resize cannot turn an exclusive partition into a shared set or back; remove and deploy it",
                ws.name
            )));
        }
        // Its IRQs, queues and devices may move with its CPUs, not change: a file it stops holding
        // would keep the value it wrote (remove restores a holder's files; a resize would have to
        // give them back), and a device's nodes are in its running container.
        let claims = self.claims_of(setup, &mut Vec::new())?;
        let held = Claims {
            targets: crate::steering::targets(&before.setup, &mut Vec::new())?,
            devices: crate::devices::resolve(Path::new("/"), &before.setup).map(|(r, _)| r).unwrap_or_default(),
        };
        if !claims.same_holdings(setup, &held, &before.setup) {
            return Err(rejected(format!(
                "workload {}: a resize cannot change which IRQs, queues or PCI devices it holds (its rules or devices name \
                 others now); remove and deploy it",
                ws.name
            )));
        }
        self.hcbs_raise_root(&p)?;
        let from = state.changes.len();
        write_json(&seg.path.join(INTENT), &Intent::Resize { from, before: Box::new(before.clone()) }, false)?;
        let mut txn = Txn::begin(&seg, &mut state, self.opts.fault);
        let result = self.resize_steps(&mut txn, setup, &p, &before, &old, &claims);
        drop(txn);
        match result {
            Ok(rec) => {
                let _ = std::fs::remove_file(seg.path.join(INTENT));
                // Done: the journal keeps one entry per file (its value before the deploy, its value
                // now), which is what status compares and remove restores.
                compact(&mut state);
                seg.save(&state)?;
                self.refresh_system();
                self.hcbs_settle_root();
                self.note_warnings(&seg, self.sync_shield());
                self.note_warnings(&seg, self.fair_server_settle());
                Ok(rec)
            }
            Err((step, err)) => {
                let rollback_errors = undo_range(&mut state.changes, from);
                state.record = Some(before);
                let _ = seg.save(&state);
                self.refresh_system();
                self.hcbs_settle_root();
                if rollback_errors.is_empty() {
                    let _ = std::fs::remove_file(seg.path.join(INTENT));
                }
                Err(HostError::StepFailed { step, source: Box::new(err), rollback_errors })
            }
        }
    }

    fn resize_steps(
        &self,
        txn: &mut Txn,
        setup: &Setup,
        p: &Prepared,
        before: &AppliedRecord,
        old: &WorkloadSetup,
        claims: &Claims,
    ) -> std::result::Result<WorkloadRecord, (String, HostError)> {
        let step = |s: String, r: Result<()>| r.map_err(|e| (s, e));
        if p.partition {
            step("take the CPUs out of the system cpuset".into(), self.set_system(&p.ws.cpus))?;
        }
        let mut ops = workload_ops(p, &self.facts);
        // CFS settings the workload no longer asks for (a pool's quota dropped with its share) are
        // taken back; its group exists already, as resize keeps it.
        if p.group.cpu.exists() {
            ops.extend(crate::ops::cfs_clear_ops(&self.facts.backend, p, old.cfs));
        }
        order_budget_writes(&mut ops, old.reservation.map(|r| r.whole_micros()), p.rt_budget);
        // Threads first when CPUs shrink (a thread's affinity must stay inside its cpuset), the cpuset
        // first when they grow: rules after a shrink would be refused by the kernel.
        let shrinking = !old.cpus.is_subset(&p.ws.cpus);
        if shrinking {
            step(format!("thread rules of {}", p.ws.name), self.pin_inside(txn, p))?;
        }
        for op in ops {
            // The workload's groups exist: a resize changes their files.
            if !matches!(&op, Op::Mkdir { path, .. } if path.exists()) {
                txn.run(op)?;
            }
        }
        step(format!("thread rules of {}", p.ws.name), launch::workload_rules(txn, p))?;
        crate::steering::steer(txn, &claims.targets)?;
        let mut warnings = before.warnings.clone();
        let mut fresh = Vec::new();
        crate::devices::steer_irqs(txn, setup, &claims.devices, &mut fresh)?;
        warnings.extend(fresh.into_iter().filter(|w| !before.warnings.contains(w)));
        let mut rec = before.workloads[0].clone();
        rec.cpus = p.ws.cpus.clone();
        rec.rules = p.ws.threads.clone();
        txn.state.record = Some(AppliedRecord {
            setup: setup.clone(),
            mechanism: self.base.mechanism,
            backend: self.facts.backend.clone(),
            workloads: vec![rec.clone()],
            agent: None,
            warnings,
        });
        step("save state".into(), txn.save())?;
        Ok(rec)
    }

    /// Before a cpuset shrinks: threads whose affinity reaches outside the new CPUs are narrowed to them.
    fn pin_inside(&self, txn: &mut Txn, p: &Prepared) -> Result<()> {
        for (_, tid, _) in crate::rules::workload_threads(&p.group.cpuset) {
            let Ok(cur) = crate::sched::get_affinity(tid) else { continue };
            let inside = cur.intersection(&p.ws.cpus);
            if inside != cur {
                let want = if inside.is_empty() { p.ws.cpus.clone() } else { inside };
                match txn.set_affinity(tid, &want) {
                    Err(HostError::Sched { source, .. }) if source.raw_os_error() == Some(libc::ESRCH) => {}
                    other => other?,
                }
            }
        }
        Ok(())
    }

    /// Finishes or rolls back interrupted operations; re-adopts the rest.
    fn recover(&self, opened: &mut Opened) -> Result<()> {
        for name in self.names_with_intents() {
            let seg = self.segment(&name);
            let intent: Option<Intent> = read_json(&seg.path.join(INTENT)).unwrap_or(None);
            match intent {
                Some(Intent::Resize { from, before }) => {
                    if let Some(mut state) = seg.load()? {
                        let errors = undo_range(&mut state.changes, from);
                        state.record = Some(*before);
                        seg.save(&state)?;
                        if !errors.is_empty() {
                            return Err(HostError::State {
                                path: seg.path.clone(),
                                reason: format!("an interrupted resize of {name} could not be rolled back: {}", errors.join("; ")),
                            });
                        }
                    }
                    let _ = std::fs::remove_file(seg.path.join(INTENT));
                    opened.recovered.push(format!("rolled back an interrupted resize of {name}"));
                }
                Some(Intent::Remove) => {
                    self.finish_remove(&seg, self.opts.grace, false)?;
                    opened.recovered.push(format!("finished an interrupted removal of {name}"));
                }
                // An interrupted deploy (or an unreadable intent: it was being written) is undone whole.
                Some(Intent::Deploy) | None => {
                    stop_unjournaled_launches(&seg);
                    self.finish_remove(&seg, Duration::from_secs(1), false)?;
                    opened.recovered.push(format!("rolled back an interrupted deploy of {name}"));
                }
            }
        }
        self.refresh_system();
        opened.recovered.extend(self.sync_shield());
        for name in self.names() {
            // A resize that finished just before a crash may not have compacted its journal.
            let seg = self.segment(&name);
            if let Some(mut state) = seg.load()? {
                if compact(&mut state) {
                    seg.save(&state)?;
                }
            }
        }
        for rec in self.records()? {
            for w in &rec.workloads {
                if w.pids.iter().all(|p| p.alive()) {
                    opened.adopted.push(w.name.clone());
                } else {
                    opened.exited.push(w.name.clone());
                }
            }
        }
        Ok(())
    }

    fn names_with_intents(&self) -> Vec<String> {
        let dir = node_dir(&self.root).join("workloads");
        std::fs::read_dir(&dir)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| {
                        let p = e.path();
                        p.join(INTENT).exists() || !p.join("state.json").exists()
                    })
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Removes every workload (newest first) and then the base: the host as before the node started.
    pub fn reset(self) -> Result<Removed> {
        self.reset_with(false)
    }

    /// [`Node::reset`]; `keep_launched`: what the workloads launched keeps running, moved out of
    /// their groups (`rtslice reset --keep-workloads` of a one-shot apply).
    pub fn reset_with(self, keep_launched: bool) -> Result<Removed> {
        self.stop_agent()?;
        let mut total = Removed::default();
        let mut names = self.names();
        names.reverse();
        for n in names {
            let r = if keep_launched {
                let seg = self.segment(&n);
                write_json(&seg.path.join(INTENT), &Intent::Remove, false)?;
                self.finish_remove(&seg, self.opts.grace, true)?
            } else {
                self.remove(&n)?
            };
            total.undone += r.undone;
            total.terminated += r.terminated;
            total.killed += r.killed;
        }
        let base_dir = self.base_dir();
        if let Some(mut state) = base_dir.load()? {
            total.undone += state.changes.len();
            let errors = undo_all(&mut state.changes, 0, &mut Undo::default());
            if !errors.is_empty() {
                base_dir.save(&state)?;
                return Err(HostError::State {
                    path: base_dir.path.clone(),
                    reason: format!("could not undo the node's base (kept in its journal; reset again): {}", errors.join("; ")),
                });
            }
        }
        let dir = node_dir(&self.root);
        std::fs::remove_dir_all(&dir).map_err(|e| HostError::State { path: dir.clone(), reason: e.to_string() })?;
        Ok(total)
    }
}

/// The journaled changes of one part of a node (none when it has no journal, or an unreadable one:
/// what counts them only reports).
fn changes_of(dir: &StateDir) -> Vec<Change> {
    dir.load().ok().flatten().map(|s| s.changes).unwrap_or_default()
}

/// Merges repeated writes of one file into its first entry (the value before the first write, the
/// value now). Returns whether anything changed.
fn compact(state: &mut State) -> bool {
    let mut out: Vec<Change> = Vec::with_capacity(state.changes.len());
    let mut merged = false;
    for c in state.changes.drain(..) {
        if let Change::Wrote { path, new, .. } = &c {
            if let Some(Change::Wrote { new: first_new, .. }) =
                out.iter_mut().find(|x| matches!(x, Change::Wrote { path: p, .. } if p == path))
            {
                *first_new = new.clone();
                merged = true;
                continue;
            }
        }
        out.push(c);
    }
    state.changes = out;
    merged
}

/// A deploy killed between starting its command and journaling it leaves a process in the
/// workload's cgroups that no journal entry stops: stop whatever the segment's cgroups hold, except
/// processes it attached (those go back where they were).
fn stop_unjournaled_launches(seg: &StateDir) {
    let Ok(Some(state)) = seg.load() else { return };
    let attached: Vec<i32> = state
        .changes
        .iter()
        .filter_map(|c| match c {
            Change::MovedProcess { proc, .. } => Some(proc.pid),
            _ => None,
        })
        .collect();
    for c in &state.changes {
        if let Change::Created { path, .. } = c {
            for pid in crate::cgroup::read_pids(&path.join("cgroup.procs")) {
                if attached.contains(&pid) {
                    continue;
                }
                if let Some(p) = ProcRef::of(pid) {
                    p.kill_and_wait(true, Duration::from_secs(2));
                }
            }
        }
    }
}

/// Undoes `changes[from..]` newest first, each one (unlike `undo_all`, values inside directories
/// created before `from` are written back: the directories stay).
fn undo_range(changes: &mut Vec<Change>, from: usize) -> Vec<String> {
    let mut errors = Vec::new();
    let mut ctx = Undo::default();
    while changes.len() > from {
        let c = changes.pop().expect("len > from");
        if crate::journal::superseded(&changes[from..], &c) {
            continue;
        }
        if let Err(e) = undo(&c, &mut ctx) {
            errors.push(format!("{}: {e}", c.describe()));
        }
    }
    errors
}

/// v1 RT budgets are two files (period, runtime) and every intermediate value must pass the
/// kernel's check (the sum of the children within the parent; runtime ≤ period). Growing from
/// (r1, p1) to (r2, p2) through (r1, p2) or (r2, p1): take the one with the smaller bandwidth.
fn order_budget_writes(ops: &mut [Op], old: Option<rtslice_plan::Reservation>, new: Option<rtslice_plan::Reservation>) {
    let (Some(old), Some(new)) = (old, new) else { return };
    let via_period = old.runtime_us() as f64 / new.period_us() as f64;
    let via_runtime = new.runtime_us() as f64 / old.period_us() as f64;
    let runtime_first = via_runtime < via_period || old.runtime_us() > new.period_us();
    if !runtime_first {
        return;
    }
    let is = |op: &Op, f: &str| matches!(op, Op::Write { path, .. } if path.file_name().is_some_and(|n| n == f));
    if let (Some(a), Some(b)) = (ops.iter().position(|o| is(o, "cpu.rt_period_us")), ops.iter().position(|o| is(o, "cpu.rt_runtime_us"))) {
        ops.swap(a, b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_writes_take_the_path_with_the_smaller_intermediate_bandwidth() {
        let ops = || {
            vec![
                Op::Write { path: "/c/rtslice/x/cpu.rt_period_us".into(), value: "p".into() },
                Op::Write { path: "/c/rtslice/x/cpu.rt_runtime_us".into(), value: "r".into() },
            ]
        };
        let first = |ops: &[Op]| match &ops[0] {
            Op::Write { path, .. } => path.file_name().unwrap().to_string_lossy().into_owned(),
            _ => unreachable!(),
        };
        let r = rtslice_plan::Reservation::from_micros;
        // Growing the period: period first (300/2000 < 600/1000).
        let mut o = ops();
        order_budget_writes(&mut o, Some(r(300, 1000)), Some(r(600, 2000)));
        assert_eq!(first(&o), "cpu.rt_period_us");
        // Shrinking the period: runtime first (300/2000 < 600/1000 on the other path).
        let mut o = ops();
        order_budget_writes(&mut o, Some(r(600, 2000)), Some(r(300, 1000)));
        assert_eq!(first(&o), "cpu.rt_runtime_us");
        // Runtime only: either order passes through the new value.
        let mut o = ops();
        order_budget_writes(&mut o, Some(r(300, 1000)), Some(r(200, 1000)));
        assert_eq!(first(&o), "cpu.rt_runtime_us");
    }
}
