//! Foreign real-time bandwidth (threads and groups rtslice did not place) is taken from each CPU's
//! free bandwidth: a reservation that fits an empty node is refused, or placed elsewhere, when
//! another tool's FIFO/DEADLINE threads already hold part of the cap.

use rtslice_plan::{plan, Allocation, ForeignBasis, ForeignRt, NodeFacts};

fn spec(reservation: &str) -> rtslice_spec::Spec {
    let text = format!(
        "apiVersion: rtslice/v1\nnode:\n  cpus: [0, 1]\nworkloads:\n  - name: server\n    launch: {{pid: 1}}\n    demand:\n      reservation: {{runtime: {reservation}, period: 10ms, count: 1}}\n"
    );
    rtslice_spec::parse(&text, "foreign.yaml").unwrap()
}

fn rt_app(per_cpu: f64, cpus: Vec<u32>) -> ForeignRt {
    ForeignRt { source: "rt-app[42] SCHED_FIFO 50, 4 threads".into(), basis: ForeignBasis::Measured, per_cpu, cpus }
}

#[test]
fn foreign_bandwidth_is_not_reservable() {
    let alone = plan(&spec("8ms"), &NodeFacts::with_cpus(2));
    assert!(alone.all_admitted(), "{:?}", alone.rejected);
    // 0.8 + 0.24 > 0.95 on both CPUs: refused, and the reason names who holds the rest.
    let facts = NodeFacts { foreign_rt: vec![rt_app(0.24, vec![0, 1])], ..NodeFacts::with_cpus(2) };
    let p = plan(&spec("8ms"), &facts);
    let r = p.rejection("server").expect("refused next to 24% of foreign RT on every CPU");
    assert!(r.reason.contains("real-time threads rtslice did not place") || r.reason.contains("71%"), "{}", r.reason);
    assert!(p.warnings.iter().any(|w| w.contains("rt-app[42]") && w.contains("24%")), "{:?}", p.warnings);
    assert_eq!(p.node.per_cpu[0].foreign, 0.24);
    assert!((p.node.per_cpu[0].free - 0.71).abs() < 1e-9, "{}", p.node.per_cpu[0].free);
}

#[test]
fn a_reservation_goes_where_the_foreign_bandwidth_is_not() {
    // Worst fit picks the emptiest CPU: with the foreign threads on CPU 0 only, that is CPU 1 even
    // though CPU 0 comes first.
    let facts = NodeFacts { foreign_rt: vec![rt_app(0.3, vec![0])], ..NodeFacts::with_cpus(2) };
    let p = plan(&spec("6ms"), &facts);
    assert!(p.all_admitted(), "{:?}", p.rejected);
    match &p.workload("server").unwrap().allocation {
        Allocation::Reservation { per_cpu, .. } => assert_eq!(per_cpu.iter().map(|r| r.cpu).collect::<Vec<_>>(), vec![1]),
        other => panic!("{other:?}"),
    }
    // JSON keeps the foreign share per CPU (and leaves it out where there is none).
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["node"]["per_cpu"][0]["foreign"], 0.3);
    assert!(json["node"]["per_cpu"][1].get("foreign").is_none());
}
