//! Study B's worked example must come out exactly as the paper describes it.

use rtslice_plan::{plan, Allocation, NodeFacts};

#[test]
fn worst_fit_worked_example() {
    let text = include_str!("../../../examples/study-b-worst-fit.yaml");
    let spec = rtslice_spec::parse(text, "study-b-worst-fit.yaml").unwrap();
    let p = plan(&spec, &NodeFacts::default());
    let order = |name: &str| match &p.workload(name).unwrap().allocation {
        Allocation::Reservation { per_cpu, .. } => per_cpu.iter().map(|r| r.cpu).collect::<Vec<_>>(),
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(order("container1"), vec![0, 1]);
    assert_eq!(order("container2"), vec![2]);
    assert_eq!(order("container3"), vec![3, 2, 0]);
    assert_eq!(p.workload("container3").unwrap().cpus, vec![0, 2, 3]);
    let r = p.rejection("container4").expect("container4 is rejected");
    assert!(r.reason.contains("75%"), "{}", r.reason);
    let d = r.defrag.as_ref().expect("a defragmentation proposal");
    assert_eq!(d.moves.len(), 1, "{d:?}");
    assert_eq!((d.moves[0].workload.as_str(), d.moves[0].from_cpu, d.moves[0].to_cpu), ("container3", 3, 1));
    assert_eq!(d.then_cpus, vec![3]);
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["rejected"][0]["defrag"]["moves"][0]["from_cpu"], 3);
    println!("{}", r.reason);
}

/// The same arrivals one at a time on a live node, as the node service admits them: the three
/// placed workloads come pinned where they run, which alone would keep container3 out of any
/// proposal; named movable, it is proposed for the paper's move, and only then.
#[test]
fn worst_fit_one_at_a_time_on_a_live_node_proposes_the_same_move() {
    let text = include_str!("../../../examples/study-b-worst-fit.yaml");
    let spec = rtslice_spec::parse(text, "study-b-worst-fit.yaml").unwrap();
    let first = plan(&spec, &NodeFacts::default());
    let mut live = spec.clone();
    live.workloads.truncate(3);
    for w in live.workloads.iter_mut() {
        let cpus = first.workload(&w.name).unwrap().cpus.clone();
        w.demand = w.demand.take().map(|d| d.pinned_to(&cpus));
    }
    let arrival = spec.workloads[3].clone();
    for (movable, expect) in [(vec![], false), (vec!["container1", "container2", "container3"], true)] {
        let mut planner = rtslice_plan::Planner::new(&live, &NodeFacts::default());
        planner.movable_in_proposals(&movable);
        let r = planner.admit(&arrival).expect_err("container4 does not fit");
        match (&r.defrag, expect) {
            (None, false) => {}
            (Some(d), true) => {
                assert_eq!(d.moves.len(), 1, "{d:?}");
                assert_eq!((d.moves[0].workload.as_str(), d.moves[0].from_cpu, d.moves[0].to_cpu), ("container3", 3, 1));
            }
            (d, _) => panic!("movable {movable:?}: proposal {d:?}"),
        }
    }
}
