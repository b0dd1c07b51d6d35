//! The closed loop's decision (pure): from one control interval's observation of a reserved
//! workload — the CPU time it used, the jobs it reported and how many of them missed — the runtime
//! per period it should hold next, between its guaranteed minimum and its maximum.
//!
//! The rule is feedback scheduling in the spirit of adaptive reservations (Abeni, Palopoli et al.):
//! a budget is sized to keep its use below a set point, grown fast (one interval) when jobs miss or
//! the budget runs full, shrunk slowly (after several calm intervals, a bounded step at a time) when
//! it is mostly idle. Growing fast and shrinking slowly is what keeps the SLO: a miss costs more than
//! an idle microsecond, and the slack given up goes to best-effort work only once it has been idle
//! for a while. The service ([`crate::service`]) turns a decision into a resize through admission and
//! the journal, and logs the decision's reason.

use std::time::Duration;

/// The runtime grid the loop moves on (the planner's and the kernel's unit is finer; 10 µs keeps
/// decisions from chasing noise and matches the sizing's grid).
pub const STEP: Duration = Duration::from_micros(10);
/// The budget's use the loop aims at after growing: 30 % headroom over the mean demand absorbs the
/// per-period variation the mean hides.
pub const GROW_TO_USE: f64 = 0.7;
/// Above this use of the budget the work is taken to be waiting for budget: grow.
pub const SATURATED_USE: f64 = 0.9;
/// Below this use, after [`CALM_INTERVALS`] calm intervals, shrink.
pub const IDLE_USE: f64 = 0.6;
/// The use a shrink stops at (never tighter than this over the mean demand).
pub const SHRINK_TO_USE: f64 = 0.75;
/// A grow is at least this factor (a burst is met within one interval, not crept up to).
pub const GROW_FACTOR: f64 = 1.25;
/// A shrink is at most this factor per step.
pub const SHRINK_FACTOR: f64 = 0.85;
/// Intervals without misses or saturation before a shrink, and between two shrinks.
pub const CALM_INTERVALS: u32 = 3;
/// The loop acts when the measured miss ratio exceeds this fraction of the SLO's: the margin.
pub const MISS_MARGIN: f64 = 0.5;

/// What bounds the loop for one workload.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounds {
    pub min: Duration,
    pub max: Duration,
    pub period: Duration,
    /// CPUs the reservation is on (the runtime is per CPU).
    pub cpus: u32,
    /// The SLO's deadline-miss ratio, when the workload has one (else the loop follows the budget's
    /// use alone).
    pub target_miss_ratio: Option<f64>,
}

/// One control interval, as the telemetry measured it.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct Observation {
    /// Length of the interval, seconds.
    pub dt_s: f64,
    /// CPU time the workload used in it (all its CPUs), seconds.
    pub used_s: f64,
    /// Jobs (TTIs) the workload reported in it, and how many missed their deadline; `None` when it
    /// reports nothing.
    pub jobs: Option<u64>,
    pub misses: Option<u64>,
    /// Times its budget ran out in the interval (SCHED_DEADLINE throttles the tracer counted, or
    /// the cgroup's throttled periods); `None` when nothing counts them.
    pub throttled: Option<u64>,
    /// Time the hypervisor took from the reservation's CPUs in the interval (their steal, summed),
    /// seconds; 0 on bare metal.
    pub stolen_s: f64,
}

/// What the loop remembers between intervals.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LoopState {
    /// Calm intervals in a row (no misses over the margin, budget not saturated).
    pub calm: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    Keep { why: String },
    Grow { to: Duration, why: String },
    Shrink { to: Duration, why: String },
}

impl Decision {
    /// The runtime the decision asks for (`None`: keep).
    pub fn runtime(&self) -> Option<Duration> {
        match self {
            Decision::Keep { .. } => None,
            Decision::Grow { to, .. } | Decision::Shrink { to, .. } => Some(*to),
        }
    }

    pub fn why(&self) -> &str {
        match self {
            Decision::Keep { why } | Decision::Grow { why, .. } | Decision::Shrink { why, .. } => why,
        }
    }
}

/// `d` rounded up to the loop's grid.
pub fn ceil_step(d: Duration) -> Duration {
    let s = STEP.as_nanos();
    Duration::from_nanos((d.as_nanos().div_ceil(s) * s) as u64)
}

fn us(d: Duration) -> String {
    format!("{} µs", d.as_micros())
}

/// The mean CPU time one CPU's share of the workload needed per period over the interval.
pub fn demand_per_period(b: &Bounds, o: &Observation) -> Option<Duration> {
    let periods = o.dt_s / b.period.as_secs_f64();
    (periods > 0.0 && o.used_s.is_finite() && o.used_s >= 0.0)
        .then(|| Duration::from_secs_f64(o.used_s / periods / f64::from(b.cpus.max(1))))
}

/// How many of an interval's misses the hypervisor's steal explains, at most. A stall of `s` on a
/// reservation's CPU delays the `s / period` jobs released during it, and leaves their work as a
/// backlog that the budget drains only with what the mean demand leaves of it, `runtime − demand`
/// per period: the jobs released while it drains are late too, `s / period × use / (1 − use)` of
/// them. Together `s / period / (1 − use)` jobs (fewer when the deadline is longer than the
/// period: the slack absorbs part). Growing the budget would shorten only the drain; the stall
/// itself is the host's, and sizing a reservation for it would hoard bandwidth from the others.
pub fn explained_by_steal(b: &Bounds, o: &Observation, use_: f64) -> u64 {
    let per_period = o.stolen_s.max(0.0) / b.period.as_secs_f64().max(1e-12);
    // At or above SATURATED_USE the budget is grown anyway; the cap keeps the factor finite.
    (per_period / (1.0 - use_.clamp(0.0, SATURATED_USE))).ceil() as u64
}

/// The runtime to hold after this interval, and why. Always within `[b.min, b.max]` (a runtime
/// outside them, e.g. the first one, is brought inside).
pub fn decide(runtime: Duration, b: &Bounds, o: &Observation, st: &mut LoopState) -> Decision {
    let clamp = |d: Duration| d.clamp(b.min, b.max.max(b.min));
    let Some(demand) = demand_per_period(b, o) else {
        return Decision::Keep { why: "no measurement in this interval".into() };
    };
    let use_ = if runtime.is_zero() { f64::INFINITY } else { demand.as_secs_f64() / runtime.as_secs_f64() };
    let miss_ratio = match (o.jobs, o.misses) {
        (Some(j), Some(m)) if j > 0 => Some(m as f64 / j as f64),
        _ => None,
    };
    let over_margin = |m: u64| match (b.target_miss_ratio, o.jobs) {
        (Some(t), Some(j)) if j > 0 => m > 0 && m as f64 / j as f64 > t * MISS_MARGIN,
        _ => false,
    };
    let stolen = explained_by_steal(b, o, use_);
    // Misses the host's steal explains are not the budget's to fix; the interval is no evidence
    // either way (not calm: nothing shrinks on it; the calm before it still counts).
    let raw_missing = o.misses.is_some_and(over_margin);
    let missing = o.misses.is_some_and(|m| over_margin(m.saturating_sub(stolen)));
    let stolen_excused = raw_missing && !missing;
    let saturated = use_ >= SATURATED_USE;
    // Misses while the budget never ran out are not the budget's: the host stalled the workload
    // (a VM's steal, an interrupt storm) or its own work came late. Growing the budget would take
    // bandwidth from others and cure nothing, so the loop says so and keeps it.
    // Such an interval is not calm either: nothing shrinks while jobs miss.
    let excused = missing && o.throttled == Some(0) && !saturated;
    let missing = missing && !excused;
    let above_margin = || format!("misses above {} of the target {:.1e}", MISS_MARGIN, b.target_miss_ratio.unwrap_or_default());
    let seen = format!(
        "used {} per period ({:.0} % of the budget){}{}{}",
        us(demand),
        use_ * 100.0,
        match o.throttled {
            Some(t) => format!(", ran out {t} times"),
            None => String::new(),
        },
        match (miss_ratio, o.jobs, o.misses) {
            (Some(r), Some(j), Some(m)) => format!(", {m} of {j} jobs missed ({r:.1e})"),
            _ => String::new(),
        },
        if o.stolen_s > 0.0 {
            format!(", the host took {:.0} ms of its CPUs (explains ≤ {stolen} misses)", o.stolen_s * 1e3)
        } else {
            String::new()
        }
    );
    if missing || saturated {
        st.calm = 0;
        let want = clamp(ceil_step(runtime.mul_f64(GROW_FACTOR).max(demand.div_f64(GROW_TO_USE))));
        let cause = if missing {
            above_margin()
        } else {
            "the budget runs full".into()
        };
        return if want > runtime {
            Decision::Grow { to: want, why: format!("{cause}: {seen}") }
        } else if want < runtime {
            // Only when the runtime was above max: bring it inside.
            Decision::Shrink { to: want, why: format!("above max {}: {seen}", us(b.max)) }
        } else {
            Decision::Keep { why: format!("{cause}, but already at max {}: {seen}", us(b.max)) }
        };
    }
    st.calm = if excused {
        0
    } else if stolen_excused {
        st.calm
    } else {
        st.calm + 1
    };
    if runtime < b.min {
        return Decision::Grow { to: clamp(runtime), why: format!("below min {}", us(b.min)) };
    }
    if runtime > b.max {
        return Decision::Shrink { to: clamp(runtime), why: format!("above max {}", us(b.max)) };
    }
    if excused {
        return Decision::Keep {
            why: format!("{}, but the budget never ran out (0 throttles): the host or the work, not the reservation: {seen}", above_margin()),
        };
    }
    if stolen_excused {
        return Decision::Keep { why: format!("{}, but the hypervisor's steal explains them: {seen}", above_margin()) };
    }
    if st.calm >= CALM_INTERVALS && use_ < IDLE_USE {
        let want = clamp(ceil_step(runtime.mul_f64(SHRINK_FACTOR).max(demand.div_f64(SHRINK_TO_USE))));
        if want + STEP <= runtime {
            st.calm = 0;
            return Decision::Shrink { to: want, why: format!("{} calm intervals: {seen}", CALM_INTERVALS) };
        }
        return Decision::Keep { why: format!("calm, at min {} or its demand: {seen}", us(b.min)) };
    }
    Decision::Keep { why: seen }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bounds() -> Bounds {
        Bounds {
            min: Duration::from_micros(200),
            max: Duration::from_micros(900),
            period: Duration::from_millis(1),
            cpus: 1,
            target_miss_ratio: Some(1e-3),
        }
    }

    /// `demand_us` per period over a 2 s interval (2000 jobs), with `misses`.
    fn obs(demand_us: f64, misses: u64) -> Observation {
        Observation { dt_s: 2.0, used_s: demand_us * 1e-6 * 2000.0, jobs: Some(2000), misses: Some(misses), throttled: None, stolen_s: 0.0 }
    }

    #[test]
    fn misses_without_a_throttle_are_the_hosts_and_grow_nothing() {
        let mut st = LoopState { calm: 5 };
        let host = Observation { throttled: Some(0), ..obs(250.0, 10) };
        let d = decide(Duration::from_micros(500), &bounds(), &host, &mut st);
        assert_eq!(d.runtime(), None, "{d:?}");
        assert!(d.why().contains("never ran out"), "{}", d.why());
        // Not calm either: no shrink follows while jobs miss.
        assert_eq!(st.calm, 0);
        for _ in 0..2 * CALM_INTERVALS {
            assert_eq!(decide(Duration::from_micros(500), &bounds(), &host, &mut st).runtime(), None);
        }
        // Throttled: the budget's misses, grown at once.
        let short = Observation { throttled: Some(40), ..obs(250.0, 10) };
        assert!(matches!(decide(Duration::from_micros(300), &bounds(), &short, &mut st), Decision::Grow { .. }));
        // A budget that runs full grows whatever the throttle count says.
        let full = Observation { throttled: Some(0), ..obs(290.0, 10) };
        assert!(matches!(decide(Duration::from_micros(300), &bounds(), &full, &mut st), Decision::Grow { .. }));
    }

    #[test]
    fn misses_the_hosts_steal_explains_grow_nothing() {
        // 300 of 500 µs used (60 %): 40 ms stolen explain 40 / (1 − 0.6) = 100 late jobs.
        let mut st = LoopState { calm: 2 };
        let stolen = Observation { throttled: Some(20), stolen_s: 0.040, ..obs(300.0, 100) };
        assert_eq!(explained_by_steal(&bounds(), &stolen, 0.6), 100);
        let d = decide(Duration::from_micros(500), &bounds(), &stolen, &mut st);
        assert_eq!(d.runtime(), None, "{d:?}");
        assert!(d.why().contains("steal explains them") && d.why().contains("the host took 40 ms"), "{}", d.why());
        // No evidence either way: the calm before it still counts, and nothing shrinks on it.
        assert_eq!(st.calm, 2);
        // What steal does not explain is the budget's: 10 ms explain 25 of 100; 75 in 2000 is over
        // half of the 1e-3 target.
        let short = Observation { stolen_s: 0.010, ..stolen };
        assert!(matches!(decide(Duration::from_micros(500), &bounds(), &short, &mut st), Decision::Grow { .. }));
        assert_eq!(st.calm, 0);
    }

    #[test]
    fn misses_grow_at_once() {
        let mut st = LoopState { calm: 5 };
        let d = decide(Duration::from_micros(300), &bounds(), &obs(250.0, 10), &mut st);
        // 1.25 × 300 = 375 > 250 / 0.7 = 357.
        assert_eq!(d.runtime(), Some(Duration::from_micros(380)), "{d:?}");
        assert!(d.why().contains("10 of 2000"), "{}", d.why());
        assert_eq!(st.calm, 0);
    }

    #[test]
    fn a_full_budget_grows_to_its_demand_over_the_set_point() {
        let mut st = LoopState::default();
        let d = decide(Duration::from_micros(300), &bounds(), &obs(560.0, 0), &mut st);
        assert_eq!(d.runtime(), Some(Duration::from_micros(800)), "{d:?}");
    }

    #[test]
    fn misses_within_the_margin_are_no_reason() {
        let mut st = LoopState::default();
        // 1 in 2000 = 5e-4, under half of a 4e-3 target.
        let b = Bounds { target_miss_ratio: Some(4e-3), ..bounds() };
        let d = decide(Duration::from_micros(500), &b, &obs(300.0, 1), &mut st);
        assert_eq!(d.runtime(), None, "{d:?}");
    }

    #[test]
    fn shrinking_waits_for_calm_and_goes_a_step_at_a_time() {
        let mut st = LoopState::default();
        let b = bounds();
        let mut r = Duration::from_micros(900);
        let mut changes = Vec::new();
        for _ in 0..40 {
            if let Some(to) = decide(r, &b, &obs(150.0, 0), &mut st).runtime() {
                assert!(to < r);
                changes.push(to);
                r = to;
            }
        }
        assert_eq!(changes.first(), Some(&Duration::from_micros(770)), "{changes:?}");
        // Down until the budget is used above IDLE_USE (150 µs / 250 µs), never below the demand's
        // room (150 / 0.75 = 200 µs, here also the minimum).
        assert!(r > Duration::from_micros(200) && r <= Duration::from_micros(250), "{changes:?}");
        assert_eq!(changes.len(), 9, "one step every {CALM_INTERVALS} intervals: {changes:?}");
    }

    #[test]
    fn no_measurement_keeps() {
        let mut st = LoopState::default();
        let o = Observation { dt_s: 0.0, ..Default::default() };
        assert_eq!(decide(Duration::from_micros(300), &bounds(), &o, &mut st).runtime(), None);
    }

    proptest! {
        #[test]
        fn the_runtime_stays_within_its_bounds(
            start in 1u64..2000, min in 10u64..500, span in 0u64..800, demand in 0.0f64..2000.0,
            jobs in 0u64..5000, misses in 0u64..100, calm in 0u32..10, cpus in 1u32..4,
            throttled in proptest::option::of(0u64..50),
        ) {
            let b = Bounds { min: Duration::from_micros(min), max: Duration::from_micros(min + span), period: Duration::from_millis(1), cpus, target_miss_ratio: Some(1e-3) };
            let o = Observation { dt_s: 2.0, used_s: demand * 1e-6 * 2000.0 * f64::from(cpus), jobs: Some(jobs), misses: Some(misses.min(jobs)), throttled, stolen_s: 0.0 };
            let mut st = LoopState { calm };
            let r = Duration::from_micros(start);
            let d = decide(r, &b, &o, &mut st);
            if let Some(to) = d.runtime() {
                prop_assert!(to >= b.min && to <= b.max, "{d:?}");
                prop_assert!(to != r);
            } else {
                prop_assert!(r >= b.min && r <= b.max, "kept {r:?} outside {b:?}: {d:?}");
            }
        }

        #[test]
        fn steal_never_makes_the_loop_ask_for_more(
            start in 200u64..900, demand in 0.0f64..900.0, misses in 0u64..400, calm in 0u32..10,
            throttled in proptest::option::of(0u64..50), stolen_ms in 0.0f64..500.0,
        ) {
            let b = bounds();
            let r = Duration::from_micros(start);
            let o = Observation { throttled, ..obs(demand, misses) };
            let held = |o: &Observation| decide(r, &b, o, &mut LoopState { calm }).runtime().unwrap_or(r);
            let with_steal = Observation { stolen_s: stolen_ms * 1e-3, ..o };
            prop_assert!(held(&with_steal) <= held(&o), "{:?} with steal, {:?} without", held(&with_steal), held(&o));
        }

        #[test]
        fn misses_over_the_margin_never_shrink(start in 200u64..900, demand in 0.0f64..900.0, misses in 3u64..100) {
            let b = bounds();
            let mut st = LoopState { calm: 10 };
            let r = Duration::from_micros(start);
            let d = decide(r, &b, &obs(demand, misses), &mut st);
            prop_assert!(d.runtime().is_none_or(|to| to > r), "{d:?}");
        }

        #[test]
        fn a_shrink_leaves_the_mean_demand_room(start in 200u64..900, demand in 0.0f64..900.0) {
            let b = bounds();
            let mut st = LoopState { calm: 10 };
            let r = Duration::from_micros(start);
            if let Decision::Shrink { to, .. } = decide(r, &b, &obs(demand, 0), &mut st) {
                prop_assert!(to == b.min || to.as_secs_f64() * SHRINK_TO_USE >= demand * 1e-6 - 1e-9, "{to:?} for {demand} µs");
            }
        }
    }
}
