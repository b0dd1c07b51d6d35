//! The metric families: names, help texts, types, the latency buckets, and how a collected
//! [`Snapshot`](crate::collect::Snapshot) is written through prometheus-client's encoder.

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use rtslice_trace::hist::{FineBucket, FINE_SUB_BITS};

/// Prometheus buckets per power of two of the latency histograms.
pub const LATENCY_BUCKETS_PER_OCTAVE: u32 = 4;
/// 2^10 ns ≈ 1 µs …
const FIRST_OCTAVE: u32 = 10;
/// … to 2^27 ns ≈ 134 ms (the last finite bound; everything above lands in +Inf).
const LAST_OCTAVE: u32 = 27;

/// Upper bounds (ns) of the latency histograms' buckets: log-spaced from 1.024 µs to 134 ms, four
/// per octave at 1, 1.25, 1.5 and 1.75 × 2^k ns. Each bound is an edge of the tracer's fine
/// histogram (16 buckets per octave), so every Prometheus bucket is the exact sum of fine buckets:
/// the exported counts are what the kernel counted, not a re-binning estimate.
pub fn latency_bounds_ns() -> Vec<u64> {
    let steps = LATENCY_BUCKETS_PER_OCTAVE as u64;
    let sub = 1u64 << FINE_SUB_BITS;
    let mut out = Vec::new();
    for k in FIRST_OCTAVE..LAST_OCTAVE {
        for j in 0..steps {
            // (sub + j·sub/steps) / sub × 2^k: a fine edge because sub/steps is whole.
            out.push(((sub + j * sub / steps) << k) >> FINE_SUB_BITS);
        }
    }
    out.push(1 << LAST_OCTAVE);
    out
}

/// A latency histogram in the Prometheus buckets: per-bucket (not cumulative) counts, the last one
/// being +Inf.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LatencyHist {
    pub count: u64,
    pub sum_ns: u64,
    pub buckets: Vec<u64>,
}

impl LatencyHist {
    pub fn empty(nbounds: usize) -> LatencyHist {
        LatencyHist { count: 0, sum_ns: 0, buckets: vec![0; nbounds + 1] }
    }

    /// Adds a thread's fine histogram: each fine bucket [lo, hi) goes to the first bound ≥ hi.
    pub fn add_fine(&mut self, bounds: &[u64], events: u64, sum_ns: u64, fine: &[FineBucket]) {
        self.count += events;
        self.sum_ns += sum_ns;
        for b in fine {
            let i = bounds.partition_point(|&edge| edge < b.hi_ns);
            self.buckets[i] += b.count;
        }
    }

    pub fn add(&mut self, other: &LatencyHist) {
        self.count += other.count;
        self.sum_ns += other.sum_ns;
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
    }
}

pub(crate) type Labels = Vec<(&'static str, String)>;

/// Writes one family: descriptor, then one sample per label set.
pub(crate) struct Family<'a> {
    pub name: &'a str,
    pub help: &'a str,
}

impl Family<'_> {
    pub fn counters<V: prometheus_client::encoding::EncodeCounterValue>(
        &self,
        encoder: &mut DescriptorEncoder,
        series: impl IntoIterator<Item = (Labels, V)>,
    ) -> std::fmt::Result {
        let mut m = encoder.encode_descriptor(self.name, self.help, None, MetricType::Counter)?;
        for (labels, v) in series {
            // A series without labels is written bare (`name 1`, not `name{} 1`).
            if labels.is_empty() {
                m.encode_counter::<NoLabelSet, V, u64>(&v, None)?;
            } else {
                m.encode_family(&labels)?.encode_counter::<NoLabelSet, V, u64>(&v, None)?;
            }
        }
        Ok(())
    }

    pub fn gauges<V: prometheus_client::encoding::EncodeGaugeValue>(
        &self,
        encoder: &mut DescriptorEncoder,
        series: impl IntoIterator<Item = (Labels, V)>,
    ) -> std::fmt::Result {
        let mut m = encoder.encode_descriptor(self.name, self.help, None, MetricType::Gauge)?;
        for (labels, v) in series {
            if labels.is_empty() {
                m.encode_gauge(&v)?;
            } else {
                m.encode_family(&labels)?.encode_gauge(&v)?;
            }
        }
        Ok(())
    }

    pub fn histograms<'h>(
        &self,
        encoder: &mut DescriptorEncoder,
        bounds: &[u64],
        series: impl IntoIterator<Item = (Labels, &'h LatencyHist)>,
    ) -> std::fmt::Result {
        let mut m = encoder.encode_descriptor(self.name, self.help, None, MetricType::Histogram)?;
        for (labels, h) in series {
            // f64::MAX is how prometheus-client spells the +Inf bucket.
            let buckets: Vec<(f64, u64)> =
                bounds.iter().map(|&b| b as f64 / 1e9).chain(std::iter::once(f64::MAX)).zip(h.buckets.iter().copied()).collect();
            m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(h.sum_ns as f64 / 1e9, h.count, &buckets, None)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtslice_trace::hist::{fine_bounds, fine_index, sparse, FINE_SLOTS};

    #[test]
    fn bounds_are_log_spaced_fine_edges_from_1us_to_100ms() {
        let b = latency_bounds_ns();
        assert_eq!(b.first(), Some(&1024));
        assert_eq!(b.last(), Some(&(1 << 27)));
        assert!(b.last().copied().unwrap() >= 100_000_000);
        assert_eq!(b.len(), (LAST_OCTAVE - FIRST_OCTAVE) as usize * 4 + 1);
        for w in b.windows(2) {
            let ratio = w[1] as f64 / w[0] as f64;
            assert!(ratio > 1.14 && ratio <= 1.25 + 1e-9, "{w:?}");
        }
        for &edge in &b {
            // The bound is the lower edge of a fine bucket, so no fine bucket straddles it.
            assert_eq!(fine_bounds(fine_index(edge)).0, edge, "{edge} is not a fine edge");
        }
    }

    #[test]
    fn rebinning_is_exact_at_every_bound() {
        let bounds = latency_bounds_ns();
        // One event in every fine bucket.
        let fine = vec![1u64; FINE_SLOTS];
        let mut h = LatencyHist::empty(bounds.len());
        h.add_fine(&bounds, FINE_SLOTS as u64, 0, &sparse(&fine));
        let mut cum = 0;
        for (i, &edge) in bounds.iter().enumerate() {
            cum += h.buckets[i];
            // Fine buckets entirely below the bound: exactly those with index < fine_index(edge).
            assert_eq!(cum, fine_index(edge) as u64, "bound {edge}");
        }
        assert_eq!(cum + h.buckets[bounds.len()], FINE_SLOTS as u64);
    }
}
