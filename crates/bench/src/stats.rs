//! Order statistics for reports: percentiles, median, IQR, box-plot outliers and ECDFs.
//!
//! Everything here is pure and deterministic. Percentiles use linear interpolation between closest
//! ranks (Hyndman–Fan type 7, the default of R, NumPy and most spreadsheets) so numbers in reports
//! can be re-computed by readers with any common tool. Non-finite samples are dropped: a NaN in a
//! raw file must not poison a whole table.

use serde::{Deserialize, Serialize};

fn finite_sorted(samples: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(|a, b| a.partial_cmp(b).expect("finite values compare"));
    v
}

/// The p-th percentile (p in [0, 100]) of already sorted, finite data; None when empty.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let p = p.clamp(0.0, 100.0);
    let rank = p / 100.0 * (sorted.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    let frac = rank - lo as f64;
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * frac)
}

/// The p-th percentile (p in [0, 100]); None when there is no finite sample.
pub fn percentile(samples: &[f64], p: f64) -> Option<f64> {
    percentile_sorted(&finite_sorted(samples), p)
}

pub fn median(samples: &[f64]) -> Option<f64> {
    percentile(samples, 50.0)
}

pub fn mean(samples: &[f64]) -> Option<f64> {
    let v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        None
    } else {
        Some(v.iter().sum::<f64>() / v.len() as f64)
    }
}

/// Five-number summary plus the share of box-plot outliers (beyond 1.5 × IQR from the quartiles),
/// the form study A reports RTTs and throughputs in.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub min: f64,
    pub q1: f64,
    pub median: f64,
    pub q3: f64,
    pub max: f64,
    pub mean: f64,
    pub p99: f64,
    /// Share (0..1) of samples outside [q1 − 1.5 IQR, q3 + 1.5 IQR].
    pub outlier_share: f64,
}

impl Summary {
    pub fn of(samples: &[f64]) -> Option<Summary> {
        let v = finite_sorted(samples);
        if v.is_empty() {
            return None;
        }
        let q1 = percentile_sorted(&v, 25.0)?;
        let q3 = percentile_sorted(&v, 75.0)?;
        let iqr = q3 - q1;
        let (lo, hi) = (q1 - 1.5 * iqr, q3 + 1.5 * iqr);
        let outliers = v.iter().filter(|&&x| x < lo || x > hi).count();
        Some(Summary {
            n: v.len(),
            min: v[0],
            q1,
            median: percentile_sorted(&v, 50.0)?,
            q3,
            max: v[v.len() - 1],
            mean: v.iter().sum::<f64>() / v.len() as f64,
            p99: percentile_sorted(&v, 99.0)?,
            outlier_share: outliers as f64 / v.len() as f64,
        })
    }

    pub fn iqr(&self) -> f64 {
        self.q3 - self.q1
    }
}

/// Empirical CDF as (value, cumulative share) steps, one point per distinct value.
pub fn ecdf(samples: &[f64]) -> Vec<(f64, f64)> {
    let v = finite_sorted(samples);
    let n = v.len() as f64;
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (i, x) in v.iter().enumerate() {
        let share = (i + 1) as f64 / n;
        match out.last_mut() {
            Some(last) if last.0 == *x => last.1 = share,
            _ => out.push((*x, share)),
        }
    }
    out
}

/// ECDF thinned to at most `max_points` steps (always keeping the last one) so that plots of
/// 100,000-sample runs stay small in a self-contained HTML file.
pub fn ecdf_thinned(samples: &[f64], max_points: usize) -> Vec<(f64, f64)> {
    let full = ecdf(samples);
    if full.len() <= max_points || max_points < 2 {
        return full;
    }
    let step = full.len() as f64 / (max_points - 1) as f64;
    let mut out: Vec<(f64, f64)> = (0..max_points - 1).map(|i| full[(i as f64 * step) as usize]).collect();
    out.push(*full.last().expect("non-empty"));
    out
}

/// Percentile from a histogram given as (upper bound of bucket, count) pairs in increasing order:
/// the upper bound of the bucket that holds the p-th percentile event (a conservative estimate,
/// as cyclictest reports).
pub fn histogram_percentile(buckets: &[(f64, u64)], p: f64) -> Option<f64> {
    let total: u64 = buckets.iter().map(|b| b.1).sum();
    if total == 0 {
        return None;
    }
    let want = (p.clamp(0.0, 100.0) / 100.0 * total as f64).ceil().max(1.0) as u64;
    let mut seen = 0u64;
    for (upper, count) in buckets {
        seen += count;
        if seen >= want {
            return Some(*upper);
        }
    }
    buckets.last().map(|b| b.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn percentiles_match_type7() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 50.0), Some(2.5));
        assert_eq!(percentile(&v, 25.0), Some(1.75));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 100.0), Some(4.0));
        assert_eq!(median(&[5.0]), Some(5.0));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN, 3.0, 1.0]), Some(2.0));
    }

    #[test]
    fn summary_counts_outliers() {
        let mut v: Vec<f64> = (1..=20).map(f64::from).collect();
        v.push(1000.0);
        let s = Summary::of(&v).unwrap();
        assert_eq!(s.n, 21);
        assert_eq!(s.median, 11.0);
        assert!((s.outlier_share - 1.0 / 21.0).abs() < 1e-12);
        assert_eq!(s.iqr(), 10.0);
    }

    #[test]
    fn ecdf_merges_ties() {
        let e = ecdf(&[1.0, 1.0, 2.0, 3.0]);
        assert_eq!(e, vec![(1.0, 0.5), (2.0, 0.75), (3.0, 1.0)]);
    }

    #[test]
    fn histogram_percentile_is_bucket_upper_bound() {
        let b = [(1.0, 90), (3.0, 9), (7.0, 1)];
        assert_eq!(histogram_percentile(&b, 50.0), Some(1.0));
        assert_eq!(histogram_percentile(&b, 99.0), Some(3.0));
        assert_eq!(histogram_percentile(&b, 100.0), Some(7.0));
        assert_eq!(histogram_percentile(&[(1.0, 0)], 50.0), None);
    }

    proptest! {
        #[test]
        fn percentile_is_monotone_and_bounded(v in proptest::collection::vec(-1e6f64..1e6, 1..200), a in 0.0f64..100.0, b in 0.0f64..100.0) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            let pl = percentile(&v, lo).unwrap();
            let ph = percentile(&v, hi).unwrap();
            prop_assert!(pl <= ph + 1e-9);
            let min = v.iter().cloned().fold(f64::INFINITY, f64::min);
            let max = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            prop_assert!(pl >= min - 1e-9 && ph <= max + 1e-9);
        }

        #[test]
        fn ecdf_is_a_cdf(v in proptest::collection::vec(-1e3f64..1e3, 1..300)) {
            let e = ecdf(&v);
            prop_assert!((e.last().unwrap().1 - 1.0).abs() < 1e-12);
            for w in e.windows(2) {
                prop_assert!(w[0].0 < w[1].0);
                prop_assert!(w[0].1 < w[1].1);
            }
            // The ECDF at x is the share of samples <= x.
            for (x, share) in &e {
                let count = v.iter().filter(|s| *s <= x).count() as f64 / v.len() as f64;
                prop_assert!((count - share).abs() < 1e-9);
            }
        }

        #[test]
        fn thinned_ecdf_keeps_ends(v in proptest::collection::vec(0f64..1e4, 1..2000), max in 2usize..50) {
            let t = ecdf_thinned(&v, max);
            prop_assert!(t.len() <= max.max(ecdf(&v).len().min(max)));
            prop_assert!((t.last().unwrap().1 - 1.0).abs() < 1e-12);
            let full = ecdf(&v);
            prop_assert_eq!(t[0], full[0]);
        }

        #[test]
        fn summary_quartiles_ordered(v in proptest::collection::vec(-1e6f64..1e6, 1..200)) {
            let s = Summary::of(&v).unwrap();
            prop_assert!(s.min <= s.q1 && s.q1 <= s.median && s.median <= s.q3 && s.q3 <= s.max);
            prop_assert!((0.0..=1.0).contains(&s.outlier_share));
        }
    }
}
