//! Kubernetes containers, through the NRI plugin (k8s/nri, docs/kubernetes.md "Node side"):
//! admission at creation by the node's live planner (the same planner, against the spec workloads
//! and the other containers), in-place application at start (`rtslice_host::InPlace`: the
//! container's own cgroup, its threads and IRQs; its processes never move), release at stop or
//! removal. The admitted containers are kept in `<state>/containers.json`, so a restarted daemon
//! still counts them and can still release them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use rtslice_host::{CpuList, InPlace, IrqRule, WorkloadSetup};
use rtslice_spec::{Demand, SchedPolicy, Workload};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::api::{body_text, json_response, with_service, App};
use crate::error::{NodeError, Result};
use crate::service::Service;

const FILE: &str = "containers.json";

/// `POST /v1/containers`: what the NRI plugin knows at CreateContainer.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateContainer {
    /// The runtime's container id.
    pub id: String,
    pub namespace: String,
    pub pod: String,
    #[serde(default)]
    pub pod_uid: String,
    pub container: String,
    /// The pod's annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// One admitted container.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ContainerEntry {
    pub id: String,
    pub namespace: String,
    pub pod: String,
    pub pod_uid: String,
    pub container: String,
    /// Its workload, pinned to the CPUs it was given (what the planner counts).
    pub workload: Workload,
    pub cpus: Vec<u32>,
    pub setup: WorkloadSetup,
    #[serde(default)]
    pub irqs: Vec<IrqRule>,
    /// What the start applied (None before the start).
    #[serde(default)]
    pub applied: Option<InPlace>,
}

/// The admitted containers, by container id.
#[derive(Debug, Default)]
pub struct Containers {
    entries: BTreeMap<String, ContainerEntry>,
    path: PathBuf,
}

impl Containers {
    pub(crate) fn load(dir: &Path) -> Result<Containers> {
        let path = dir.join(FILE);
        let entries = match std::fs::read_to_string(&path) {
            Ok(t) => serde_json::from_str(&t)
                .map_err(|e| NodeError::State(format!("{} is corrupt ({e}); move it away (its containers are then not counted)", path.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(NodeError::State(format!("cannot read {}: {e}", path.display()))),
        };
        Ok(Containers { entries, path })
    }

    fn save(&self) -> Result<()> {
        let json = serde_json::to_vec_pretty(&self.entries).map_err(|e| NodeError::State(e.to_string()))?;
        let tmp = self.path.with_extension("json.tmp");
        std::fs::write(&tmp, json)
            .and_then(|_| std::fs::rename(&tmp, &self.path))
            .map_err(|e| NodeError::State(format!("cannot write {}: {e}", self.path.display())))
    }

    /// The containers' workloads as the planner counts them.
    pub(crate) fn pinned(&self) -> impl Iterator<Item = Workload> + '_ {
        self.entries.values().map(|e| e.workload.clone())
    }

    /// Undoes every applied container (the daemon's reset).
    pub(crate) fn release_all(&mut self) {
        for e in self.entries.values_mut() {
            if let Some(mut a) = e.applied.take() {
                for p in a.release() {
                    tracing::warn!(container = %e.id, "release: {p}");
                }
            }
        }
        self.entries.clear();
        let _ = std::fs::remove_file(&self.path);
    }

    /// Threads born or renamed since the start get their rule.
    pub(crate) fn rescan(&mut self) {
        for e in self.entries.values_mut() {
            if let Some(a) = e.applied.as_mut() {
                if let Err(err) = a.rescan() {
                    tracing::warn!(container = %e.id, "thread rules: {err}");
                }
            }
        }
    }
}

/// What cannot be done inside kubelet's cgroup tree, refused at admission (docs/kubernetes.md).
fn refuse_unsupported(w: &Workload) -> std::result::Result<(), String> {
    if w.isolation.shield {
        return Err("shield (an exclusive cpuset) is not possible inside kubelet's cgroups: the pod's and QoS class's cpusets are kubelet's and not exclusive; drop `shield`".into());
    }
    if let Some(r) = w.threads.iter().find(|r| matches!(r.policy, SchedPolicy::Deadline { .. })) {
        return Err(format!(
            "thread rule `{}`: SCHED_DEADLINE inside kubelet's cgroups is not possible: a pinned deadline thread needs an exclusive partition whose ancestors (kubepods, the QoS class, the pod) are partitions too; use fifo or rr under the reservation",
            r.pattern
        ));
    }
    if let Some(Demand::Reservation(_)) = &w.demand {
        rtslice_host::inplace::reservations_supported()?;
    }
    let rt_rule = w.threads.iter().find(|r| matches!(r.policy, SchedPolicy::Fifo { .. } | SchedPolicy::Rr { .. }));
    if let (Some(Demand::Dedicated(_)), Some(r), Ok(())) = (&w.demand, rt_rule, rtslice_host::inplace::reservations_supported()) {
        // With RT group scheduling a FIFO/RR thread needs its cgroup to hold an RT budget, and a
        // dedicated container has none (its CPUs are whole, not a bandwidth).
        return Err(format!(
            "thread rule `{}`: fifo/rr threads in a pod need an RT budget on this node (cgroup v1 with RT group scheduling); ask for a reservation (rtslice.io/reservation) instead of dedicated CPUs",
            r.pattern
        ));
    }
    Ok(())
}

impl Service {
    /// CreateContainer: `None` when no rtslice annotation applies to it.
    pub fn container_create(&mut self, req: &CreateContainer) -> Result<Option<&ContainerEntry>> {
        if self.containers.entries.contains_key(&req.id) {
            return Ok(self.containers.entries.get(&req.id));
        }
        let name = rtslice_spec::annotations::workload_name(&req.namespace, &req.pod, &req.container);
        let w = rtslice_spec::annotations::container_workload(&req.annotations, None, &req.container, &name, self.node_section())
            .map_err(|e| NodeError::Spec(e.iter().map(|x| x.to_string()).collect()))?;
        let Some(w) = w else { return Ok(None) };
        if let Err(reason) = refuse_unsupported(&w) {
            self.event("refused", Some(&name), reason.clone());
            return Err(NodeError::Unfit(reason));
        }
        let (plan, setup) = match self.admit(&w, &[]) {
            Ok(x) => x,
            Err((reason, _)) => {
                self.event("refused", Some(&name), format!("container {} of pod {}/{}: {reason}", req.container, req.namespace, req.pod));
                return Err(NodeError::Unfit(reason));
            }
        };
        let mut pinned = w.clone();
        pinned.demand = pinned.demand.take().map(|d| match d {
            Demand::Reservation(mut r) => {
                r.cpus = Some(plan.cpus.clone());
                r.count = None;
                Demand::Reservation(r)
            }
            Demand::Dedicated(mut x) => {
                x.cpus = Some(plan.cpus.clone());
                x.count = None;
                Demand::Dedicated(x)
            }
            other => other,
        });
        let ws = setup.workloads.into_iter().next().ok_or_else(|| NodeError::State("the plan gave no workload setup".into()))?;
        let entry = ContainerEntry {
            id: req.id.clone(),
            namespace: req.namespace.clone(),
            pod: req.pod.clone(),
            pod_uid: req.pod_uid.clone(),
            container: req.container.clone(),
            workload: pinned,
            cpus: plan.cpus.clone(),
            setup: ws,
            irqs: setup.irqs,
            applied: None,
        };
        self.containers.entries.insert(req.id.clone(), entry);
        self.containers.save()?;
        self.event("admitted", Some(&name), format!("container {} on CPUs [{}]", req.id, CpuList::from_cpus(plan.cpus.iter().copied())));
        Ok(self.containers.entries.get(&req.id))
    }

    /// StartContainer: applies the reservation, thread and IRQ rules to the cgroup of `pid`, in place.
    pub fn container_start(&mut self, id: &str, pid: i32) -> Result<serde_json::Value> {
        let e = self.containers.entries.get(id).ok_or_else(|| NodeError::NotFound(format!("no rtslice container {id}")))?;
        if e.applied.is_some() {
            return Ok(json!({"id": id, "started": true}));
        }
        let name = e.workload.name.clone();
        let applied = match InPlace::apply(&e.setup, &e.irqs, pid) {
            Ok(a) => a,
            Err(err) => {
                self.event("failed", Some(&name), format!("start of container {id}: {err}"));
                return Err(err.into());
            }
        };
        let view = json!({"id": id, "started": true, "cgroup": applied.cpu_dir, "threads": applied.threads.len()});
        self.containers.entries.get_mut(id).expect("present").applied = Some(applied);
        self.containers.save()?;
        self.event("started", Some(&name), format!("container {id} (pid {pid}): reservation and rules applied in place"));
        Ok(view)
    }

    /// Stop/RemoveContainer: undoes the start and returns the CPUs and bandwidth.
    pub fn container_release(&mut self, id: &str) -> Result<serde_json::Value> {
        let mut e = self.containers.entries.remove(id).ok_or_else(|| NodeError::NotFound(format!("no rtslice container {id}")))?;
        let problems = e.applied.as_mut().map(|a| a.release()).unwrap_or_default();
        self.containers.save()?;
        self.event(
            "removed",
            Some(&e.workload.name),
            if problems.is_empty() { format!("container {id} released") } else { format!("container {id} released; {}", problems.join("; ")) },
        );
        self.retry_pending()?;
        Ok(json!({"id": id, "released": true, "problems": problems}))
    }

    pub fn container_list(&self) -> Vec<&ContainerEntry> {
        self.containers.entries.values().collect()
    }

    /// `GET /v1/inventory`: what the node publishes for the scheduler extender (rtslice-cluster's
    /// `Inventory`, docs/kubernetes.md).
    pub fn cluster_inventory(&self) -> serde_json::Value {
        let plan = self.planner(&[]).plan();
        let mut pods: Vec<&str> = self.containers.entries.values().map(|e| e.pod_uid.as_str()).filter(|u| !u.is_empty()).collect();
        pods.sort();
        pods.dedup();
        let node = rtslice_spec::Node {
            name: plan.node.name.clone(),
            cpus: rtslice_spec::NodeCpus::List(plan.node.cpus.clone()),
            housekeeping: plan.node.housekeeping.clone(),
            cap: plan.node.cap,
            default_period: self.node_section().default_period,
            policy: plan.node.policy,
            topology: plan.node.topology.as_ref().map(|t| t.to_topology()),
            // Pod annotations carry no cache request, so the inventory need not carry the L3.
            ..Default::default()
        };
        json!({
            "version": 1,
            "node": node,
            "isolated": plan.node.isolcpus,
            "mechanism": self.mechanism(),
            "inventoryOnly": false,
            "perCpu": plan.node.per_cpu,
            "pods": pods,
        })
    }
}

type Shared = Arc<App>;

async fn create(State(app): State<Shared>, body: Body) -> Response {
    let text = match body_text(body).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let req: CreateContainer = match serde_json::from_str(&text) {
        Ok(r) => r,
        Err(e) => return NodeError::Invalid(format!("the container body: {e}")).into_response(),
    };
    match with_service(app, move |s| Ok(s.container_create(&req)?.map(|e| json!({"workload": e.workload.name, "cpus": CpuList::from_cpus(e.cpus.iter().copied()).to_string(), "mems": e.setup.mems.clone().unwrap_or_default()})))).await {
        Ok(Some(v)) => json_response(201, v),
        Ok(None) => (axum::http::StatusCode::NO_CONTENT, "").into_response(),
        Err(e) => e.into_response(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Start {
    pid: i32,
}

async fn start(State(app): State<Shared>, UrlPath(id): UrlPath<String>, body: Body) -> Response {
    let text = match body_text(body).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let req: Start = match serde_json::from_str(&text) {
        Ok(r) => r,
        Err(e) => return NodeError::Invalid(format!("the start body: {e}")).into_response(),
    };
    match with_service(app, move |s| s.container_start(&id, req.pid)).await {
        Ok(v) => json_response(200, v),
        Err(e) => e.into_response(),
    }
}

async fn release(State(app): State<Shared>, UrlPath(id): UrlPath<String>) -> Response {
    match with_service(app, move |s| s.container_release(&id)).await {
        Ok(v) => json_response(200, v),
        Err(e) => e.into_response(),
    }
}

async fn list(State(app): State<Shared>) -> Response {
    match with_service(app, |s| Ok(serde_json::to_value(s.container_list()).unwrap_or_default())).await {
        Ok(v) => json_response(200, json!({"containers": v})),
        Err(e) => e.into_response(),
    }
}

async fn inventory(State(app): State<Shared>) -> Response {
    match with_service(app, |s| Ok(s.cluster_inventory())).await {
        Ok(v) => json_response(200, v),
        Err(e) => e.into_response(),
    }
}

/// The container and inventory routes, added to the API's router.
pub(crate) fn routes(r: Router<Shared>) -> Router<Shared> {
    r.route("/v1/containers", get(list).post(create))
        .route("/v1/containers/{id}", axum::routing::delete(release))
        .route("/v1/containers/{id}/start", post(start))
        .route("/v1/inventory", get(inventory))
}
