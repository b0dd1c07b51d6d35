//! Order statistics for reports: percentiles, median, IQR and box-plot outliers come from
//! rtslice-stats (one percentile definition for the whole workspace: linear interpolation between
//! closest ranks, type 7, documented there); ECDFs for plots and percentiles of bucketed
//! histograms are here.
//!
//! Everything here is pure and deterministic. Non-finite samples are dropped: a NaN in a raw file
//! must not poison a whole table.

pub use rtslice_stats::{mean, median, percentile, percentile_sorted, sorted_finite, Summary};

/// Empirical CDF as (value, cumulative share) steps, one point per distinct value.
pub fn ecdf(samples: &[f64]) -> Vec<(f64, f64)> {
    let v = sorted_finite(samples);
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

/// Bucket-edge percentile of a histogram given as (upper bound of bucket, count) pairs in increasing
/// order: the upper bound of the bucket that holds the p-th percentile event (a conservative
/// estimate, as cyclictest and rtslice-trace report). Not rtslice-stats' definition on purpose: the
/// samples are gone, only their buckets are left.
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
    }
}
