//! A structured reading of the node's metrics per workload (the node service's live views — its
//! dashboard, `rtslice top` — keep a short history of these), and quantiles of the exported
//! histograms computed the way Prometheus' `histogram_quantile` does, so the dashboard, Grafana and
//! PromQL show the same number for the same window.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::collect::{NodeMetrics, SliTotals};
use crate::families::{latency_bounds_ns, LatencyHist};

/// A workload's latency histogram in the exported buckets, summed over its threads (cumulative
/// since the workload was first followed).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    /// Events counted.
    pub count: u64,
    /// Sum of the latencies, ns.
    pub sum_ns: u64,
    /// Events per bucket (not cumulative): bucket i holds latencies below `latency_bounds_ns()[i]`
    /// and at least the bound before; the last bucket is +Inf.
    pub buckets: Vec<u64>,
}

impl From<&LatencyHist> for Histogram {
    fn from(h: &LatencyHist) -> Histogram {
        Histogram { count: h.count, sum_ns: h.sum_ns, buckets: h.buckets.clone() }
    }
}

impl Histogram {
    /// `self - earlier`: the events between two readings (a counter that went back, as after a
    /// thread pool was renamed, counts as a reset: the later reading alone).
    pub fn since(&self, earlier: &Histogram) -> Histogram {
        if self.count < earlier.count || self.buckets.len() != earlier.buckets.len() || self.buckets.iter().zip(&earlier.buckets).any(|(a, b)| a < b)
        {
            return self.clone();
        }
        Histogram {
            count: self.count - earlier.count,
            sum_ns: self.sum_ns.saturating_sub(earlier.sum_ns),
            buckets: self.buckets.iter().zip(&earlier.buckets).map(|(a, b)| a - b).collect(),
        }
    }

    /// The q-quantile in seconds as PromQL's `histogram_quantile(q, …)` computes it from these
    /// buckets: linear interpolation inside the bucket holding rank q·count (from 0 in the first
    /// bucket), the largest finite bound when the rank falls in +Inf; `None` without events.
    pub fn quantile_s(&self, q: f64) -> Option<f64> {
        let total: u64 = self.buckets.iter().sum();
        if total == 0 || !(0.0..=1.0).contains(&q) {
            return None;
        }
        let bounds = latency_bounds_ns();
        let rank = q * total as f64;
        let mut below = 0u64;
        for (i, &n) in self.buckets.iter().enumerate() {
            if (below + n) as f64 >= rank && n > 0 {
                let Some(&upper) = bounds.get(i) else {
                    return bounds.last().map(|&b| b as f64 / 1e9);
                };
                let lower = if i == 0 { 0.0 } else { bounds[i - 1] as f64 };
                let upper = upper as f64;
                return Some((lower + (upper - lower) * (rank - below as f64) / n as f64) / 1e9);
            }
            below += n;
        }
        bounds.last().map(|&b| b as f64 / 1e9)
    }

    /// Mean latency in seconds.
    pub fn mean_s(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum_ns as f64 / self.count as f64 / 1e9)
    }
}

/// One workload at one reading.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkloadSample {
    pub name: String,
    pub mechanism: String,
    /// Runtime and period of its reservation (µs) on each of `cpus` CPUs, if it has one.
    pub runtime_us: Option<u64>,
    pub period_us: Option<u64>,
    pub cpus: Vec<u32>,
    /// Live threads the tracer sees.
    pub threads: u64,
    pub wakeup: Histogram,
    pub preempt: Histogram,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub migrations: u64,
    /// CPU time used (cgroup accounting, else the traced threads'), seconds.
    pub used_s: Option<f64>,
    /// Throttled periods and time (cpu.stat), when the mechanism counts them.
    pub throttled: Option<u64>,
    pub throttled_s: Option<f64>,
    /// What the workload reported itself.
    pub sli: SliTotals,
}

/// One CPU at one reading.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuReading {
    pub cpu: u32,
    /// Σ runtime/period of the reservations on the CPU.
    pub reserved: f64,
    pub irqs: u64,
    pub softirqs: u64,
    /// Time the hypervisor took from the CPU so far (steal), seconds.
    #[serde(default)]
    pub stolen_s: f64,
}

/// Everything the collector read at one moment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeSample {
    /// Seconds since the epoch.
    pub time: f64,
    pub workloads: Vec<WorkloadSample>,
    pub cpus: Vec<CpuReading>,
    pub tracer_up: bool,
    /// Why the tracer is not running.
    pub tracer_error: Option<String>,
    pub tracer_events: Option<u64>,
    pub tracer_lost_events: u64,
    pub collection_errors: u64,
}

impl NodeMetrics {
    /// Reads everything now (as a scrape does) and sums it per workload.
    pub fn sample(&self) -> NodeSample {
        let s = self.collect();
        let time = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
        let nb = latency_bounds_ns().len();
        let workloads = self
            .workloads()
            .into_iter()
            .map(|w| {
                let mut wakeup = LatencyHist::empty(nb);
                let mut preempt = LatencyHist::empty(nb);
                let mut out = WorkloadSample {
                    name: w.name.clone(),
                    mechanism: w.mechanism.to_string(),
                    runtime_us: w.reservation.map(|r| r.runtime_us()),
                    period_us: w.reservation.map(|r| r.period_us()),
                    cpus: w.cpus.clone(),
                    sli: s.sli.get(&w.name).copied().unwrap_or_default(),
                    ..Default::default()
                };
                for ((_, _), t) in s.threads.range((w.name.clone(), String::new())..).take_while(|((n, _), _)| *n == w.name) {
                    wakeup.add(&t.wakeup);
                    preempt.add(&t.preempt);
                    out.threads += t.live;
                    out.voluntary_switches += t.voluntary;
                    out.involuntary_switches += t.involuntary;
                    out.migrations += t.migrations;
                }
                if let Some(r) = s.reservations.iter().find(|r| r.workload == w.name) {
                    out.used_s = r.used_s;
                    out.throttled = r.throttled;
                    out.throttled_s = r.throttled_s;
                }
                out.wakeup = (&wakeup).into();
                out.preempt = (&preempt).into();
                out
            })
            .collect();
        NodeSample {
            time,
            workloads,
            cpus: s
                .cpus
                .iter()
                .map(|c| CpuReading { cpu: c.cpu, reserved: c.reserved, irqs: c.irqs, softirqs: c.softirqs.iter().map(|(_, n)| n).sum(), stolen_s: c.stolen_s })
                .collect(),
            tracer_up: s.tracer.is_some(),
            tracer_error: self.tracer_error(),
            tracer_events: s.tracer.as_ref().and_then(|t| t.program_runs),
            tracer_lost_events: s.tracer.as_ref().map(|t| t.lost_events()).unwrap_or(0),
            collection_errors: s.health.collection_errors,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(counts: &[(usize, u64)]) -> Histogram {
        let mut h = Histogram { buckets: vec![0; latency_bounds_ns().len() + 1], ..Default::default() };
        for &(i, n) in counts {
            h.buckets[i] += n;
            h.count += n;
        }
        h
    }

    #[test]
    fn quantiles_interpolate_inside_the_bucket_like_histogram_quantile() {
        let b = latency_bounds_ns();
        // 100 events in bucket 8 ([b7, b8)): the median is half-way through it.
        let h = hist(&[(8, 100)]);
        let mid = (b[7] as f64 + (b[8] - b[7]) as f64 * 0.5) / 1e9;
        assert!((h.quantile_s(0.5).unwrap() - mid).abs() < 1e-15);
        // 90 in bucket 0, 10 in bucket 20: p99 lies at 9/10 of bucket 20.
        let h = hist(&[(0, 90), (20, 10)]);
        let want = (b[19] as f64 + (b[20] - b[19]) as f64 * 0.9) / 1e9;
        assert!((h.quantile_s(0.99).unwrap() - want).abs() < 1e-15);
        // p50 in the first bucket interpolates from 0.
        assert!((h.quantile_s(0.5).unwrap() - b[0] as f64 * (50.0 / 90.0) / 1e9).abs() < 1e-15);
        // A rank in +Inf gives the largest finite bound.
        let h = hist(&[(0, 1), (b.len(), 99)]);
        assert_eq!(h.quantile_s(0.99), Some(*b.last().unwrap() as f64 / 1e9));
        assert_eq!(hist(&[]).quantile_s(0.99), None);
    }

    #[test]
    fn since_subtracts_and_treats_a_decrease_as_a_reset() {
        let a = hist(&[(3, 5), (4, 1)]);
        let b = hist(&[(3, 7), (4, 1), (9, 2)]);
        let d = b.since(&a);
        assert_eq!((d.count, d.buckets[3], d.buckets[4], d.buckets[9]), (4, 2, 0, 2));
        assert_eq!(a.since(&b), a);
    }
}
