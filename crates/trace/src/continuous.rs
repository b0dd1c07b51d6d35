//! Continuous tracing: the BPF program stays loaded for the life of a node service, the set of
//! traced cgroups changes while it runs (workloads deployed and removed), and each read returns the
//! per-thread totals since each thread was first seen, without stopping or reloading anything.
//!
//! Threads that exited are returned once more, marked `exited`, and their entries are then removed
//! from the kernel map, so a long-running node does not fill the map with dead threads; whoever
//! keeps totals (the metrics collector) folds them into its own per-workload sums.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rtslice_sys::time::{monotonic_ns, thread_cpu_ns};
use serde::Serialize;

use crate::bpf::{BpfTracer, Filter};
use crate::hist::{self, FineBucket};
use crate::{cgroup_filter, procfs, TraceError};

/// One latency kind of one thread: totals and the fine histogram (sparse, sorted by `lo_ns`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LatencyCounts {
    pub events: u64,
    pub sum_ns: u64,
    pub max_ns: u64,
    pub fine: Vec<FineBucket>,
}

impl LatencyCounts {
    /// Latencies of at most `bound_ns` (a cumulative bucket count). Exact when `bound_ns + 1` is a
    /// fine bucket edge (see [`hist::fine_bounds`]); otherwise the bucket holding the bound counts
    /// only if it lies entirely below it.
    pub fn count_at_most(&self, bound_ns: u64) -> u64 {
        self.fine.iter().take_while(|b| b.hi_ns <= bound_ns.saturating_add(1)).map(|b| b.count).sum()
    }
}

/// Everything the program counted for one thread since it was first seen.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ThreadCounts {
    pub tid: u32,
    pub tgid: u32,
    /// The thread's name now (/proc), or the last one the program saw if it exited.
    pub name: String,
    /// Id of the followed cgroup the thread was last seen in ([`ContinuousTrace::cgroup_id`]).
    pub cgroup_id: u64,
    /// The thread has exited: this is its last report and its entry is gone from the kernel map.
    pub exited: bool,
    pub wakeup: LatencyCounts,
    pub preempt: LatencyCounts,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub migrations: u64,
    /// CPU time charged (task clock), plus the slice running when read, in wall time so far.
    pub oncpu_ns: u64,
    /// SCHED_DEADLINE: times it was switched out because its runtime ran out (throttled).
    pub dl_throttles: u64,
}

/// How the tracer itself is doing (for the collector-health metrics).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TracerHealth {
    /// "tp_btf" or "raw_tp".
    pub attach_kind: &'static str,
    /// Program runs (every sched_switch and wake-up on the machine), counted by the programs.
    pub program_runs: Option<u64>,
    /// CPU time spent in the programs: the runs at the mean run time the kernel's BPF run-time
    /// statistics measured in sample windows (on 100 ms of every 2 s: always on, they would slow
    /// every BPF program on the machine). None before the first window ends or when they could not
    /// be switched on; never decreasing.
    pub program_run_ns: Option<u64>,
    /// Runs the kernel skipped (recursion): events lost.
    pub missed_runs: u64,
    /// Threads whose statistics could not be stored (map full): their events are lost.
    pub lost_threads: u64,
    /// Events of new threads whose entry could not be made at that moment: lost, the thread's next
    /// event made its entry.
    pub unstored_events: u64,
    /// CPU time of loading the program and of all reads since.
    pub load_cpu_ns: u64,
    pub read_cpu_ns: u64,
    pub reads: u64,
    pub cgroups: usize,
    pub uptime_s: f64,
}

impl TracerHealth {
    /// Scheduler events lost to the statistics: runs the kernel skipped and events of new threads
    /// not stored at once (`rtslice_tracer_lost_events`).
    pub fn lost_events(&self) -> u64 {
        self.missed_runs + self.unstored_events
    }
}

/// A BPF tracer that stays loaded and follows a changing set of cgroups of one hierarchy.
pub struct ContinuousTrace {
    bpf: BpfTracer,
    ctrl: u32,
    hierarchy: PathBuf,
    cgroups: BTreeMap<PathBuf, u64>,
    started: Instant,
    load_cpu_ns: u64,
    read_cpu_ns: u64,
    reads: u64,
}

impl ContinuousTrace {
    /// Loads the program with an empty cgroup set. `hierarchy` is any directory of the cgroup
    /// hierarchy whose membership decides what is traced (v1: e.g. /sys/fs/cgroup/cpuset, where
    /// rtslice puts workloads; v2: the unified mount); every cgroup added later must belong to it.
    pub fn start(hierarchy: &Path, raw_tp: bool) -> Result<ContinuousTrace, TraceError> {
        let cpu0 = thread_cpu_ns();
        let (_, ctrl) = cgroup_filter(hierarchy)?;
        let bpf = BpfTracer::start(&Filter::CgroupSet { ctrl }, raw_tp)?;
        Ok(ContinuousTrace {
            bpf,
            ctrl,
            hierarchy: hierarchy.to_path_buf(),
            cgroups: BTreeMap::new(),
            started: Instant::now(),
            load_cpu_ns: thread_cpu_ns() - cpu0,
            read_cpu_ns: 0,
            reads: 0,
        })
    }

    /// Starts tracing the threads of a cgroup directory and its descendants; returns its id (the
    /// `cgroup_id` of its threads in [`ContinuousTrace::read`]). Adding a followed cgroup again is a no-op.
    pub fn add_cgroup(&mut self, path: &Path) -> Result<u64, TraceError> {
        let (id, ctrl) = cgroup_filter(path)?;
        if ctrl != self.ctrl {
            return Err(TraceError::Cgroup {
                path: path.to_path_buf(),
                reason: format!(
                    "is in another cgroup hierarchy than the one this tracer follows ({}); give the workload's directory in that hierarchy",
                    self.hierarchy.display()
                ),
            });
        }
        self.bpf.add_cgroup(id)?;
        self.cgroups.insert(path.to_path_buf(), id);
        Ok(id)
    }

    /// Stops tracing a cgroup. Its threads' totals are still returned by reads until they exit.
    pub fn remove_cgroup(&mut self, path: &Path) -> Result<(), TraceError> {
        let Some(id) = self.cgroups.remove(path) else { return Ok(()) };
        self.bpf.remove_cgroup(id)
    }

    /// The followed cgroups and their ids.
    pub fn cgroups(&self) -> &BTreeMap<PathBuf, u64> {
        &self.cgroups
    }

    /// The id of a followed cgroup.
    pub fn cgroup_id(&self, path: &Path) -> Option<u64> {
        self.cgroups.get(path).copied()
    }

    /// Totals of every thread seen so far, sorted by tid. Threads that exited since the last read
    /// come with `exited: true` and are then forgotten.
    pub fn read(&mut self) -> Vec<ThreadCounts> {
        let cpu0 = thread_cpu_ns();
        let now = monotonic_ns();
        let mut out = Vec::new();
        for raw in self.bpf.read() {
            let st = &raw.stats;
            let bpf_comm: String = st.comm.iter().take_while(|&&c| c != 0).map(|&c| c as u8 as char).collect();
            // The tid alone could be reused by a new thread of another process: the tgid must match too.
            let alive = procfs::tgid_of(raw.tid) == Some(st.tgid);
            let name = if alive { procfs::comm(st.tgid, raw.tid).unwrap_or(bpf_comm) } else { bpf_comm };
            let running = if alive && st.oncpu_since != 0 { now.saturating_sub(st.oncpu_since) } else { 0 };
            let lat = |h: &crate::skel::types::hist| LatencyCounts {
                events: h.events,
                sum_ns: h.sum_ns,
                max_ns: h.max_ns,
                fine: hist::sparse(&h.fine),
            };
            out.push(ThreadCounts {
                tid: raw.tid,
                tgid: st.tgid,
                name,
                cgroup_id: st.cgroup,
                exited: !alive,
                wakeup: lat(&st.h[0]),
                preempt: lat(&st.h[1]),
                voluntary_switches: st.nvcsw,
                involuntary_switches: st.nivcsw,
                migrations: st.migrations,
                oncpu_ns: st.oncpu_ns + running,
                dl_throttles: st.dl_throttles,
            });
            if !alive {
                self.bpf.forget(raw.tid);
            }
        }
        self.reads += 1;
        self.read_cpu_ns += thread_cpu_ns() - cpu0;
        out
    }

    pub fn health(&self) -> TracerHealth {
        let stats = self.bpf.run_stats();
        TracerHealth {
            attach_kind: self.bpf.attach_kind,
            program_runs: Some(stats.runs),
            program_run_ns: stats.run_ns,
            missed_runs: stats.missed,
            lost_threads: self.bpf.lost_threads(),
            unstored_events: self.bpf.unstored_events(),
            load_cpu_ns: self.load_cpu_ns,
            read_cpu_ns: self.read_cpu_ns,
            reads: self.reads,
            cgroups: self.cgroups.len(),
            uptime_s: self.started.elapsed().as_secs_f64(),
        }
    }
}
