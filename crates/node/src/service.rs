//! The one writer: the node's desired state (the admitted and the pending workloads), admission
//! through the live planner, every change applied through the host's per-workload transactions,
//! and the event log.
//!
//! The desired state is persisted (`<state>/desired.json`, written before each host operation and
//! after it) so a restarted daemon knows what should run: [`Service::open`] compares it with what the
//! host node re-adopted and deploys, resizes or removes the difference (also after a reboot, when the
//! host's journal is gone and everything desired is deployed again).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rtslice_host::{CpuList, Mechanism, Node, NodeOptions, OciDefaults, Setup};
use rtslice_plan::{Defrag, NodeFacts, Planner, WorkloadPlan};
use rtslice_spec::{Demand, Spec, Workload};
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
    /// admitted | pending | started | removed | resized | refused | failed | exited | recovered | adopted | drift
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
}

pub struct Service {
    host: Node,
    desired: Desired,
    dir: PathBuf,
    events: VecDeque<Event>,
    next_event: u64,
    facts: NodeFacts,
    /// Kubernetes containers admitted through the NRI plugin (crate::containers).
    pub(crate) containers: crate::containers::Containers,
}

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
        let online = host.base().online.iter().collect();
        let isolcpus = host.facts().boot_isolated.iter().collect();
        let containers = crate::containers::Containers::load(&dir)?;
        let mut svc =
            Service { host, desired, dir, events: VecDeque::new(), next_event: 1, facts: NodeFacts { online, isolcpus }, containers };
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
    fn pinned_spec(&self, except: Option<&str>) -> Spec {
        let mut spec = Spec { node: self.desired.node.clone(), flavors: self.desired.flavors.clone(), ..Spec::default() };
        // The kernel's cap bounds the node's.
        let f = self.host.facts();
        let kernel_cap = if self.mechanism() == Mechanism::Deadline { f.rt_ratio - f.dl_server } else { f.rt_ratio };
        spec.node.cap = spec.node.cap.min(kernel_cap).max(0.0);
        for e in self.desired.workloads.iter().filter(|e| e.phase == Phase::Running) {
            if Some(e.workload.name.as_str()) == except {
                continue;
            }
            let mut w = e.workload.clone();
            if let Some(d) = spec.effective_demand(&w) {
                w.demand = Some(pin(d, &e.cpus));
                w.flavor = None;
            }
            spec.workloads.push(w);
        }
        spec.workloads.extend(self.containers.pinned());
        spec
    }

    pub(crate) fn planner(&self, except: Option<&str>) -> Planner {
        Planner::new(&self.pinned_spec(except), &self.facts)
    }

    /// Admission of one workload against what runs: its plan, or why not.
    pub(crate) fn admit(&self, w: &Workload, except: Option<&str>) -> std::result::Result<(WorkloadPlan, Setup), (String, Option<Defrag>)> {
        let mut planner = self.planner(except);
        let plan = match planner.admit(w) {
            Ok(p) => p.clone(),
            Err(r) => return Err((r.reason.clone(), r.defrag.clone())),
        };
        let mut whole = planner.plan();
        whole.workloads.retain(|x| x.name == w.name);
        whole.rejected.clear();
        let setup = rtslice_host::setup_from_plan(&whole, OciDefaults::default()).map_err(|e| (e.to_string(), None))?;
        Ok((plan, setup))
    }

    /// The placement a dry run would give each workload of `spec`, one after the other (as a deploy
    /// of the same body would), without changing anything.
    pub fn dry_run(&self, spec: &Spec) -> Vec<serde_json::Value> {
        let mut planner = self.planner(None);
        let mech = self.mechanism();
        spec.workloads
            .iter()
            .map(|w| match planner.admit(w) {
                Ok(p) => serde_json::json!({
                    "name": w.name, "fits": true, "cpus": p.cpus, "allocation": p.allocation,
                    "kernel": rtslice_plan::kernel::kernel_workload(p, mech),
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
            let entry =
                Entry { workload: w.clone(), phase: Phase::Pending, generation, cpus: Vec::new(), setup: None, reason: None, defrag: None };
            self.desired.workloads.push(entry);
            self.try_run(&w.name)?;
            out.push(self.outcome(&w.name));
        }
        Ok(out)
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
        match self.admit(&w, Some(name)) {
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
                }
                self.save()?;
                match self.host.deploy(&setup) {
                    Ok(rec) => {
                        let pids: Vec<String> = rec.pids.iter().map(|p| p.pid.to_string()).collect();
                        self.event(
                            "admitted",
                            Some(name),
                            format!("on CPUs [{}], {}; pids [{}]", CpuList::from_cpus(plan.cpus.iter().copied()), describe(&plan), pids.join(", ")),
                        );
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
        let Some(i) = self.desired.workloads.iter().position(|e| e.workload.name == name) else {
            return Err(NodeError::NotFound(format!("no workload named {name}")));
        };
        let running = self.desired.workloads[i].phase == Phase::Running;
        let removed = if running { Some(self.host.remove(name)?) } else { None };
        self.desired.workloads.remove(i);
        self.save()?;
        self.event("removed", Some(name), match &removed {
            Some(r) => format!("stopped ({} terminated, {} killed), {} changes undone", r.terminated, r.killed, r.undone),
            None => "was pending".into(),
        });
        self.retry_pending()?;
        Ok(serde_json::json!({ "name": name, "removed": removed }))
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
            return Err(NodeError::Conflict(format!("workload {name} is pending, not running: remove it and deploy it anew")));
        }
        let spec = self.pinned_spec(None);
        let mut w = e.workload.clone();
        let demand = spec.effective_demand(&w).ok_or_else(|| NodeError::Invalid(format!("workload {name} has no demand")))?;
        w.demand = Some(resized(demand, req)?);
        w.flavor = None;
        let (plan, setup) = self.admit(&w, Some(name)).map_err(|(reason, _)| NodeError::Unfit(reason))?;
        let generation = self.desired.next_generation;
        match self.host.resize(&setup) {
            Ok(_) => {}
            Err(rtslice_host::HostError::Rejected(r)) => return Err(NodeError::Unfit(r)),
            Err(e) => return Err(e.into()),
        }
        self.desired.next_generation += 1;
        {
            let e = self.entry_mut(name);
            e.workload = w;
            e.generation = generation;
            e.cpus = plan.cpus.clone();
            e.setup = Some(setup);
        }
        self.save()?;
        self.event("resized", Some(name), format!("now on CPUs [{}], {}", CpuList::from_cpus(plan.cpus.iter().copied()), describe(&plan)));
        self.retry_pending()?;
        Ok(self.outcome(name))
    }

    /// Brings the host to the desired state: deploys what should run and does not, removes what runs
    /// and should not, resizes what differs (after a crash between the host's change and ours).
    fn reconcile(&mut self) -> Result<()> {
        let deployed = self.host.names();
        for n in &deployed {
            if !self.desired.workloads.iter().any(|e| &e.workload.name == n && e.phase == Phase::Running) {
                self.host.remove(n)?;
                self.event("recovered", Some(n), "deployed but not desired: removed".into());
            }
        }
        let running: Vec<(String, Option<Setup>)> = self
            .desired
            .workloads
            .iter()
            .filter(|e| e.phase == Phase::Running)
            .map(|e| (e.workload.name.clone(), e.setup.clone()))
            .collect();
        for (n, setup) in running {
            match self.host.record(&n)? {
                Some(rec) => {
                    if let Some(s) = setup.filter(|s| s != &rec.setup) {
                        match self.host.resize(&s) {
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

    /// Watches the running workloads: launched processes that exited are reported once.
    pub fn check_exits(&mut self) {
        let names: Vec<String> = self.desired.workloads.iter().filter(|e| e.phase == Phase::Running).map(|e| e.workload.name.clone()).collect();
        for n in names {
            let Ok(Some(rec)) = self.host.record(&n) else { continue };
            let dead: Vec<i32> = rec.workloads.iter().flat_map(|w| w.pids.iter()).filter(|p| !p.alive()).map(|p| p.pid).collect();
            if !dead.is_empty() && !self.events.iter().any(|e| e.kind == "exited" && e.workload.as_deref() == Some(n.as_str())) {
                self.event("exited", Some(&n), format!("launched process(es) {dead:?} exited"));
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
        if let Some(r) = &e.reason {
            v["reason"] = r.clone().into();
            v["defrag"] = serde_json::to_value(&e.defrag).unwrap_or_default();
        }
        if e.phase == Phase::Running {
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
        let plan = self.planner(None).plan();
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
                           "pending": self.desired.workloads.iter().filter(|e| e.phase == Phase::Pending).count() },
            "warnings": base.warnings,
            "kernel": report.kernel,
            "preemption": report.preemption,
            "topology": report.topology,
            "findings": report.findings,
        })
    }

    /// Stops every workload and undoes the node (the daemon's `--reset-on-exit`, tests).
    pub fn reset(mut self) -> Result<()> {
        self.containers.release_all();
        self.host.reset()?;
        let _ = std::fs::remove_file(self.dir.join(DESIRED));
        Ok(())
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

/// A demand fixed to the CPUs the workload holds.
fn pin(d: Demand, cpus: &[u32]) -> Demand {
    match d {
        Demand::Reservation(mut r) => {
            r.cpus = Some(cpus.to_vec());
            r.count = None;
            Demand::Reservation(r)
        }
        Demand::Dedicated(mut x) => {
            x.cpus = Some(cpus.to_vec());
            x.count = None;
            Demand::Dedicated(x)
        }
        Demand::BestEffort(mut b) => {
            b.cpus = Some(cpus.to_vec());
            Demand::BestEffort(b)
        }
    }
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

fn describe(p: &WorkloadPlan) -> String {
    match &p.allocation {
        rtslice_plan::Allocation::Reservation { reservation, .. } => {
            format!("{} µs every {} µs per CPU", reservation.runtime_us(), reservation.period_us())
        }
        rtslice_plan::Allocation::Dedicated { .. } => "dedicated".into(),
        rtslice_plan::Allocation::BestEffort { .. } => "best effort".into(),
    }
}
