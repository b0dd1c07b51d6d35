use super::*;
use proptest::prelude::*;

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()).max(1e-300)
}

macro_rules! assert_close {
    ($a:expr, $b:expr) => {
        assert_close!($a, $b, 1e-9)
    };
    ($a:expr, $b:expr, $rel:expr) => {{
        let (a, b) = ($a, $b);
        assert!(close(a, b, $rel), "{} = {a} is not {b} (rel {})", stringify!($a), $rel);
    }};
}

/// Study B's validation setting: δ = 181.5 µs (ping), P = 2 ms, LD 0.5, Q/P 0.8; at a mean
/// inter-arrival of 1 ms: λ = 1000/s, μ = λ/LD = 2000/s, μQ/P = 1600/s.
/// By hand: E[R] = 2·181.5 µs + 1/600 s = 2029.667 µs; P99 = 363 µs + ln(100)/600 s = 8038.284 µs.
#[test]
fn study_b_setting_by_hand() {
    let s = Scenario::mm1(1000.0, 2000.0, 181.5e-6);
    let r = Reservation::new(1.6e-3, 2e-3).unwrap();
    let p = predict(&s, &r, 0.99).unwrap();
    assert_close!(p.bandwidth, 0.8);
    assert_close!(p.effective_rate, 1600.0);
    assert_close!(p.utilization, 0.625);
    assert_close!(p.server_mean_s, 1.0 / 600.0);
    assert_close!(p.mean_s, 0.0020296666666666666);
    assert_close!(p.percentile_s, 0.008038283643313484);
    assert_eq!(p.percentile_kind, PercentileKind::Exact);
    assert!(p.model.starts_with("study B"));
}

#[test]
fn processing_time_fluid_and_bounds_by_hand() {
    // C = 3 ms under 1.4 ms / 2 ms (the study's IMS reservation): 3/0.7 = 4.2857 ms,
    // ⌊3/1.4⌋·2 = 4 ms, ⌈3/1.4⌉·2 = 6 ms.
    let r = Reservation::new(1.4e-3, 2e-3).unwrap();
    let t = processing_time(3e-3, &r).unwrap();
    assert_close!(t.fluid_s, 3e-3 / 0.7);
    assert_close!(t.lower_s, 4e-3);
    assert_close!(t.upper_s, 6e-3);
    // Less work than one budget: the floor bound would be 0, no CPU finishes faster than C itself.
    let t = processing_time(1e-3, &Reservation::new(1.6e-3, 2e-3).unwrap()).unwrap();
    assert_close!(t.fluid_s, 1.25e-3);
    assert_close!(t.lower_s, 1e-3);
    assert_close!(t.upper_s, 2e-3);
    // Exactly two budgets is two periods, not three (division rounding must not push ⌈⌉ up).
    let r = Reservation::new(0.3e-3, 1e-3).unwrap();
    assert_close!(worst_case_response(0.6e-3, &r).unwrap(), 2e-3);
    // A whole CPU: everything is C.
    let t = processing_time(5e-3, &Reservation::new(2e-3, 2e-3).unwrap()).unwrap();
    assert_close!(t.fluid_s, 5e-3);
    assert_close!(t.lower_s, 5e-3);
    assert_close!(t.upper_s, 6e-3);
}

#[test]
fn periodic_resource_worst_case_by_hand() {
    // k = 1: blackout 2(2−1.6) = 0.8 ms, then 1 ms of work: 1.8 ms.
    let r = Reservation::new(1.6e-3, 2e-3).unwrap();
    assert_close!(worst_case_response_periodic(1e-3, &r).unwrap(), 1.8e-3);
    // k = 3 under 1.4/2: 2·0.6 + 2·2 + (3 − 2.8) = 5.4 ms.
    let r = Reservation::new(1.4e-3, 2e-3).unwrap();
    assert_close!(worst_case_response_periodic(3e-3, &r).unwrap(), 5.4e-3);
}

#[test]
fn network_as_second_queue_by_hand() {
    // σ = 1 Mbit/s, E[z] = 1250 B → ν = 100/s; λ = 50/s, μ = 200/s, Q/P = 0.5 → μQ/P = 100/s.
    // E[R] = 0 + 1/50 + 1/50 = 40 ms; P99 ≤ −ln(1−√0.99)·40 ms = 211.832 ms.
    let s = Scenario {
        lambda: 50.0,
        mu: 200.0,
        network: Network {
            one_way_delay_s: 0.0,
            link: Some(Link { bandwidth_bps: 1e6, mean_request_bytes: 1250.0 }),
        },
        service: ServiceModel::Exponential,
    };
    let p = predict_bandwidth(&s, 0.5, 0.99).unwrap();
    assert_close!(p.network_mean_s, 0.02);
    assert_close!(p.server_mean_s, 0.02);
    assert_close!(p.mean_s, 0.04);
    assert_close!(p.percentile_s, 0.21183231756481713);
    assert_eq!(p.percentile_kind, PercentileKind::UpperBound);
}

#[test]
fn md1_by_hand() {
    // M/D/1 at ρ = 0.5 with rate 100/s: W = ρ/(2μ(1−ρ)) = 5 ms, R = 15 ms.
    let s = Scenario { service: ServiceModel::General { cv: 0.0 }, ..Scenario::mm1(50.0, 200.0, 0.0) };
    let p = predict_bandwidth(&s, 0.5, 0.99).unwrap();
    assert_close!(p.mean_s, 0.015);
    assert_eq!(p.percentile_kind, PercentileKind::Approximation);
    assert!(p.model.starts_with("extension"));
}

#[test]
fn domain_errors_name_the_condition() {
    let s = Scenario::mm1(1000.0, 2000.0, 0.0);
    let err = predict_bandwidth(&s, 0.5, 0.99).unwrap_err();
    assert!(matches!(err, ModelError::UnstableCpu { .. }), "{err}");
    assert!(err.to_string().contains("λ/μ = 0.5"), "{err}");
    assert!(matches!(predict_bandwidth(&s, 0.8, 1.0), Err(ModelError::PhiOutOfRange(_))));
    assert!(matches!(predict_bandwidth(&s, 0.8, 0.0), Err(ModelError::PhiOutOfRange(_))));
    assert!(matches!(predict_bandwidth(&s, 0.8, f64::NAN), Err(ModelError::PhiOutOfRange(_))));
    let bad = Scenario::mm1(-1.0, 2000.0, 0.0);
    assert!(matches!(predict_bandwidth(&bad, 0.8, 0.9), Err(ModelError::NonPositive { name: "arrival rate λ", .. })));
    let bad = Scenario::mm1(1.0, 0.0, 0.0);
    assert!(matches!(predict_bandwidth(&bad, 0.8, 0.9), Err(ModelError::NonPositive { name: "service rate μ", .. })));
    assert!(matches!(Reservation::new(3e-3, 2e-3), Err(ModelError::RuntimeExceedsPeriod { .. })));
    assert!(matches!(Reservation::new(0.0, 2e-3), Err(ModelError::NonPositive { .. })));
    let slow_link = Scenario {
        network: Network { one_way_delay_s: 0.0, link: Some(Link { bandwidth_bps: 8000.0, mean_request_bytes: 1000.0 }) },
        ..Scenario::mm1(10.0, 1000.0, 0.0)
    };
    assert!(matches!(predict_bandwidth(&slow_link, 0.5, 0.9), Err(ModelError::UnstableNetwork { .. })));
    let bad_cv = Scenario { service: ServiceModel::General { cv: -1.0 }, ..s };
    assert!(matches!(predict_bandwidth(&bad_cv, 0.8, 0.9), Err(ModelError::Negative { .. })));
}

#[test]
fn sizing_study_b_setting() {
    // Inverts `study_b_setting_by_hand`: a 2029.667 µs mean target needs exactly Q/P = 0.8.
    let s = Scenario::mm1(1000.0, 2000.0, 181.5e-6);
    let z = size(&s, 2e-3, Target::Mean { value_s: 0.0020296666666666666 }, 0.99, 0.95).unwrap();
    assert_close!(z.min_bandwidth, 0.8, 1e-9);
    assert_close!(z.runtime_s, 1.6e-3);
    assert_close!(z.margin_to_instability, 0.3);
    assert_close!(z.margin_to_cap, 0.15);
    assert!(z.fits_cap);
    let z = size(&s, 2e-3, Target::Percentile { value_s: 0.008038283643313484 }, 0.99, 0.95).unwrap();
    assert_close!(z.min_bandwidth, 0.8, 1e-9);
    // A tighter target needs more than the cap: reported, not hidden.
    let z = size(&s, 2e-3, Target::Mean { value_s: 1.45e-3 }, 0.99, 0.95).unwrap();
    assert!(!z.fits_cap && z.margin_to_cap < 0.0, "{z:?}");
    assert!(matches!(
        size(&s, 2e-3, Target::Mean { value_s: 300e-6 }, 0.99, 0.95),
        Err(ModelError::TargetBelowFloor { .. })
    ));
    assert!(matches!(
        size(&s, 2e-3, Target::Mean { value_s: 1.3e-3 }, 0.99, 0.95),
        Err(ModelError::TargetUnreachable { .. })
    ));
    assert!(matches!(size(&s, 2e-3, Target::Mean { value_s: 1.0 }, 0.99, 1.5), Err(ModelError::CapOutOfRange(_))));
}

#[test]
fn sweep_marks_unstable_points() {
    let s = Scenario::mm1(1.0, 2000.0, 0.0);
    let r = Reservation::new(1e-3, 2e-3).unwrap();
    let pts = sweep_lambda(&s, &r, 0.99, 100.0, 1500.0, 15).unwrap();
    assert_eq!(pts.len(), 15);
    assert_close!(pts[14].lambda, 1500.0);
    assert!(pts.iter().filter(|p| p.lambda < 1000.0).all(|p| p.prediction.is_some()));
    assert!(pts.iter().filter(|p| p.lambda >= 1000.0).all(|p| p.prediction.is_none()));
    assert!(sweep_lambda(&s, &r, 0.99, 10.0, 5.0, 3).is_err());
}

#[test]
fn accuracy_by_hand() {
    assert_close!(rmse(&[1.0, 3.0], &[2.0, 1.0]).unwrap(), (2.5f64).sqrt());
    assert_close!(mape(&[100.0, 200.0], &[110.0, 150.0]).unwrap(), 17.5);
    assert!(mape(&[0.0], &[1.0]).is_none());
    assert!(rmse(&[], &[]).is_none());
    let a = Accuracy::from_points(&[1e-3], &[1.1e-3], &[2e-3], &[1.8e-3]).unwrap();
    assert_close!(a.mean_rmse_us, 100.0, 1e-6);
    assert_close!(a.mean_mape_pct, 10.0, 1e-6);
    assert_close!(a.pct_rmse_us, 200.0, 1e-6);
    assert_close!(a.pct_mape_pct, 10.0, 1e-6);
}

fn any_service() -> impl Strategy<Value = ServiceModel> {
    prop_oneof![Just(ServiceModel::Exponential), (0.0f64..3.0).prop_map(|cv| ServiceModel::General { cv })]
}

fn any_network() -> impl Strategy<Value = Network> {
    (0.0f64..1e-3, prop::option::of((1e6f64..1e9, 64.0f64..4096.0))).prop_map(|(d, link)| Network {
        one_way_delay_s: d,
        link: link.map(|(bw, z)| Link { bandwidth_bps: bw, mean_request_bytes: z }),
    })
}

proptest! {
    /// Q/P = 1 is a dedicated CPU: plain M/M/1, E[R] = 2δ + 1/(μ−λ); Q/P → 1 converges to it.
    #[test]
    fn whole_cpu_is_plain_mm1(mu in 10.0f64..1e5, load in 0.01f64..0.95, delay in 0.0f64..1e-3, phi in 0.5f64..0.9999) {
        let s = Scenario::mm1(load * mu, mu, delay);
        let p = predict_bandwidth(&s, 1.0, phi).unwrap();
        let mm1 = 1.0 / (mu - load * mu);
        prop_assert!(close(p.mean_s, 2.0 * delay + mm1, 1e-9));
        prop_assert!(close(p.percentile_s, 2.0 * delay - (1.0 - phi).ln() * mm1, 1e-9));
        let near = predict_bandwidth(&s, 1.0 - 1e-9, phi).unwrap();
        prop_assert!(close(near.mean_s, p.mean_s, 1e-6));
    }

    /// M/G/1 with cv = 1 is M/M/1.
    #[test]
    fn general_with_cv_one_is_mm1(mu in 10.0f64..1e5, load in 0.01f64..0.9, bw in 0.91f64..1.0, net in any_network()) {
        let s = Scenario { lambda: load * mu, mu, network: net, service: ServiceModel::Exponential };
        let g = Scenario { service: ServiceModel::General { cv: 1.0 }, ..s };
        if let (Ok(a), Ok(b)) = (predict_bandwidth(&s, bw, 0.99), predict_bandwidth(&g, bw, 0.99)) {
            prop_assert!(close(a.mean_s, b.mean_s, 1e-9));
            prop_assert!(close(a.percentile_s, b.percentile_s, 1e-9));
        }
    }

    /// Higher φ never gives a lower percentile; the percentile is never below the mean for φ ≥ 1−1/e.
    #[test]
    fn percentile_monotone_in_phi(mu in 10.0f64..1e5, load in 0.01f64..0.9, bw in 0.91f64..1.0,
                                  a in 0.64f64..0.9999, b in 0.64f64..0.9999, net in any_network(), svc in any_service()) {
        let s = Scenario { lambda: load * mu, mu, network: net, service: svc };
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        if let (Ok(pl), Ok(ph)) = (predict_bandwidth(&s, bw, lo), predict_bandwidth(&s, bw, hi)) {
            prop_assert!(pl.percentile_s <= ph.percentile_s * (1.0 + 1e-12));
            prop_assert!(pl.percentile_s >= pl.mean_s * (1.0 - 1e-9));
        }
    }

    /// More reservation never makes anything slower.
    #[test]
    fn monotone_in_bandwidth(mu in 10.0f64..1e5, load in 0.01f64..0.5, b1 in 0.51f64..1.0, b2 in 0.51f64..1.0,
                             net in any_network(), svc in any_service()) {
        let s = Scenario { lambda: load * mu, mu, network: net, service: svc };
        let (lo, hi) = if b1 <= b2 { (b1, b2) } else { (b2, b1) };
        if let (Ok(pl), Ok(ph)) = (predict_bandwidth(&s, lo, 0.99), predict_bandwidth(&s, hi, 0.99)) {
            prop_assert!(ph.mean_s <= pl.mean_s * (1.0 + 1e-12));
            prop_assert!(ph.percentile_s <= pl.percentile_s * (1.0 + 1e-12));
        }
    }

    /// Sizing inverts prediction: the target a Q/P produces sizes back to that Q/P, and the
    /// rounded reservation it returns meets the target.
    #[test]
    fn sizing_inverts_prediction(mu in 100.0f64..1e5, load in 0.05f64..0.9, frac in 0.05f64..0.95,
                                 period in 1e-3f64..0.1, pct in any::<bool>(), net in any_network(), svc in any_service()) {
        let s = Scenario { lambda: load * mu, mu, network: net, service: svc };
        let bw = load + frac * (1.0 - load);
        let Ok(p) = predict_bandwidth(&s, bw, 0.99) else { return Ok(()) };
        let target = if pct { Target::Percentile { value_s: p.percentile_s } } else { Target::Mean { value_s: p.mean_s } };
        let z = size(&s, period, target, 0.99, 0.95).unwrap();
        prop_assert!(close(z.min_bandwidth, bw, 1e-6), "sized {} for {}", z.min_bandwidth, bw);
        let achieved = if pct { z.prediction.percentile_s } else { z.prediction.mean_s };
        prop_assert!(achieved <= target.value() * (1.0 + 1e-9));
        prop_assert!(z.runtime_s >= bw * period * (1.0 - 1e-9));
        prop_assert!(z.runtime_s <= bw * period + 1e-6 + 1e-12);
        prop_assert!(close(z.margin_to_instability, z.bandwidth - load, 1e-9));
    }

    /// Bounds bracket the fluid approximation.
    #[test]
    fn bounds_bracket_fluid(c in 1e-6f64..1.0, q in 1e-5f64..1e-2, frac in 0.01f64..1.0) {
        let r = Reservation::new(q, q / frac).unwrap();
        let t = processing_time(c, &r).unwrap();
        prop_assert!(t.lower_s <= t.fluid_s * (1.0 + 1e-9) || t.lower_s == c);
        prop_assert!(t.fluid_s <= t.upper_s * (1.0 + 1e-9));
        prop_assert!(t.lower_s <= t.upper_s * (1.0 + 1e-9));
    }
}
