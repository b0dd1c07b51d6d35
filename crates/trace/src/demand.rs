//! Execution demand per period (`rtslice profile`): the traced threads' CPU time, summed by the
//! BPF program into buckets of a fraction of the period (exactly: a slice spanning a boundary is
//! split at it), grouped here into period windows, and written as the spec's [`Profile`].
//!
//! CPU time is what the scheduler charges a thread (its task clock, `se.sum_exec_runtime`), not its
//! wall time on a CPU: on a VM whose host takes the vCPU away now and then (paravirt steal, 5-9 % of
//! a vCPU on this project's CI hosts on busy days), the wall time counts the host's share as the
//! workload's demand, while a SCHED_DEADLINE budget, cpuacct and schedstat are charged the task
//! clock only. A profile taken in wall time sized budgets for a host's noise that the budget never
//! pays for; in task-clock time it sizes what the budget is charged. (What the host takes still makes
//! jobs late; no budget buys that back — the bench's steal section shows it per run.)
//!
//! Window phase. A job (a TTI) released at an arbitrary offset from the clock's multiples of the
//! period would be cut in two by windows aligned to them, and a window would then hold the end of
//! one job and the start of the next. The buckets are finer than the period (16 per period where
//! it divides), so the windows start at the bucket position, modulo the period, where the workload
//! is least on CPU over the whole run: the idle gap between jobs, for a workload that has one.

use std::time::Duration;

use rtslice_spec::{ExecutionQuantiles, HistogramBin, Profile};
use rtslice_sys::time::monotonic_ns;

use crate::bpf::{BpfTracer, DemandRing};
use crate::{filter_of, Target, TraceError};

/// Buckets per period, finest first (the first that divides the period exactly is used).
const BUCKETS_PER_PERIOD: [u64; 6] = [16, 10, 8, 5, 4, 2];
/// A bucket is read this long after it ended: a slice still on a CPU is added when it ends.
const SETTLE: Duration = Duration::from_millis(500);
/// How often buckets are read from the ring.
const POLL: Duration = Duration::from_millis(100);
/// The ring holds this much time, far more than SETTLE + POLL (so nothing is overwritten unread).
const RING_SPAN: Duration = Duration::from_secs(4);
/// The histogram's resolution: the periodic model's default grid (values rounded up to it).
pub const HISTOGRAM_RESOLUTION: Duration = Duration::from_micros(10);

/// On-CPU time per period window, as measured.
#[derive(Debug, Clone, PartialEq)]
pub struct DemandSamples {
    pub period: Duration,
    /// Where the windows start, after each multiple of the period (CLOCK_MONOTONIC).
    pub phase: Duration,
    /// The traced threads' CPU time (task clock) in each whole window, in order.
    pub windows_ns: Vec<u64>,
    /// Buckets read after the ring had reused their slot (none unless the reader was stalled > 3 s).
    pub lost_buckets: u64,
    /// On-CPU time of slices that kept a CPU longer than [`SETTLE`], before their last
    /// SETTLE: buckets already read when the slice ended (a CPU hog; a vBS thread rarely).
    pub overflow_ns: u64,
}

/// The traced threads' CPU time (task clock) summed in buckets of `period / k`.
pub struct DemandProfiler {
    tracer: BpfTracer,
    period_ns: u64,
    bucket_ns: u64,
    slots: u32,
    /// The next bucket to read, and the buckets read so far (from the first whole one).
    next: u64,
    buckets: Vec<u64>,
    lost: u64,
}

impl DemandProfiler {
    /// Starts summing `target`'s CPU time (BPF; needs root or CAP_BPF + CAP_PERFMON).
    pub fn start(target: &Target, period: Duration) -> Result<DemandProfiler, TraceError> {
        let period_ns = period.as_nanos() as u64;
        if period_ns < 1000 {
            return Err(TraceError::Empty(format!("a period of {period:?} is too short to profile; give at least 1us")));
        }
        let k = BUCKETS_PER_PERIOD.iter().copied().find(|k| period_ns % k == 0).unwrap_or(1);
        let bucket_ns = period_ns / k;
        let slots = (RING_SPAN.as_nanos() as u64 / bucket_ns).clamp(1024, 1 << 20) as u32;
        // A slice is spread over the buckets surely not yet read when it ends: a poll reads only
        // buckets that ended SETTLE before it, so those that ended within the last SETTLE.
        let span = (SETTLE.as_nanos() as u64 / bucket_ns).clamp(1, slots as u64) as u32;
        let ring = DemandRing { bucket_ns, slots, span };
        let tracer = BpfTracer::start_with_demand(&filter_of(target)?, false, Some(ring))?;
        // The first bucket that starts after the program is attached is the first whole one.
        let next = monotonic_ns() / bucket_ns + 1;
        Ok(DemandProfiler { tracer, period_ns, bucket_ns, slots, next, buckets: Vec::new(), lost: 0 })
    }

    /// Reads the buckets that ended at least [`SETTLE`] ago.
    pub fn poll(&mut self) {
        let settled = monotonic_ns().saturating_sub(SETTLE.as_nanos() as u64) / self.bucket_ns;
        self.read_until(settled);
    }

    fn read_until(&mut self, end: u64) {
        if end <= self.next {
            return;
        }
        for b in self.tracer.demand_buckets(self.next, end, self.slots) {
            match b {
                Some(ns) => self.buckets.push(ns),
                None => {
                    self.lost += 1;
                    self.buckets.push(0);
                }
            }
        }
        self.next = end;
    }

    /// Measures for `duration` (polling), then waits for the last buckets to settle.
    pub fn measure(mut self, duration: Duration) -> DemandSamples {
        let end = monotonic_ns() + duration.as_nanos() as u64;
        while monotonic_ns() < end {
            std::thread::sleep(POLL.min(Duration::from_nanos(end.saturating_sub(monotonic_ns()))));
            self.poll();
        }
        std::thread::sleep(SETTLE);
        self.read_until(end / self.bucket_ns);
        self.finish()
    }

    /// The whole windows measured so far.
    pub fn finish(self) -> DemandSamples {
        let k = (self.period_ns / self.bucket_ns) as usize;
        let first = self.next - self.buckets.len() as u64;
        let (offset, windows_ns) = windows(&self.buckets, (first % k as u64) as usize, k);
        DemandSamples {
            period: Duration::from_nanos(self.period_ns),
            phase: Duration::from_nanos(offset as u64 * self.bucket_ns),
            windows_ns,
            lost_buckets: self.lost,
            overflow_ns: self.tracer.demand_overflow_ns(),
        }
    }
}

/// Groups `buckets` (the first one at position `first_pos` modulo `k`) into windows of `k`, starting
/// at the position with the least total on-CPU time; returns that position and the windows.
pub(crate) fn windows(buckets: &[u64], first_pos: usize, k: usize) -> (usize, Vec<u64>) {
    if k == 0 {
        return (0, Vec::new());
    }
    let mut by_pos = vec![0u64; k];
    for (i, b) in buckets.iter().enumerate() {
        by_pos[(first_pos + i) % k] += b;
    }
    // The quietest position; ties go to the earliest (position 0: the clock's own multiples).
    let phase = (0..k).min_by_key(|&p| (by_pos[p], p)).unwrap_or(0);
    let skip = (phase + k - first_pos % k) % k;
    let windows = buckets.get(skip..).unwrap_or(&[]).chunks_exact(k).map(|c| c.iter().sum()).collect();
    (phase, windows)
}

impl DemandSamples {
    /// The spec's profile of these windows: quantiles (type-7 percentiles, rounded up to 1 µs) and
    /// a histogram on [`HISTOGRAM_RESOLUTION`] (values rounded up). Windows with no on-CPU time at
    /// all are left out (the model's jobs need time; leaving idle periods out can only raise the
    /// demand). `None` when no window had any.
    pub fn profile(&self, deadline: Duration, source: String) -> Option<Profile> {
        let busy: Vec<f64> = self.windows_ns.iter().filter(|&&n| n > 0).map(|&n| n as f64).collect();
        if busy.is_empty() {
            return None;
        }
        let sorted = rtslice_stats::sorted_finite(&busy);
        let q = |p: f64| rtslice_stats::percentile_sorted(&sorted, p).map(|ns| Duration::from_micros((ns / 1e3).ceil() as u64));
        let res = HISTOGRAM_RESOLUTION.as_nanos() as u64;
        let mut bins: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
        for &ns in self.windows_ns.iter().filter(|&&n| n > 0) {
            *bins.entry(ns.div_ceil(res)).or_insert(0) += 1;
        }
        let histogram: Vec<HistogramBin> =
            bins.into_iter().map(|(units, count)| HistogramBin { value: Duration::from_nanos(units * res), count }).collect();
        let max = histogram.last().map(|b| b.value).unwrap_or_default();
        let idle = self.windows_ns.len() - busy.len();
        Some(Profile {
            period: self.period,
            deadline,
            execution: ExecutionQuantiles { min: q(0.0), p50: q(50.0), p90: q(90.0), p99: q(99.0), p999: q(99.9), max },
            histogram,
            source: Some(format!(
                "{source}; {} windows of {:?} (phase {:?}){}",
                busy.len(),
                self.period,
                self.phase,
                if idle > 0 { format!(", {idle} idle windows left out") } else { String::new() }
            )),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_start_in_the_idle_gap() {
        // k = 4; a job of 3 units starting at position 2 of each period: 2,3 | 0 ... busy at 2,3,0.
        let buckets: Vec<u64> = (0..40).map(|i| if [2, 3, 0].contains(&(i % 4)) { 10 } else { 0 }).collect();
        let (phase, w) = windows(&buckets, 0, 4);
        assert_eq!(phase, 1);
        assert!(w.iter().all(|&x| x == 30), "{w:?}");
        // The same with the first bucket at another position.
        let (phase, w) = windows(&buckets[3..], 3, 4);
        assert_eq!(phase, 1);
        assert!(w.iter().all(|&x| x == 30), "{w:?}");
    }

    #[test]
    fn profile_quantiles_and_histogram() {
        let s = DemandSamples {
            period: Duration::from_millis(1),
            phase: Duration::ZERO,
            windows_ns: vec![0, 300_000, 301_000, 450_500, 300_000],
            lost_buckets: 0,
            overflow_ns: 0,
        };
        let p = s.profile(Duration::from_millis(3), "test".into()).unwrap();
        assert_eq!(p.execution.max, Duration::from_micros(460));
        assert_eq!(p.execution.min, Some(Duration::from_micros(300)));
        assert_eq!(p.histogram.iter().map(|b| b.count).sum::<u64>(), 4);
        assert!(p.source.as_deref().unwrap().contains("1 idle windows left out"));
    }
}
