//! The extender's decision, pure: over a snapshot of the cluster (each node's inventory, the pods
//! bound to each node), which nodes a pod fits on, why the others do not, and the score.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::Pod;
use rtslice_plan::{Allocation, Planner};
use rtslice_spec::{FitPolicy, Workload};

use crate::inventory::Inventory;

/// kube-scheduler's extender scores are 0..=MAX_SCORE (`MaxExtenderPriority`).
pub const MAX_SCORE: i64 = 10;

/// A pod's real-time demand: one planner workload per container that rtslice annotations give one.
#[derive(Debug, Clone, PartialEq)]
pub struct PodRequest {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// (container name, its workload), in the pod's container order.
    pub containers: Vec<(String, Workload)>,
}

impl PodRequest {
    /// The pod's demand; `Ok(None)` when it has no rtslice annotation (not the extender's business),
    /// the spec's located errors (one per line) when its annotations are invalid.
    pub fn from_pod(pod: &Pod) -> Result<Option<PodRequest>, String> {
        let annotations: BTreeMap<String, String> = pod.metadata.annotations.clone().unwrap_or_default();
        if !rtslice_spec::annotations::wants_rtslice(&annotations) {
            return Ok(None);
        }
        let namespace = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let name = pod.metadata.name.clone().unwrap_or_default();
        // A container that uses resource claims gets its CPUs through DRA (docs/dra.md): kube-
        // scheduler's allocator admits it, and its annotations carry only thread rules. It is left
        // out here, with the annotations that name it.
        let all = pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default();
        let claimed: Vec<&str> = all
            .iter()
            .filter(|c| c.resources.as_ref().and_then(|r| r.claims.as_ref()).is_some_and(|v| !v.is_empty()))
            .map(|c| c.name.as_str())
            .collect();
        let containers: Vec<String> = all.iter().map(|c| c.name.clone()).filter(|c| !claimed.contains(&c.as_str())).collect();
        if containers.is_empty() {
            return Ok(None);
        }
        let annotations: BTreeMap<String, String> = annotations
            .into_iter()
            .filter(|(k, _)| {
                let suffix = k.strip_prefix(rtslice_spec::annotations::PREFIX).and_then(|r| r.split_once('.')).map(|(_, c)| c);
                !suffix.is_some_and(|c| claimed.contains(&c))
            })
            .collect();
        if !rtslice_spec::annotations::wants_rtslice(&annotations) {
            return Ok(None);
        }
        let found = rtslice_spec::annotations::pod_workloads(&annotations, &namespace, &name, &containers, &rtslice_spec::Node::default())
            .map_err(|e| e.to_string())?;
        Ok(Some(PodRequest { uid: pod.metadata.uid.clone().unwrap_or_default(), namespace, name, containers: found }))
    }
}

/// What the extender says about one node.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Fits; the score (0..=10) under the fit policy.
    Fits(i64),
    /// Does not fit now (the planner's reason); may fit once something is removed.
    Unfit(String),
    /// Cannot take rtslice pods at all (no node service, unreadable inventory).
    Unresolvable(String),
}

/// The answer for a set of nodes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decision {
    /// Nodes it fits on, in the order asked, with their scores.
    pub fits: Vec<(String, i64)>,
    pub failed: BTreeMap<String, String>,
    pub unresolvable: BTreeMap<String, String>,
}

struct NodeState {
    annotation: Option<String>,
    model: Result<NodeModel, String>,
}

#[derive(Clone)]
struct NodeModel {
    planner: Planner,
    pods: BTreeSet<String>,
    /// Free bandwidth per usable (non-housekeeping) CPU as published, and the cap: the score is
    /// computed from these and what the request takes, without building a whole plan per node.
    free: BTreeMap<u32, f64>,
    cap: f64,
    /// The DRA claims it holds (namespace, bandwidth).
    claims: Vec<crate::inventory::ClaimHeld>,
}

/// The cluster as the extender knows it.
pub struct Cluster {
    policy: FitPolicy,
    nodes: HashMap<String, NodeState>,
    /// Pods bound to each node (by the watch, or by our own `/bind`), by uid.
    bound: HashMap<String, BTreeMap<String, PodRequest>>,
    /// Which node each bound pod is on.
    bound_on: HashMap<String, String>,
    /// Who may ask (`with_access`); `None` judges placement only (tests, the benchmark).
    access: Option<rtslice_spec::access::Access>,
}

impl Cluster {
    pub fn new(policy: FitPolicy) -> Cluster {
        Cluster { policy, nodes: HashMap::new(), bound: HashMap::new(), bound_on: HashMap::new(), access: None }
    }

    /// Pods are judged against the admin's access policy first: a namespace it does not allow, or
    /// one at its cluster-wide bandwidth, fits nowhere, and one at its per-node bandwidth on a node
    /// does not fit there, each with the policy's reason (the node checks its own limit again at
    /// admission: its word is final).
    pub fn with_access(mut self, access: rtslice_spec::access::Access) -> Cluster {
        self.access = Some(access);
        self
    }

    /// A node appeared or changed; `annotation` is its `rtslice.io/inventory`, if any. The planner is
    /// rebuilt only when the annotation changed.
    pub fn set_node(&mut self, name: &str, annotation: Option<&str>) {
        if let Some(s) = self.nodes.get(name) {
            if s.annotation.as_deref() == annotation {
                return;
            }
        }
        let model = match annotation {
            None => Err(format!(
                "runs no rtslice node service (no {} annotation); install the rtslice DaemonSet on it (docs/kubernetes.md)",
                crate::ANNOTATION
            )),
            Some(text) => Inventory::parse(text)
                .map(|inv| NodeModel {
                    planner: inv.planner(),
                    pods: inv.pods.iter().cloned().collect(),
                    free: inv.per_cpu.iter().filter(|c| !c.housekeeping).map(|c| (c.cpu, c.free)).collect(),
                    cap: inv.node.cap,
                    claims: inv.claims,
                })
                .map_err(|e| e.to_string()),
        };
        self.nodes.insert(name.to_string(), NodeState { annotation: annotation.map(str::to_string), model });
    }

    pub fn remove_node(&mut self, name: &str) {
        self.nodes.remove(name);
    }

    /// A pod is bound to `node` (seen in the watch, or bound by us).
    pub fn bind(&mut self, node: &str, pod: PodRequest) {
        self.unbind(&pod.uid.clone());
        self.bound_on.insert(pod.uid.clone(), node.to_string());
        self.bound.entry(node.to_string()).or_default().insert(pod.uid.clone(), pod);
    }

    /// A pod as the watch of bound pods sees it (added or changed). A bound pod counts on its node;
    /// one that is terminating (`deletionTimestamp` set) or finished does not: its node releases it
    /// (or never admits it), so from then on only the node's inventory may still hold it — counting
    /// it as "bound, not yet admitted" would hold its bandwidth for as long as the object lingers,
    /// which without a kubelet (an inventory-only node) or with a stuck one is forever.
    pub fn pod_seen(&mut self, pod: &Pod) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        let finished = pod.status.as_ref().and_then(|s| s.phase.as_deref()).is_some_and(|ph| ph == "Succeeded" || ph == "Failed");
        match (node, PodRequest::from_pod(pod)) {
            (Some(node), Ok(Some(r))) if !finished && pod.metadata.deletion_timestamp.is_none() => self.bind(&node, r),
            _ => self.unbind(&uid),
        }
    }

    /// A pod is gone (deleted, finished).
    pub fn unbind(&mut self, uid: &str) {
        if let Some(node) = self.bound_on.remove(uid) {
            if let Some(m) = self.bound.get_mut(&node) {
                m.remove(uid);
            }
        }
    }

    pub fn bound_count(&self) -> usize {
        self.bound_on.len()
    }

    /// Whether `pod` fits on `node`: the node's planner, plus every pod bound there that the node has
    /// not admitted yet, plus each of the pod's containers.
    pub fn verdict(&self, pod: &PodRequest, node: &str) -> Verdict {
        let Some(state) = self.nodes.get(node) else {
            return Verdict::Unresolvable("is not known to the rtslice extender yet (no Node object seen)".into());
        };
        let model = match &state.model {
            Ok(m) => m,
            Err(e) => return Verdict::Unresolvable(e.clone()),
        };
        let mut planner = model.planner.clone();
        let mut free = model.free.clone();
        let take = |free: &mut BTreeMap<u32, f64>, a: &Allocation| match a {
            Allocation::Reservation { reservation, per_cpu } => {
                for c in per_cpu {
                    if let Some(f) = free.get_mut(&c.cpu) {
                        *f = (*f - reservation.bandwidth()).max(0.0);
                    }
                }
            }
            Allocation::Dedicated { cpus } => {
                for c in cpus {
                    free.insert(*c, 0.0);
                }
            }
            Allocation::BestEffort { .. } => {}
        };
        if let Some(on_node) = self.bound.get(node) {
            for (uid, other) in on_node {
                if uid == &pod.uid || model.pods.contains(uid) {
                    continue;
                }
                // Bound but not admitted by the node yet: it takes its place first. One that does not
                // fit any more will be refused by the node; it takes nothing here either.
                for (_, w) in &other.containers {
                    if let Ok(p) = planner.admit(w) {
                        take(&mut free, &p.allocation);
                    }
                }
            }
        }
        let mut taken: Vec<u32> = Vec::new();
        let mut reserved = false;
        for (container, w) in &pod.containers {
            match planner.admit(w) {
                Ok(p) => {
                    if let Allocation::Reservation { per_cpu, .. } = &p.allocation {
                        reserved = true;
                        taken.extend(per_cpu.iter().map(|c| c.cpu));
                    }
                    take(&mut free, &p.allocation);
                }
                Err(r) => return Verdict::Unfit(format!("container {container}: {}", r.reason)),
            }
        }
        Verdict::Fits(self.score(&free, model.cap, reserved.then_some(&taken)))
    }

    /// Worst-fit across nodes, as the node's planner does across CPUs: the node whose CPUs keep the
    /// most free bandwidth after the pod is placed scores highest (the mean free of the CPUs the
    /// reservations took; for dedicated CPUs, the node's free bandwidth overall). Best-fit reverses
    /// it; first-fit scores every node the same (kube-scheduler's other scores decide).
    fn score(&self, free: &BTreeMap<u32, f64>, cap: f64, taken: Option<&Vec<u32>>) -> i64 {
        let cap = cap.max(1e-9);
        let frac = match taken {
            Some(cpus) if !cpus.is_empty() => cpus.iter().filter_map(|c| free.get(c)).sum::<f64>() / cpus.len() as f64 / cap,
            _ if free.is_empty() => 0.0,
            _ => free.values().sum::<f64>() / (free.len() as f64 * cap),
        };
        let s = (frac.clamp(0.0, 1.0) * MAX_SCORE as f64).round() as i64;
        match self.policy {
            FitPolicy::WorstFit => s,
            FitPolicy::BestFit => MAX_SCORE - s,
            FitPolicy::FirstFit => 0,
        }
    }

    /// The real-time bandwidth (CPUs) namespace `ns` holds on `node` (on every node: `None`), `pod`
    /// itself left out: its annotated pods bound there — every live one the watch saw on a node,
    /// admitted yet or not — and the DRA claims the node's inventory lists (a claim's container asks
    /// for nothing of its own, so nothing is counted twice).
    fn held_by(&self, ns: &str, node: Option<&str>, pod: &str) -> f64 {
        let on = |n: &String| node.is_none_or(|x| x == n.as_str());
        let bw = |p: &PodRequest| p.containers.iter().map(|(_, w)| rtslice_spec::access::demand_bandwidth(w)).sum::<f64>();
        let pods: f64 =
            self.bound.iter().filter(|(n, _)| on(n)).flat_map(|(_, pods)| pods.values()).filter(|p| p.namespace == ns && p.uid != pod).map(bw).sum();
        let claims: f64 = self
            .nodes
            .iter()
            .filter(|(n, _)| on(n))
            .filter_map(|(_, s)| s.model.as_ref().ok())
            .flat_map(|m| &m.claims)
            .filter(|c| c.namespace == ns)
            .map(|c| c.bandwidth)
            .sum();
        pods + claims
    }

    /// The verdict on each of `nodes`.
    pub fn decide(&self, pod: &PodRequest, nodes: &[String]) -> Decision {
        use rtslice_spec::access::Scope;
        let mut d = Decision::default();
        let asks: f64 = pod.containers.iter().map(|(_, w)| rtslice_spec::access::demand_bandwidth(w)).sum();
        if let Some(a) = &self.access {
            let refused = pod
                .containers
                .iter()
                .find_map(|(c, w)| a.check_kind(&pod.namespace, w).err().map(|e| format!("container {c}: {e}")))
                .or_else(|| a.check_bandwidth(&pod.namespace, Scope::Cluster, self.held_by(&pod.namespace, None, &pod.uid), asks).err());
            if let Some(reason) = refused {
                // Unresolvable: no preemption makes it fit (a cluster-wide limit frees only when the
                // namespace's own pods go, and the pod is retried then).
                d.unresolvable = nodes.iter().map(|n| (n.clone(), reason.clone())).collect();
                return d;
            }
        }
        for n in nodes {
            if let Some(Err(reason)) =
                self.access.as_ref().map(|a| a.check_bandwidth(&pod.namespace, Scope::Node, self.held_by(&pod.namespace, Some(n), &pod.uid), asks))
            {
                d.failed.insert(n.clone(), reason);
                continue;
            }
            match self.verdict(pod, n) {
                Verdict::Fits(s) => d.fits.push((n.clone(), s)),
                Verdict::Unfit(r) => {
                    d.failed.insert(n.clone(), r);
                }
                Verdict::Unresolvable(r) => {
                    d.unresolvable.insert(n.clone(), r);
                }
            }
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtslice_plan::NodeFacts;
    use rtslice_spec::{Demand, NodeCpus, Spec};
    use std::time::Duration;

    fn inventory(cpus: u32, placed: &[(&str, u64, u32)]) -> String {
        let mut spec = Spec::default();
        spec.node.cpus = NodeCpus::List((0..cpus).collect());
        spec.node.housekeeping = vec![0];
        for (name, pct, k) in placed {
            spec.workloads.push(Workload::new(*name).with_demand(Demand::reservation(Duration::from_millis(*pct), Duration::from_millis(100), *k)));
        }
        let plan = Planner::new(&spec, &NodeFacts::default()).plan();
        assert!(plan.rejected.is_empty(), "{:?}", plan.rejected);
        serde_json::to_string(&Inventory::from_plan(&plan, spec.node.default_period, "rt_group", true, vec![])).unwrap()
    }

    fn pod(uid: &str, pct: u64, k: u32) -> PodRequest {
        let w = Workload::new(format!("ns.{uid}.du")).with_demand(Demand::reservation(Duration::from_millis(pct), Duration::from_millis(100), k));
        PodRequest { uid: uid.into(), namespace: "ns".into(), name: uid.into(), containers: vec![("du".into(), w)] }
    }

    #[test]
    fn filters_with_the_planners_reason_and_scores_worst_fit() {
        let mut c = Cluster::new(FitPolicy::WorstFit);
        c.set_node("full", Some(&inventory(3, &[("a", 90, 2)])));
        c.set_node("half", Some(&inventory(3, &[("a", 50, 2)])));
        c.set_node("empty", Some(&inventory(3, &[])));
        c.set_node("plain", None);
        let names: Vec<String> = ["full", "half", "empty", "plain"].iter().map(|s| s.to_string()).collect();
        let d = c.decide(&pod("p1", 30, 1), &names);
        assert_eq!(d.fits.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), vec!["half", "empty"]);
        assert!(d.failed["full"].starts_with("container du: asks for 30% on each of 1 CPU(s)"), "{:?}", d.failed);
        assert!(d.unresolvable["plain"].contains("no rtslice.io/inventory annotation"), "{:?}", d.unresolvable);
        let score = |n: &str| d.fits.iter().find(|(x, _)| x == n).unwrap().1;
        assert!(score("empty") > score("half"), "{:?}", d.fits);
        let mut best = Cluster::new(FitPolicy::BestFit);
        best.set_node("half", Some(&inventory(3, &[("a", 50, 2)])));
        best.set_node("empty", Some(&inventory(3, &[])));
        let d = best.decide(&pod("p1", 30, 1), &names[1..3]);
        assert!(d.fits[0].1 > d.fits[1].1, "best-fit packs: {:?}", d.fits);
    }

    /// Two pods scheduled at once: the second sees the first as bound (not yet admitted by the node)
    /// and does not land on the CPU the first took; once the node's inventory lists the first, it is
    /// not counted twice.
    #[test]
    fn pods_bound_but_not_running_are_accounted_once() {
        let mut c = Cluster::new(FitPolicy::WorstFit);
        c.set_node("n", Some(&inventory(2, &[])));
        let names = vec!["n".to_string()];
        assert!(matches!(c.verdict(&pod("p1", 60, 1), "n"), Verdict::Fits(_)));
        c.bind("n", pod("p1", 60, 1));
        let d = c.decide(&pod("p2", 60, 1), &names);
        assert!(d.failed["n"].contains("asks for 60%"), "{d:?}");
        // The node admitted p1: its inventory now holds it and lists its uid.
        let mut spec = Spec::default();
        spec.node.cpus = NodeCpus::List(vec![0, 1]);
        spec.node.housekeeping = vec![0];
        spec.workloads.push(pod("p1", 60, 1).containers[0].1.clone());
        let plan = Planner::new(&spec, &NodeFacts::default()).plan();
        let inv = Inventory::from_plan(&plan, Duration::from_millis(100), "rt_group", false, vec!["p1".into()]);
        c.set_node("n", Some(&serde_json::to_string(&inv).unwrap()));
        let again = c.decide(&pod("p2", 30, 1), &names);
        assert_eq!(again.fits.len(), 1, "p1 counted once: {again:?}");
        c.unbind("p1");
        assert_eq!(c.bound_count(), 0);
    }

    /// A deleted pod stays in the API while it terminates (for ever on a node without a kubelet):
    /// once it is terminating it no longer counts as bound, so a pending pod fits in its place as
    /// soon as the node's inventory no longer holds it.
    #[test]
    fn a_terminating_pod_is_not_counted_as_bound() {
        let mut c = Cluster::new(FitPolicy::WorstFit);
        c.set_node("n", Some(&inventory(2, &[])));
        let names = vec!["n".to_string()];
        let pod_json = |extra: serde_json::Value| -> Pod {
            let mut v = serde_json::json!({
                "metadata": {"name": "vbs1", "namespace": "ran", "uid": "u1",
                             "annotations": {"rtslice.io/reservation": "{runtime: 60ms, period: 100ms}"}},
                "spec": {"nodeName": "n", "containers": [{"name": "du", "image": "x"}]}
            });
            if let (Some(m), Some(e)) = (v.as_object_mut(), extra.as_object()) {
                for (k, x) in e {
                    match (m.get_mut(k), x) {
                        (Some(serde_json::Value::Object(into)), serde_json::Value::Object(add)) => into.extend(add.clone()),
                        _ => {
                            m.insert(k.clone(), x.clone());
                        }
                    }
                }
            }
            serde_json::from_value(v).unwrap()
        };
        c.pod_seen(&pod_json(serde_json::json!({})));
        assert_eq!(c.bound_count(), 1);
        assert!(c.decide(&pod("p2", 60, 1), &names).failed["n"].contains("asks for 60%"));
        c.pod_seen(&pod_json(serde_json::json!({"metadata": {"deletionTimestamp": "2026-11-24T03:00:00Z"}})));
        assert_eq!(c.bound_count(), 0);
        assert_eq!(c.decide(&pod("p2", 60, 1), &names).fits.len(), 1);
        // Bound again, then finished: a finished pod holds nothing either.
        c.pod_seen(&pod_json(serde_json::json!({})));
        assert_eq!(c.bound_count(), 1);
        c.pod_seen(&pod_json(serde_json::json!({"status": {"phase": "Succeeded"}})));
        assert_eq!(c.bound_count(), 0);
    }

    #[test]
    fn a_pods_annotations_become_its_request() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "vbs1", "namespace": "ran", "uid": "u1", "annotations": {
                "rtslice.io/reservation.du": "{runtime: 400us, period: 1ms, count: 2}",
                "rtslice.io/threads.du": "[{match: ^phy, policy: fifo, priority: 90, slots: 0}]"}},
            "spec": {"containers": [{"name": "du", "image": "x"}, {"name": "log", "image": "y"}]}
        }))
        .unwrap();
        let r = PodRequest::from_pod(&pod).unwrap().unwrap();
        assert_eq!(r.containers.len(), 1);
        assert_eq!(r.containers[0].1.name, "ran.vbs1.du");
        let plain: Pod = serde_json::from_value(serde_json::json!({"metadata": {"name": "x"}, "spec": {"containers": []}})).unwrap();
        assert_eq!(PodRequest::from_pod(&plain).unwrap(), None);
        let bad: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x", "annotations": {"rtslice.io/reservation": "{runtime: 2ms, period: 1ms}"}},
            "spec": {"containers": [{"name": "c"}]}
        }))
        .unwrap();
        let e = PodRequest::from_pod(&bad).unwrap_err();
        assert!(e.starts_with("rtslice.io/reservation:1:"), "{e}");
    }

    #[test]
    fn a_namespace_is_held_to_its_bandwidth_per_node_and_in_the_cluster() {
        let access = rtslice_spec::access::parse_access(
            "apiVersion: rtslice/v1\naccess:\n  namespaces:\n    ns: {bandwidth: 0.5, clusterBandwidth: 0.8}\n    other:\n",
            "a.yaml",
        )
        .unwrap();
        let mut c = Cluster::new(FitPolicy::WorstFit).with_access(access);
        for n in ["n1", "n2", "n3"] {
            c.set_node(n, Some(&inventory(4, &[])));
        }
        let names: Vec<String> = ["n1", "n2", "n3"].iter().map(|s| s.to_string()).collect();
        // 0.3 of a CPU bound on n1: another 0.3 would hold 0.6 there, over the 0.5 per node.
        c.bind("n1", pod("a", 30, 1));
        let d = c.decide(&pod("b", 30, 1), &names);
        assert_eq!(d.fits.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), vec!["n2", "n3"]);
        assert!(d.failed["n1"].contains("may hold 0.5 CPU(s) of real-time bandwidth on this node; it holds 0.300 and this asks 0.300"), "{:?}", d.failed);
        // Re-judging a bound pod does not count it twice.
        assert!(c.decide(&pod("a", 30, 1), &names).fits.len() == 3);
        // 0.3 on n2 as well: 0.6 held in the cluster, 0.3 more is over 0.8 — on every node.
        c.bind("n2", pod("b", 30, 1));
        let d = c.decide(&pod("c", 30, 1), &names);
        assert!(d.fits.is_empty(), "{:?}", d.fits);
        assert!(d.unresolvable["n3"].contains("may hold 0.8 CPU(s) of real-time bandwidth in the cluster; it holds 0.600 and this asks 0.300"), "{:?}", d.unresolvable);
        // Another namespace's pods are not counted against it, nor its against them.
        let mut other = pod("o", 30, 1);
        other.namespace = "other".into();
        assert_eq!(c.decide(&other, &names).fits.len(), 3);
        // One of the namespace's pods goes: the third fits again.
        c.unbind("a");
        assert_eq!(c.decide(&pod("c", 30, 1), &names).fits.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), vec!["n1", "n3"]);
    }

    #[test]
    fn a_namespace_s_dra_claims_count_in_its_sums_per_node_and_in_the_cluster() {
        let access = rtslice_spec::access::parse_access(
            "apiVersion: rtslice/v1\naccess:\n  namespaces:\n    ns: {bandwidth: 0.5, clusterBandwidth: 0.8}\n    other:\n",
            "a.yaml",
        )
        .unwrap();
        let mut c = Cluster::new(FitPolicy::WorstFit).with_access(access);
        let with_claims = |claims: &[(&str, f64)]| {
            let mut inv = Inventory::parse(&inventory(4, &[])).unwrap();
            inv.claims = claims.iter().map(|&(ns, bw)| crate::inventory::ClaimHeld { namespace: ns.into(), bandwidth: bw }).collect();
            serde_json::to_string(&inv).unwrap()
        };
        // ns holds 0.3 through a claim on n1 (and another namespace 0.9 there, not ns's).
        c.set_node("n1", Some(&with_claims(&[("ns", 0.3), ("other", 0.9)])));
        c.set_node("n2", Some(&with_claims(&[])));
        let names: Vec<String> = ["n1", "n2"].iter().map(|s| s.to_string()).collect();
        let d = c.decide(&pod("a", 30, 1), &names);
        assert_eq!(d.fits.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), vec!["n2"]);
        assert!(d.failed["n1"].contains("it holds 0.300 and this asks 0.300"), "{:?}", d.failed);
        // 0.3 claimed on n2 as well: 0.6 in the cluster, an annotated pod of 0.3 is over 0.8 everywhere.
        c.set_node("n2", Some(&with_claims(&[("ns", 0.3)])));
        let d = c.decide(&pod("a", 30, 1), &names);
        assert!(d.fits.is_empty(), "{:?}", d.fits);
        assert!(d.unresolvable["n2"].contains("it holds 0.600 and this asks 0.300"), "{:?}", d.unresolvable);
        // The claim on n2 released: the pod fits there again.
        c.set_node("n2", Some(&with_claims(&[])));
        assert_eq!(c.decide(&pod("a", 30, 1), &names).fits.len(), 1);
    }

    #[test]
    fn a_namespace_the_access_policy_does_not_name_fits_nowhere() {
        let access = rtslice_spec::access::parse_access("apiVersion: rtslice/v1\naccess:\n  namespaces:\n    ns: {}\n", "a.yaml").unwrap();
        let mut c = Cluster::new(FitPolicy::WorstFit).with_access(access);
        c.set_node("n1", Some(&inventory(3, &[])));
        let names = vec!["n1".to_string()];
        assert_eq!(c.decide(&pod("p1", 10, 1), &names).fits.len(), 1);
        let mut other = pod("p2", 10, 1);
        other.namespace = "guests".into();
        let d = c.decide(&other, &names);
        assert!(d.fits.is_empty());
        assert!(d.unresolvable["n1"].contains("namespace `guests` may not ask for real-time CPUs: the access policy allows only ns"), "{:?}", d.unresolvable);
    }

    #[test]
    fn containers_with_resource_claims_are_left_to_dra() {
        let threads = "[{match: ^phy, policy: fifo, priority: 90}]";
        let pod = |ann: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "vbs1", "namespace": "ran", "uid": "u1", "annotations": ann},
                "spec": {"containers": [{"name": "du", "image": "x", "resources": {"claims": [{"name": "rt"}]}}, {"name": "cu", "image": "y"}]}
            }))
            .unwrap()
        };
        // The claimed container's thread rules alone are not an error: its CPUs come from its claim.
        assert_eq!(PodRequest::from_pod(&pod(serde_json::json!({"rtslice.io/threads.du": threads}))).unwrap(), None);
        // The other container still asks through annotations.
        let r = PodRequest::from_pod(&pod(serde_json::json!({
            "rtslice.io/threads.du": threads,
            "rtslice.io/reservation.cu": "{runtime: 1ms, period: 10ms}"
        })))
        .unwrap()
        .unwrap();
        assert_eq!(r.containers.iter().map(|(c, _)| c.as_str()).collect::<Vec<_>>(), vec!["cu"]);
    }
}
