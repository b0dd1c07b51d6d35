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
use rtslice_plan::{Defrag, NodeFacts, Planner, WorkloadPlan};
use rtslice_spec::{Demand, RestartPolicy, Spec, Workload};
use serde::{Deserialize, Serialize};

use crate::error::{NodeError, Result};

mod claims;
mod closed_loop;
mod containers;
mod versions;
mod resize;
mod supervise;
mod views;

use versions::{differing_fields, normalized, same_kind};
use views::phase_word;

const DESIRED: &str = rtslice_host::NODE_DESIRED_FILE;
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

impl Entry {
    /// The exclusive L3 ways it holds, as a request for exactly those (`cache.masks`): re-planning
    /// beside it never moves the ways a running workload's resctrl group has. `None` when it holds
    /// none (not running, no cache, or only a bandwidth ceiling in the default group's ways).
    pub(crate) fn held_cache(&self) -> Option<rtslice_spec::CacheRequest> {
        let c = self.setup.as_ref()?.workloads.first()?.cache.as_ref()?;
        (c.ways > 0).then(|| rtslice_spec::CacheRequest::Masks(c.l3.iter().map(|d| (d.id, d.mask)).collect()))
    }
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
    /// Which Kubernetes namespaces may ask for what (`rtslice daemon --access FILE`); the default,
    /// empty, allows none: pods and claims are refused until an admin names their namespace.
    pub access: rtslice_spec::access::Access,
    /// The resctrl root cache allocation plans from and writes (default `/sys/fs/resctrl`).
    pub resctrl: Option<PathBuf>,
    /// [`rtslice_host::NodeOptions::hrtick`] and [`rtslice_host::NodeOptions::fair_server_off`].
    pub hrtick: bool,
    pub fair_server_off: bool,
    /// OCI launches' own network namespace and seccomp filter (`rtslice daemon --netns --seccomp`).
    pub oci: OciDefaults,
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
    oci: OciDefaults,
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
    /// DRA claims prepared through the kubelet plugin (crate::claims).
    pub(crate) claims: crate::claims::Claims,
    /// Who may ask (crate::claims, crate::containers admission).
    pub(crate) access: rtslice_spec::access::Access,
    /// Released containers whose RT budget changes the kernel did not take back yet (container id,
    /// what is left), tried again on every rescan tick (`retry_unreturned`). Not persisted: a
    /// restarted daemon does not know them.
    pub(crate) unreturned: Vec<(String, rtslice_host::InPlace)>,
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
            resctrl: opts.resctrl.clone(),
            hrtick: opts.hrtick,
            fair_server_off: opts.fair_server_off,
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
        let facts = rtslice_host::facts::planning_facts_with(&host.resctrl())?;
        let containers = crate::containers::Containers::open(&dir)?;
        let claims = crate::claims::Claims::open(&dir)?;
        let mut svc = Service {
            host,
            launch_env: opts.launch_env.clone(),
            oci: opts.oci,
            desired,
            dir,
            events: VecDeque::new(),
            next_event: 1,
            facts,
            exits: HashMap::new(),
            drift_seen: HashMap::new(),
            last_drift_check: None,
            containers,
            claims,
            access: opts.access.clone(),
            unreturned: Vec::new(),
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
            if let Some(c) = e.held_cache() {
                w.cache = Some(c);
            }
            spec.workloads.push(w);
        }
        // Containers and claims by name too: the published DRA capacity leaves out what
        // kube-scheduler counts itself, and a claim's container is admitted in its claim's place.
        spec.workloads.extend(self.containers.pinned().chain(self.claims.pinned()).filter(|w| !except.contains(&w.name.as_str())));
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
        // SLO workloads are sized for exact enforcement, as `plan` and `apply` size them.
        Planner::new(&self.pinned_spec(except), &self.facts)
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
        // The kernel parameters under the node's mechanism, as the planner computes them (what a dry
        // run shows); the host writes them.
        whole.kernel = Some(rtslice_plan::kernel::kernel_plan(&whole, self.mechanism(), &self.host.facts().kernel_facts()));
        let mut setup = rtslice_host::setup_from_plan(&whole, self.oci).map_err(|e| (e.to_string(), None))?;
        add_launch_env(&mut setup, &self.launch_env);
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
            } else if e.phase == Phase::Running
                && old.launch == new.launch
                && same_kind(&old.demand, &new.demand)
                // The IRQs, queues and devices a workload holds stay with it through a resize (host
                // `Node::resize`).
                && old.irqs == new.irqs
                && old.net == new.net
                && old.devices == new.devices
            {
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
        self.claims.clear();
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

/// Gives every launched command of `setup` the daemon's environment (`RTSLICE_REPORT_SOCKET`),
/// unless the workload's own `env` sets the variable.
fn add_launch_env(setup: &mut rtslice_host::Setup, env: &[(String, String)]) {
    for w in &mut setup.workloads {
        if let rtslice_host::Launch::Command { env: own, .. } = &mut w.launch {
            for (k, v) in env {
                if !own.iter().any(|(x, _)| x == k) {
                    own.push((k.clone(), v.clone()));
                }
            }
        }
    }
}
