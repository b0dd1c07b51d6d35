//! A periodic job sequence replayed through the kernel's SCHED_DEADLINE rules, event by event — the
//! reference the analytic chain ([`crate::periodic`]) is checked against, and a predictor in its own
//! right where the chain's fluid supply is too smooth.
//!
//! Why: without HRTICK the kernel charges a deadline task's runtime only at the scheduler tick and
//! when the task blocks or is preempted. A job that finishes soon after its budget ran out is charged
//! the overrun at its sleep and repays it later (the chain's tick "credit"). A *backlogged* task
//! never blocks: it runs on past its budget until the next tick (up to a whole tick, 4 ms at
//! HZ = 250), the runtime goes that far negative, and the replenishment timer then adds `Q` per `P`
//! until it is positive again — so the supply comes in bursts of up to a tick followed by blackouts
//! of up to `tick · (1 − Q/P) / (Q/P)`, during which every released job waits. The long-run rate is
//! still `Q/P`; the tail is not. The chain, which supplies `N·Q` per job period, cannot see that.
//!
//! The rules replayed (kernel/sched/deadline.c, one task alone on its CPU, `D = P`, no reclaim):
//! - **wake-up** (`update_dl_entity`): a task waking with its deadline passed, or with more runtime
//!   left than its bandwidth allows until that deadline (`r·P > Q·(d − t)`), gets `d = t + P`,
//!   `r = Q`; otherwise it keeps both. A throttled task that wakes stays throttled until its timer.
//! - **charging** (`update_curr_dl`): the runtime used since the last charge is subtracted at each
//!   tick while running and when the task blocks; with exact enforcement (HRTICK) at the instant it
//!   reaches 0.
//! - **throttling** (`dl_runtime_exceeded`: `r ≤ 0`): the replenishment timer fires at the current
//!   deadline (`dl_next_period`, `= d` for `D = P`); if that has already passed it fires at once.
//! - **replenishment** (`replenish_dl_entity`): `d += P, r += Q` until `r > 0`; a deadline still in
//!   the past after that restarts the server: `d = t + P`, `r = Q`.
//!
//! Jobs are served in order (FIFO), as a vBS worker does; a job's response is its completion less
//! its release. Pure and deterministic: the tick's phase is an input (the caller averages over it).

use serde::Serialize;

use crate::{non_negative, positive, ModelError, Reservation, Result};

/// How the replay charges the budget.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Charging {
    /// At the instant the runtime reaches 0 (HRTICK / HRTICK_DL on).
    Exact,
    /// At ticks every `tick_s`, the first at `phase_s` after the first release, and when the task blocks.
    Tick { tick_s: f64, phase_s: f64 },
}

/// What a replay gives.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Replayed {
    pub jobs: usize,
    pub misses: usize,
    /// Each job's response time (completion − release), in release order.
    pub response_s: Vec<f64>,
}

impl Replayed {
    pub fn miss_ratio(&self) -> f64 {
        self.misses as f64 / self.jobs.max(1) as f64
    }
}

/// Replays jobs released every `period_s` (job `k` at `k·period_s`, needing `exec_s[k]` of CPU) on
/// a CPU of their own under the reservation `r` with `charging`; a job misses when its response
/// exceeds `deadline_s`.
pub fn replay(exec_s: &[f64], period_s: f64, deadline_s: f64, r: &Reservation, charging: Charging) -> Result<Replayed> {
    positive("period", period_s)?;
    positive("deadline", deadline_s)?;
    if let Some(&bad) = exec_s.iter().find(|c| !(c.is_finite() && **c >= 0.0)) {
        return Err(ModelError::BadDistribution(format!("execution time {bad} s is negative or not finite")));
    }
    if let Charging::Tick { tick_s, phase_s } = charging {
        positive("tick", tick_s)?;
        non_negative("tick phase", phase_s)?;
    }
    // Integer nanoseconds: the replay runs over millions of events and must not drift.
    let ns = |s: f64| (s * 1e9).round() as i64;
    let (t_job, q, p) = (ns(period_s), ns(r.runtime_s), ns(r.period_s));
    let tick = match charging {
        Charging::Tick { tick_s, phase_s } => Some((ns(tick_s).max(1), ns(phase_s))),
        Charging::Exact => None,
    };
    let mut s = Server { q, p, runtime: 0, deadline: 0, throttled: false };
    let mut queue: std::collections::VecDeque<(usize, i64)> = std::collections::VecDeque::new();
    let deadline = ns(deadline_s);
    let mut response = vec![0.0; exec_s.len()];
    let mut misses = 0usize;
    let mut next_job = 0usize;
    let mut now = 0i64;
    // While the task runs: when it was last charged (what the next charge subtracts from).
    let mut charged_at = 0i64;
    let mut next_tick = tick.map(|(_, phase)| phase);
    loop {
        let running = !queue.is_empty() && !s.throttled;
        if let Some((len, _)) = tick {
            // Ticks that passed while the task did not run charged nothing.
            while next_tick.is_some_and(|t| t < now) {
                next_tick = next_tick.map(|t| t + len);
            }
        }
        let release = (next_job < exec_s.len()).then(|| next_job as i64 * t_job);
        let done = running.then(|| now + queue[0].1);
        let exhausted = (running && tick.is_none()).then(|| charged_at + s.runtime);
        let tick_at = next_tick.filter(|_| running);
        let timer = s.throttled.then_some(s.deadline);
        let Some(at) = [release, done, exhausted, tick_at, timer].into_iter().flatten().min() else { break };
        if running {
            queue[0].1 -= at - now;
        }
        now = at;
        if running && queue[0].1 <= 0 {
            let (k, _) = queue.pop_front().expect("a running task has a job");
            let r_ns = now - k as i64 * t_job;
            misses += usize::from(r_ns > deadline);
            response[k] = r_ns as f64 * 1e-9;
            if queue.is_empty() {
                // It blocks: the kernel charges it now.
                s.charge(now - charged_at, now);
            }
        }
        let still = !queue.is_empty() && !s.throttled;
        if still && running && (exhausted == Some(now) || tick_at == Some(now)) {
            s.charge(now - charged_at, now);
            charged_at = now;
        }
        if let (Some((len, _)), Some(t)) = (tick, tick_at) {
            if t == now {
                next_tick = Some(t + len);
            }
        }
        if s.throttled && s.deadline <= now {
            s.replenish(now);
        }
        if release == Some(now) {
            let asleep = queue.is_empty();
            queue.push_back((next_job, ns(exec_s[next_job])));
            next_job += 1;
            if asleep && !s.throttled {
                s.wake(now);
            }
        }
        // A task that starts (or resumes) running is charged from now on.
        if !queue.is_empty() && !s.throttled && !(running && still) {
            charged_at = now;
        }
    }
    Ok(Replayed { jobs: exec_s.len(), misses, response_s: response })
}

/// A replay's result over several tick phases, pooled: what the kernel's rules predict for a job
/// sequence when the tick's phase against the releases is unknown (it is fixed within a run, as T
/// divides the tick, but differs from run to run).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pooled {
    /// Jobs replayed over all phases (the sequence's length × the phases).
    pub jobs: usize,
    pub misses: usize,
    pub miss_ratio: f64,
    /// Response-time percentiles (rtslice-stats' definition) over all phases' jobs.
    pub p50_s: f64,
    pub p99_s: f64,
    pub p999_s: f64,
}

/// `exec` replayed under `r`: with `tick_s` Some, with tick charging at `phases` tick phases evenly
/// spread over one tick, pooled; with None, once with exact charging (the phase does not matter).
pub fn replay_pooled(exec_s: &[f64], period_s: f64, deadline_s: f64, r: &Reservation, tick_s: Option<f64>, phases: usize) -> Result<Pooled> {
    let chargings: Vec<Charging> = match tick_s {
        Some(tick_s) => (0..phases.max(1)).map(|i| Charging::Tick { tick_s, phase_s: tick_s * i as f64 / phases.max(1) as f64 }).collect(),
        None => vec![Charging::Exact],
    };
    let mut resp = Vec::with_capacity(exec_s.len() * chargings.len());
    let mut misses = 0;
    for c in chargings {
        let x = replay(exec_s, period_s, deadline_s, r, c)?;
        misses += x.misses;
        resp.extend(x.response_s);
    }
    let sorted = rtslice_stats::sorted_finite(&resp);
    let q = |phi: f64| rtslice_stats::percentile_sorted(&sorted, phi * 100.0).unwrap_or(0.0);
    Ok(Pooled {
        jobs: resp.len(),
        misses,
        miss_ratio: misses as f64 / resp.len().max(1) as f64,
        p50_s: q(0.5),
        p99_s: q(0.99),
        p999_s: q(0.999),
    })
}

/// The reservation's CBS state.
struct Server {
    q: i64,
    p: i64,
    runtime: i64,
    deadline: i64,
    throttled: bool,
}

impl Server {
    /// `update_dl_entity` on a wake-up at `now`.
    fn wake(&mut self, now: i64) {
        // r/(d − t) > Q/P, in integers: r·P > Q·(d − t).
        let overflow = (self.runtime as i128) * (self.p as i128) > (self.q as i128) * ((self.deadline - now) as i128);
        if self.deadline <= now || overflow {
            self.deadline = now + self.p;
            self.runtime = self.q;
        }
    }

    /// `update_curr_dl`: `used` ns since the last charge; throttled at `r ≤ 0`, replenished at once
    /// if its deadline has already passed.
    fn charge(&mut self, used: i64, now: i64) {
        self.runtime -= used;
        if self.runtime <= 0 {
            self.throttled = true;
            if self.deadline <= now {
                self.replenish(now);
            }
        }
    }

    /// `replenish_dl_entity` when the timer fires (or at once) at `now`.
    fn replenish(&mut self, now: i64) {
        while self.runtime <= 0 {
            self.deadline += self.p;
            self.runtime += self.q;
        }
        if self.deadline <= now {
            self.deadline = now + self.p;
            self.runtime = self.q;
        }
        self.throttled = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(q_us: f64, p_us: f64) -> Reservation {
        Reservation::new(q_us * 1e-6, p_us * 1e-6).unwrap()
    }

    fn us(x: &[f64]) -> Vec<f64> {
        x.iter().map(|v| v * 1e-6).collect()
    }

    #[test]
    fn jobs_within_the_budget_respond_in_their_execution_time() {
        let exec = us(&[300.0, 100.0, 399.0, 0.0, 250.0]);
        for charging in [Charging::Exact, Charging::Tick { tick_s: 4e-3, phase_s: 0.0 }] {
            let r = replay(&exec, 1e-3, 3e-3, &res(400.0, 1000.0), charging).unwrap();
            for (got, want) in r.response_s.iter().zip(&exec) {
                assert!((got - want).abs() < 1e-9, "{charging:?}: {got} vs {want}");
            }
            assert_eq!(r.misses, 0);
        }
    }

    #[test]
    fn exact_enforcement_serves_q_per_period_to_a_long_job() {
        // 1000 µs of work in 400 µs budgets every 1 ms: 400 + 400 + 200 → done at 2 ms + 200 µs.
        let r = replay(&us(&[1000.0]), 1e-3, 3e-3, &res(400.0, 1000.0), Charging::Exact).unwrap();
        assert!((r.response_s[0] - 2.2e-3).abs() < 1e-9, "{:?}", r.response_s);
    }

    #[test]
    fn without_hrtick_a_job_overruns_to_the_tick_and_repays_its_debt_later() {
        // Q = 400 µs every 1 ms, ticks at 3, 7, … ms. Job 0 (3.5 ms of work) runs unthrottled from 0
        // to the tick at 3 ms, is charged 3 ms (runtime −2.6 ms); its timer (the deadline, 1 ms) has
        // passed, so it is replenished at once: seven periods' budgets, runtime 0.2 ms, deadline
        // 8 ms. It runs on: job 0 done at 3.5 ms; job 1 (released at 1 ms, pending, so no block and
        // no charge in between) runs 3.5–3.6 ms, and the empty jobs 2 and 3 end with it. Then it
        // blocks and is charged 0.6 ms: −0.4 ms, throttled until 8 ms — job 4, released at 4 ms,
        // waits until then (8–8.1 ms).
        let r = replay(&us(&[3500.0, 100.0, 0.0, 0.0, 100.0]), 1e-3, 3e-3, &res(400.0, 1000.0), Charging::Tick { tick_s: 4e-3, phase_s: 3e-3 })
            .unwrap();
        let want = [3.5e-3, 2.6e-3, 1.6e-3, 0.6e-3, 4.1e-3];
        for (k, (got, want)) in r.response_s.iter().zip(want).enumerate() {
            assert!((got - want).abs() < 1e-9, "job {k}: {got} vs {want}: {:?}", r.response_s);
        }
        assert_eq!(r.misses, 2);
        // With exact enforcement job 0 gets 400 µs in each period: its 3.5 ms end at 8.3 ms.
        let e = replay(&us(&[3500.0, 100.0, 0.0, 0.0, 100.0]), 1e-3, 3e-3, &res(400.0, 1000.0), Charging::Exact).unwrap();
        assert!((e.response_s[0] - 8.3e-3).abs() < 1e-9, "{:?}", e.response_s);
    }

    /// `n` execution times drawn independently from `law` ((value, probability) pairs) by a fixed
    /// 64-bit LCG (Knuth's MMIX constants) seeded with `seed`.
    fn draw(law: &[(f64, f64)], n: usize, seed: u64) -> Vec<f64> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                let mut acc = 0.0;
                law.iter().find(|(_, p)| {
                    acc += p;
                    u < acc
                }).map_or(law[law.len() - 1].0, |l| l.0)
            })
            .collect()
    }

    #[test]
    fn pooled_replays_count_every_phase() {
        let exec = draw(&[(200e-6, 0.6), (900e-6, 0.4)], 5_000, 3);
        let r = res(480.0, 1000.0);
        let tick = replay_pooled(&exec, 1e-3, 2e-3, &r, Some(4e-3), 4).unwrap();
        assert_eq!(tick.jobs, 20_000);
        let by_hand: usize = (0..4).map(|i| replay(&exec, 1e-3, 2e-3, &r, Charging::Tick { tick_s: 4e-3, phase_s: i as f64 * 1e-3 }).unwrap().misses).sum();
        assert_eq!(tick.misses, by_hand);
        assert!(tick.misses > 0 && (tick.miss_ratio - by_hand as f64 / 20_000.0).abs() < 1e-15);
        assert!(tick.p50_s <= tick.p99_s && tick.p99_s <= tick.p999_s);
        let exact = replay_pooled(&exec, 1e-3, 2e-3, &r, None, 4).unwrap();
        assert_eq!((exact.jobs, exact.misses), (5_000, replay(&exec, 1e-3, 2e-3, &r, Charging::Exact).unwrap().misses));
    }

    /// Why the planner sizes with the chain for exact enforcement and does not also replay the
    /// kernel's tick rules (docs/model.md "Sizing by replay"): for jobs
    /// drawn independently from a profile, the chain's smallest runtime already meets the target
    /// under the tick rules replayed, even for heavy tails (jobs longer than the budget, which overrun
    /// to the tick and are then blacked out while they repay). Replayed miss ratio / target at the
    /// chain's size: 0.004–0.76 over these profiles in the draws tried. The sweeps' replays exceeded the chain only on
    /// *measured* sequences, whose long jobs come in bursts — an order a profile does not carry.
    #[test]
    fn on_independent_jobs_the_tick_rules_never_need_more_than_the_exact_chain() {
        let g = 10e-6;
        for (long_us, p_long, max) in [(900.0, 0.1, 1e-2), (1200.0, 0.05, 1e-2), (2000.0, 0.05, 1e-1), (3000.0, 0.02, 5e-2), (4000.0, 0.01, 3e-2), (5000.0, 0.005, 2e-2)] {
            let law = [(200e-6, 1.0 - p_long), (long_us * 1e-6, p_long)];
            let task = crate::PeriodicTask { period_s: 1e-3, deadline_s: 3e-3, execution: crate::ExecutionTime::from_weights(&law).unwrap() };
            let target = crate::PeriodicTarget::MissRatio { max };
            let z = crate::size_periodic(&task, target, &[1e-3], &crate::Analysis { resolution_s: g, ..crate::Analysis::new(crate::Enforcement::Exact) }).unwrap();
            let exec = draw(&law, 100_000, 11);
            let r = Reservation::new(z.runtime_s, z.period_s).unwrap();
            let tick = replay_pooled(&exec, 1e-3, 3e-3, &r, Some(4e-3), 4).unwrap();
            assert!(tick.miss_ratio <= max, "{long_us} µs w.p. {p_long}: the chain sizes {} µs, the tick rules miss {} > {max}", z.runtime_s * 1e6, tick.miss_ratio);
        }
    }

    #[test]
    fn exact_charging_agrees_with_the_periodic_chain() {
        // The chain (crate::periodic, exact enforcement) solves what this replay does with exact
        // charging when server periods stay aligned with releases (P = T): their miss ratios must
        // agree up to the sampling error of the replayed sequence. Execution times drawn from a
        // four-point law (10 µs grid, as the chain's) by a fixed LCG, utilization 0.86.
        let law = [(200e-6, 0.45), (330e-6, 0.3), (460e-6, 0.15), (600e-6, 0.1)];
        let exec = draw(&law, 200_000, 0x2545_f491);
        let r = res(370.0, 1000.0);
        let replayed = replay(&exec, 1e-3, 2e-3, &r, Charging::Exact).unwrap();
        let task = crate::PeriodicTask { period_s: 1e-3, deadline_s: 2e-3, execution: crate::ExecutionTime::from_weights(&law).unwrap() };
        let chain = crate::analyze(&task, &r, &crate::Analysis::new(crate::Enforcement::Exact)).unwrap();
        let (m, c) = (replayed.miss_ratio(), chain.miss_ratio);
        // Misses come in backlog episodes, not independently: allow 4 binomial standard errors
        // inflated by 3 for that clustering, and 10 % of the ratio.
        let sigma = (c * (1.0 - c) / exec.len() as f64).sqrt();
        assert!(c > 1e-3, "the case must miss measurably: {c}");
        assert!((m - c).abs() <= 12.0 * sigma + 0.1 * c, "replay {m} vs chain {c} (σ {sigma})");
    }

    #[test]
    fn the_long_run_supply_is_q_per_p_under_both_chargings() {
        // An always-backlogged task: jobs of 1 ms every 1 ms under 500 µs / 1 ms are served at half
        // speed, so job k completes near 2(k + 1) ms whichever way the budget is charged.
        let exec = vec![1e-3; 2000];
        for charging in [Charging::Exact, Charging::Tick { tick_s: 4e-3, phase_s: 1.3e-3 }] {
            let r = replay(&exec, 1e-3, 3e-3, &res(500.0, 1000.0), charging).unwrap();
            let last = r.response_s[1999] + 1999e-3;
            assert!((last - 4.0).abs() < 0.01, "{charging:?}: last completion {last}");
        }
    }

    #[test]
    fn bad_inputs_are_refused() {
        assert!(replay(&[-1.0], 1e-3, 3e-3, &res(400.0, 1000.0), Charging::Exact).is_err());
        assert!(replay(&[1e-4], 0.0, 3e-3, &res(400.0, 1000.0), Charging::Exact).is_err());
        assert!(replay(&[1e-4], 1e-3, 3e-3, &res(400.0, 1000.0), Charging::Tick { tick_s: 0.0, phase_s: 0.0 }).is_err());
    }
}
