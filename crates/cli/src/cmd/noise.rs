//! `rtslice noise KIND`: real interference (stress-ng, UDP flood between namespaces, rt-app) until
//! the duration ends or Ctrl-C, with a line per second and clean teardown.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rtslice_noise::{Noise, NoiseError, NoiseKind, NoiseReport, NoiseSpec, RtPolicy};

use super::{invalid, EXIT_FAILURE, EXIT_INVALID};

#[derive(clap::Args)]
pub struct Args {
    /// user (study A's stress-ng set), kernel (UDP flood between namespaces), rt (rt-app, study B),
    /// cache (stress-ng cache + stream), or clean (delete namespaces left by killed runs)
    kind: String,
    /// CPUs to disturb (e.g. 1 or 0-1); default: all online CPUs
    #[arg(long)]
    cpus: Option<String>,
    /// How long; default: until Ctrl-C
    #[arg(long)]
    duration: Option<String>,
    /// kernel: packets per second (default: as fast as one sender thread can)
    #[arg(long)]
    pps: Option<u64>,
    /// kernel: UDP payload bytes (study A: 100)
    #[arg(long, default_value_t = 100)]
    payload: usize,
    /// kernel: CPUs of the sending thread (default: the CPUs not disturbed)
    #[arg(long)]
    sender_cpus: Option<String>,
    /// kernel: do not steer the receive softirq with RPS
    #[arg(long)]
    no_rps: bool,
    /// rt: fifo, rr, other or deadline
    #[arg(long, default_value = "fifo")]
    policy: String,
    /// rt: FIFO/RR priority
    #[arg(long, default_value_t = 50)]
    priority: i32,
    /// rt: number of periodic tasks (study B: 4)
    #[arg(long, default_value_t = 4)]
    tasks: usize,
    /// rt: work per period (study B: 6ms)
    #[arg(long, default_value = "6ms")]
    runtime: String,
    /// rt: period (study B: 100ms)
    #[arg(long, default_value = "100ms")]
    period: String,
    // The final report as one JSON object.
    #[command(flatten)]
    json: super::Json,
    #[command(flatten)]
    quiet: super::Quiet,
}

fn cpus(s: &str) -> Result<Vec<usize>, String> {
    rtslice_spec::parse_cpu_list(s).map(|v| v.into_iter().map(|c| c as usize).collect()).map_err(|e| e.to_string())
}

fn line(r: &NoiseReport) -> String {
    let mut s = format!("[{:>5.0}s]", r.elapsed_s);
    for c in &r.per_cpu {
        s += &format!(" cpu{} busy {:>5.1}% softirq {:>5.1}% NET_RX {:>7.0}/s |", c.cpu, c.busy_percent, c.softirq_percent, c.net_rx_per_s);
    }
    if let Some(f) = &r.flood {
        s += &format!(
            " sent {:>8.0} pps, veth rx {:>8.0} pps, delivered {:>8.0} pps, dropped {:>7.0} pps",
            f.sent_pps, f.rx_pps, f.delivered_pps, f.dropped_pps
        );
    }
    s += &format!(" | {} process(es)", r.processes_running);
    s
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.kind == "clean" {
        let gone = rtslice_noise::cleanup_stale();
        println!("deleted {} stale namespace(s){}", gone.len(), if gone.is_empty() { String::new() } else { format!(": {}", gone.join(", ")) });
        return Ok(ExitCode::SUCCESS);
    }
    let Some(kind) = NoiseKind::parse(&args.kind) else {
        return invalid(format!("unknown kind `{}`; use user, kernel, rt, cache or clean", args.kind));
    };
    let mut spec = NoiseSpec::new(kind, Vec::new());
    if let Some(c) = &args.cpus {
        match cpus(c) {
            Ok(v) => spec.cpus = v,
            Err(e) => return invalid(format!("--cpus: {e}")),
        }
    }
    let duration = match &args.duration {
        None => None,
        Some(d) => match rtslice_spec::units::parse_duration(d) {
            Ok(d) => Some(d),
            Err(e) => return invalid(format!("--duration: {e}")),
        },
    };
    spec.flood.pps = args.pps;
    spec.flood.payload = args.payload;
    spec.flood.rps = !args.no_rps;
    if let Some(c) = &args.sender_cpus {
        match cpus(c) {
            Ok(v) => spec.flood.sender_cpus = Some(v),
            Err(e) => return invalid(format!("--sender-cpus: {e}")),
        }
    }
    let Some(policy) = RtPolicy::parse(&args.policy) else {
        return invalid(format!("--policy `{}`: use fifo, rr, other or deadline", args.policy));
    };
    spec.rt.policy = policy;
    spec.rt.priority = args.priority;
    spec.rt.tasks = args.tasks;
    for (field, text) in [(&mut spec.rt.runtime, &args.runtime), (&mut spec.rt.period, &args.period)] {
        match rtslice_spec::units::parse_duration(text) {
            Ok(d) => *field = d,
            Err(e) => return invalid(format!("rt timing `{text}`: {e}")),
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        let _ = ctrlc::set_handler(move || stop.store(true, Ordering::Relaxed));
    }
    let mut guard = match Noise::start(spec) {
        Ok(g) => g,
        Err(e @ (NoiseError::Invalid(_) | NoiseError::MissingTool { .. })) => {
            super::error(&e);
            return Ok(ExitCode::from(if matches!(e, NoiseError::Invalid(_)) { EXIT_INVALID } else { EXIT_FAILURE }));
        }
        Err(e) => {
            super::error(e);
            return Ok(ExitCode::from(EXIT_FAILURE));
        }
    };
    if !args.quiet.quiet {
        eprintln!(
            "rtslice noise: {} on CPUs {:?}{} (pids {:?}); Ctrl-C stops and cleans up",
            kind.name(),
            guard.spec().cpus,
            duration.map(|d| format!(" for {d:?}")).unwrap_or_default(),
            guard.pids()
        );
    }
    let start = Instant::now();
    let mut next = Duration::from_secs(1);
    let mut failure = None;
    while !stop.load(Ordering::Relaxed) && duration.is_none_or(|d| start.elapsed() < d) {
        std::thread::sleep(Duration::from_millis(50));
        if start.elapsed() >= next {
            next += Duration::from_secs(1);
            if let Err(e) = guard.check() {
                failure = Some(e);
                break;
            }
            let r = guard.report();
            if !args.quiet.quiet {
                eprintln!("{}", line(&r));
            }
        }
    }
    let summary = guard.summary();
    let torn = guard.stop();
    if args.json.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        println!("summary over {:.1} s:", summary.elapsed_s);
        println!("{}", line(&summary));
    }
    if let Err(e) = torn {
        super::error(format_args!("teardown incomplete: {e}; run `rtslice noise clean`"));
        return Ok(ExitCode::from(EXIT_FAILURE));
    }
    if let Some(e) = failure {
        super::error(e);
        return Ok(ExitCode::from(EXIT_FAILURE));
    }
    Ok(ExitCode::SUCCESS)
}
