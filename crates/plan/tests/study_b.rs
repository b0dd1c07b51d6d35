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
