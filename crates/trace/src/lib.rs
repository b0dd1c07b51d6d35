//! rtslice-trace: per-thread scheduling latency (eBPF), context switches, migrations, CPU use, IRQ and
//! softirq load, hardware counters, RAPL and resctrl — for a process, a thread set or a cgroup.
//!
//! ```no_run
//! use rtslice_trace::{Options, Target, TraceSession};
//! let session = TraceSession::start(Target::Pids(vec![std::process::id()]), Options::default())?;
//! std::thread::sleep(std::time::Duration::from_secs(1));
//! let live = session.snapshot(); // cumulative since start
//! let report = session.finish(); // serde::Serialize; report.render_table() for humans
//! # Ok::<(), rtslice_trace::TraceError>(())
//! ```
//!
//! For a long-running service, [`ContinuousTrace`] keeps the program loaded and follows a set of
//! cgroups that changes while it runs.
//!
//! Latency comes from a CO-RE BPF program (src/bpf/rtlat.bpf.c) when it can be loaded; otherwise,
//! unless [`Mode::Bpf`] was asked for, from /proc schedstat totals, labelled [`Source::Schedstat`].

mod bpf;
mod continuous;
mod demand;
pub mod hist;
pub mod host;
pub mod perf;
mod procfs;
pub mod report;

#[allow(clippy::all, dead_code, unused_imports, non_camel_case_types, non_snake_case)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/rtlat.skel.rs"));
}

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rtslice_sys::time::{monotonic_ns, thread_cpu_ns};

pub use continuous::{ContinuousTrace, LatencyCounts, ThreadCounts, TracerHealth};
pub use demand::{DemandProfiler, DemandSamples};
pub use host::{HostReport, Measurement};
pub use perf::HwReport;
pub use procfs::{schedstat, SchedStat};
pub use report::{LatencyStats, Lost, Overhead, Source, ThreadReport, TraceReport};

use bpf::{BpfTracer, Filter};
use host::HostSample;
use perf::HwCounters;

/// Where the kernel header used to build the BPF program came from (build.rs).
pub const VMLINUX_ORIGIN: &str = env!("RTSLICE_VMLINUX_ORIGIN");

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("process {0} does not exist (check the PID, or that the workload is running)")]
    NoSuchProcess(u32),
    #[error("thread {0} does not exist")]
    NoSuchThread(u32),
    #[error("cgroup {path}: {reason}")]
    Cgroup { path: PathBuf, reason: String },
    #[error("the BPF tracer could not start: {0}. It needs root (or CAP_BPF and CAP_PERFMON) and a kernel with BTF (/sys/kernel/btf/vmlinux)")]
    Bpf(String),
    #[error("nothing to trace: {0}")]
    Empty(String),
}

/// What to trace. The kernel filter looks at the task each event is about (the woken task, the task
/// switched in or out), so threads the target creates later are traced too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// All threads of these processes (any thread id is resolved to its process).
    Pids(Vec<u32>),
    /// Exactly these threads.
    Tids(Vec<u32>),
    /// All threads in this cgroup directory (v1 hierarchy or v2) and its descendants.
    Cgroup(PathBuf),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |v: &[u32]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",");
        match self {
            Target::Pids(p) => write!(f, "pid {}", list(p)),
            Target::Tids(t) => write!(f, "tid {}", list(t)),
            Target::Cgroup(c) => write!(f, "cgroup {}", c.display()),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// BPF, else the schedstat fallback with the reason in `source_detail`.
    #[default]
    Auto,
    /// BPF or an error.
    Bpf,
    /// Only /proc schedstat (no privileges needed).
    Schedstat,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub mode: Mode,
    /// IRQs to attribute separately, e.g. the NIC queues a spec steers: unanchored regexes over the
    /// /proc/interrupts description (as the spec's IRQ rules), or IRQ numbers.
    pub irq_names: Vec<String>,
    /// Open perf hardware counters on the target's threads.
    pub hw_counters: bool,
    /// Attach the raw_tp programs even where tp_btf works (tp_btf is cheaper; raw_tp is the
    /// fallback for kernels whose tp_btf attach fails).
    pub raw_tp: bool,
    /// The target's own resctrl group (a workload with a cache allocation): LLC occupancy and
    /// memory traffic are read from its `mon_data`. `None`: the default group's (`/sys/fs/resctrl`),
    /// which counts every task not in another group.
    pub resctrl_group: Option<std::path::PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options { mode: Mode::Auto, irq_names: Vec::new(), hw_counters: true, raw_tp: false, resctrl_group: None }
    }
}

enum Backend {
    Bpf(BpfTracer),
    Schedstat { baseline: HashMap<u32, SchedStat> },
}

/// A running trace. Not tied to a thread: it may be moved and read from anywhere.
pub struct TraceSession {
    target: Target,
    backend: Backend,
    source_detail: String,
    started: Instant,
    host_start: HostSample,
    hw: HwCounters,
    irq_names: Vec<String>,
    /// Whose LLC occupancy and memory traffic are read (see `Options::resctrl_group`).
    resctrl_group: std::path::PathBuf,
    /// CPU time of start() (loading and verifying the program) and of all reads since.
    load_cpu_ns: u64,
    read_cpu_ns: std::cell::Cell<u64>,
}

// SAFETY: the Cell is only updated through &self by the one thread that holds the session at a time
// (TraceSession is not Sync); the BPF tracer is Send.
unsafe impl Send for TraceSession {}

/// The v1 controllers the BPF cgroup filter can follow (CG_* in rtlat.h), in order of preference.
const V1_CONTROLLERS: [(&str, u32); 5] = [("cpuset", 1), ("cpu", 2), ("cpuacct", 3), ("memory", 4), ("pids", 5)];

/// (cgroup id, CG_* hierarchy code) of a cgroup directory.
fn cgroup_filter(path: &Path) -> Result<(u64, u32), TraceError> {
    let err = |reason: String| TraceError::Cgroup { path: path.to_path_buf(), reason };
    let canon = path.canonicalize().map_err(|e| err(format!("{e} (give the cgroup's directory under /sys/fs/cgroup)")))?;
    let meta = std::fs::metadata(&canon).map_err(|e| err(e.to_string()))?;
    if !meta.is_dir() {
        return Err(err("not a directory".into()));
    }
    let mounts = rtslice_sys::procfs::cgroup_mounts().map_err(|e| err(e.to_string()))?;
    // The longest mount point containing the path decides the hierarchy.
    let mount = mounts
        .iter()
        .filter(|m| canon.starts_with(&m.path))
        .max_by_key(|m| m.path.as_os_str().len())
        .ok_or_else(|| err("not inside a mounted cgroup hierarchy".into()))?;
    let ctrl = if mount.unified {
        0
    } else {
        V1_CONTROLLERS
            .iter()
            .find(|(name, _)| mount.has_controller(name))
            .map(|(_, code)| *code)
            .ok_or_else(|| err(format!("cgroup v1 hierarchy with controllers {:?}: the filter follows cpuset, cpu, cpuacct, memory or pids hierarchies; use the workload's directory in one of those", mount.options)))?
    };
    // kernfs inode numbers are the cgroup ids the kernel reports as kn->id.
    Ok((meta.ino(), ctrl))
}

/// Threads currently in the target: (tgid, tid).
fn target_threads(target: &Target) -> Vec<(u32, u32)> {
    match target {
        Target::Pids(pids) => pids.iter().flat_map(|&p| procfs::threads_of(procfs::tgid_of(p).unwrap_or(p))).collect(),
        Target::Tids(tids) => tids.iter().filter_map(|&t| Some((procfs::tgid_of(t)?, t))).collect(),
        Target::Cgroup(path) => procfs::threads_in_cgroup(path),
    }
}

/// The kernel filter selecting `target`'s threads.
fn filter_of(target: &Target) -> Result<Filter, TraceError> {
    Ok(match target {
        Target::Pids(pids) => {
            if pids.is_empty() {
                return Err(TraceError::Empty("no PID given".into()));
            }
            let tgids = pids.iter().map(|&p| procfs::tgid_of(p).ok_or(TraceError::NoSuchProcess(p))).collect::<Result<Vec<_>, _>>()?;
            Filter::Pids { tgids, tids: Vec::new() }
        }
        Target::Tids(tids) => {
            if tids.is_empty() {
                return Err(TraceError::Empty("no thread id given".into()));
            }
            if let Some(&t) = tids.iter().find(|&&t| procfs::tgid_of(t).is_none()) {
                return Err(TraceError::NoSuchThread(t));
            }
            Filter::Pids { tgids: Vec::new(), tids: tids.clone() }
        }
        Target::Cgroup(path) => {
            let (id, ctrl) = cgroup_filter(path)?;
            Filter::Cgroup { id, ctrl }
        }
    })
}

impl TraceSession {
    pub fn start(target: Target, options: Options) -> Result<TraceSession, TraceError> {
        let cpu0 = thread_cpu_ns();
        let filter = filter_of(&target)?;
        let (backend, source_detail) = match options.mode {
            Mode::Schedstat => (Self::schedstat_backend(&target), "schedstat requested".to_string()),
            Mode::Bpf => {
                let t = BpfTracer::start(&filter, options.raw_tp)?;
                let d = t.attach_kind.to_string();
                (Backend::Bpf(t), d)
            }
            Mode::Auto => match BpfTracer::start(&filter, options.raw_tp) {
                Ok(t) => {
                    let d = t.attach_kind.to_string();
                    (Backend::Bpf(t), d)
                }
                Err(e) => (Self::schedstat_backend(&target), format!("fallback without BPF: {e}")),
            },
        };
        let tids: Vec<u32> = target_threads(&target).into_iter().map(|(_, t)| t).collect();
        let resctrl_group = options.resctrl_group.clone().unwrap_or_else(|| rtslice_sys::resctrl::DEFAULT_ROOT.into());
        let hw = if options.hw_counters {
            HwCounters::open(&tids)
        } else {
            HwCounters::disabled()
        };
        let s = TraceSession {
            target,
            backend,
            source_detail,
            started: Instant::now(),
            host_start: HostSample::take(&resctrl_group),
            hw,
            irq_names: options.irq_names,
            resctrl_group,
            load_cpu_ns: 0,
            read_cpu_ns: std::cell::Cell::new(0),
        };
        Ok(TraceSession { load_cpu_ns: thread_cpu_ns() - cpu0, ..s })
    }

    fn schedstat_backend(target: &Target) -> Backend {
        let baseline = target_threads(target).into_iter().filter_map(|(g, t)| Some((t, procfs::schedstat(g, t)?))).collect();
        Backend::Schedstat { baseline }
    }

    pub fn source(&self) -> Source {
        match self.backend {
            Backend::Bpf(_) => Source::Bpf,
            Backend::Schedstat { .. } => Source::Schedstat,
        }
    }

    /// Adds processes to a PID-filtered BPF session (e.g. workloads launched after it started).
    pub fn add_pids(&self, pids: &[u32]) -> Result<(), TraceError> {
        if let Backend::Bpf(t) = &self.backend {
            let tgids = pids.iter().map(|&p| procfs::tgid_of(p).ok_or(TraceError::NoSuchProcess(p))).collect::<Result<Vec<_>, _>>()?;
            t.add_tgids(&tgids)?;
        }
        Ok(())
    }

    /// Removes processes from a PID-filtered BPF session (e.g. workloads that were removed); their
    /// threads' totals stay in the report.
    pub fn remove_pids(&self, pids: &[u32]) -> Result<(), TraceError> {
        if let Backend::Bpf(t) = &self.backend {
            t.remove_tgids(pids)?;
        }
        Ok(())
    }

    /// Everything measured since the session started.
    pub fn snapshot(&self) -> TraceReport {
        let cpu0 = thread_cpu_ns();
        let secs = self.started.elapsed().as_secs_f64();
        let host_now = HostSample::take(&self.resctrl_group);
        let (threads, lost) = match &self.backend {
            Backend::Bpf(t) => self.bpf_threads(t, secs),
            Backend::Schedstat { baseline } => (self.schedstat_threads(baseline, secs), Lost::default()),
        };
        let mut report = TraceReport {
            source: self.source(),
            source_detail: self.source_detail.clone(),
            target: self.target.to_string(),
            duration_s: secs,
            fine_histogram: report::FineHistogramInfo {
                unit: "ns",
                exact_below_ns: 16,
                buckets_per_octave: 1 << hist::FINE_SUB_BITS,
                max_relative_error: hist::FINE_RELATIVE_ERROR,
            },
            lost,
            threads,
            host: host::host_report(&self.host_start, &host_now, secs, &self.irq_names),
            hw_counters: self.hw.report(),
            overhead: Overhead::default(),
        };
        self.read_cpu_ns.set(self.read_cpu_ns.get() + thread_cpu_ns() - cpu0);
        report.overhead = self.overhead(secs);
        report
    }

    /// Stops tracing (detaches the programs) and returns the final report.
    pub fn finish(self) -> TraceReport {
        let report = self.snapshot();
        drop(self);
        report
    }

    fn overhead(&self, secs: f64) -> Overhead {
        let reads = self.read_cpu_ns.get();
        let mut o = Overhead {
            load_cpu_ns: self.load_cpu_ns,
            read_cpu_ns: reads,
            read_cpu_pct: 100.0 * reads as f64 / 1e9 / secs.max(1e-9),
            ..Default::default()
        };
        if let Backend::Bpf(t) = &self.backend {
            let stats = t.run_stats();
            o.bpf_runs = Some(stats.runs);
            if let Some(ns) = stats.run_ns {
                o.bpf_run_time_ns = Some(ns);
                o.bpf_sampled_runs = Some(stats.sampled_runs);
                o.bpf_ns_per_run = (stats.runs > 0).then(|| ns as f64 / stats.runs as f64);
                o.bpf_cpu_pct = Some(100.0 * ns as f64 / 1e9 / secs.max(1e-9));
            }
        }
        o
    }

    fn bpf_threads(&self, t: &BpfTracer, secs: f64) -> (Vec<ThreadReport>, Lost) {
        let now = monotonic_ns();
        let threads = t
            .read()
            .into_iter()
            .map(|raw| {
                let st = &raw.stats;
                let bpf_comm: String = st.comm.iter().take_while(|&&c| c != 0).map(|&c| c as u8 as char).collect();
                let name = procfs::comm(st.tgid, raw.tid).unwrap_or(bpf_comm);
                // A thread on CPU right now has its current slice counted up to now (in wall time:
                // its charge is known only at the switch-out).
                let running = if st.oncpu_since != 0 { now.saturating_sub(st.oncpu_since) } else { 0 };
                let oncpu_ns = st.oncpu_ns + running;
                let lat = |h: &skel::types::hist| {
                    LatencyStats::from_parts(h.events, h.sum_ns, h.max_ns, &h.log2_us, hist::sparse(&h.fine))
                };
                let switches = st.nvcsw + st.nivcsw;
                ThreadReport {
                    tid: raw.tid,
                    tgid: st.tgid,
                    policy: procfs::policy(raw.tid),
                    name,
                    threads: 1,
                    wakeup: lat(&st.h[0]),
                    preempt: lat(&st.h[1]),
                    switches,
                    voluntary_switches: st.nvcsw,
                    involuntary_switches: st.nivcsw,
                    migrations: st.migrations,
                    slices: st.slices,
                    oncpu_ns,
                    cpu_pct: 100.0 * oncpu_ns as f64 / 1e9 / secs.max(1e-9),
                    switches_per_ms: switches as f64 / (secs.max(1e-9) * 1000.0),
                    schedstat_mean_wait_us: None,
                }
            })
            .collect();
        (threads, Lost { threads: t.lost_threads(), program_runs: t.run_stats().missed, unstored_events: t.unstored_events() })
    }

    fn schedstat_threads(&self, baseline: &HashMap<u32, SchedStat>, secs: f64) -> Vec<ThreadReport> {
        target_threads(&self.target)
            .into_iter()
            .filter_map(|(tgid, tid)| {
                let now = procfs::schedstat(tgid, tid)?;
                // Threads born after the start count from zero.
                let b = baseline.get(&tid).copied().unwrap_or_default();
                let d = |a: u64, b: u64| a.saturating_sub(b);
                let slices = d(now.slices, b.slices);
                let wait = d(now.run_delay_ns, b.run_delay_ns);
                let vol = d(now.voluntary_switches, b.voluntary_switches);
                let invol = d(now.involuntary_switches, b.involuntary_switches);
                let oncpu = d(now.oncpu_ns, b.oncpu_ns);
                Some(ThreadReport {
                    tid,
                    tgid,
                    name: procfs::comm(tgid, tid).unwrap_or_default(),
                    policy: procfs::policy(tid),
                    threads: 1,
                    wakeup: LatencyStats { events: slices, total_wait_ns: wait, ..Default::default() },
                    preempt: LatencyStats::default(),
                    switches: vol + invol,
                    voluntary_switches: vol,
                    involuntary_switches: invol,
                    migrations: d(now.migrations, b.migrations),
                    slices,
                    oncpu_ns: oncpu,
                    cpu_pct: 100.0 * oncpu as f64 / 1e9 / secs.max(1e-9),
                    switches_per_ms: (vol + invol) as f64 / (secs.max(1e-9) * 1000.0),
                    schedstat_mean_wait_us: (slices > 0).then(|| wait as f64 / slices as f64 / 1000.0),
                })
            })
            .collect()
    }
}
