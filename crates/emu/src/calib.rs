//! Per-host calibration: the measured cost of each PHY kernel on this machine and build, stored so
//! that `--load 30%` means 30% of one core here, and comparable with the public figures.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rustfft::num_complex::Complex32;
use rustfft::FftPlanner;
use serde::{Deserialize, Serialize};

use crate::chain::{Carrier, Phy, Scratch};
use crate::ldpc::{DecoderWork, Ldpc, Rng};
use crate::phy::{self, SYMBOLS};
use crate::EmuError;

const FORMAT_VERSION: u32 = 3;
pub const FFT_SIZES: [usize; 6] = [128, 256, 512, 1024, 2048, 4096];

/// One LDPC reference point, shaped like the public OAI figures (block size, rate, iterations).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LdpcPoint {
    pub label: String,
    pub k: usize,
    pub n: usize,
    pub iterations: u32,
    pub us: f64,
    /// The public figure for the same block (OAI, 1 core 2.9 GHz AVX2), when there is one.
    pub public_us: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Calibration {
    pub version: u32,
    /// "release" or "debug": costs differ by an order of magnitude.
    pub build: String,
    pub cpu_model: String,
    pub created_unix: u64,
    /// Forward FFT, ns per call, by size.
    pub fft_ns: BTreeMap<usize, f64>,
    /// LDPC min-sum: ns per Tanner-graph edge per iteration.
    pub ldpc_ns_per_edge_iteration: f64,
    pub ldpc_points: Vec<LdpcPoint>,
    /// Channel estimation + equalisation + demapping, ns per data RE with one antenna, by Qm.
    pub equalize_ns_per_re: BTreeMap<usize, f64>,
    /// Extra ns per data RE for each further antenna.
    pub equalize_ns_per_re_antenna: f64,
    /// Downlink payload + LDPC encode + modulation + mapping, ns per coded bit (one antenna).
    pub dl_build_ns_per_bit: f64,
    /// Downlink precoding, ns per RE per further antenna.
    pub dl_precode_ns_per_re_antenna: f64,
}

/// Counts that determine one TTI's work; `Phy` gives them, so does `Workload::estimate`.
#[derive(Debug, Clone, Copy)]
pub struct TtiWork {
    pub nfft: usize,
    pub antennas: usize,
    pub qm: usize,
    pub data_res: usize,
    pub coded_bits: usize,
    pub ldpc_edges: usize,
    pub iterations_mean: f64,
}

impl TtiWork {
    /// The work of one TTI with `prb_scheduled` PRBs of carrier `c`, without building codes.
    pub fn estimate(c: &Carrier, prb_scheduled: usize, iterations_mean: f64) -> TtiWork {
        let (qm, rate) = phy::mcs_params(c.mcs).unwrap_or((2, 0.5));
        let qm = qm as usize;
        let data_res = phy::data_res(prb_scheduled);
        let g = data_res * qm;
        let cbs = phy::segment(phy::tbs(prb_scheduled, c.mcs), rate, g);
        let coded_bits = cbs.iter().map(|cb| cb.e).sum();
        // Edges of our code: 3 per information bit + the dual diagonal (2 per parity bit, −1).
        let ldpc_edges = cbs.iter().map(|cb| 3 * cb.k + 2 * (cb.e - cb.k) - 1).sum();
        TtiWork { nfft: phy::fft_size(c.prb), antennas: c.antennas, qm, data_res, coded_bits, ldpc_edges, iterations_mean }
    }

    pub fn of(phy: &Phy, iterations_mean: f64) -> TtiWork {
        TtiWork {
            nfft: phy.nfft,
            antennas: phy.carrier.antennas,
            qm: phy.qm,
            data_res: phy::data_res(phy.carrier.prb_scheduled),
            coded_bits: phy.cbs.iter().map(|c| c.e).sum(),
            ldpc_edges: phy.ldpc_edges(),
            iterations_mean,
        }
    }
}

/// Predicted cost of one TTI, per stage, in µs.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct CostBreakdown {
    pub ul_fft_us: f64,
    pub equalize_us: f64,
    pub ldpc_us: f64,
    pub dl_build_us: f64,
    pub dl_ifft_us: f64,
    pub total_us: f64,
}

impl Calibration {
    pub fn fft_cost_ns(&self, nfft: usize) -> f64 {
        if let Some(v) = self.fft_ns.get(&nfft) {
            return *v;
        }
        // N log N scaling from the nearest measured size.
        let (&n0, &c0) = self.fft_ns.iter().min_by_key(|(&n, _)| n.abs_diff(nfft)).unwrap_or((&1024, &5000.0));
        let nl = |n: usize| n as f64 * (n as f64).log2();
        c0 * nl(nfft) / nl(n0)
    }

    pub fn predict(&self, w: &TtiWork) -> CostBreakdown {
        let ffts = (SYMBOLS * w.antennas) as f64 * self.fft_cost_ns(w.nfft) / 1e3;
        let eq = w.data_res as f64
            * (self.equalize_ns_per_re.get(&w.qm).copied().unwrap_or(100.0)
                + (w.antennas - 1) as f64 * self.equalize_ns_per_re_antenna)
            / 1e3;
        let ldpc = w.ldpc_edges as f64 * w.iterations_mean * self.ldpc_ns_per_edge_iteration / 1e3;
        let dl = (w.coded_bits as f64 * self.dl_build_ns_per_bit
            + (SYMBOLS * w.nfft * (w.antennas - 1)) as f64 * self.dl_precode_ns_per_re_antenna)
            / 1e3;
        CostBreakdown {
            ul_fft_us: ffts,
            equalize_us: eq,
            ldpc_us: ldpc,
            dl_build_us: dl,
            dl_ifft_us: ffts,
            total_us: 2.0 * ffts + eq + ldpc + dl,
        }
    }

    /// Where calibrations are stored: $RTSLICE_CALIBRATION, else /var/lib/rtslice for root, else
    /// the user's cache directory; `None` when there is no writable place (no HOME in a container).
    pub fn default_path() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os("RTSLICE_CALIBRATION") {
            return Some(PathBuf::from(p));
        }
        if rtslice_sys::process::is_root() {
            return Some(PathBuf::from("/var/lib/rtslice/calibration.json"));
        }
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(cache.join("rtslice").join("calibration.json"))
    }

    /// A stored calibration if it was made by this build on this CPU.
    pub fn load(path: &Path) -> Option<Calibration> {
        let text = std::fs::read_to_string(path).ok()?;
        let c: Calibration = serde_json::from_str(&text).ok()?;
        (c.version == FORMAT_VERSION && c.build == build_kind() && c.cpu_model == cpu_model()).then_some(c)
    }

    pub fn store(&self, path: &Path) -> Result<(), EmuError> {
        let io = |e: std::io::Error| EmuError::Io(format!("cannot store the calibration in {}: {e}", path.display()));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let text = serde_json::to_string_pretty(self).map_err(|e| EmuError::Io(e.to_string()))?;
        std::fs::write(path, text).map_err(io)
    }

    /// Stored calibration, or a fresh measurement (stored when possible). The bool is true when
    /// it was measured now.
    pub fn load_or_measure() -> (Calibration, bool, Option<PathBuf>) {
        let path = Calibration::default_path();
        if let Some(c) = path.as_deref().and_then(Calibration::load) {
            return (c, false, path);
        }
        let c = Calibration::measure();
        let stored = path.filter(|p| c.store(p).is_ok());
        (c, true, stored)
    }

    /// Measures every kernel (about a second in a release build).
    pub fn measure() -> Calibration {
        let mut fft_ns = BTreeMap::new();
        let mut planner = FftPlanner::<f32>::new();
        for n in FFT_SIZES {
            let fft = planner.plan_fft_forward(n);
            let mut buf: Vec<Complex32> = (0..n).map(|i| Complex32::new((i % 7) as f32, (i % 3) as f32)).collect();
            let mut scratch = vec![Complex32::new(0.0, 0.0); fft.get_inplace_scratch_len()];
            let reps = (20_000 / n).max(2);
            fft_ns.insert(n, min_ns(7, reps, || fft.process_with_scratch(&mut buf, &mut scratch)));
        }

        let mut work = DecoderWork::default();
        let mut ldpc_points = Vec::new();
        let mut per_edge = Vec::new();
        let refs: [(&str, usize, f64, u32, Option<f64>); 9] = [
            ("BG2 Z=128 (1,280 bits) rate 1/5", 1280, 0.2, 5, Some(58.5)),
            ("BG2 Z=128 (1,280 bits) rate 1/5", 1280, 0.2, 10, Some(97.1)),
            ("BG2 Z=128 (1,280 bits) rate 1/5", 1280, 0.2, 20, Some(172.6)),
            ("BG1 Z=384 (8,448 bits) rate 1/3", 8448, 1.0 / 3.0, 5, Some(214.6)),
            ("BG1 Z=384 (8,448 bits) rate 2/3", 8448, 2.0 / 3.0, 5, Some(124.6)),
            ("BG1 Z=384 (8,448 bits) rate 8/9", 8448, 8.0 / 9.0, 5, Some(83.6)),
            ("BG2 Z=384 (3,840 bits) rate 1/5", 3840, 0.2, 5, Some(111.0)),
            ("BG2 Z=384 (3,840 bits) rate 1/3", 3840, 1.0 / 3.0, 5, Some(71.8)),
            ("BG2 Z=384 (3,840 bits) rate 2/3", 3840, 2.0 / 3.0, 5, Some(38.5)),
        ];
        for (label, k, rate, iters, public) in refs {
            let n = (k as f64 / rate).round() as usize;
            let code = Ldpc::new(k, n);
            let llr = noisy_llrs(&code, 1.0);
            let ns = min_ns(5, 1, || {
                code.decode_fixed(&llr, iters, &mut work);
            });
            per_edge.push(ns / (code.edges() as f64 * iters as f64));
            ldpc_points.push(LdpcPoint { label: label.to_string(), k, n, iterations: iters, us: ns / 1e3, public_us: public });
        }
        per_edge.sort_by(f64::total_cmp);
        let ldpc_ns_per_edge_iteration = per_edge[per_edge.len() / 2];

        let mut equalize_ns_per_re = BTreeMap::new();
        let mut extra = Vec::new();
        for (qm, mcs) in [(2usize, 5u8), (4, 13), (6, 22)] {
            let mut per_ant = Vec::new();
            for ants in [1usize, 2] {
                let phy = Phy::new(Carrier { prb: 25, prb_scheduled: 25, mcs, antennas: ants, snr_db: 25.0, max_iterations: 8 })
                    .expect("calibration carrier is valid");
                let sf = phy.generate_ul(1);
                let mut grid = vec![Complex32::new(0.0, 0.0); phy.grid_len()];
                let mut scratch = Scratch::default();
                phy.ul_fft(&sf.time, &mut grid, 0..SYMBOLS, &mut scratch);
                let ns = min_ns(5, 2, || phy.ul_equalize(&grid, &mut scratch));
                per_ant.push(ns / phy::data_res(25) as f64);
            }
            equalize_ns_per_re.insert(qm, per_ant[0]);
            extra.push((per_ant[1] - per_ant[0]).max(0.0));
        }
        let equalize_ns_per_re_antenna = extra.iter().sum::<f64>() / extra.len() as f64;

        let mut dl = Vec::new();
        for ants in [1usize, 2] {
            let phy = Phy::new(Carrier { prb: 25, prb_scheduled: 25, mcs: 16, antennas: ants, snr_db: 25.0, max_iterations: 8 })
                .expect("calibration carrier is valid");
            let mut grid = vec![Complex32::new(0.0, 0.0); phy.grid_len()];
            let mut scratch = Scratch::default();
            let mut tti = 0;
            let ns = min_ns(5, 2, || {
                tti += 1;
                phy.dl_build(tti, &mut grid, &mut scratch)
            });
            dl.push((ns, phy.cbs.iter().map(|c| c.e).sum::<usize>(), SYMBOLS * phy.nfft));
        }
        let dl_build_ns_per_bit = dl[0].0 / dl[0].1 as f64;
        let dl_precode_ns_per_re_antenna = ((dl[1].0 - dl[0].0) / dl[1].2 as f64).max(0.0);

        Calibration {
            version: FORMAT_VERSION,
            build: build_kind().to_string(),
            cpu_model: cpu_model(),
            created_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            fft_ns,
            ldpc_ns_per_edge_iteration,
            ldpc_points,
            equalize_ns_per_re,
            equalize_ns_per_re_antenna,
            dl_build_ns_per_bit,
            dl_precode_ns_per_re_antenna,
        }
    }

    /// A human-readable table: our costs next to the public figures.
    pub fn report(&self) -> String {
        let mut s = format!("calibration ({} build, {})\n", self.build, self.cpu_model);
        s += "FFT (rustfft, forward, per call)          here        public (rustfft AVX2 2.8 GHz)\n";
        let public = |n: usize| match n {
            1024 => "3.75 µs",
            2048 => "6.2 µs",
            4096 => "13.5 µs",
            _ => "—",
        };
        for (n, ns) in &self.fft_ns {
            s += &format!("  {n:>5}-point                          {:>9.2} µs   {}\n", ns / 1e3, public(*n));
        }
        s += "LDPC min-sum decode (layered, scalar f32)      here        public (OAI, AVX2 2.9 GHz)\n";
        for p in &self.ldpc_points {
            s += &format!(
                "  {:<34} {:>2} it {:>9.1} µs   {}\n",
                p.label,
                p.iterations,
                p.us,
                p.public_us.map(|v| format!("{v} µs")).unwrap_or_else(|| "—".into())
            );
        }
        s += &format!("  per edge per iteration: {:.2} ns\n", self.ldpc_ns_per_edge_iteration);
        for (qm, ns) in &self.equalize_ns_per_re {
            s += &format!("chest+equalise+demap Qm={qm}: {ns:.1} ns per RE (+{:.1} per extra antenna)\n", self.equalize_ns_per_re_antenna);
        }
        s += &format!(
            "DL payload+encode+modulate+map: {:.2} ns per coded bit; precoding {:.2} ns per RE per extra antenna\n",
            self.dl_build_ns_per_bit, self.dl_precode_ns_per_re_antenna
        );
        s
    }
}

fn noisy_llrs(code: &Ldpc, snr_db: f64) -> Vec<f32> {
    let mut rng = Rng::new(42);
    let mut info = vec![0u8; code.k];
    rng.bits(&mut info);
    let mut cw = vec![0u8; code.n];
    code.encode(&info, &mut cw);
    let sigma2 = 10f64.powf(-snr_db / 10.0);
    cw.iter()
        .map(|&b| {
            let x = if b == 0 { 1.0 } else { -1.0 };
            (2.0 * (x + sigma2.sqrt() * rng.gauss()) / sigma2) as f32
        })
        .collect()
}

/// Cost of one call in ns: the minimum over `rounds` of the mean of `reps` calls. Preemption and
/// interrupts only ever add time, so on a shared machine the minimum is the kernel's own cost
/// (the median was inflated 2–10× here while other jobs compiled).
fn min_ns(rounds: usize, reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..rounds * 3)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..reps {
                f();
            }
            t.elapsed().as_nanos() as f64 / reps as f64
        })
        .fold(f64::INFINITY, f64::min)
}

pub fn build_kind() -> &'static str {
    if cfg!(debug_assertions) { "debug" } else { "release" }
}

pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string()))
        .unwrap_or_else(|| "unknown".into())
}
