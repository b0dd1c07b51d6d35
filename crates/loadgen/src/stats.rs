//! Summary statistics of round-trip samples, reported the cyclictest way (min/avg/max and percentiles).

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    pub count: usize,
    pub min_s: f64,
    pub mean_s: f64,
    pub p50_s: f64,
    pub p90_s: f64,
    pub p99_s: f64,
    pub p999_s: f64,
    pub max_s: f64,
}

/// Nearest-rank percentile of sorted data (`q` in [0, 1]).
pub fn percentile_sorted(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Summary {
    /// `None` for no samples.
    pub fn of(values_s: &[f64]) -> Option<Summary> {
        if values_s.is_empty() {
            return None;
        }
        let mut v = values_s.to_vec();
        v.sort_by(f64::total_cmp);
        Some(Summary {
            count: v.len(),
            min_s: v[0],
            mean_s: v.iter().sum::<f64>() / v.len() as f64,
            p50_s: percentile_sorted(&v, 0.5),
            p90_s: percentile_sorted(&v, 0.9),
            p99_s: percentile_sorted(&v, 0.99),
            p999_s: percentile_sorted(&v, 0.999),
            max_s: v[v.len() - 1],
        })
    }

    pub fn percentile(values_s: &[f64], q: f64) -> f64 {
        let mut v = values_s.to_vec();
        v.sort_by(f64::total_cmp);
        percentile_sorted(&v, q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Summary::of(&v).unwrap();
        assert_eq!((s.min_s, s.p50_s, s.p99_s, s.max_s, s.mean_s), (1.0, 50.0, 99.0, 100.0, 50.5));
        assert_eq!(Summary::percentile(&[3.0, 1.0, 2.0], 0.5), 2.0);
        assert!(Summary::of(&[]).is_none());
    }
}
