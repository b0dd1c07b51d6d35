//! Histogram arithmetic shared by the BPF program (see `bpf/rtlat.h`) and the reports.
//!
//! Two forms per thread and per latency kind:
//! - `log2_us`: the studies' buckets. Slot k counts latencies of ⌊ns/1000⌋ µs in [2^k, 2^(k+1)), slot 0
//!   counts 0–1 µs (as BCC's runqlat). Exact: the kernel computes the slot from the measured value.
//! - `fine`: log-linear buckets in ns. Below 16 ns one bucket per ns; above, 16 buckets per power of
//!   two. A bucket's width is at most 1/16 of its lower edge, so a percentile reported as the upper
//!   edge of its bucket is never below the true value and at most 6.25 % above it (+1 ns).

use serde::{Deserialize, Serialize};

pub const LOG2_SLOTS: usize = 27;
pub const FINE_SUB_BITS: u32 = 4;
pub const FINE_MAX_MSB: u32 = 37;
pub const FINE_SLOTS: usize = ((FINE_MAX_MSB - FINE_SUB_BITS + 1) as usize) * (1 << FINE_SUB_BITS) + (1 << FINE_SUB_BITS) + 1;
/// Worst-case relative over-estimate of a percentile taken from the fine histogram.
pub const FINE_RELATIVE_ERROR: f64 = 1.0 / (1u64 << FINE_SUB_BITS) as f64;

/// The studies' log2 slot of a latency in ns (what the BPF program computes).
pub fn log2_slot(ns: u64) -> usize {
    let us = ns / 1000;
    let slot = if us == 0 { 0 } else { 63 - us.leading_zeros() as usize };
    slot.min(LOG2_SLOTS - 1)
}

/// Fine bucket index of a latency in ns (what the BPF program computes).
pub fn fine_index(ns: u64) -> usize {
    let sub = 1u64 << FINE_SUB_BITS;
    if ns < sub {
        return ns as usize;
    }
    let msb = 63 - ns.leading_zeros();
    if msb > FINE_MAX_MSB {
        return FINE_SLOTS - 1;
    }
    let idx = (((msb - FINE_SUB_BITS + 1) as u64) << FINE_SUB_BITS) + ((ns >> (msb - FINE_SUB_BITS)) & (sub - 1));
    idx as usize
}

/// The ns range [lo, hi) of a fine bucket; the overflow bucket's hi is u64::MAX.
pub fn fine_bounds(idx: usize) -> (u64, u64) {
    let sub = 1u64 << FINE_SUB_BITS;
    if idx == FINE_SLOTS - 1 {
        return (1u64 << (FINE_MAX_MSB + 1), u64::MAX);
    }
    let idx = idx as u64;
    if idx < sub {
        return (idx, idx + 1);
    }
    let octave = idx / sub; // = msb - SUB_BITS + 1
    let shift = octave - 1; // = msb - SUB_BITS
    let mantissa = sub + idx % sub;
    (mantissa << shift, (mantissa + 1) << shift)
}

/// The studies' label of a log2 slot: "0-1", "2-3", "4-7", …
pub fn log2_label(slot: usize) -> String {
    if slot == 0 {
        "0-1".to_string()
    } else {
        format!("{}-{}", 1u64 << slot, (1u64 << (slot + 1)) - 1)
    }
}

/// One non-empty fine bucket: `count` latencies in [lo_ns, hi_ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FineBucket {
    pub lo_ns: u64,
    pub hi_ns: u64,
    pub count: u64,
}

/// Sparse form of a dense fine histogram.
pub fn sparse(fine: &[u64]) -> Vec<FineBucket> {
    fine.iter()
        .enumerate()
        .filter(|(_, &c)| c > 0)
        .map(|(i, &count)| {
            let (lo_ns, hi_ns) = fine_bounds(i);
            FineBucket { lo_ns, hi_ns, count }
        })
        .collect()
}

/// Adds `b` into `a` (both sorted by lo_ns), keeping the result sorted.
pub fn merge_sparse(a: &mut Vec<FineBucket>, b: &[FineBucket]) {
    for bucket in b {
        match a.binary_search_by_key(&bucket.lo_ns, |x| x.lo_ns) {
            Ok(i) => a[i].count += bucket.count,
            Err(i) => a.insert(i, *bucket),
        }
    }
}

/// The q-quantile (0 < q ≤ 1) in ns: the upper edge (inclusive, hi-1) of the bucket holding the
/// ⌈q·n⌉-th smallest latency, capped by the exact maximum. None when there are no events.
/// A bucket-edge percentile, deliberately not rtslice-stats' interpolated one: the kernel keeps
/// only bucket counts, and the upper edge is the honest bound (never below the true value).
pub fn quantile_ns(buckets: &[FineBucket], q: f64, max_ns: u64) -> Option<u64> {
    let n: u64 = buckets.iter().map(|b| b.count).sum();
    if n == 0 {
        return None;
    }
    let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
    let mut seen = 0;
    for b in buckets {
        seen += b.count;
        if seen >= rank {
            return Some(b.hi_ns.saturating_sub(1).min(max_ns).max(b.lo_ns));
        }
    }
    Some(max_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_slots_match_the_studies_buckets() {
        assert_eq!(log2_slot(0), 0);
        assert_eq!(log2_slot(1_999), 0); // 1.999 µs is "1 µs" → 0–1
        assert_eq!(log2_slot(2_000), 1);
        assert_eq!(log2_slot(3_999), 1);
        assert_eq!(log2_slot(4_000), 2);
        assert_eq!(log2_slot(8_000), 3);
        assert_eq!(log2_slot(16_000), 4);
        assert_eq!(log2_slot(u64::MAX), LOG2_SLOTS - 1);
        assert_eq!(log2_label(0), "0-1");
        assert_eq!(log2_label(3), "8-15");
    }

    #[test]
    fn fine_buckets_tile_the_line_with_bounded_width() {
        let mut next_lo = 0;
        for idx in 0..FINE_SLOTS - 1 {
            let (lo, hi) = fine_bounds(idx);
            assert_eq!(lo, next_lo, "bucket {idx} leaves a gap");
            assert!(hi > lo);
            if lo >= 16 {
                assert!((hi - lo) as f64 <= lo as f64 * FINE_RELATIVE_ERROR, "bucket {idx} too wide");
            }
            assert_eq!(fine_index(lo), idx);
            assert_eq!(fine_index(hi - 1), idx);
            next_lo = hi;
        }
        assert_eq!(fine_bounds(FINE_SLOTS - 1).0, next_lo);
        assert_eq!(fine_index(u64::MAX), FINE_SLOTS - 1);
        assert_eq!(FINE_SLOTS, 561); // must equal bpf/rtlat.h
    }

    #[test]
    fn quantiles_are_upper_edges_within_the_stated_error() {
        // Deterministic pseudo-random latencies from 1 ns to ~50 ms.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut values = Vec::new();
        let mut dense = vec![0u64; FINE_SLOTS];
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = 1 + (x % 50_000_000) / (1 + (x >> 40) % 1000);
            values.push(v);
            dense[fine_index(v)] += 1;
        }
        values.sort_unstable();
        let max = *values.last().unwrap();
        let buckets = sparse(&dense);
        for q in [0.5, 0.9, 0.99, 0.999, 1.0] {
            let truth = values[((q * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1];
            let est = quantile_ns(&buckets, q, max).unwrap();
            assert!(est >= truth, "q={q}: {est} < {truth}");
            assert!(est as f64 <= truth as f64 * (1.0 + FINE_RELATIVE_ERROR) + 1.0, "q={q}: {est} vs {truth}");
        }
        assert_eq!(quantile_ns(&buckets, 1.0, max), Some(max));
        assert_eq!(quantile_ns(&[], 0.5, 0), None);
    }

    #[test]
    fn merging_sparse_histograms_adds_counts() {
        let mut a = sparse(&{
            let mut d = vec![0u64; FINE_SLOTS];
            d[3] = 2;
            d[100] = 1;
            d
        });
        let b = sparse(&{
            let mut d = vec![0u64; FINE_SLOTS];
            d[100] = 4;
            d[50] = 1;
            d
        });
        merge_sparse(&mut a, &b);
        assert_eq!(a.iter().map(|x| x.count).collect::<Vec<_>>(), vec![2, 1, 5]);
        assert!(a.windows(2).all(|w| w[0].lo_ns < w[1].lo_ns));
    }
}
