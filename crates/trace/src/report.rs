//! The report: per-thread latency in the studies' format, host signals, counters and overhead;
//! rendered as a table, JSON (serde) or CSV (the raw histograms).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::hist::{self, FineBucket};
use crate::host::{HostReport, Measurement};
use crate::perf::HwReport;

/// Where the latency numbers come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The BPF program: exact per-event histograms.
    Bpf,
    /// /proc/<pid>/task/<tid>/schedstat: totals only (mean wait per slice, no histograms).
    Schedstat,
}

/// One latency kind of one thread (or of a pool of threads merged by name).
#[derive(Clone, Debug, Default, Serialize)]
pub struct LatencyStats {
    /// Latency events seen (wake-ups for `threads[]`, preemptions for `threads[].preempt`).
    pub events: u64,
    /// Counts per studies' log2 bucket: [0–1, 2–3, 4–7, 8–15, …] µs (trailing empty buckets trimmed).
    pub log2_us: Vec<u64>,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub p999_us: Option<f64>,
    pub max_us: Option<f64>,
    pub mean_us: Option<f64>,
    pub total_wait_ns: u64,
    /// The non-empty log-linear buckets (see `fine_histogram` at the top level).
    pub fine_ns: Vec<FineBucket>,
    #[serde(skip)]
    pub(crate) max_ns: u64,
}

impl LatencyStats {
    pub(crate) fn from_parts(events: u64, sum_ns: u64, max_ns: u64, log2: &[u64], fine: Vec<FineBucket>) -> Self {
        let mut s = LatencyStats {
            events,
            log2_us: log2.to_vec(),
            total_wait_ns: sum_ns,
            fine_ns: fine,
            max_ns,
            ..Default::default()
        };
        s.finish();
        s
    }

    fn finish(&mut self) {
        while self.log2_us.len() > 5 && self.log2_us.last() == Some(&0) {
            self.log2_us.pop();
        }
        let q = |q| hist::quantile_ns(&self.fine_ns, q, self.max_ns).map(|ns| ns as f64 / 1000.0);
        self.p50_us = q(0.5);
        self.p99_us = q(0.99);
        self.p999_us = q(0.999);
        self.max_us = (self.events > 0).then(|| self.max_ns as f64 / 1000.0);
        self.mean_us = (self.events > 0).then(|| self.total_wait_ns as f64 / self.events as f64 / 1000.0);
    }

    fn merge(&mut self, o: &LatencyStats) {
        self.events += o.events;
        self.total_wait_ns += o.total_wait_ns;
        self.max_ns = self.max_ns.max(o.max_ns);
        if self.log2_us.len() < o.log2_us.len() {
            self.log2_us.resize(o.log2_us.len(), 0);
        }
        for (a, b) in self.log2_us.iter_mut().zip(&o.log2_us) {
            *a += b;
        }
        hist::merge_sparse(&mut self.fine_ns, &o.fine_ns);
        self.finish();
    }

    /// Share (%) of events in the studies' columns 0–1, 2–3, 4–7, 8–15, ≥16 µs.
    pub fn study_shares(&self) -> [f64; 5] {
        let n = self.events.max(1) as f64;
        let b = |i: usize| self.log2_us.get(i).copied().unwrap_or(0) as f64;
        let rest: f64 = self.log2_us.iter().skip(4).sum::<u64>() as f64;
        [100.0 * b(0) / n, 100.0 * b(1) / n, 100.0 * b(2) / n, 100.0 * b(3) / n, 100.0 * rest / n]
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ThreadReport {
    pub tid: u32,
    pub tgid: u32,
    pub name: String,
    pub policy: String,
    /// 1, or how many threads were merged (`--by name`); tid is then the lowest.
    pub threads: u32,
    /// Wake-up → on-CPU latency (sched_wakeup/_new → sched_switch): `events`, `log2_us`, `p99_us`, …
    #[serde(flatten)]
    pub wakeup: LatencyStats,
    /// Preemption-return latency: switched out while runnable → on CPU again.
    pub preempt: LatencyStats,
    /// voluntary + involuntary
    pub switches: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub migrations: u64,
    /// Times switched in (schedstat's pcount).
    pub slices: u64,
    /// CPU time charged (the task clock, as schedstat's: what the host took from the vCPU is left
    /// out), plus the slice running when read, in wall time so far.
    pub oncpu_ns: u64,
    pub cpu_pct: f64,
    pub switches_per_ms: f64,
    /// schedstat source only: run-queue wait per slice (µs).
    pub schedstat_mean_wait_us: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct FineHistogramInfo {
    pub unit: &'static str,
    pub exact_below_ns: u64,
    pub buckets_per_octave: u32,
    /// Percentiles are the upper edge of their bucket: never below the true value, at most this
    /// fraction above it (+1 ns). `max_us` is exact.
    pub max_relative_error: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Lost {
    /// Threads whose statistics could not be stored (stats map full, 8192 threads): their events
    /// are missing.
    pub threads: u64,
    /// Program runs the kernel skipped (bpf recursion protection: a tracepoint hit while the same
    /// program ran on that CPU, e.g. a wake-up from an interrupt during a wake-up).
    pub program_runs: u64,
    /// Events of new threads whose entry could not be made at that moment (the map's allocator
    /// or a bucket lock busy on that CPU); each such thread's next event made its entry.
    pub unstored_events: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Overhead {
    /// Time spent in the BPF programs: `bpf_runs` at the mean run time the kernel's bpf_stats
    /// measured in sample windows (enabled with BPF_ENABLE_STATS, the same switch as
    /// kernel.bpf_stats_enabled, for 100 ms of every 2 s: always on, they cost every run of every BPF
    /// program on the machine two clock reads). None when they could not be enabled.
    pub bpf_run_time_ns: Option<u64>,
    /// Runs of the programs (every switch and wake-up on the machine), counted by the programs.
    pub bpf_runs: Option<u64>,
    /// Runs measured in the sample windows: the sample behind `bpf_ns_per_run`.
    pub bpf_sampled_runs: Option<u64>,
    pub bpf_ns_per_run: Option<f64>,
    /// BPF run time as % of one CPU over the session.
    pub bpf_cpu_pct: Option<f64>,
    /// CPU time of starting the session (loading, verifying and attaching the program; opening
    /// counters), on the calling thread.
    pub load_cpu_ns: u64,
    /// CPU time of all snapshots so far (reading maps and /proc), and as % of one CPU over the session.
    pub read_cpu_ns: u64,
    pub read_cpu_pct: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct TraceReport {
    pub source: Source,
    /// "tp_btf", "raw_tp", or why BPF was not used.
    pub source_detail: String,
    pub target: String,
    pub duration_s: f64,
    pub fine_histogram: FineHistogramInfo,
    pub lost: Lost,
    pub threads: Vec<ThreadReport>,
    pub host: HostReport,
    /// Sums over the target's threads, or "unsupported: <reason>".
    pub hw_counters: Measurement<HwReport>,
    pub overhead: Overhead,
}

impl TraceReport {
    /// Merges threads with the same name (thread pools) into one row each.
    pub fn merged_by_name(&self) -> TraceReport {
        let mut groups: BTreeMap<String, ThreadReport> = BTreeMap::new();
        for t in &self.threads {
            match groups.get_mut(&t.name) {
                None => {
                    groups.insert(t.name.clone(), t.clone());
                }
                Some(g) => {
                    g.tid = g.tid.min(t.tid);
                    g.threads += t.threads;
                    if g.policy != t.policy {
                        g.policy = "mixed".into();
                    }
                    g.wakeup.merge(&t.wakeup);
                    g.preempt.merge(&t.preempt);
                    g.switches += t.switches;
                    g.voluntary_switches += t.voluntary_switches;
                    g.involuntary_switches += t.involuntary_switches;
                    g.migrations += t.migrations;
                    g.slices += t.slices;
                    g.oncpu_ns += t.oncpu_ns;
                    g.cpu_pct += t.cpu_pct;
                    g.switches_per_ms += t.switches_per_ms;
                    g.schedstat_mean_wait_us = match (self.source, g.slices) {
                        (Source::Schedstat, s) if s > 0 => Some(g.wakeup.total_wait_ns as f64 / s as f64 / 1000.0),
                        _ => None,
                    };
                }
            }
        }
        let mut r = self.clone();
        r.threads = groups.into_values().collect();
        r.threads.sort_by_key(|t| t.tid);
        r
    }

    /// The studies' table: one row per thread, shares of wake-up events per log2 bucket, percentiles,
    /// switches/ms and CPU %, then preemption-return latency, the CPU/IRQ summary and the overhead.
    pub fn render_table(&self) -> String {
        let mut s = String::new();
        let f = |v: Option<f64>| v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into());
        let _ = writeln!(
            s,
            "source: {} ({}), target {}, {:.1} s",
            match self.source {
                Source::Bpf => "bpf",
                Source::Schedstat => "schedstat",
            },
            self.source_detail,
            self.target,
            self.duration_s
        );
        if self.source == Source::Schedstat {
            let _ = writeln!(s, "schedstat fallback: no histograms; `wait/slice` is the mean run-queue wait per timeslice");
            let _ = writeln!(
                s,
                "{:<16} {:>7} {:<16} {:>8} {:>12} {:>8} {:>6}",
                "thread", "tid", "policy", "slices", "wait/slice µs", "sw/ms", "CPU%"
            );
            for t in &self.threads {
                let _ = writeln!(
                    s,
                    "{:<16} {:>7} {:<16} {:>8} {:>12} {:>8.2} {:>6.1}",
                    trunc(&t.name, 16),
                    t.tid,
                    trunc(&t.policy, 16),
                    t.slices,
                    f(t.schedstat_mean_wait_us),
                    t.switches_per_ms,
                    t.cpu_pct
                );
            }
        } else {
            let _ = writeln!(s, "wake-up → on-CPU latency: % of events per bucket (µs); percentiles in µs (fine histogram, ≤ +6.25 %)");
            let _ = writeln!(
                s,
                "{:<16} {:>7} {:<16} {:>8} {:>6} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8} {:>8} {:>9} {:>7} {:>6}",
                "thread", "tid", "policy", "events", "0-1", "2-3", "4-7", "8-15", ">=16", "p50", "p99", "p99.9", "max", "sw/ms", "CPU%"
            );
            for t in &self.threads {
                let sh = t.wakeup.study_shares();
                let _ = writeln!(
                    s,
                    "{:<16} {:>7} {:<16} {:>8} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>8} {:>8} {:>8} {:>9} {:>7.2} {:>6.1}",
                    trunc(&t.name, 16),
                    t.tid,
                    trunc(&t.policy, 16),
                    t.wakeup.events,
                    sh[0],
                    sh[1],
                    sh[2],
                    sh[3],
                    sh[4],
                    f(t.wakeup.p50_us),
                    f(t.wakeup.p99_us),
                    f(t.wakeup.p999_us),
                    f(t.wakeup.max_us),
                    t.switches_per_ms,
                    t.cpu_pct
                );
            }
            let _ = writeln!(s, "\npreemption-return latency (switched out runnable → on CPU again), µs");
            let _ = writeln!(
                s,
                "{:<16} {:>7} {:>8} {:>8} {:>8} {:>9} {:>9} {:>6} {:>6}",
                "thread", "tid", "events", "p50", "p99", "max", "migr", "vol", "invol"
            );
            for t in &self.threads {
                let _ = writeln!(
                    s,
                    "{:<16} {:>7} {:>8} {:>8} {:>8} {:>9} {:>9} {:>6} {:>6}",
                    trunc(&t.name, 16),
                    t.tid,
                    t.preempt.events,
                    f(t.preempt.p50_us),
                    f(t.preempt.p99_us),
                    f(t.preempt.max_us),
                    t.migrations,
                    t.voluntary_switches,
                    t.involuntary_switches
                );
            }
            if self.lost.threads + self.lost.program_runs + self.lost.unstored_events > 0 {
                let _ = writeln!(
                    s,
                    "LOST: {} threads (BPF map full), {} skipped program runs, {} events of new threads not stored at once",
                    self.lost.threads, self.lost.program_runs, self.lost.unstored_events
                );
            }
        }
        let _ = writeln!(s, "\n{:<5} {:>6} {:>6} {:>10} {:>12}", "CPU", "busy%", "idle%", "IRQ/s", "softirq/s");
        for c in &self.host.cpus {
            let _ = writeln!(s, "{:<5} {:>6.1} {:>6.1} {:>10.0} {:>12.0}", c.cpu, c.busy_pct, c.idle_pct, c.irqs_per_s, c.softirqs_per_s);
        }
        let irqs: Vec<String> = self
            .host
            .irqs
            .iter()
            .take(6)
            .map(|i| format!("{}{} {} {:.0}/s", if i.named { "*" } else { "" }, i.irq, trunc(&i.desc, 28), i.per_s))
            .collect();
        let _ = writeln!(s, "IRQs: {}", irqs.join(", "));
        let soft: Vec<String> =
            self.host.softirqs.iter().filter(|x| x.total > 0).map(|x| format!("{} {:.0}/s", x.name, x.per_s)).collect();
        let _ = writeln!(s, "softirqs: {}", soft.join(", "));
        match &self.hw_counters {
            Measurement::Value(h) => {
                let _ = writeln!(
                    s,
                    "HW counters: IPC {}, cache MPKI {}, LLC MPKI {}",
                    f(h.ipc),
                    f(h.cache_mpki),
                    f(h.llc_mpki)
                );
            }
            Measurement::Missing(r) => {
                let _ = writeln!(s, "HW counters: {r}");
            }
        }
        let rapl = match &self.host.rapl {
            Measurement::Value(v) => v.iter().map(|(n, w)| format!("{n} {w:.1} W")).collect::<Vec<_>>().join(", "),
            Measurement::Missing(r) => r.clone(),
        };
        let _ = writeln!(s, "RAPL: {rapl}");
        let resctrl = match &self.host.resctrl {
            Measurement::Value(r) => format!(
                "LLC occupancy {:.1} MiB, memory bandwidth {:.1} MB/s (group {})",
                r.llc_occupancy_bytes as f64 / 1048576.0,
                r.mbm_total_bytes_per_s / 1e6,
                r.group
            ),
            Measurement::Missing(r) => r.clone(),
        };
        let _ = writeln!(s, "resctrl: {resctrl}");
        let o = &self.overhead;
        let _ = writeln!(
            s,
            "tracer overhead: BPF {} runs, {} ns/run (sampled over {} runs), {} % of one CPU; loading {:.1} ms CPU; reading {:.1} ms CPU ({:.2} %)",
            o.bpf_runs.map(|x| x.to_string()).unwrap_or_else(|| "-".into()),
            f(o.bpf_ns_per_run),
            o.bpf_sampled_runs.map(|x| x.to_string()).unwrap_or_else(|| "-".into()),
            o.bpf_cpu_pct.map(|x| format!("{x:.3}")).unwrap_or_else(|| "-".into()),
            o.load_cpu_ns as f64 / 1e6,
            o.read_cpu_ns as f64 / 1e6,
            o.read_cpu_pct
        );
        s
    }

    /// The raw histograms, one row per non-empty bucket:
    /// `tid,name,kind,histogram,lo,hi,count` with kind wakeup|preempt, histogram log2_us|fine_ns and
    /// [lo, hi) in that histogram's unit.
    pub fn to_csv(&self) -> String {
        let mut s = String::from("tid,name,kind,histogram,lo,hi,count\n");
        for t in &self.threads {
            let name = t.name.replace([',', '"', '\n'], "_");
            for (kind, l) in [("wakeup", &t.wakeup), ("preempt", &t.preempt)] {
                for (i, &c) in l.log2_us.iter().enumerate().filter(|(_, c)| **c > 0) {
                    let lo = if i == 0 { 0 } else { 1u64 << i };
                    let _ = writeln!(s, "{},{},{},log2_us,{},{},{}", t.tid, name, kind, lo, 1u64 << (i + 1), c);
                }
                for b in &l.fine_ns {
                    let _ = writeln!(s, "{},{},{},fine_ns,{},{},{}", t.tid, name, kind, b.lo_ns, b.hi_ns, b.count);
                }
            }
        }
        s
    }
}

fn trunc(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}
