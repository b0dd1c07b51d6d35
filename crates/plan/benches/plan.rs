//! Planner speed: a whole 1,000-workload spec on a 256-CPU node (goal < 100 ms), and one admission
//! decision on a full node (goal < 1 ms), both when the newcomer fits and when it is refused (which
//! includes the defragmentation search).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use rtslice_plan::{plan, NodeFacts, Planner};
use rtslice_spec::{BestEffort, Dedicated, Demand, Node, NodeCpus, Reservation, Spec, Workload};

/// A deterministic pseudo-random mix: 50 dedicated CPUs, 900 reservations of 2–15% on 1–4 CPUs
/// (enough to fill the node, so the last ones are refused and get defragmentation searches), 50 best-effort.
fn big_spec() -> Spec {
    let mut seed: u64 = 0x9e3779b97f4a7c15;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut workloads = Vec::new();
    for i in 0..1000 {
        let demand = match i % 20 {
            0 => Demand::Dedicated(Dedicated { count: Some(1), cpus: None }),
            1 => Demand::BestEffort(BestEffort::default()),
            _ => Demand::Reservation(Reservation {
                runtime: Duration::from_micros(2_000 + next(13_000)),
                period: Some(Duration::from_millis(100)),
                count: Some(1 + next(4) as u32),
                cpus: None,
                reclaim: None,
            }),
        };
        workloads.push(Workload { name: format!("w{i}"), demand: Some(demand), ..Workload::default() });
    }
    Spec {
        node: Node { cpus: NodeCpus::List((0..256).collect()), housekeeping: vec![0, 1], ..Node::default() },
        workloads,
        ..Spec::default()
    }
}

fn newcomer(name: &str, permille: u64) -> Workload {
    Workload {
        name: name.into(),
        demand: Some(Demand::Reservation(Reservation {
            runtime: Duration::from_micros(permille * 100),
            period: Some(Duration::from_millis(100)),
            count: Some(1),
            cpus: None,
            reclaim: None,
        })),
        ..Workload::default()
    }
}

fn benches(c: &mut Criterion) {
    let spec = big_spec();
    let facts = NodeFacts::default();
    let p = plan(&spec, &facts);
    let free: f64 = p.node.per_cpu.iter().map(|c| c.free).sum();
    let max_free = p.node.per_cpu.iter().map(|c| c.free).fold(0.0, f64::max);
    eprintln!(
        "1000 workloads on 256 CPUs: {} admitted, {} rejected ({} with a defrag proposal); free {:.2} CPUs in total, at most {:.1}% on one CPU",
        p.workloads.len(),
        p.rejected.len(),
        p.rejected.iter().filter(|r| r.defrag.is_some()).count(),
        free,
        max_free * 100.0
    );
    c.bench_function("plan 1000 workloads on 256 CPUs", |b| b.iter(|| plan(std::hint::black_box(&spec), &facts)));

    let full = Planner::new(&spec, &facts);
    let small = newcomer("small", 5);
    let large = newcomer("large", 600);
    {
        let mut probe = full.clone();
        let ok = probe.admit(&small).is_ok();
        let big = probe.admit(&large).err().map(|r| r.defrag.is_some());
        eprintln!("on the full node: a 0.5% request admitted = {ok}; a 60% request refused with defrag proposal = {big:?}");
    }
    c.bench_function("admit one (fits) on a full 256-CPU node", |b| {
        b.iter_batched(|| full.clone(), |mut pl| { let ok = pl.admit(&small).is_ok(); (pl, ok) }, BatchSize::LargeInput)
    });
    c.bench_function("admit one (refused, defrag search) on a full 256-CPU node", |b| {
        b.iter_batched(|| full.clone(), |mut pl| { let refused = pl.admit(&large).is_err(); (pl, refused) }, BatchSize::LargeInput)
    });
}

criterion_group! {
    name = planner;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    targets = benches
}
criterion_main!(planner);
