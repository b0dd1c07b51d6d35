//! Summary statistics of round-trip samples, reported the cyclictest way (min/avg/max and
//! percentiles), with the workspace's one percentile definition (rtslice-stats: linear
//! interpolation between closest ranks, documented there).

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RttSummary {
    pub count: usize,
    pub min_s: f64,
    pub mean_s: f64,
    pub p50_s: f64,
    pub p90_s: f64,
    pub p99_s: f64,
    pub p999_s: f64,
    pub max_s: f64,
}

impl RttSummary {
    /// `None` for no (finite) samples.
    pub fn of(values_s: &[f64]) -> Option<RttSummary> {
        let v = rtslice_stats::sorted_finite(values_s);
        let pct = |p: f64| rtslice_stats::percentile_sorted(&v, p);
        Some(RttSummary {
            count: v.len(),
            min_s: *v.first()?,
            mean_s: v.iter().sum::<f64>() / v.len() as f64,
            p50_s: pct(50.0)?,
            p90_s: pct(90.0)?,
            p99_s: pct(99.0)?,
            p999_s: pct(99.9)?,
            max_s: *v.last()?,
        })
    }

    /// The q-quantile (q in [0, 1]) of the samples; NaN when there is none.
    pub fn percentile(values_s: &[f64], q: f64) -> f64 {
        rtslice_stats::percentile(values_s, q * 100.0).unwrap_or(f64::NAN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Before rtslice-stats this test asserted nearest-rank values (p50 = 50, p99 = 99 of 1..=100);
    /// the workspace's one definition is type 7 (bench's tables assert it), which gives the values
    /// R and NumPy give.
    #[test]
    fn one_percentile_definition() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = RttSummary::of(&v).unwrap();
        assert_eq!((s.min_s, s.p50_s, s.max_s, s.mean_s), (1.0, 50.5, 100.0, 50.5));
        assert!((s.p99_s - 99.01).abs() < 1e-9, "{}", s.p99_s);
        assert_eq!(RttSummary::percentile(&[3.0, 1.0, 2.0], 0.5), 2.0);
        assert!(RttSummary::of(&[]).is_none());
    }
}
