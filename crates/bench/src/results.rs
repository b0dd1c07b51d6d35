//! What one run measured, and the raw files of a results directory (`results.json`, `runs.csv`,
//! `threads.csv`, `samples.csv`). The report is rendered only from these records, so a report can be
//! re-rendered later from `results.json` (`rtslice bench --render DIR`).

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::experiment::{Experiment, Role};
use crate::matrix::Cell;
use crate::strategy::Strategy;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RunStatus {
    Ok,
    /// The run failed; the error says at which step and why.
    Failed { error: String },
    /// The strategy cannot run on this host (e.g. isolcpus without boot isolation).
    Skipped { reason: String },
    /// The layout did not fit: the planner's admission, or the kernel's at apply (refused before
    /// anything was touched), said no — an answer about this host's capacity, not a failure.
    Refused { reason: String },
    /// Stopped by Ctrl-C; what was measured until then is kept.
    Interrupted,
}

impl RunStatus {
    pub fn label(&self) -> &'static str {
        match self {
            RunStatus::Ok => "ok",
            RunStatus::Failed { .. } => "failed",
            RunStatus::Skipped { .. } => "skipped",
            RunStatus::Refused { .. } => "did not fit",
            RunStatus::Interrupted => "interrupted",
        }
    }
}

/// The emulator's summary (`rtslice emulate --json`), the fields the report uses plus the raw object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct EmuSummary {
    pub ttis: u64,
    pub deadline_misses: u64,
    pub nacks: u64,
    pub throughput_bps: f64,
    pub proc_p99_us: f64,
    /// Per-second delivered throughput when the emulator reports it (for median/IQR within a run).
    #[serde(default)]
    pub throughput_series_bps: Vec<f64>,
    #[serde(default)]
    pub raw: serde_json::Value,
}

impl EmuSummary {
    pub fn miss_ratio(&self) -> Option<f64> {
        (self.ttis > 0).then(|| self.deadline_misses as f64 / self.ttis as f64)
    }
}

/// Scheduling latency of one thread, from `rtslice trace --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ThreadLatency {
    pub name: String,
    pub tid: i64,
    pub events: u64,
    /// Counts per log2 µs bucket: 0 = 0–1 µs, 1 = 2–3, 2 = 4–7, 3 = 8–15, …
    pub log2_us: Vec<u64>,
    pub p99_us: Option<f64>,
    pub switches: Option<u64>,
}

/// Per-instance measurements (one process tree: a workload or one of its replicas).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceResult {
    pub name: String,
    pub workload: String,
    pub role: Role,
    pub pid: Option<u32>,
    pub exit_code: Option<i32>,
    pub emu: Option<EmuSummary>,
    /// Wake-up latency per thread in the measurement window.
    pub threads: Vec<ThreadLatency>,
    /// `bpf` or `schedstat` (from the tracer), or why there is no trace.
    pub trace_source: Option<String>,
    /// Round-trip / response times in µs (ping RTTs, load generator responses).
    pub latency_samples_us: Vec<f64>,
    /// stress-ng bogo-ops per second (best-effort neighbours).
    pub bogo_ops_per_s: Option<f64>,
    /// CPU time used in the window, in CPUs (1.0 = one core busy), sampled every `cpu_interval`.
    pub cpu_samples: Vec<f64>,
    /// Voluntary + involuntary context switches of all its threads during the window, per ms.
    pub switches_per_ms: Option<f64>,
    /// Extra output (the workload's JSON, noise report) kept for readers of results.json.
    #[serde(default)]
    pub extra: serde_json::Value,
    /// Last lines of stderr when something went wrong.
    #[serde(default)]
    pub stderr_tail: String,
}

impl InstanceResult {
    pub fn new(name: &str, workload: &str, role: Role) -> InstanceResult {
        InstanceResult {
            name: name.into(),
            workload: workload.into(),
            role,
            pid: None,
            exit_code: None,
            emu: None,
            threads: vec![],
            trace_source: None,
            latency_samples_us: vec![],
            bogo_ops_per_s: None,
            cpu_samples: vec![],
            switches_per_ms: None,
            extra: serde_json::Value::Null,
            stderr_tail: String::new(),
        }
    }
}

/// Hardware counters: IPC/MPKI where the machine has a PMU, otherwise why not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Counters {
    pub available: bool,
    pub reason: String,
    pub ipc: Option<f64>,
    pub mpki: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub seq: usize,
    pub cell: String,
    pub block: String,
    pub variant: String,
    pub scenario: String,
    pub strategy: Strategy,
    pub repetition: u32,
    pub status: RunStatus,
    /// Unix time (s) the run started.
    pub started_unix: f64,
    pub wall_s: f64,
    pub instances: Vec<InstanceResult>,
    /// Whole-host busy CPUs sampled in the window (1.0 = one core).
    pub host_cpu_samples: Vec<f64>,
    /// Which reservation mechanism / what `rtslice status` reported, when a plan was applied.
    pub applied: Option<serde_json::Value>,
    pub counters: Counters,
    /// What the interference generator reported at its end (`rtslice noise --json`).
    #[serde(default)]
    pub interference: Option<serde_json::Value>,
    /// Steps and warnings worth keeping (e.g. a reset that needed a retry).
    pub notes: Vec<String>,
    /// What the hypervisor took from each CPU during the run (see [`Stolen`]).
    #[serde(default)]
    pub stolen: Vec<Stolen>,
}

/// Time the hypervisor ran something else while one of the run's CPUs had work: the guest's
/// paravirtual steal time, from the run's start (before its workloads start) to the end of its
/// window, in /proc/stat's ticks (so to within 1/USER_HZ, 10 ms). A vBS on that CPU lost that time
/// whatever its priority or reservation — its clocks ran on while it did not — and the scheduler
/// does not charge it to a SCHED_DEADLINE budget (paravirtual steal accounting), so it is a cause
/// of misses outside every mechanism the bench compares. 0 on bare metal, and in a guest whose
/// hypervisor does not report steal.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stolen {
    pub cpu: u32,
    pub ms: f64,
}

/// The most the hypervisor took from any one CPU in a run, in ms (`None` when not recorded).
pub fn most_stolen_ms(r: &RunRecord) -> Option<f64> {
    r.stolen.iter().map(|s| s.ms).reduce(f64::max)
}

impl RunRecord {
    pub fn new(seq: usize, cell: &Cell, repetition: u32) -> RunRecord {
        RunRecord {
            seq,
            cell: cell.id.clone(),
            block: cell.block_name.clone(),
            variant: cell.variant_name.clone(),
            scenario: cell.scenario_name.clone(),
            strategy: cell.strategy,
            repetition,
            status: RunStatus::Ok,
            started_unix: 0.0,
            wall_s: 0.0,
            instances: vec![],
            host_cpu_samples: vec![],
            applied: None,
            counters: Counters::default(),
            interference: None,
            notes: vec![],
            stolen: vec![],
        }
    }

    pub fn measured(&self) -> impl Iterator<Item = &InstanceResult> {
        self.instances.iter().filter(|i| i.role == Role::Measured)
    }
}

/// Machine description printed with every report: results mean little without it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Machine {
    pub hostname: String,
    pub kernel: String,
    pub cpu_model: String,
    pub cpus: Vec<u32>,
    pub isolated: Vec<u32>,
    pub memory_gib: f64,
    pub preemption: String,
    pub cgroup: String,
    pub cmdline: String,
}

/// Everything a results directory holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub experiment: Experiment,
    pub machine: Machine,
    pub cells: Vec<Cell>,
    pub runs: Vec<RunRecord>,
    /// True when Ctrl-C stopped the runner before every run was done.
    pub interrupted: bool,
    pub started_unix: f64,
    pub finished_unix: f64,
    pub rtslice_version: String,
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn opt(v: Option<f64>) -> String {
    v.map(|x| format!("{x}")).unwrap_or_default()
}

impl Results {
    pub fn write_raw(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join("results.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?)?;
        std::fs::rename(&tmp, dir.join("results.json"))?;

        let mut runs = std::fs::File::create(dir.join("runs.csv"))?;
        writeln!(
            runs,
            "seq,cell,block,variant,scenario,strategy,repetition,status,error,instance,role,ttis,deadline_misses,nacks,throughput_bps,proc_p99_us,bogo_ops_per_s,cpu_mean,switches_per_ms,latency_samples,latency_median_us,latency_p99_us,most_stolen_ms"
        )?;
        for r in &self.runs {
            let error = match &r.status {
                RunStatus::Failed { error } => error.clone(),
                RunStatus::Skipped { reason } | RunStatus::Refused { reason } => reason.clone(),
                _ => String::new(),
            };
            let base = format!(
                "{},{},{},{},{},{},{},{},{}",
                r.seq,
                csv_field(&r.cell),
                csv_field(&r.block),
                csv_field(&r.variant),
                csv_field(&r.scenario),
                r.strategy,
                r.repetition,
                r.status.label(),
                csv_field(&error)
            );
            let stolen = opt(most_stolen_ms(r));
            if r.instances.is_empty() {
                writeln!(runs, "{base},,,,,,,,,,,,,,{stolen}")?;
            }
            for i in &r.instances {
                let e = i.emu.as_ref();
                writeln!(
                    runs,
                    "{base},{},{},{},{},{},{},{},{},{},{},{},{},{},{stolen}",
                    csv_field(&i.name),
                    if i.role == Role::Measured { "measured" } else { "neighbour" },
                    e.map(|e| e.ttis.to_string()).unwrap_or_default(),
                    e.map(|e| e.deadline_misses.to_string()).unwrap_or_default(),
                    e.map(|e| e.nacks.to_string()).unwrap_or_default(),
                    opt(e.map(|e| e.throughput_bps)),
                    opt(e.map(|e| e.proc_p99_us)),
                    opt(i.bogo_ops_per_s),
                    opt(crate::stats::mean(&i.cpu_samples)),
                    opt(i.switches_per_ms),
                    i.latency_samples_us.len(),
                    opt(crate::stats::median(&i.latency_samples_us)),
                    opt(crate::stats::percentile(&i.latency_samples_us, 99.0)),
                )?;
            }
        }

        let mut th = std::fs::File::create(dir.join("threads.csv"))?;
        writeln!(th, "seq,cell,instance,thread,tid,events,p99_us,switches,log2_us")?;
        for r in &self.runs {
            for i in &r.instances {
                for t in &i.threads {
                    let hist: Vec<String> = t.log2_us.iter().map(|c| c.to_string()).collect();
                    writeln!(
                        th,
                        "{},{},{},{},{},{},{},{},{}",
                        r.seq,
                        csv_field(&r.cell),
                        csv_field(&i.name),
                        csv_field(&t.name),
                        t.tid,
                        t.events,
                        opt(t.p99_us),
                        t.switches.map(|s| s.to_string()).unwrap_or_default(),
                        hist.join(" ")
                    )?;
                }
            }
        }

        let mut sm = std::fs::File::create(dir.join("samples.csv"))?;
        writeln!(sm, "seq,cell,instance,kind,value")?;
        for r in &self.runs {
            for i in &r.instances {
                for v in &i.latency_samples_us {
                    writeln!(sm, "{},{},{},latency_us,{v}", r.seq, csv_field(&r.cell), csv_field(&i.name))?;
                }
                for v in &i.cpu_samples {
                    writeln!(sm, "{},{},{},cpu,{v}", r.seq, csv_field(&r.cell), csv_field(&i.name))?;
                }
            }
            for v in &r.host_cpu_samples {
                writeln!(sm, "{},{},host,cpu,{v}", r.seq, csv_field(&r.cell))?;
            }
        }
        Ok(())
    }

    pub fn load(dir: &Path) -> std::io::Result<Results> {
        let text = std::fs::read(dir.join("results.json"))?;
        serde_json::from_slice(&text).map_err(std::io::Error::other)
    }
}
