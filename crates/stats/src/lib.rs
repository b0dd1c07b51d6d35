//! rtslice-stats: summary statistics with one documented percentile definition, used by every
//! crate that reports percentiles of samples (bench's tables and runs.csv, the emulator's
//! processing times, loadgen's round trips and the model validation).
//!
//! # The percentile definition
//!
//! Linear interpolation between closest ranks, Hyndman & Fan's type 7: for `n` sorted samples
//! `x[0] ≤ … ≤ x[n−1]` and `p` in [0, 100], the rank is `h = p/100 · (n − 1)` and the percentile is
//! `x[⌊h⌋] + (h − ⌊h⌋) · (x[⌊h⌋+1] − x[⌊h⌋])`.
//!
//! Why this one: it is the default of R, NumPy, Julia and spreadsheets, so every number in a
//! report can be recomputed by a reader from the raw CSV with whatever tool they have; it is
//! continuous in `p` and monotone, it never leaves [min, max], and p0/p50/p100 are the minimum,
//! the median and the maximum. (Nearest-rank always returns an observed value, but jumps between
//! samples and disagrees with those tools; with the thousands of samples per run this project
//! takes the two differ by less than one sample gap.) Bench's tables have always used it.
//!
//! Percentiles read from histograms are another thing: rtslice-trace's BPF histograms report the
//! upper edge of the bucket holding the percentile (never below the true value, at most one bucket
//! width above it), and bench's `histogram_percentile` does the same for log2 buckets.
//!
//! # Non-finite samples
//!
//! NaN and ±∞ are dropped before anything is computed: a NaN in a raw file must not poison a whole
//! table, and sorting uses [`f64::total_cmp`] so no input can make it panic.

use serde::{Deserialize, Serialize};

/// The finite samples, sorted ascending (the input every order statistic here starts from).
pub fn sorted_finite(samples: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// The p-th percentile (p in [0, 100], clamped) of data already sorted ascending, by the crate's
/// definition (type 7); None when empty. Callers that take many percentiles of one sample sort once
/// with [`sorted_finite`]; a NaN `p` is treated as 0.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let p = if p.is_nan() { 0.0 } else { p.clamp(0.0, 100.0) };
    let rank = p / 100.0 * (sorted.len() - 1) as f64;
    let lo = (rank.floor() as usize).min(sorted.len() - 1);
    let hi = (rank.ceil() as usize).min(sorted.len() - 1);
    let frac = rank - lo as f64;
    if frac == 0.0 || sorted[lo] == sorted[hi] {
        // Exact at sample ranks (and no ∞·0 for equal neighbours).
        return Some(sorted[lo]);
    }
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * frac)
}

/// The p-th percentile (p in [0, 100]) of the finite samples; None when there are none.
pub fn percentile(samples: &[f64], p: f64) -> Option<f64> {
    percentile_sorted(&sorted_finite(samples), p)
}

pub fn median(samples: &[f64]) -> Option<f64> {
    percentile(samples, 50.0)
}

/// Arithmetic mean of the finite samples; None when there are none.
pub fn mean(samples: &[f64]) -> Option<f64> {
    let (sum, n) = samples.iter().filter(|x| x.is_finite()).fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// Smallest finite sample.
pub fn min(samples: &[f64]) -> Option<f64> {
    samples.iter().copied().filter(|x| x.is_finite()).min_by(f64::total_cmp)
}

/// Largest finite sample.
pub fn max(samples: &[f64]) -> Option<f64> {
    samples.iter().copied().filter(|x| x.is_finite()).max_by(f64::total_cmp)
}

/// Interquartile range, p75 − p25.
pub fn iqr(samples: &[f64]) -> Option<f64> {
    let v = sorted_finite(samples);
    Some(percentile_sorted(&v, 75.0)? - percentile_sorted(&v, 25.0)?)
}

/// Five-number summary plus mean, p99 and the share of box-plot outliers (beyond 1.5 × IQR from
/// the quartiles), the form study A reports RTTs and throughputs in.
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
    /// None when there is no finite sample.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        let v = sorted_finite(samples);
        Summary::of_sorted(&v)
    }

    /// The summary of finite data already sorted ascending (see [`sorted_finite`]).
    pub fn of_sorted(v: &[f64]) -> Option<Summary> {
        let (first, last) = (*v.first()?, *v.last()?);
        let q1 = percentile_sorted(v, 25.0)?;
        let q3 = percentile_sorted(v, 75.0)?;
        let iqr = q3 - q1;
        let (lo, hi) = (q1 - 1.5 * iqr, q3 + 1.5 * iqr);
        let outliers = v.iter().filter(|&&x| x < lo || x > hi).count();
        Some(Summary {
            n: v.len(),
            min: first,
            q1,
            median: percentile_sorted(v, 50.0)?,
            q3,
            max: last,
            mean: v.iter().sum::<f64>() / v.len() as f64,
            p99: percentile_sorted(v, 99.0)?,
            outlier_share: outliers as f64 / v.len() as f64,
        })
    }

    pub fn iqr(&self) -> f64 {
        self.q3 - self.q1
    }
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

    /// Values R's `quantile(x, type = 7)` and NumPy's `percentile` give.
    #[test]
    fn known_values_of_other_tools() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.5));
        assert!((percentile(&v, 99.0).unwrap() - 99.01).abs() < 1e-9);
        assert!((percentile(&v, 90.0).unwrap() - 90.1).abs() < 1e-9);
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 50.0), Some(2.0));
        assert_eq!(percentile(&[10.0, 20.0], 10.0), Some(11.0));
    }

    #[test]
    fn non_finite_input_never_panics() {
        let v = [f64::NAN, f64::INFINITY, 2.0, f64::NEG_INFINITY, 1.0];
        assert_eq!(percentile(&v, 100.0), Some(2.0));
        assert_eq!(percentile(&[f64::NAN], 50.0), None);
        assert_eq!(percentile(&[1.0, 2.0], f64::NAN), Some(1.0));
        assert_eq!(mean(&v), Some(1.5));
        assert_eq!((min(&v), max(&v)), (Some(1.0), Some(2.0)));
        assert_eq!(mean(&[]), None);
        assert!(Summary::of(&[f64::NAN]).is_none());
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
        assert_eq!(iqr(&v), Some(10.0));
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

        /// Exact on known inputs: at a sample's rank the percentile is that sample, and the ends
        /// are the minimum and the maximum, whatever the order the samples came in.
        #[test]
        fn percentile_is_exact_at_sample_ranks(mut v in proptest::collection::vec(-1e6f64..1e6, 2..200), seed in 0usize..1000) {
            let sorted = sorted_finite(&v);
            let n = sorted.len();
            let k = seed % n;
            let p = k as f64 * 100.0 / (n - 1) as f64;
            let len = v.len();
            v.rotate_left(seed % len);
            // p·(n−1)/100 may land a rounding error away from k; the result may move by as much.
            let got = percentile(&v, p).unwrap();
            prop_assert!((got - sorted[k]).abs() <= 1e-9 * sorted[k].abs().max(1.0), "{} vs {}", got, sorted[k]);
            prop_assert_eq!(percentile(&v, 0.0), Some(sorted[0]));
            prop_assert_eq!(percentile(&v, 100.0), Some(sorted[n - 1]));
        }

        #[test]
        fn nan_anywhere_changes_nothing(v in proptest::collection::vec(-1e3f64..1e3, 1..100), at in 0usize..100, p in 0.0f64..100.0) {
            let mut with_nan = v.clone();
            with_nan.insert(at % (v.len() + 1), f64::NAN);
            prop_assert_eq!(percentile(&with_nan, p), percentile(&v, p));
        }

        #[test]
        fn summary_quartiles_ordered(v in proptest::collection::vec(-1e6f64..1e6, 1..200)) {
            let s = Summary::of(&v).unwrap();
            prop_assert!(s.min <= s.q1 && s.q1 <= s.median && s.median <= s.q3 && s.q3 <= s.max);
            prop_assert!((0.0..=1.0).contains(&s.outlier_share));
        }
    }
}
