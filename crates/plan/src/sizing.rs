//! A workload's SLO turned into a reservation: the smallest `(runtime, period)` meeting it under
//! the periodic-task model (`rtslice_model::periodic`), or the spec's own reservation checked
//! against it. Pure, like the rest of the planner: the profile is already in the spec.
//!
//! What the kernel does to budgets enters through [`SizingFacts`]: exact enforcement (what the
//! planner, `apply` and the node size with, the pessimistic case: the tick's credit only ever lets
//! a job finish earlier in the model), or tick enforcement for the model's own comparisons.

use std::time::Duration;

use rtslice_model::periodic::{self, Analysis, Enforcement, PeriodicTarget, ProfileExecution};
use rtslice_spec::{Demand, Profile, Slo, Workload, MAX_PERIOD, MIN_PERIOD};
use serde::{Deserialize, Serialize};

use crate::{bw_of, pct, Bw, Reservation};

/// What the kernel does to budgets, as far as sizing needs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizingFacts {
    pub enforcement: Enforcement,
}

/// Exact enforcement, also where the kernel charges budgets only at ticks (no HRTICK): the tick
/// model's credit (a job overrunning its exhausted budget until the next tick) under-predicted a
/// real periodic job's misses 8-60x on a quiet host, exact enforcement 1.1-4.6x (docs/model.md,
/// "Validation") — a vBS thread blocks every period and the kernel charges it at every sleep, so
/// the credit is mostly not there, and budgets sized on it were too small for the SLO.
impl Default for SizingFacts {
    fn default() -> Self {
        SizingFacts { enforcement: Enforcement::Exact }
    }
}

/// The SLO a reservation was sized for, in the plan's JSON units.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SloTarget {
    DeadlineMissRatio { max: f64 },
    P99Response { max_ns: u64 },
}

/// How a workload's reservation relates to its SLO (`WorkloadPlan::sizing`; docs/plan.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sizing {
    /// `sized`: the planner chose the reservation; `checked`: the spec gave it and it meets the SLO.
    pub basis: SizingBasis,
    pub target: SloTarget,
    /// The model's miss ratio under the reservation: P(response > deadline), truncation included.
    pub predicted_miss_ratio: f64,
    /// The model's 99th-percentile response time (None: it lies beyond the solved range).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_p99_ns: Option<u64>,
    /// The target's bound less the prediction, in the target's unit (a probability, or ns):
    /// positive is room to spare.
    pub margin: f64,
    /// Upper bound on the probability the truncated backlog chain misplaces (Kingman).
    pub truncation_error: f64,
    /// Mean CPU time per job over the reservation's supply per job: how busy the budget is.
    pub utilization: f64,
    /// The miss ratio one grid step of runtime below (sized only: it misses the target there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub miss_ratio_one_step_below: Option<f64>,
    /// The budget's enforcement the model assumed: the tick length (ns) without HRTICK, else none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tick_ns: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SizingBasis {
    Sized,
    Checked,
}

/// The model's view of a spec profile.
pub fn model_profile(p: &Profile) -> periodic::Profile {
    let s = |d: Duration| d.as_secs_f64();
    let execution = if p.histogram.is_empty() {
        let e = &p.execution;
        ProfileExecution::Quantiles {
            min_s: e.min.map(s),
            p50_s: e.p50.map(s),
            p90_s: e.p90.map(s),
            p99_s: e.p99.map(s),
            p999_s: e.p999.map(s),
            max_s: s(e.max),
        }
    } else {
        ProfileExecution::Histogram(p.histogram.iter().map(|b| (s(b.value), b.count as f64)).collect())
    };
    periodic::Profile { period_s: s(p.period), deadline_s: s(p.deadline), execution }
}

fn target_of(slo: Slo) -> (PeriodicTarget, SloTarget) {
    match slo {
        Slo::DeadlineMissRatio(max) => (PeriodicTarget::MissRatio { max }, SloTarget::DeadlineMissRatio { max }),
        Slo::P99Response(d) => (
            PeriodicTarget::ResponseQuantile { phi: 0.99, max_s: d.as_secs_f64() },
            SloTarget::P99Response { max_ns: d.as_nanos() as u64 },
        ),
    }
}

fn describe(t: SloTarget) -> String {
    match t {
        SloTarget::DeadlineMissRatio { max } => format!("deadline miss ratio ≤ {max}"),
        SloTarget::P99Response { max_ns } => format!("p99 response ≤ {}", fmt(Duration::from_nanos(max_ns))),
    }
}

fn fmt(d: Duration) -> String {
    rtslice_spec::units::format_duration(d)
}

fn nanos(s: f64) -> Duration {
    Duration::from_nanos((s * 1e9).round() as u64)
}

/// The reservation a workload's SLO calls for, with its sizing; `Ok(None)` without an SLO. `given`
/// is the spec's reservation (its period defaulted), checked instead of sized. `cap` is the per-CPU
/// cap the reservation must fit under. `Err` is the reason the workload is refused.
pub(crate) fn size(w: &Workload, given: Option<Reservation>, cap: Bw, facts: &SizingFacts) -> Result<Option<(Reservation, Sizing)>, String> {
    let (Some(slo), Some(profile)) = (w.slo, &w.profile) else { return Ok(None) };
    let task = model_profile(profile).task().map_err(|e| format!("its profile cannot be modelled: {e}"))?;
    let (target, slo_target) = target_of(slo);
    let analysis = Analysis::new(facts.enforcement);
    let tick_ns = match facts.enforcement {
        Enforcement::Tick { tick_s } => Some(nanos(tick_s).as_nanos() as u64),
        Enforcement::Exact => None,
    };
    let sizing = |basis, pred: &periodic::PeriodicPrediction, below: Option<&periodic::PeriodicPrediction>| Sizing {
        basis,
        target: slo_target,
        predicted_miss_ratio: pred.miss_ratio,
        predicted_p99_ns: pred.p99_s.map(|p| nanos(p).as_nanos() as u64),
        margin: match target {
            PeriodicTarget::ResponseQuantile { .. } => target.slack(pred) * 1e9,
            PeriodicTarget::MissRatio { .. } => target.slack(pred),
        },
        truncation_error: pred.truncation_error,
        utilization: pred.utilization,
        miss_ratio_one_step_below: below.map(|b| b.miss_ratio),
        tick_ns,
    };
    if let Some(r) = given {
        let m = rtslice_model::Reservation { runtime_s: r.runtime.as_secs_f64(), period_s: r.period.as_secs_f64() };
        let hint = || match periodic::size_periodic(&task, target, &[m.period_s], &analysis) {
            Ok(z) => format!("a runtime of {} every {} would meet it", fmt(nanos(z.runtime_s)), fmt(r.period)),
            Err(e) => format!("no runtime at this period meets it ({e})"),
        };
        let given = format!("its reservation {} every {}", fmt(r.runtime), fmt(r.period));
        let pred = match periodic::analyze(&task, &m, &analysis) {
            Ok(p) => p,
            Err(rtslice_model::ModelError::UnstablePeriodic { .. }) => {
                return Err(format!(
                    "{given} does not meet its SLO ({}): it supplies less than the profile's mean demand, so the backlog grows \
                     without bound; {}, or drop `demand` to let the planner size it",
                    describe(slo_target),
                    hint()
                ))
            }
            Err(e) => return Err(format!("{given} cannot be checked against its SLO: {e}")),
        };
        let s = sizing(SizingBasis::Checked, &pred, None);
        if s.margin < 0.0 {
            return Err(format!(
                "{given} does not meet its SLO ({}): the model predicts a miss ratio of {:.3e}{}; {}, \
                 or drop `demand` to let the planner size it",
                describe(slo_target),
                pred.miss_ratio,
                pred.p99_s.map(|p| format!(" and a p99 response of {}", fmt(nanos(p)))).unwrap_or_default(),
                hint()
            ));
        }
        return Ok(Some((r, s)));
    }
    let periods: Vec<f64> = periodic::default_periods(task.period_s, analysis.resolution_s)
        .into_iter()
        .filter(|&p| nanos(p) >= MIN_PERIOD && nanos(p) <= MAX_PERIOD)
        .collect();
    if periods.is_empty() {
        return Err(format!(
            "no reservation period fits its profile's period {}: the candidates (the period, a half, a quarter) must be whole multiples \
             of {} and between {} and {}; profile a period in that range",
            fmt(profile.period),
            fmt(nanos(analysis.resolution_s)),
            fmt(MIN_PERIOD),
            fmt(MAX_PERIOD),
        ));
    }
    let z = periodic::size_periodic(&task, target, &periods, &analysis).map_err(|e| format!("no reservation meets its SLO ({}): {e}", describe(slo_target)))?;
    let r = Reservation::new(nanos(z.runtime_s), nanos(z.period_s));
    if bw_of(r.runtime, r.period) > cap {
        return Err(format!(
            "its SLO ({}) needs {} every {} ({} of a CPU), above the node's cap of {}; relax the SLO or shorten the execution time",
            describe(slo_target),
            fmt(r.runtime),
            fmt(r.period),
            pct(bw_of(r.runtime, r.period)),
            pct(cap)
        ));
    }
    Ok(Some((r, sizing(SizingBasis::Sized, &z.prediction, z.below.as_ref()))))
}

/// The demand the planner places for `w`: the spec's, or the reservation sized for its SLO.
pub(crate) fn sized_demand(w: &Workload, sized: &Reservation) -> Demand {
    match &w.demand {
        Some(d) => d.clone(),
        None => Demand::reservation(sized.runtime, sized.period, 1),
    }
}
