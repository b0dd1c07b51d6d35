//! The property that makes the scheduler's allocation an admission: whatever kube-scheduler may
//! allocate from the published devices (any distinct CPUs, any bandwidth up to the least capacity
//! among them, any period) is admitted by the node's planner on top of what the node already holds;
//! and the published capacity never exceeds the cap on any CPU.

use std::time::Duration;

use proptest::prelude::*;
use rtslice_dra::quantity::{format_milli, parse_milli};
use rtslice_dra::{claim, cpu_of, devices, DRIVER};
use rtslice_plan::{NodeFacts, Planner};
use rtslice_spec::{Demand, Node, NodeCpus, Reservation, Spec, Workload};
use serde_json::{json, Value};

fn spec_with(cpus: u32, cap_pct: u32, held: &[(u64, u32)]) -> Spec {
    let mut spec = Spec {
        node: Node { cpus: NodeCpus::List((0..cpus).collect()), housekeeping: vec![0], cap: cap_pct as f64 / 100.0, ..Node::default() },
        ..Spec::default()
    };
    for (i, (permille, count)) in held.iter().enumerate() {
        spec.workloads.push(Workload {
            name: format!("w{i}"),
            demand: Some(Demand::Reservation(Reservation {
                runtime: Duration::from_micros(permille * 10),
                period: Some(Duration::from_millis(10)),
                count: Some(*count),
                cpus: None,
                reclaim: None,
            })),
            ..Workload::default()
        });
    }
    spec
}

/// The node's spec with what the plan placed pinned where it is (as the node service counts it).
fn pinned(spec: &Spec) -> (Spec, Vec<Value>) {
    let plan = Planner::new(spec, &NodeFacts::default()).plan();
    let mut out = Spec { node: spec.node.clone(), ..Spec::default() };
    for wp in &plan.workloads {
        let w = spec.workloads.iter().find(|w| w.name == wp.name).unwrap();
        let mut w = w.clone();
        w.demand = w.demand.map(|d| d.pinned_to(&wp.cpus));
        out.workloads.push(w);
    }
    (out, devices(&plan.node, "deadline"))
}

fn capacity(d: &Value) -> u64 {
    parse_milli(d["capacity"]["bandwidth"]["value"].as_str().unwrap()).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn what_the_scheduler_may_allocate_the_node_admits(
        cpus in 2u32..9,
        cap_pct in 50u32..=100,
        held in prop::collection::vec((10u64..600, 1u32..3), 0..5),
        pick in prop::collection::vec(any::<prop::sample::Index>(), 1..4),
        frac in 1u64..=1000,
        period_us in prop::sample::select(vec![1000u64, 2500, 10_000, 33_333]),
    ) {
        let spec = spec_with(cpus, cap_pct, &held);
        let (pinned_spec, devs) = pinned(&spec);
        let plan = Planner::new(&pinned_spec, &NodeFacts::default()).plan();
        // Never above the cap: the capacity plus what the node holds on the CPU.
        for d in &devs {
            let cpu = cpu_of(d["name"].as_str().unwrap()).unwrap();
            let u = plan.node.per_cpu.iter().find(|u| u.cpu == cpu).unwrap();
            prop_assert!(capacity(d) as f64 / 1000.0 + u.reserved + u.foreign <= plan.node.cap + 1e-9);
            prop_assert!(!u.housekeeping);
        }
        prop_assume!(!devs.is_empty());
        let mut chosen: Vec<&Value> = pick.iter().map(|i| i.get(&devs)).collect();
        chosen.sort_by_key(|d| d["name"].as_str().unwrap().to_string());
        chosen.dedup();
        let least = chosen.iter().map(|d| capacity(d)).min().unwrap();
        let bw = (least * frac).div_ceil(1000).max(1);
        let results: Vec<Value> = chosen.iter().map(|d| json!({
            "request": "cpus", "driver": DRIVER, "pool": "n", "device": d["name"], "consumedCapacity": {"bandwidth": format_milli(bw)}
        })).collect();
        let raw = json!({
            "metadata": {"uid": "u", "namespace": "ns", "name": "c"},
            "status": {"allocation": {"devices": {"results": results, "config": [
                {"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {"period": format!("{period_us}us")}}}
            ]}}}
        });
        let c = claim(&raw, "n", Duration::from_millis(10)).unwrap();
        let w = Workload { name: "claim".into(), demand: Some(c.demand), ..Workload::default() };
        let mut planner = Planner::new(&pinned_spec, &NodeFacts::default());
        let admitted = planner.admit(&w).map(|p| p.cpus.clone());
        prop_assert_eq!(admitted.as_ref().ok(), Some(&c.cpus), "{:?}", admitted);
    }
}
