//! Numerology, MCS, transport-block size and code-block segmentation (TS 38.211/38.212/38.214),
//! and Gray-mapped QAM with a max-log demapper. Pure functions; the cost lives in `chain`.

use rustfft::num_complex::Complex32;

/// OFDM symbols per TTI (LTE subframe with normal CP, NR slot).
pub const SYMBOLS: usize = 14;
/// Symbols that carry DMRS pilots (one early, one late, as PUSCH with an additional DMRS).
pub const DMRS_SYMBOLS: [usize; 2] = [3, 10];
/// Data symbols per TTI.
pub const DATA_SYMBOLS: usize = SYMBOLS - DMRS_SYMBOLS.len();
/// Subcarriers per PRB.
pub const SC_PER_PRB: usize = 12;

/// TS 38.214 Table 5.1.3.1-1 (64QAM): (bits per symbol Qm, target code rate × 1024).
pub const MCS_TABLE: [(u8, u16); 29] = [
    (2, 120), (2, 157), (2, 193), (2, 251), (2, 308), (2, 379), (2, 449), (2, 526), (2, 602), (2, 679),
    (4, 340), (4, 378), (4, 434), (4, 490), (4, 553), (4, 616), (4, 658),
    (6, 438), (6, 466), (6, 517), (6, 567), (6, 616), (6, 666), (6, 719), (6, 772), (6, 822), (6, 873),
    (6, 910), (6, 948),
];

/// TS 38.214 Table 5.1.3.2-1: TBS for N_info ≤ 3824.
const TBS_SMALL: [usize; 93] = [
    24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136, 144, 152, 160, 168, 176, 184, 192,
    208, 224, 240, 256, 272, 288, 304, 320, 336, 352, 368, 384, 408, 432, 456, 480, 504, 528, 552, 576,
    608, 640, 672, 704, 736, 768, 808, 848, 888, 928, 984, 1032, 1064, 1128, 1160, 1192, 1224, 1256,
    1288, 1320, 1352, 1416, 1480, 1544, 1608, 1672, 1736, 1800, 1864, 1928, 2024, 2088, 2152, 2216,
    2280, 2408, 2472, 2536, 2600, 2664, 2728, 2792, 2856, 2976, 3104, 3240, 3368, 3496, 3624, 3752,
    3824,
];

pub fn mcs_params(mcs: u8) -> Option<(u8, f64)> {
    MCS_TABLE.get(mcs as usize).map(|&(qm, r)| (qm, r as f64 / 1024.0))
}

/// Resource elements carrying data in `n_prb` PRBs during one TTI.
pub fn data_res(n_prb: usize) -> usize {
    n_prb * SC_PER_PRB * DATA_SYMBOLS
}

/// Transport-block size in bits by TS 38.214 §5.1.3.2 (one layer). LTE's 36.213 tables differ by a
/// few percent; one formula for both keeps the throughput arithmetic comparable across profiles.
pub fn tbs(n_prb: usize, mcs: u8) -> usize {
    let Some((qm, r)) = mcs_params(mcs) else { return 0 };
    let n_re = (SC_PER_PRB * DATA_SYMBOLS).min(156) * n_prb;
    let n_info = n_re as f64 * r * qm as f64;
    if n_info <= 0.0 {
        return 0;
    }
    if n_info <= 3824.0 {
        let n = ((n_info.log2().floor() as i32) - 6).max(3);
        let p = 2f64.powi(n);
        let n_info_q = (p * (n_info / p).floor()).max(24.0) as usize;
        return *TBS_SMALL.iter().find(|&&t| t >= n_info_q).unwrap_or(&3824);
    }
    let n = ((n_info - 24.0).log2().floor() as i32) - 5;
    let p = 2f64.powi(n);
    let n_info_q = (p * ((n_info - 24.0) / p).round()).max(3840.0);
    let ceil_div = |a: f64, b: f64| (a / b).ceil();
    if r <= 0.25 {
        let c = ceil_div(n_info_q + 24.0, 3816.0);
        (8.0 * c * ceil_div(n_info_q + 24.0, 8.0 * c) - 24.0) as usize
    } else if n_info_q > 8424.0 {
        let c = ceil_div(n_info_q + 24.0, 8424.0);
        (8.0 * c * ceil_div(n_info_q + 24.0, 8.0 * c) - 24.0) as usize
    } else {
        (8.0 * ceil_div(n_info_q + 24.0, 8.0) - 24.0) as usize
    }
}

/// One code block after segmentation: `k` information bits (CRCs included) sent as `e` coded bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CodeBlock {
    pub k: usize,
    pub e: usize,
}

/// TS 38.212 §5.2.2 segmentation (base graph chosen as in §7.2.2), with rate matching that spreads
/// the `g` available coded bits evenly over the blocks.
pub fn segment(tbs: usize, rate: f64, g: usize) -> Vec<CodeBlock> {
    if tbs == 0 || g == 0 {
        return Vec::new();
    }
    let bg2 = tbs <= 292 || (tbs <= 3824 && rate <= 0.67) || rate <= 0.25;
    let kcb = if bg2 { 3840 } else { 8448 };
    let b = tbs + 24;
    let (c, b_total) = if b <= kcb { (1, b) } else {
        let c = b.div_ceil(kcb - 24);
        (c, b + 24 * c)
    };
    let k = b_total.div_ceil(c);
    (0..c)
        .map(|i| {
            let e = g / c + usize::from(i < g % c);
            // Never fewer coded bits than information bits plus a minimum of parity.
            CodeBlock { k, e: e.max(k + k / 16 + 8) }
        })
        .collect()
}

/// FFT size for a carrier of `n_prb` PRBs: the smallest power of two whose 85% band holds the
/// occupied subcarriers (25 PRB → 512, 50 → 1024, 100 → 2048, 273 → 4096, as the real stacks use).
pub fn fft_size(n_prb: usize) -> usize {
    let occupied = (n_prb * SC_PER_PRB) as f64 / 0.85;
    (occupied.ceil() as usize).next_power_of_two().max(128)
}

/// Gray-mapped square QAM with unit average energy: `qm/2` bits per dimension.
#[derive(Debug, Clone)]
pub struct Qam {
    pub qm: usize,
    levels: Vec<f32>,
    /// bits of each level (MSB first), per dimension
    level_bits: Vec<Vec<u8>>,
}

impl Qam {
    pub fn new(qm: usize) -> Qam {
        assert!(qm >= 2 && qm % 2 == 0, "QAM order must be even");
        let m = qm / 2;
        let l = 1usize << m;
        let scale = (3.0 / (2.0 * ((l * l) as f64 - 1.0))).sqrt() as f32;
        let mut levels = vec![0f32; l];
        let mut level_bits = vec![vec![0u8; m]; l];
        for g in 0..l {
            // gray code g ↔ binary level index
            let mut idx = g;
            let mut shift = g >> 1;
            while shift != 0 {
                idx ^= shift;
                shift >>= 1;
            }
            levels[g] = (2.0 * idx as f32 - (l as f32 - 1.0)) * scale;
            for (j, bit) in level_bits[g].iter_mut().enumerate() {
                *bit = ((g >> (m - 1 - j)) & 1) as u8;
            }
        }
        Qam { qm, levels, level_bits }
    }

    fn pam(&self, bits: &[u8]) -> f32 {
        let g = bits.iter().fold(0usize, |acc, &b| (acc << 1) | b as usize);
        self.levels[g]
    }

    /// Maps `qm` bits to one symbol (first half of the bits → I, second half → Q).
    pub fn modulate(&self, bits: &[u8]) -> Complex32 {
        let m = self.qm / 2;
        Complex32::new(self.pam(&bits[..m]), self.pam(&bits[m..self.qm]))
    }

    /// Max-log LLRs (positive = bit 0) of one equalised symbol `z` whose effective noise variance is
    /// `noise_var`; writes `qm` values.
    pub fn demap(&self, z: Complex32, noise_var: f32, out: &mut [f32]) {
        let m = self.qm / 2;
        let inv = 1.0 / noise_var.max(1e-9);
        for (dim, y) in [z.re, z.im].into_iter().enumerate() {
            for j in 0..m {
                let mut d0 = f32::INFINITY;
                let mut d1 = f32::INFINITY;
                for (g, &x) in self.levels.iter().enumerate() {
                    let d = (y - x) * (y - x);
                    if self.level_bits[g][j] == 0 {
                        d0 = d0.min(d);
                    } else {
                        d1 = d1.min(d);
                    }
                }
                out[dim * m + j] = (d1 - d0) * inv;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tbs_matches_spec_examples() {
        // Small-TBS branch and large branch; values worked by hand from TS 38.214 §5.1.3.2.
        assert_eq!(tbs(1, 0), 32); // N_info = 144·0.117·2 = 33.75 → quantised 32
        let t = tbs(25, 16);
        assert!(t > 9000 && t < 9800, "25 PRB MCS16 TBS {t}");
        let t = tbs(100, 28);
        assert!(t > 75_000 && t < 85_000, "100 PRB MCS28 TBS {t}");
        assert!(tbs(50, 10) < tbs(50, 20));
    }

    #[test]
    fn segmentation_counts_code_blocks_as_38_212() {
        let cbs = segment(75_000, 0.9, 90_000);
        assert_eq!(cbs.len(), (75_000 + 24usize).div_ceil(8424));
        assert_eq!(segment(1000, 0.5, 2000).len(), 1);
    }

    #[test]
    fn fft_sizes_match_the_real_stacks() {
        assert_eq!(fft_size(25), 512);
        assert_eq!(fft_size(50), 1024);
        assert_eq!(fft_size(100), 2048);
        assert_eq!(fft_size(273), 4096);
    }

    #[test]
    fn qam_roundtrip_without_noise() {
        for qm in [2, 4, 6] {
            let q = Qam::new(qm);
            let mut llr = vec![0f32; qm];
            for v in 0..(1 << qm) {
                let bits: Vec<u8> = (0..qm).map(|j| ((v >> j) & 1) as u8).collect();
                q.demap(q.modulate(&bits), 0.01, &mut llr);
                let back: Vec<u8> = llr.iter().map(|&l| u8::from(l < 0.0)).collect();
                assert_eq!(bits, back, "qm {qm}");
            }
        }
    }
}
