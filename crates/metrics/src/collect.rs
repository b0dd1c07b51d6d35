//! The collector: what a node's workloads are, the continuous tracer that follows their cgroups,
//! the reports they send, and one fresh reading of everything per scrape.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;
use rtslice_plan::{Mechanism, Reservation};
use rtslice_trace::{ContinuousTrace, TracerHealth};
use serde::{Deserialize, Serialize};

use crate::families::{latency_bounds_ns, Family, LatencyHist, Labels};
use crate::sli::SliReport;
use crate::MetricsError;

/// One workload as the caller (the node service, or `rtslice metrics serve` from the state
/// directory) knows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// The workload's name (label `workload`).
    pub name: String,
    /// The cgroup directory holding its threads, in the hierarchy the tracer follows (cgroup v1:
    /// the cpuset directory; v2: the workload's directory). All workloads of a node must be in the
    /// same hierarchy.
    pub cgroup: PathBuf,
    /// The directory with its CPU accounting and bandwidth files (v1: the cpu controller's
    /// directory; v2: the same as `cgroup`).
    pub cpu_cgroup: PathBuf,
    /// CPUs the workload runs on.
    pub cpus: Vec<u32>,
    /// Its real-time reservation on each of its CPUs, if it has one.
    pub reservation: Option<Reservation>,
    /// How the reservation is enforced.
    pub mechanism: Mechanism,
    /// Its own resctrl control group, when it has a cache allocation: LLC occupancy and memory
    /// traffic are read from the group's `mon_data` (what its threads use, not the host's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resctrl_group: Option<PathBuf>,
}

#[derive(Clone, Debug)]
pub struct Options {
    /// Run the continuous BPF tracer (latency histograms, switches, migrations, CPU time). Without
    /// it (or when it cannot load) those families are empty and `rtslice_tracer_up` is 0.
    pub trace: bool,
    /// Attach the raw_tp programs even where tp_btf works.
    pub raw_tp: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { trace: true, raw_tp: false }
    }
}

/// Per (workload, thread name): threads with the same name (a worker pool) are one series.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ThreadTotals {
    /// Live threads with this name (exited ones only add their counts).
    pub live: u64,
    pub wakeup: LatencyHist,
    pub preempt: LatencyHist,
    pub voluntary: u64,
    pub involuntary: u64,
    pub migrations: u64,
    pub oncpu_ns: u64,
    pub dl_throttles: u64,
}

impl ThreadTotals {
    fn empty(nbounds: usize) -> ThreadTotals {
        ThreadTotals { wakeup: LatencyHist::empty(nbounds), preempt: LatencyHist::empty(nbounds), ..Default::default() }
    }

    fn add(&mut self, o: &ThreadTotals) {
        self.live += o.live;
        self.wakeup.add(&o.wakeup);
        self.preempt.add(&o.preempt);
        self.voluntary += o.voluntary;
        self.involuntary += o.involuntary;
        self.migrations += o.migrations;
        self.oncpu_ns += o.oncpu_ns;
        self.dl_throttles += o.dl_throttles;
    }
}

/// A workload's reported SLI counters (the sum over its senders, exited ones included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliTotals {
    pub deadline_misses: Option<u64>,
    pub ttis: Option<u64>,
    pub throughput_bits: Option<u64>,
    pub nacks: Option<u64>,
}

impl SliTotals {
    fn add(&mut self, r: &SliReport) {
        let sum = |a: &mut Option<u64>, b: Option<u64>| {
            if let Some(b) = b {
                *a = Some(a.unwrap_or(0) + b);
            }
        };
        sum(&mut self.deadline_misses, r.deadline_misses);
        sum(&mut self.ttis, r.ttis);
        sum(&mut self.throughput_bits, r.throughput_bits);
        sum(&mut self.nacks, r.nacks);
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Health {
    pub collections: u64,
    pub collection_errors: u64,
    pub last_error: Option<String>,
    pub last_collection_s: f64,
    pub reports_accepted: u64,
    pub reports_invalid: u64,
    pub reports_unattributed: u64,
}

pub(crate) struct ReservationSample {
    pub workload: String,
    pub mechanism: Mechanism,
    pub reservation: Option<Reservation>,
    pub cpus: usize,
    pub used_s: Option<f64>,
    pub throttled: Option<u64>,
    pub throttled_s: Option<f64>,
}

pub(crate) struct CpuSample {
    pub cpu: u32,
    pub reserved: f64,
    pub irqs: u64,
    pub softirqs: Vec<(String, u64)>,
    /// Time the hypervisor ran something else while the CPU had work (/proc/stat steal), seconds.
    pub stolen_s: f64,
}

/// One reading of everything, encoded right after (or summarized by [`NodeMetrics::sample`]).
pub(crate) struct Snapshot {
    pub threads: BTreeMap<(String, String), ThreadTotals>,
    pub reservations: Vec<ReservationSample>,
    pub cpus: Vec<CpuSample>,
    /// Per workload with a resctrl group: (LLC occupancy bytes, memory traffic bytes so far).
    pub cache: Vec<(String, (u64, u64))>,
    pub sli: BTreeMap<String, SliTotals>,
    pub tracer: Option<TracerHealth>,
    pub health: Health,
    pub workloads: usize,
}

struct Inner {
    options: Options,
    bounds: Vec<u64>,
    tracer: Option<ContinuousTrace>,
    tracer_error: Option<String>,
    workloads: Vec<Workload>,
    /// Followed cgroup id → workload name.
    cgroup_ids: HashMap<u64, String>,
    /// Totals of exited threads, so every counter stays monotonic when threads come and go.
    retired: BTreeMap<(String, String), ThreadTotals>,
    /// The (workload, name) each live thread was last exported under, so its final counts are
    /// retired into the same series even if the kernel's copy of its name is older.
    series_of: HashMap<u32, (String, String)>,
    /// Latest report of each live sending process, per workload.
    sli_live: BTreeMap<String, BTreeMap<u32, SliReport>>,
    /// Last reports of senders that exited.
    sli_retired: BTreeMap<String, SliTotals>,
    /// Senders that exited recently, with their workload and the report retired for them: a sender's
    /// last datagram (sent just before it exits) may be read after it is gone from its cgroup, or
    /// even after a collection retired its previous report; its counters are cumulative, so what
    /// the late report adds is its difference to the retired one. Oldest first, bounded.
    sli_exited: std::collections::VecDeque<(u32, String, SliReport)>,
    health: Health,
}

/// The node's metrics: cheap to clone (shared state), `Send + Sync`. Register it in a registry with
/// [`NodeMetrics::registry`] (or `registry.register_collector(Box::new(metrics.clone()))`).
#[derive(Clone)]
pub struct NodeMetrics {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for NodeMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeMetrics").finish_non_exhaustive()
    }
}

impl NodeMetrics {
    /// No workloads yet; the tracer is loaded with the first workload (it needs to know their
    /// cgroup hierarchy).
    pub fn new(options: Options) -> NodeMetrics {
        let tracer_error = (!options.trace).then(|| "tracing disabled".to_string());
        NodeMetrics {
            inner: Arc::new(Mutex::new(Inner {
                options,
                bounds: latency_bounds_ns(),
                tracer: None,
                tracer_error,
                workloads: Vec::new(),
                cgroup_ids: HashMap::new(),
                retired: BTreeMap::new(),
                series_of: HashMap::new(),
                sli_live: BTreeMap::new(),
                sli_retired: BTreeMap::new(),
                sli_exited: std::collections::VecDeque::new(),
                health: Health::default(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent-enough counters: keep serving them.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A registry holding these metrics (collected on every encode).
    pub fn registry(&self) -> Registry {
        let mut r = Registry::default();
        r.register_collector(Box::new(self.clone()));
        r
    }

    /// Replaces the set of workloads: the tracer starts following new workloads' cgroups and stops
    /// following removed ones (without reloading); removed workloads' series disappear.
    pub fn set_workloads(&self, workloads: Vec<Workload>) -> Result<(), MetricsError> {
        let mut seen = std::collections::HashSet::new();
        for w in &workloads {
            if !seen.insert(w.name.as_str()) {
                return Err(MetricsError::Workload { workload: w.name.clone(), reason: "listed twice".into() });
            }
            if !w.cgroup.is_dir() {
                return Err(MetricsError::Workload {
                    workload: w.name.clone(),
                    reason: format!("its cgroup {} does not exist (was the workload removed?)", w.cgroup.display()),
                });
            }
        }
        let mut inner = self.lock();
        let inner = &mut *inner;
        if inner.tracer.is_none() && inner.options.trace {
            if let Some(first) = workloads.first() {
                match ContinuousTrace::start(&first.cgroup, inner.options.raw_tp) {
                    Ok(t) => {
                        inner.tracer = Some(t);
                        inner.tracer_error = None;
                    }
                    Err(e) => inner.tracer_error = Some(e.to_string()),
                }
            }
        }
        if let Some(tracer) = inner.tracer.as_mut() {
            let wanted: Vec<&Path> = workloads.iter().map(|w| w.cgroup.as_path()).collect();
            let followed: Vec<PathBuf> = tracer.cgroups().keys().cloned().collect();
            for old in followed.iter().filter(|p| !wanted.contains(&p.as_path())) {
                tracer.remove_cgroup(old)?;
            }
            inner.cgroup_ids.clear();
            for w in &workloads {
                let id = tracer
                    .add_cgroup(&w.cgroup)
                    .map_err(|e| MetricsError::Workload { workload: w.name.clone(), reason: e.to_string() })?;
                inner.cgroup_ids.insert(id, w.name.clone());
            }
        }
        let names: std::collections::HashSet<&str> = workloads.iter().map(|w| w.name.as_str()).collect();
        inner.retired.retain(|(w, _), _| names.contains(w.as_str()));
        inner.series_of.retain(|_, (w, _)| names.contains(w.as_str()));
        inner.sli_live.retain(|w, _| names.contains(w.as_str()));
        inner.sli_retired.retain(|w, _| names.contains(w.as_str()));
        inner.workloads = workloads;
        Ok(())
    }

    pub fn workloads(&self) -> Vec<Workload> {
        self.lock().workloads.clone()
    }

    /// Why the tracer is not running, if it is not.
    pub fn tracer_error(&self) -> Option<String> {
        self.lock().tracer_error.clone()
    }

    /// One datagram from the report channel: `pid` is the sender as the kernel identified it.
    pub fn record_report(&self, pid: Option<u32>, bytes: &[u8]) {
        let mut inner = self.lock();
        let report = match SliReport::parse(bytes) {
            Ok(r) => r,
            Err(_) => {
                inner.health.reports_invalid += 1;
                return;
            }
        };
        let Some(pid) = pid else {
            inner.health.reports_unattributed += 1;
            return;
        };
        let owner = inner.workloads.iter().find(|w| rtslice_sys::procfs::threads_in_cgroup(&w.cgroup).iter().any(|&(tgid, _)| tgid == pid));
        if let Some(name) = owner.map(|w| w.name.clone()) {
            inner.sli_live.entry(name).or_default().insert(pid, report);
            inner.health.reports_accepted += 1;
            return;
        }
        // Not in any workload's cgroup (any more): a sender that has just exited, attributed as
        // before. A pid is only taken this way when no workload holds it now, so a reused pid inside
        // a workload is never misattributed.
        if let Some(senders) = inner.sli_live.values_mut().find(|senders| senders.contains_key(&pid)) {
            senders.insert(pid, report);
            inner.health.reports_accepted += 1;
            return;
        }
        let inner = &mut *inner;
        if let Some((_, workload, retired)) = inner.sli_exited.iter_mut().find(|(p, _, _)| *p == pid) {
            inner.sli_retired.entry(workload.clone()).or_default().add(&report.since(retired));
            *retired = report;
            inner.health.reports_accepted += 1;
            return;
        }
        inner.health.reports_unattributed += 1;
    }

    pub(crate) fn collect(&self) -> Snapshot {
        let started = Instant::now();
        let mut inner = self.lock();
        let inner = &mut *inner;
        let nb = inner.bounds.len();
        let mut errors = Vec::new();

        // Threads: the retired totals plus every live thread's counts now.
        let mut threads = inner.retired.clone();
        for t in threads.values_mut() {
            t.live = 0;
        }
        let mut traced_cpu_ns: HashMap<String, u64> = HashMap::new();
        let mut traced_dl_throttles: HashMap<String, u64> = HashMap::new();
        if let Some(tracer) = inner.tracer.as_mut() {
            for t in tracer.read() {
                // Threads of a removed workload are still read until they exit: not exported.
                let Some(workload) = inner.cgroup_ids.get(&t.cgroup_id) else { continue };
                let mut totals = ThreadTotals::empty(nb);
                totals.live = u64::from(!t.exited);
                totals.wakeup.add_fine(&inner.bounds, t.wakeup.events, t.wakeup.sum_ns, &t.wakeup.fine);
                totals.preempt.add_fine(&inner.bounds, t.preempt.events, t.preempt.sum_ns, &t.preempt.fine);
                totals.voluntary = t.voluntary_switches;
                totals.involuntary = t.involuntary_switches;
                totals.migrations = t.migrations;
                totals.oncpu_ns = t.oncpu_ns;
                totals.dl_throttles = t.dl_throttles;
                let key = if t.exited {
                    let key = inner.series_of.remove(&t.tid).unwrap_or_else(|| (workload.clone(), t.name.clone()));
                    inner.retired.entry(key.clone()).or_insert_with(|| ThreadTotals::empty(nb)).add(&totals);
                    key
                } else {
                    // A renamed thread's earlier counts move with it to its new name's series.
                    let key = (workload.clone(), t.name.clone());
                    inner.series_of.insert(t.tid, key.clone());
                    key
                };
                *traced_cpu_ns.entry(workload.clone()).or_default() += t.oncpu_ns;
                *traced_dl_throttles.entry(workload.clone()).or_default() += t.dl_throttles;
                threads.entry(key).or_insert_with(|| ThreadTotals::empty(nb)).add(&totals);
            }
        }
        // Exited threads' CPU time counts for their workload's budget use as well.
        for ((w, _), t) in &inner.retired {
            *traced_cpu_ns.entry(w.clone()).or_default() += t.oncpu_ns;
            *traced_dl_throttles.entry(w.clone()).or_default() += t.dl_throttles;
        }

        let reservations = inner
            .workloads
            .iter()
            .map(|w| {
                let (used_s, throttled, throttled_s) = cgroup_cpu(&w.cpu_cgroup, &mut errors);
                ReservationSample {
                    workload: w.name.clone(),
                    mechanism: w.mechanism,
                    reservation: w.reservation,
                    cpus: w.cpus.len(),
                    // cgroup accounting (v2 cpu.stat, v1 cpuacct where co-mounted with cpu), else the
                    // tracer's, else the live threads' schedstat (v1 with cpuacct mounted apart and
                    // the tracer off: CPU time of threads that exited is then not counted).
                    used_s: used_s
                        .or_else(|| traced_cpu_ns.get(&w.name).map(|&ns| ns as f64 / 1e9))
                        .or_else(|| live_threads_cpu_s(&w.cgroup)),
                    // SCHED_DEADLINE budgets are per thread, outside cpu.stat (whose count is CFS's, 0
                    // here): the tracer counts their throttles, and where it saw none of the workload's
                    // threads nothing counts them. Never a 0 nobody measured: the closed loop reads
                    // 0 throttles as "the misses were not the budget's".
                    throttled: if w.mechanism == Mechanism::Deadline { traced_dl_throttles.get(&w.name).copied() } else { throttled },
                    throttled_s,
                }
            })
            .collect();

        let cpus = cpu_samples(&inner.workloads, &mut errors);
        let cache = inner
            .workloads
            .iter()
            .filter_map(|w| {
                let group = w.resctrl_group.as_ref()?;
                let read = rtslice_sys::resctrl::monitor(group);
                if read.is_none() {
                    errors.push(format!("{}: no mon_data counters (resctrl without monitoring, or the group is gone)", group.display()));
                }
                Some((w.name.clone(), read?))
            })
            .collect();

        // Reports of senders that exited become part of the workload's retired totals.
        for (w, senders) in inner.sli_live.iter_mut() {
            senders.retain(|&pid, r| {
                let alive = rtslice_sys::procfs::process_exists(pid);
                if !alive {
                    inner.sli_retired.entry(w.clone()).or_default().add(r);
                    inner.sli_exited.push_back((pid, w.clone(), r.clone()));
                }
                alive
            });
        }
        // A late last report arrives within moments of the exit; a thousand exits is far longer.
        while inner.sli_exited.len() > 1024 {
            inner.sli_exited.pop_front();
        }
        let mut sli = inner.sli_retired.clone();
        for (w, senders) in &inner.sli_live {
            let t = sli.entry(w.clone()).or_default();
            for r in senders.values() {
                t.add(r);
            }
        }

        inner.health.collections += 1;
        inner.health.collection_errors += errors.len() as u64;
        if let Some(e) = errors.pop() {
            inner.health.last_error = Some(e);
        }
        inner.health.last_collection_s = started.elapsed().as_secs_f64();
        Snapshot {
            threads,
            reservations,
            cpus,
            cache,
            sli,
            tracer: inner.tracer.as_ref().map(|t| t.health()),
            health: inner.health.clone(),
            workloads: inner.workloads.len(),
        }
    }
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `key value` lines (cpu.stat).
fn stat_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

/// (CPU seconds used, throttled periods, seconds throttled) of a cgroup's CPU files: cgroup v1
/// cpuacct.usage (when cpuacct is mounted with cpu) and cpu.stat's nr_throttled/throttled_time
/// (ns); cgroup v2 cpu.stat's usage_usec/nr_throttled/throttled_usec.
/// CPU time of the threads in a cgroup now (their schedstat); `None` when it holds none.
fn live_threads_cpu_s(dir: &Path) -> Option<f64> {
    let threads = rtslice_sys::procfs::threads_in_cgroup(dir);
    if threads.is_empty() {
        return None;
    }
    let ns: u64 = threads.iter().filter_map(|&(pid, tid)| rtslice_sys::procfs::schedstat(pid, tid)).map(|s| s.oncpu_ns).sum();
    Some(ns as f64 / 1e9)
}

fn cgroup_cpu(dir: &Path, errors: &mut Vec<String>) -> (Option<f64>, Option<u64>, Option<f64>) {
    let stat = match std::fs::read_to_string(dir.join("cpu.stat")) {
        Ok(s) => s,
        Err(e) => {
            errors.push(format!("{}: {e}", dir.join("cpu.stat").display()));
            String::new()
        }
    };
    let used = read_u64(&dir.join("cpuacct.usage"))
        .map(|ns| ns as f64 / 1e9)
        .or_else(|| stat_value(&stat, "usage_usec").map(|us| us as f64 / 1e6));
    let throttled = stat_value(&stat, "nr_throttled");
    let throttled_s =
        stat_value(&stat, "throttled_time").map(|ns| ns as f64 / 1e9).or_else(|| stat_value(&stat, "throttled_usec").map(|us| us as f64 / 1e6));
    (used, throttled, throttled_s)
}

fn cpu_samples(workloads: &[Workload], errors: &mut Vec<String>) -> Vec<CpuSample> {
    let online = match rtslice_sys::procfs::online_cpus() {
        Ok(c) => c,
        Err(e) => {
            errors.push(e.to_string());
            Vec::new()
        }
    };
    let irqs = rtslice_sys::procfs::interrupts();
    let softirqs = rtslice_sys::procfs::softirqs();
    let stolen = rtslice_sys::procfs::stolen_s();
    online
        .into_iter()
        .map(|cpu| {
            let i = cpu as usize;
            let reserved = workloads
                .iter()
                .filter(|w| w.cpus.contains(&cpu))
                .filter_map(|w| w.reservation)
                .map(|r| r.runtime.as_secs_f64() / r.period.as_secs_f64().max(1e-12))
                // Not `sum()`: an empty f64 sum is -0.0, which would be exported as "-0.0".
                .fold(0.0, |a, b| a + b);
            CpuSample {
                cpu,
                reserved,
                irqs: irqs.iter().filter_map(|l| l.per_cpu.get(i)).sum(),
                softirqs: softirqs.iter().map(|(kind, per_cpu)| (kind.to_lowercase(), per_cpu.get(i).copied().unwrap_or(0))).collect(),
                stolen_s: stolen.iter().find(|(c, _)| *c == cpu).map_or(0.0, |(_, s)| *s),
            }
        })
        .collect()
}

fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs.iter().map(|&(k, v)| (k, v.to_string())).collect()
}

impl Collector for NodeMetrics {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = self.collect();
        let bounds = latency_bounds_ns();
        let thread_labels = |(w, t): &(String, String)| labels(&[("workload", w), ("thread", t)]);

        Family {
            name: "rtslice_wakeup_latency_seconds",
            help: "Time from a thread's wake-up until it ran, per workload and thread name (BPF; buckets count latencies below each bound)",
        }
        .histograms(&mut e, &bounds, s.threads.iter().map(|(k, t)| (thread_labels(k), &t.wakeup)))?;
        Family {
            name: "rtslice_preemption_latency_seconds",
            help: "Time from a thread's preemption (switched out while runnable) until it ran again, per workload and thread name (BPF)",
        }
        .histograms(&mut e, &bounds, s.threads.iter().map(|(k, t)| (thread_labels(k), &t.preempt)))?;
        Family { name: "rtslice_context_switches", help: "Context switches away from the thread: voluntary (it blocked) or involuntary (preempted)" }
            .counters(
                &mut e,
                s.threads.iter().flat_map(|((w, t), v)| {
                    [
                        (labels(&[("workload", w), ("thread", t), ("kind", "voluntary")]), v.voluntary),
                        (labels(&[("workload", w), ("thread", t), ("kind", "involuntary")]), v.involuntary),
                    ]
                }),
            )?;
        Family { name: "rtslice_migrations", help: "Times the thread ran on a different CPU than the time before" }
            .counters(&mut e, s.threads.iter().map(|(k, t)| (thread_labels(k), t.migrations)))?;
        Family { name: "rtslice_cpu_seconds", help: "CPU time the scheduler charged the thread (its task clock, measured by BPF at each switch; time the hypervisor took is left out)" }
            .counters(&mut e, s.threads.iter().map(|(k, t)| (thread_labels(k), t.oncpu_ns as f64 / 1e9)))?;
        Family { name: "rtslice_deadline_throttles", help: "Times the SCHED_DEADLINE thread was switched out because its runtime ran out (BPF)" }
            .counters(&mut e, s.threads.iter().map(|(k, t)| (thread_labels(k), t.dl_throttles)))?;
        Family { name: "rtslice_threads", help: "Live threads with this name in the workload (a pool is one series)" }
            .gauges(&mut e, s.threads.iter().map(|(k, t)| (thread_labels(k), t.live as i64)))?;

        let resv = |w: &ReservationSample| labels(&[("workload", &w.workload), ("mechanism", &w.mechanism.to_string())]);
        Family { name: "rtslice_reservation_runtime_seconds", help: "Real-time runtime reserved every period on each of the workload's CPUs" }
            .gauges(&mut e, s.reservations.iter().filter_map(|w| Some((resv(w), w.reservation?.runtime.as_secs_f64()))))?;
        Family { name: "rtslice_reservation_period_seconds", help: "Period of the workload's real-time reservation" }
            .gauges(&mut e, s.reservations.iter().filter_map(|w| Some((resv(w), w.reservation?.period.as_secs_f64()))))?;
        Family { name: "rtslice_reservation_cpus", help: "CPUs the workload's reservation holds (budget = runtime/period per CPU)" }
            .gauges(&mut e, s.reservations.iter().filter(|w| w.reservation.is_some()).map(|w| (resv(w), w.cpus as i64)))?;
        Family {
            name: "rtslice_reservation_used_seconds",
            help: "CPU time the workload used (cgroup cpuacct.usage or cpu.stat usage_usec, else the traced threads' CPU time); budget used = rate / (runtime/period x cpus)",
        }
        .counters(&mut e, s.reservations.iter().filter_map(|w| Some((resv(w), w.used_s?))))?;
        Family {
            name: "rtslice_throttled",
            help: "Periods in which the workload's budget ran out: cpu.stat nr_throttled, or under SCHED_DEADLINE its threads' throttles (BPF)",
        }
            .counters(&mut e, s.reservations.iter().filter_map(|w| Some((resv(w), w.throttled?))))?;
        Family { name: "rtslice_throttled_seconds", help: "Time the workload's cgroup spent throttled (cpu.stat throttled_time / throttled_usec)" }
            .counters(&mut e, s.reservations.iter().filter_map(|w| Some((resv(w), w.throttled_s?))))?;

        let cpu_label = |c: &CpuSample| labels(&[("cpu", &c.cpu.to_string())]);
        Family { name: "rtslice_cpu_reserved_ratio", help: "Share of the CPU reserved for real-time workloads (sum of runtime/period)" }
            .gauges(&mut e, s.cpus.iter().map(|c| (cpu_label(c), c.reserved)))?;
        Family { name: "rtslice_cpu_free_ratio", help: "Share of the CPU not reserved (1 - reserved, at least 0)" }
            .gauges(&mut e, s.cpus.iter().map(|c| (cpu_label(c), (1.0 - c.reserved).max(0.0))))?;
        Family { name: "rtslice_irqs", help: "Hardware interrupts handled by the CPU (/proc/interrupts, all lines); rate() gives IRQs per second" }
            .counters(&mut e, s.cpus.iter().map(|c| (cpu_label(c), c.irqs)))?;
        Family {
            name: "rtslice_cpu_stolen_seconds",
            help: "Time the hypervisor ran something else while the CPU had work (/proc/stat steal, 10 ms resolution): lost to every thread on it, reservation or not; 0 on bare metal",
        }
        .counters(&mut e, s.cpus.iter().map(|c| (cpu_label(c), c.stolen_s)))?;
        Family { name: "rtslice_softirqs", help: "Softirqs run on the CPU by kind (/proc/softirqs); rate() gives softirqs per second" }.counters(
            &mut e,
            s.cpus.iter().flat_map(|c| c.softirqs.iter().map(move |(k, v)| (labels(&[("cpu", &c.cpu.to_string()), ("kind", k)]), *v))),
        )?;

        let wl = |w: &String| labels(&[("workload", w)]);
        Family { name: "rtslice_llc_occupancy_bytes", help: "Last-level cache the workload's threads occupy (its own resctrl group's mon_data llc_occupancy, summed over L3s)" }
            .gauges(&mut e, s.cache.iter().map(|(w, (occ, _))| (wl(w), *occ as i64)))?;
        Family { name: "rtslice_memory_traffic_bytes", help: "Memory traffic of the workload's threads (its resctrl group's mbm_total_bytes, summed over L3s); rate() gives bytes per second" }
            .counters(&mut e, s.cache.iter().map(|(w, (_, mbm))| (wl(w), *mbm)))?;

        let sli = |get: fn(&SliTotals) -> Option<u64>| {
            s.sli.iter().filter_map(move |(w, t)| Some((labels(&[("workload", w)]), get(t)?))).collect::<Vec<_>>()
        };
        Family { name: "rtslice_deadline_misses", help: "TTIs with a processing deadline missed, as reported by the workload" }
            .counters(&mut e, sli(|t| t.deadline_misses))?;
        Family { name: "rtslice_ttis", help: "TTIs processed, as reported by the workload" }.counters(&mut e, sli(|t| t.ttis))?;
        Family { name: "rtslice_throughput_bits", help: "Bits delivered in time, as reported by the workload" }
            .counters(&mut e, sli(|t| t.throughput_bits))?;
        Family { name: "rtslice_nacks", help: "HARQ NACKs, as reported by the workload" }.counters(&mut e, sli(|t| t.nacks))?;

        let h = &s.health;
        let none: Labels = Vec::new();
        Family { name: "rtslice_workloads", help: "Workloads the collector follows" }.gauges(&mut e, [(none.clone(), s.workloads as i64)])?;
        Family { name: "rtslice_collections", help: "Collections (scrapes) done" }.counters(&mut e, [(none.clone(), h.collections)])?;
        Family { name: "rtslice_collection_errors", help: "Files the collector could not read (a workload's cgroup gone, /proc unreadable)" }
            .counters(&mut e, [(none.clone(), h.collection_errors)])?;
        Family { name: "rtslice_collection_duration_seconds", help: "How long the last collection took" }
            .gauges(&mut e, [(none.clone(), h.last_collection_s)])?;
        Family { name: "rtslice_reports", help: "Datagrams on the report channel: accepted, invalid (not a version-1 report) or unattributed (sender in no workload)" }
            .counters(
                &mut e,
                [
                    (labels(&[("result", "accepted")]), h.reports_accepted),
                    (labels(&[("result", "invalid")]), h.reports_invalid),
                    (labels(&[("result", "unattributed")]), h.reports_unattributed),
                ],
            )?;
        Family { name: "rtslice_tracer_up", help: "1 when the continuous BPF tracer is loaded" }
            .gauges(&mut e, [(none.clone(), i64::from(s.tracer.is_some()))])?;
        let t = s.tracer.clone().unwrap_or_default();
        let tr = s.tracer.is_some();
        Family { name: "rtslice_tracer_events", help: "BPF program runs (scheduler events on the whole machine; needs kernel BPF statistics)" }
            .counters(&mut e, t.program_runs.filter(|_| tr).map(|v| (none.clone(), v)))?;
        Family { name: "rtslice_tracer_lost_events", help: "Scheduler events the BPF programs missed (recursion) or could not store (a new thread's entry not made at once)" }
            .counters(&mut e, tr.then(|| (none.clone(), t.lost_events())))?;
        Family { name: "rtslice_tracer_lost_threads", help: "Threads whose statistics found no room in the BPF map" }
            .counters(&mut e, tr.then(|| (none.clone(), t.lost_threads)))?;
        Family { name: "rtslice_tracer_cpu_seconds", help: "CPU time of the tracer: in the BPF programs, loading, and reading the maps" }.counters(
            &mut e,
            tr.then(|| {
                let mut v = vec![
                    (labels(&[("part", "load")]), t.load_cpu_ns as f64 / 1e9),
                    (labels(&[("part", "read")]), t.read_cpu_ns as f64 / 1e9),
                ];
                if let Some(ns) = t.program_run_ns {
                    v.push((labels(&[("part", "bpf")]), ns as f64 / 1e9));
                }
                v
            })
            .into_iter()
            .flatten(),
        )?;
        Ok(())
    }
}
