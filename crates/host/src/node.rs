//! The node: rtslice as a long-lived owner of a host, one workload at a time.
//!
//! One-shot `apply` journals a whole [`Setup`] as one transaction. A node splits the journal into
//! *segments*, each a journal of its own (the usual `state.json`, in its own directory):
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
use crate::journal::{boot_id, Change, State, StateDir, StateLock};
use crate::launch;
use crate::ops::{cgroup_ops, Op};
use crate::facts::HostFacts;
use crate::prepare::{prepare, rejected, Prepared};
use crate::record::{AppliedRecord, Mechanism, WorkloadRecord};
use crate::setup::{Launch, Setup, WorkloadSetup};
use crate::status::{status, Status};
use crate::txn::{undo, undo_all, Fault, Txn, Undo};

const NODE_DIR: &str = "node";
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
    /// Test hook: the file holding "this boot's id" compared with the journal's (default: the kernel's
    /// /proc/sys/kernel/random/boot_id). Tests point it at a file of their own to emulate a reboot.
    pub boot_id_file: Option<PathBuf>,
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
            boot_id_file: None,
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

fn node_dir(root: &StateDir) -> PathBuf {
    root.path.join(NODE_DIR)
}

/// Whether a node's base is applied under this state directory (one-shot apply refuses then).
pub fn node_active(root: &StateDir) -> bool {
    node_dir(root).join("base").join("state.json").exists()
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

/// Whether a cgroup path lies inside the workload's own directory `<mount>/<parent>/<name>/…`.
fn owned_by(path: &Path, name: &str) -> bool {
    let parents = [crate::cgroup::V1_PARENT, crate::cgroup::V2_PARENT];
    let is_parent = |d: Option<&Path>| d.and_then(|p| p.file_name()).is_some_and(|p| parents.iter().any(|x| p == *x));
    let named = |d: &Path, prefix: &str| d.file_name().is_some_and(|n| n.to_string_lossy().starts_with(prefix));
    path.ancestors().any(|a| {
        a.file_name().is_some_and(|n| n == name)
            && (is_parent(a.parent())
                // A workload's group inside a node partition: v1 `rtslice/_partition-<cpus>/<name>`,
                // v2 `<root>/rtslice-partition-<cpus>/<name>`.
                || a.parent().is_some_and(|p| {
                    (named(p, SHARED_PARTITION_PREFIX) && is_parent(p.parent())) || named(p, crate::cgroup::V2_PARTITION_PREFIX)
                }))
    })
}

/// The node's mechanism: the requested one, else HCBS > RT groups > SCHED_DEADLINE > none.
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
    Ok([Mechanism::Hcbs, Mechanism::RtGroup, Mechanism::Deadline]
        .into_iter()
        .find(|m| facts.available.contains(m))
        .unwrap_or(Mechanism::None))
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
                b
            }
            None => {
                opened.created = true;
                apply_base(&base_dir, &facts, &opts)?
            }
        };
        let node = Node { root, facts, base, opts, _lock: lock };
        node.recover(&mut opened)?;
        // A crash between raising the root's HCBS budget and the operation it was for leaves more
        // than the groups need.
        node.hcbs_settle_root();
        Ok((node, opened))
    }

    pub fn base(&self) -> &NodeBase {
        &self.base
    }

    pub fn facts(&self) -> &HostFacts {
        &self.facts
    }

    /// Sets the fault injected into the next operations (tests).
    pub fn set_fault(&mut self, fault: Fault) {
        self.opts.fault = fault;
    }

    /// A workload's segment: saved without fsync (`StateDir::volatile`) — its changes do not survive
    /// a reboot, and after one `open` drops the segments unread (the base, synced, says the boot
    /// changed). Most of a deploy's time was these fsyncs (two per journaled change).
    fn segment(&self, name: &str) -> StateDir {
        StateDir::volatile(node_dir(&self.root).join("workloads").join(name))
    }

    /// Names of the workloads with a segment, in deploy order.
    pub fn names(&self) -> Vec<String> {
        let dir = node_dir(&self.root).join("workloads");
        let mut v: Vec<(std::time::SystemTime, String)> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.path().join("state.json").exists())
                    .map(|e| {
                        let t = std::fs::metadata(e.path().join("created")).and_then(|m| m.modified()).unwrap_or(std::time::UNIX_EPOCH);
                        (t, e.file_name().to_string_lossy().into_owned())
                    })
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v.into_iter().map(|(_, n)| n).collect()
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
        status(&self.segment(name))
    }

    /// `status` of the base segment (drift of node-wide values).
    pub fn base_status(&self) -> Result<Status> {
        status(&StateDir::new(node_dir(&self.root).join("base")))
    }

    /// Deploys one workload as its own transaction. `setup` holds exactly one workload (IRQ and
    /// network rules are node-wide and not taken here). On failure that workload's changes are rolled
    /// back and no other workload is touched.
    pub fn deploy(&self, setup: &Setup) -> Result<WorkloadRecord> {
        let ws = self.single(setup)?;
        let seg = self.segment(&ws.name);
        if seg.file().exists() {
            return Err(rejected(format!("workload {} is already deployed", ws.name)));
        }
        let prepared = self.prepare_one(setup, &[])?;
        let runc = self.runc_for(ws)?;
        self.hcbs_raise_root(&prepared)?;
        std::fs::create_dir_all(&seg.path).map_err(|e| HostError::State { path: seg.path.clone(), reason: e.to_string() })?;
        write_json(&seg.path.join(INTENT), &Intent::Deploy, false)?;
        let _ = std::fs::write(seg.path.join("created"), "");
        let mut state = State::new();
        seg.save(&state)?;
        let mut txn = Txn::begin(&seg, &mut state, self.opts.fault);
        let result = self.deploy_steps(&mut txn, setup, &prepared, runc.as_deref());
        match result {
            Ok(rec) => {
                let _ = std::fs::remove_file(seg.path.join(INTENT));
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
                Err(HostError::StepFailed { step, source: Box::new(err), rollback_errors })
            }
        }
    }

    fn single<'s>(&self, setup: &'s Setup) -> Result<&'s WorkloadSetup> {
        if setup.workloads.len() != 1 {
            return Err(rejected(format!("a node operation takes one workload, not {}", setup.workloads.len())));
        }
        if !setup.irqs.is_empty() || !setup.nets.is_empty() {
            return Err(rejected(
                "IRQ and RPS/XPS rules are node-wide: the node service does not take them per workload yet; \
                 use a one-shot `rtslice apply` for them",
            ));
        }
        let ws = &setup.workloads[0];
        if ws.shield {
            return Err(rejected(format!(
                "workload {}: a shield moves every other process of the host, which the node service does not do per \
                 workload; use dedicated CPUs (an exclusive partition) instead",
                ws.name
            )));
        }
        if !ws.devices.is_empty() {
            // A device's IRQ affinities and its claim (one workload per device) would need the
            // node's view of every deployed workload's devices; not built yet.
            return Err(rejected(format!(
                "workload {}: the node service does not pass PCI devices yet; use a one-shot `rtslice apply` for a                  workload with `devices`",
                ws.name
            )));
        }
        if ws.cache.is_some() {
            // Narrowing the default resctrl group is node-wide, and one segment per workload would
            // each journal a different "previous" mask: removed out of order they would restore
            // stale ones. Refused until the base owns the default group's schemata.
            return Err(rejected(format!(
                "workload {}: cache allocation narrows the default resctrl group for the whole node, which the node \
                 service does not do per workload yet; use a one-shot `rtslice apply`, or drop `cache`/`memoryBandwidth`",
                ws.name
            )));
        }
        Ok(ws)
    }

    fn runc_for(&self, ws: &WorkloadSetup) -> Result<Option<PathBuf>> {
        match &ws.launch {
            Launch::Oci(o) => {
                if let Err(e) = crate::image::OciSource::detect(&o.bundle) {
                    return Err(rejected(format!("workload {}: {e}", ws.name)));
                }
                Ok(Some(self.opts.runc.clone().or_else(crate::oci::find_runc).ok_or_else(|| {
                    rejected("an OCI launch needs runc, which is not installed (apt-get install runc)")
                })?))
            }
            Launch::Podman(_) => crate::podman::require(&ws.name).map(|_| None),
            Launch::Attach { pids } => {
                for pid in pids {
                    if ProcRef::of(*pid).is_none() {
                        return Err(rejected(format!("workload {}: pid {pid} does not exist", ws.name)));
                    }
                }
                Ok(None)
            }
            _ => Ok(None),
        }
    }

    /// Validates one workload against the host and against the workloads already deployed (except
    /// those named in `except`: a resize replaces its own old version).
    fn prepare_one(&self, setup: &Setup, except: &[&str]) -> Result<Prepared> {
        let ws = &setup.workloads[0];
        // HCBS admission is node-wide, read from the kernel below: the root's groups as the node
        // opened are no longer what they are.
        let facts = HostFacts { hcbs_root: None, ..self.facts.clone() };
        let (mut prepared, _warnings) = prepare(setup, &facts, self.base.mechanism)?;
        let mut p = prepared.remove(0);
        let v2 = !self.facts.backend.is_v1();
        // SCHED_DEADLINE workloads on exactly the same CPUs share one partition (a root domain), each
        // in a group of its own inside it: several vBS on one CPU. Dedicated CPUs are no one else's:
        // on v1 the workload's own group is its partition; on v2 every partition is a directory at
        // the root (its parent must be a partition root: cgroup::V2_PARTITION_PREFIX) holding the
        // workload's group as a member, and a dedicated workload is alone in its own.
        let shareable = p.partition && !p.ws.partition && !p.ws.shield;
        let in_partition_dir = p.partition && self.base.partitions && !p.ws.shield && (v2 || shareable);
        if in_partition_dir {
            let dir = shared_partition_dir(&self.facts.backend, &p.ws.cpus);
            p.group.cpuset = dir.join(&p.ws.name);
            if v2 {
                // One hierarchy: the cpu controller's group is the same directory.
                p.group.cpu = p.group.cpuset.clone();
            }
            p.partition = false;
            if !v2 && matches!(p.ws.launch, Launch::Oci(_)) {
                // runc takes one cgroupsPath for every v1 hierarchy, and this group's cpuset path
                // (inside the shared partition) differs from its cpu path.
                return Err(rejected(format!(
                    "workload {}: an OCI container cannot join a shared SCHED_DEADLINE partition on cgroup v1 (runc \
                     uses one cgroup path in every hierarchy); give it dedicated CPUs or run the node with --mechanism \
                     rt_group",
                    ws.name
                )));
            }
        }
        let mine = if in_partition_dir { shared_partition_of(&p.group.cpuset) } else { p.partition.then(|| p.group.cpuset.clone()) };
        if p.partition && !self.base.partitions {
            return Err(rejected(format!(
                "workload {} needs an exclusive partition (dedicated CPUs or SCHED_DEADLINE), which this node cannot \
                 give: {}",
                ws.name,
                self.base.warnings.first().map_or("a node on one CPU has none to give", |w| w.as_str())
            )));
        }
        let others: Vec<AppliedRecord> =
            self.records()?.into_iter().filter(|r| !r.workloads.iter().any(|w| except.contains(&w.name.as_str()))).collect();
        let mut exclusive = if mine.is_some() { p.ws.cpus.clone() } else { CpuList::new() };
        let mut total = p.rt_budget.map_or(0.0, |r| r.bandwidth());
        // SCHED_DEADLINE admits per root domain: the reservations sharing this partition, summed.
        let reserved = |w: &WorkloadSetup| w.reservation.map_or(0.0, |x| x.whole_micros().bandwidth() * w.cpus.len() as f64);
        let mut in_partition = if in_partition_dir { reserved(&p.ws) } else { 0.0 };
        for r in &others {
            for w in &r.workloads {
                let theirs = partition_dir_of(&w.group.cpuset);
                let theirs_shareable = r.setup.workloads.iter().find(|x| x.name == w.name).is_some_and(|x| !x.partition && !x.shield);
                let same_shared = shareable && theirs_shareable && theirs.is_some() && theirs == mine;
                if (mine.is_some() || theirs.is_some()) && !same_shared && !w.cpus.intersection(&p.ws.cpus).is_empty() {
                    let why = if !theirs_shareable || !shareable {
                        " (dedicated CPUs are shared with no one)"
                    } else if theirs.as_ref().is_some_and(|t| shared_partition_of(&t.join(&w.name)).is_some()) {
                        " (SCHED_DEADLINE workloads share a partition only on exactly the same CPUs)"
                    } else {
                        ""
                    };
                    return Err(rejected(format!(
                        "workload {} [{}] overlaps workload {} [{}], which {} an exclusive partition{why}",
                        ws.name,
                        p.ws.cpus,
                        w.name,
                        w.cpus,
                        if theirs.is_some() { "is in" } else { "would need" }
                    )));
                }
                if theirs.is_some() {
                    exclusive = exclusive.union(&w.cpus);
                }
                if same_shared {
                    in_partition += r.setup.workloads.iter().filter(|x| x.name == w.name).map(reserved).sum::<f64>();
                }
            }
            total += r.setup.workloads.iter().filter_map(|w| w.reservation.map(|x| x.whole_micros().bandwidth())).sum::<f64>();
        }
        if self.base.mechanism == Mechanism::Deadline && in_partition_dir {
            // The kernel's cap less the deadline servers' share, on each CPU of the partition.
            let cap = (self.facts.rt_ratio - self.facts.dl_server).max(0.0) * p.ws.cpus.len() as f64;
            if in_partition > cap + 1e-9 {
                return Err(rejected(format!(
                    "workload {}: the SCHED_DEADLINE reservations on CPUs [{}] would sum to {:.1}% of a CPU, above the \
                     {:.1}% the kernel admits there (its cap {:.1}% less the deadline servers' {:.1}% per CPU); remove or \
                     shrink a workload on these CPUs, or place it on others",
                    ws.name,
                    p.ws.cpus,
                    in_partition * 100.0,
                    cap * 100.0,
                    self.facts.rt_ratio * 100.0,
                    self.facts.dl_server * 100.0
                )));
            }
        }
        // As the planner (plan_for_kernel): CPUs isolated at boot are not left to the system (v2: a
        // 6.12 kernel oopses when partitions take every other CPU; the system would run on them only).
        let no_partition = self.facts.no_partition_cpus();
        let housekeeping = self.base.online.difference(&no_partition);
        if !exclusive.difference(&no_partition).is_empty() && housekeeping.difference(&exclusive).is_empty() {
            return Err(rejected(if no_partition.is_empty() {
                format!("exclusive partitions would take every online CPU [{}]; leave at least one CPU for the rest of the system", self.base.online)
            } else {
                format!(
                    "exclusive partitions would take every housekeeping CPU [{housekeeping}] and leave the rest of the system only the \
                     CPUs isolated at boot [{no_partition}] (isolcpus=domain: no load balancing there, and a 6.12 kernel oopses \
                     rebuilding its scheduling domains so); leave at least one housekeeping CPU"
                )
            }));
        }
        if let (Mechanism::Hcbs, Some(cap)) = (self.base.mechanism, self.facts.hcbs_cap()) {
            // Every budget the root group holds (the other workloads', other tools'), this one's
            // own as it is now replaced: HCBS reserves them all on every CPU.
            let cap = cap.min(self.opts.cap);
            let held: f64 = crate::cgroup::hcbs_root_groups(&self.facts.backend.root().cpu)
                .into_iter()
                .filter(|(dir, _)| dir != &p.group.cpu)
                .map(|(_, b)| b.runtime_us as f64 / b.period_us.max(1) as f64)
                .sum();
            let total = held + p.rt_budget.map_or(0.0, |r| r.bandwidth());
            if total > cap + 1e-9 {
                return Err(rejected(format!(
                    "workload {}: HCBS reserves every group's budget on every CPU, whatever its cpuset (the root group's \
                     budget holds them all), and with it the budgets would sum to {:.1}% ({:.1}% held by the other groups), \
                     above the node's {:.1}% (the kernel admits its cap less the fair servers' share); remove or shrink a workload",
                    ws.name,
                    total * 100.0,
                    held * 100.0,
                    cap * 100.0
                )));
            }
        }
        if let (Mechanism::RtGroup | Mechanism::Hcbs, Some(budget)) = (self.base.mechanism, self.base.parent_budget_us) {
            let cap = budget as f64 / 1e6;
            if total > cap + 1e-9 {
                return Err(rejected(format!(
                    "workload {}: RT group scheduling accounts every group's runtime/period against one ratio, and the \
                     reservations would sum to {:.1}%, above the node's {:.1}%; remove or shrink a workload",
                    ws.name,
                    total * 100.0,
                    cap * 100.0
                )));
            }
        }
        Ok(p)
    }

    fn deploy_steps(
        &self,
        txn: &mut Txn,
        setup: &Setup,
        p: &Prepared,
        runc: Option<&Path>,
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
        for op in self.workload_ops(p) {
            match op {
                Op::Mkdir { path, evacuate_to } => step(format!("create cgroup {}", path.display()), txn.mkdir(&path, &evacuate_to))?,
                Op::Write { path, value } => step(format!("write {value:?} to {}", path.display()), txn.write_if_changed(&path, &value))?,
            }
        }
        let mut rec = WorkloadRecord {
            name: name.clone(),
            cpus: p.ws.cpus.clone(),
            group: p.group.clone(),
            pids: Vec::new(),
            container: None,
            rules: p.ws.threads.clone(),
            // The node service refuses cache allocation (`single`).
            resctrl_group: None,
        };
        let record = |rec: &WorkloadRecord| AppliedRecord {
            setup: setup.clone(),
            mechanism: self.base.mechanism,
            backend: self.facts.backend.clone(),
            workloads: vec![rec.clone()],
            agent: None,
            warnings: Vec::new(),
        };
        txn.state.record = Some(record(&rec));
        step("save state".into(), txn.save())?;
        let state_dir = self.segment(name);
        let procs_files = launch::procs_files_for(p, &self.facts);
        match &p.ws.launch {
            Launch::None => {}
            Launch::Command { argv, env, cwd } => {
                let proc = launch::command(txn, name, argv, env, cwd.as_deref(), &procs_files, &state_dir)
                    .map_err(|e| (format!("launch {name} ({})", argv.join(" ")), e))?;
                rec.pids.push(proc);
            }
            Launch::Attach { pids } => {
                for &pid in pids {
                    step(format!("attach pid {pid} to {name}"), launch::attach(txn, pid, &self.facts, p))?;
                    rec.pids.extend(ProcRef::of(pid));
                }
            }
            Launch::Oci(o) => {
                let runc = runc.expect("checked before the transaction");
                let id = o.id.clone().unwrap_or_else(|| format!("rtslice-{name}"));
                let (pid, root) = launch::oci_create(txn, &self.facts, &state_dir, p, o, &id, runc, &[])
                    .map_err(|e| (format!("create container {id} for {name}"), e))?;
                step(format!("thread rules in container {id}"), crate::apply::workload_rules(txn, p))?;
                step(format!("start container {id}"), crate::oci::runc_start(runc, &root, &id))?;
                launch::wait_for_exec(pid);
                rec.container = Some(id);
                rec.pids.extend(ProcRef::of(pid));
            }
            Launch::Podman(l) => {
                let runc = self.opts.runc.clone().or_else(crate::oci::find_runc);
                let (bin, cname, pid) = launch::podman_create(txn, &self.facts, p, l, runc.as_deref())
                    .map_err(|e| (format!("create podman container for {name}"), e))?;
                step(format!("thread rules in podman container {cname}"), crate::apply::workload_rules(txn, p))?;
                step(format!("start podman container {cname}"), crate::podman::start(&bin, &cname))?;
                launch::wait_for_exec(pid);
                rec.container = Some(cname);
                rec.pids.extend(ProcRef::of(pid));
            }
        }
        step(format!("thread rules of {name}"), crate::apply::workload_rules(txn, p))?;
        txn.state.record = Some(record(&rec));
        step("save state".into(), txn.save())?;
        Ok(rec)
    }

    /// The cgroup operations of one workload: what one-shot apply would do for it, without anything
    /// outside its own directories (the base owns those).
    fn workload_ops(&self, p: &Prepared) -> Vec<Op> {
        cgroup_ops(std::slice::from_ref(p), &self.facts, self.base.mechanism)
            .into_iter()
            .filter(|op| match op {
                Op::Mkdir { path, .. } | Op::Write { path, .. } => owned_by(path, &p.ws.name),
            })
            .collect()
    }

    /// v1 with partitions: `system` holds every online CPU that no exclusive workload group holds,
    /// less `also` (CPUs a workload is about to take). Read from the kernel, so it is right after
    /// any failure or crash too.
    fn set_system(&self, also: &CpuList) -> Result<()> {
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

    /// Removes shared partitions no workload is in any more, then gives `system` back what no
    /// partition holds (after every remove, failed operation and recovery).
    fn refresh_system(&self) {
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
    fn ensure_shared_partition(&self, dir: &Path, cpus: &CpuList) -> Result<()> {
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
    /// included (6.12 resets the top cpuset's tasks to the possible CPUs less the partitions' CPUs;
    /// see `apply::journal_root_affinities`, which one-shot apply journals instead). Around such a
    /// change (`change`), the root cgroup's threads get back what they had, within what the root
    /// now has: a thread that ran on every housekeeping CPU the root had also gets the
    /// housekeeping CPUs a removed partition gave back (`freed`); a thread pinned narrower keeps its
    /// pin. Not journaled, like the partitions themselves: it follows them.
    fn keep_boot_isolation<T>(&self, freed: &CpuList, change: impl FnOnce() -> Result<T>) -> Result<T> {
        let Backend::V2 { root } = &self.facts.backend else { return change() };
        let isolated = &self.facts.boot_isolated;
        if isolated.is_empty() {
            return change();
        }
        let effective = || fsio::read_trim(root.join("cpuset.cpus.effective")).ok().and_then(|c| CpuList::parse(&c).ok());
        let housekeeping = effective().map(|e| e.difference(isolated));
        let before: Vec<(i32, CpuList)> = crate::cgroup::read_pids(&root.join("cgroup.threads"))
            .into_iter()
            .filter(|&tid| !crate::sched::no_setaffinity(tid))
            .filter_map(|tid| Some((tid, crate::sched::get_affinity(tid).ok()?)))
            .collect();
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

    /// HCBS: the root group's `cpu.rt.max`, when the node reserves with HCBS.
    fn hcbs_root_file(&self) -> Option<PathBuf> {
        (self.base.mechanism == Mechanism::Hcbs).then(|| self.facts.backend.root().cpu.join("cpu.rt.max"))
    }

    /// HCBS: before `p`'s group gets its budget (a deploy, a resize), the root group's budget is
    /// raised to hold it with every other group's it holds, if it does not already.
    fn hcbs_raise_root(&self, p: &Prepared) -> Result<()> {
        let (Some(file), Some(r)) = (self.hcbs_root_file(), p.rt_budget) else { return Ok(()) };
        let root_dir = self.facts.backend.root().cpu;
        let Some((runtime, period_us)) = fsio::read_opt(&file)?.as_deref().and_then(crate::cgroup::parse_rt_max) else {
            return Ok(());
        };
        let others = crate::cgroup::hcbs_root_groups(&root_dir).into_iter().filter(|(d, _)| d != &p.group.cpu).map(|(_, b)| b).collect();
        let root = rtslice_plan::HcbsRoot { runtime_us: runtime.unwrap_or(0), period_us, others };
        let ours = rtslice_plan::kernel::GroupBudget { runtime_us: r.runtime_us(), period_us: r.period_us() };
        match root.raised_for(&[ours]) {
            Some(b) => self.set_hcbs_root(&file, b).map_err(|e| HostError::StepFailed {
                step: format!("raise the root group's HCBS budget to \"{} {}\" for workload {}", b.runtime_us, b.period_us, p.ws.name),
                source: Box::new(e),
                rollback_errors: Vec::new(),
            }),
            None => Ok(()),
        }
    }

    /// HCBS, after an operation (and at open): the root group's budget back down to what its groups
    /// need, never below its value before the node (the base journal's). A refusal (a removed
    /// group the kernel has not freed yet, beyond the retries) leaves the root holding more until
    /// the next operation: nothing is over-admitted by that.
    fn hcbs_settle_root(&self) {
        let Some(file) = self.hcbs_root_file() else { return };
        let Some(before) = self.hcbs_root_before(&file) else { return };
        let Some((runtime, period_us)) = fsio::read_opt(&file).ok().flatten().as_deref().and_then(crate::cgroup::parse_rt_max) else { return };
        let groups: Vec<rtslice_plan::kernel::GroupBudget> =
            crate::cgroup::hcbs_root_groups(&self.facts.backend.root().cpu).into_iter().map(|(_, b)| b).collect();
        let need = rtslice_plan::kernel::GroupBudget { runtime_us: rtslice_plan::kernel::hcbs_root_runtime_us(&groups, period_us), period_us };
        let bw = rtslice_plan::kernel::hcbs_bw;
        let target = if bw(need) > bw(before) { need } else { before };
        if bw(target) != bw(rtslice_plan::kernel::GroupBudget { runtime_us: runtime.unwrap_or(0), period_us }) || target.period_us != period_us {
            let _ = self.set_hcbs_root(&file, target);
        }
    }

    /// The root's budget before the node started (the base journal's entry for it).
    fn hcbs_root_before(&self, file: &Path) -> Option<rtslice_plan::kernel::GroupBudget> {
        let state = StateDir::new(node_dir(&self.root).join("base")).load().ok()??;
        state.changes.iter().find_map(|c| match c {
            Change::Wrote { path, old, .. } if path == file => crate::cgroup::parse_rt_max(old)
                .map(|(r, period_us)| rtslice_plan::kernel::GroupBudget { runtime_us: r.unwrap_or(0), period_us }),
            _ => None,
        })
    }

    /// Writes the root's budget, the base journal's entry saying so first (its `old` stays what
    /// reset restores; `new` is what status compares): a crash in between leaves the entry ahead of
    /// the kernel, which the next open settles.
    fn set_hcbs_root(&self, file: &Path, b: rtslice_plan::kernel::GroupBudget) -> Result<()> {
        let value = format!("{} {}", b.runtime_us, b.period_us);
        let base_dir = StateDir::new(node_dir(&self.root).join("base"));
        let set_new = |v: &str| -> Result<()> {
            let Some(mut state) = base_dir.load()? else { return Ok(()) };
            for c in state.changes.iter_mut() {
                if let Change::Wrote { path, new, .. } = c {
                    if path == file {
                        *new = v.to_string();
                    }
                }
            }
            base_dir.save(&state)
        };
        set_new(&value)?;
        let r = crate::txn::write_rt_aware(file, &value);
        if r.is_err() {
            if let Ok(now) = fsio::read_trim(file) {
                let _ = set_new(&now);
            }
        }
        r
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
        self.finish_remove(&seg, self.opts.grace)
    }

    fn finish_remove(&self, seg: &StateDir, grace: Duration) -> Result<Removed> {
        let Some(mut state) = seg.load()? else {
            let _ = std::fs::remove_dir_all(&seg.path);
            return Ok(Removed::default());
        };
        let undone = state.changes.len();
        let mut ctx = Undo { grace, ..Default::default() };
        let mut errors = crate::txn::stop_launched_first(&mut state.changes, 0, &mut ctx);
        errors.extend(undo_all(&mut state.changes, 0, &mut ctx));
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
        self.hcbs_raise_root(&p)?;
        let from = state.changes.len();
        write_json(&seg.path.join(INTENT), &Intent::Resize { from, before: Box::new(before.clone()) }, false)?;
        let mut txn = Txn::begin(&seg, &mut state, self.opts.fault);
        let result = self.resize_steps(&mut txn, setup, &p, &before, &old);
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
    ) -> std::result::Result<WorkloadRecord, (String, HostError)> {
        let step = |s: String, r: Result<()>| r.map_err(|e| (s, e));
        if p.partition {
            step("take the CPUs out of the system cpuset".into(), self.set_system(&p.ws.cpus))?;
        }
        let mut ops = self.workload_ops(p);
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
            match op {
                Op::Mkdir { path, evacuate_to } => {
                    if !path.exists() {
                        step(format!("create cgroup {}", path.display()), txn.mkdir(&path, &evacuate_to))?;
                    }
                }
                Op::Write { path, value } => step(format!("write {value:?} to {}", path.display()), txn.write_if_changed(&path, &value))?,
            }
        }
        step(format!("thread rules of {}", p.ws.name), crate::apply::workload_rules(txn, p))?;
        let mut rec = before.workloads[0].clone();
        rec.cpus = p.ws.cpus.clone();
        rec.rules = p.ws.threads.clone();
        txn.state.record = Some(AppliedRecord {
            setup: setup.clone(),
            mechanism: self.base.mechanism,
            backend: self.facts.backend.clone(),
            workloads: vec![rec.clone()],
            agent: None,
            warnings: before.warnings.clone(),
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
                    self.finish_remove(&seg, self.opts.grace)?;
                    opened.recovered.push(format!("finished an interrupted removal of {name}"));
                }
                // An interrupted deploy (or an unreadable intent: it was being written) is undone whole.
                Some(Intent::Deploy) | None => {
                    stop_unjournaled_launches(&seg);
                    self.finish_remove(&seg, Duration::from_secs(1))?;
                    opened.recovered.push(format!("rolled back an interrupted deploy of {name}"));
                }
            }
        }
        self.refresh_system();
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
        let mut total = Removed::default();
        let mut names = self.names();
        names.reverse();
        for n in names {
            let r = self.remove(&n)?;
            total.undone += r.undone;
            total.terminated += r.terminated;
            total.killed += r.killed;
        }
        let base_dir = StateDir::new(node_dir(&self.root).join("base"));
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

/// Shared partitions are named `_partition-<cpus>` under the parent cpuset: no workload can have
/// such a name (workload names start with a letter or digit).
const SHARED_PARTITION_PREFIX: &str = "_partition-";

/// The node's partition for workloads on `cpus`: v1 under the parent cpuset, v2 at the root.
fn shared_partition_dir(backend: &Backend, cpus: &CpuList) -> PathBuf {
    match backend {
        Backend::V1 { .. } => backend.parent().cpuset.join(format!("{SHARED_PARTITION_PREFIX}{cpus}")),
        Backend::V2 { root } => root.join(format!("{}{cpus}", crate::cgroup::V2_PARTITION_PREFIX)),
    }
}

/// The node partition a workload's cpuset group is in, if it is in one.
fn shared_partition_of(group_cpuset: &Path) -> Option<PathBuf> {
    let dir = group_cpuset.parent()?;
    let name = dir.file_name()?.to_string_lossy();
    (name.starts_with(SHARED_PARTITION_PREFIX) || name.starts_with(crate::cgroup::V2_PARTITION_PREFIX)).then(|| dir.to_path_buf())
}

/// The partition a workload's cpuset group is (an exclusive group of its own) or is in (shared).
fn partition_dir_of(group_cpuset: &Path) -> Option<PathBuf> {
    if partition_of(group_cpuset) {
        return Some(group_cpuset.to_path_buf());
    }
    shared_partition_of(group_cpuset).filter(|d| partition_of(d))
}

/// A v1 cpuset that is an exclusive partition (reads `cpuset.cpu_exclusive` = 1), or a valid v2 one.
fn partition_of(cpuset_dir: &Path) -> bool {
    fsio::read_trim(cpuset_dir.join("cpuset.cpu_exclusive")).is_ok_and(|v| v == "1")
        || fsio::read_trim(cpuset_dir.join("cpuset.cpus.partition")).is_ok_and(|v| v == "root" || v == "isolated")
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

/// Applies the node's base as one journaled transaction (rolled back whole on failure).
fn apply_base(dir: &StateDir, facts: &HostFacts, opts: &NodeOptions) -> Result<NodeBase> {
    let mechanism = node_mechanism(facts, opts.mechanism)?;
    let b = &facts.backend;
    // v1: the root and parent stop balancing and `system` keeps the rest; v2: partitions are made
    // at the root as workloads need them (`Node::ensure_shared_partition`).
    let partitions = facts.online.len() > 1;
    let cap = opts.cap.min(facts.rt_ratio).clamp(0.0, 1.0);
    let parent_budget_us = (mechanism == Mechanism::RtGroup).then(|| (cap * 1e6).floor() as u64);
    let mut base =
        NodeBase { mechanism, backend: b.clone(), online: facts.online.clone(), partitions, parent_budget_us, warnings: Vec::new() };
    std::fs::create_dir_all(&dir.path).map_err(|e| HostError::State { path: dir.path.clone(), reason: e.to_string() })?;
    write_json(&dir.path.join(INTENT), &"base", true)?;
    let mut state = State::new();
    // The id `Node::open` compares with after a restart (the kernel's, unless a test injects one).
    state.boot_id = opts.boot_id();
    dir.save(&state)?;
    let mut txn = Txn::begin(dir, &mut state, Fault::default());
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
                "exclusive partitions are unavailable: {e}. Other cpusets at the root of the cpuset hierarchy overlap                  rtslice's (see ls {}); dedicated CPUs and SCHED_DEADLINE are refused until they are gone and the node                  is reset",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_owns_only_paths_under_its_own_directory() {
        assert!(owned_by(Path::new("/sys/fs/cgroup/cpu/rtslice/du/cpu.rt_runtime_us"), "du"));
        assert!(owned_by(Path::new("/sys/fs/cgroup/cpuset/rtslice/du"), "du"));
        assert!(owned_by(Path::new("/sys/fs/cgroup/rtslice.slice/du/cpu.max"), "du"));
        assert!(!owned_by(Path::new("/sys/fs/cgroup/cpu/rtslice/cpu.rt_runtime_us"), "du"));
        assert!(!owned_by(Path::new("/sys/fs/cgroup/cpuset/rtslice/system/cpuset.cpus"), "du"));
        assert!(!owned_by(Path::new("/sys/fs/cgroup/cpuset/rtslice/du2/cpuset.cpus"), "du"));
        assert!(!owned_by(Path::new("/sys/fs/cgroup/cpuset/cpuset.sched_load_balance"), "du"));
    }

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
