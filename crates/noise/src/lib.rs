//! rtslice-noise: real interference for experiments, each kind with clean teardown.
//!
//! - `user`: stress-ng with study A's exact stressors, one set per chosen CPU.
//! - `kernel`: a UDP flood of small datagrams between two network namespaces joined by a veth
//!   pair, the receive softirq steered to the chosen CPUs with RPS, consumed by socat.
//! - `rt`: rt-app periodic tasks (study B: four tasks, 6 ms every 100 ms), policy selectable.
//! - `cache`: stress-ng cache-thrashing and memory-bandwidth (stream) stressors per CPU.
//!
//! `Noise::start(spec)` returns a [`NoiseGuard`]; dropping it (or `stop()`) kills every process it
//! started, stops the flood and deletes the namespaces. `report()` gives packets/s, per-CPU busy
//! and softirq shares since the previous report.

mod flood;
mod proc;
mod stats;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use flood::{cleanup_stale, FloodStats};
pub use stats::CpuShare;

#[derive(Debug, thiserror::Error)]
pub enum NoiseError {
    #[error("`{tool}` is not installed; install it with `apt-get install {package}` (or run `sudo make deps`)")]
    MissingTool { tool: String, package: String },
    #[error("invalid noise request: {0}")]
    Invalid(String),
    #[error("{what} failed: {detail}")]
    Command { what: String, detail: String },
    #[error("{0}")]
    Io(String),
    #[error("{what} exited early (status {status}); its last output:\n{output}")]
    Exited { what: String, status: String, output: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NoiseKind {
    User,
    Kernel,
    Rt,
    Cache,
}

impl NoiseKind {
    pub fn parse(s: &str) -> Option<NoiseKind> {
        match s {
            "user" => Some(NoiseKind::User),
            "kernel" | "net" | "flood" => Some(NoiseKind::Kernel),
            "rt" => Some(NoiseKind::Rt),
            "cache" | "membw" => Some(NoiseKind::Cache),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            NoiseKind::User => "user",
            NoiseKind::Kernel => "kernel",
            NoiseKind::Rt => "rt",
            NoiseKind::Cache => "cache",
        }
    }
}

/// Scheduling policy of the rt-app tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RtPolicy {
    Fifo,
    Rr,
    Other,
    Deadline,
}

impl RtPolicy {
    pub fn parse(s: &str) -> Option<RtPolicy> {
        match s.to_ascii_lowercase().trim_start_matches("sched_") {
            "fifo" => Some(RtPolicy::Fifo),
            "rr" => Some(RtPolicy::Rr),
            "other" | "normal" | "cfs" => Some(RtPolicy::Other),
            "deadline" | "dl" => Some(RtPolicy::Deadline),
            _ => None,
        }
    }
    fn rt_app_name(self) -> &'static str {
        match self {
            RtPolicy::Fifo => "SCHED_FIFO",
            RtPolicy::Rr => "SCHED_RR",
            RtPolicy::Other => "SCHED_OTHER",
            RtPolicy::Deadline => "SCHED_DEADLINE",
        }
    }
}

/// The `rt` kind: `tasks` periodic tasks running `runtime` every `period`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RtSpec {
    pub tasks: usize,
    pub runtime: Duration,
    pub period: Duration,
    pub policy: RtPolicy,
    /// FIFO/RR priority (1..=99); ignored for other and deadline.
    pub priority: i32,
}

impl Default for RtSpec {
    /// Study B's noise: four rt-app tasks, 6 ms every 100 ms.
    fn default() -> RtSpec {
        RtSpec { tasks: 4, runtime: Duration::from_millis(6), period: Duration::from_millis(100), policy: RtPolicy::Fifo, priority: 50 }
    }
}

/// The `kernel` kind: the flood.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FloodSpec {
    /// Packets per second to send; `None` = as fast as one sender thread can.
    pub pps: Option<u64>,
    /// UDP payload bytes (study A: 100-byte frames).
    pub payload: usize,
    /// CPUs of the sending thread; default: the CPUs not chosen for the noise (else all).
    pub sender_cpus: Option<Vec<usize>>,
    /// Steer the receive softirq to the chosen CPUs with RPS (otherwise it runs where the sender runs).
    pub rps: bool,
}

impl Default for FloodSpec {
    fn default() -> FloodSpec {
        FloodSpec { pps: None, payload: 100, sender_cpus: None, rps: true }
    }
}

/// What to start. `cpus` empty = every online CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoiseSpec {
    pub kind: NoiseKind,
    pub cpus: Vec<usize>,
    pub rt: RtSpec,
    pub flood: FloodSpec,
}

impl NoiseSpec {
    pub fn new(kind: NoiseKind, cpus: Vec<usize>) -> NoiseSpec {
        NoiseSpec { kind, cpus, rt: RtSpec::default(), flood: FloodSpec::default() }
    }
}

/// Interference statistics over the interval since the previous `report()` (or the start).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NoiseReport {
    pub kind: NoiseKind,
    pub cpus: Vec<usize>,
    pub interval_s: f64,
    pub elapsed_s: f64,
    /// Processes started by this noise that are still running.
    pub processes_running: usize,
    pub flood: Option<FloodStats>,
    pub per_cpu: Vec<CpuShare>,
}

/// Running interference. Dropping it tears everything down.
pub struct NoiseGuard {
    spec: NoiseSpec,
    cpus: Vec<usize>,
    procs: Vec<proc::Managed>,
    flood: Option<flood::Flood>,
    workdir: Option<PathBuf>,
    started: Instant,
    last: Instant,
    last_cpu: stats::CpuSnapshot,
    first_cpu: stats::CpuSnapshot,
    torn_down: bool,
}

pub struct Noise;

impl Noise {
    /// Starts the interference described by `spec`; on error nothing is left running.
    pub fn start(spec: NoiseSpec) -> Result<NoiseGuard, NoiseError> {
        let online = stats::online_cpus();
        let cpus = if spec.cpus.is_empty() { online.clone() } else { spec.cpus.clone() };
        if let Some(bad) = cpus.iter().find(|c| !online.contains(c)) {
            return Err(NoiseError::Invalid(format!("CPU {bad} is not online (online: {online:?})")));
        }
        let workdir = std::env::temp_dir().join(format!("rtslice-noise-{}-{}", std::process::id(), proc::next_seq()));
        std::fs::create_dir_all(&workdir).map_err(|e| NoiseError::Io(format!("cannot create {}: {e}", workdir.display())))?;
        let mut guard = NoiseGuard {
            spec: spec.clone(),
            cpus: cpus.clone(),
            procs: Vec::new(),
            flood: None,
            workdir: Some(workdir.clone()),
            started: Instant::now(),
            last: Instant::now(),
            last_cpu: stats::CpuSnapshot::take(),
            first_cpu: stats::CpuSnapshot::default(),
            torn_down: false,
        };
        // Any failure below drops `guard`, which tears down what was already started.
        match spec.kind {
            NoiseKind::User => {
                proc::require("stress-ng", "stress-ng")?;
                for &c in &cpus {
                    // Study A, exactly: stress-ng -d 1 --hdd-bytes 200M -m 1 --vm-bytes 1G
                    // --iomix 1 --iomix-bytes 100M --mq 0, here pinned to one CPU per set.
                    let args = [
                        "-d", "1", "--hdd-bytes", "200M", "-m", "1", "--vm-bytes", "1G", "--iomix", "1", "--iomix-bytes",
                        "100M", "--mq", "0", "--taskset", &c.to_string(), "--temp-path", workdir.to_str().unwrap_or("/tmp"),
                    ];
                    guard.procs.push(proc::Managed::spawn(&format!("stress-ng (user, CPU {c})"), "stress-ng", &args, &workdir, None)?);
                }
            }
            NoiseKind::Cache => {
                proc::require("stress-ng", "stress-ng")?;
                for &c in &cpus {
                    let args = ["--cache", "1", "--stream", "1", "--taskset", &c.to_string(), "--temp-path", workdir.to_str().unwrap_or("/tmp")];
                    guard.procs.push(proc::Managed::spawn(&format!("stress-ng (cache, CPU {c})"), "stress-ng", &args, &workdir, None)?);
                }
            }
            NoiseKind::Rt => {
                proc::require("rt-app", "rt-app")?;
                let file = workdir.join("rt-app.json");
                let json = rt_app_json(&spec.rt, &cpus, &workdir)?;
                std::fs::write(&file, json).map_err(|e| NoiseError::Io(format!("cannot write {}: {e}", file.display())))?;
                guard.procs.push(proc::Managed::spawn("rt-app", "rt-app", &[file.to_str().unwrap_or("")], &workdir, None)?);
            }
            NoiseKind::Kernel => {
                proc::require("ip", "iproute2")?;
                proc::require("socat", "socat")?;
                proc::require("taskset", "util-linux")?;
                let f = flood::Flood::start(&spec.flood, &cpus, &online, &workdir)?;
                guard.flood = Some(f);
            }
        }
        // Tools that refuse their arguments exit at once: catch that here, not in the report.
        std::thread::sleep(Duration::from_millis(300));
        guard.check()?;
        guard.last = Instant::now();
        guard.last_cpu = stats::CpuSnapshot::take();
        guard.first_cpu = guard.last_cpu.clone();
        guard.started = Instant::now();
        if let Some(f) = &mut guard.flood {
            f.reset_rates();
        }
        Ok(guard)
    }
}

fn rt_app_json(rt: &RtSpec, cpus: &[usize], workdir: &std::path::Path) -> Result<String, NoiseError> {
    if rt.tasks == 0 || rt.tasks > 64 {
        return Err(NoiseError::Invalid(format!("{} rt-app tasks: use 1..=64", rt.tasks)));
    }
    if rt.runtime.is_zero() || rt.runtime > rt.period {
        return Err(NoiseError::Invalid(format!("runtime {:?} must be above 0 and at most the period {:?}", rt.runtime, rt.period)));
    }
    if matches!(rt.policy, RtPolicy::Fifo | RtPolicy::Rr) && !(1..=99).contains(&rt.priority) {
        return Err(NoiseError::Invalid(format!("priority {} is outside 1..=99", rt.priority)));
    }
    let run_us = rt.runtime.as_micros() as u64;
    let period_us = rt.period.as_micros() as u64;
    let mut tasks = serde_json::Map::new();
    for i in 0..rt.tasks {
        let mut t = serde_json::json!({
            "policy": rt.policy.rt_app_name(),
            "cpus": cpus,
            "loop": -1,
            // `runtime` busy-loops for the wall time given; `run` would need rt-app's start-up
            // calibration, which takes seconds on a busy machine and drifts with it.
            "runtime": run_us,
            "timer": { "ref": format!("tick{i}"), "period": period_us },
        });
        match rt.policy {
            RtPolicy::Fifo | RtPolicy::Rr => t["priority"] = rt.priority.into(),
            RtPolicy::Deadline => {
                // SCHED_DEADLINE: the reservation is the task's own (runtime, period); a little
                // headroom over the work so the runtime is not throttled by its own overhead.
                t["dl-runtime"] = (run_us + run_us / 10).min(period_us).into();
                t["dl-period"] = period_us.into();
                t["dl-deadline"] = period_us.into();
            }
            RtPolicy::Other => {}
        }
        tasks.insert(format!("rtsn_rt{i}"), t);
    }
    let doc = serde_json::json!({
        "tasks": tasks,
        "global": {
            "duration": -1,
            // An explicit ns-per-loop skips calibration (only `run` events would use it).
            "calibration": 100,
            "default_policy": "SCHED_OTHER",
            "lock_pages": false,
            "logdir": workdir,
            "log_basename": "rt-app",
        }
    });
    serde_json::to_string_pretty(&doc).map_err(|e| NoiseError::Io(e.to_string()))
}

impl NoiseGuard {
    pub fn spec(&self) -> &NoiseSpec {
        &self.spec
    }

    /// PIDs of the processes this noise started (for tracing or cgroup placement).
    pub fn pids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.procs.iter().map(|p| p.pid()).collect();
        if let Some(f) = &self.flood {
            v.extend(f.pids());
        }
        v
    }

    /// Fails if a process of this noise has exited (the interference would silently be gone).
    pub fn check(&mut self) -> Result<(), NoiseError> {
        for p in &mut self.procs {
            p.check()?;
        }
        if let Some(f) = &mut self.flood {
            f.check()?;
        }
        Ok(())
    }

    /// Statistics since the previous call (or the start).
    pub fn report(&mut self) -> NoiseReport {
        let now = Instant::now();
        let cpu = stats::CpuSnapshot::take();
        let per_cpu = cpu.shares_since(&self.last_cpu);
        let interval = now.duration_since(self.last).as_secs_f64();
        let flood = self.flood.as_mut().map(|f| f.stats(interval));
        self.last = now;
        self.last_cpu = cpu;
        let running = self.procs.iter_mut().map(|p| p.running()).filter(|&r| r).count() + self.flood.as_mut().map(|f| f.running()).unwrap_or(0);
        NoiseReport {
            kind: self.spec.kind,
            cpus: self.cpus.clone(),
            interval_s: interval,
            elapsed_s: self.started.elapsed().as_secs_f64(),
            processes_running: running,
            flood,
            per_cpu,
        }
    }

    /// Statistics over the whole run so far (since start, not since the last `report()`).
    pub fn summary(&mut self) -> NoiseReport {
        let cpu = stats::CpuSnapshot::take();
        let per_cpu = cpu.shares_since(&self.first_cpu);
        let elapsed = self.started.elapsed().as_secs_f64();
        let flood = self.flood.as_mut().map(|f| f.totals(elapsed));
        let running = self.procs.iter_mut().map(|p| p.running()).filter(|&r| r).count() + self.flood.as_mut().map(|f| f.running()).unwrap_or(0);
        NoiseReport { kind: self.spec.kind, cpus: self.cpus.clone(), interval_s: elapsed, elapsed_s: elapsed, processes_running: running, flood, per_cpu }
    }

    /// Tears everything down and returns the statistics of the last interval.
    pub fn stop(mut self) -> Result<NoiseReport, NoiseError> {
        let r = self.report();
        self.teardown()?;
        Ok(r)
    }

    fn teardown(&mut self) -> Result<(), NoiseError> {
        if self.torn_down {
            return Ok(());
        }
        self.torn_down = true;
        let mut first_err = None;
        for p in &mut self.procs {
            p.kill();
        }
        if let Some(mut f) = self.flood.take() {
            if let Err(e) = f.teardown() {
                first_err.get_or_insert(e);
            }
        }
        if let Some(dir) = self.workdir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for NoiseGuard {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            eprintln!("rtslice-noise: teardown: {e}");
        }
    }
}
