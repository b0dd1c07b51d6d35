//! The inverse of the model: the smallest reservation that keeps the round trip under a target.

use serde::Serialize;

use crate::{check_phi, positive, predict_bandwidth, ModelError, Prediction, Result, Scenario, ServiceModel};

/// What must stay under its bound.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Target {
    /// E[R] ≤ value.
    Mean { value_s: f64 },
    /// P_φ[R] ≤ value (φ is the `phi` passed to [`size`]).
    Percentile { value_s: f64 },
}

impl Target {
    pub fn value(&self) -> f64 {
        match *self {
            Target::Mean { value_s } | Target::Percentile { value_s } => value_s,
        }
    }

    fn of(&self, p: &Prediction) -> f64 {
        match self {
            Target::Mean { .. } => p.mean_s,
            Target::Percentile { .. } => p.percentile_s,
        }
    }
}

/// The smallest reservation meeting a target, and how close it sits to the limits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sizing {
    /// The exact smallest Q/P meeting the target (before rounding Q to whole microseconds).
    pub min_bandwidth: f64,
    /// Q for the given period, rounded up to a whole microsecond (cgroup v1 `cpu.rt_runtime_us` takes µs).
    pub runtime_s: f64,
    pub period_s: f64,
    /// Q/P after rounding.
    pub bandwidth: f64,
    /// The model's prediction at (runtime_s, period_s).
    pub prediction: Prediction,
    /// λ/μ: any Q/P at or below it is unstable.
    pub stability_bandwidth: f64,
    /// bandwidth − λ/μ: how much share stands between the sizing and an unbounded queue.
    pub margin_to_instability: f64,
    /// The per-CPU admission cap (0.95 by default).
    pub cap: f64,
    /// cap − bandwidth; negative when the reservation does not fit on one CPU under the cap.
    pub margin_to_cap: f64,
    pub fits_cap: bool,
}

/// The smallest Q/P — and the Q for period `period_s` — so that the mean or the φ-percentile of the
/// round trip stays at or under `target`.
///
/// M/M/1 with a negligible network has a closed form (`Q/P = (λ + k/(T−2δ))/μ`, `k = 1` for the mean,
/// `−ln(1−φ)` for the percentile); every other model is inverted by bisection, which works because
/// every prediction falls monotonically as Q/P grows.
pub fn size(scenario: &Scenario, period_s: f64, target: Target, phi: f64, cap: f64) -> Result<Sizing> {
    positive("period P", period_s)?;
    check_phi(phi)?;
    if !(cap > 0.0 && cap <= 1.0) {
        return Err(ModelError::CapOutOfRange(cap));
    }
    let target_s = positive("target", target.value())?;
    // Validates the scenario; also the best any reservation can do.
    let best = predict_bandwidth(scenario, 1.0, phi)?;
    let two_delta = 2.0 * scenario.network.one_way_delay_s;
    let floor_s = match (target, scenario.network.link) {
        (_, None) => two_delta,
        (Target::Mean { .. }, Some(_)) => two_delta + best.network_mean_s,
        (Target::Percentile { .. }, Some(_)) => two_delta - (1.0 - phi.sqrt()).ln() * best.network_mean_s,
    };
    if target_s <= floor_s {
        return Err(ModelError::TargetBelowFloor { target_s, floor_s });
    }
    let best_s = target.of(&best);
    if best_s > target_s {
        return Err(ModelError::TargetUnreachable { target_s, best_s });
    }
    let stability = scenario.load();
    let min_bandwidth = match (scenario.service, scenario.network.link) {
        (ServiceModel::Exponential, None) => {
            let k = match target {
                Target::Mean { .. } => 1.0,
                Target::Percentile { .. } => -(1.0 - phi).ln(),
            };
            ((scenario.lambda + k / (target_s - two_delta)) / scenario.mu).min(1.0)
        }
        _ => {
            // Invariant: the target fails at `lo` (unstable at λ/μ) and holds at `hi`.
            let (mut lo, mut hi) = (stability, 1.0_f64);
            for _ in 0..200 {
                let mid = 0.5 * (lo + hi);
                match predict_bandwidth(scenario, mid, phi) {
                    Ok(p) if target.of(&p) <= target_s => hi = mid,
                    _ => lo = mid,
                }
                if hi - lo <= 1e-12 {
                    break;
                }
            }
            hi
        }
    };
    // Round Q up to whole microseconds so the rounded reservation still meets the target.
    let runtime_us = (min_bandwidth * period_s * 1e6 - 1e-6).ceil().max(1.0);
    let runtime_s = (runtime_us / 1e6).min(period_s);
    let bandwidth = runtime_s / period_s;
    let prediction = predict_bandwidth(scenario, bandwidth, phi)?;
    Ok(Sizing {
        min_bandwidth,
        runtime_s,
        period_s,
        bandwidth,
        prediction,
        stability_bandwidth: stability,
        margin_to_instability: bandwidth - stability,
        cap,
        margin_to_cap: cap - bandwidth,
        fits_cap: bandwidth <= cap + 1e-12,
    })
}
