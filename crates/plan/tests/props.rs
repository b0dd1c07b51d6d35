//! Properties of the planner: never above the cap, exclusive CPUs stay exclusive, admission is
//! monotone, same input → same plan, worst-fit takes the CPUs with the most free bandwidth, and a
//! defragmentation proposal really makes room.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use rtslice_plan::{plan, Allocation, NodeFacts, Plan, Planner};
use rtslice_spec::{BestEffort, Dedicated, Demand, FitPolicy, Isolation, Node, NodeCpus, Reservation, Spec, Workload};

fn reservation(name: String, permille: u64, count: u32, shield: bool) -> Workload {
    Workload {
        name,
        demand: Some(Demand::Reservation(Reservation {
            runtime: Duration::from_micros(permille * 100),
            period: Some(Duration::from_millis(100)),
            count: Some(count),
            cpus: None,
            reclaim: None,
        })),
        isolation: Isolation { shield, ..Isolation::default() },
        ..Workload::default()
    }
}

fn node(cpus: u32, housekeeping: u32, cap_pct: u32, policy: FitPolicy) -> Node {
    Node {
        cpus: NodeCpus::List((0..cpus).collect()),
        housekeeping: (0..housekeeping).collect(),
        cap: cap_pct as f64 / 100.0,
        policy,
        ..Node::default()
    }
}

fn policy() -> impl Strategy<Value = FitPolicy> {
    prop::sample::select(FitPolicy::ALL.to_vec())
}

/// Mixed specs: free and fixed reservations (some shielded), dedicated CPUs, best-effort.
fn mixed_spec() -> impl Strategy<Value = Spec> {
    (2u32..12, 0u32..2, 50u32..=100, policy(), prop::collection::vec((0u8..6, 1u64..=1000, 1u32..4, any::<prop::sample::Index>()), 0..14))
        .prop_map(|(n, hk, cap, pol, items)| {
            let mut ws = Vec::new();
            for (i, (kind, permille, count, at)) in items.into_iter().enumerate() {
                let name = format!("w{i}");
                let count = count.min(n - hk);
                ws.push(match kind {
                    0 | 1 => reservation(name, permille, count, false),
                    2 => reservation(name, permille, 1, true),
                    3 => {
                        let cpu = hk + at.index((n - hk) as usize) as u32;
                        let mut w = reservation(name, permille, 1, false);
                        if let Some(Demand::Reservation(r)) = &mut w.demand {
                            r.count = None;
                            r.cpus = Some(vec![cpu]);
                        }
                        w
                    }
                    4 => Workload {
                        name,
                        demand: Some(Demand::Dedicated(Dedicated { count: Some(count.min(2)), cpus: None })),
                        ..Workload::default()
                    },
                    _ => Workload { name, demand: Some(Demand::BestEffort(BestEffort::default())), ..Workload::default() },
                });
            }
            Spec { node: node(n, hk, cap, pol), workloads: ws, flavors: BTreeMap::new(), ..Spec::default() }
        })
}

/// Only free-choice reservations: study B's setting, where the order of admission is the spec order.
fn reservations_only(pol: Option<FitPolicy>) -> impl Strategy<Value = Spec> {
    let pol = match pol {
        Some(p) => Just(p).boxed(),
        None => policy().boxed(),
    };
    (1u32..10, 50u32..=100, pol, prop::collection::vec((1u64..=950, 1u32..4), 0..16)).prop_map(|(n, cap, pol, items)| {
        let ws = items
            .into_iter()
            .enumerate()
            .map(|(i, (permille, count))| reservation(format!("w{i}"), permille, count.min(n), false))
            .collect();
        Spec { node: node(n, 0, cap, pol), workloads: ws, ..Spec::default() }
    })
}

fn check_invariants(spec: &Spec, p: &Plan) -> Result<(), TestCaseError> {
    let cap = spec.node.cap;
    for c in &p.node.per_cpu {
        let sum: f64 = c.by.iter().map(|s| s.bandwidth).sum();
        prop_assert!((sum - c.reserved).abs() < 1e-9, "CPU {}: shares {} != reserved {}", c.cpu, sum, c.reserved);
        match &c.exclusive_to {
            None => prop_assert!(c.reserved <= cap + 1e-9, "CPU {} reserved {} above cap {}", c.cpu, c.reserved, cap),
            Some(owner) => {
                prop_assert!(c.by.iter().all(|s| &s.workload == owner), "exclusive CPU {} shared: {:?}", c.cpu, c.by);
                prop_assert!(c.reserved <= 1.0 + 1e-9);
            }
        }
        if c.housekeeping {
            prop_assert!(c.by.is_empty() && c.exclusive_to.is_none(), "housekeeping CPU {} used", c.cpu);
        }
    }
    for w in &p.workloads {
        for &cpu in &w.cpus {
            let c = p.node.per_cpu.iter().find(|c| c.cpu == cpu).unwrap();
            prop_assert!(!c.housekeeping, "{} on housekeeping CPU {}", w.name, cpu);
            if let Some(owner) = &c.exclusive_to {
                prop_assert_eq!(owner, &w.name, "{} runs on CPU {} exclusive to {}", w.name, cpu, owner);
            }
        }
        if let Allocation::Reservation { per_cpu, .. } = &w.allocation {
            let mut cpus: Vec<u32> = per_cpu.iter().map(|r| r.cpu).collect();
            cpus.sort_unstable();
            prop_assert_eq!(&cpus, &w.cpus);
            cpus.dedup();
            prop_assert_eq!(cpus.len(), per_cpu.len(), "one share per CPU");
        }
    }
    prop_assert_eq!(p.workloads.len() + p.rejected.len(), spec.workloads.len());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn never_above_the_cap_and_exclusive_stays_exclusive(spec in mixed_spec()) {
        let p = plan(&spec, &NodeFacts::default());
        check_invariants(&spec, &p)?;
    }

    #[test]
    fn same_input_same_plan(spec in mixed_spec()) {
        let a = plan(&spec, &NodeFacts::default());
        let b = plan(&spec.clone(), &NodeFacts::default());
        prop_assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap());
    }

    /// Removing a workload never makes another fail, under worst-fit (the default). Best-fit and
    /// first-fit pack, and packing heuristics are not monotone: removing a small early workload can
    /// let a later one pack where a third one needed room (docs/plan.md has the example).
    #[test]
    fn admission_is_monotone(spec in mixed_spec(), drop in any::<prop::sample::Index>()) {
        let spec = Spec { node: Node { policy: FitPolicy::WorstFit, ..spec.node.clone() }, ..spec };
        // Rejected workloads consume nothing, so the admitted ones alone plan the same way.
        let first = plan(&spec, &NodeFacts::default());
        let spec = Spec { workloads: spec.workloads.iter().filter(|w| first.workload(&w.name).is_some()).cloned().collect(), ..spec };
        prop_assume!(!spec.workloads.is_empty());
        let p = plan(&spec, &NodeFacts::default());
        prop_assert!(p.rejected.is_empty(), "admitted workloads alone: {:?}", p.rejected);
        let mut smaller = spec.clone();
        let gone = smaller.workloads.remove(drop.index(spec.workloads.len()));
        let q = plan(&smaller, &NodeFacts::default());
        prop_assert!(q.rejected.is_empty(), "removing {} made {:?} fail", gone.name, q.rejected);
    }

    /// Study B's setting (free reservations in arrival order, worst-fit): removing any workload never
    /// makes a workload admitted before the first rejection fail.
    #[test]
    fn worst_fit_prefix_is_monotone(spec in reservations_only(Some(FitPolicy::WorstFit)), drop in any::<prop::sample::Index>()) {
        prop_assume!(!spec.workloads.is_empty());
        let p = plan(&spec, &NodeFacts::default());
        let first_rejected = spec.workloads.iter().position(|w| p.rejection(&w.name).is_some()).unwrap_or(spec.workloads.len());
        let mut smaller = spec.clone();
        let gone = smaller.workloads.remove(drop.index(spec.workloads.len()));
        let q = plan(&smaller, &NodeFacts::default());
        for w in &spec.workloads[..first_rejected] {
            if w.name != gone.name {
                prop_assert!(q.workload(&w.name).is_some(), "removing {} made {} fail: {:?}", gone.name, w.name, q.rejection(&w.name));
            }
        }
    }

    /// Each worst-fit choice takes CPUs with the most free bandwidth at its arrival (ties: lowest id).
    #[test]
    fn worst_fit_choice_is_maximal(spec in reservations_only(Some(FitPolicy::WorstFit))) {
        let p = plan(&spec, &NodeFacts::default());
        for (i, w) in spec.workloads.iter().enumerate() {
            let Some(got) = p.workload(&w.name) else { continue };
            let before = plan(&Spec { workloads: spec.workloads[..i].to_vec(), ..spec.clone() }, &NodeFacts::default());
            let free = |cpu: u32| before.node.per_cpu.iter().find(|c| c.cpu == cpu).unwrap().free;
            let chosen_min = got.cpus.iter().map(|&c| free(c)).fold(f64::INFINITY, f64::min);
            for c in &before.node.per_cpu {
                if !got.cpus.contains(&c.cpu) {
                    prop_assert!(
                        c.free < chosen_min || (c.free == chosen_min && got.cpus.iter().all(|&x| free(x) > c.free || x < c.cpu)),
                        "{}: left CPU {} with {} free but took {:?} (min {})", w.name, c.cpu, c.free, got.cpus, chosen_min
                    );
                }
            }
        }
    }

    /// Admitting the last arrival online gives the same plan as planning the whole spec.
    #[test]
    fn online_admission_matches_batch(spec in reservations_only(None)) {
        prop_assume!(!spec.workloads.is_empty());
        let mut head = spec.clone();
        let last = head.workloads.pop().unwrap();
        let mut planner = Planner::new(&head, &NodeFacts::default());
        let _ = planner.admit(&last);
        let (online, batch) = (planner.plan(), plan(&spec, &NodeFacts::default()));
        prop_assert_eq!(&online.workloads, &batch.workloads);
        prop_assert_eq!(&online.node, &batch.node);
        let names = |p: &Plan| p.rejected.iter().map(|r| r.name.clone()).collect::<Vec<_>>();
        prop_assert_eq!(names(&online), names(&batch));
        // Earlier rejections' defrag proposals were made before the last arrival (the batch makes
        // them after), so only the last one's must agree.
        prop_assert_eq!(online.rejection(&last.name), batch.rejection(&last.name));
    }

    /// Applying a proposed defragmentation makes the rejected request fit, breaks no cap, and keeps
    /// each workload's shares on distinct CPUs.
    #[test]
    fn defragmentation_proposals_make_room(spec in reservations_only(None)) {
        let p = plan(&spec, &NodeFacts::default());
        let cap = spec.node.cap;
        for r in &p.rejected {
            let Some(d) = &r.defrag else { continue };
            let mut free: BTreeMap<u32, f64> = p.node.per_cpu.iter().map(|c| (c.cpu, c.free)).collect();
            let mut placed: BTreeMap<String, Vec<u32>> = p.workloads.iter().map(|w| (w.name.clone(), w.cpus.clone())).collect();
            for m in &d.moves {
                let cpus = placed.get_mut(&m.workload).unwrap();
                prop_assert!(cpus.contains(&m.from_cpu) && !cpus.contains(&m.to_cpu), "bad move {:?} for {:?}", m, cpus);
                cpus.retain(|&c| c != m.from_cpu);
                cpus.push(m.to_cpu);
                *free.get_mut(&m.from_cpu).unwrap() += m.bandwidth;
                *free.get_mut(&m.to_cpu).unwrap() -= m.bandwidth;
                prop_assert!(free[&m.to_cpu] >= -1e-9, "move {:?} overfills CPU {} (cap {})", m, m.to_cpu, cap);
            }
            let w = spec.workloads.iter().find(|w| w.name == r.name).unwrap();
            let Some(Demand::Reservation(res)) = &w.demand else { unreachable!() };
            let b = res.runtime.as_secs_f64() / res.period.unwrap().as_secs_f64();
            prop_assert_eq!(d.then_cpus.len(), res.count.unwrap() as usize);
            for c in &d.then_cpus {
                prop_assert!(free[c] + 1e-9 >= b, "after the moves CPU {} has {} free, needs {}", c, free[c], b);
            }
        }
    }
}

#[test]
fn defrag_is_proposed_only_for_fragmentation() {
    // Two CPUs with 50% each taken: a 60% request is blocked by fragmentation only if the total free
    // would fit it; with cap 95% total free is 90% ≥ 60%, and one move (not possible: each CPU holds
    // one 50% share that fits nowhere else) → no proposal. A 30% + 30% layout can be merged instead.
    let mk = |shares: &[(u64, u32)], ask: u64| Spec {
        node: node(2, 0, 95, FitPolicy::WorstFit),
        workloads: shares
            .iter()
            .enumerate()
            .map(|(i, &(pm, c))| reservation(format!("w{i}"), pm, c, false))
            .chain([reservation("ask".into(), ask, 1, false)])
            .collect(),
        ..Spec::default()
    };
    let p = plan(&mk(&[(500, 1), (500, 1)], 600), &NodeFacts::default());
    assert!(p.rejection("ask").unwrap().defrag.is_none(), "{p:?}");
    let p = plan(&mk(&[(300, 1), (300, 1)], 700), &NodeFacts::default());
    let d = p.rejection("ask").unwrap().defrag.clone().expect("moving one 30% share frees a CPU");
    assert_eq!(d.moves.len(), 1);
    // Not enough bandwidth anywhere: no proposal.
    let p = plan(&mk(&[(900, 2)], 600), &NodeFacts::default());
    assert!(p.rejection("ask").unwrap().defrag.is_none());
}

#[test]
fn policies_differ_as_documented() {
    let spec = |pol| Spec {
        node: node(3, 0, 95, pol),
        workloads: vec![reservation("a".into(), 500, 1, false), reservation("b".into(), 200, 1, false)],
        ..Spec::default()
    };
    let cpus = |pol| {
        let p = plan(&spec(pol), &NodeFacts::default());
        (p.workload("a").unwrap().cpus.clone(), p.workload("b").unwrap().cpus.clone())
    };
    assert_eq!(cpus(FitPolicy::WorstFit), (vec![0], vec![1]), "worst-fit spreads");
    assert_eq!(cpus(FitPolicy::BestFit), (vec![0], vec![0]), "best-fit packs");
    assert_eq!(cpus(FitPolicy::FirstFit), (vec![0], vec![0]), "first-fit takes the lowest that fits");
}

#[test]
fn discovered_cpus_come_from_the_facts() {
    let spec = Spec { workloads: vec![reservation("a".into(), 500, 2, false)], ..Spec::default() };
    let p = plan(&spec, &NodeFacts::with_cpus(4));
    assert_eq!(p.node.cpus, vec![0, 1, 2, 3]);
    assert_eq!(p.workload("a").unwrap().cpus, vec![0, 1]);
    let p = plan(&spec, &NodeFacts::default());
    assert!(p.rejection("a").unwrap().reason.contains("no CPUs"));
}

// The one budget split (Reservation::split): shares from integer weights, so they sum to 1 up to
// float rounding; runtimes and periods in the kernel's ranges.
proptest! {
    #[test]
    fn budget_split_never_exceeds_nor_undercounts_the_whole(
        runtime_us in 1u64..=1_000_000,
        period_us in 1_000u64..=1_000_000,
        cpus in 1u32..=64,
        weights in prop::collection::vec(1u32..=1000, 1..8),
        partial in any::<bool>(),
    ) {
        let runtime_us = runtime_us.min(period_us);
        let r = rtslice_plan::Reservation::from_micros(runtime_us, period_us);
        let total: u32 = weights.iter().sum::<u32>() + if partial { weights[0] } else { 0 };
        let shares: Vec<f64> = weights.iter().map(|&w| w as f64 / total as f64).collect();
        let parts = r.split(cpus, &shares, r.period);
        prop_assert_eq!(parts.len(), shares.len());
        let whole = r.runtime.as_nanos() * cpus as u128;
        let sum: u128 = parts.iter().map(|p| p.as_nanos()).sum();
        prop_assert!(sum <= whole, "parts {} > whole {}", sum, whole);
        // Each part loses less than a nanosecond to rounding down (and float error stays far below).
        let wanted = whole as f64 * shares.iter().sum::<f64>();
        prop_assert!(sum as f64 >= wanted - parts.len() as f64 - 1e-6 * wanted, "parts {} under-count {}", sum, wanted);
        prop_assert_eq!(parts, r.split(cpus, &shares, r.period), "deterministic");
    }

    #[test]
    fn budget_split_at_another_period_keeps_the_bandwidth(
        runtime_us in 10u64..=100_000,
        period_us in 100_000u64..=1_000_000,
        other_us in 100u64..=4_000_000,
    ) {
        let r = rtslice_plan::Reservation::from_micros(runtime_us, period_us);
        let other = std::time::Duration::from_micros(other_us);
        let part = r.split(1, &[1.0], other)[0];
        let exact = runtime_us as u128 * other_us as u128 * 1000 / period_us as u128;
        prop_assert!(part.as_nanos() <= exact && part.as_nanos() + 2 >= exact, "{} vs {}", part.as_nanos(), exact);
    }
}

proptest! {
    /// Rules at periods of their own: each keeps its share's bandwidth (never more, less than a
    /// nanosecond per period lost), none above its period, and rules at the reservation's period get
    /// exactly what the plain split gives.
    #[test]
    fn deadline_budgets_at_own_periods_keep_each_share(
        runtime_us in 100u64..=1_000_000,
        period_us in 1_000u64..=1_000_000,
        cpus in 1u32..=8,
        own in prop::collection::vec(prop::option::of(100u64..=2_000_000), 1..6),
    ) {
        let runtime_us = runtime_us.min(period_us);
        let r = rtslice_plan::Reservation::from_micros(runtime_us, period_us);
        let rules: Vec<(Option<f64>, Option<std::time::Duration>)> = own.iter().map(|o| (None, o.map(std::time::Duration::from_micros))).collect();
        let budgets = rtslice_plan::kernel::deadline_budgets(r, cpus, &rules);
        let plain = r.split(cpus, &vec![1.0 / rules.len() as f64; rules.len()], r.period);
        let mut bw = 0f64;
        for ((b, (_, o)), p) in budgets.iter().zip(&rules).zip(&plain) {
            let period = o.unwrap_or(r.period).as_nanos() as u64;
            prop_assert_eq!(b.period_ns, period);
            prop_assert!(b.runtime_ns <= b.period_ns);
            let want = p.as_nanos() as f64 / r.period.as_nanos() as f64;
            let got = b.runtime_ns as f64 / b.period_ns as f64;
            if b.capped {
                prop_assert_eq!(b.runtime_ns, b.period_ns);
            } else {
                prop_assert!(got <= want + 1e-12 && got >= want - 1.0 / b.period_ns as f64, "{} vs {}", got, want);
            }
            if o.is_none() {
                prop_assert_eq!(b.runtime_ns as u128, p.as_nanos().min(b.period_ns as u128));
            }
            bw += got;
        }
        prop_assert!(bw <= r.runtime.as_nanos() as f64 * cpus as f64 / r.period.as_nanos() as f64 + 1e-9);
    }
}

proptest! {
    /// A reservation's CFS pool: the kernel takes its quota and period (both 1 ms–1 s), its
    /// bandwidth is never more than its share of the reservation (less than a microsecond of quota
    /// lost), a default period is a whole multiple of the reservation's, and the pool and the
    /// real-time part the rules split never add up to more than the reservation.
    #[test]
    fn a_cfs_pool_is_what_the_kernel_takes_and_never_more_than_its_share(
        runtime_us in 100u64..=1_000_000,
        period_us in 100u64..=1_000_000,
        cpus in 1u32..=8,
        share_pct in 1u32..=99,
        own in prop::option::of(1_000u64..=1_000_000),
    ) {
        let runtime_us = runtime_us.min(period_us);
        let r = rtslice_plan::Reservation::from_micros(runtime_us, period_us);
        let share = f64::from(share_pct) / 100.0;
        let bw = r.bandwidth() * share * f64::from(cpus);
        match rtslice_plan::CfsPool::of(r, cpus, share, own.map(Duration::from_micros)) {
            Ok(p) => {
                let (q, per) = (p.quota.as_micros() as f64, p.period.as_micros() as f64);
                prop_assert!(p.quota >= Duration::from_millis(1) && p.period >= Duration::from_millis(1) && p.period <= Duration::from_secs(1));
                prop_assert!(q <= bw * per + 1e-6 && q >= bw * per - 1.0, "quota {} every {} for {}", q, per, bw);
                match own {
                    Some(o) => prop_assert_eq!(p.period.as_micros() as u64, o),
                    None => prop_assert_eq!(p.period.as_micros() as u64 % period_us, 0),
                }
                let w = rtslice_plan::WorkloadPlan {
                    allocation: Allocation::Reservation { reservation: r, per_cpu: Vec::new() },
                    pool: Some(p),
                    ..Default::default()
                };
                let rt = w.realtime_reservation().unwrap();
                prop_assert_eq!(rt.period, r.period);
                // Per CPU per reservation period: the real-time part plus the pool's bandwidth.
                prop_assert!(rt.runtime_us() as f64 + q / per * period_us as f64 / f64::from(cpus) <= runtime_us as f64 + 1e-6);
            }
            Err(e) => {
                // Only a quota below the kernel's 1 ms at the longest period that may be chosen.
                let longest = own.map_or(((1_000_000 / period_us) * period_us) as f64, |o| o as f64);
                prop_assert!((bw * longest).floor() < 1000.0 + 1e-6, "{}", e);
                prop_assert!(e.contains("longer `period` or a larger `share`"), "{}", e);
            }
        }
    }
}

#[test]
fn cfs_pool_examples() {
    // A 1 ms TTI's 900 µs, a quarter of it as CFS bandwidth: 225 µs per ms, so 5 ms gives 1125 µs.
    let r = rtslice_plan::Reservation::from_micros(900, 1000);
    let p = rtslice_plan::CfsPool::of(r, 1, 0.25, None).unwrap();
    assert_eq!((p.quota_us(), p.period_us()), (1125, 5000));
    // Two CPUs: the quota covers both.
    let p = rtslice_plan::CfsPool::of(r, 2, 0.25, Some(Duration::from_millis(10))).unwrap();
    assert_eq!((p.quota_us(), p.period_us()), (4500, 10_000));
    let w = rtslice_plan::WorkloadPlan {
        allocation: Allocation::Reservation { reservation: r, per_cpu: Vec::new() },
        pool: Some(p),
        ..Default::default()
    };
    assert_eq!(w.realtime_reservation(), Some(rtslice_plan::Reservation::from_micros(675, 1000)));
    // 0.1 % of a CPU cannot reach the kernel's 1 ms quota within 1 s.
    let tiny = rtslice_plan::Reservation::from_micros(100, 100_000);
    assert!(rtslice_plan::CfsPool::of(tiny, 1, 0.01, None).is_err());
}

#[test]
fn budget_split_examples() {
    let r = rtslice_plan::Reservation::from_micros(300, 1000);
    // 300 µs on each of 2 CPUs: half and a quarter of 600 µs.
    assert_eq!(
        r.split(2, &[0.5, 0.25], r.period),
        vec![std::time::Duration::from_micros(300), std::time::Duration::from_micros(150)]
    );
    // Thirds of 1000 ns lose at most a nanosecond each, never gain.
    let t = rtslice_plan::Reservation::new(std::time::Duration::from_nanos(1000), std::time::Duration::from_nanos(3000));
    let parts: u128 = t.split(1, &[1.0 / 3.0; 3], t.period).iter().map(|d| d.as_nanos()).sum();
    assert!((997..=1000).contains(&parts), "{parts}");
}

// ---- cache allocation (resctrl CAT): ways accounted per L3 like bandwidth per CPU ----

fn cache_node(ways: u32, min_ways: u32, shareable: u64, closids: u32) -> rtslice_spec::NodeCache {
    rtslice_spec::NodeCache {
        ways,
        min_ways,
        closids,
        shareable_mask: shareable & ((1u64 << ways) - 1),
        domains: vec![
            rtslice_spec::CacheDomain { id: 0, cpus: vec![0, 1, 2] },
            rtslice_spec::CacheDomain { id: 1, cpus: vec![3, 4, 5] },
        ],
        mba: None,
    }
}

/// Specs where workloads ask for ways (some as shares) with reservations or best effort.
fn cache_spec() -> impl Strategy<Value = Spec> {
    (4u32..=20, 1u32..=3, 0u64..16, 2u32..=8, prop::collection::vec((1u32..8, any::<bool>(), 1u32..=3, any::<bool>()), 0..10))
        .prop_map(|(ways, min, shareable_seed, closids, items)| {
            // Shareable ways, as on real parts, are a run at the top or none.
            let shareable = if shareable_seed % 3 == 0 { 0 } else { ((1u64 << (shareable_seed % 3)) - 1) << (ways - 2) };
            let mut spec = Spec { node: node(6, 0, 95, FitPolicy::WorstFit), ..Spec::default() };
            spec.node.cache = Some(cache_node(ways, min, shareable, closids));
            for (i, (n, share, count, rt)) in items.into_iter().enumerate() {
                let mut w = if rt { reservation(format!("c{i}"), 100, count, false) } else { Workload { name: format!("c{i}"), ..Workload::default() } };
                w.cache = Some(if share {
                    rtslice_spec::CacheRequest::Share(n as f64 / 10.0)
                } else {
                    rtslice_spec::CacheRequest::Ways(n)
                });
                spec.workloads.push(w);
            }
            spec
        })
}

proptest! {
    /// What the node service relies on: the running workloads pinned as they hold (CPUs, and ways as
    /// `cache.masks`), re-planned in another order and with one of them gone, keep exactly their
    /// ways; a newcomer asking for as many ways as the gone one held fits, in ways no pinned
    /// workload holds.
    #[test]
    fn pinned_ways_come_back_exactly_in_any_order_and_a_newcomer_gets_only_free_ones(spec in cache_spec(), gone_seed in any::<usize>()) {
        let p = plan(&spec, &NodeFacts::default());
        let holding: Vec<&rtslice_plan::WorkloadPlan> = p.workloads.iter().filter(|w| w.cache.as_ref().is_some_and(|c| c.ways > 0)).collect();
        prop_assume!(!holding.is_empty());
        let gone = gone_seed % holding.len();
        let mut pinned = Spec { node: spec.node.clone(), ..Spec::default() };
        for (k, wp) in holding.iter().enumerate().rev() {
            if k == gone {
                continue;
            }
            let mut w = spec.workloads.iter().find(|w| w.name == wp.name).unwrap().clone();
            w.demand = Some(w.demand.clone().unwrap_or(Demand::BestEffort(BestEffort::default())).pinned_to(&wp.cpus));
            w.cache = Some(rtslice_spec::CacheRequest::Masks(wp.cache.as_ref().unwrap().l3.iter().map(|d| (d.id, d.mask)).collect()));
            pinned.workloads.push(w);
        }
        let mut planner = Planner::new(&pinned, &NodeFacts::default());
        let q = planner.plan();
        prop_assert!(q.rejected.is_empty(), "pinned workloads refused: {:?}", q.rejected);
        for w in &q.workloads {
            let before = holding.iter().find(|h| h.name == w.name).unwrap();
            prop_assert_eq!(&w.cache.as_ref().unwrap().l3, &before.cache.as_ref().unwrap().l3, "{} moved", &w.name);
        }
        let freed = holding[gone];
        let newcomer = Workload {
            name: "newcomer".into(),
            demand: Some(Demand::BestEffort(BestEffort { cpus: Some(freed.cpus.clone()), ..BestEffort::default() })),
            cache: Some(rtslice_spec::CacheRequest::Ways(freed.cache.as_ref().unwrap().ways)),
            ..Workload::default()
        };
        // The freed ways are always a valid grant of that size (the default keeps what it had).
        let got = match planner.admit(&newcomer) {
            Ok(w) => w.cache.clone().unwrap(),
            Err(r) => return Err(TestCaseError::fail(format!("the newcomer was refused the room {} left: {}", freed.name, r.reason))),
        };
        for w in &q.workloads {
            for (a, b) in got.l3.iter().flat_map(|g| w.cache.as_ref().unwrap().l3.iter().filter(move |h| h.id == g.id).map(move |h| (g.mask, h.mask))) {
                prop_assert_eq!(a & b, 0, "the newcomer got ways {:x} of {}'s {:x}", a, &w.name, b);
            }
        }
    }

    #[test]
    fn cache_masks_are_contiguous_exclusive_within_cbm_and_never_overcounted(spec in cache_spec()) {
        let p = plan(&spec, &NodeFacts::default());
        let c = p.cache.as_ref().expect("the node declares its cache");
        prop_assert!(c.closids_used <= c.closids, "{} CLOSIDs used of {}", c.closids_used, c.closids);
        for d in &c.domains {
            let mut seen = 0u64;
            let mut counted = 0u32;
            for s in &d.by {
                prop_assert!(rtslice_plan::contiguous(s.mask), "{}: {:x} is not one run", s.workload, s.mask);
                prop_assert_eq!(s.mask & !c.cbm_mask, 0, "{} outside cbm_mask", s.workload);
                prop_assert_eq!(s.mask & c.shareable_mask, 0, "{} holds a shareable way", s.workload);
                prop_assert_eq!(seen & s.mask, 0, "{} overlaps another exclusive grant", s.workload);
                seen |= s.mask;
                counted += s.mask.count_ones();
            }
            prop_assert!(counted <= c.ways);
            prop_assert_eq!(counted, d.reserved_ways);
            prop_assert!(rtslice_plan::contiguous(d.default_mask), "default {:x} is not one run", d.default_mask);
            prop_assert!(d.default_mask.count_ones() >= c.min_ways);
            prop_assert_eq!(d.default_mask | seen, c.cbm_mask, "every way is the default's or a workload's");
            prop_assert_eq!(d.default_mask & seen, 0);
        }
        // Every admitted workload that asked got its ways in each L3 its CPUs touch.
        for w in p.workloads.iter() {
            let got = w.cache.as_ref().expect("asked for cache and was admitted");
            let touched: Vec<u32> = c.domains.iter().filter(|d| d.cpus.iter().any(|x| w.cpus.contains(x))).map(|d| d.id).collect();
            prop_assert_eq!(got.l3.iter().map(|m| m.id).collect::<Vec<_>>(), touched);
            for m in &got.l3 {
                prop_assert_eq!(m.mask.count_ones(), got.ways);
            }
        }
        // Refusals for cache say so and what to do.
        for r in p.rejected.iter().filter(|r| r.reason.contains("way") || r.reason.contains("CLOSID")) {
            prop_assert!(r.reason.contains("ask for") || r.reason.contains("drop"), "{}", r.reason);
        }
    }
}

proptest! {
    /// Whatever the demand, the agent's parts never sum to more than the pool and none exceeds the cap.
    #[test]
    fn demand_split_stays_within_the_pool(total in 0u64..4_000_000, pairs in proptest::collection::vec((0u64..10_000_000_000, 1u64..2_000_000), 1..16)) {
        let (demand, caps): (Vec<u64>, Vec<u64>) = pairs.into_iter().unzip();
        let parts = rtslice_plan::shares::split_by_demand(total, &caps, &demand);
        prop_assert_eq!(parts.len(), demand.len());
        prop_assert!(parts.iter().sum::<u64>() <= total);
        prop_assert!(parts.iter().zip(&caps).all(|(p, c)| p <= c));
    }

    /// The parts `plan --usage` shows never give a workload's threads more than its rules hold:
    /// each deadline rule's fixed parts sum to at most its runtime, the reclaiming pool's to at most
    /// the pool; a thread is short exactly when its part is below its use.
    #[test]
    fn thread_parts_never_exceed_the_rules(
        rules in proptest::collection::vec((100u64..5_000, 1u64..4, any::<bool>()), 1..4),
        used in proptest::collection::vec((0usize..4, 0.0f64..1.0), 0..12),
    ) {
        use rtslice_plan::kernel::{KernelThread, KernelWorkload};
        use rtslice_plan::shares::{thread_shares, Part, ThreadUse};
        use rtslice_plan::{Mechanism, ThreadSched};
        let period_of = |m: u64| Duration::from_millis(m * 5);
        let threads: Vec<KernelThread> = rules.iter().enumerate().map(|(i, &(rt_us, m, reclaim))| KernelThread {
            pattern: format!("^r{i}-"),
            sched: ThreadSched::Deadline { runtime: Duration::from_micros(rt_us), deadline: period_of(m), period: period_of(m) },
            flags: if reclaim { vec!["reclaim".into()] } else { vec![] },
            shared: true,
        }).collect();
        let k = KernelWorkload { name: "w".into(), partition: true, group_budget: None, cfs_quota: None, threads: threads.clone(), budget: String::new() };
        let used: Vec<ThreadUse> = used.iter().enumerate().map(|(j, &(r, cpu))| ThreadUse { name: format!("r{r}-{j}"), cpu }).collect();
        let s = thread_shares(&k, Mechanism::Deadline, 1, &used).unwrap();
        prop_assert_eq!(s.threads.len(), used.len());
        let bw = |t: &KernelThread| match t.sched { ThreadSched::Deadline { runtime, period, .. } => runtime.as_secs_f64() / period.as_secs_f64(), _ => 0.0 };
        let mut pool_holds = 0.0;
        let mut pool_gets = 0.0;
        for (i, t) in threads.iter().enumerate() {
            let pattern = format!("^r{i}-");
            let mine: Vec<f64> = s.threads.iter().filter(|x| x.rule.as_deref() == Some(pattern.as_str())).filter_map(|x| x.part.share()).collect();
            if t.flags.is_empty() {
                prop_assert!(mine.iter().sum::<f64>() <= bw(t) + 1e-9, "rule {} parts {:?} over {}", i, mine, bw(t));
            } else if !mine.is_empty() {
                pool_holds += bw(t);
                pool_gets += mine.iter().sum::<f64>();
            }
        }
        prop_assert!(pool_gets <= pool_holds + 1e-6, "pool parts {} over {}", pool_gets, pool_holds);
        for t in &s.threads {
            prop_assert_eq!(t.short, t.part.share().is_some_and(|p| p + 1e-6 < t.used));
            prop_assert!(!matches!(t.part, Part::Unbounded) || t.rule.is_none());
        }
    }
}

proptest! {
    /// The kernel admission's fixed point stays on the safe side of exact arithmetic, and within a
    /// part per billion per term of it: what it admits never exceeds the cap by more than the cap's
    /// own rounding, and what fits with a margin of one part per billion per term is admitted.
    #[test]
    fn kernel_admission_is_exact_to_a_part_per_billion_per_term(
        parts in prop::collection::vec((1u64..=1_000_000, 1u64..=1_000_000), 0..12),
        cap_ppm in 0u64..=1_000_000,
        cpus in 1u32..=8,
    ) {
        use rtslice_plan::kernel::admission;
        let parts: Vec<(Duration, Duration)> =
            parts.into_iter().map(|(r, p)| (Duration::from_micros(r.min(p)), Duration::from_micros(p))).collect();
        let cap = cap_ppm as f64 / 1e6;
        let exact: f64 = parts.iter().map(|(r, p)| r.as_nanos() as f64 / p.as_nanos() as f64).sum();
        let offered = cap * cpus as f64;
        let slack = 1e-9 * (parts.len() as f64 + 1.0) + 1e-12 * exact;
        match admission::fits(parts.iter().copied(), cap, cpus) {
            Ok(()) => prop_assert!(exact <= offered + slack, "admitted {exact} on {offered}"),
            Err(x) => {
                prop_assert!(exact + slack > offered, "refused {exact} on {offered}");
                prop_assert!(x.need >= exact - slack && x.need > x.offered);
            }
        }
    }
}
