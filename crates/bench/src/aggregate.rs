//! From run records to the numbers a report shows, per cell. Pure: the report and the tests
//! both go through these functions.

use std::collections::BTreeMap;

use crate::experiment::Role;
use crate::matrix::Cell;
use crate::results::{RunRecord, RunStatus};
use crate::stats::{self, Summary};

/// Study A's buckets: 0–1, 2–3, 4–7, 8–15 µs, and everything from 16 µs on.
pub const BUCKETS: &[&str] = &["0–1", "2–3", "4–7", "8–15", "≥16"];

/// Runs of one cell that produced data (finished, or interrupted with something measured).
pub fn usable<'a>(runs: &'a [RunRecord], cell: &Cell) -> Vec<&'a RunRecord> {
    runs.iter()
        .filter(|r| r.cell == cell.id)
        .filter(|r| matches!(r.status, RunStatus::Ok) || (matches!(r.status, RunStatus::Interrupted) && !r.instances.is_empty()))
        .collect()
}

pub fn failed<'a>(runs: &'a [RunRecord], cell: &Cell) -> Vec<&'a RunRecord> {
    runs.iter().filter(|r| r.cell == cell.id && matches!(r.status, RunStatus::Failed { .. })).collect()
}

pub fn skip_reason(runs: &[RunRecord], cell: &Cell) -> Option<String> {
    runs.iter().filter(|r| r.cell == cell.id).find_map(|r| match &r.status {
        RunStatus::Skipped { reason } => Some(reason.clone()),
        _ => None,
    })
}

/// Folds a log2 histogram into study A's five buckets.
pub fn fold_buckets(log2: &[u64]) -> [u64; 5] {
    let mut out = [0u64; 5];
    for (i, c) in log2.iter().enumerate() {
        out[i.min(4)] += c;
    }
    out
}

/// Per thread name (threads of replicas and pools merged by name, as the study's tables do):
/// event counts per bucket, summed over all usable runs of the cell.
pub fn thread_buckets(runs: &[&RunRecord]) -> BTreeMap<String, [u64; 5]> {
    let mut out: BTreeMap<String, [u64; 5]> = BTreeMap::new();
    for r in runs {
        for i in r.measured() {
            for t in &i.threads {
                let b = fold_buckets(&t.log2_us);
                let e = out.entry(t.name.clone()).or_insert([0; 5]);
                for k in 0..5 {
                    e[k] += b[k];
                }
            }
        }
    }
    out
}

/// Shares in percent; None when no event was seen.
pub fn shares(b: &[u64; 5]) -> Option<[f64; 5]> {
    let total: u64 = b.iter().sum();
    if total == 0 {
        return None;
    }
    let mut s = [0.0; 5];
    for k in 0..5 {
        s[k] = 100.0 * b[k] as f64 / total as f64;
    }
    Some(s)
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct EmuAgg {
    pub ttis: u64,
    pub misses: u64,
    pub nacks: u64,
    /// Throughput samples in bit/s: per-second values when the emulator reports them, else one
    /// value per run and instance.
    pub throughput: Vec<f64>,
    pub proc_p99_us: Vec<f64>,
}

impl EmuAgg {
    pub fn miss_ratio(&self) -> Option<f64> {
        (self.ttis > 0).then(|| self.misses as f64 / self.ttis as f64)
    }
}

/// Emulator results of a cell, for all measured instances or only those of `workload`.
pub fn emu(runs: &[&RunRecord], workload: Option<&str>) -> Option<EmuAgg> {
    let mut agg = EmuAgg::default();
    let mut any = false;
    for r in runs {
        for i in r.measured().filter(|i| workload.is_none_or(|w| i.workload == w)) {
            if let Some(e) = &i.emu {
                any = true;
                agg.ttis += e.ttis;
                agg.misses += e.deadline_misses;
                agg.nacks += e.nacks;
                if e.throughput_series_bps.is_empty() {
                    agg.throughput.push(e.throughput_bps);
                } else {
                    agg.throughput.extend(&e.throughput_series_bps);
                }
                agg.proc_p99_us.push(e.proc_p99_us);
            }
        }
    }
    any.then_some(agg)
}

pub fn latency_samples(runs: &[&RunRecord]) -> Vec<f64> {
    runs.iter().flat_map(|r| r.measured().flat_map(|i| i.latency_samples_us.iter().copied())).collect()
}

/// CPU of the measured instances together, p95 over the window's samples, median over runs (cores).
pub fn cpu_p95(runs: &[&RunRecord], role: Role) -> Option<f64> {
    let per_run: Vec<f64> = runs
        .iter()
        .filter_map(|r| {
            let series: Vec<&Vec<f64>> = r.instances.iter().filter(|i| i.role == role).map(|i| &i.cpu_samples).collect();
            let len = series.iter().map(|s| s.len()).min()?;
            if len == 0 {
                return None;
            }
            let sum: Vec<f64> = (0..len).map(|k| series.iter().map(|s| s[k]).sum()).collect();
            stats::percentile(&sum, 95.0)
        })
        .collect();
    stats::median(&per_run)
}

pub fn host_cpu_p95(runs: &[&RunRecord]) -> Option<f64> {
    let per_run: Vec<f64> = runs.iter().filter_map(|r| stats::percentile(&r.host_cpu_samples, 95.0)).collect();
    stats::median(&per_run)
}

/// Context switches per ms of the measured instances (sum), mean over runs.
pub fn switches_per_ms(runs: &[&RunRecord]) -> Option<f64> {
    let per_run: Vec<f64> = runs
        .iter()
        .filter_map(|r| {
            let v: Vec<f64> = r.measured().filter_map(|i| i.switches_per_ms).collect();
            (!v.is_empty()).then(|| v.iter().sum())
        })
        .collect();
    stats::mean(&per_run)
}

/// Best-effort neighbours' bogo-ops/s (sum over neighbours), median over runs.
pub fn neighbour_ops(runs: &[&RunRecord]) -> Option<f64> {
    let per_run: Vec<f64> = runs
        .iter()
        .filter_map(|r| {
            let v: Vec<f64> = r.instances.iter().filter(|i| i.role == Role::Neighbour).filter_map(|i| i.bogo_ops_per_s).collect();
            (!v.is_empty()).then(|| v.iter().sum())
        })
        .collect();
    stats::median(&per_run)
}

/// Number of measured instances in a run of this cell (study C's vBS count).
pub fn measured_count(runs: &[&RunRecord]) -> Option<usize> {
    runs.first().map(|r| r.measured().count())
}

pub fn summary(samples: &[f64]) -> Option<Summary> {
    Summary::of(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_tail_into_last_bucket() {
        assert_eq!(fold_buckets(&[5, 4, 3, 2, 1, 1, 1]), [5, 4, 3, 2, 3]);
        assert_eq!(fold_buckets(&[7]), [7, 0, 0, 0, 0]);
        let s = shares(&[50, 25, 25, 0, 0]).unwrap();
        assert_eq!(s, [50.0, 25.0, 25.0, 0.0, 0.0]);
        assert!(shares(&[0; 5]).is_none());
    }
}
