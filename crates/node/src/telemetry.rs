//! The daemon's observability: the Prometheus collector (rtslice-metrics) following the deployed
//! workloads, the report socket their processes get in `RTSLICE_REPORT_SOCKET`, the daemon's own
//! operation counters, and a short history of readings from which `GET /v1/telemetry` (the live
//! dashboard, `rtslice top`) computes latency percentiles, miss ratios and throughput over the
//! last minutes.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use rtslice_metrics::{Histogram, NodeMetrics, NodeSample, ReportChannel, Workload, WorkloadSample};
use serde_json::{json, Value};

use crate::error::{NodeError, Result};
use crate::service::Service;

/// How the daemon observes its workloads.
#[derive(Clone, Debug)]
pub struct TelemetryOptions {
    /// Run the continuous BPF tracer (latency histograms, switches, CPU time per thread).
    pub trace: bool,
    /// The report socket; `None`: `report.sock` next to the API socket.
    pub report_socket: Option<PathBuf>,
    /// Also serve `GET /metrics` here, plain HTTP without a token (for Prometheus).
    pub metrics_listen: Option<SocketAddr>,
    /// How often the live views' history takes a reading.
    pub sample_every: Duration,
    /// How much history the live views keep.
    pub history: Duration,
}

impl Default for TelemetryOptions {
    fn default() -> Self {
        TelemetryOptions {
            trace: true,
            report_socket: None,
            metrics_listen: None,
            sample_every: Duration::from_secs(2),
            history: Duration::from_secs(600),
        }
    }
}

type OpLabels = Vec<(String, String)>;

/// What the daemon observes: the collector and its registry, the report socket, the daemon's
/// operation counters and the readings' history. Shared by the API handlers, the sampler task and
/// the watcher (all methods take `&self`).
pub struct Telemetry {
    pub(crate) metrics: NodeMetrics,
    pub(crate) registry: Arc<Registry>,
    report_socket: PathBuf,
    _channel: ReportChannel,
    following: Mutex<Vec<Workload>>,
    history: Mutex<VecDeque<(u64, NodeSample)>>,
    next_seq: AtomicU64,
    keep: usize,
    sample_every: Duration,
    operations: Family<OpLabels, Counter>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Telemetry {
    /// Binds the report socket and prepares the collector (the tracer loads with the first workload).
    pub fn start(opts: &TelemetryOptions, api_socket: &Path) -> Result<Telemetry> {
        let metrics = NodeMetrics::new(rtslice_metrics::Options { trace: opts.trace, raw_tp: false });
        let report_socket = opts.report_socket.clone().unwrap_or_else(|| api_socket.with_file_name("report.sock"));
        if let Some(dir) = report_socket.parent() {
            std::fs::create_dir_all(dir).map_err(|e| NodeError::State(format!("cannot create {} for the report socket: {e}", dir.display())))?;
        }
        let channel = ReportChannel::bind(&report_socket, metrics.clone()).map_err(|e| NodeError::State(e.to_string()))?;
        let mut registry = metrics.registry();
        let operations = Family::<OpLabels, Counter>::default();
        registry.register(
            "rtslice_operations",
            "Changing API requests (deploy, resize, remove) by result: ok, refused (4xx: invalid, conflict, does not fit) or error (5xx)",
            operations.clone(),
        );
        let every = opts.sample_every.max(Duration::from_millis(100));
        Ok(Telemetry {
            metrics,
            registry: Arc::new(registry),
            report_socket,
            _channel: channel,
            following: Mutex::new(Vec::new()),
            history: Mutex::new(VecDeque::new()),
            next_seq: AtomicU64::new(1),
            keep: (opts.history.as_secs_f64() / every.as_secs_f64()).ceil().max(2.0) as usize + 1,
            sample_every: every,
            operations,
        })
    }

    /// The OpenMetrics text of every family (what `GET /metrics` answers).
    pub fn encode(&self) -> String {
        rtslice_metrics::encode(&self.registry)
    }

    pub fn report_socket(&self) -> &Path {
        &self.report_socket
    }

    pub fn sample_every(&self) -> Duration {
        self.sample_every
    }

    /// Makes the collector follow what the host has deployed now (after every request and every
    /// second): new workloads' cgroups are traced, removed ones dropped, resized ones re-read.
    pub fn sync(&self, svc: &Service) {
        let now = match svc.host().records() {
            Ok(records) => followed(&records),
            Err(e) => {
                tracing::warn!("metrics: cannot read the deployed workloads: {e}");
                return;
            }
        };
        let mut following = lock(&self.following);
        if *following != now {
            match self.metrics.set_workloads(now.clone()) {
                Ok(()) => *following = now,
                // A workload removed between reading the records and here: the next sync catches up.
                Err(e) => tracing::warn!("metrics: {e}"),
            }
        }
    }

    /// Counts one changing request by its answer's status.
    pub fn count_operation(&self, operation: &str, status: u16) {
        let result = match status {
            200..=299 => "ok",
            400..=499 => "refused",
            _ => "error",
        };
        self.operations.get_or_create(&vec![("operation".into(), operation.into()), ("result".into(), result.into())]).inc();
    }

    /// Takes one reading into the history.
    pub fn sample_now(&self) {
        let s = self.metrics.sample();
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let mut h = lock(&self.history);
        h.push_back((seq, s));
        while h.len() > self.keep {
            h.pop_front();
        }
    }

    /// The latest reading of the history.
    pub fn latest(&self) -> Option<NodeSample> {
        lock(&self.history).back().map(|(_, s)| s.clone())
    }

    /// `GET /v1/telemetry`: the reading `at` (default the latest) with rates and latency
    /// percentiles over the `window_s` seconds before it, and per-interval series over the
    /// `minutes` before it.
    pub fn view(&self, at: Option<u64>, window_s: f64, minutes: f64) -> Result<Value> {
        let h = lock(&self.history);
        let Some(&(last_seq, _)) = h.back() else {
            return Ok(json!({ "seq": null, "samples": 0, "interval_s": self.sample_every.as_secs_f64(), "workloads": [], "cpus": [] }));
        };
        let idx = match at {
            None => h.len() - 1,
            Some(seq) => h.iter().position(|(s, _)| *s == seq).ok_or_else(|| {
                NodeError::NotFound(format!(
                    "reading {seq} is not in the history (it holds {}..{last_seq}); ask for a later one",
                    h.front().map(|f| f.0).unwrap_or(0)
                ))
            })?,
        };
        let (seq, cur) = &h[idx];
        // The reading closest to `window_s` before, not later than that (else the oldest one).
        let base = h.iter().take(idx).rev().find(|(_, s)| cur.time - s.time >= window_s - 1e-3).or_else(|| h.front().filter(|_| idx > 0));
        let series_from = h.iter().take(idx + 1).position(|(_, s)| cur.time - s.time <= minutes * 60.0 + 1e-3).unwrap_or(idx);
        let series: Vec<&(u64, NodeSample)> = h.iter().skip(series_from).take(idx + 1 - series_from).collect();
        let workloads: Vec<Value> = cur
            .workloads
            .iter()
            .map(|w| {
                let before = base.and_then(|(_, b)| b.workloads.iter().find(|x| x.name == w.name));
                let dt = base.map(|(_, b)| cur.time - b.time);
                let mut v = window(w, before, dt);
                let pts: Vec<Value> = series
                    .windows(2)
                    .map(|p| {
                        let (a, b) = (&p[0].1, &p[1].1);
                        let prev = a.workloads.iter().find(|x| x.name == w.name);
                        let now = b.workloads.iter().find(|x| x.name == w.name);
                        match (prev, now) {
                            (Some(prev), Some(now)) => {
                                let r = rates(now, prev, b.time - a.time);
                                json!({ "seq": p[1].0, "time": b.time, "wakeup_p99_s": r.wakeup.quantile_s(0.99),
                                        "miss_ratio": r.miss_ratio, "throughput_bps": r.throughput_bps, "throttled_per_s": r.throttled_per_s })
                            }
                            _ => json!({ "seq": p[1].0, "time": b.time }),
                        }
                    })
                    .collect();
                v["series"] = Value::Array(pts);
                v
            })
            .collect();
        let cpus: Vec<Value> = cur
            .cpus
            .iter()
            .map(|c| {
                let before = base.and_then(|(_, b)| b.cpus.iter().find(|x| x.cpu == c.cpu));
                let dt = base.map(|(_, b)| cur.time - b.time).filter(|d| *d > 0.0);
                let rate = |now: u64, then: Option<u64>| Some(now.checked_sub(then?)? as f64 / dt?);
                // The share of the CPU the hypervisor ran something else while it had work.
                let stolen = before.zip(dt).map(|(b, dt)| ((c.stolen_s - b.stolen_s) / dt).max(0.0));
                json!({ "cpu": c.cpu, "reserved": c.reserved, "irqs_per_s": rate(c.irqs, before.map(|b| b.irqs)),
                        "softirqs_per_s": rate(c.softirqs, before.map(|b| b.softirqs)), "stolen_ratio": stolen })
            })
            .collect();
        Ok(json!({
            "seq": seq,
            "time": cur.time,
            "interval_s": self.sample_every.as_secs_f64(),
            "window_s": base.map(|(_, b)| cur.time - b.time),
            "samples": h.len(),
            "tracer": { "up": cur.tracer_up, "error": cur.tracer_error, "events": cur.tracer_events, "lost_events": cur.tracer_lost_events },
            "bounds_s": rtslice_metrics::latency_bounds_ns().iter().map(|&b| b as f64 / 1e9).collect::<Vec<_>>(),
            "cpus": cpus,
            "workloads": workloads,
        }))
    }
}

/// What happened to one workload between two readings.
struct Rates {
    wakeup: Histogram,
    preempt: Histogram,
    miss_ratio: Option<f64>,
    ttis_per_s: Option<f64>,
    throughput_bps: Option<f64>,
    throttled_per_s: Option<f64>,
    budget_used: Option<f64>,
}

fn rates(now: &WorkloadSample, prev: &WorkloadSample, dt: f64) -> Rates {
    let d = |a: Option<u64>, b: Option<u64>| a.zip(b).and_then(|(a, b)| a.checked_sub(b));
    let per_s = |x: Option<f64>| x.filter(|_| dt > 0.0).map(|x| x / dt);
    let ttis = d(now.sli.ttis, prev.sli.ttis);
    let misses = d(now.sli.deadline_misses, prev.sli.deadline_misses);
    let used = now.used_s.zip(prev.used_s).map(|(a, b)| a - b).filter(|x| *x >= 0.0);
    let budget = match (now.runtime_us, now.period_us) {
        (Some(r), Some(p)) if p > 0 && !now.cpus.is_empty() => Some(r as f64 / p as f64 * now.cpus.len() as f64),
        _ => None,
    };
    Rates {
        wakeup: now.wakeup.since(&prev.wakeup),
        preempt: now.preempt.since(&prev.preempt),
        miss_ratio: misses.zip(ttis).filter(|(_, t)| *t > 0).map(|(m, t)| m as f64 / t as f64),
        ttis_per_s: per_s(ttis.map(|x| x as f64)),
        throughput_bps: per_s(d(now.sli.throughput_bits, prev.sli.throughput_bits).map(|x| x as f64)),
        throttled_per_s: per_s(d(now.throttled, prev.throttled).map(|x| x as f64)),
        budget_used: per_s(used).zip(budget).map(|(u, b)| u / b),
    }
}

/// A workload's reading with its window's rates and percentiles (`before` is `dt` seconds older).
fn window(w: &WorkloadSample, before: Option<&WorkloadSample>, dt: Option<f64>) -> Value {
    let r = before.zip(dt).map(|(b, dt)| rates(w, b, dt));
    let lat = |h: Option<&Histogram>| {
        h.map(|h| {
            json!({ "count": h.count, "mean_s": h.mean_s(), "p50_s": h.quantile_s(0.5), "p90_s": h.quantile_s(0.9),
                    "p99_s": h.quantile_s(0.99), "p999_s": h.quantile_s(0.999), "buckets": h.buckets })
        })
    };
    json!({
        "name": w.name,
        "mechanism": w.mechanism,
        "runtime_us": w.runtime_us,
        "period_us": w.period_us,
        "cpus": w.cpus,
        "threads": w.threads,
        "totals": {
            "wakeups": w.wakeup.count, "ttis": w.sli.ttis, "deadline_misses": w.sli.deadline_misses,
            "throughput_bits": w.sli.throughput_bits, "nacks": w.sli.nacks, "throttled": w.throttled,
            "throttled_s": w.throttled_s, "used_s": w.used_s, "migrations": w.migrations,
            "voluntary_switches": w.voluntary_switches, "involuntary_switches": w.involuntary_switches,
        },
        "wakeup": lat(r.as_ref().map(|r| &r.wakeup)),
        "preempt": lat(r.as_ref().map(|r| &r.preempt)),
        "miss_ratio": r.as_ref().and_then(|r| r.miss_ratio),
        "ttis_per_s": r.as_ref().and_then(|r| r.ttis_per_s),
        "throughput_bps": r.as_ref().and_then(|r| r.throughput_bps),
        "throttled_per_s": r.as_ref().and_then(|r| r.throttled_per_s),
        "budget_used": r.as_ref().and_then(|r| r.budget_used),
    })
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ViewQuery {
    /// A reading's sequence number (default: the latest).
    pub at: Option<u64>,
    /// Seconds the rates and percentiles look back (default 10).
    pub window: Option<f64>,
    /// Minutes of series (default 5).
    pub minutes: Option<f64>,
}


/// The workloads of the host's records as the metrics collector follows them: what the daemon
/// deployed, or what `rtslice metrics serve` finds in a state directory.
pub fn followed(records: &[rtslice_host::AppliedRecord]) -> Vec<Workload> {
    records
        .iter()
        .flat_map(|record| {
            record.workloads.iter().map(move |w| Workload {
                name: w.name.clone(),
                cgroup: w.group.cpuset.clone(),
                cpu_cgroup: w.group.cpu.clone(),
                cpus: w.cpus.iter().collect(),
                reservation: record.setup.workloads.iter().find(|s| s.name == w.name).and_then(|s| s.reservation),
                mechanism: record.mechanism,
                resctrl_group: w.resctrl_group.clone(),
            })
        })
        .collect()
}
