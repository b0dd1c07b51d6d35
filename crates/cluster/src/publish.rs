//! The node side of the cluster: keeping a node's `rtslice.io/inventory` annotation current, and the
//! inventory-only node (`rtslice daemon --inventory-only`).

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::watcher;
use kube::Client;
use rtslice_plan::{NodeFacts, Planner};
use rtslice_spec::{NodeCpus, Spec, Workload};
use serde_json::json;

use crate::extender::PodRequest;
use crate::{ClusterError, Inventory};

/// How often the published inventory is compared with the node's (a patch is sent only on change).
pub const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// Writes (or, with `None`, removes) the node's inventory annotation.
pub async fn annotate(client: &Client, node: &str, inventory: Option<&Inventory>) -> Result<(), ClusterError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let value = match inventory {
        Some(i) => json!(serde_json::to_string(i).map_err(|e| ClusterError::Inventory(e.to_string()))?),
        None => serde_json::Value::Null,
    };
    let patch = json!({"metadata": {"annotations": {crate::ANNOTATION: value}}});
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| ClusterError::Kube(format!("cannot annotate Node {node} (does it exist, may this service account patch nodes?): {e}")))?;
    Ok(())
}

/// Publishes what `current` returns whenever it changes, until `stop` completes; then removes the
/// annotation, so the extender stops sending rtslice pods to a node whose service is gone.
pub async fn publish_until<F, Fut>(client: Client, node: String, mut current: F, stop: impl Future<Output = ()>) -> Result<(), ClusterError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Inventory, ClusterError>>,
{
    let mut last: Option<Inventory> = None;
    tokio::pin!(stop);
    loop {
        match current().await {
            Ok(inv) if last.as_ref() != Some(&inv) => match annotate(&client, &node, Some(&inv)).await {
                Ok(()) => last = Some(inv),
                Err(e) => tracing::warn!("{e}"),
            },
            Ok(_) => {}
            Err(e) => tracing::warn!("reading the node's inventory: {e}"),
        }
        tokio::select! {
            _ = &mut stop => break,
            _ = tokio::time::sleep(PUBLISH_EVERY) => {}
        }
    }
    annotate(&client, &node, None).await
}

/// The inventory-only node's planner: the declared node and the pods bound to it, in arrival order,
/// each pinned where it was admitted (re-planning never moves one).
pub struct Simulated {
    node: rtslice_spec::Node,
    facts: NodeFacts,
    /// uid -> its containers' workloads, pinned.
    admitted: BTreeMap<String, Vec<Workload>>,
    /// Arrival order of `admitted`.
    order: Vec<String>,
    planner: Planner,
}

impl Simulated {
    pub fn new(node: rtslice_spec::Node) -> Result<Simulated, ClusterError> {
        let cpus = match &node.cpus {
            NodeCpus::List(l) => l.clone(),
            NodeCpus::Discovered => {
                return Err(ClusterError::Invalid(
                    "an inventory-only node declares its CPUs (node.cpus: 0-63), it does not discover this host's".into(),
                ))
            }
        };
        let facts = NodeFacts { online: cpus, isolcpus: Vec::new(), ..Default::default() };
        let planner = Planner::new(&Spec { node: node.clone(), ..Spec::default() }, &facts);
        Ok(Simulated { node, facts, admitted: BTreeMap::new(), order: Vec::new(), planner })
    }

    /// Admits every container of a pod or none; `Err` with the planner's reason.
    pub fn admit(&mut self, pod: &PodRequest) -> Result<(), String> {
        if self.admitted.contains_key(&pod.uid) {
            return Ok(());
        }
        let mut trial = self.planner.clone();
        let mut pinned = Vec::new();
        for (container, w) in &pod.containers {
            let p = trial.admit(w).map_err(|r| format!("container {container}: {}", r.reason))?;
            let mut w = w.clone();
            w.demand = w.demand.take().map(|d| d.pinned_to(&p.cpus));
            pinned.push(w);
        }
        self.planner = trial;
        self.admitted.insert(pod.uid.clone(), pinned);
        self.order.push(pod.uid.clone());
        Ok(())
    }

    /// Releases a pod's containers.
    pub fn release(&mut self, uid: &str) {
        if self.admitted.remove(uid).is_none() {
            return;
        }
        self.order.retain(|u| u != uid);
        let mut spec = Spec { node: self.node.clone(), ..Spec::default() };
        for u in &self.order {
            spec.workloads.extend(self.admitted[u].iter().cloned());
        }
        self.planner = Planner::new(&spec, &self.facts);
    }

    pub fn inventory(&self) -> Inventory {
        Inventory::from_plan(&self.planner.plan(), self.node.default_period, "none", true, self.order.clone())
    }
}


/// Deletes a terminating pod of an inventory-only node with grace period 0, guarded by its uid (a
/// pod re-created under the same name is left alone).
async fn finish_deletion(client: Client, pod: Pod) {
    let (Some(ns), Some(name)) = (pod.metadata.namespace.as_deref(), pod.metadata.name.as_deref()) else { return };
    let api: Api<Pod> = Api::namespaced(client, ns);
    let dp = DeleteParams { grace_period_seconds: Some(0), preconditions: pod.metadata.uid.clone().map(|uid| Preconditions { uid: Some(uid), resource_version: None }), ..Default::default() };
    match api.delete(name, &dp).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
        Err(e) => tracing::warn!("cannot finish deleting pod {ns}/{name}: {e}"),
    }
}

/// `rtslice daemon --inventory-only`: plans the pods bound to `node_name` on the declared node,
/// publishes the inventory, launches nothing; until SIGTERM/SIGINT.
pub async fn run_inventory_only(node: rtslice_spec::Node, node_name: String, kubeconfig: Option<PathBuf>) -> Result<(), ClusterError> {
    let client = crate::server::client(kubeconfig.as_ref()).await?;
    let sim = std::sync::Arc::new(std::sync::Mutex::new(Simulated::new(node)?));
    let watch = {
        let sim = sim.clone();
        let client = client.clone();
        let api: Api<Pod> = Api::all(client.clone());
        let cfg = watcher::Config::default().fields(&format!("spec.nodeName={node_name}"));
        let node_name = node_name.clone();
        async move {
            let mut s = watcher(api, cfg).boxed();
            while let Some(ev) = s.next().await {
                match ev {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                        let uid = p.metadata.uid.clone().unwrap_or_default();
                        let finished = p.status.as_ref().and_then(|s| s.phase.as_deref()).is_some_and(|ph| ph == "Succeeded" || ph == "Failed");
                        let mut sim = sim.lock().unwrap_or_else(|p| p.into_inner());
                        if finished || p.metadata.deletion_timestamp.is_some() {
                            sim.release(&uid);
                            if !finished {
                                // What the kubelet does once a terminating pod's containers are gone:
                                // delete the object for good. Here nothing runs, so at once; without
                                // it the pod would stay Terminating for ever. The inventory without
                                // the pod is published first: the deletion is what moves a pending
                                // pod back to kube-scheduler's queue, and a retry that still read
                                // the old inventory left it unschedulable until the queue's 5-minute
                                // flush.
                                let (client, node, inv) = (client.clone(), node_name.clone(), sim.inventory());
                                tokio::spawn(async move {
                                    if let Err(e) = annotate(&client, &node, Some(&inv)).await {
                                        tracing::warn!("{e}");
                                    }
                                    finish_deletion(client, p).await;
                                });
                            }
                            continue;
                        }
                        match PodRequest::from_pod(&p) {
                            Ok(Some(r)) => {
                                if let Err(reason) = sim.admit(&r) {
                                    tracing::warn!(pod = %format!("{}/{}", r.namespace, r.name), "refused: {reason}");
                                }
                            }
                            Ok(None) => {}
                            Err(e) => tracing::warn!("pod {uid}: {e}"),
                        }
                    }
                    Ok(watcher::Event::Delete(p)) => {
                        if let Some(uid) = &p.metadata.uid {
                            sim.lock().unwrap_or_else(|p| p.into_inner()).release(uid);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!("watching pods of {node_name}: {e}"),
                }
            }
        }
    };
    let watch = tokio::spawn(watch);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(|e| ClusterError::Io(e.to_string()))?;
    let stop = async move {
        tokio::select! { _ = term.recv() => {}, _ = tokio::signal::ctrl_c() => {} }
    };
    tracing::info!(node = %node_name, "rtslice inventory-only node ready");
    let current = || {
        let inv = sim.lock().unwrap_or_else(|p| p.into_inner()).inventory();
        async move { Ok(inv) }
    };
    let r = publish_until(client, node_name, current, stop).await;
    watch.abort();
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtslice_spec::Demand;

    fn pod(uid: &str, pct: u64, k: u32) -> PodRequest {
        let w = Workload::new(format!("ns.{uid}.c")).with_demand(Demand::reservation(Duration::from_millis(pct), Duration::from_millis(100), k));
        PodRequest { uid: uid.into(), namespace: "ns".into(), name: uid.into(), containers: vec![("c".into(), w)] }
    }

    #[test]
    fn a_simulated_node_admits_refuses_and_releases_with_the_planner() {
        let mut node = rtslice_spec::Node::default();
        assert!(Simulated::new(node.clone()).is_err());
        node.cpus = NodeCpus::List(vec![0, 1, 2]);
        node.housekeeping = vec![0];
        let mut s = Simulated::new(node).unwrap();
        s.admit(&pod("a", 60, 2)).unwrap();
        let e = s.admit(&pod("b", 60, 1)).unwrap_err();
        assert!(e.starts_with("container c: asks for 60%"), "{e}");
        s.admit(&pod("c", 30, 1)).unwrap();
        let inv = s.inventory();
        assert_eq!(inv.pods, vec!["a", "c"]);
        assert!(inv.inventory_only);
        s.release("a");
        s.admit(&pod("b", 60, 1)).unwrap();
        // c did not move when a left.
        let on = |inv: &Inventory, w: &str| inv.per_cpu.iter().filter(|c| c.by.iter().any(|s| s.workload == w)).map(|c| c.cpu).collect::<Vec<_>>();
        assert_eq!(on(&inv, "ns.c.c"), on(&s.inventory(), "ns.c.c"));
        assert_eq!(s.inventory().pods, vec!["c", "b"]);
    }
}
