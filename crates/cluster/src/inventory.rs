//! What a node publishes (the Node annotation `rtslice.io/inventory`) and how the extender turns it
//! back into the node's planner.

use std::collections::BTreeMap;
use std::time::Duration;

use rtslice_plan::{CpuUse, NodeFacts, Plan, Planner};
use rtslice_spec::{Demand, Node, NodeCpus, Spec, Workload};
use serde::{Deserialize, Serialize};

use crate::ClusterError;

/// The inventory format's version; a node publishing another one is not trusted.
pub const INVENTORY_VERSION: u32 = 1;
pub use rtslice_spec::annotations::INVENTORY as ANNOTATION;

/// A node's real-time capacity as its own planner sees it (docs/kubernetes.md, "The inventory
/// annotation"). The node service serves the same document as `GET /v1/inventory`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Inventory {
    pub version: u32,
    /// The node section its planner uses (CPUs listed, not `discovered`).
    pub node: Node,
    /// CPUs isolated at boot (`isolcpus=`).
    #[serde(default)]
    pub isolated: Vec<u32>,
    /// The reservation mechanism the node applies (`rt_group`, `deadline`, `hcbs`, `none`).
    pub mechanism: String,
    /// A simulated node (`rtslice daemon --inventory-only`): its pods are planned, never run.
    #[serde(default)]
    pub inventory_only: bool,
    /// The node planner's per-CPU accounting.
    pub per_cpu: Vec<CpuUse>,
    /// UIDs of the pods whose containers the node has admitted.
    #[serde(default)]
    pub pods: Vec<String>,
    /// The DRA claims prepared on the node, by namespace: the access policy's per-namespace sums
    /// count them beside the namespace's annotated pods (whose containers do not ask for bandwidth
    /// of their own when a claim gives it; docs/dra.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<ClaimHeld>,
}

/// One DRA claim a node holds: its namespace and the real-time bandwidth it takes (CPUs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimHeld {
    pub namespace: String,
    pub bandwidth: f64,
}

impl Inventory {
    /// The inventory of a node whose planner produced `plan`.
    pub fn from_plan(plan: &Plan, default_period: Duration, mechanism: &str, inventory_only: bool, pods: Vec<String>) -> Inventory {
        Inventory {
            version: INVENTORY_VERSION,
            node: Node {
                name: plan.node.name.clone(),
                cpus: NodeCpus::List(plan.node.cpus.clone()),
                housekeeping: plan.node.housekeeping.clone(),
                cap: plan.node.cap,
                default_period,
                policy: plan.node.policy,
                topology: plan.node.topology.as_ref().map(|t| t.to_topology()),
                // Pod annotations carry no cache request, so the inventory need not carry the L3.
                ..Default::default()
            },
            isolated: plan.node.isolcpus.clone(),
            mechanism: mechanism.to_string(),
            inventory_only,
            per_cpu: plan.node.per_cpu.clone(),
            pods,
            claims: Vec::new(),
        }
    }

    /// Reads an annotation's text.
    pub fn parse(text: &str) -> Result<Inventory, ClusterError> {
        let inv: Inventory = serde_json::from_str(text).map_err(|e| ClusterError::Inventory(format!("not an rtslice inventory: {e}")))?;
        if inv.version != INVENTORY_VERSION {
            return Err(ClusterError::Inventory(format!(
                "inventory version {} (this rtslice reads {INVENTORY_VERSION}); upgrade the node service and the extender together",
                inv.version
            )));
        }
        Ok(inv)
    }

    /// The node's planner state: every workload the node holds, pinned where it is. Each workload's
    /// per-CPU shares become a reservation on exactly those CPUs (runtime in ns over a 1 s period, so
    /// the planner's parts-per-10⁹ bandwidth comes back exactly); CPUs exclusive to a workload become
    /// its dedicated CPUs. A workload that holds SMT siblings idle (`held_for`) comes back as
    /// `whole-core`, so its siblings stay held against the node's topology (`node.topology`).
    pub fn planner(&self) -> Planner {
        let mut exclusive: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
        let mut shares: BTreeMap<&str, (f64, Vec<u32>)> = BTreeMap::new();
        let whole_core: std::collections::BTreeSet<&str> = self.per_cpu.iter().filter_map(|c| c.held_for.as_deref()).collect();
        let isolation = |name: &str| rtslice_spec::Isolation {
            smt: if whole_core.contains(name) { rtslice_spec::SmtIsolation::WholeCore } else { rtslice_spec::SmtIsolation::Shared },
            ..Default::default()
        };
        for c in &self.per_cpu {
            if let Some(owner) = &c.exclusive_to {
                exclusive.entry(owner).or_default().push(c.cpu);
                continue;
            }
            for s in &c.by {
                let e = shares.entry(&s.workload).or_insert((s.bandwidth, Vec::new()));
                e.0 = e.0.max(s.bandwidth);
                e.1.push(c.cpu);
            }
        }
        let mut spec = Spec { node: self.node.clone(), ..Spec::default() };
        for (name, cpus) in &exclusive {
            let mut w = Workload::new(*name).with_demand(Demand::dedicated(cpus.clone()));
            w.isolation = isolation(name);
            spec.workloads.push(w);
        }
        for (name, (bw, cpus)) in shares {
            if exclusive.contains_key(name) {
                continue;
            }
            let runtime = Duration::from_nanos((bw * 1e9).round().max(1.0) as u64);
            let mut w = Workload::new(name).with_demand(Demand::reservation_on(runtime, Duration::from_secs(1), cpus));
            w.isolation = isolation(name);
            spec.workloads.push(w);
        }
        let cpus = match &self.node.cpus {
            NodeCpus::List(l) => l.clone(),
            NodeCpus::Discovered => self.per_cpu.iter().map(|c| c.cpu).collect(),
        };
        Planner::new(&spec, &NodeFacts { online: cpus, isolcpus: self.isolated.clone(), ..Default::default() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The extender's planner rebuilt from a node's inventory refuses and admits exactly what the
    /// node's own planner does: study B's worked example, one more container each way.
    #[test]
    fn the_rebuilt_planner_decides_as_the_node_does() {
        let text = include_str!("../../../examples/study-b-worst-fit.yaml");
        let spec = rtslice_spec::parse(text, "study-b-worst-fit.yaml").unwrap();
        let node_planner = Planner::new(&spec, &NodeFacts::default());
        let plan = node_planner.plan();
        let inv = Inventory::from_plan(&plan, spec.node.default_period, "rt_group", false, vec![]);
        let back = Inventory::parse(&serde_json::to_string(&inv).unwrap()).unwrap();
        assert_eq!(back, inv);
        let rebuilt = back.planner().plan();
        for (a, b) in plan.node.per_cpu.iter().zip(&rebuilt.node.per_cpu) {
            assert_eq!((a.cpu, a.free), (b.cpu, b.free), "{a:?} vs {b:?}");
        }
        for bw_percent in [5u64, 25, 45, 55, 56, 60] {
            let w = Workload::new("probe").with_demand(Demand::reservation(
                Duration::from_millis(bw_percent),
                Duration::from_millis(100),
                1,
            ));
            let mut n = node_planner.clone();
            let mut r = back.planner();
            let (x, y) = (n.admit(&w).map(|p| p.cpus.clone()).map_err(|e| e.reason.clone()), r.admit(&w).map(|p| p.cpus.clone()).map_err(|e| e.reason.clone()));
            assert_eq!(x.is_ok(), y.is_ok(), "{bw_percent}%: node {x:?} extender {y:?}");
            if let (Ok(a), Ok(b)) = (x, y) {
                assert_eq!(a, b, "{bw_percent}%");
            }
        }
    }

    /// The topology and the SMT siblings a node holds idle reach the extender: the rebuilt planner
    /// keeps them held, and places a topology-bound probe as the node does.
    #[test]
    fn the_rebuilt_planner_keeps_the_topology_and_the_held_siblings() {
        let text = include_str!("../../../examples/two-socket-smt.yaml");
        let spec = rtslice_spec::parse(text, "two-socket-smt.yaml").unwrap();
        // Best effort holds no bandwidth and is not in the inventory: leave it out on both sides.
        let spec = Spec { workloads: spec.workloads.into_iter().filter(|w| !matches!(w.demand, Some(Demand::BestEffort(_)))).collect(), ..spec };
        let node_planner = Planner::new(&spec, &NodeFacts::default());
        let plan = node_planner.plan();
        let inv = Inventory::from_plan(&plan, spec.node.default_period, "rt_group", false, vec![]);
        let back = Inventory::parse(&serde_json::to_string(&inv).unwrap()).unwrap();
        let rebuilt = back.planner().plan();
        assert!(rebuilt.rejected.is_empty(), "{:?}", rebuilt.rejected);
        for (a, b) in plan.node.per_cpu.iter().zip(&rebuilt.node.per_cpu) {
            assert_eq!((a.cpu, a.free, &a.held_for), (b.cpu, b.free, &b.held_for), "{a:?} vs {b:?}");
        }
        let mut probe = Workload::new("probe").with_demand(Demand::reservation(Duration::from_micros(500), Duration::from_millis(1), 3));
        probe.isolation = rtslice_spec::Isolation {
            smt: rtslice_spec::SmtIsolation::WholeCore,
            locality: rtslice_spec::Locality::Llc,
            ..Default::default()
        };
        let (mut n, mut r) = (node_planner.clone(), back.planner());
        let x = n.admit(&probe).map(|p| p.cpus.clone()).map_err(|e| e.reason.clone());
        let y = r.admit(&probe).map(|p| p.cpus.clone()).map_err(|e| e.reason.clone());
        assert_eq!(x, y);
    }

    #[test]
    fn other_versions_are_refused_with_what_to_do() {
        let e = Inventory::parse(r#"{"version": 9, "node": {}, "mechanism": "x", "perCpu": []}"#).unwrap_err();
        assert!(e.to_string().contains("upgrade the node service and the extender together"), "{e}");
        assert!(Inventory::parse("{").unwrap_err().to_string().contains("not an rtslice inventory"));
    }
}
