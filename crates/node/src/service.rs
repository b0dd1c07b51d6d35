//! The one writer: the node's desired state (the admitted and the pending workloads), admission
//! through the live planner, every change applied through the host's per-workload transactions,
//! and the event log.
//!
//! The desired state is persisted (`<state>/desired.json`, written before each host operation and
//! after it) so a restarted daemon knows what should run: [`Service::open`] compares it with what the
//! host node re-adopted and deploys, resizes or removes the difference (also after a reboot, when the
//! host's journal is gone and everything desired is deployed again).

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rtslice_host::{CpuList, Mechanism, Node, NodeOptions, OciDefaults, Setup};
use rtslice_plan::{Defrag, NodeFacts, Planner, SizingFacts, WorkloadPlan};
use rtslice_spec::{Demand, RestartPolicy, Spec, Workload};
use serde::{Deserialize, Serialize};

use crate::error::{NodeError, Result};

const DESIRED: &str = "desired.json";
const DESIRED_FORMAT: &str = "rtslice-desired";
const DESIRED_VERSION: u32 = 1;
/// Events kept in memory (older ones are dropped; `GET /v1/events` says from which sequence on).
const EVENTS_KEPT: usize = 10_000;

/// Where a workload stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Admitted and applied: its processes run under its reservation.
    Running,
    /// Not admitted: it does not fit now (the reason says why); retried whenever capacity frees up.
    Pending,
    /// Its launched process exited; it keeps its reservation (CPUs, cgroups) until it is removed or
    /// its restart policy starts it again (`restartAt`).
    Exited,
}

impl Phase {
    /// Whether the workload holds its CPUs and bandwidth (deployed on the host).
    pub fn holds(self) -> bool {
        self != Phase::Pending
    }
}

/// One workload of the desired state.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Entry {
    /// The workload as submitted (or as last resized).
    pub workload: Workload,
    pub phase: Phase,
    /// Incremented by every accepted change; a resize names the generation it saw (else 409).
    pub generation: u64,
    /// Where the planner placed it (running).
    #[serde(default)]
    pub cpus: Vec<u32>,
    /// What the host applies (running).
    #[serde(default)]
    pub setup: Option<Setup>,
    /// Why it is pending, and the defragmentation that would make room.
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub defrag: Option<Defrag>,
    /// When its processes were last started (seconds since the epoch).
    #[serde(default)]
    pub started_at: Option<f64>,
    /// How its launched process ended (exited).
    #[serde(default)]
    pub exit: Option<String>,
    /// Restarts in a row (the backoff's exponent); a run longer than the policy's maxBackoff resets it.
    #[serde(default)]
    pub restarts: u32,
    /// When the restart policy starts it again (exited, seconds since the epoch).
    #[serde(default)]
    pub restart_at: Option<f64>,
    /// The reservation in force when it is not the workload's own: sized for its SLO at admission,
    /// or set since by the closed loop (`adapt`). The workload stays as submitted, so `apply` of the
    /// same spec leaves a loop-adjusted runtime alone (as `kubectl apply` leaves an autoscaler's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_force: Option<Demand>,
    /// The runtime per period admitted at the last deploy or resize (the closed loop's minimum when
    /// `adapt.min` is not given).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "rtslice_spec::units::serde_duration::option")]
    pub admitted_runtime: Option<Duration>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Desired {
    format: String,
    version: u32,
    node: rtslice_spec::Node,
    #[serde(default)]
    flavors: std::collections::BTreeMap<String, rtslice_spec::Flavor>,
    workloads: Vec<Entry>,
    /// The next generation number (never reused, so a stale resize cannot match a later workload).
    next_generation: u64,
}

/// One event of the log.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Event {
    pub seq: u64,
    /// Seconds since the epoch.
    pub time: f64,
    /// admitted | pending | started | exited | restarted | resized | removed | updated | failed | recovered | adopted |
    /// drift
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    pub message: String,
}

/// What a deploy did with one workload.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Outcome {
    pub name: String,
    pub phase: Phase,
    pub generation: u64,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub cpus: Vec<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub defrag: Option<Defrag>,
}

/// A resize request: the reservation's fields or the CPUs, and the generation it was computed from.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resize {
    /// The generation the client saw (`GET /v1/workloads/{name}`); another one means someone changed
    /// the workload meanwhile: 409.
    pub generation: u64,
    /// Runtime every period, e.g. "300us".
    #[serde(default)]
    pub runtime: Option<String>,
    #[serde(default)]
    pub period: Option<String>,
    /// Number of CPUs.
    #[serde(default)]
    pub count: Option<u32>,
    /// Exactly these CPUs, e.g. "2-3".
    #[serde(default)]
    pub cpus: Option<String>,
}

/// How the service is started.
#[derive(Clone, Debug)]
pub struct ServiceOptions {
    pub state_dir: PathBuf,
    /// The node section (housekeeping CPUs, cap, fit policy) from `--node FILE`, else the defaults.
    pub node: rtslice_spec::Node,
    pub mechanism: Option<Mechanism>,
    pub grace: Duration,
    /// Environment every launched command gets (the daemon's `RTSLICE_REPORT_SOCKET`); a variable the
    /// workload's own `env` sets wins.
    pub launch_env: Vec<(String, String)>,
    /// Test hook (env `RTSLICE_BOOT_ID_FILE` of `rtslice daemon`): read the boot id from this file
    /// instead of the kernel's, to emulate a reboot; see [`rtslice_host::NodeOptions::boot_id_file`].
    pub boot_id_file: Option<PathBuf>,
}

/// How a launched process ended, as `waitpid` reported it to the daemon (its parent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
}

/// What `apply` does with one workload of the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// New: admitted on its own, as `deploy` does.
    Deploy,
    /// The same launch, another demand or rules: changed in place (same processes).
    Resize,
    /// Another launch (or a demand of another kind): removed, then deployed anew (new processes).
    Replace,
    /// Pending, or only its restart policy differs: the desired state changes, the host does not.
    Update,
    /// Not in the spec: stopped, its CPUs returned.
    Remove,
    /// The same as what runs: not touched.
    Unchanged,
}

/// One line of `apply`'s difference, and (after a real apply, or as predicted by a dry run) where
/// the workload stands.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Change {
    pub name: String,
    pub action: Action,
    /// What differs (the fields), empty for deploy, remove, unchanged.
    #[serde(skip_serializing_if = "String::is_empty", default)]
    pub detail: String,
    /// Running, pending or exited afterwards (none for a removal).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub phase: Option<Phase>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub cpus: Vec<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub defrag: Option<Defrag>,
}

pub struct Service {
    host: Node,
    launch_env: Vec<(String, String)>,
    desired: Desired,
    dir: PathBuf,
    events: VecDeque<Event>,
    next_event: u64,
    facts: NodeFacts,
    /// Exit statuses of launched processes this service reaped (pid → status), until their
    /// workload's exit is handled.
    exits: HashMap<i32, ExitStatus>,
    /// The drift last reported per workload (a drift event is logged when it changes).
    drift_seen: HashMap<String, String>,
    last_drift_check: Option<Instant>,
    /// Kubernetes containers admitted through the NRI plugin (crate::containers).
    pub(crate) containers: crate::containers::Containers,
    /// How the kernel enforces budgets, for sizing SLO workloads as `plan` and `apply` do.
    sizing: SizingFacts,
    /// The closed loop of each adapting workload (not persisted: a restarted daemon observes anew
    /// from the reservation in force).
    loops: HashMap<String, LoopRun>,
    /// The thread-rule agent the daemon runs beside the service (`attach_agent`): threads a
    /// workload creates after its deploy get their rules, demand pools follow demand. It is kept
    /// off a workload while an operation changes it (`host_*`). None in-process (the CLI without a
    /// daemon): rules then hold for the threads present at each operation.
    agent: Option<std::sync::Arc<std::sync::Mutex<rtslice_agent::Agent>>>,
}

/// One adapting workload's loop: its state and the reading its current interval started at.
#[derive(Default)]
struct LoopRun {
    state: crate::adapt::LoopState,
    since: Option<Reading>,
    /// The last decision and why (also "keep"s, which the event log leaves out): `GET
    /// /v1/workloads/{name}` shows it, so "why does it not adapt?" has an answer.
    last: Option<String>,
}

/// The cumulative counters of one workload at one telemetry reading.
#[derive(Clone, Copy)]
struct Reading {
    time: f64,
    used_s: f64,
    jobs: Option<u64>,
    misses: Option<u64>,
    throttled: Option<u64>,
    /// Steal of the workload's CPUs so far, summed (seconds).
    stolen_s: f64,
}

/// How often [`Service::check_exits`] compares the running workloads with their journals.
const DRIFT_CHECK_EVERY: Duration = Duration::from_secs(5);

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

impl Service {
    /// Opens the host node (recovering from a crash or a reboot) and brings it to the desired state.
    pub fn open(opts: ServiceOptions) -> Result<Service> {
        let host_opts = NodeOptions {
            mechanism: opts.mechanism,
            cap: opts.node.cap,
            grace: opts.grace,
            boot_id_file: opts.boot_id_file.clone(),
            ..NodeOptions::with_state_dir(&opts.state_dir)
        };
        let (host, opened) = Node::open(host_opts)?;
        let dir = opts.state_dir.clone();
        let desired = match read_desired(&dir)? {
            Some(d) => d,
            None => Desired {
                format: DESIRED_FORMAT.into(),
                version: DESIRED_VERSION,
                node: opts.node.clone(),
                flavors: Default::default(),
                workloads: Vec::new(),
                next_generation: 1,
            },
        };
        // The facts `rtslice plan` plans from on this host, so both admit the same specs.
        let facts = rtslice_host::facts::planning_facts()?;
        let sizing = rtslice_plan::kernel::sizing_facts(&host.facts().kernel_facts(), Some(host.base().mechanism));
        let containers = crate::containers::Containers::load(&dir)?;
        let mut svc = Service {
            host,
            launch_env: opts.launch_env.clone(),
            desired,
            dir,
            events: VecDeque::new(),
            next_event: 1,
            facts,
            exits: HashMap::new(),
            drift_seen: HashMap::new(),
            last_drift_check: None,
            containers,
            sizing,
            loops: HashMap::new(),
            agent: None,
        };
        if opened.created {
            svc.event("started", None, format!("node base applied (mechanism {})", svc.host.base().mechanism));
        }
        for w in &svc.host.base().warnings.clone() {
            svc.event("started", None, format!("warning: {w}"));
        }
        if opened.rebooted {
            svc.event("recovered", None, "the host rebooted since the journal was written: re-creating the desired state".into());
        }
        for r in &opened.recovered {
            svc.event("recovered", None, r.clone());
        }
        for n in &opened.adopted {
            svc.event("adopted", Some(n), "running, re-adopted (pid and start time match)".into());
        }
        for n in &opened.exited {
            svc.event("exited", Some(n), "its launched process exited while the daemon was down".into());
        }
        svc.reconcile()?;
        Ok(svc)
    }

    /// The node section the planner uses (`--node FILE`).
    pub(crate) fn node_section(&self) -> &rtslice_spec::Node {
        &self.desired.node
    }

    pub fn mechanism(&self) -> Mechanism {
        self.host.base().mechanism
    }

    pub fn host(&self) -> &Node {
        &self.host
    }

    pub(crate) fn event(&mut self, kind: &str, workload: Option<&str>, message: String) {
        tracing::info!(kind, workload, "{message}");
        self.events.push_back(Event { seq: self.next_event, time: now(), kind: kind.into(), workload: workload.map(String::from), message });
        self.next_event += 1;
        while self.events.len() > EVENTS_KEPT {
            self.events.pop_front();
        }
    }

    pub fn events(&self, since: u64) -> Vec<Event> {
        self.events.iter().filter(|e| e.seq > since).cloned().collect()
    }

    fn save(&self) -> Result<()> {
        let path = self.dir.join(DESIRED);
        let json = serde_json::to_vec_pretty(&self.desired).map_err(|e| NodeError::State(format!("{}: {e}", path.display())))?;
        let tmp = self.dir.join(format!("{DESIRED}.tmp"));
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            std::fs::create_dir_all(&self.dir)?;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&json)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            std::fs::File::open(&self.dir)?.sync_all()
        };
        write().map_err(|e| NodeError::State(format!("cannot write {}: {e}", path.display())))
    }

    /// The spec the planner sees: the node, the flavors, and every running workload pinned to the
    /// CPUs it holds (re-planning never moves a running workload).
    fn pinned_spec(&self, except: &[&str]) -> Spec {
        let mut spec = self.desired_spec();
        spec.node.cap = self.cap();
        for e in self.desired.workloads.iter().filter(|e| e.phase.holds()) {
            if except.contains(&e.workload.name.as_str()) {
                continue;
            }
            let mut w = e.workload.clone();
            if let Some(d) = self.demand_in_force(e) {
                w.demand = Some(d.pinned_to(&e.cpus));
                w.flavor = None;
            }
            if e.in_force.is_some() {
                // Placed already: the planner must not size it again.
                w.slo = None;
                w.profile = None;
            }
            spec.workloads.push(w);
        }
        spec.workloads.extend(self.containers.pinned());
        spec
    }

    /// The per-CPU cap the planner works with: the node's, bounded by the kernel's.
    fn cap(&self) -> f64 {
        let f = self.host.facts();
        let kernel_cap = if self.mechanism() == Mechanism::Deadline { f.rt_ratio - f.dl_server } else { f.rt_ratio };
        self.desired.node.cap.min(kernel_cap).max(0.0)
    }

    /// What the host holds for a workload: the reservation in force (sized, or set by the loop),
    /// else its own demand (`None`: a flavor the node does not define).
    fn demand_in_force(&self, e: &Entry) -> Option<Demand> {
        e.in_force.clone().or_else(|| self.desired_spec().effective_demand(&e.workload))
    }

    pub(crate) fn planner(&self, except: &[&str]) -> Planner {
        Planner::with_sizing(&self.pinned_spec(except), &self.facts, &self.sizing)
    }

    /// Admission of one workload against what runs: its plan, or why not.
    pub(crate) fn admit(&self, w: &Workload, except: &[&str]) -> std::result::Result<(WorkloadPlan, Setup), (String, Option<Defrag>)> {
        let mut planner = self.planner(except);
        // A running workload the user did not pin may be proposed for a move (study B's "move
        // container3 from CPU 3 to CPU 1"); the proposal is advice, nothing moves.
        let unpinned: Vec<&str> = self
            .desired
            .workloads
            .iter()
            .filter(|e| e.phase.holds() && !except.contains(&e.workload.name.as_str()))
            .filter(|e| matches!(&e.workload.demand, Some(Demand::Reservation(r)) if r.cpus.is_none()))
            .map(|e| e.workload.name.as_str())
            .collect();
        planner.movable_in_proposals(&unpinned);
        let plan = match planner.admit(w) {
            Ok(p) => p.clone(),
            Err(r) => return Err((r.reason.clone(), r.defrag.clone())),
        };
        let mut whole = planner.plan();
        whole.workloads.retain(|x| x.name == w.name);
        whole.rejected.clear();
        let mut setup = rtslice_host::setup_from_plan(&whole, OciDefaults::default()).map_err(|e| (e.to_string(), None))?;
        crate::telemetry::add_launch_env(&mut setup, &self.launch_env);
        Ok((plan, setup))
    }

    /// The placement a dry run would give each workload of `spec`, one after the other (as a deploy
    /// of the same body would), without changing anything.
    pub fn dry_run(&self, spec: &Spec) -> Vec<serde_json::Value> {
        let mut planner = self.planner(&[]);
        let mech = self.mechanism();
        let rt_groups = self.host.facts().available.contains(&rtslice_plan::Mechanism::RtGroup);
        spec.workloads
            .iter()
            .map(|w| match planner.admit(w) {
                Ok(p) => serde_json::json!({
                    "name": w.name, "fits": true, "cpus": p.cpus, "allocation": p.allocation,
                    "kernel": rtslice_plan::kernel::kernel_workload_on(p, mech, rt_groups),
                }),
                Err(r) => serde_json::json!({ "name": w.name, "fits": false, "reason": r.reason, "defrag": r.defrag }),
            })
            .collect()
    }

    /// Deploys every workload of `spec` in order, each admitted on its own: the ones that fit run,
    /// the others are kept pending with the planner's reason.
    pub fn deploy(&mut self, spec: &Spec) -> Result<Vec<Outcome>> {
        for w in &spec.workloads {
            if self.desired.workloads.iter().any(|e| e.workload.name == w.name) {
                return Err(NodeError::Conflict(format!(
                    "a workload named {} exists already; remove it first, or resize it (PUT /v1/workloads/{})",
                    w.name, w.name
                )));
            }
        }
        for (k, f) in &spec.flavors {
            if let Some(old) = self.desired.flavors.get(k) {
                if old != f {
                    return Err(NodeError::Conflict(format!("flavor {k} is defined differently on the node already")));
                }
            }
        }
        self.desired.flavors.extend(spec.flavors.clone());
        let mut out = Vec::new();
        for w in &spec.workloads {
            let generation = self.desired.next_generation;
            self.desired.next_generation += 1;
            self.desired.workloads.push(Entry::new(w.clone(), generation));
            self.try_run(&w.name)?;
            out.push(self.outcome(&w.name));
        }
        Ok(out)
    }

    /// The difference between `spec` and the node (see [`Service::apply`]), computed without changing
    /// anything; with `predict`, each change gets the admission a real apply would give it.
    pub fn diff(&self, spec: &Spec, predict: bool) -> Result<Vec<Change>> {
        let mut seen = std::collections::BTreeSet::new();
        for w in &spec.workloads {
            if !seen.insert(w.name.as_str()) {
                return Err(NodeError::Invalid(format!("the spec names workload {} twice", w.name)));
            }
        }
        let change = |name: &str, action: Action, detail: String| Change {
            name: name.into(),
            action,
            detail,
            phase: None,
            cpus: Vec::new(),
            reason: None,
            defrag: None,
        };
        let mut out = Vec::new();
        for e in &self.desired.workloads {
            if !spec.workloads.iter().any(|w| w.name == e.workload.name) {
                out.push(change(&e.workload.name, Action::Remove, String::new()));
            }
        }
        for w in &spec.workloads {
            let Some(e) = self.desired.workloads.iter().find(|e| e.workload.name == w.name) else {
                out.push(change(&w.name, Action::Deploy, String::new()));
                continue;
            };
            let old = normalized(&self.desired_spec(), &e.workload);
            let new = normalized(spec, w);
            let fields = differing_fields(&old, &new);
            let action = if fields.is_empty() {
                Action::Unchanged
            } else if e.phase == Phase::Pending || fields == ["restart"] {
                Action::Update
            } else if e.phase == Phase::Running && old.launch == new.launch && same_kind(&old.demand, &new.demand) {
                Action::Resize
            } else {
                Action::Replace
            };
            let mut c = change(&w.name, action, fields.join(", "));
            if action == Action::Unchanged {
                c.phase = Some(e.phase);
                c.cpus = e.cpus.clone();
                c.reason = e.reason.clone();
            }
            out.push(c);
        }
        if predict {
            // As `apply` proceeds: removals and replacements free their CPUs first, resizes are
            // admitted next, then the deploys in spec order; pending workloads are retried last.
            let freed: Vec<&str> = out
                .iter()
                .filter(|c| matches!(c.action, Action::Remove | Action::Replace | Action::Resize | Action::Update))
                .map(|c| c.name.as_str())
                .collect();
            let mut planner = self.planner(&freed);
            let order = [Action::Resize, Action::Replace, Action::Deploy, Action::Update];
            let mut predicted: HashMap<String, (Phase, Vec<u32>, Option<String>, Option<Defrag>)> = HashMap::new();
            for pass in [&order[..1], &order[1..]] {
                for w in &spec.workloads {
                    let Some(c) = out.iter().find(|c| c.name == w.name) else { continue };
                    if !pass.contains(&c.action) {
                        continue;
                    }
                    let w = normalized(spec, w);
                    let r = match planner.admit(&w) {
                        Ok(p) => (Phase::Running, p.cpus.clone(), None, None),
                        Err(r) => (Phase::Pending, Vec::new(), Some(r.reason.clone()), r.defrag.clone()),
                    };
                    predicted.insert(w.name.clone(), r);
                }
            }
            for c in &mut out {
                if let Some((phase, cpus, reason, defrag)) = predicted.remove(&c.name) {
                    c.phase = Some(phase);
                    c.cpus = cpus;
                    c.reason = reason;
                    c.defrag = defrag;
                }
            }
        }
        Ok(out)
    }

    /// Declarative apply: makes the node run exactly `spec`'s workloads. Workloads not in the spec
    /// are removed, new ones deployed (each admitted on its own: pending when it does not fit),
    /// changed ones resized in place (same launch) or replaced; the others are not touched at all
    /// (same processes, cgroup files and thread attributes). A resize that does not fit fails the
    /// apply at that workload (the changes before it stay; each one is its own transaction).
    pub fn apply(&mut self, spec: &Spec) -> Result<Vec<Change>> {
        let mut changes = self.diff(spec, false)?;
        let by_name: HashMap<&str, &Workload> = spec.workloads.iter().map(|w| (w.name.as_str(), w)).collect();
        // Removals first: their CPUs and bandwidth go to what follows.
        for c in changes.iter().filter(|c| matches!(c.action, Action::Remove | Action::Replace)) {
            self.remove_one(&c.name)?;
        }
        for c in changes.iter().filter(|c| c.action == Action::Resize) {
            let w = normalized(spec, by_name[c.name.as_str()]);
            self.resize_to(&c.name, w)?;
        }
        for c in changes.iter().filter(|c| c.action == Action::Update) {
            let w = normalized(spec, by_name[c.name.as_str()]);
            let generation = self.desired.next_generation;
            self.desired.next_generation += 1;
            let e = self.entry_mut(&c.name);
            e.workload = w;
            e.generation = generation;
            self.save()?;
            self.event("updated", Some(&c.name), format!("{} changed in the desired state", c.detail));
        }
        for w in &spec.workloads {
            let Some(c) = changes.iter().find(|c| c.name == w.name) else { continue };
            if !matches!(c.action, Action::Deploy | Action::Replace) {
                continue;
            }
            let generation = self.desired.next_generation;
            self.desired.next_generation += 1;
            self.desired.workloads.push(Entry::new(normalized(spec, w), generation));
            self.try_run(&w.name)?;
        }
        self.retry_pending()?;
        for c in &mut changes {
            if let Some(e) = self.desired.workloads.iter().find(|e| e.workload.name == c.name) {
                c.phase = Some(e.phase);
                c.cpus = e.cpus.clone();
                c.reason = e.reason.clone();
                c.defrag = e.defrag.clone();
            }
        }
        Ok(changes)
    }

    /// The node's desired state as a spec (its node section and flavors), to resolve flavors.
    fn desired_spec(&self) -> Spec {
        Spec { node: self.desired.node.clone(), flavors: self.desired.flavors.clone(), ..Spec::default() }
    }

    fn outcome(&self, name: &str) -> Outcome {
        let e = self.desired.workloads.iter().find(|e| e.workload.name == name).expect("entry exists");
        Outcome {
            name: name.into(),
            phase: e.phase,
            generation: e.generation,
            cpus: e.cpus.clone(),
            reason: e.reason.clone(),
            defrag: e.defrag.clone(),
        }
    }

    fn entry_mut(&mut self, name: &str) -> &mut Entry {
        self.desired.workloads.iter_mut().find(|e| e.workload.name == name).expect("entry exists")
    }

    /// Admits and deploys one pending entry; leaves it pending with the reason when it does not fit.
    fn try_run(&mut self, name: &str) -> Result<()> {
        let w = self.entry_mut(name).workload.clone();
        match self.admit(&w, &[name]) {
            Err((reason, defrag)) => self.set_pending(name, reason, defrag),
            Ok((plan, setup)) => {
                // Desired first: a crash during the host's deploy re-deploys it on restart.
                {
                    let e = self.entry_mut(name);
                    e.phase = Phase::Running;
                    e.cpus = plan.cpus.clone();
                    e.setup = Some(setup.clone());
                    e.reason = None;
                    e.defrag = None;
                    e.exit = None;
                    e.restart_at = None;
                    e.started_at = Some(now());
                    e.in_force = in_force_of(&w, &plan);
                    e.admitted_runtime = runtime_of(&plan);
                }
                self.loops.remove(name);
                self.save()?;
                match self.host_deploy(&setup) {
                    Ok(rec) => {
                        let pids: Vec<String> = rec.pids.iter().map(|p| p.pid.to_string()).collect();
                        self.event("admitted", Some(name), format!("on CPUs [{}], {}", CpuList::from_cpus(plan.cpus.iter().copied()), describe(&plan)));
                        self.event("started", Some(name), format!("pids [{}]", pids.join(", ")));
                        Ok(())
                    }
                    Err(rtslice_host::HostError::Rejected(reason)) => self.set_pending(name, reason, None),
                    Err(e) => {
                        self.set_pending(name, format!("the host refused it: {e}"), None)?;
                        self.event("failed", Some(name), e.to_string());
                        Ok(())
                    }
                }
            }
        }
    }

    fn set_pending(&mut self, name: &str, reason: String, defrag: Option<Defrag>) -> Result<()> {
        {
            let e = self.entry_mut(name);
            let changed = e.phase != Phase::Pending || e.reason.as_deref() != Some(reason.as_str());
            e.phase = Phase::Pending;
            e.cpus.clear();
            e.setup = None;
            e.started_at = None;
            e.restart_at = None;
            e.in_force = None;
            e.reason = Some(reason.clone());
            e.defrag = defrag;
            if !changed {
                return self.save();
            }
        }
        self.event("pending", Some(name), reason);
        self.save()
    }

    /// Retries the pending workloads in arrival order (after capacity freed up).
    pub(crate) fn retry_pending(&mut self) -> Result<()> {
        let pending: Vec<String> =
            self.desired.workloads.iter().filter(|e| e.phase == Phase::Pending).map(|e| e.workload.name.clone()).collect();
        for n in pending {
            self.try_run(&n)?;
        }
        Ok(())
    }

    /// Removes a workload (running or pending); its capacity goes to pending workloads that fit now.
    pub fn remove(&mut self, name: &str) -> Result<serde_json::Value> {
        let removed = self.remove_one(name)?;
        self.retry_pending()?;
        Ok(serde_json::json!({ "name": name, "removed": removed }))
    }

    fn remove_one(&mut self, name: &str) -> Result<Option<rtslice_host::Removed>> {
        let Some(i) = self.desired.workloads.iter().position(|e| e.workload.name == name) else {
            return Err(NodeError::NotFound(format!("no workload named {name}")));
        };
        let running = self.desired.workloads[i].phase.holds();
        let removed = if running { Some(self.host_remove(name)?) } else { None };
        self.desired.workloads.remove(i);
        self.save()?;
        self.event("removed", Some(name), match &removed {
            Some(r) => format!("stopped ({} terminated, {} killed), {} changes undone", r.terminated, r.killed, r.undone),
            None => "was pending".into(),
        });
        self.drift_seen.remove(name);
        Ok(removed)
    }

    /// Resizes a running workload in place, through admission against the others.
    pub fn resize(&mut self, name: &str, req: &Resize) -> Result<Outcome> {
        let Some(e) = self.desired.workloads.iter().find(|e| e.workload.name == name) else {
            return Err(NodeError::NotFound(format!("no workload named {name}")));
        };
        if e.generation != req.generation {
            return Err(NodeError::Stale(format!(
                "workload {name} is at generation {}, the request was made from {}: read it again and retry",
                e.generation, req.generation
            )));
        }
        if e.phase != Phase::Running {
            return Err(NodeError::Conflict(format!("workload {name} is {}, not running: remove it and deploy it anew", phase_word(e.phase))));
        }
        let mut w = e.workload.clone();
        // An SLO workload's or an adapting one's reservation is the one in force.
        let demand = self
            .demand_in_force(e)
            .ok_or_else(|| NodeError::Invalid(format!("workload {name} names a flavor the node does not define")))?;
        w.demand = Some(resized(demand, req)?);
        w.flavor = None;
        w.hints = Default::default();
        self.resize_to(name, w)?;
        self.retry_pending()?;
        Ok(self.outcome(name))
    }

    /// Changes a running workload in place to `w` (the same launch): admission against the others,
    /// then the host's resize transaction (rolled back whole on failure).
    fn resize_to(&mut self, name: &str, w: Workload) -> Result<()> {
        // In place means on the CPUs it holds when they still fit (a new runtime, other rules); the
        // planner places it anew only when they do not, or when the demand names other CPUs or
        // another count.
        let held = self.entry_mut(name).cpus.clone();
        let same_count = match &w.demand {
            Some(Demand::Reservation(r)) => r.cpus.is_none() && r.count.unwrap_or(1) as usize == held.len(),
            Some(Demand::Dedicated(d)) => d.cpus.is_none() && d.count.is_some_and(|c| c as usize == held.len()),
            _ => false,
        };
        let pinned = same_count.then(|| {
            let mut p = w.clone();
            p.demand = p.demand.take().map(|d| d.pinned_to(&held));
            p
        });
        let admitted = match pinned.map(|p| self.admit(&p, &[name])) {
            Some(Ok(a)) => Ok(a),
            _ => self.admit(&w, &[name]),
        };
        let (plan, setup) = admitted.map_err(|(reason, _)| NodeError::Unfit(reason))?;
        let (in_force, admitted_runtime) = (in_force_of(&w, &plan), runtime_of(&plan));
        self.commit_resize(name, &plan, setup, |e| {
            e.in_force = in_force;
            e.admitted_runtime = admitted_runtime;
            e.workload = w;
        })?;
        self.loops.remove(name);
        self.event("resized", Some(name), format!("now on CPUs [{}], {}", CpuList::from_cpus(plan.cpus.iter().copied()), describe(&plan)));
        Ok(())
    }

    /// The host's resize of an admitted change (rolled back whole there on failure), then the entry:
    /// a new generation, the CPUs and setup it now holds, and what `update` changes; saved.
    fn commit_resize(&mut self, name: &str, plan: &WorkloadPlan, setup: Setup, update: impl FnOnce(&mut Entry)) -> Result<()> {
        match self.host_resize(&setup) {
            Ok(_) => {}
            Err(rtslice_host::HostError::Rejected(r)) => return Err(NodeError::Unfit(r)),
            Err(e) => return Err(e.into()),
        }
        let generation = self.desired.next_generation;
        self.desired.next_generation += 1;
        let e = self.entry_mut(name);
        e.generation = generation;
        e.cpus = plan.cpus.clone();
        e.setup = Some(setup);
        update(e);
        self.save()
    }

    /// The closed loop, given the telemetry's latest reading: every adapting workload whose interval
    /// has passed gets its decision ([`crate::adapt::decide`]) and, when it asks for another runtime,
    /// a resize through admission and the host's transaction. A grow that does not fit whole takes
    /// the largest runtime that does; a refused or failed change leaves the reservation as it was.
    pub fn adapt(&mut self, sample: &rtslice_metrics::NodeSample) {
        let names: Vec<String> = self
            .desired
            .workloads
            .iter()
            .filter(|e| e.phase == Phase::Running && e.workload.adapt.is_some())
            .map(|e| e.workload.name.clone())
            .collect();
        self.loops.retain(|n, _| names.contains(n));
        for name in names {
            let Some(ws) = sample.workloads.iter().find(|w| w.name == name) else {
                self.loops.entry(name.clone()).or_default().last = Some("no telemetry reading of it yet".into());
                continue;
            };
            let Some(used_s) = ws.used_s else {
                self.loops.entry(name.clone()).or_default().last =
                    Some("no CPU reading in the last interval (no cgroup CPU accounting, no tracer, no live threads)".into());
                continue;
            };
            let stolen_s = sample.cpus.iter().filter(|c| ws.cpus.contains(&c.cpu)).map(|c| c.stolen_s).sum();
            let now = Reading { time: sample.time, used_s, jobs: ws.sli.ttis, misses: ws.sli.deadline_misses, throttled: ws.throttled, stolen_s };
            let run = self.loops.entry(name.clone()).or_default();
            let Some(since) = run.since else {
                run.since = Some(now);
                continue;
            };
            let Some((bounds, runtime, interval)) = self.loop_bounds(&name) else { continue };
            if now.time - since.time < interval.as_secs_f64() - 0.05 {
                continue;
            }
            let d = |a: Option<u64>, b: Option<u64>| a.zip(b).and_then(|(a, b)| a.checked_sub(b));
            let obs = crate::adapt::Observation {
                dt_s: now.time - since.time,
                used_s: (now.used_s - since.used_s).max(0.0),
                jobs: d(now.jobs, since.jobs),
                misses: d(now.misses, since.misses),
                throttled: d(now.throttled, since.throttled),
                stolen_s: (now.stolen_s - since.stolen_s).max(0.0),
            };
            let run = self.loops.get_mut(&name).expect("inserted above");
            run.since = Some(now);
            let decision = crate::adapt::decide(runtime, &bounds, &obs, &mut run.state);
            run.last = Some(match decision.runtime() {
                None => format!("kept {} µs: {}", runtime.as_micros(), decision.why()),
                Some(to) => format!("{} µs → {} µs: {}", runtime.as_micros(), to.as_micros(), decision.why()),
            });
            let Some(to) = decision.runtime() else { continue };
            match self.adapt_to(&name, runtime, to) {
                Ok(Some(got)) => {
                    let how = if got > runtime { "grown" } else { "shrunk" };
                    let partly = if got != to { format!(" (asked {} µs; the rest does not fit)", to.as_micros()) } else { String::new() };
                    self.event("adapted", Some(&name), format!(
                        "{how} {} → {} µs every {} µs{partly}: {}",
                        runtime.as_micros(), got.as_micros(), bounds.period.as_micros(), decision.why()
                    ));
                }
                Ok(None) => self.event("adapted", Some(&name), format!(
                    "wanted {} µs, nothing more fits on its CPUs: kept {} µs ({})", to.as_micros(), runtime.as_micros(), decision.why()
                )),
                Err(e) => self.event("failed", Some(&name), format!("adapting to {} µs: {e}; kept {} µs", to.as_micros(), runtime.as_micros())),
            }
        }
    }

    /// An adapting workload's bounds, its runtime in force and its interval.
    fn loop_bounds(&self, name: &str) -> Option<(crate::adapt::Bounds, Duration, Duration)> {
        let e = self.desired.workloads.iter().find(|e| e.workload.name == name)?;
        let a = e.workload.adapt?;
        let Some(Demand::Reservation(r)) = self.demand_in_force(e) else { return None };
        let period = r.period.unwrap_or(self.desired.node.default_period);
        let cap = self.cap();
        // The guaranteed minimum defaults to what the workload was admitted with.
        let min = a.min.or(e.admitted_runtime).unwrap_or(r.runtime);
        let max = a.max.unwrap_or(period.mul_f64(cap.clamp(0.0, 1.0))).max(min);
        let target = match e.workload.slo {
            Some(rtslice_spec::Slo::DeadlineMissRatio(t)) => Some(t),
            _ => None,
        };
        let bounds = crate::adapt::Bounds { min, max, period, cpus: e.cpus.len().max(1) as u32, target_miss_ratio: target };
        Some((bounds, r.runtime, a.interval))
    }

    /// Resizes an adapting workload's runtime in place to `to`, or (growing) to the largest runtime
    /// between `from` and `to` that admission takes. `Ok(None)`: nothing above `from` fits.
    fn adapt_to(&mut self, name: &str, from: Duration, to: Duration) -> Result<Option<Duration>> {
        let e = self.desired.workloads.iter().find(|e| e.workload.name == name).ok_or_else(|| NodeError::NotFound(name.into()))?;
        let Some(Demand::Reservation(mut r)) = self.demand_in_force(e) else {
            return Err(NodeError::Invalid(format!("workload {name} has no reservation to adapt")));
        };
        r.cpus = Some(e.cpus.clone());
        r.count = None;
        // The loop decides from measurements, not from the profile: admission must not size or
        // check the runtime against the SLO's model again. Its reservation keeps reclaiming as sized.
        let mut w = e.workload.clone();
        w.slo = None;
        w.profile = None;
        w.flavor = None;
        w.hints = Default::default();
        let with = |runtime: Duration| {
            let mut w = w.clone();
            w.demand = Some(Demand::Reservation(rtslice_spec::Reservation { runtime, ..r.clone() }));
            w
        };
        let mut got = to;
        let mut admitted = self.admit(&with(to), &[name]);
        if admitted.is_err() && to > from {
            // The largest runtime that fits, on the loop's grid.
            let (mut lo, mut hi) = (from, to);
            admitted = Err((String::new(), None));
            while hi > lo + crate::adapt::STEP {
                let mid = crate::adapt::ceil_step(lo + (hi - lo) / 2);
                let mid = if mid >= hi { hi - crate::adapt::STEP } else { mid };
                match self.admit(&with(mid), &[name]) {
                    Ok(a) => {
                        lo = mid;
                        got = mid;
                        admitted = Ok(a);
                    }
                    Err(_) => hi = mid,
                }
            }
            if admitted.is_err() {
                return Ok(None);
            }
        }
        let (plan, setup) = admitted.map_err(|(reason, _)| NodeError::Unfit(reason))?;
        let in_force = with(got).demand;
        self.commit_resize(name, &plan, setup, |e| e.in_force = in_force)?;
        if got < from {
            // Bandwidth freed: a pending workload may fit now.
            self.retry_pending()?;
        }
        Ok(Some(got))
    }

    /// Brings the host to the desired state: deploys what should run and does not, removes what runs
    /// and should not, resizes what differs (after a crash between the host's change and ours).
    fn reconcile(&mut self) -> Result<()> {
        let deployed = self.host.names();
        for n in &deployed {
            if !self.desired.workloads.iter().any(|e| &e.workload.name == n && e.phase.holds()) {
                self.host_remove(n)?;
                self.event("recovered", Some(n), "deployed but not desired: removed".into());
            }
        }
        let running: Vec<(String, Option<Setup>)> = self
            .desired
            .workloads
            .iter()
            .filter(|e| e.phase.holds())
            .map(|e| (e.workload.name.clone(), e.setup.clone()))
            .collect();
        for (n, setup) in running {
            match self.host.record(&n)? {
                Some(rec) => {
                    if let Some(s) = setup.filter(|s| s != &rec.setup) {
                        match self.host_resize(&s) {
                            Ok(_) => self.event("recovered", Some(&n), "resized back to the desired reservation".into()),
                            Err(e) => self.event("failed", Some(&n), format!("cannot bring it to the desired reservation: {e}")),
                        }
                    }
                }
                None => {
                    // Rolled back by the host's recovery, or gone with a reboot: deploy it again.
                    let e = self.entry_mut(&n);
                    e.phase = Phase::Pending;
                    self.event("recovered", Some(&n), "desired but not deployed: deploying it again".into());
                    self.try_run(&n)?;
                }
            }
        }
        self.save()?;
        self.retry_pending()
    }

    /// The daemon's watcher, every second: a workload whose launched process exited is logged
    /// (`exited`) and, as its restart policy says, started again after its backoff (`restarted`);
    /// every few seconds the running workloads are compared with their journals (`drift` when that
    /// changes).
    pub fn check_exits(&mut self) {
        let t = now();
        let names: Vec<(String, Phase)> = self.desired.workloads.iter().map(|e| (e.workload.name.clone(), e.phase)).collect();
        for (n, phase) in names {
            let result = match phase {
                Phase::Running => self.notice_exit(&n, t),
                Phase::Exited => self.restart_if_due(&n, t),
                Phase::Pending => Ok(()),
            };
            if let Err(e) = result {
                self.event("failed", Some(&n), format!("supervising it: {e}"));
            }
        }
        if self.last_drift_check.is_none_or(|at| at.elapsed() >= DRIFT_CHECK_EVERY) {
            self.last_drift_check = Some(Instant::now());
            self.check_drift();
        }
    }

    fn notice_exit(&mut self, name: &str, t: f64) -> Result<()> {
        let Some(rec) = self.host.record(name)? else { return Ok(()) };
        let launched = !matches!(rec.setup.workloads.first().map(|w| &w.launch), None | Some(rtslice_host::Launch::None) | Some(rtslice_host::Launch::Attach { .. }));
        let procs: Vec<_> = rec.workloads.iter().flat_map(|w| w.pids.iter().copied()).collect();
        for p in &procs {
            reap(p.pid, &mut self.exits);
        }
        if !launched || procs.is_empty() || procs.iter().any(|p| p.alive()) {
            return Ok(());
        }
        // Reaped again now that every one is gone: a process that became a zombie between the
        // reap above and the liveness check is reaped here, its status known (a TCG guest once
        // logged its first crash as "status unknown" so).
        for p in &procs {
            reap(p.pid, &mut self.exits);
        }
        // Every launched process is gone: the workload exited. Its status is known when the daemon
        // was its parent (reaped); after a daemon restart it is not, and counts as a failure.
        let statuses: Vec<Option<ExitStatus>> = procs.iter().map(|p| self.exits.remove(&p.pid)).collect();
        let success = statuses.iter().all(|s| *s == Some(ExitStatus::Code(0)));
        let how = procs
            .iter()
            .zip(&statuses)
            .map(|(p, s)| match s {
                Some(ExitStatus::Code(c)) => format!("pid {} exited with status {c}", p.pid),
                Some(ExitStatus::Signal(sig)) => format!("pid {} was killed by signal {sig}", p.pid),
                None => format!("pid {} exited (status unknown: not reaped by this daemon)", p.pid),
            })
            .collect::<Vec<_>>()
            .join(", ");
        let e = self.entry_mut(name);
        let policy = e.workload.restart;
        let ran = e.started_at.map_or(0.0, |s| t - s);
        if ran > policy.max_backoff.as_secs_f64() {
            e.restarts = 0;
        }
        let restart = match policy.policy {
            RestartPolicy::Never => false,
            RestartPolicy::OnFailure => !success,
            RestartPolicy::Always => true,
        };
        e.phase = Phase::Exited;
        e.exit = Some(how.clone());
        let message = if restart {
            e.restarts += 1;
            let delay = policy.delay(e.restarts);
            e.restart_at = Some(t + delay.as_secs_f64());
            format!("{how}; restart {} in {:.1} s (policy {:?})", e.restarts, delay.as_secs_f64(), policy.policy)
        } else {
            e.restart_at = None;
            format!("{how}; not restarted (policy {:?}); it keeps its CPUs until removed", policy.policy)
        };
        self.save()?;
        self.event("exited", Some(name), message);
        Ok(())
    }

    /// Starts an exited workload again when its backoff is over: its segment is removed (leftover
    /// processes stopped, cgroups undone) and deployed anew with the same setup, on the same CPUs.
    fn restart_if_due(&mut self, name: &str, t: f64) -> Result<()> {
        let e = self.entry_mut(name);
        let (Some(at), Some(setup)) = (e.restart_at, e.setup.clone()) else { return Ok(()) };
        if at > t {
            return Ok(());
        }
        let n = e.restarts;
        if self.host.record(name)?.is_some() {
            self.host_remove(name)?;
        }
        match self.host_deploy(&setup) {
            Ok(rec) => {
                let e = self.entry_mut(name);
                e.phase = Phase::Running;
                e.restart_at = None;
                e.started_at = Some(now());
                self.save()?;
                let pids: Vec<String> = rec.pids.iter().map(|p| p.pid.to_string()).collect();
                self.event("restarted", Some(name), format!("restart {n}: pids [{}]", pids.join(", ")));
                Ok(())
            }
            Err(err) => {
                self.set_pending(name, format!("its restart failed: {err}"), None)?;
                self.event("failed", Some(name), format!("restart {n}: {err}"));
                self.retry_pending()
            }
        }
    }

    fn check_drift(&mut self) {
        let t = now();
        let names: Vec<String> = self.desired.workloads.iter().filter(|e| e.phase == Phase::Running).map(|e| e.workload.name.clone()).collect();
        self.drift_seen.retain(|n, _| names.contains(n));
        // A workload just started is still naming its threads and the agent is still giving the
        // late ones their rules: not drift (it showed as "drift detected" then "no drift any more"
        // seconds after every deploy).
        let settling: Vec<String> = self
            .desired
            .workloads
            .iter()
            .filter(|e| e.started_at.is_some_and(|s| t - s < DRIFT_CHECK_EVERY.as_secs_f64()))
            .map(|e| e.workload.name.clone())
            .collect();
        let names: Vec<String> = names.into_iter().filter(|n| !settling.contains(n)).collect();
        for n in names {
            let Ok(st) = self.host.status(&n) else { continue };
            let now_drift: Vec<String> = st.drift.iter().map(|d| format!("{}: expected {}, found {}", d.what, d.expected, d.actual)).collect();
            let key = now_drift.join("; ");
            if self.drift_seen.get(&n).map_or(!key.is_empty(), |k| *k != key) {
                self.drift_seen.insert(n.clone(), key.clone());
                let message = if key.is_empty() { "no drift any more".to_string() } else { format!("drift detected: {key}") };
                self.event("drift", Some(&n), message);
            }
        }
    }

    /// `GET /v1/workloads`.
    pub fn list(&self) -> Vec<serde_json::Value> {
        self.desired.workloads.iter().map(|e| self.view(e, false)).collect()
    }

    /// `GET /v1/workloads/{name}`.
    pub fn get(&self, name: &str) -> Result<serde_json::Value> {
        let e = self
            .desired
            .workloads
            .iter()
            .find(|e| e.workload.name == name)
            .ok_or_else(|| NodeError::NotFound(format!("no workload named {name}")))?;
        Ok(self.view(e, true))
    }

    fn view(&self, e: &Entry, detail: bool) -> serde_json::Value {
        let mut v = serde_json::json!({
            "name": e.workload.name,
            "phase": e.phase,
            "generation": e.generation,
            "cpus": CpuList::from_cpus(e.cpus.iter().copied()).to_string(),
            "demand": e.workload.demand,
        });
        if let Some(d) = &e.in_force {
            // Sized for its SLO, or set by the closed loop: what the host holds for it now.
            v["inForce"] = serde_json::to_value(d).unwrap_or_default();
        }
        if let Some(a) = &e.workload.adapt {
            v["adapt"] = serde_json::to_value(a).unwrap_or_default();
            if let Some(last) = self.loops.get(&e.workload.name).and_then(|l| l.last.clone()) {
                v["adaptLast"] = last.into();
            }
        }
        if let Some(r) = &e.reason {
            v["reason"] = r.clone().into();
            v["defrag"] = serde_json::to_value(&e.defrag).unwrap_or_default();
        }
        if let Some(x) = &e.exit {
            v["exit"] = x.clone().into();
        }
        if e.restarts > 0 {
            v["restarts"] = e.restarts.into();
        }
        if let Some(at) = e.restart_at {
            v["restartAt"] = at.into();
        }
        if !e.workload.restart.is_default() {
            v["restart"] = serde_json::to_value(e.workload.restart).unwrap_or_default();
        }
        if e.phase.holds() {
            if let Ok(st) = self.host.status(&e.workload.name) {
                let w = st.workloads.first();
                v["pids"] = serde_json::to_value(w.map(|w| w.pids.clone()).unwrap_or_default()).unwrap_or_default();
                v["drift"] = serde_json::to_value(&st.drift).unwrap_or_default();
                if detail {
                    v["threads"] = serde_json::to_value(w.map(|w| w.threads.clone()).unwrap_or_default()).unwrap_or_default();
                    v["cgroup"] = serde_json::to_value(w.map(|w| w.cgroup.clone())).unwrap_or_default();
                    v["workload"] = serde_json::to_value(&e.workload).unwrap_or_default();
                }
            }
        }
        v
    }

    /// `GET /v1/node`: the O2ims-style inventory.
    pub fn inventory(&self) -> serde_json::Value {
        let plan = self.planner(&[]).plan();
        let report = rtslice_host::doctor();
        let base = self.host.base();
        serde_json::json!({
            "name": self.desired.node.name,
            "cpus": base.online.to_string(),
            "isolated": report.isolated.to_string(),
            "housekeeping": CpuList::from_cpus(self.desired.node.housekeeping.iter().copied()).to_string(),
            "cap": plan.node.cap,
            "mechanism": base.mechanism,
            "partitions": base.partitions,
            "perCpu": plan.node.per_cpu,
            "workloads": { "running": self.desired.workloads.iter().filter(|e| e.phase == Phase::Running).count(),
                           "pending": self.desired.workloads.iter().filter(|e| e.phase == Phase::Pending).count(),
                           "exited": self.desired.workloads.iter().filter(|e| e.phase == Phase::Exited).count() },
            "warnings": base.warnings,
            "kernel": report.kernel,
            "preemption": report.preemption,
            "topology": report.topology,
            "findings": report.findings,
            // What admission plans from: `rtslice plan --json` gives the same as this_host.facts.
            "planningFacts": self.facts,
        })
    }

    /// The cgroup backend the node drives (the agent finds workloads' threads through it).
    pub fn backend(&self) -> rtslice_host::cgroup::Backend {
        self.host.facts().backend.clone()
    }

    /// Hands every deployed workload to the daemon's thread-rule agent, which from now on follows
    /// each operation (see the `agent` field).
    pub fn attach_agent(&mut self, agent: std::sync::Arc<std::sync::Mutex<rtslice_agent::Agent>>) -> Result<()> {
        {
            let mut a = agent.lock().unwrap_or_else(|p| p.into_inner());
            for rec in self.host.records()? {
                a.add(&rec).map_err(|e| NodeError::State(format!("thread rules of {:?}: {e}", rec.workloads.iter().map(|w| &w.name).collect::<Vec<_>>())))?;
            }
        }
        self.agent = Some(agent);
        Ok(())
    }

    fn agent_forget(&self, name: &str) {
        if let Some(a) = &self.agent {
            a.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
        }
    }

    /// The agent follows `name` as the host now holds it (its record: cgroup and rules).
    fn agent_follow(&mut self, name: &str) {
        let Some(a) = self.agent.clone() else { return };
        if let Ok(Some(rec)) = self.host.record(name) {
            if let Err(e) = a.lock().unwrap_or_else(|p| p.into_inner()).add(&rec) {
                self.event("failed", Some(name), format!("threads born later will not get their rules: {e}"));
            }
        }
    }

    fn host_deploy(&mut self, setup: &Setup) -> std::result::Result<rtslice_host::WorkloadRecord, rtslice_host::HostError> {
        let r = self.host.deploy(setup);
        if let Ok(rec) = &r {
            let name = rec.name.clone();
            self.agent_follow(&name);
        }
        r
    }

    fn host_remove(&mut self, name: &str) -> std::result::Result<rtslice_host::Removed, rtslice_host::HostError> {
        self.agent_forget(name);
        self.host.remove(name)
    }

    /// Resized (or rolled back to what it was): the agent follows it as it is afterwards.
    fn host_resize(&mut self, setup: &Setup) -> std::result::Result<rtslice_host::WorkloadRecord, rtslice_host::HostError> {
        let names: Vec<String> = setup.workloads.iter().map(|w| w.name.clone()).collect();
        for n in &names {
            self.agent_forget(n);
        }
        let r = self.host.resize(setup);
        for n in &names {
            self.agent_follow(n);
        }
        r
    }

    /// Stops every workload and undoes the node (the daemon's `--reset-on-exit`, tests).
    pub fn reset(mut self) -> Result<()> {
        if let Some(a) = &self.agent {
            let mut a = a.lock().unwrap_or_else(|p| p.into_inner());
            for n in a.workload_names() {
                a.remove(&n);
            }
        }
        self.containers.release_all();
        self.host.reset()?;
        let _ = std::fs::remove_file(self.dir.join(DESIRED));
        Ok(())
    }
}

impl Entry {
    fn new(workload: Workload, generation: u64) -> Entry {
        Entry {
            workload,
            phase: Phase::Pending,
            generation,
            cpus: Vec::new(),
            setup: None,
            reason: None,
            defrag: None,
            started_at: None,
            exit: None,
            restarts: 0,
            restart_at: None,
            in_force: None,
            admitted_runtime: None,
        }
    }
}

/// Reaps `pid` if it is an exited child of this process (a workload this process launched: its exit
/// status is known then; after a daemon restart it is not, the new daemon is not its parent). Only
/// that pid: waiting for any child would take other children's statuses from their owners.
fn reap(pid: i32, exits: &mut HashMap<i32, ExitStatus>) {
    let Some(p) = rustix::process::Pid::from_raw(pid) else { return };
    if let Ok(Some((_, st))) = rustix::process::waitpid(Some(p), rustix::process::WaitOptions::NOHANG) {
        let status = match (st.exit_status(), st.terminating_signal()) {
            (Some(c), _) => ExitStatus::Code(c),
            (None, Some(s)) => ExitStatus::Signal(s),
            (None, None) => return,
        };
        exits.insert(pid, status);
    }
}

fn phase_word(p: Phase) -> &'static str {
    match p {
        Phase::Running => "running",
        Phase::Pending => "pending",
        Phase::Exited => "exited",
    }
}

/// A workload as the node keeps it: its flavor resolved into its demand and memory, so comparing
/// two versions compares what they ask for, whatever flavors the specs define.
fn normalized(spec: &Spec, w: &Workload) -> Workload {
    let mut n = w.clone();
    if n.flavor.is_some() {
        n.demand = spec.effective_demand(w);
        n.memory = spec.effective_memory(w);
        n.flavor = None;
        n.hints = Default::default();
    }
    n
}

/// The fields in which two versions of a workload differ.
fn differing_fields(a: &Workload, b: &Workload) -> Vec<&'static str> {
    let mut v = Vec::new();
    let mut check = |name: &'static str, same: bool| {
        if !same {
            v.push(name);
        }
    };
    check("launch", a.launch == b.launch);
    check("demand", a.demand == b.demand);
    check("memory", a.memory == b.memory);
    check("isolation", a.isolation == b.isolation);
    check("threads", a.threads == b.threads);
    check("irqs", a.irqs == b.irqs);
    check("net", a.net == b.net);
    check("restart", a.restart == b.restart);
    v
}

/// Whether a demand can change into the other in place (a reservation stays one, dedicated CPUs stay
/// dedicated: the host's resize keeps a group's kind).
fn same_kind(a: &Option<Demand>, b: &Option<Demand>) -> bool {
    matches!(
        (a, b),
        (Some(Demand::Reservation(_)), Some(Demand::Reservation(_))) | (Some(Demand::Dedicated(_)), Some(Demand::Dedicated(_)))
    )
}

fn read_desired(dir: &std::path::Path) -> Result<Option<Desired>> {
    let path = dir.join(DESIRED);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(NodeError::State(format!("cannot read {}: {e}", path.display()))),
    };
    let d: Desired = serde_json::from_str(&text)
        .map_err(|e| NodeError::State(format!("{} is corrupt ({e}); move it away to start with an empty node", path.display())))?;
    if d.format != DESIRED_FORMAT || d.version != DESIRED_VERSION {
        return Err(NodeError::State(format!(
            "{} has format {} version {}, this rtslice reads {DESIRED_FORMAT} version {DESIRED_VERSION}",
            path.display(),
            d.format,
            d.version
        )));
    }
    Ok(Some(d))
}


fn resized(d: Demand, req: &Resize) -> Result<Demand> {
    let dur = |s: &Option<String>, what: &str| -> Result<Option<Duration>> {
        s.as_deref()
            .map(|t| rtslice_spec::units::parse_duration(t).map_err(|e| NodeError::Invalid(format!("{what}: {e}"))))
            .transpose()
    };
    let cpus = req
        .cpus
        .as_deref()
        .map(|c| CpuList::parse(c).map(|l| l.iter().collect::<Vec<u32>>()).map_err(|e| NodeError::Invalid(format!("cpus: {e}"))))
        .transpose()?;
    match d {
        Demand::Reservation(mut r) => {
            if let Some(x) = dur(&req.runtime, "runtime")? {
                r.runtime = x;
            }
            if let Some(x) = dur(&req.period, "period")? {
                r.period = Some(x);
            }
            if let Some(c) = cpus {
                r.count = None;
                r.cpus = Some(c);
            } else if let Some(n) = req.count {
                r.count = Some(n);
                r.cpus = None;
            }
            Ok(Demand::Reservation(r))
        }
        Demand::Dedicated(mut x) => {
            if req.runtime.is_some() || req.period.is_some() {
                return Err(NodeError::Invalid("a dedicated workload has no runtime or period; give count or cpus".into()));
            }
            if let Some(c) = cpus {
                x.count = None;
                x.cpus = Some(c);
            } else if let Some(n) = req.count {
                x.count = Some(n);
                x.cpus = None;
            }
            Ok(Demand::Dedicated(x))
        }
        Demand::BestEffort(_) => Err(NodeError::Invalid("a best-effort workload has no reservation to resize".into())),
    }
}

/// The reservation in force for a workload the planner admitted as `plan`: the sized one of an SLO
/// workload without a reservation of its own (else its own demand applies: `None`).
fn in_force_of(w: &Workload, plan: &WorkloadPlan) -> Option<Demand> {
    if w.demand.is_some() || plan.sizing.is_none() {
        return None;
    }
    match &plan.allocation {
        rtslice_plan::Allocation::Reservation { reservation, .. } => Some(Demand::Reservation(rtslice_spec::Reservation {
            runtime: reservation.runtime,
            period: Some(reservation.period),
            count: None,
            cpus: Some(plan.cpus.clone()),
            reclaim: Some(plan.reclaim),
        })),
        _ => None,
    }
}

fn runtime_of(plan: &WorkloadPlan) -> Option<Duration> {
    match &plan.allocation {
        rtslice_plan::Allocation::Reservation { reservation, .. } => Some(reservation.runtime),
        _ => None,
    }
}

fn describe(p: &WorkloadPlan) -> String {
    match &p.allocation {
        rtslice_plan::Allocation::Reservation { reservation, .. } => {
            format!("{} µs every {} µs per CPU", reservation.runtime_us(), reservation.period_us())
        }
        rtslice_plan::Allocation::Dedicated { .. } => "dedicated".into(),
        rtslice_plan::Allocation::BestEffort { .. } => "best effort".into(),
    }
}
