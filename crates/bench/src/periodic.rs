//! Validation of the periodic-task model (`rtslice_model::periodic`) under real SCHED_DEADLINE
//! reservations: one thread releases a job every TTI and does the emulator's whole-TTI PHY work for
//! it (srsENB's worker: uplink FFT, equalisation, LDPC decoding, downlink build and IFFT), jobs served
//! in order as a real vBS worker does. The per-TTI load varies as a MAC scheduler's allocation does
//! (a traffic mix of scheduled PRBs), so the execution time has a real distribution.
//!
//! 1. **Profile**: the thread runs SCHED_FIFO (no reservation) and records every job's CPU time
//!    (`CLOCK_THREAD_CPUTIME_ID`, what SCHED_DEADLINE charges): the execution-time distribution.
//! 2. **Predict**: for every reservation of the sweep the model gives the miss ratio and the
//!    response percentiles from that profile alone.
//! 3. **Measure**: the same thread under `sched_setattr(SCHED_DEADLINE, Q, P, P)`, the points
//!    interleaved in `rounds` (A B C … A B C …) so slow drifts of this shared machine fall on all.
//!
//! The caller holds the host-wide kernel lock: the reservations are real.

use std::time::Duration;

use rtslice_emu::chain::{Carrier, Phy, Scratch, UlSubframe};
use rtslice_emu::EmuError;
use rtslice_model::periodic::{analyze, Analysis, Enforcement, ExecutionTime, PeriodicPrediction, PeriodicTask};
use rtslice_model::replay::{replay_pooled, Pooled};
use rtslice_model::{ModelError, Reservation};
use rtslice_sys::sched::{self, SchedAttr};
use rtslice_sys::time as clock;
use rustfft::num_complex::Complex32;
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum PeriodicValidationError {
    #[error("emulator work: {0}")]
    Emu(#[from] EmuError),
    #[error("model: {0}")]
    Model(#[from] ModelError),
    #[error(
        "cannot give the job thread {what}: {source}; run as root, with no other deadline tasks \
         holding the CPUs' bandwidth (`rtslice status`), and with the thread's affinity spanning its root domain"
    )]
    Sched { what: String, source: std::io::Error },
    #[error("invalid periodic validation: {0}")]
    Invalid(String),
}

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct PeriodicValidation {
    /// Job period `T` (the TTI).
    pub period_s: f64,
    /// Relative deadline `D` (the HARQ budget).
    pub deadline_s: f64,
    /// Carrier PRBs, MCS, SNR of the emulated cell.
    pub prb: usize,
    pub mcs: u8,
    pub snr_db: f64,
    /// Per-TTI scheduled share of the carrier and its probability (the traffic mix).
    pub traffic: Vec<(f64, f64)>,
    /// Jobs of the profiling run.
    pub profile_jobs: usize,
    /// Jobs per point and round (after `warmup`).
    pub jobs: usize,
    pub warmup: usize,
    pub rounds: usize,
    /// Reservation periods `P` to sweep (each must divide `T`).
    pub periods_s: Vec<f64>,
    /// Runtimes as multiples of the mean demand per reservation period (`E[c]·P/T`), rounded to the
    /// model's grid: utilizations 1/k.
    pub demand_multiples: Vec<f64>,
    /// The scheduler tick (1/HZ) for the tick-enforcement model.
    pub tick_s: f64,
    pub resolution_s: f64,
    pub seed: u64,
}

impl PeriodicValidation {
    /// The sweep reported in docs/model.md: a 1 ms TTI with a 3 ms HARQ budget, srsENB's worker on a 5 MHz (25 PRB) carrier.
    pub fn default_sweep() -> PeriodicValidation {
        PeriodicValidation {
            period_s: 1e-3,
            deadline_s: 3e-3,
            prb: 25,
            mcs: 10,
            snr_db: 25.0,
            traffic: vec![(0.25, 0.45), (0.5, 0.3), (0.75, 0.15), (1.0, 0.1)],
            profile_jobs: 20_000,
            jobs: 5_000,
            warmup: 200,
            rounds: 2,
            periods_s: vec![1e-3, 0.5e-3],
            demand_multiples: vec![1.1, 1.2, 1.3, 1.45, 1.7, 2.0],
            tick_s: 0.004,
            resolution_s: 10e-6,
            seed: 0x7710,
        }
    }
}

/// Measured facts of one run of jobs.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub jobs: usize,
    pub misses: usize,
    pub miss_ratio: f64,
    pub p50_s: f64,
    pub p90_s: f64,
    pub p99_s: f64,
    pub p999_s: f64,
    pub max_s: f64,
    pub mean_exec_s: f64,
}

/// One reservation of the sweep.
#[derive(Debug, Clone, Serialize)]
pub struct PointResult {
    pub runtime_s: f64,
    pub period_s: f64,
    /// Mean demand / supply, from the profile.
    pub utilization: f64,
    pub measured: Measured,
    /// The model from the profile, tick enforcement (this host: HRTICK off).
    pub predicted: PeriodicPrediction,
    /// The model from the profile, exact enforcement (HRTICK on): the tick's share of the result.
    pub predicted_exact_miss: f64,
    /// The model from the jobs' own CPU time only (without the per-period system calls), tick
    /// enforcement: how much the overhead matters. None: unstable that way.
    pub predicted_job_only: Option<PeriodicPrediction>,
    /// The model fed the execution times measured in this point's own run (isolates the
    /// scheduling model from the profile's drift).
    pub predicted_own_miss: Option<f64>,
    /// predicted / measured miss ratio (None when either is 0).
    pub miss_ratio_factor: Option<f64>,
    /// `1 − (1 − predicted)(1 − floor)`: the model's misses and the host's floor, taken as independent.
    pub predicted_with_floor_miss: f64,
    /// Extension: the model with the host's stalls (measured per period in the floor runs) as lost
    /// supply (`PeriodicTask::with_host_stalls`). None: unstable that way.
    pub predicted_with_stalls: Option<PeriodicPrediction>,
    pub with_stalls_factor: Option<f64>,
    pub with_floor_factor: Option<f64>,
    /// As `miss_ratio_factor`, for the job-only profile.
    pub job_only_miss_ratio_factor: Option<f64>,
    /// The profile's job sequence replayed through the kernel's SCHED_DEADLINE rules with tick
    /// charging (`rtslice_model::replay`), averaged over `REPLAY_PHASES` tick phases.
    pub replayed: Pooled,
    /// replayed / measured miss ratio (None when either is 0).
    pub replayed_factor: Option<f64>,
    /// This point's own measured job sequence replayed the same way: the kernel rules alone, without
    /// the profile's drift.
    pub replayed_own_miss: f64,
}

/// Tick phases the replays average over: the tick's phase against the releases is fixed in a run
/// (T divides the tick) but unknown.
const REPLAY_PHASES: usize = 8;

/// `exec` replayed under `(q, p)` with tick charging at `REPLAY_PHASES` phases, pooled.
fn replay_tick(cfg: &PeriodicValidation, exec: &[f64], r: &Reservation) -> Result<Pooled, PeriodicValidationError> {
    Ok(replay_pooled(exec, cfg.period_s, cfg.deadline_s, r, Some(cfg.tick_s), REPLAY_PHASES)?)
}

#[derive(Debug, Clone, Serialize)]
pub struct PeriodicReport {
    pub config: PeriodicValidation,
    pub profile_mean_s: f64,
    pub profile_p50_s: f64,
    pub profile_p99_s: f64,
    pub profile_max_s: f64,
    /// The same jobs under SCHED_FIFO (a whole CPU whenever they want one), run once per round
    /// between the reservations: what this host does to a job with no reservation in the way — its
    /// floor, measured at the same times as the points.
    pub floor: Measured,
    pub points: Vec<PointResult>,
}

/// The job: the emulated cell's work for one TTI at a drawn traffic level.
struct Work {
    levels: Vec<(Phy, Vec<UlSubframe>)>,
    cdf: Vec<f64>,
    grid: Vec<Complex32>,
    scratch: Scratch,
    rng: u64,
    next_sf: usize,
}

impl Work {
    fn new(cfg: &PeriodicValidation) -> Result<Work, PeriodicValidationError> {
        if cfg.traffic.is_empty() {
            return Err(PeriodicValidationError::Invalid("the traffic mix is empty".into()));
        }
        let total: f64 = cfg.traffic.iter().map(|t| t.1).sum();
        let mut levels = Vec::new();
        let mut cdf = Vec::new();
        let mut acc = 0.0;
        let mut grid_len = 0;
        for &(share, w) in &cfg.traffic {
            let prb_scheduled = ((cfg.prb as f64 * share).round() as usize).clamp(1, cfg.prb);
            let phy = Phy::new(Carrier {
                prb: cfg.prb,
                prb_scheduled,
                mcs: cfg.mcs,
                antennas: 1,
                snr_db: cfg.snr_db,
                max_iterations: 8,
            })?;
            let sfs = (0..4).map(|i| phy.generate_ul(cfg.seed ^ (i as u64 * 7919 + prb_scheduled as u64))).collect();
            grid_len = grid_len.max(phy.grid_len());
            levels.push((phy, sfs));
            acc += w / total;
            cdf.push(acc);
        }
        Ok(Work {
            levels,
            cdf,
            grid: vec![Complex32::new(0.0, 0.0); grid_len],
            scratch: Scratch::default(),
            rng: cfg.seed | 1,
            next_sf: 0,
        })
    }

    fn draw(&mut self) -> f64 {
        // xorshift64*: the traffic draw must not cost more than noise.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545F4914F6CDD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// srsENB's worker for one TTI.
    fn run_job(&mut self, tti: u64) {
        let x = self.draw();
        let level = self.cdf.iter().position(|&c| x < c).unwrap_or(self.cdf.len() - 1);
        let (phy, sfs) = &self.levels[level];
        let sf = &sfs[self.next_sf % sfs.len()];
        self.next_sf += 1;
        let grid = &mut self.grid[..phy.grid_len()];
        phy.ul_fft(&sf.time, grid, 0..rtslice_emu::phy::SYMBOLS, &mut self.scratch);
        let mut payload = Vec::new();
        let _ = phy.ul_decode(grid, sf, &mut self.scratch, &mut payload);
        phy.dl_build(tti, grid, &mut self.scratch);
        phy.dl_ifft(grid, &mut self.scratch);
    }
}

/// Per job: response (release → completion), CPU time (the thread's clock: what SCHED_DEADLINE
/// charges; steal time excluded, this kernel has paravirtual steal accounting), and wall time from
/// start to completion (what a tracer's on-CPU intervals add up to: steal and interrupts included).
#[derive(Default, Clone)]
struct Jobs {
    resp: Vec<f64>,
    exec: Vec<f64>,
    wall: Vec<f64>,
    /// The thread's whole CPU time per cycle (sleep and wake-up system calls included: what the
    /// kernel charges to the reservation, and what a tracer's on-CPU time per period adds up to).
    cycle: Vec<f64>,
    /// (release, start, done) in ns since the first release, for traces.
    times: Vec<[u64; 3]>,
}

/// Runs `jobs` periodic jobs on a new thread under `attr`.
fn run_jobs(
    cfg: &PeriodicValidation,
    attr: SchedAttr,
    jobs: usize,
    seed: u64,
) -> Result<Jobs, PeriodicValidationError> {
    let cfg2 = PeriodicValidation { seed, ..cfg.clone() };
    let total = cfg.warmup + jobs;
    let period_ns = (cfg.period_s * 1e9).round() as u64;
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut work = Work::new(&cfg2)?;
            sched::set_attr(0, attr).map_err(|e| PeriodicValidationError::Sched { what: format!("{attr:?}"), source: e })?;
            let mut out = Jobs::default();
            let t0 = clock::monotonic_ns() + 10_000_000;
            let mut cycle_start = clock::thread_cpu_ns();
            for k in 0..total as u64 {
                let release = t0 + k * period_ns;
                let now_cpu = clock::thread_cpu_ns();
                if k as usize > cfg.warmup {
                    out.cycle.push(now_cpu.saturating_sub(cycle_start) as f64 * 1e-9);
                }
                cycle_start = now_cpu;
                if clock::monotonic_ns() < release {
                    clock::sleep_until_ns(release);
                }
                let start = clock::monotonic_ns();
                let c0 = clock::thread_cpu_ns();
                work.run_job(k);
                let c1 = clock::thread_cpu_ns();
                let done = clock::monotonic_ns();
                if k as usize >= cfg.warmup {
                    out.resp.push(done.saturating_sub(release) as f64 * 1e-9);
                    out.exec.push(c1.saturating_sub(c0) as f64 * 1e-9);
                    out.wall.push(done.saturating_sub(start) as f64 * 1e-9);
                    out.times.push([release - t0, start - t0, done - t0]);
                }
            }
            out.cycle.push(clock::thread_cpu_ns().saturating_sub(cycle_start) as f64 * 1e-9);
            // Leave the deadline class before the thread ends, so its bandwidth is returned now.
            let _ = sched::set_attr(0, SchedAttr::Other { nice: 0 });
            Ok(out)
        })
        .join()
        .unwrap_or_else(|_| Err(PeriodicValidationError::Invalid("the job thread panicked".into())))
    })
}

/// One job's facts: (release, start, completion) in seconds since the run began, and its CPU time.
pub fn trace_jobs(cfg: &PeriodicValidation, attr: SchedAttr, jobs: usize) -> Result<Vec<[f64; 4]>, PeriodicValidationError> {
    let j = run_jobs(cfg, attr, jobs, cfg.seed)?;
    Ok(j.times
        .iter()
        .zip(&j.exec)
        .map(|(t, &c)| [t[0] as f64 * 1e-9, t[1] as f64 * 1e-9, t[2] as f64 * 1e-9, c])
        .collect())
}

/// The `phi`-quantile by the workspace's one definition (rtslice-stats, type 7); 0 for no samples.
fn percentile(sorted: &[f64], phi: f64) -> f64 {
    rtslice_stats::percentile_sorted(sorted, phi * 100.0).unwrap_or(0.0)
}

fn measured(resp: &[f64], exec: &[f64], deadline_s: f64) -> Measured {
    let mut r = resp.to_vec();
    r.sort_by(|a, b| a.total_cmp(b));
    let misses = r.iter().filter(|&&x| x > deadline_s).count();
    Measured {
        jobs: r.len(),
        misses,
        miss_ratio: misses as f64 / r.len().max(1) as f64,
        p50_s: percentile(&r, 0.5),
        p90_s: percentile(&r, 0.9),
        p99_s: percentile(&r, 0.99),
        p999_s: percentile(&r, 0.999),
        max_s: r.last().copied().unwrap_or(0.0),
        mean_exec_s: exec.iter().sum::<f64>() / exec.len().max(1) as f64,
    }
}

fn round_to(x: f64, g: f64) -> f64 {
    (x / g).round() * g
}

/// Profile, predict, measure. `progress` gets one line per step.
pub fn validate_periodic(
    cfg: &PeriodicValidation,
    progress: &mut dyn FnMut(&str),
) -> Result<PeriodicReport, PeriodicValidationError> {
    if cfg.jobs == 0 || cfg.profile_jobs == 0 || cfg.rounds == 0 {
        return Err(PeriodicValidationError::Invalid("jobs, profile jobs and rounds must be at least 1".into()));
    }
    let a_tick = Analysis { resolution_s: cfg.resolution_s, ..Analysis::new(Enforcement::Tick { tick_s: cfg.tick_s }) };
    let a_exact = Analysis { resolution_s: cfg.resolution_s, ..Analysis::new(Enforcement::Exact) };
    progress(&format!("profiling {} jobs under SCHED_FIFO", cfg.profile_jobs));
    let prof = run_jobs(cfg, SchedAttr::Fifo { priority: 10 }, cfg.profile_jobs, cfg.seed)?;
    // The profile is the thread's whole CPU time per period (what the reservation is charged);
    // the jobs' own CPU time alone is kept as a diagnostic (the difference is the system calls of
    // sleeping and waking, 10-30 µs per period in this VM).
    let profile = prof.cycle.clone();
    let dist = ExecutionTime::from_samples(&profile)?;
    let job_only_task = PeriodicTask {
        period_s: cfg.period_s,
        deadline_s: cfg.deadline_s,
        execution: ExecutionTime::from_samples(&prof.exec)?,
    };
    let mut sorted = profile.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let task = PeriodicTask { period_s: cfg.period_s, deadline_s: cfg.deadline_s, execution: dist.clone() };
    let mut points: Vec<(f64, f64)> = Vec::new();
    for &p in &cfg.periods_s {
        for &k in &cfg.demand_multiples {
            let q = round_to(dist.mean() * p / cfg.period_s * k, cfg.resolution_s).min(p);
            if q > 0.0 && !points.iter().any(|&(q0, p0)| q0 == q && p0 == p) {
                points.push((q, p));
            }
        }
    }
    let mut runs: Vec<Jobs> = vec![Jobs::default(); points.len()];
    let mut floor_runs = Jobs::default();
    let mut stalls: Vec<f64> = Vec::new();
    for round in 0..cfg.rounds {
        progress(&format!("round {}/{}: floor (SCHED_FIFO, no reservation)", round + 1, cfg.rounds));
        let j = run_jobs(cfg, SchedAttr::Fifo { priority: 10 }, cfg.jobs, cfg.seed.wrapping_add(round as u64 * 1000 + 999))?;
        // Per period, the time the job was ready but not running: the host's stalls.
        for (k, t) in j.times.iter().enumerate() {
            let ready = if k > 0 { t[0].max(j.times[k - 1][2]) } else { t[0] };
            stalls.push((t[2].saturating_sub(ready) as f64 * 1e-9 - j.exec[k]).max(0.0));
        }
        floor_runs.resp.extend(j.resp);
        floor_runs.exec.extend(j.exec);
        for (i, &(q, p)) in points.iter().enumerate() {
            progress(&format!("round {}/{}: Q = {:.0} µs, P = {:.0} µs", round + 1, cfg.rounds, q * 1e6, p * 1e6));
            let attr = SchedAttr::Deadline {
                runtime_ns: (q * 1e9).round() as u64,
                deadline_ns: (p * 1e9).round() as u64,
                period_ns: (p * 1e9).round() as u64,
                reclaim: false,
            };
            let j = run_jobs(cfg, attr, cfg.jobs, cfg.seed.wrapping_add((round * 1000 + i) as u64 + 1))?;
            runs[i].resp.extend(j.resp);
            runs[i].exec.extend(j.exec);
            runs[i].wall.extend(j.wall);
            runs[i].cycle.extend(j.cycle);
            // Freed deadline bandwidth returns asynchronously; let the next admission see it.
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let floor = measured(&floor_runs.resp, &floor_runs.exec, cfg.deadline_s);
    let mut out = Vec::new();
    for (i, &(q, p)) in points.iter().enumerate() {
        let r = Reservation::new(q, p)?;
        let m = measured(&runs[i].resp, &runs[i].exec, cfg.deadline_s);
        let predicted = match analyze(&task, &r, &a_tick) {
            Ok(x) => x,
            Err(ModelError::UnstablePeriodic { .. }) => {
                progress(&format!("Q = {:.0} µs: unstable by the profile, not compared", q * 1e6));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let exact = analyze(&task, &r, &a_exact).map(|x| x.miss_ratio).unwrap_or(1.0);
        let job_only = analyze(&job_only_task, &r, &a_tick).ok();
        let with_stalls = task
            .with_host_stalls(&stalls, q / p, cfg.resolution_s)
            .ok()
            .and_then(|t| analyze(&t, &r, &a_tick).ok());
        let stall_factor = with_stalls
            .as_ref()
            .and_then(|w| (w.miss_ratio > 0.0 && m.miss_ratio > 0.0).then(|| w.miss_ratio / m.miss_ratio));
        let own = ExecutionTime::from_samples(&runs[i].cycle)
            .ok()
            .and_then(|d| analyze(&PeriodicTask { execution: d, ..task.clone() }, &r, &a_tick).ok())
            .map(|x| x.miss_ratio);
        // The host's stalls hit a reserved job as they hit an unreserved one; treated as independent
        // of the reservation's own misses (a first-order composition, not part of the model).
        let with_floor = 1.0 - (1.0 - predicted.miss_ratio) * (1.0 - floor.miss_ratio);
        let floor_factor = (m.miss_ratio > 0.0).then(|| with_floor / m.miss_ratio);
        let factor = (predicted.miss_ratio > 0.0 && m.miss_ratio > 0.0).then(|| predicted.miss_ratio / m.miss_ratio);
        let job_only_factor = job_only
            .as_ref()
            .and_then(|w| (w.miss_ratio > 0.0 && m.miss_ratio > 0.0).then(|| w.miss_ratio / m.miss_ratio));
        let replayed = replay_tick(cfg, &profile, &r)?;
        let replayed_factor = (replayed.miss_ratio > 0.0 && m.miss_ratio > 0.0).then(|| replayed.miss_ratio / m.miss_ratio);
        let replayed_own_miss = replay_tick(cfg, &runs[i].cycle, &r)?.miss_ratio;
        out.push(PointResult {
            runtime_s: q,
            period_s: p,
            utilization: predicted.utilization,
            measured: m,
            predicted,
            predicted_exact_miss: exact,
            predicted_job_only: job_only,
            predicted_own_miss: own,
            miss_ratio_factor: factor,
            job_only_miss_ratio_factor: job_only_factor,
            predicted_with_floor_miss: with_floor,
            predicted_with_stalls: with_stalls,
            with_stalls_factor: stall_factor,
            with_floor_factor: floor_factor,
            replayed,
            replayed_factor,
            replayed_own_miss,
        });
    }
    Ok(PeriodicReport {
        config: cfg.clone(),
        profile_mean_s: dist.mean(),
        profile_p50_s: percentile(&sorted, 0.5),
        profile_p99_s: percentile(&sorted, 0.99),
        profile_max_s: dist.max(),
        floor,
        points: out,
    })
}

impl PeriodicReport {
    /// The predicted-vs-measured table (Markdown).
    pub fn table(&self) -> String {
        let us = |s: f64| format!("{:.0}", s * 1e6);
        let opt_us = |s: Option<f64>| s.map_or("∞".to_string(), us);
        let mut t = format!(
            "profile: {} periods, CPU time per period mean {} µs, p50 {} µs, p99 {} µs, max {} µs; T = {} µs, D = {} µs\n\n",
            self.config.profile_jobs,
            us(self.profile_mean_s),
            us(self.profile_p50_s),
            us(self.profile_p99_s),
            us(self.profile_max_s),
            us(self.config.period_s),
            us(self.config.deadline_s)
        );
        t.push_str(&format!(
            "floor (the same jobs under SCHED_FIFO, no reservation, interleaved with the points): miss {:.2e} ({} of {}), response p50 {} µs, p99 {} µs, p99.9 {} µs, max {} µs\n\n",
            self.floor.miss_ratio,
            self.floor.misses,
            self.floor.jobs,
            us(self.floor.p50_s),
            us(self.floor.p99_s),
            us(self.floor.p999_s),
            us(self.floor.max_s)
        ));
        t.push_str(
            "| Q (µs) | P (µs) | util. | jobs | miss measured | miss predicted | factor | kernel rules replayed | factor | own run replayed | predicted ⊕ floor | factor | model + host stalls | factor | exact enforcement | own run's CPU | jobs' CPU only | factor | p50 meas. / pred. / replayed (µs) | p99 meas. / pred. / replayed (µs) | p99.9 meas. / pred. / replayed (µs) |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for p in &self.points {
            let w = p.predicted_job_only.as_ref();
            t.push_str(&format!(
                "| {} | {} | {:.3} | {} | {:.2e} ({}) | {:.2e} | {} | {:.2e} | {} | {:.2e} | {:.2e} | {} | {} | {} | {:.2e} | {} | {} | {} | {} / {} / {} | {} / {} / {} | {} / {} / {} |\n",
                us(p.runtime_s),
                us(p.period_s),
                p.utilization,
                p.measured.jobs,
                p.measured.miss_ratio,
                p.measured.misses,
                p.predicted.miss_ratio,
                p.miss_ratio_factor.map_or("–".into(), |f| format!("{f:.2}")),
                p.replayed.miss_ratio,
                p.replayed_factor.map_or("–".into(), |f| format!("{f:.2}")),
                p.replayed_own_miss,
                p.predicted_with_floor_miss,
                p.with_floor_factor.map_or("–".into(), |f| format!("{f:.2}")),
                p.predicted_with_stalls.as_ref().map_or("unstable".into(), |w| format!("{:.2e}", w.miss_ratio)),
                p.with_stalls_factor.map_or("–".into(), |f| format!("{f:.2}")),
                p.predicted_exact_miss,
                p.predicted_own_miss.map_or("–".into(), |m| format!("{m:.2e}")),
                w.map_or("unstable".into(), |w| format!("{:.2e}", w.miss_ratio)),
                p.job_only_miss_ratio_factor.map_or("–".into(), |f| format!("{f:.2}")),
                us(p.measured.p50_s),
                opt_us(p.predicted.p50_s),
                us(p.replayed.p50_s),
                us(p.measured.p99_s),
                opt_us(p.predicted.p99_s),
                us(p.replayed.p99_s),
                us(p.measured.p999_s),
                opt_us(p.predicted.p999_s),
                us(p.replayed.p999_s),
            ));
        }
        t
    }
}
