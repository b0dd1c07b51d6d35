//! The PHY chain of one TTI, computed for real: uplink FFT per symbol × antenna, least-squares
//! channel estimation on DMRS with frequency smoothing, noise estimation, MRC equalisation,
//! max-log demapping, LDPC decoding per code block and a CRC-equivalent check; downlink payload
//! generation, LDPC encoding, QAM modulation, resource mapping with precoding, IFFT.
//!
//! Uplink samples are synthesised once at start (the "radio"): random payload, encoded, modulated,
//! sent through a frequency-selective Rayleigh channel per antenna plus AWGN at the configured SNR,
//! and brought to the time domain. Only the receiver's work is timed, as in a real base station.

use std::ops::Range;
use std::sync::Arc;

use rustfft::num_complex::Complex32;
use rustfft::{Fft, FftPlanner};

use crate::ldpc::{Decoded, DecoderWork, Ldpc, Rng};
use crate::phy::{self, CodeBlock, Qam, DATA_SYMBOLS, DMRS_SYMBOLS, SC_PER_PRB, SYMBOLS};
use crate::EmuError;

/// What the carrier looks like and how much of it one TTI uses.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Carrier {
    /// Carrier bandwidth in PRBs (sets the FFT size).
    pub prb: usize,
    /// PRBs scheduled per TTI in each direction (traffic demand).
    pub prb_scheduled: usize,
    pub mcs: u8,
    pub antennas: usize,
    pub snr_db: f64,
    pub max_iterations: u32,
}

/// Immutable PHY set-up shared by all threads of one emulated cell.
pub struct Phy {
    pub carrier: Carrier,
    pub nfft: usize,
    pub qm: usize,
    pub rate: f64,
    pub tbs: usize,
    pub cbs: Vec<CodeBlock>,
    cb_offsets: Vec<usize>,
    codes: Vec<Arc<Ldpc>>,
    qam: Qam,
    fft: Arc<dyn Fft<f32>>,
    ifft: Arc<dyn Fft<f32>>,
    bins: Vec<usize>,
    pilots: [Vec<Complex32>; 2],
    dl_weights: Vec<Complex32>,
    coded_bits: usize,
}

/// One synthesised uplink TTI: time-domain samples per antenna and symbol, and the payload sent
/// (what the CRC would confirm).
pub struct UlSubframe {
    pub time: Vec<Complex32>,
    pub info: Vec<Vec<u8>>,
}

/// Per-thread scratch memory: nothing is allocated per TTI on the hot path.
#[derive(Default)]
pub struct Scratch {
    fft: Vec<Complex32>,
    hest: Vec<Complex32>,
    pub llr: Vec<f32>,
    bits: Vec<u8>,
    cw: Vec<u8>,
    plane: Vec<Complex32>,
    pub dec: DecoderWork,
}

/// Result of decoding a whole uplink transport block.
#[derive(Debug, Clone, Copy, Default)]
pub struct UlResult {
    pub iterations_sum: u32,
    pub iterations_max: u32,
    pub code_blocks: u32,
    pub ok: bool,
}

impl Phy {
    pub fn new(carrier: Carrier) -> Result<Phy, EmuError> {
        let (qm, rate) = phy::mcs_params(carrier.mcs)
            .ok_or_else(|| EmuError::Invalid(format!("MCS {} is outside 0..=28 (TS 38.214 Table 5.1.3.1-1)", carrier.mcs)))?;
        if carrier.prb == 0 || carrier.prb > 275 {
            return Err(EmuError::Invalid(format!("{} PRB is outside 1..=275", carrier.prb)));
        }
        if carrier.prb_scheduled == 0 || carrier.prb_scheduled > carrier.prb {
            return Err(EmuError::Invalid(format!(
                "{} scheduled PRB must be within 1..={} (the carrier)",
                carrier.prb_scheduled, carrier.prb
            )));
        }
        if carrier.antennas == 0 || carrier.antennas > 8 {
            return Err(EmuError::Invalid(format!("{} antennas is outside 1..=8", carrier.antennas)));
        }
        let qm = qm as usize;
        let nfft = phy::fft_size(carrier.prb);
        let n_sc = carrier.prb_scheduled * SC_PER_PRB;
        let g = phy::data_res(carrier.prb_scheduled) * qm;
        let tbs = phy::tbs(carrier.prb_scheduled, carrier.mcs);
        let cbs = phy::segment(tbs, rate, g);
        let coded_bits: usize = cbs.iter().map(|c| c.e).sum();
        if coded_bits > g {
            return Err(EmuError::Invalid(format!(
                "MCS {} on {} PRB leaves no room for parity; lower the MCS or schedule more PRBs",
                carrier.mcs, carrier.prb_scheduled
            )));
        }
        let mut cb_offsets = Vec::with_capacity(cbs.len());
        let mut off = 0;
        for cb in &cbs {
            cb_offsets.push(off);
            off += cb.e;
        }
        let mut codes: Vec<Arc<Ldpc>> = Vec::with_capacity(cbs.len());
        for cb in &cbs {
            match codes.iter().find(|c| c.k == cb.k && c.n == cb.e) {
                Some(c) => codes.push(c.clone()),
                None => codes.push(Arc::new(Ldpc::new(cb.k, cb.e))),
            }
        }
        let mut planner = FftPlanner::<f32>::new();
        let fft = planner.plan_fft_forward(nfft);
        let ifft = planner.plan_fft_inverse(nfft);
        // Occupied subcarriers around DC, DC itself left empty (as in LTE downlink and NR practice).
        let bins = (0..n_sc)
            .map(|i| if i < n_sc / 2 { nfft - n_sc / 2 + i } else { i - n_sc / 2 + 1 })
            .collect();
        let mut rng = Rng::new(0xD312);
        let qpsk = Qam::new(2);
        let mut pilot = || {
            (0..n_sc)
                .map(|_| {
                    let b = [rng.below(2) as u8, rng.below(2) as u8];
                    qpsk.modulate(&b)
                })
                .collect::<Vec<_>>()
        };
        let pilots = [pilot(), pilot()];
        let dl_weights = (0..carrier.antennas)
            .map(|a| Complex32::from_polar(1.0 / (carrier.antennas as f32).sqrt(), a as f32 * std::f32::consts::FRAC_PI_4))
            .collect();
        Ok(Phy { carrier, nfft, qm, rate, tbs, cbs, cb_offsets, codes, qam: Qam::new(qm), fft, ifft, bins, pilots, dl_weights, coded_bits })
    }

    pub fn grid_len(&self) -> usize {
        self.carrier.antennas * SYMBOLS * self.nfft
    }

    /// Symbol-major layout: the first half of the symbols is one contiguous slice, so two threads
    /// can run the front end on disjoint halves (OAI's ru-thread + fep_processing).
    fn idx(&self, antenna: usize, symbol: usize) -> usize {
        (symbol * self.carrier.antennas + antenna) * self.nfft
    }

    /// Offset of symbol `s` in a grid (start of the part handed to a front-end helper).
    pub fn symbol_offset(&self, symbol: usize) -> usize {
        self.idx(0, symbol)
    }

    fn noise_var(&self) -> f64 {
        10f64.powf(-self.carrier.snr_db / 10.0)
    }

    /// Tanner-graph edges over all code blocks (decoder work per iteration).
    pub fn ldpc_edges(&self) -> usize {
        self.codes.iter().map(|c| c.edges()).sum()
    }

    pub fn code(&self, cb: usize) -> &Ldpc {
        &self.codes[cb]
    }

    /// The LLR slice of code block `cb` within the transport block's LLRs.
    pub fn cb_range(&self, cb: usize) -> Range<usize> {
        self.cb_offsets[cb]..self.cb_offsets[cb] + self.cbs[cb].e
    }

    fn map_symbols(&self, bits: &[u8], grid_ant0: &mut [Complex32]) {
        // Data REs in symbol order, then subcarrier; bits beyond the coded length are zero padding.
        let qm = self.qm;
        let mut bit = 0;
        let mut pad = [0u8; 8];
        for s in (0..SYMBOLS).filter(|s| !DMRS_SYMBOLS.contains(s)) {
            for &bin in &self.bins {
                let sym = if bit + qm <= bits.len() {
                    self.qam.modulate(&bits[bit..bit + qm])
                } else {
                    pad.fill(0);
                    let avail = bits.len().saturating_sub(bit);
                    pad[..avail].copy_from_slice(&bits[bit..bit + avail]);
                    self.qam.modulate(&pad[..qm])
                };
                grid_ant0[s * self.nfft + bin] = sym;
                bit += qm;
            }
        }
        for (p, &s) in DMRS_SYMBOLS.iter().enumerate() {
            for (i, &bin) in self.bins.iter().enumerate() {
                grid_ant0[s * self.nfft + bin] = self.pilots[p][i];
            }
        }
    }

    /// Synthesises one uplink TTI as received by the antennas (not part of the timed work).
    pub fn generate_ul(&self, seed: u64) -> UlSubframe {
        let mut rng = Rng::new(seed);
        let mut info = Vec::with_capacity(self.cbs.len());
        let mut bits = vec![0u8; self.coded_bits];
        for (i, cb) in self.cbs.iter().enumerate() {
            let mut inf = vec![0u8; cb.k];
            rng.bits(&mut inf);
            self.codes[i].encode(&inf, &mut bits[self.cb_range(i)]);
            info.push(inf);
        }
        let mut tx = vec![Complex32::new(0.0, 0.0); SYMBOLS * self.nfft];
        self.map_symbols(&bits, &mut tx);
        let sigma = (self.noise_var() / 2.0).sqrt() as f32;
        let mut time = vec![Complex32::new(0.0, 0.0); self.grid_len()];
        let scale = 1.0 / self.nfft as f32;
        // Three-tap Rician channel per antenna (K = 10 dB: a line-of-sight first tap), delays short
        // against the FFT so that 5-subcarrier smoothing of the estimate is accurate. Rician rather
        // than Rayleigh: with one antenna and a narrow allocation, Rayleigh puts whole TTIs in deep
        // fades, which would make NACKs a property of the synthesised radio instead of the SNR.
        let delays = [0.0, (self.nfft / 512).max(1) as f32, 3.0 * (self.nfft / 512).max(1) as f32];
        let powers = [0.6f32, 0.3, 0.1];
        let k_factor = 10f32;
        for a in 0..self.carrier.antennas {
            let los = Complex32::from_polar((k_factor / (k_factor + 1.0)).sqrt(), (rng.unit() * std::f64::consts::TAU) as f32);
            let taps: Vec<Complex32> = powers
                .iter()
                .enumerate()
                .map(|(i, &p)| {
                    let scatter = Complex32::new(rng.gauss() as f32, rng.gauss() as f32) * (p / 2.0 / (k_factor + 1.0)).sqrt();
                    if i == 0 { los + scatter } else { scatter }
                })
                .collect();
            for s in 0..SYMBOLS {
                let base = self.idx(a, s);
                let out = &mut time[base..base + self.nfft];
                for &bin in &self.bins {
                    let f = bin as f32 / self.nfft as f32;
                    let h: Complex32 = taps
                        .iter()
                        .zip(delays)
                        .map(|(t, d)| t * Complex32::from_polar(1.0, -2.0 * std::f32::consts::PI * f * d))
                        .sum();
                    let noise = Complex32::new(sigma * rng.gauss() as f32, sigma * rng.gauss() as f32);
                    out[bin] = h * tx[s * self.nfft + bin] + noise;
                }
                self.ifft.process(out);
                out.iter_mut().for_each(|x| *x *= scale);
            }
        }
        UlSubframe { time, info }
    }

    fn fft_scratch<'a>(&self, scratch: &'a mut Scratch) -> &'a mut [Complex32] {
        let need = self.fft.get_inplace_scratch_len().max(self.ifft.get_inplace_scratch_len());
        if scratch.fft.len() < need {
            scratch.fft.resize(need, Complex32::new(0.0, 0.0));
        }
        &mut scratch.fft[..need]
    }

    /// Uplink front end: FFT of `symbols` for every antenna, from `time` into `part`, which is the
    /// grid starting at `symbol_offset(symbols.start)`.
    pub fn ul_fft(&self, time: &[Complex32], part: &mut [Complex32], symbols: Range<usize>, scratch: &mut Scratch) {
        let fft = self.fft.clone();
        let buf = self.fft_scratch(scratch);
        let base = self.idx(0, symbols.start);
        for s in symbols {
            for a in 0..self.carrier.antennas {
                let src = self.idx(a, s);
                let dst = src - base..src - base + self.nfft;
                part[dst.clone()].copy_from_slice(&time[src..src + self.nfft]);
                fft.process_with_scratch(&mut part[dst], buf);
            }
        }
    }

    /// Channel and noise estimation on DMRS, MRC equalisation and demapping into `scratch.llr`.
    pub fn ul_equalize(&self, grid: &[Complex32], scratch: &mut Scratch) {
        let n_sc = self.bins.len();
        let ants = self.carrier.antennas;
        scratch.hest.clear();
        scratch.hest.resize(ants * n_sc, Complex32::new(0.0, 0.0));
        let mut noise = 0f32;
        for a in 0..ants {
            let (y0, y1) = (self.idx(a, DMRS_SYMBOLS[0]), self.idx(a, DMRS_SYMBOLS[1]));
            let h = &mut scratch.hest[a * n_sc..(a + 1) * n_sc];
            for (i, &bin) in self.bins.iter().enumerate() {
                // Pilots have unit energy: y·p* is the least-squares estimate of h.
                let e0 = grid[y0 + bin] * self.pilots[0][i].conj();
                let e1 = grid[y1 + bin] * self.pilots[1][i].conj();
                h[i] = (e0 + e1) * 0.5;
                // Same channel on both DMRS symbols: their difference is noise only, variance 2σ².
                noise += (e0 - e1).norm_sqr() * 0.5;
            }
            // 5-tap moving average across frequency: the channel is smooth, the noise is not.
            let raw: Vec<Complex32> = h.to_vec();
            for (i, hi_out) in h.iter_mut().enumerate() {
                let lo = i.saturating_sub(2);
                let hi = (i + 3).min(n_sc);
                *hi_out = raw[lo..hi].iter().sum::<Complex32>() / (hi - lo) as f32;
            }
        }
        let noise_var = (noise / (ants * n_sc) as f32).max(1e-6);
        let qm = self.qm;
        scratch.llr.clear();
        scratch.llr.resize(DATA_SYMBOLS * n_sc * qm, 0.0);
        let mut out = 0;
        for s in (0..SYMBOLS).filter(|s| !DMRS_SYMBOLS.contains(s)) {
            for (i, &bin) in self.bins.iter().enumerate() {
                let mut num = Complex32::new(0.0, 0.0);
                let mut den = 0f32;
                for a in 0..ants {
                    let h = scratch.hest[a * n_sc + i];
                    num += h.conj() * grid[self.idx(a, s) + bin];
                    den += h.norm_sqr();
                }
                let den = den.max(1e-9);
                self.qam.demap(num / den, noise_var / den, &mut scratch.llr[out..out + qm]);
                out += qm;
            }
        }
    }

    /// Decodes code block `cb` from `llr` (the whole TB's LLRs) and checks it against the payload
    /// sent, which is what the code block's CRC establishes in a real receiver.
    pub fn decode_cb(&self, cb: usize, llr: &[f32], sent: &[u8], work: &mut DecoderWork) -> (Decoded, bool) {
        let d = self.codes[cb].decode(&llr[self.cb_range(cb)], self.carrier.max_iterations, work);
        let ok = d.converged && work.hard == sent;
        (d, ok)
    }

    /// Equalisation plus decoding of every code block on this thread.
    /// The decoded payload bytes of blocks that passed are appended to `payload` (what MAC hands
    /// to the user plane).
    pub fn ul_decode(&self, grid: &[Complex32], sf: &UlSubframe, scratch: &mut Scratch, payload: &mut Vec<u8>) -> UlResult {
        self.ul_equalize(grid, scratch);
        let mut r = UlResult { ok: true, ..UlResult::default() };
        let llr = std::mem::take(&mut scratch.llr);
        for cb in 0..self.cbs.len() {
            let (d, ok) = self.decode_cb(cb, &llr, &sf.info[cb], &mut scratch.dec);
            r.iterations_sum += d.iterations;
            r.iterations_max = r.iterations_max.max(d.iterations);
            r.code_blocks += 1;
            r.ok &= ok;
            if ok {
                pack_bits(&scratch.dec.hard, payload);
            }
        }
        scratch.llr = llr;
        r
    }

    /// Downlink: payload for TTI `tti`, LDPC encoding, modulation, mapping and precoding into `grid`.
    pub fn dl_build(&self, tti: u64, grid: &mut [Complex32], scratch: &mut Scratch) {
        let mut rng = Rng::new(tti.wrapping_mul(0x2545_F491_4F6C_DD1D));
        scratch.cw.clear();
        scratch.cw.resize(self.coded_bits, 0);
        for (i, cb) in self.cbs.iter().enumerate() {
            scratch.bits.clear();
            scratch.bits.resize(cb.k, 0);
            rng.bits(&mut scratch.bits);
            let r = self.cb_range(i);
            self.codes[i].encode(&scratch.bits, &mut scratch.cw[r]);
        }
        let plane = SYMBOLS * self.nfft;
        scratch.plane.clear();
        scratch.plane.resize(plane, Complex32::new(0.0, 0.0));
        let cw = std::mem::take(&mut scratch.cw);
        self.map_symbols(&cw, &mut scratch.plane);
        scratch.cw = cw;
        // Precoding: one weight per antenna (a fixed beam), applied to every RE.
        for s in 0..SYMBOLS {
            let src = &scratch.plane[s * self.nfft..(s + 1) * self.nfft];
            for a in 0..self.carrier.antennas {
                let w = self.dl_weights[a];
                let i = self.idx(a, s);
                for (d, x) in grid[i..i + self.nfft].iter_mut().zip(src) {
                    *d = x * w;
                }
            }
        }
    }

    /// Downlink back end: IFFT of every symbol and antenna in place.
    pub fn dl_ifft(&self, grid: &mut [Complex32], scratch: &mut Scratch) {
        let ifft = self.ifft.clone();
        let buf = self.fft_scratch(scratch);
        for chunk in grid.chunks_exact_mut(self.nfft) {
            ifft.process_with_scratch(chunk, buf);
        }
    }
}

/// Packs hard decisions (one bit per byte) into bytes, MSB first.
pub fn pack_bits(bits: &[u8], out: &mut Vec<u8>) {
    out.extend(bits.chunks(8).map(|c| c.iter().fold(0u8, |acc, &b| (acc << 1) | b)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn carrier(snr_db: f64, mcs: u8, antennas: usize) -> Carrier {
        Carrier { prb: 25, prb_scheduled: 10, mcs, antennas, snr_db, max_iterations: 8 }
    }

    fn decode_ul(phy: &Phy, seed: u64) -> UlResult {
        let sf = phy.generate_ul(seed);
        let mut grid = vec![Complex32::new(0.0, 0.0); phy.grid_len()];
        let mut scratch = Scratch::default();
        phy.ul_fft(&sf.time, &mut grid, 0..SYMBOLS, &mut scratch);
        phy.ul_decode(&grid, &sf, &mut scratch, &mut Vec::new())
    }

    #[test]
    fn uplink_decodes_at_high_snr_and_fails_far_below_threshold() {
        let good = Phy::new(carrier(30.0, 16, 2)).unwrap();
        for seed in 0..3 {
            let r = decode_ul(&good, seed);
            assert!(r.ok, "30 dB MCS 16 must decode: {r:?}");
        }
        let bad = Phy::new(carrier(0.0, 27, 1)).unwrap();
        let r = decode_ul(&bad, 1);
        assert!(!r.ok, "0 dB MCS 27 cannot decode: {r:?}");
        assert_eq!(r.iterations_max, 8);
    }

    #[test]
    fn iterations_rise_as_snr_nears_the_mcs_threshold() {
        let mean = |snr: f64| {
            let phy = Phy::new(carrier(snr, 16, 1)).unwrap();
            (0..4).map(|s| decode_ul(&phy, s).iterations_sum).sum::<u32>()
        };
        let (high, low) = (mean(30.0), mean(13.0));
        assert!(low > high, "iterations at 13 dB ({low}) should exceed 30 dB ({high})");
    }

    #[test]
    fn downlink_chain_fills_the_grid() {
        let phy = Phy::new(carrier(20.0, 10, 2)).unwrap();
        let mut grid = vec![Complex32::new(0.0, 0.0); phy.grid_len()];
        let mut scratch = Scratch::default();
        phy.dl_build(7, &mut grid, &mut scratch);
        let energy: f32 = grid.iter().map(|x| x.norm_sqr()).sum();
        assert!(energy > 0.0);
        phy.dl_ifft(&mut grid, &mut scratch);
        assert!(grid.iter().all(|x| x.re.is_finite()));
    }
}
