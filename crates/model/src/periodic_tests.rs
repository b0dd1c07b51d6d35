use super::*;
use proptest::prelude::*;

const G: f64 = 10e-6;

fn task(period_units: usize, deadline_units: usize, exec: &[(usize, f64)]) -> PeriodicTask {
    let pts: Vec<(f64, f64)> = exec.iter().map(|&(c, p)| (c as f64 * G, p)).collect();
    PeriodicTask {
        period_s: period_units as f64 * G,
        deadline_s: deadline_units as f64 * G,
        execution: ExecutionTime::from_weights(&pts).unwrap(),
    }
}

fn res(q_units: usize, p_units: usize) -> Reservation {
    Reservation::new(q_units as f64 * G, p_units as f64 * G).unwrap()
}

fn exact() -> Analysis {
    Analysis { resolution_s: G, enforcement: Enforcement::Exact, truncation_target: 1e-12 }
}

fn tick(tick_units: usize) -> Analysis {
    Analysis { resolution_s: G, enforcement: Enforcement::Tick { tick_s: tick_units as f64 * G }, truncation_target: 1e-12 }
}

/// Steps +1 or −2 with probability 1/2 each (c ∈ {2, 5} units against a supply of 4): the backlog's
/// stationary law is geometric, P(v ≥ k) = σ^k, σ the root in (0,1) of σ = 1/2 + σ³/2, i.e.
/// σ = (√5 − 1)/2 (the probability of ever climbing one level; from −2 three levels are needed).
/// With Q = P every job is served at full speed: R = v + c, a miss when v + c > D = 6 units:
/// c = 2 needs v ≥ 5, c = 5 needs v ≥ 2, so P(miss) = (σ⁵ + σ²)/2.
#[test]
fn geometric_backlog_by_hand() {
    let sigma = (5f64.sqrt() - 1.0) / 2.0;
    let t = task(4, 6, &[(2, 0.5), (5, 0.5)]);
    let p = analyze(&t, &res(4, 4), &exact()).unwrap();
    assert!((p.utilization - 3.5 / 4.0).abs() < 1e-12);
    assert!((p.backlogged - sigma).abs() < 1e-9, "backlogged {} vs σ {sigma}", p.backlogged);
    let mean_backlog = sigma / (1.0 - sigma) * G;
    assert!((p.mean_backlog_s - mean_backlog).abs() < 1e-9 * G * 100.0, "{} vs {mean_backlog}", p.mean_backlog_s);
    let miss = (sigma.powi(5) + sigma.powi(2)) / 2.0;
    assert!((p.miss_ratio - miss).abs() < 1e-9, "miss {} vs {miss}", p.miss_ratio);
    assert!(p.truncation_error <= 1e-12);
    // The median: P(R ≤ 3 units) = P(c=2)·P(v ≤ 1) = (1 − σ²)/2 < 1/2 ≤ P(R ≤ 5 units).
    assert!((p.p50_s.unwrap() - 5.0 * G).abs() < 1e-12 || (p.p50_s.unwrap() - 4.0 * G).abs() < 1e-12);
}

/// Deterministic 3 units every 10, reservation 2 every 5 (N = 2, supply 4 ≥ 3: never a backlog).
/// Exact enforcement: two budgets, R = P + 1 = 6 units. Tick τ = 4 units: the job runs on past its
/// budget until the tick, so it completes at 3 when the credit u ≥ 1 (probability 3/4) and at
/// 6 − u otherwise; with D = 4 the miss ratio is P(u < 1) = 1/4.
#[test]
fn tick_credit_by_hand() {
    let t = task(10, 4, &[(3, 1.0)]);
    let e = analyze(&t, &res(2, 5), &exact()).unwrap();
    assert_eq!(e.backlogged, 0.0);
    assert_eq!(e.response, vec![(6.0 * G, 1.0)]);
    assert_eq!(e.miss_ratio, 1.0);
    let k = analyze(&t, &res(2, 5), &tick(4)).unwrap();
    assert!((k.miss_ratio - 0.25).abs() < 1e-12, "{}", k.miss_ratio);
    assert!((k.response_quantile(0.75).unwrap() - 3.0 * G).abs() < 1e-12);
}

#[test]
fn unstable_is_refused_with_the_runtime_needed() {
    let t = task(10, 30, &[(4, 0.5), (8, 0.5)]);
    let e = analyze(&t, &res(6, 10), &exact()).unwrap_err();
    match &e {
        ModelError::UnstablePeriodic { utilization, min_runtime_s, .. } => {
            assert!((utilization - 1.0).abs() < 1e-12);
            assert!((min_runtime_s - 6.0 * G).abs() < 1e-15);
        }
        other => panic!("expected UnstablePeriodic, got {other:?}"),
    }
    assert!(e.to_string().contains("unstable reservation"), "{e}");
    assert!(matches!(analyze(&t, &res(5, 10), &exact()), Err(ModelError::UnstablePeriodic { .. })));
}

#[test]
fn period_must_divide_and_times_sit_on_the_grid() {
    let t = task(10, 30, &[(4, 1.0)]);
    assert!(matches!(analyze(&t, &res(3, 4), &exact()), Err(ModelError::PeriodNotDivisor { .. })));
    assert!(matches!(analyze(&t, &res(8, 20), &exact()), Err(ModelError::PeriodNotDivisor { .. })));
    let off = Reservation::new(25e-6, 50e-6).unwrap();
    let a = Analysis { resolution_s: 20e-6, ..exact() };
    let t = PeriodicTask { period_s: 100e-6, deadline_s: 300e-6, execution: ExecutionTime::deterministic(10e-6).unwrap() };
    let e = analyze(&t, &off, &a).unwrap_err();
    assert!(matches!(e, ModelError::OffGrid { name: "reservation period P", .. }), "{e:?}");
}

#[test]
fn quantile_profiles_are_checked_and_conservative() {
    let d = ExecutionTime::from_quantiles(&[(0.5, 300e-6), (0.99, 450e-6), (1.0, 700e-6)], 16).unwrap();
    assert!((d.max() - 700e-6).abs() < 1e-15);
    // Nothing below the stated median; the median and p99 are not undercut.
    assert!(d.points()[0].0 >= 300e-6 - 1e-15);
    assert!(d.quantile(0.5) >= 300e-6 - 1e-15 && d.quantile(0.99) >= 450e-6 - 1e-15);
    assert!(d.quantile(0.99) <= 450e-6 + 1e-12);
    let no_max = ExecutionTime::from_quantiles(&[(0.5, 300e-6), (0.99, 450e-6)], 16).unwrap_err();
    assert!(no_max.to_string().contains("maximum"), "{no_max}");
    let decreasing = ExecutionTime::from_quantiles(&[(0.5, 500e-6), (0.99, 450e-6), (1.0, 700e-6)], 16).unwrap_err();
    assert!(decreasing.to_string().contains("must not decrease"), "{decreasing}");
    assert!(ExecutionTime::from_samples(&[]).is_err());
    assert!(ExecutionTime::from_samples(&[1e-4, -1e-4]).is_err());
}

#[test]
fn sizing_finds_the_smallest_grid_runtime() {
    // A vBS-like profile: 1 ms TTI, 3 ms HARQ budget, p50 300 µs, p99 450 µs, max 700 µs.
    let t = PeriodicTask {
        period_s: 1e-3,
        deadline_s: 3e-3,
        execution: ExecutionTime::from_quantiles(&[(0.5, 300e-6), (0.99, 450e-6), (1.0, 700e-6)], 16).unwrap(),
    };
    for a in [exact(), tick(400)] {
        let target = PeriodicTarget::MissRatio { max: 1e-3 };
        let s = size_periodic(&t, target, &default_periods(1e-3, G), &a).unwrap();
        assert!(s.prediction.miss_ratio + s.prediction.truncation_error <= 1e-3);
        assert!(s.slack >= 0.0);
        let below = analyze(&t, &Reservation::new(s.runtime_s - G, s.period_s).unwrap(), &a);
        match below {
            Ok(b) => assert!(b.miss_ratio + b.truncation_error > 1e-3, "{} also meets it", s.runtime_s - G),
            Err(ModelError::UnstablePeriodic { .. }) => {}
            Err(e) => panic!("{e}"),
        }
        assert!(s.bandwidth > t.execution.mean() / 1e-3);
        let r = size_periodic(&t, PeriodicTarget::ResponseQuantile { phi: 0.99, max_s: 2e-3 }, &[1e-3], &a).unwrap();
        assert!(r.prediction.p99_s.unwrap() <= 2e-3);
    }
    // A target no reservation meets: the deadline is below the minimum execution time.
    let tight = PeriodicTask { deadline_s: 200e-6, ..t };
    let e = size_periodic(&tight, PeriodicTarget::MissRatio { max: 1e-3 }, &[1e-3], &exact()).unwrap_err();
    assert!(matches!(e, ModelError::PeriodicTargetUnreachable { .. }), "{e:?}");
    assert!(size_periodic(&tight, PeriodicTarget::MissRatio { max: 0.0 }, &[1e-3], &exact()).is_err());
}

fn arb_exec() -> impl Strategy<Value = Vec<(usize, f64)>> {
    prop::collection::vec((1usize..40, 0.01f64..1.0), 1..8)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The solved distribution is stationary: one more step of the chain leaves it unchanged.
    #[test]
    fn solver_is_stationary(exec in arb_exec(), extra in 1usize..20) {
        let g: Vec<(usize, f64)> = {
            let t = task(10, 10, &exec);
            t.execution.points().iter().map(|&(v, p)| (ceil_units(v, G), p)).collect()
        };
        let mean: f64 = g.iter().map(|&(c, p)| c as f64 * p).sum();
        let s = mean.ceil() as usize + extra;
        let top = 300;
        let pi = stationary(&g, s, top);
        let mut next = vec![0.0; top + 1];
        for (v, &pv) in pi.iter().enumerate() {
            for &(c, p) in &g {
                next[(v + c).saturating_sub(s).min(top)] += pv * p;
            }
        }
        let diff: f64 = pi.iter().zip(&next).map(|(a, b)| (a - b).abs()).sum();
        prop_assert!(diff < 1e-9, "L1 change after one step {diff}");
        prop_assert!((pi.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    }

    /// A deterministic execution C ≤ Q with D ≥ P never misses (exact or tick enforcement).
    #[test]
    fn deterministic_within_budget_never_misses(c in 1usize..50, slack in 0usize..30, n in 1usize..4, dl in 0usize..40, tk in 1usize..500) {
        let q = c + slack;
        let p = q + slack + 1;
        let t = task(n * p, p + dl, &[(c, 1.0)]);
        for a in [exact(), tick(tk)] {
            let pr = analyze(&t, &res(q, p), &a).unwrap();
            prop_assert_eq!(pr.miss_ratio, 0.0);
            prop_assert_eq!(pr.backlogged, 0.0);
        }
    }

    /// More runtime never raises the miss ratio (beyond the truncation bounds) nor any percentile.
    #[test]
    fn more_runtime_never_hurts(exec in arb_exec(), n in 1usize..3, p in 10usize..30, dl in 5usize..60, dq in 1usize..10, tk in 0usize..300) {
        let t = task(n * p, dl, &exec);
        let mean = t.execution.mean() / G;
        let q1 = ((mean / n as f64).floor() as usize + 1).min(p);
        let q2 = (q1 + dq).min(p);
        let a = if tk == 0 { exact() } else { tick(tk) };
        let (Ok(a1), Ok(a2)) = (analyze(&t, &res(q1, p), &a), analyze(&t, &res(q2, p), &a)) else {
            // Only a state space too large (utilization right at 1) may refuse.
            return Ok(());
        };
        prop_assert!(a2.miss_ratio <= a1.miss_ratio + a1.truncation_error + a2.truncation_error + 1e-9,
            "Q {q1} → {q2}: miss {} → {}", a1.miss_ratio, a2.miss_ratio);
        for phi in [0.5, 0.9, 0.99] {
            if let (Some(r1), Some(r2)) = (a1.response_quantile(phi), a2.response_quantile(phi)) {
                prop_assert!(r2 <= r1 + 1e-12, "p{phi}: {r1} → {r2}");
            }
        }
    }

    /// Exact enforcement is never better than tick enforcement (the tick only adds credit).
    #[test]
    fn tick_credit_only_helps(exec in arb_exec(), p in 10usize..30, dl in 5usize..60, tk in 1usize..300) {
        let t = task(p, dl, &exec);
        let q = ((t.execution.mean() / G).floor() as usize + 2).min(p);
        if let (Ok(e), Ok(k)) = (analyze(&t, &res(q, p), &exact()), analyze(&t, &res(q, p), &tick(tk))) {
            prop_assert!(k.miss_ratio <= e.miss_ratio + 1e-9);
        }
    }
}

#[test]
fn profiles_round_trip_and_describe_the_task() {
    let p = Profile {
        period_s: 1e-3,
        deadline_s: 3e-3,
        execution: ProfileExecution::Quantiles {
            min_s: None,
            p50_s: Some(300e-6),
            p90_s: None,
            p99_s: Some(450e-6),
            p999_s: None,
            max_s: 700e-6,
        },
    };
    let json = serde_json::to_string(&p).unwrap();
    assert_eq!(serde_json::from_str::<Profile>(&json).unwrap(), p);
    let t = p.task().unwrap();
    assert!((t.execution.max() - 700e-6).abs() < 1e-15);
    assert!(t.execution.quantile(0.5) >= 300e-6 - 1e-15);
    // Measured samples become a histogram on the grid (rounded up), with their counts.
    let h = Profile::from_samples(1e-3, 3e-3, &[101e-6, 100e-6, 250e-6], 10e-6).unwrap();
    match &h.execution {
        ProfileExecution::Histogram(b) => {
            assert_eq!(b.len(), 3);
            assert!((b[0].0 - 100e-6).abs() < 1e-15 && b[0].1 == 1.0);
            assert!((b[1].0 - 110e-6).abs() < 1e-15 && b[1].1 == 1.0);
        }
        other => panic!("{other:?}"),
    }
    let t = h.task().unwrap();
    assert!((t.execution.mean() - (100e-6 + 110e-6 + 250e-6) / 3.0).abs() < 1e-12);
    assert!(Profile { period_s: 0.0, ..p.clone() }.task().is_err());
    assert!(serde_json::from_str::<Profile>(r#"{"period_s":1e-3,"deadline_s":3e-3,"execution":{"quantiles":{"p50_s":1e-4}}}"#).is_err());
}

#[test]
fn host_stalls_add_lost_supply_to_the_demand() {
    let t = task(100, 300, &[(40, 1.0)]);
    // Half the periods see no stall, half a 20-unit stall; at Q/P = 0.5 that is 10 units of budget.
    let s = t.with_host_stalls(&[0.0, 20.0 * G], 0.5, G).unwrap();
    let pts = s.execution.points();
    assert_eq!(pts.len(), 2);
    assert!((pts[0].0 - 40.0 * G).abs() < 1e-12 && (pts[0].1 - 0.5).abs() < 1e-12);
    assert!((pts[1].0 - 50.0 * G).abs() < 1e-12 && (pts[1].1 - 0.5).abs() < 1e-12);
    // No stalls at all: the task is unchanged.
    assert_eq!(t.with_host_stalls(&[0.0, 0.0], 0.5, G).unwrap().execution, t.execution);
    assert!(t.with_host_stalls(&[], 0.5, G).is_err());
    assert!(t.with_host_stalls(&[-1e-6], 0.5, G).is_err());
}
