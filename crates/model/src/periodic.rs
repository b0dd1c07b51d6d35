//! A periodic real-time task (a vBS: one TTI every `T`, a varying execution time, a relative
//! deadline `D` such as the HARQ budget) served by its own SCHED_DEADLINE / CBS reservation `(Q, P)`:
//! the probability of a deadline miss, the response-time distribution, and the inverse (the smallest
//! reservation meeting a miss-ratio or response-percentile target).
//!
//! The method (details and validation in `docs/model.md`, "Periodic tasks"):
//!
//! - **Time grid.** Everything is counted in units of a resolution `g` (10 µs by default); execution
//!   times are rounded *up* to the grid (conservative), `T`, `P` and `Q` must be whole multiples.
//! - **Aligned server periods.** The reservation period must divide the task period, `T = N·P`. For a
//!   task alone in its reservation (the reservation is its own, SCHED_DEADLINE runs it as soon as it
//!   has budget), CBS then serves it `Q` at the start of every server period, and the server periods
//!   stay aligned with the job releases: a wake-up on an idle server at a release gets a fresh budget
//!   and deadline `t + P`; a continuously backlogged server is replenished every `P` from a release.
//! - **Backlog chain (Manica, Palopoli, Abeni; Abeni & Buttazzo).** With `v_k` the work still owed at
//!   release `k` and `c_k` the job's execution time, `v_{k+1} = max(v_k + c_k − N·Q, 0)`: a Lindley
//!   recursion, a Markov chain on the grid. Its stationary distribution is solved exactly on
//!   `0..=V` (a banded linear system, no iteration); the mass the true chain puts beyond `V` is
//!   bounded by Kingman's inequality `P(v > x) ≤ e^{−θx}`, `θ > 0` the root of `E[e^{θ(c − NQ)}] = 1`,
//!   and `V` is chosen so that this bound is below `truncation_target`. The chain's top state holds
//!   everything at or beyond `V`; its jobs count as misses and as infinite response times
//!   (pessimistic), and the bound is reported as `truncation_error`.
//! - **Response time.** Jobs are served in order, so job `k` completes when `W = v_k + c_k` has been
//!   served. With budget enforced exactly (HRTICK on), `m = ⌈W/Q⌉` budgets are needed and
//!   `R = (m−1)·P + (W − (m−1)·Q)`.
//! - **Tick-granular enforcement (HRTICK off).** The kernel charges runtime at the scheduler tick
//!   (`τ = 1/HZ`) and when the task blocks: a task that exhausts its budget keeps running until the
//!   next tick, up to `τ` later, and the overrun is paid back from later budgets (the runtime goes
//!   negative; replenishment adds `Q` per `P` until it is positive again). Over a long run the
//!   reservation still supplies `Q` per `P`, so the backlog chain is unchanged; the job, though, can
//!   finish earlier, on credit. Approximation: the credit is the time `u` from the budget running
//!   out to the next tick, uniform on `[0, τ)` and independent of the job (the tick phase is not
//!   synchronised with the releases), and `R = max(W, R_exact(W − u))`: a job that fits in its
//!   budget plus the credit runs to completion at full speed; a longer one finishes `u` earlier in
//!   budget terms. Later overruns within the same job, and a debt carried into a job from earlier
//!   ones, are ignored (the latter makes a backlog of pure debt look like pending work).
//!
//! Pure: no I/O, no clocks. Times in seconds at the interface, grid units inside.

use serde::{Deserialize, Serialize};

use crate::{positive, ModelError, Reservation, Result};

/// The grid resolution used when none is given.
pub const DEFAULT_RESOLUTION_S: f64 = 10e-6;
/// The truncation bound aimed at when choosing the chain's size.
pub const DEFAULT_TRUNCATION_TARGET: f64 = 1e-12;
/// Tick phases averaged over in the tick-enforcement model.
const TICK_PHASES: usize = 64;
/// The chain solver's work (states × the two band widths) above which the model refuses to run.
const MAX_SOLVER_WORK: f64 = 4e9;

/// A discrete execution-time distribution: values in seconds with their probabilities.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExecutionTime {
    /// (value_s, probability), sorted by value, probabilities summing to 1.
    points: Vec<(f64, f64)>,
}

impl ExecutionTime {
    /// A distribution from (value, weight) pairs; weights need not sum to 1 (they are normalised).
    pub fn from_weights(points: &[(f64, f64)]) -> Result<ExecutionTime> {
        if points.is_empty() {
            return Err(ModelError::BadDistribution("no execution-time values given".into()));
        }
        let mut total = 0.0;
        for &(v, w) in points {
            if !(v.is_finite() && v > 0.0) {
                return Err(ModelError::BadDistribution(format!(
                    "execution time {v} s is not a positive, finite number"
                )));
            }
            if !(w.is_finite() && w >= 0.0) {
                return Err(ModelError::BadDistribution(format!("weight {w} of {v} s is negative or not finite")));
            }
            total += w;
        }
        if !(total > 0.0) {
            return Err(ModelError::BadDistribution("all weights are zero".into()));
        }
        let mut pts: Vec<(f64, f64)> = points.iter().filter(|p| p.1 > 0.0).map(|&(v, w)| (v, w / total)).collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        Ok(ExecutionTime { points: pts })
    }

    /// A constant execution time.
    pub fn deterministic(value_s: f64) -> Result<ExecutionTime> {
        ExecutionTime::from_weights(&[(value_s, 1.0)])
    }

    /// The empirical distribution of measured execution times (e.g. CPU time per period).
    pub fn from_samples(samples_s: &[f64]) -> Result<ExecutionTime> {
        let pts: Vec<(f64, f64)> = samples_s.iter().map(|&v| (v, 1.0)).collect();
        ExecutionTime::from_weights(&pts)
    }

    /// A distribution through given quantiles, `(q, value)` with `q` in `[0, 1]`: the CDF is
    /// interpolated linearly between them and sampled at `bins` values. Without a `q = 0` point the
    /// lowest value given stands for everything below it (conservative: nothing is assumed faster
    /// than what was stated); `q = 1` (the maximum) is required, as nothing bounds the tail without it.
    pub fn from_quantiles(quantiles: &[(f64, f64)], bins: usize) -> Result<ExecutionTime> {
        let mut q: Vec<(f64, f64)> = quantiles.to_vec();
        q.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in q.windows(2) {
            if w[0].0 == w[1].0 {
                return Err(ModelError::BadDistribution(format!("quantile {} given twice", w[0].0)));
            }
            if w[1].1 < w[0].1 {
                return Err(ModelError::BadDistribution(format!(
                    "quantiles must not decrease: q{} = {} s is below q{} = {} s",
                    w[1].0, w[1].1, w[0].0, w[0].1
                )));
            }
        }
        match q.last() {
            Some(&(p, _)) if p == 1.0 => {}
            _ => {
                return Err(ModelError::BadDistribution(
                    "the maximum execution time (quantile 1) is required: nothing bounds the tail without it".into(),
                ))
            }
        }
        for &(p, v) in &q {
            if !(0.0..=1.0).contains(&p) {
                return Err(ModelError::BadDistribution(format!("quantile {p} is outside [0, 1]")));
            }
            if !(v.is_finite() && v > 0.0) {
                return Err(ModelError::BadDistribution(format!("quantile {p}: {v} s is not a positive, finite number")));
            }
        }
        if q[0].0 > 0.0 {
            // Everything below the lowest given quantile sits at its value.
            q.insert(0, (0.0, q[0].1));
        }
        let bins = bins.max(2);
        // Probability mass between consecutive stated quantiles, spread over `bins` values per
        // segment weighted by the segment's probability (small tail segments still get values).
        let mut pts = Vec::new();
        for w in q.windows(2) {
            let ((p0, v0), (p1, v1)) = (w[0], w[1]);
            let mass = p1 - p0;
            if mass <= 0.0 {
                continue;
            }
            if v1 == v0 {
                pts.push((v0, mass));
                continue;
            }
            // Uniform density on (v0, v1]: values at the upper end of each sub-interval (conservative).
            for i in 1..=bins {
                pts.push((v0 + (v1 - v0) * i as f64 / bins as f64, mass / bins as f64));
            }
        }
        ExecutionTime::from_weights(&pts)
    }

    pub fn points(&self) -> &[(f64, f64)] {
        &self.points
    }

    pub fn mean(&self) -> f64 {
        self.points.iter().map(|(v, p)| v * p).sum()
    }

    pub fn max(&self) -> f64 {
        self.points.last().map_or(0.0, |p| p.0)
    }

    /// The `phi`-quantile (smallest value whose CDF reaches `phi`).
    pub fn quantile(&self, phi: f64) -> f64 {
        let mut acc = 0.0;
        for &(v, p) in &self.points {
            acc += p;
            if acc >= phi - 1e-12 {
                return v;
            }
        }
        self.max()
    }
}

/// A periodic task: a job every `period_s`, each due `deadline_s` after its release.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeriodicTask {
    pub period_s: f64,
    pub deadline_s: f64,
    pub execution: ExecutionTime,
}

impl PeriodicTask {
    /// Extension (host stalls): the task as a reservation of bandwidth `Q/P` sees it when the host
    /// takes the CPU away for `stall_s` per period (samples, zeros included: a hypervisor
    /// descheduling the vCPU, a non-preemptible kernel section of another task). A stall is lost
    /// supply, not demand the budget is charged for; in the fluid view a stall of `s` removes `s·Q/P`
    /// of budget, so each job's demand grows by that much: `c' = c + s·Q/P` (the convolution of the
    /// two distributions, stall values binned to `resolution_s`). Without a reservation the same stall
    /// is drained at the CPU's full spare rate; under a tight one at `1 − utilization` only, which is
    /// why host stalls hurt reserved tasks far more than their floor suggests.
    pub fn with_host_stalls(&self, stall_s: &[f64], bandwidth: f64, resolution_s: f64) -> Result<PeriodicTask> {
        positive("resolution", resolution_s)?;
        positive("bandwidth Q/P", bandwidth)?;
        if stall_s.is_empty() {
            return Err(ModelError::BadDistribution("no host-stall samples given".into()));
        }
        let mut bins: std::collections::BTreeMap<usize, f64> = std::collections::BTreeMap::new();
        for &s in stall_s {
            if !(s.is_finite() && s >= 0.0) {
                return Err(ModelError::BadDistribution(format!("host stall {s} s is negative or not finite")));
            }
            *bins.entry((s * bandwidth / resolution_s).round() as usize).or_insert(0.0) += 1.0;
        }
        let n = stall_s.len() as f64;
        let mut out: std::collections::BTreeMap<u64, f64> = std::collections::BTreeMap::new();
        for &(c, pc) in self.execution.points() {
            for (&b, &cnt) in &bins {
                let v = c + b as f64 * resolution_s;
                *out.entry(v.to_bits()).or_insert(0.0) += pc * cnt / n;
            }
        }
        let pts: Vec<(f64, f64)> = out.into_iter().map(|(bits, p)| (f64::from_bits(bits), p)).collect();
        Ok(PeriodicTask { execution: ExecutionTime::from_weights(&pts)?, ..self.clone() })
    }
}

/// How the kernel enforces the budget.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Enforcement {
    /// At the instant the budget runs out (HRTICK / HRTICK_DL on).
    Exact,
    /// At the scheduler tick (`tick_s` = 1/HZ) or when the task blocks (HRTICK off, the default).
    Tick { tick_s: f64 },
}

/// Numerical settings of the analysis.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Analysis {
    /// The time grid `g`.
    pub resolution_s: f64,
    pub enforcement: Enforcement,
    /// The chain is sized so that Kingman's bound on the mass beyond it stays below this.
    pub truncation_target: f64,
}

impl Analysis {
    pub fn new(enforcement: Enforcement) -> Analysis {
        Analysis { resolution_s: DEFAULT_RESOLUTION_S, enforcement, truncation_target: DEFAULT_TRUNCATION_TARGET }
    }
}

/// What the model predicts for a periodic task under a reservation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeriodicPrediction {
    pub runtime_s: f64,
    pub period_s: f64,
    /// E[c] / (N·Q): the share of the reservation the task uses on average.
    pub utilization: f64,
    /// P(R > D), including the truncated mass (pessimistic).
    pub miss_ratio: f64,
    /// Upper bound on the probability mass the truncated chain misplaces (Kingman).
    pub truncation_error: f64,
    /// The response-time distribution on the grid: (response_s, probability), sorted.
    pub response: Vec<(f64, f64)>,
    /// Probability of a response time beyond the chain's range (counted as infinite).
    pub response_overflow: f64,
    pub mean_backlog_s: f64,
    /// P(a job is released while earlier work is still owed).
    pub backlogged: f64,
    pub p50_s: Option<f64>,
    pub p90_s: Option<f64>,
    pub p99_s: Option<f64>,
    pub p999_s: Option<f64>,
    /// Number of states of the backlog chain.
    pub states: usize,
}

impl PeriodicPrediction {
    /// The `phi`-quantile of the response time; `None` when it lies in the truncated tail.
    pub fn response_quantile(&self, phi: f64) -> Option<f64> {
        quantile_of(&self.response, phi)
    }
}

fn quantile_of(dist: &[(f64, f64)], phi: f64) -> Option<f64> {
    let mut acc = 0.0;
    for &(v, p) in dist {
        acc += p;
        if acc >= phi - 1e-12 {
            return Some(v);
        }
    }
    None
}

/// Converts a time to whole grid units, requiring it to be a multiple of the grid.
fn exact_units(name: &'static str, value_s: f64, g: f64) -> Result<usize> {
    let u = value_s / g;
    let r = u.round();
    if (u - r).abs() > 1e-6 * r.max(1.0) || r < 1.0 {
        return Err(ModelError::OffGrid { name, value_s, resolution_s: g });
    }
    Ok(r as usize)
}

/// Rounds a time up to whole grid units (execution times: conservative).
fn ceil_units(value_s: f64, g: f64) -> usize {
    let u = value_s / g;
    let r = u.round();
    if (u - r).abs() <= 1e-9 * r.max(1.0) {
        r.max(1.0) as usize
    } else {
        u.ceil().max(1.0) as usize
    }
}

/// The chain's inputs on the grid.
struct Grid {
    g: f64,
    /// N·Q: budget per job period, in units.
    supply: usize,
    q: usize,
    p: usize,
    /// D in units (not necessarily whole).
    d: f64,
    /// pmf of c in units: (units, probability).
    exec: Vec<(usize, f64)>,
    /// Tick credit values in units (fractional allowed): empty for exact enforcement.
    credits: Vec<f64>,
}

fn grid(task: &PeriodicTask, r: &Reservation, a: &Analysis) -> Result<Grid> {
    let g = positive("resolution", a.resolution_s)?;
    positive("task period T", task.period_s)?;
    positive("deadline D", task.deadline_s)?;
    if !(a.truncation_target > 0.0 && a.truncation_target < 1.0) {
        return Err(ModelError::BadDistribution(format!(
            "truncation target {} is outside (0, 1)",
            a.truncation_target
        )));
    }
    let t = exact_units("task period T", task.period_s, g)?;
    let p = exact_units("reservation period P", r.period_s, g)?;
    let q = exact_units("runtime Q", r.runtime_s, g)?;
    if t % p != 0 {
        return Err(ModelError::PeriodNotDivisor { task_period_s: task.period_s, period_s: r.period_s });
    }
    let n = t / p;
    // D need not be on the grid: a response is a miss when it exceeds D, compared in units.
    let d = task.deadline_s / g;
    let mut exec: Vec<(usize, f64)> = Vec::new();
    for &(v, pr) in task.execution.points() {
        let u = ceil_units(v, g);
        match exec.last_mut() {
            Some(last) if last.0 == u => last.1 += pr,
            _ => exec.push((u, pr)),
        }
    }
    let credits = match a.enforcement {
        Enforcement::Exact => Vec::new(),
        Enforcement::Tick { tick_s } => {
            let tau = positive("tick", tick_s)? / g;
            (0..TICK_PHASES).map(|i| (i as f64 + 0.5) * tau / TICK_PHASES as f64).collect()
        }
    };
    Ok(Grid { g, supply: n * q, q, p, d, exec, credits })
}

/// Response time (units, fractional) of a job completing when `w` units have been served, budgets
/// enforced exactly: `(m−1)·P + (w − (m−1)·Q)` with `m = ⌈w/Q⌉`.
fn response_exact(w: f64, q: usize, p: usize) -> f64 {
    if w <= 0.0 {
        return 0.0;
    }
    let (qf, pf) = (q as f64, p as f64);
    let m = (w / qf - 1e-9).ceil().max(1.0);
    (m - 1.0) * pf + (w - (m - 1.0) * qf)
}

/// `θ > 0` with `E[e^{θ(c − s)}] = 1` (units⁻¹); `None` when `c ≤ s` always (no backlog ever).
fn kingman_theta(exec: &[(usize, f64)], supply: usize) -> Option<f64> {
    if exec.iter().all(|&(c, _)| c <= supply) {
        return None;
    }
    let log_mgf = |th: f64| {
        let xs: Vec<(f64, f64)> = exec.iter().map(|&(c, p)| (th * (c as f64 - supply as f64), p)).collect();
        let m = xs.iter().map(|x| x.0).fold(f64::NEG_INFINITY, f64::max);
        m + xs.iter().map(|&(x, p)| p * (x - m).exp()).sum::<f64>().ln()
    };
    let mut hi = 1.0;
    while log_mgf(hi) < 0.0 {
        hi *= 2.0;
    }
    // log_mgf is convex, 0 at 0, negative just above it (stable), ≥ 0 at hi: bisect for the root.
    // The lower end is returned: a smaller θ gives a larger (safer) bound e^{−θx}.
    let mut lo = 0.0;
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if log_mgf(mid) < 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo <= 1e-12 * hi {
            break;
        }
    }
    Some(lo)
}

/// Stationary distribution of `v' = min(max(v + c − s, 0), V)` on `0..=V`, solved exactly: with
/// `π_0 = 1` the other states satisfy a banded system (transpose of `I − M` without state 0),
/// which Gaussian elimination without pivoting solves stably (the matrix is column diagonally
/// dominant, an M-matrix).
fn stationary(exec: &[(usize, f64)], s: usize, top: usize) -> Vec<f64> {
    let n = top + 1;
    if top == 0 {
        return vec![1.0];
    }
    let up = exec.iter().map(|&(c, _)| c.saturating_sub(s)).max().unwrap_or(0);
    let down = exec.iter().map(|&(c, _)| s.saturating_sub(c)).max().unwrap_or(0).max(1);
    // Unknowns x_j = π_j for j = 1..=top (index j−1). Equation for state j: π_j = Σ_v π_v M[v][j]:
    // Σ_{v≥1} (δ_{vj} − M[v][j]) π_v = M[0][j]. M[v][j] ≠ 0 only for v − j in [−up, down] (the top
    // state, which holds everything at or above it, receives from v ≥ top − up: the same band).
    let kl = up; // v < j
    let ku = down; // v > j
    let width = kl + ku + 1;
    let dim = n - 1;
    let mut band = vec![0.0f64; dim * width];
    let idx = |row: usize, col: usize| row * width + (col + kl - row);
    let mut rhs = vec![0.0f64; dim];
    for j in 1..=top {
        band[idx(j - 1, j - 1)] = 1.0;
    }
    for v in 0..=top {
        for &(c, p) in exec {
            let j = (v + c).saturating_sub(s).min(top);
            if j == 0 {
                continue;
            }
            if v == 0 {
                rhs[j - 1] += p;
            } else {
                band[idx(j - 1, v - 1)] -= p;
            }
        }
    }
    // Forward elimination.
    for k in 0..dim {
        let pivot = band[idx(k, k)];
        let pivot = if pivot.abs() < 1e-300 { 1e-300 } else { pivot };
        let rmax = (k + kl).min(dim - 1);
        let cmax = (k + ku).min(dim - 1);
        for i in k + 1..=rmax {
            let f = band[idx(i, k)] / pivot;
            if f == 0.0 {
                continue;
            }
            band[idx(i, k)] = 0.0;
            for c in k + 1..=cmax {
                band[idx(i, c)] -= f * band[idx(k, c)];
            }
            rhs[i] -= f * rhs[k];
        }
    }
    // Back substitution.
    let mut x = vec![0.0f64; dim];
    for k in (0..dim).rev() {
        let cmax = (k + ku).min(dim - 1);
        let mut acc = rhs[k];
        for c in k + 1..=cmax {
            acc -= band[idx(k, c)] * x[c];
        }
        let pivot = band[idx(k, k)];
        x[k] = (acc / if pivot.abs() < 1e-300 { 1e-300 } else { pivot }).max(0.0);
    }
    let mut pi = Vec::with_capacity(n);
    pi.push(1.0);
    pi.extend(x);
    let total: f64 = pi.iter().sum();
    pi.iter_mut().for_each(|p| *p /= total);
    pi
}

/// Probability of a deadline miss and the response-time distribution of `task` under `r`.
pub fn analyze(task: &PeriodicTask, r: &Reservation, a: &Analysis) -> Result<PeriodicPrediction> {
    let gr = grid(task, r, a)?;
    let g = gr.g;
    let mean_c: f64 = gr.exec.iter().map(|&(c, p)| c as f64 * p).sum();
    let utilization = mean_c / gr.supply as f64;
    // At utilization 1 the backlog is a null-recurrent walk unless no job ever exceeds the supply
    // (then every job is exactly N·Q: a deterministic, fully used but stable reservation).
    let never_backlogged = gr.exec.iter().all(|&(c, _)| c <= gr.supply);
    if utilization >= 1.0 - 1e-12 && !never_backlogged {
        return Err(ModelError::UnstablePeriodic {
            utilization,
            mean_execution_s: mean_c * g,
            supply_s: gr.supply as f64 * g,
            min_runtime_s: mean_c * g * r.period_s / task.period_s,
        });
    }
    // The chain's size: Kingman's bound e^{−θV} ≤ target.
    let theta = kingman_theta(&gr.exec, gr.supply);
    let (top, truncation_error) = match theta {
        None => (0, 0.0),
        Some(th) => {
            let v = (-(a.truncation_target.ln()) / th).ceil().max(1.0);
            let up = gr.exec.iter().map(|&(c, _)| c.saturating_sub(gr.supply)).max().unwrap_or(0) as f64;
            let down = gr.exec.iter().map(|&(c, _)| gr.supply.saturating_sub(c)).max().unwrap_or(0).max(1) as f64;
            if v * up * down > MAX_SOLVER_WORK || v > 5e6 {
                return Err(ModelError::StateSpaceTooLarge { states: v, resolution_s: g, utilization });
            }
            (v as usize, (-th * v).exp())
        }
    };
    let pi = stationary(&gr.exec, gr.supply, top);
    // W = v + c, with the top state (v ≥ V) set apart as overflow.
    let kmax = gr.exec.last().map_or(0, |e| e.0);
    let mut w = vec![0.0f64; top + kmax + 1];
    let mut overflow = if top > 0 { pi[top] } else { 0.0 };
    for (v, &pv) in pi.iter().enumerate() {
        if top > 0 && v == top {
            continue;
        }
        for &(c, pc) in &gr.exec {
            w[v + c] += pv * pc;
        }
    }
    overflow = overflow.max(0.0);
    // Response: exact, or averaged over the tick credit.
    let mut resp: std::collections::BTreeMap<usize, f64> = std::collections::BTreeMap::new();
    let mut miss = overflow;
    let add = |resp: &mut std::collections::BTreeMap<usize, f64>, miss: &mut f64, r_units: f64, p: f64| {
        let ru = (r_units - 1e-9).ceil().max(0.0) as usize;
        if r_units > gr.d + 1e-9 {
            *miss += p;
        }
        *resp.entry(ru).or_insert(0.0) += p;
    };
    for (wu, &pw) in w.iter().enumerate() {
        if pw <= 0.0 {
            continue;
        }
        let wf = wu as f64;
        if gr.credits.is_empty() {
            add(&mut resp, &mut miss, response_exact(wf, gr.q, gr.p), pw);
        } else {
            let share = pw / gr.credits.len() as f64;
            for &u in &gr.credits {
                let rr = wf.max(response_exact(wf - u, gr.q, gr.p));
                add(&mut resp, &mut miss, rr, share);
            }
        }
    }
    let response: Vec<(f64, f64)> = resp.into_iter().map(|(u, p)| (u as f64 * g, p)).collect();
    let mean_backlog_s = pi.iter().enumerate().map(|(v, p)| v as f64 * p).sum::<f64>() * g;
    let backlogged = 1.0 - pi[0];
    let q = |phi| quantile_of(&response, phi);
    Ok(PeriodicPrediction {
        runtime_s: r.runtime_s,
        period_s: r.period_s,
        utilization,
        miss_ratio: (miss + 0.0).min(1.0),
        truncation_error,
        p50_s: q(0.5),
        p90_s: q(0.9),
        p99_s: q(0.99),
        p999_s: q(0.999),
        response,
        response_overflow: overflow,
        mean_backlog_s,
        backlogged,
        states: top + 1,
    })
}

/// What the sized reservation must achieve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PeriodicTarget {
    /// P(R > D) + truncation error ≤ `max`.
    MissRatio { max: f64 },
    /// The `phi`-quantile of the response time ≤ `max_s`.
    ResponseQuantile { phi: f64, max_s: f64 },
}

impl PeriodicTarget {
    fn met(&self, p: &PeriodicPrediction) -> bool {
        match *self {
            PeriodicTarget::MissRatio { max } => p.miss_ratio + p.truncation_error <= max,
            PeriodicTarget::ResponseQuantile { phi, max_s } => {
                p.response_quantile(phi).is_some_and(|r| r <= max_s + 1e-12)
            }
        }
    }

    fn validate(&self) -> Result<()> {
        match *self {
            PeriodicTarget::MissRatio { max } if !(max > 0.0 && max < 1.0) => Err(ModelError::BadTarget(format!(
                "deadline miss ratio {max} is outside (0, 1); write e.g. 1e-3"
            ))),
            PeriodicTarget::ResponseQuantile { phi, .. } if !(phi > 0.0 && phi < 1.0) => {
                Err(ModelError::PhiOutOfRange(phi))
            }
            PeriodicTarget::ResponseQuantile { max_s, .. } if !(max_s.is_finite() && max_s > 0.0) => {
                Err(ModelError::BadTarget(format!("response bound {max_s} s is not a positive, finite time")))
            }
            _ => Ok(()),
        }
    }

    /// How far the prediction is from the bound (positive: met with room to spare), in the target's
    /// own unit (a probability, or seconds).
    pub fn slack(&self, p: &PeriodicPrediction) -> f64 {
        match *self {
            PeriodicTarget::MissRatio { max } => max - (p.miss_ratio + p.truncation_error),
            PeriodicTarget::ResponseQuantile { phi, max_s } => {
                p.response_quantile(phi).map_or(f64::NEG_INFINITY, |r| max_s - r)
            }
        }
    }
}

/// The smallest reservation meeting a target, and how tight it is.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeriodicSizing {
    pub runtime_s: f64,
    pub period_s: f64,
    pub bandwidth: f64,
    pub target: PeriodicTarget,
    pub prediction: PeriodicPrediction,
    /// Target's bound minus the prediction (probability or seconds).
    pub slack: f64,
    /// The prediction one grid step of runtime below, which misses the target (None: the smallest
    /// stable runtime already meets it).
    pub below: Option<PeriodicPrediction>,
    /// Every candidate period tried, with its smallest runtime (None: no runtime up to P meets it).
    pub candidates: Vec<(f64, Option<f64>)>,
}

/// The smallest runtime `Q` (a multiple of the grid) for period `period_s` meeting `target`.
fn smallest_runtime(
    task: &PeriodicTask,
    period_s: f64,
    target: &PeriodicTarget,
    a: &Analysis,
) -> Result<Option<(PeriodicPrediction, Option<PeriodicPrediction>)>> {
    let g = a.resolution_s;
    let p_units = exact_units("reservation period P", period_s, g)?;
    let t_units = exact_units("task period T", task.period_s, g)?;
    if t_units % p_units != 0 {
        return Err(ModelError::PeriodNotDivisor { task_period_s: task.period_s, period_s });
    }
    let n = (t_units / p_units) as f64;
    let mean_units: f64 = task.execution.points().iter().map(|&(v, p)| ceil_units(v, g) as f64 * p).sum();
    // Stable needs N·Q > E[c].
    let mut lo = ((mean_units / n).floor() as usize + 1).max(1);
    let hi = p_units;
    if lo > hi {
        return Ok(None);
    }
    let eval = |q: usize| analyze(task, &Reservation { runtime_s: q as f64 * g, period_s }, a);
    let top = eval(hi)?;
    if !target.met(&top) {
        return Ok(None);
    }
    // Bisection on whole grid units: met(hi) holds, find the smallest q with met(q).
    let mut best = (hi, top);
    let mut hi = hi;
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match eval(mid) {
            Ok(p) if target.met(&p) => {
                hi = mid;
                best = (mid, p);
            }
            Ok(_) | Err(ModelError::StateSpaceTooLarge { .. }) => lo = mid + 1,
            Err(e) => return Err(e),
        }
    }
    let below = if best.0 > 1 { eval(best.0 - 1).ok() } else { None };
    Ok(Some((best.1, below)))
}

/// The reservation with the least bandwidth `Q/P` meeting `target` among the candidate periods
/// (each must divide the task period); ties go to the longer period (fewer replenishments).
pub fn size_periodic(
    task: &PeriodicTask,
    target: PeriodicTarget,
    periods_s: &[f64],
    a: &Analysis,
) -> Result<PeriodicSizing> {
    target.validate()?;
    if periods_s.is_empty() {
        return Err(ModelError::BadTarget("no candidate reservation period given".into()));
    }
    let mut best: Option<(PeriodicPrediction, Option<PeriodicPrediction>)> = None;
    let mut candidates = Vec::new();
    for &p in periods_s {
        let found = smallest_runtime(task, p, &target, a)?;
        candidates.push((p, found.as_ref().map(|f| f.0.runtime_s)));
        if let Some((pred, below)) = found {
            let bw = pred.runtime_s / pred.period_s;
            let better = match &best {
                None => true,
                Some((b, _)) => {
                    let bb = b.runtime_s / b.period_s;
                    bw < bb - 1e-12 || ((bw - bb).abs() <= 1e-12 && pred.period_s > b.period_s)
                }
            };
            if better {
                best = Some((pred, below));
            }
        }
    }
    let Some((prediction, below)) = best else {
        return Err(ModelError::PeriodicTargetUnreachable {
            target: match target {
                PeriodicTarget::MissRatio { max } => format!("deadline miss ratio ≤ {max}"),
                PeriodicTarget::ResponseQuantile { phi, max_s } => {
                    format!("p{} response ≤ {} µs", phi * 100.0, max_s * 1e6)
                }
            },
        });
    };
    Ok(PeriodicSizing {
        runtime_s: prediction.runtime_s,
        period_s: prediction.period_s,
        bandwidth: prediction.runtime_s / prediction.period_s,
        slack: target.slack(&prediction),
        target,
        prediction,
        below,
        candidates,
    })
}

/// The candidate reservation periods used when none are given: `T`, `T/2`, `T/4` (those on the grid).
pub fn default_periods(task_period_s: f64, resolution_s: f64) -> Vec<f64> {
    [1.0, 2.0, 4.0]
        .iter()
        .map(|k| task_period_s / k)
        .filter(|&p| exact_units("period", p, resolution_s).is_ok())
        .collect()
}

/// A workload's execution demand per period, as a profile file (`rtslice profile` writes one from the
/// tracer; a spec may also give it inline): the task period, the relative deadline, and the execution
/// time either as quantiles or as a histogram of measured values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub period_s: f64,
    pub deadline_s: f64,
    pub execution: ProfileExecution,
}

/// The execution time of a [`Profile`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProfileExecution {
    /// Stated quantiles (seconds); `max_s` is required, the others optional.
    Quantiles {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min_s: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        p50_s: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        p90_s: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        p99_s: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        p999_s: Option<f64>,
        max_s: f64,
    },
    /// Measured values with how often each occurred: `[value_s, count]`.
    Histogram(Vec<(f64, f64)>),
}

/// Values spread over each segment between stated quantiles.
const QUANTILE_BINS: usize = 32;

impl Profile {
    /// The periodic task this profile describes.
    pub fn task(&self) -> Result<PeriodicTask> {
        positive("profile period", self.period_s)?;
        positive("profile deadline", self.deadline_s)?;
        let execution = match &self.execution {
            ProfileExecution::Quantiles { min_s, p50_s, p90_s, p99_s, p999_s, max_s } => {
                let q: Vec<(f64, f64)> = [(0.0, *min_s), (0.5, *p50_s), (0.9, *p90_s), (0.99, *p99_s), (0.999, *p999_s)]
                    .into_iter()
                    .filter_map(|(p, v)| v.map(|v| (p, v)))
                    .chain(std::iter::once((1.0, *max_s)))
                    .collect();
                ExecutionTime::from_quantiles(&q, QUANTILE_BINS)?
            }
            ProfileExecution::Histogram(h) => ExecutionTime::from_weights(h)?,
        };
        Ok(PeriodicTask { period_s: self.period_s, deadline_s: self.deadline_s, execution })
    }

    /// A profile from measured execution times per period (a histogram on a `resolution_s` grid,
    /// values rounded up to it).
    pub fn from_samples(period_s: f64, deadline_s: f64, samples_s: &[f64], resolution_s: f64) -> Result<Profile> {
        positive("resolution", resolution_s)?;
        ExecutionTime::from_samples(samples_s)?;
        let mut bins: std::collections::BTreeMap<usize, f64> = std::collections::BTreeMap::new();
        for &v in samples_s {
            *bins.entry(ceil_units(v, resolution_s)).or_insert(0.0) += 1.0;
        }
        Ok(Profile {
            period_s,
            deadline_s,
            execution: ProfileExecution::Histogram(bins.into_iter().map(|(u, n)| (u as f64 * resolution_s, n)).collect()),
        })
    }
}

#[cfg(test)]
#[path = "periodic_tests.rs"]
mod tests;
