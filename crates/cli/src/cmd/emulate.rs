//! `rtslice emulate`: run a vBS emulator (OAI LTE, srsENB, OAI NR profiles) that computes for real.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rtslice_emu::{Calibration, Class, Config, EmuError, Pattern, Profile, SchedMode, EmuSummary};

use super::{invalid, EXIT_FAILURE};

#[derive(clap::Args)]
pub struct Args {
    /// Thread model: oai-lte (study A's OAI eNB), srsenb (study C's srsENB), nr-gnb (OAI gNB)
    #[arg(long, default_value = "oai-lte")]
    profile: String,
    /// How long to run, e.g. 10s, 2m
    #[arg(long, default_value = "10s")]
    duration: String,
    /// Target PHY load as a share of one core (`30%` or `0.3`); picks the scheduled PRBs from the
    /// calibration. Default when neither --prb nor --traffic is given: the profile's (30–40%).
    #[arg(long, value_parser = super::ratio)]
    load: Option<f64>,
    /// Carrier bandwidth in PRBs (default: oai-lte 25, srsenb 50, nr-gnb 106)
    #[arg(long)]
    prb: Option<usize>,
    /// Share of the carrier scheduled every TTI (traffic demand): `50%` or `0.5` (default 100% with --prb)
    #[arg(long, value_parser = super::ratio)]
    traffic: Option<f64>,
    /// How the offered load varies over time: constant (every TTI at the peak that --load, --prb
    /// or --traffic set), busy-hour (a day compressed into --cycle, between --traffic-low and the
    /// peak) or bursts (on/off: the peak for --burst-length on average, --burst-duty of the time)
    #[arg(long, default_value = "constant")]
    traffic_pattern: String,
    /// Load between bursts and at the busy-hour trough, as a share of the peak (`20%` or `0.2`)
    #[arg(long, value_parser = super::ratio, default_value = "20%")]
    traffic_low: f64,
    /// Length of the compressed day of --traffic-pattern busy-hour, e.g. 60s
    #[arg(long, default_value = "60s")]
    cycle: String,
    /// Share of the time in bursts under --traffic-pattern bursts (`30%` or `0.3`)
    #[arg(long, value_parser = super::ratio, default_value = "30%")]
    burst_duty: f64,
    /// Mean length of a burst under --traffic-pattern bursts, e.g. 20ms
    #[arg(long, default_value = "20ms")]
    burst_length: String,
    /// Seed of the traffic pattern's random draws: the same seed gives the same trace
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// MCS index 0..=28 (TS 38.214 Table 5.1.3.1-1; default 16)
    #[arg(long)]
    mcs: Option<u8>,
    /// Receive/transmit antennas (default: LTE 1, NR 2)
    #[arg(long)]
    antennas: Option<usize>,
    /// Uplink SNR in dB; decoder iterations rise as it nears the MCS threshold
    #[arg(long, default_value_t = 25.0, allow_hyphen_values = true)]
    snr: f64,
    /// Scheduling class of the RT threads: profile (as the real stack), other, fifo, rr
    #[arg(long, default_value = "profile")]
    sched: String,
    /// Run every thread on these CPUs (e.g. 1 or 2-3); default: inherited affinity
    #[arg(long)]
    cpus: Option<String>,
    /// Processing budget in TTIs (LTE HARQ 3; NR default 4 slots)
    #[arg(long)]
    budget: Option<u32>,
    /// NR numerology µ (slot = 1 ms / 2^µ)
    #[arg(long, default_value_t = 1)]
    numerology: u8,
    /// Worker pool size (srsenb WORKERn, nr-gnb Tpool)
    #[arg(long)]
    workers: Option<usize>,
    /// nr-gnb: the Tpool queue's lock inherits priority (a PI futex, as a PTHREAD_PRIO_INHERIT
    /// mutex) instead of OAI's plain mutex, so a worker holding it is run with the priority (or
    /// the SCHED_DEADLINE budget) of the workers waiting for it
    #[arg(long)]
    pi_locks: bool,
    /// LDPC iteration cap; a block not decoded at the cap is a NACK
    #[arg(long, default_value_t = 8)]
    ldpc_max_iter: u32,
    /// Put the user plane's receiving socket in this network namespace (see `ip netns`)
    #[arg(long)]
    up_netns: Option<String>,
    /// Address of the user plane's receiving socket (default 127.0.0.1:ephemeral)
    #[arg(long)]
    up_addr: Option<SocketAddr>,
    /// Measure this host's per-kernel costs, store them and print them next to the public figures
    #[arg(long)]
    calibrate: bool,
    // The summary as one JSON object (with --calibrate: the calibration).
    #[command(flatten)]
    json: super::Json,
    #[command(flatten)]
    quiet: super::Quiet,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.calibrate {
        let c = Calibration::measure();
        let stored = match Calibration::default_path() {
            Some(p) => match c.store(&p) {
                Ok(()) => Some(p),
                Err(e) => {
                    super::warning(format_args!("{e}; set RTSLICE_CALIBRATION to a writable file"));
                    None
                }
            },
            None => {
                super::warning("no place to store the calibration (no HOME); set RTSLICE_CALIBRATION");
                None
            }
        };
        if args.json.json {
            println!("{}", serde_json::to_string_pretty(&c)?);
        } else {
            print!("{}", c.report());
            if let Some(p) = stored {
                println!("stored in {}", p.display());
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let Some(profile) = Profile::parse(&args.profile) else {
        return invalid(format!("unknown profile `{}`; use oai-lte, srsenb or nr-gnb", args.profile));
    };
    let duration = match rtslice_spec::units::parse_duration(&args.duration) {
        Ok(d) if !d.is_zero() => d,
        Ok(_) => return invalid("--duration must be above zero"),
        Err(e) => return invalid(format!("--duration: {e}")),
    };
    let sched = match args.sched.as_str() {
        "profile" | "default" => SchedMode::Profile,
        "other" | "cfs" | "normal" => SchedMode::Force(Class::Other),
        "fifo" => SchedMode::Force(Class::Fifo),
        "rr" => SchedMode::Force(Class::Rr),
        s => return invalid(format!("--sched `{s}`: use profile, other, fifo or rr")),
    };
    let mut cfg = Config::new(profile);
    cfg.duration = duration;
    cfg.prb = args.prb;
    cfg.mcs = args.mcs;
    cfg.antennas = args.antennas;
    cfg.snr_db = args.snr;
    cfg.sched = sched;
    cfg.budget_ttis = args.budget;
    cfg.numerology = args.numerology;
    cfg.workers = args.workers;
    cfg.pi_locks = args.pi_locks;
    cfg.max_iterations = args.ldpc_max_iter;
    cfg.userplane.netns = args.up_netns.clone();
    cfg.userplane.bind = args.up_addr;
    cfg.live = !args.quiet.quiet;
    match args.load {
        Some(l) if l <= 0.0 => return invalid("--load must be above 0%"),
        Some(l) => cfg.load_percent = Some(l * 100.0),
        None => {}
    }
    match args.traffic {
        Some(t) if t <= 0.0 => return invalid("--traffic must be above 0%"),
        t => cfg.traffic = t,
    }
    cfg.traffic_pattern = match pattern_of(&args) {
        Ok(p) => p,
        Err(e) => return invalid(e),
    };
    cfg.seed = args.seed;
    if let Some(c) = &args.cpus {
        match rtslice_spec::parse_cpu_list(c) {
            Ok(v) if !v.is_empty() => cfg.cpus = Some(v.into_iter().map(|c| c as usize).collect()),
            Ok(_) => return invalid("--cpus is empty"),
            Err(e) => return invalid(format!("--cpus: {e}")),
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        // A second handler cannot be installed when another command already did; Ctrl-C then
        // ends the process the default way, which loses only the summary.
        let _ = ctrlc::set_handler(move || stop.store(true, Ordering::Relaxed));
    }
    cfg.stop = Some(stop);
    if cfg.live {
        eprintln!(
            "rtslice emulate: {} for {}; live stats every second on stderr (Ctrl-C ends early with a summary)",
            profile.name(),
            args.duration
        );
    }
    let summary = match rtslice_emu::run(cfg) {
        Ok(s) => s,
        Err(e @ (EmuError::Invalid(_) | EmuError::LoadTooHigh { .. })) => return invalid(e),
        Err(e) => {
            super::error(e);
            return Ok(ExitCode::from(EXIT_FAILURE));
        }
    };
    if args.json.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        print!("{}", human(&summary));
    }
    Ok(ExitCode::SUCCESS)
}

/// The traffic pattern the flags describe; the error names the flag to fix.
fn pattern_of(args: &Args) -> Result<Pattern, String> {
    let dur = |flag: &str, v: &str| rtslice_spec::units::parse_duration(v).map_err(|e| format!("--{flag}: {e}"));
    match args.traffic_pattern.as_str() {
        "constant" => Ok(Pattern::Constant),
        "busy-hour" | "busy_hour" => Ok(Pattern::BusyHour { cycle: dur("cycle", &args.cycle)?, low: args.traffic_low }),
        "bursts" | "burst" => {
            Ok(Pattern::Bursts { duty: args.burst_duty, burst: dur("burst-length", &args.burst_length)?, low: args.traffic_low })
        }
        other => Err(format!("--traffic-pattern `{other}`: use constant, busy-hour or bursts")),
    }
}

fn human(s: &EmuSummary) -> String {
    let mut o = String::new();
    o += &format!(
        "{}: {} TTIs of {:.0} µs in {:.1} s, budget {:.0} µs; {} of {} PRB scheduled, MCS {}, {} antenna(s), SNR {:.1} dB, FFT {}, TBS {} bits in {} code block(s)\n",
        s.profile, s.ttis, s.tti_us, s.duration_s, s.budget_us, s.prb_scheduled, s.prb, s.mcs, s.antennas, s.snr_db, s.fft_size, s.tbs_bits, s.code_blocks
    );
    if let Some(t) = s.load_target_percent {
        o += &format!("load: target {t:.1}% of one core, predicted {:.1}% (calibration)\n", s.load_predicted_percent);
    } else {
        o += &format!("load: predicted {:.1}% of one core (calibration)\n", s.load_predicted_percent);
    }
    if s.traffic_pattern != Pattern::Constant {
        o += &format!(
            "traffic: {} (seed {}): offered load mean {:.1}%, peak {:.1}% of one core; scheduled PRB per level {:?}\n",
            serde_json::to_string(&s.traffic_pattern).unwrap_or_default(),
            s.seed,
            s.offered_load_mean_percent,
            s.offered_load_peak_percent,
            s.prb_scheduled_levels
        );
    }
    o += &format!(
        "deadline misses: {} TTIs ({:.3}%): UL late {}, DL late {}, UL dropped {}, DL dropped {}\n",
        s.deadline_misses,
        100.0 * s.deadline_misses as f64 / s.ttis.max(1) as f64,
        s.misses.ul_late,
        s.misses.dl_late,
        s.misses.ul_dropped,
        s.misses.dl_dropped
    );
    o += &format!(
        "HARQ: {} NACKs ({:.3}%), {} decode failures, {} lost DL subframes; LDPC {:.2} iterations per block\n",
        s.nacks,
        100.0 * s.nack_ratio,
        s.decode_failures,
        s.lost_subframes,
        s.ldpc_iterations_mean
    );
    o += &format!(
        "throughput: {:.2} Mbit/s of {:.2} offered (UL {:.2}, DL {:.2})\n",
        s.throughput_bps / 1e6,
        s.offered_bps / 1e6,
        s.ul_throughput_bps / 1e6,
        s.dl_throughput_bps / 1e6
    );
    o += &format!(
        "processing time (µs): mean {:.0}, p50 {:.0}, p99 {:.0}, p99.99 {:.0}, max {:.0}; min slack {:.0}; clock wake-up p99 {:.0}, max {:.0}\n",
        s.proc_mean_us, s.proc_p50_us, s.proc_p99_us, s.proc_p9999_us, s.proc_max_us, s.slack_min_us, s.clock_wakeup_p99_us, s.clock_wakeup_max_us
    );
    o += &format!(
        "user plane: {} packets / {} bytes sent, {} / {} received at {}\n",
        s.userplane.packets_sent, s.userplane.bytes_sent, s.userplane.packets_received, s.userplane.bytes_received, s.userplane.receiver
    );
    o += &format!("threads (CPU total {:.1}% of one core):\n", s.cpu_percent_total);
    for t in &s.threads {
        o += &format!(
            "  {:<15} tid {:>7}  {:<11} {:>3}  cpu {:>6.1}%{}\n",
            t.name,
            t.tid,
            t.class.as_str(),
            t.priority,
            t.cpu_percent,
            t.note.as_deref().map(|n| format!("  ({n})")).unwrap_or_default()
        );
    }
    for w in &s.warnings {
        o += &format!("warning: {w}\n");
    }
    o
}
