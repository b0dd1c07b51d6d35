//! The running cell: threads of a profile, the TTI clock, the task graph, deadlines and the summary.
//!
//! Table of contents: `config` (what a run is asked to do), `summary` (what it reports), `threads`
//! (the thread bodies); this file holds the cell's shared state, the collector of events and [`run`],
//! which wires them together.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use rtslice_sys::{sched, thread as os_thread, time as clock};
use rustfft::num_complex::Complex32;

use crate::calib::{Calibration, TtiWork};
use crate::chain::{pack_bits, Carrier, Phy, Scratch, UlSubframe};
use crate::ldpc::DecoderWork;
use crate::os::Class;
use crate::phy::SYMBOLS;
use crate::profile::{Profile, ThreadRole, ThreadSpec};
use crate::traffic::Trace;
use crate::EmuError;

mod config;
mod handoff;
mod summary;
mod threads;

pub use config::{Config, SchedMode, UserPlane};
pub use summary::{EmuSummary, Misses, ThreadReport, UserPlaneReport};
use threads::*;

/// Distinct synthesised uplink TTIs the "radio" cycles through (different payload, channel, noise).
const UL_BUFFERS: usize = 8;
/// Receive buffering of the emulated radio (SDR drivers buffer some milliseconds of samples).
const RADIO_BUFFER_NS: u64 = 10_000_000;

// ---------------------------------------------------------------------------------------------
// Events from the pipeline to the collector.

enum Event {
    /// The clock woke for TTI `n` (its samples complete at `avail`).
    Tick { avail: u64, wake: u64 },
    Ul { n: u64, avail: u64, done: Option<u64>, ok: bool, iterations: u32, code_blocks: u32 },
    Dl { n: u64, avail: u64, done: Option<u64> },
}

#[derive(Default)]
struct Partial {
    ul: Option<(Option<u64>, bool, u32, u32)>,
    dl: Option<Option<u64>>,
    avail: u64,
}

#[derive(Default)]
struct Totals {
    ttis: u64,
    missed: u64,
    misses: Misses,
    nacks: u64,
    decode_failures: u64,
    ul_bits: u64,
    dl_bits: u64,
    iterations: u64,
    code_blocks: u64,
    proc_us: Vec<f32>,
    slack_min_ns: i64,
    wake_us: Vec<f32>,
}

impl Totals {
    /// The counters of the report channel (docs/metrics.md).
    fn sli(&self) -> crate::report::SliCounters {
        crate::report::SliCounters {
            deadline_misses: self.missed,
            ttis: self.ttis,
            throughput_bits: self.ul_bits + self.dl_bits,
            nacks: self.nacks,
        }
    }
}

struct Collector {
    budget_ns: u64,
    /// Transport block size of each load level; TTI n's is `tbs[trace.level(n)]`.
    tbs: Vec<u64>,
    trace: Trace,
    partial: BTreeMap<u64, Partial>,
    total: Totals,
    window: Totals,
}

impl Collector {
    fn new(budget_ns: u64, tbs: Vec<u64>, trace: Trace) -> Collector {
        Collector {
            budget_ns,
            tbs,
            trace,
            partial: BTreeMap::new(),
            total: Totals { slack_min_ns: i64::MAX, ..Totals::default() },
            window: Totals { slack_min_ns: i64::MAX, ..Totals::default() },
        }
    }

    fn add(&mut self, ev: Event) {
        match ev {
            Event::Tick { wake, avail, .. } => {
                let us = wake.saturating_sub(avail) as f32 / 1e3;
                self.total.wake_us.push(us);
                self.window.wake_us.push(us);
            }
            Event::Ul { n, avail, done, ok, iterations, code_blocks } => {
                let p = self.partial.entry(n).or_default();
                p.avail = avail;
                p.ul = Some((done, ok, iterations, code_blocks));
                self.try_finish(n);
            }
            Event::Dl { n, avail, done } => {
                let p = self.partial.entry(n).or_default();
                p.avail = avail;
                p.dl = Some(done);
                self.try_finish(n);
            }
        }
    }

    fn try_finish(&mut self, n: u64) {
        let ready = self.partial.get(&n).is_some_and(|p| p.ul.is_some() && p.dl.is_some());
        if !ready {
            return;
        }
        let p = self.partial.remove(&n).expect("checked above");
        let (ul_done, ok, iterations, cbs) = p.ul.expect("checked");
        let dl_done = p.dl.expect("checked");
        let deadline = p.avail + self.budget_ns;
        let tbs = self.tbs[self.trace.level(n)];
        for t in [&mut self.total, &mut self.window] {
            t.ttis += 1;
            let ul_late = ul_done.is_some_and(|d| d > deadline);
            let dl_late = dl_done.is_some_and(|d| d > deadline);
            t.misses.ul_late += ul_late as u64;
            t.misses.dl_late += dl_late as u64;
            t.misses.ul_dropped += ul_done.is_none() as u64;
            t.misses.dl_dropped += dl_done.is_none() as u64;
            t.missed += (ul_late || dl_late || ul_done.is_none() || dl_done.is_none()) as u64;
            let decode_fail = ul_done.is_some() && !ok;
            t.decode_failures += decode_fail as u64;
            let nack = ul_done.is_none() || ul_late || !ok;
            t.nacks += nack as u64;
            if !nack {
                t.ul_bits += tbs;
            }
            if dl_done.is_some() && !dl_late {
                t.dl_bits += tbs;
            }
            t.iterations += iterations as u64;
            t.code_blocks += cbs as u64;
            if let (Some(u), Some(d)) = (ul_done, dl_done) {
                let done = u.max(d);
                t.proc_us.push(done.saturating_sub(p.avail) as f32 / 1e3);
                t.slack_min_ns = t.slack_min_ns.min(deadline as i64 - done as i64);
            }
        }
    }
}

/// The q-quantile (q in [0, 1]) of sorted samples by the workspace's one percentile definition
/// (rtslice-stats: linear interpolation between closest ranks); 0 when there is none. Samples are
/// kept as f32 while the cell runs (memory of long runs) and widened here.
fn percentile(sorted: &[f32], q: f64) -> f64 {
    let wide: Vec<f64> = sorted.iter().map(|x| f64::from(*x)).collect();
    rtslice_stats::percentile_sorted(&wide, q * 100.0).unwrap_or(0.0)
}

/// What a run that was asked for `target`% of one core and used `used`% should tell its user, when
/// the two are far apart. The calibration times each PHY kernel at its best over repeated,
/// cache-warm calls (`calib::min_ns`), which is what makes it repeatable; a running stack also pays
/// for cold caches, its threads' hand-offs and wake-ups, its non-PHY threads and what the host
/// steals, so a stack can use far more than its target (nr-gnb's per-slot FFTs alone are above 40 %
/// at one PRB; measured in docs/results.md). Studies that compare strategies at "40 %" must then say
/// what the stack really used, so the summary does.
fn load_gap_warning(target: Option<f64>, used: f64, predicted: f64) -> Option<String> {
    let target = target?;
    // Half as much again, and 10 points of a core: below that the gap is the calibration's usual
    // error and the stack's own threads, not a different experiment.
    (used > 1.5 * target && used - target >= 10.0).then(|| {
        format!(
            "the run used {used:.0}% of one core, {:.1}x the {target:.0}% asked for (the calibration predicted {predicted:.0}%): \
             this host's cost per TTI is above the calibration's cache-warm kernel timings; compare runs by the CPU they used, \
             and size reservations from it, not from --load",
            used / target
        )
    })
}

// ---------------------------------------------------------------------------------------------
// Shared state of the running cell.

struct Job {
    n: u64,
    /// The TTI's load level (index into `Cell::levels`).
    lvl: usize,
    avail: u64,
    buf: usize,
    grid: Vec<Complex32>,
}

/// Raw pointer to the half of a grid a front-end helper transforms while its owner waits.
struct HalfGrid {
    ptr: *mut Complex32,
    len: usize,
    buf: usize,
    lvl: usize,
    done: SyncSender<()>,
}
// SAFETY: the owner blocks on `done` until the helper has finished with the slice, and the two
// halves are disjoint, so the memory is never accessed concurrently.
unsafe impl Send for HalfGrid {}

/// One load level of the traffic pattern: its PHY set-up (scheduled PRBs, TBS, code blocks) and
/// the synthesised radio it receives. Every level shares the carrier, so grids have one size.
struct Level {
    phy: Phy,
    ul: Vec<UlSubframe>,
}

struct Cell {
    /// Load levels, lowest first; the last is the peak.
    levels: Vec<Level>,
    trace: Trace,
    tti_ns: u64,
    budget_ns: u64,
    total_ttis: u64,
    stop: AtomicBool,
    external_stop: Option<Arc<AtomicBool>>,
    events: Mutex<Sender<Event>>,
    grids: Mutex<Vec<Vec<Complex32>>>,
    threads: Mutex<Vec<ThreadReport>>,
    up_sent: AtomicUsize,
    up_bytes_sent: AtomicUsize,
    up_received: AtomicUsize,
    up_bytes_received: AtomicUsize,
}

impl Cell {
    /// The level of TTI `n` and its index.
    fn level(&self, n: u64) -> (usize, &Level) {
        let i = self.trace.level(n);
        (i, &self.levels[i])
    }
    fn grid_len(&self) -> usize {
        self.levels[0].phy.grid_len()
    }
    fn grid(&self) -> Vec<Complex32> {
        self.grids
            .lock()
            .expect("grid pool")
            .pop()
            .unwrap_or_else(|| vec![Complex32::new(0.0, 0.0); self.grid_len()])
    }
    fn put_grid(&self, g: Vec<Complex32>) {
        self.grids.lock().expect("grid pool").push(g);
    }
    fn send(&self, ev: Event) {
        let _ = self.events.lock().expect("event sender").send(ev);
    }
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.external_stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed))
    }
}

/// Channel ends handed to the threads of a profile.
#[derive(Default)]
struct Wiring {
    fep: Option<Receiver<HalfGrid>>,
    fep_tx: Option<Sender<HalfGrid>>,
    l1: Option<Receiver<Job>>,
    l1_tx: Option<SyncSender<Job>>,
    dl: Option<Receiver<Job>>,
    dl_tx: Option<Sender<Job>>,
    l1tx: Option<Receiver<(u64, u64, usize)>>,
    l1tx_tx: Option<SyncSender<(u64, u64, usize)>>,
    /// srsENB's worker pool (TXRX gives, workers take): see `handoff` for why not a channel.
    pool: Option<Arc<handoff::Handoff<Job>>>,
    cb_pool: Option<Arc<threads::CbQueue>>,
    cb_pool_tx: Option<Sender<CbJob>>,
    stack: Option<Receiver<Vec<u8>>>,
    stack_tx: Option<Sender<Vec<u8>>>,
    up: Option<Receiver<Vec<u8>>>,
    up_tx: Option<Sender<Vec<u8>>>,
}

struct CbJob {
    cb: usize,
    buf: usize,
    lvl: usize,
    llr: Arc<Vec<f32>>,
    reply: Sender<(u32, bool, Vec<u8>)>,
}

fn resolve_class(mode: SchedMode, spec: &ThreadSpec) -> Class {
    match mode {
        SchedMode::Profile => spec.class,
        SchedMode::Force(c) if spec.class != Class::Other => c,
        SchedMode::Force(_) => Class::Other,
    }
}

/// Names the thread, applies affinity and class (falling back to SCHED_OTHER with a note when the
/// kernel refuses an RT class), and registers it. Returns the registry index.
fn thread_setup(cell: &Cell, spec: &ThreadSpec, class: Class, cpus: &Option<Vec<usize>>) -> usize {
    let _ = os_thread::set_name(&spec.name);
    let mut note = None;
    if let Some(c) = cpus {
        if let Err(e) = sched::set_affinity(0, c.iter().map(|&c| c as u32)) {
            note = Some(format!("affinity {c:?} refused: {e}"));
        }
    }
    let mut applied = class;
    if class != Class::Other {
        if let Err(e) = sched::set_sched_class(class.sched_class(), spec.priority) {
            applied = Class::Other;
            note = Some(format!(
                "{} {} refused ({e}): needs CAP_SYS_NICE and an RT budget in this cpu cgroup \
                 (cpu.rt_runtime_us > 0); running SCHED_OTHER",
                class.as_str(),
                spec.priority
            ));
        }
    }
    let mut reg = cell.threads.lock().expect("thread registry");
    reg.push(ThreadReport {
        name: spec.name.clone(),
        tid: os_thread::gettid(),
        role: spec.role,
        class_requested: class,
        priority_requested: if class == Class::Other { 0 } else { spec.priority },
        class: applied,
        priority: if applied == Class::Other { 0 } else { spec.priority },
        cpu_s: 0.0,
        cpu_percent: 0.0,
        note,
    });
    reg.len() - 1
}

fn thread_finish(cell: &Cell, idx: usize) {
    let cpu = clock::thread_cpu_ns() as f64 / 1e9;
    if let Some(t) = cell.threads.lock().expect("thread registry").get_mut(idx) {
        t.cpu_s = cpu;
    }
}

/// Runs the emulated cell to completion and returns its summary.
pub fn run(cfg: Config) -> Result<EmuSummary, EmuError> {
    let d = cfg.profile.defaults();
    let lte = cfg.profile != Profile::NrGnb;
    if !lte && cfg.numerology > 3 {
        return Err(EmuError::Invalid(format!("numerology µ={} is outside 0..=3", cfg.numerology)));
    }
    let tti_ns = if lte { 1_000_000 } else { 1_000_000 >> cfg.numerology };
    let budget_ttis = cfg.budget_ttis.unwrap_or(d.budget_ttis).max(1);
    let budget_ns = tti_ns * budget_ttis as u64;
    let workers = cfg.workers.unwrap_or(if cfg.profile == Profile::Srsenb { budget_ttis as usize } else { d.workers });
    if cfg.profile != Profile::OaiLte && workers == 0 {
        return Err(EmuError::Invalid(format!("{} needs at least one worker", cfg.profile.name())));
    }
    if cfg.pi_locks && cfg.profile != Profile::NrGnb {
        return Err(EmuError::Invalid(format!("--pi-locks is for nr-gnb's Tpool queue; {} has none", cfg.profile.name())));
    }
    if !(cfg.snr_db.is_finite()) {
        return Err(EmuError::Invalid("SNR must be a finite number of dB".into()));
    }
    if cfg.max_iterations == 0 || cfg.max_iterations > 100 {
        return Err(EmuError::Invalid("LDPC iteration cap must be within 1..=100".into()));
    }
    let mut warnings = Vec::new();
    if let Some(cpus) = &cfg.cpus {
        let allowed: Vec<usize> = sched::get_affinity(0).unwrap_or_default().into_iter().map(|c| c as usize).collect();
        if cpus.is_empty() || cpus.iter().any(|c| !allowed.contains(c)) {
            return Err(EmuError::Invalid(format!(
                "--cpus {cpus:?} is not within the CPUs this process may use {allowed:?}"
            )));
        }
    }
    let mut carrier = Carrier {
        prb: cfg.prb.unwrap_or(d.prb),
        prb_scheduled: 0,
        mcs: cfg.mcs.unwrap_or(d.mcs),
        antennas: cfg.antennas.unwrap_or(d.antennas),
        snr_db: cfg.snr_db,
        max_iterations: cfg.max_iterations,
    };
    if carrier.prb == 0 || carrier.prb > 275 {
        return Err(EmuError::Invalid(format!("{} PRB is outside 1..=275", carrier.prb)));
    }
    let tti = Duration::from_nanos(tti_ns);
    let total_ttis = (cfg.duration.as_nanos() / tti_ns as u128).max(1) as u64;
    let trace = Trace::new(cfg.traffic_pattern, tti, total_ttis, cfg.seed).map_err(|e| EmuError::Invalid(format!("traffic pattern: {e}")))?;
    let load_target = cfg.load_percent.or(if cfg.prb.is_none() && cfg.traffic.is_none() { Some(d.load_percent) } else { None });
    let calibration = match cfg.calibration.clone() {
        Some(c) => c,
        None => {
            let (c, measured, path) = Calibration::load_or_measure();
            if measured && cfg.live {
                eprintln!(
                    "rtslice emulate: calibrated this host's kernels ({}){}",
                    c.build,
                    path.map(|p| format!(", stored in {}", p.display())).unwrap_or_default()
                );
            }
            c
        }
    };
    // Decoder iterations at this SNR and MCS, measured on a small allocation: the one input to the
    // cost prediction that depends on the channel.
    let probe_prb = carrier.prb.min(10);
    let probe = Phy::new(Carrier { prb_scheduled: probe_prb, ..carrier.clone() })?;
    let iterations_mean = mean_iterations(&probe);
    let shape = carrier.clone();
    let cost = |n: usize| calibration.predict(&TtiWork::estimate(&shape, n, iterations_mean)).total_us;
    if let Some(load) = load_target {
        if !(load > 0.0 && load <= 10_000.0) {
            return Err(EmuError::Invalid(format!("load {load}% must be above 0")));
        }
        let budget_us = tti_ns as f64 / 1e3 * load / 100.0;
        let full = cost(carrier.prb);
        if full < budget_us * 0.97 {
            return Err(EmuError::LoadTooHigh {
                requested: load,
                max: 100.0 * full * 1e3 / tti_ns as f64,
                hint: format!(
                    "{} PRB, MCS {}, {} antenna(s) fully scheduled; raise --prb, --mcs or --antennas",
                    carrier.prb, carrier.mcs, carrier.antennas
                ),
            });
        }
        let best = (1..=carrier.prb).min_by(|&a, &b| (cost(a) - budget_us).abs().total_cmp(&(cost(b) - budget_us).abs()));
        carrier.prb_scheduled = best.unwrap_or(1);
        if cost(carrier.prb_scheduled) > budget_us * 1.5 {
            warnings.push(format!(
                "the smallest allocation (1 PRB) costs {:.0} µs per TTI, above the {load}% target",
                cost(1)
            ));
        }
    } else {
        let t = cfg.traffic.unwrap_or(1.0);
        if !(t > 0.0 && t <= 1.0) {
            return Err(EmuError::Invalid(format!("traffic {t} must be within (0, 1]")));
        }
        carrier.prb_scheduled = ((carrier.prb as f64 * t).round() as usize).clamp(1, carrier.prb);
    }
    // Each level of the pattern asks for its fraction of the peak's predicted CPU demand (not of
    // its PRBs: the FFTs of the whole carrier cost the same at any allocation), so a level below
    // what one PRB costs stays at one PRB.
    let peak_prb = carrier.prb_scheduled;
    let peak_cost = cost(peak_prb);
    let level_prbs: Vec<usize> = trace
        .levels()
        .iter()
        .map(|&f| {
            if f >= 1.0 {
                return peak_prb;
            }
            (1..=peak_prb).min_by(|&a, &b| (cost(a) - f * peak_cost).abs().total_cmp(&(cost(b) - f * peak_cost).abs())).unwrap_or(1)
        })
        .collect();
    let mut levels = Vec::with_capacity(level_prbs.len());
    let mut level_load = Vec::with_capacity(level_prbs.len());
    for (i, &prb) in level_prbs.iter().enumerate() {
        let phy = Phy::new(Carrier { prb_scheduled: prb, ..carrier.clone() })?;
        level_load.push(100.0 * calibration.predict(&TtiWork::of(&phy, iterations_mean)).total_us * 1e3 / tti_ns as f64);
        // A radio of its own per level (the peak level's is the one a constant run always had).
        let base = 1000 + 100 * (level_prbs.len() - 1 - i) as u64;
        let ul: Vec<UlSubframe> = (0..UL_BUFFERS as u64).map(|s| phy.generate_ul(base + s)).collect();
        levels.push(Level { phy, ul });
    }
    let peak_phy = &levels.last().expect("a pattern has at least one level").phy;
    let predicted = calibration.predict(&TtiWork::of(peak_phy, iterations_mean));
    let tbs_levels: Vec<u64> = levels.iter().map(|l| l.phy.tbs as u64).collect();
    let (peak_nfft, peak_tbs, peak_cbs) = (peak_phy.nfft, peak_phy.tbs, peak_phy.cbs.len());

    let (ev_tx, ev_rx) = mpsc::channel();
    let cell = Arc::new(Cell {
        levels,
        trace: trace.clone(),
        tti_ns,
        budget_ns,
        total_ttis,
        stop: AtomicBool::new(false),
        external_stop: cfg.stop.clone(),
        events: Mutex::new(ev_tx),
        grids: Mutex::new(Vec::new()),
        threads: Mutex::new(Vec::new()),
        up_sent: AtomicUsize::new(0),
        up_bytes_sent: AtomicUsize::new(0),
        up_received: AtomicUsize::new(0),
        up_bytes_received: AtomicUsize::new(0),
    });

    let specs = cfg.profile.threads(workers);
    let mut w = Wiring::default();
    let (tx, rx) = mpsc::channel();
    w.fep_tx = Some(tx);
    w.fep = Some(rx);
    // Hand-offs block when the next stage is busy, as in the real stacks (OAI's ru thread waits
    // for its L1 thread, srsENB's TXRX for an idle worker): capacity one TTI waiting.
    let (tx, rx) = mpsc::sync_channel(1);
    w.l1_tx = Some(tx);
    w.l1 = Some(rx);
    let (tx, rx) = mpsc::channel();
    w.dl_tx = Some(tx);
    w.dl = Some(rx);
    let (tx, rx) = mpsc::sync_channel(1);
    w.l1tx_tx = Some(tx);
    w.l1tx = Some(rx);
    // TXRX hands a TTI over only to an idle worker (srsENB's pool), sleeping meanwhile.
    w.pool = Some(Arc::new(handoff::Handoff::new()));
    let (tx, rx) = mpsc::channel();
    w.cb_pool_tx = Some(tx);
    w.cb_pool = Some(Arc::new(threads::CbQueue::new(rx, cfg.pi_locks)));
    let (tx, rx) = mpsc::channel();
    w.stack_tx = Some(tx);
    w.stack = Some(rx);
    let (tx, rx) = mpsc::channel();
    w.up_tx = Some(tx);
    w.up = Some(rx);
    // In srsENB the stack thread forwards to the tunnel; in OAI L1 hands bytes to GTP-U directly.
    let l2_tx = if cfg.profile == Profile::Srsenb { w.stack_tx.clone() } else { w.up_tx.clone() };

    let barrier = Arc::new(Barrier::new(specs.len() + 1));
    let (addr_tx, addr_rx) = mpsc::channel::<Result<SocketAddr, String>>();
    let mut handles = Vec::new();
    for spec in specs.iter().cloned() {
        let cell = cell.clone();
        let barrier = barrier.clone();
        let class = resolve_class(cfg.sched, &spec);
        let cpus = cfg.cpus.clone();
        let up = cfg.userplane.clone();
        let profile = cfg.profile;
        let role = spec.role;
        // Each role holds only the senders it uses, so channels close in pipeline order at the end.
        let clock = role == ThreadRole::Clock;
        let nr = profile == Profile::NrGnb;
        let fep_tx = if clock { w.fep_tx.clone() } else { None };
        let l1_tx = if clock { w.l1_tx.clone() } else { None };
        let l1tx_tx = if clock { w.l1tx_tx.clone() } else { None };
        let pool_tx = if clock { w.pool.clone() } else { None };
        let dl_tx = if role == ThreadRole::L1 { w.dl_tx.clone() } else { None };
        let cb_pool_tx = if role == ThreadRole::L1 { w.cb_pool_tx.clone() } else { None };
        let up_tx = if role == ThreadRole::Stack { w.up_tx.clone() } else { None };
        let l2 = if matches!(role, ThreadRole::L1 | ThreadRole::Worker) { l2_tx.clone() } else { None };
        let pool = if role == ThreadRole::Worker && !nr { w.pool.clone() } else { None };
        let cb_pool = if role == ThreadRole::Worker && nr { w.cb_pool.clone() } else { None };
        let addr_tx = if role == ThreadRole::UserPlaneRx { Some(addr_tx.clone()) } else { None };
        let fep = if role == ThreadRole::FrontEnd { w.fep.take() } else { None };
        let l1 = if role == ThreadRole::L1 { w.l1.take() } else { None };
        let dl = if role == ThreadRole::DlBackEnd { w.dl.take() } else { None };
        let l1tx = if role == ThreadRole::L1Tx { w.l1tx.take() } else { None };
        let stack = if role == ThreadRole::Stack { w.stack.take() } else { None };
        let upq = if role == ThreadRole::UserPlaneTx { w.up.take() } else { None };
        let h = std::thread::Builder::new()
            .name(spec.name.clone())
            .spawn(move || {
                let idx = thread_setup(&cell, &spec, class, &cpus);
                // The receiving socket must exist before anyone sends: bind before the barrier.
                let up_sock = match (role, addr_tx) {
                    (ThreadRole::UserPlaneRx, Some(tx)) => {
                        let s = bind_userplane(&up);
                        let _ = tx.send(s.as_ref().map_err(Clone::clone).and_then(|s| s.local_addr().map_err(|e| e.to_string())));
                        s.ok()
                    }
                    _ => None,
                };
                barrier.wait();
                match role {
                    ThreadRole::Clock => clock_loop(&cell, profile, fep_tx, l1_tx, l1tx_tx, pool_tx),
                    ThreadRole::FrontEnd => fep_loop(&cell, fep.expect("fep channel")),
                    ThreadRole::L1 => l1_loop(&cell, profile, l1.expect("l1 channel"), dl_tx, cb_pool_tx, l2),
                    ThreadRole::DlBackEnd => dl_loop(&cell, dl.expect("dl channel")),
                    ThreadRole::L1Tx => l1tx_loop(&cell, l1tx.expect("l1tx channel")),
                    ThreadRole::Worker if profile == Profile::NrGnb => cb_worker_loop(&cell, cb_pool.expect("cb pool")),
                    ThreadRole::Worker => worker_loop(&cell, pool.expect("pool"), l2),
                    ThreadRole::Stack => stack_loop(&cell, stack.expect("stack channel"), up_tx),
                    ThreadRole::UserPlaneTx => up_tx_loop(&cell, upq.expect("user-plane channel"), addr_rx_shared()),
                    ThreadRole::UserPlaneRx => {
                        if let Some(s) = up_sock {
                            up_rx_loop(&cell, s)
                        }
                    }
                    ThreadRole::Control => control_loop(&cell, spec.period_ms),
                }
                thread_finish(&cell, idx);
            })
            .map_err(|e| EmuError::Io(format!("cannot start thread {}: {e}", spec_name_hint(&e))))?;
        handles.push(h);
    }
    drop(w);
    drop(l2_tx);
    drop(addr_tx);
    // The receiving socket must exist before the sender starts; hand its address over.
    let receiver = match addr_rx.recv_timeout(Duration::from_secs(5)) {
        Ok(Ok(a)) => {
            set_addr_shared(Some(a));
            a.to_string()
        }
        Ok(Err(e)) => {
            warnings.push(format!("user plane disabled: {e}"));
            set_addr_shared(None);
            String::new()
        }
        Err(_) => {
            set_addr_shared(None);
            String::new()
        }
    };
    barrier.wait();

    let reporter = match crate::report::Reporter::from_env() {
        Ok(r) => r,
        Err(e) => {
            warnings.push(e);
            None
        }
    };
    // The emulator's CPU is its own threads' (this collector and the pipeline), not the process's:
    // a library caller's other threads (a test's FIFO 99 host-stall sentinel, a daemon's workers)
    // would otherwise count as the cell's need.
    let start_cpu = clock::thread_cpu_ns();
    let start = clock::monotonic_ns();
    let mut col = Collector::new(budget_ns, tbs_levels.clone(), trace.clone());
    let mut next_line = start + 1_000_000_000;
    let mut second = 0;
    let mut series = Vec::new();
    loop {
        match ev_rx.recv_timeout(Duration::from_millis(50)) {
            Ok(ev) => col.add(ev),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        // All pipeline threads hold a sender through `cell`; stop when every thread has finished.
        if handles.iter().all(|h| h.is_finished()) {
            while let Ok(ev) = ev_rx.try_recv() {
                col.add(ev);
            }
            break;
        }
        let now = clock::monotonic_ns();
        if now >= next_line {
            second += 1;
            series.push((col.window.ul_bits + col.window.dl_bits) as f64);
            if let Some(r) = &reporter {
                r.send(&col.total.sli());
            }
            if cfg.live {
                eprintln!("{}", live_line(second, &mut col.window, tti_ns));
            }
            col.window = Totals { slack_min_ns: i64::MAX, ..Totals::default() };
            next_line += 1_000_000_000;
        }
    }
    for h in handles {
        let _ = h.join();
    }
    if let Some(r) = &reporter {
        r.send(&col.total.sli());
    }
    let elapsed_s = (clock::monotonic_ns() - start) as f64 / 1e9;
    let collector_cpu_s = (clock::thread_cpu_ns() - start_cpu) as f64 / 1e9;
    // TTIs still waiting for one direction (threads ended mid-TTI on Ctrl-C) are not counted.
    let t = &mut col.total;
    t.proc_us.sort_by(f32::total_cmp);
    t.wake_us.sort_by(f32::total_cmp);
    let span_s = (t.ttis as f64 * tti_ns as f64 / 1e9).max(1e-9);
    let threads: Vec<ThreadReport> = cell
        .threads
        .lock()
        .expect("thread registry")
        .iter()
        .cloned()
        .map(|mut r| {
            r.cpu_percent = 100.0 * r.cpu_s / elapsed_s.max(1e-9);
            if let Some(n) = &r.note {
                warnings.push(format!("{}: {n}", r.name));
            }
            r
        })
        .collect();
    let cpu_total = collector_cpu_s + threads.iter().map(|r| r.cpu_s).sum::<f64>();
    let cpu_percent_total = 100.0 * cpu_total / elapsed_s.max(1e-9);
    let load_predicted_percent = 100.0 * predicted.total_us * 1e3 / tti_ns as f64;
    warnings.extend(load_gap_warning(load_target, cpu_percent_total, load_predicted_percent));
    // What was offered over the TTIs counted: per TTI its level's TBS both ways and predicted load.
    let counted = t.ttis.max(1);
    let (mut bits, mut load_sum, mut load_peak) = (0.0, 0.0, 0.0f64);
    for n in 0..counted {
        let l = trace.level(n);
        bits += 2.0 * tbs_levels[l] as f64;
        load_sum += level_load[l];
        load_peak = load_peak.max(level_load[l]);
    }
    let offered = bits / counted as f64 * 1e9 / tti_ns as f64;
    Ok(EmuSummary {
        profile: cfg.profile.name().to_string(),
        duration_s: span_s,
        tti_us: tti_ns as f64 / 1e3,
        budget_us: budget_ns as f64 / 1e3,
        prb: carrier.prb,
        prb_scheduled: carrier.prb_scheduled,
        mcs: carrier.mcs,
        antennas: carrier.antennas,
        snr_db: carrier.snr_db,
        fft_size: peak_nfft,
        tbs_bits: peak_tbs,
        code_blocks: peak_cbs,
        load_target_percent: load_target,
        load_predicted_percent,
        predicted_cost: predicted,
        traffic_pattern: cfg.traffic_pattern,
        seed: cfg.seed,
        prb_scheduled_levels: level_prbs,
        offered_load_mean_percent: load_sum / counted as f64,
        offered_load_peak_percent: load_peak,
        ttis: t.ttis,
        deadline_misses: t.missed,
        misses: t.misses.clone(),
        nacks: t.nacks,
        decode_failures: t.decode_failures,
        nack_ratio: if t.ttis > 0 { t.nacks as f64 / t.ttis as f64 } else { 0.0 },
        lost_subframes: t.misses.dl_late + t.misses.dl_dropped,
        throughput_bps: (t.ul_bits + t.dl_bits) as f64 / span_s,
        ul_throughput_bps: t.ul_bits as f64 / span_s,
        dl_throughput_bps: t.dl_bits as f64 / span_s,
        offered_bps: offered,
        throughput_series_bps: series,
        proc_mean_us: if t.proc_us.is_empty() { 0.0 } else { t.proc_us.iter().map(|&x| x as f64).sum::<f64>() / t.proc_us.len() as f64 },
        proc_p50_us: percentile(&t.proc_us, 0.5),
        proc_p99_us: percentile(&t.proc_us, 0.99),
        proc_p9999_us: percentile(&t.proc_us, 0.9999),
        proc_max_us: t.proc_us.last().copied().unwrap_or(0.0) as f64,
        slack_min_us: if t.slack_min_ns == i64::MAX { 0.0 } else { t.slack_min_ns as f64 / 1e3 },
        clock_wakeup_p99_us: percentile(&t.wake_us, 0.99),
        clock_wakeup_max_us: t.wake_us.last().copied().unwrap_or(0.0) as f64,
        ldpc_iterations_mean: if t.code_blocks > 0 { t.iterations as f64 / t.code_blocks as f64 } else { 0.0 },
        cpu_percent_total,
        threads,
        userplane: UserPlaneReport {
            packets_sent: cell.up_sent.load(Ordering::Relaxed) as u64,
            bytes_sent: cell.up_bytes_sent.load(Ordering::Relaxed) as u64,
            packets_received: cell.up_received.load(Ordering::Relaxed) as u64,
            bytes_received: cell.up_bytes_received.load(Ordering::Relaxed) as u64,
            receiver,
        },
        warnings,
    })
}

fn spec_name_hint(e: &std::io::Error) -> String {
    format!("({e}); the process may have hit its thread limit")
}

fn live_line(second: u64, w: &mut Totals, tti_ns: u64) -> String {
    w.proc_us.sort_by(f32::total_cmp);
    let secs = (w.ttis as f64 * tti_ns as f64 / 1e9).max(1e-9);
    format!(
        "[{second:>4}s] ttis {:>5}  misses {:>4} (ul late {}, dl late {}, dropped {})  nack {:>4}  thr {:>7.2} Mbit/s  proc p50 {:>6.0} p99 {:>6.0} max {:>6.0} µs  iters {:.1}",
        w.ttis,
        w.missed,
        w.misses.ul_late,
        w.misses.dl_late,
        w.misses.ul_dropped.max(w.misses.dl_dropped),
        w.nacks,
        (w.ul_bits + w.dl_bits) as f64 / secs / 1e6,
        percentile(&w.proc_us, 0.5),
        percentile(&w.proc_us, 0.99),
        w.proc_us.last().copied().unwrap_or(0.0),
        if w.code_blocks > 0 { w.iterations as f64 / w.code_blocks as f64 } else { 0.0 },
    )
}

fn mean_iterations(phy: &Phy) -> f64 {
    let mut scratch = Scratch::default();
    let mut grid = vec![Complex32::new(0.0, 0.0); phy.grid_len()];
    let mut sum = 0u32;
    let mut n = 0u32;
    for seed in 0..3 {
        let sf = phy.generate_ul(77 + seed);
        phy.ul_fft(&sf.time, &mut grid, 0..SYMBOLS, &mut scratch);
        let r = phy.ul_decode(&grid, &sf, &mut scratch, &mut Vec::new());
        sum += r.iterations_sum;
        n += r.code_blocks;
    }
    if n == 0 { 1.0 } else { sum as f64 / n as f64 }
}

#[cfg(test)]
mod tests {
    use super::load_gap_warning;

    #[test]
    fn a_run_far_above_its_load_says_so_with_both_numbers() {
        // nr-gnb at --load 40% as measured on a 2-vCPU VM: 91.5 % used, 43.6 % predicted.
        let w = load_gap_warning(Some(40.0), 91.5, 43.6).expect("a warning");
        assert!(w.contains("92% of one core") && w.contains("2.3x the 40%") && w.contains("predicted 44%"), "{w}");
        // Within half as much again, or within 10 points of a core: the calibration's usual error.
        assert_eq!(load_gap_warning(Some(40.0), 59.0, 40.0), None);
        assert_eq!(load_gap_warning(Some(10.0), 19.0, 10.0), None);
        // No target (--prb or --traffic): nothing to compare with.
        assert_eq!(load_gap_warning(None, 95.0, 40.0), None);
    }
}
