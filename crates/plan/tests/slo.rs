//! SLO sizing in the planner: the reservation sized for a workload's SLO meets it under the model,
//! is never below the mean demand, grows as the target tightens, and a reservation given next to an
//! SLO is checked (admitted when it meets it, refused with the sized runtime when it does not).

use std::time::Duration;

use proptest::prelude::*;
use rtslice_model::periodic::{analyze, Analysis, Enforcement};
use rtslice_plan::{model_profile, plan, plan_sized, Allocation, NodeFacts, Plan, SizingBasis, SizingFacts, WorkloadPlan};
use rtslice_spec::{Demand, ExecutionQuantiles, Node, NodeCpus, Profile, Slo, Spec, Workload};

fn us(x: u64) -> Duration {
    Duration::from_micros(x)
}

fn profile(period_us: u64, deadline_us: u64, p50: u64, p99: u64, max: u64) -> Profile {
    Profile {
        period: us(period_us),
        deadline: us(deadline_us),
        execution: ExecutionQuantiles { min: None, p50: Some(us(p50)), p90: None, p99: Some(us(p99)), p999: None, max: us(max) },
        histogram: Vec::new(),
        source: None,
    }
}

fn spec_of(w: Workload) -> Spec {
    Spec { node: Node { cpus: NodeCpus::List(vec![0, 1]), housekeeping: vec![0], ..Node::default() }, workloads: vec![w], ..Spec::default() }
}

fn slo_workload(slo: Slo, p: Profile) -> Workload {
    Workload { slo: Some(slo), profile: Some(p), ..Workload::new("vbs1") }
}

fn admitted(p: &Plan) -> Option<&WorkloadPlan> {
    p.workloads.iter().find(|w| w.name == "vbs1")
}

fn reservation_of(w: &WorkloadPlan) -> (Duration, Duration) {
    match &w.allocation {
        Allocation::Reservation { reservation, .. } => (reservation.runtime, reservation.period),
        other => panic!("expected a reservation, got {other:?}"),
    }
}

/// A vBS-like profile: period 1 ms, deadline 1–3 ms, p50 ≤ p99 ≤ max up to 700 µs (10 µs grid).
fn profiles() -> impl Strategy<Value = Profile> {
    (1u64..=3, 5u64..=40, 0u64..=15, 0u64..=15).prop_map(|(d, p50, dp99, dmax)| {
        let (p50, p99) = (p50 * 10, (p50 + dp99) * 10);
        profile(1000, d * 1000, p50, p99, p99 + dmax * 10)
    })
}

fn enforcements() -> impl Strategy<Value = SizingFacts> {
    prop_oneof![
        Just(SizingFacts::default()),
        Just(SizingFacts { enforcement: Enforcement::Tick { tick_s: 4e-3 }, ..SizingFacts::default() }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn sized_reservation_meets_its_target_and_covers_the_mean(
        p in profiles(), exp in 1i32..=4, facts in enforcements()
    ) {
        let max = 10f64.powi(-exp);
        let spec = spec_of(slo_workload(Slo::DeadlineMissRatio(max), p.clone()));
        let plan = plan_sized(&spec, &NodeFacts::default(), &facts);
        let Some(w) = admitted(&plan) else {
            // Only refused when even the whole cap cannot meet it.
            prop_assert!(plan.rejected[0].reason.contains("SLO"), "{:?}", plan.rejected);
            return Ok(());
        };
        let (runtime, period) = reservation_of(w);
        let s = w.sizing.as_ref().expect("an SLO workload carries its sizing");
        prop_assert_eq!(s.basis, SizingBasis::Sized);
        // Re-check independently with the model at the reservation the plan will apply.
        let task = model_profile(&p).task().unwrap();
        let pred = analyze(&task, &rtslice_model::Reservation { runtime_s: runtime.as_secs_f64(), period_s: period.as_secs_f64() }, &Analysis::new(facts.enforcement)).unwrap();
        prop_assert!(pred.miss_ratio + pred.truncation_error <= max, "miss {} > {max}", pred.miss_ratio);
        prop_assert!(s.margin >= 0.0);
        // Never below the mean demand per period.
        let supply = runtime.as_secs_f64() * (p.period.as_secs_f64() / period.as_secs_f64());
        prop_assert!(supply >= task.execution.mean() - 1e-12, "supply {supply} < mean {}", task.execution.mean());
    }

    #[test]
    fn a_tighter_target_never_gets_less_bandwidth(p in profiles(), a in 1i32..=4, b in 1i32..=4, facts in enforcements()) {
        let (loose, tight) = (10f64.powi(-a.min(b)), 10f64.powi(-a.max(b)));
        let bw = |max: f64| {
            let plan = plan_sized(&spec_of(slo_workload(Slo::DeadlineMissRatio(max), p.clone())), &NodeFacts::default(), &facts);
            admitted(&plan).map(|w| w.bandwidth())
        };
        match (bw(loose), bw(tight)) {
            (Some(l), Some(t)) => prop_assert!(t >= l - 1e-12, "tight {t} < loose {l}"),
            (None, Some(_)) => prop_assert!(false, "the looser target was refused but the tighter admitted"),
            _ => {}
        }
    }

    #[test]
    fn a_longer_p99_bound_never_gets_more_bandwidth(p in profiles(), a in 1u64..=30, b in 1u64..=30) {
        let (short, long) = (a.min(b) * 100, a.max(b) * 100);
        let bw = |bound: u64| {
            let plan = plan(&spec_of(slo_workload(Slo::P99Response(us(bound)), p.clone())), &NodeFacts::default());
            admitted(&plan).map(|w| w.bandwidth())
        };
        match (bw(short), bw(long)) {
            (Some(s), Some(l)) => prop_assert!(l <= s + 1e-12, "long {l} > short {s}"),
            (Some(_), None) => prop_assert!(false, "the longer bound was refused but the shorter admitted"),
            _ => {}
        }
    }
}

#[test]
fn a_given_reservation_is_checked_against_the_slo() {
    let p = profile(1000, 3000, 300, 450, 700);
    let with = |runtime_us: u64| {
        let mut w = slo_workload(Slo::DeadlineMissRatio(1e-3), p.clone());
        w.demand = Some(Demand::reservation(us(runtime_us), us(1000), 1));
        plan(&spec_of(w), &NodeFacts::default())
    };
    let ok = with(800);
    let w = admitted(&ok).expect("800 µs every 1 ms meets 1e-3 for a 700 µs worst case");
    assert_eq!(w.sizing.as_ref().unwrap().basis, SizingBasis::Checked);
    assert_eq!(reservation_of(w), (us(800), us(1000)));
    let short = with(310);
    assert!(admitted(&short).is_none());
    let reason = &short.rejected[0].reason;
    assert!(reason.contains("does not meet its SLO") && reason.contains("would meet it"), "{reason}");
}

#[test]
fn sized_runtime_is_shown_in_the_json_plan() {
    let spec = spec_of(slo_workload(Slo::DeadlineMissRatio(1e-3), profile(1000, 3000, 300, 450, 700)));
    let plan = plan(&spec, &NodeFacts::default());
    let json = serde_json::to_value(&plan).unwrap();
    let w = &json["workloads"][0];
    assert!(w["allocation"]["runtime_ns"].as_u64().unwrap() > 300_000, "{w}");
    assert_eq!(w["sizing"]["basis"], "sized");
    assert_eq!(w["sizing"]["target"]["kind"], "deadline_miss_ratio");
    assert!(w["sizing"]["margin"].as_f64().unwrap() >= 0.0);
    assert!(w["sizing"]["truncation_error"].as_f64().is_some());
}

#[test]
fn an_slo_above_the_cap_is_refused_with_the_reason() {
    // A job of 1 ms every 1 ms cannot be met under a 95 % cap.
    let spec = spec_of(slo_workload(Slo::DeadlineMissRatio(1e-3), profile(1000, 1000, 950, 990, 1000)));
    let plan = plan(&spec, &NodeFacts::default());
    assert!(plan.workloads.is_empty());
    assert!(plan.rejected[0].reason.contains("SLO"), "{}", plan.rejected[0].reason);
}
