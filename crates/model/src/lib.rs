//! rtslice-model: the queueing model of a server that runs inside a CPU reservation of `Q` runtime
//! every period `P` (study B, Cucinotta et al., IEEE TCC 2023), its inverse (sizing), and the
//! accuracy measures used to check it against measurements.
//!
//! [`periodic`]: a periodic real-time task (a vBS: one job per TTI, a measured execution-time
//! distribution, a relative deadline) under its own CBS / SCHED_DEADLINE reservation — miss ratio,
//! response-time distribution, and the smallest reservation meeting a miss-ratio or percentile target.
//!
//! [`replay`]: a job sequence replayed through the kernel's SCHED_DEADLINE rules event by event
//! (tick or exact charging, throttling, replenishment with debt, the wake-up rule) — what the
//! periodic chain's smooth supply leaves out when a backlogged task overruns to the tick.
//!
//! Pure: no I/O, no clocks. All times are in seconds, rates in requests per second, bandwidth
//! `Q/P` as a fraction of one CPU.
//!
//! What comes from study B (see `docs/model.md` for the equations):
//! - [`processing_time`]: fluid approximation `t ≈ C/(Q/P)` and its bounds `⌊C/Q⌋P ≤ t ≤ ⌈C/Q⌉P`;
//! - [`predict`] with [`ServiceModel::Exponential`]: M/M/1 inside a reservation (mean and
//!   φ-percentile), the round trip with a negligible network (`2δ + …`) and the network as a second
//!   M/M/1 with the `√φ` percentile bound;
//! - stability (`λ < μQ/P`, `λ < ν`) as [`ModelError`] variants naming the violated condition.
//!
//! Extensions, labelled as such in every [`Prediction`]:
//! - [`ServiceModel::General`]: M/G/1 (Pollaczek–Khinchine mean) for service times with a given
//!   coefficient of variation; its percentile is an exponential-tail approximation, exact for cv = 1;
//! - [`worst_case_response`]: the deterministic `⌈C/Q⌉P` bound for a hard deadline, and
//!   [`worst_case_response_periodic`] for a reservation whose budget may sit anywhere in its period
//!   (RT group throttling replenishes at fixed instants, unlike the CBS of SCHED_DEADLINE).

use serde::Serialize;

mod accuracy;
pub mod periodic;
pub mod replay;
mod sizing;

pub use accuracy::{mape, rmse, Accuracy};
pub use periodic::{
    analyze, size_periodic, Analysis, Enforcement, ExecutionTime, PeriodicPrediction, PeriodicSizing,
    PeriodicTarget, PeriodicTask, Profile, ProfileExecution,
};
pub use sizing::{size, Sizing, Target};

/// An input outside the model's domain. Every variant names the violated condition and what to change.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    #[error("{name} = {value} must be a positive, finite number")]
    NonPositive { name: &'static str, value: f64 },
    #[error("{name} = {value} must be zero or a positive, finite number")]
    Negative { name: &'static str, value: f64 },
    #[error("percentile φ = {0} is outside (0, 1); write e.g. 0.99 for the 99th percentile")]
    PhiOutOfRange(f64),
    #[error("reservation runtime Q = {runtime_s} s exceeds its period P = {period_s} s; Q/P must be in (0, 1]")]
    RuntimeExceedsPeriod { runtime_s: f64, period_s: f64 },
    #[error(
        "unstable CPU queue: λ = {lambda} req/s is not below μ·Q/P = {capacity} req/s; \
         the reservation needs Q/P > λ/μ = {needed_bandwidth:.6} (or a lower arrival rate)"
    )]
    UnstableCpu { lambda: f64, capacity: f64, needed_bandwidth: f64 },
    #[error(
        "unstable network queue: λ = {lambda} req/s is not below ν = σ/E[z] = {nu} req/s; \
         raise the link bandwidth or shrink the requests"
    )]
    UnstableNetwork { lambda: f64, nu: f64 },
    #[error(
        "target {target_s} s is not above the part no reservation can shorten ({floor_s} s: 2δ plus the \
         network queue); raise the target or reduce the network delay"
    )]
    TargetBelowFloor { target_s: f64, floor_s: f64 },
    #[error(
        "target {target_s} s is unreachable: even a whole CPU (Q/P = 1) gives {best_s} s; \
         lower the arrival rate or split the load over more servers"
    )]
    TargetUnreachable { target_s: f64, best_s: f64 },
    #[error("per-CPU cap {0} is outside (0, 1]")]
    CapOutOfRange(f64),
    #[error("sweep needs at least 2 steps and FROM < TO (got {from} to {to} in {steps} steps)")]
    BadSweep { from: f64, to: f64, steps: usize },
    #[error("execution-time distribution: {0}")]
    BadDistribution(String),
    #[error(
        "{name} = {value_s} s is not a whole multiple of the model's time grid ({resolution_s} s); \
         round it to the grid or choose a finer resolution"
    )]
    OffGrid { name: &'static str, value_s: f64, resolution_s: f64 },
    #[error(
        "reservation period P = {period_s} s does not divide the task period T = {task_period_s} s; \
         the periodic model needs T = N·P (choose P = T, T/2, T/4, …)"
    )]
    PeriodNotDivisor { task_period_s: f64, period_s: f64 },
    #[error(
        "unstable reservation: the task needs {mean_execution_s} s per period on average but the \
         reservation supplies {supply_s} s (utilization {utilization:.4} ≥ 1), so its backlog grows \
         without bound; give it a runtime above {min_runtime_s} s per reservation period"
    )]
    UnstablePeriodic { utilization: f64, mean_execution_s: f64, supply_s: f64, min_runtime_s: f64 },
    #[error(
        "the backlog chain would need about {states} states at a {resolution_s} s grid (utilization \
         {utilization:.4}, too close to 1): use a coarser resolution or a larger runtime"
    )]
    StateSpaceTooLarge { states: f64, resolution_s: f64, utilization: f64 },
    #[error("{0}")]
    BadTarget(String),
    #[error(
        "no candidate reservation meets {target}, not even a whole period of runtime (Q = P); \
         relax the target, lengthen the deadline or reduce the execution time"
    )]
    PeriodicTargetUnreachable { target: String },
}

pub type Result<T> = std::result::Result<T, ModelError>;

fn positive(name: &'static str, value: f64) -> Result<f64> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(ModelError::NonPositive { name, value })
    }
}

fn non_negative(name: &'static str, value: f64) -> Result<f64> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(ModelError::Negative { name, value })
    }
}

fn check_phi(phi: f64) -> Result<f64> {
    if phi > 0.0 && phi < 1.0 {
        Ok(phi)
    } else {
        Err(ModelError::PhiOutOfRange(phi))
    }
}

/// A CPU reservation: `runtime_s` of CPU time every `period_s`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Reservation {
    pub runtime_s: f64,
    pub period_s: f64,
}

impl Reservation {
    pub fn new(runtime_s: f64, period_s: f64) -> Result<Reservation> {
        positive("runtime Q", runtime_s)?;
        positive("period P", period_s)?;
        if runtime_s > period_s {
            return Err(ModelError::RuntimeExceedsPeriod { runtime_s, period_s });
        }
        Ok(Reservation { runtime_s, period_s })
    }

    /// The reservation of share `bandwidth` of one CPU at period `period_s`.
    pub fn from_bandwidth(bandwidth: f64, period_s: f64) -> Result<Reservation> {
        Reservation::new(positive("bandwidth Q/P", bandwidth)? * period_s, period_s)
    }

    /// `Q/P`, the share of one CPU.
    pub fn bandwidth(&self) -> f64 {
        self.runtime_s / self.period_s
    }
}

/// Time to process `C` seconds of work (as measured on a dedicated CPU) under a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ProcessingTime {
    /// Study B's fluid approximation `C / (Q/P)`, good when `P` is small relative to `C`.
    pub fluid_s: f64,
    /// Study B's lower bound `⌊C/Q⌋·P`, raised to `C` (no reservation runs faster than a whole CPU).
    pub lower_s: f64,
    /// Study B's upper bound `⌈C/Q⌉·P` (a fresh budget and deadline when the work starts, as CBS gives).
    pub upper_s: f64,
}

/// Fluid approximation of the processing time of `work_s` under `r`, with study B's floor/ceiling bounds.
pub fn processing_time(work_s: f64, r: &Reservation) -> Result<ProcessingTime> {
    let c = positive("work C", work_s)?;
    let chunks = c / r.runtime_s;
    Ok(ProcessingTime {
        fluid_s: c / r.bandwidth(),
        lower_s: (chunks.floor() * r.period_s).max(c),
        upper_s: ceil_chunks(chunks) * r.period_s,
    })
}

/// `⌈x⌉`, tolerant of the rounding error of a division that should have been exact.
fn ceil_chunks(x: f64) -> f64 {
    let nearest = x.round();
    if (x - nearest).abs() <= 1e-9 * nearest.max(1.0) {
        nearest
    } else {
        x.ceil()
    }
}

/// Extension (hard deadlines): the deterministic response-time bound `⌈C/Q⌉·P` of a job of `work_s`
/// that starts with a fresh budget and deadline, which is what SCHED_DEADLINE's CBS gives a task waking
/// up on an idle server. Holds for any arrival pattern that leaves the server idle when the job comes.
pub fn worst_case_response(work_s: f64, r: &Reservation) -> Result<f64> {
    Ok(processing_time(work_s, r)?.upper_s)
}

/// Extension (hard deadlines, fixed-phase budgets): the bound of the periodic resource model
/// (Shin & Lee), for a reservation replenished at fixed instants whatever the job's arrival, like RT
/// group throttling: after a blackout of up to `2(P−Q)`, `k = ⌈C/Q⌉` budgets are needed:
/// `2(P−Q) + (k−1)·P + (C − (k−1)·Q)`.
pub fn worst_case_response_periodic(work_s: f64, r: &Reservation) -> Result<f64> {
    let c = positive("work C", work_s)?;
    let k = ceil_chunks(c / r.runtime_s);
    Ok(2.0 * (r.period_s - r.runtime_s) + (k - 1.0) * r.period_s + (c - (k - 1.0) * r.runtime_s))
}

/// The network between client and server.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Network {
    /// δ, the one-way latency (study B measured it with ping: 181.5 µs).
    pub one_way_delay_s: f64,
    /// A link whose transmission time matters: modelled as a second M/M/1 queue (study B §5).
    pub link: Option<Link>,
}

impl Network {
    /// A network that only adds its latency (`2δ` to the round trip).
    pub fn negligible(one_way_delay_s: f64) -> Network {
        Network { one_way_delay_s, link: None }
    }
}

/// A bandwidth-limited link carrying requests of exponentially distributed size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Link {
    /// σ, in bits per second (as `tc` and `--bandwidth` take it).
    pub bandwidth_bps: f64,
    /// E[z], the mean request size in bytes.
    pub mean_request_bytes: f64,
}

impl Link {
    /// ν = σ / E[z], the link's service rate in requests per second (bits → bytes: ÷ 8).
    pub fn service_rate(&self) -> Result<f64> {
        Ok(positive("bandwidth σ", self.bandwidth_bps)? / 8.0 / positive("request size E[z]", self.mean_request_bytes)?)
    }
}

/// How the per-request service time is distributed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ServiceModel {
    /// Study B: exponential service (M/M/1).
    Exponential,
    /// Extension: general service with coefficient of variation `cv` = σ_S / E[S] (M/G/1).
    /// `cv = 0` is deterministic, `cv = 1` exponential.
    General { cv: f64 },
}

/// A server with Poisson arrivals at rate `lambda`, service rate `mu` on a dedicated CPU, behind `network`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Scenario {
    /// λ, requests per second.
    pub lambda: f64,
    /// μ, requests per second the server completes on a whole CPU (1 / mean compute time).
    pub mu: f64,
    pub network: Network,
    pub service: ServiceModel,
}

impl Scenario {
    /// Study B's setting: exponential service, a network that only adds `2δ`.
    pub fn mm1(lambda: f64, mu: f64, one_way_delay_s: f64) -> Scenario {
        Scenario { lambda, mu, network: Network::negligible(one_way_delay_s), service: ServiceModel::Exponential }
    }

    fn validate(&self) -> Result<()> {
        positive("arrival rate λ", self.lambda)?;
        positive("service rate μ", self.mu)?;
        non_negative("one-way delay δ", self.network.one_way_delay_s)?;
        if let Some(link) = self.network.link {
            link.service_rate()?;
        }
        if let ServiceModel::General { cv } = self.service {
            non_negative("coefficient of variation cv", cv)?;
        }
        Ok(())
    }

    /// λ/μ: the load on a dedicated CPU (study B's LD), the smallest Q/P that is still stable.
    pub fn load(&self) -> f64 {
        self.lambda / self.mu
    }
}

/// How much to trust a percentile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PercentileKind {
    /// Exact for the model (M/M/1 response times are exponential).
    Exact,
    /// An upper bound (study B's `√φ` bound for two queues in tandem).
    UpperBound,
    /// An approximation (M/G/1 extension).
    Approximation,
}

/// What the model predicts for a scenario under a reservation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// Which equations produced it, e.g. "study B: M/M/1 in a reservation, negligible network".
    pub model: &'static str,
    /// Q/P.
    pub bandwidth: f64,
    /// μQ/P, the server's rate under the reservation.
    pub effective_rate: f64,
    /// ρ = λ / (μQ/P).
    pub utilization: f64,
    /// Mean time in the server (queueing + processing).
    pub server_mean_s: f64,
    /// Mean time in the network queue (0 for a negligible network).
    pub network_mean_s: f64,
    /// Mean round trip E[R].
    pub mean_s: f64,
    pub phi: f64,
    /// φ-percentile of the round trip.
    pub percentile_s: f64,
    pub percentile_kind: PercentileKind,
}

/// Predicts mean and φ-percentile of the round trip for `scenario` under `reservation`.
pub fn predict(scenario: &Scenario, reservation: &Reservation, phi: f64) -> Result<Prediction> {
    predict_bandwidth(scenario, reservation.bandwidth(), phi)
}

/// As [`predict`], for a reservation given only by its share `bandwidth` = Q/P (the model only sees Q/P).
pub fn predict_bandwidth(scenario: &Scenario, bandwidth: f64, phi: f64) -> Result<Prediction> {
    scenario.validate()?;
    check_phi(phi)?;
    positive("bandwidth Q/P", bandwidth)?;
    if bandwidth > 1.0 + 1e-12 {
        return Err(ModelError::RuntimeExceedsPeriod { runtime_s: bandwidth, period_s: 1.0 });
    }
    let lambda = scenario.lambda;
    let rate = scenario.mu * bandwidth;
    if lambda >= rate {
        return Err(ModelError::UnstableCpu { lambda, capacity: rate, needed_bandwidth: scenario.load() });
    }
    let two_delta = 2.0 * scenario.network.one_way_delay_s;
    let utilization = lambda / rate;
    let (server_mean_s, general) = match scenario.service {
        ServiceModel::Exponential => (1.0 / (rate - lambda), false),
        ServiceModel::General { cv } => {
            // Pollaczek–Khinchine: W = λ E[S²] / (2(1−ρ)), E[S²] = (1 + cv²) / rate².
            let wait = lambda * (1.0 + cv * cv) / (rate * rate) / (2.0 * (1.0 - utilization));
            (wait + 1.0 / rate, true)
        }
    };
    // Under the exponential tail R ~ Exp(1/E[R]) the φ-percentile is −ln(1−φ)·E[R]: exact for M/M/1,
    // an approximation with the P–K mean for M/G/1.
    let tail = -(1.0 - phi).ln();
    match scenario.network.link {
        None => Ok(Prediction {
            model: if general {
                "extension: M/G/1 (Pollaczek–Khinchine) in a reservation, negligible network; percentile by exponential tail"
            } else {
                "study B: M/M/1 in a reservation, negligible network"
            },
            bandwidth,
            effective_rate: rate,
            utilization,
            server_mean_s,
            network_mean_s: 0.0,
            mean_s: two_delta + server_mean_s,
            phi,
            percentile_s: two_delta + tail * server_mean_s,
            percentile_kind: if general { PercentileKind::Approximation } else { PercentileKind::Exact },
        }),
        Some(link) => {
            let nu = link.service_rate()?;
            if lambda >= nu {
                return Err(ModelError::UnstableNetwork { lambda, nu });
            }
            let network_mean_s = 1.0 / (nu - lambda);
            // Study B: P_φ[R] ≤ 2δ − ln(1−√φ)/α, α = (1/(ν−λ) + 1/(μQ/P−λ))⁻¹: each queue at its √φ
            // percentile, so both together hold with probability ≥ φ.
            let inv_alpha = network_mean_s + server_mean_s;
            Ok(Prediction {
                model: if general {
                    "extension: network M/M/1 + M/G/1 (Pollaczek–Khinchine) in a reservation; √φ bound with the P–K mean"
                } else {
                    "study B: network M/M/1 + M/M/1 in a reservation; √φ percentile bound"
                },
                bandwidth,
                effective_rate: rate,
                utilization,
                server_mean_s,
                network_mean_s,
                mean_s: two_delta + network_mean_s + server_mean_s,
                phi,
                percentile_s: two_delta - (1.0 - phi.sqrt()).ln() * inv_alpha,
                percentile_kind: if general { PercentileKind::Approximation } else { PercentileKind::UpperBound },
            })
        }
    }
}

/// One point of a curve over λ (study B's figures plot response time against the arrival rate).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepPoint {
    pub lambda: f64,
    /// `None` past the stability boundary (the model has no finite answer there).
    pub prediction: Option<Prediction>,
}

/// Predictions for `steps` arrival rates evenly spaced from `from` to `to` (inclusive); points
/// beyond the stability boundary carry `None` instead of failing the whole curve.
pub fn sweep_lambda(
    scenario: &Scenario,
    reservation: &Reservation,
    phi: f64,
    from: f64,
    to: f64,
    steps: usize,
) -> Result<Vec<SweepPoint>> {
    positive("sweep FROM", from)?;
    if steps < 2 || to.partial_cmp(&from) != Some(std::cmp::Ordering::Greater) || !to.is_finite() {
        return Err(ModelError::BadSweep { from, to, steps });
    }
    check_phi(phi)?;
    (0..steps)
        .map(|i| {
            let lambda = from + (to - from) * i as f64 / (steps - 1) as f64;
            let s = Scenario { lambda, ..*scenario };
            match predict(&s, reservation, phi) {
                Ok(p) => Ok(SweepPoint { lambda, prediction: Some(p) }),
                Err(ModelError::UnstableCpu { .. } | ModelError::UnstableNetwork { .. }) => {
                    Ok(SweepPoint { lambda, prediction: None })
                }
                Err(e) => Err(e),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
