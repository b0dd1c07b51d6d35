//! `rtslice metrics serve`: the Prometheus view (/metrics) of the workloads `rtslice apply`
//! applied, with the continuous tracer following their cgroups and the workload report socket.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rtslice_metrics::{NodeMetrics, Options, ReportChannel, Workload, REPORT_SOCKET_ENV};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Serve /metrics (OpenMetrics text) for the applied workloads until interrupted
    Serve(ServeArgs),
}

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Address to listen on (plain HTTP)
    #[arg(long, default_value = "127.0.0.1:9464")]
    pub listen: SocketAddr,
    /// rtslice state directory (where `apply` recorded its workloads); re-read every few seconds,
    /// so workloads applied or reset later are followed
    #[arg(long, default_value = rtslice_host::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// The workload report socket (give its path to workloads in RTSLICE_REPORT_SOCKET); default
    /// STATE_DIR/report.sock
    #[arg(long, value_name = "PATH")]
    pub report_socket: Option<PathBuf>,
    /// No BPF tracer (no latency histograms, switches or CPU time per thread)
    #[arg(long)]
    pub no_trace: bool,
    /// How often to look for changes in the applied workloads
    #[arg(long, default_value = "2s")]
    pub refresh: String,
}

pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Serve(a) => serve(a),
    }
}

/// The applied workloads as the collector takes them; empty when nothing is applied.
fn applied_workloads(state_dir: &Path) -> anyhow::Result<Vec<Workload>> {
    let records = rtslice_host::applied_records(&rtslice_host::StateDir::new(state_dir))
        .with_context(|| format!("reading rtslice state in {}", state_dir.display()))?;
    Ok(rtslice_node::followed_workloads(&records))
}

fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let refresh = match rtslice_spec::units::parse_duration(&args.refresh) {
        Ok(d) if !d.is_zero() => d,
        Ok(_) => return super::invalid("--refresh must be longer than 0"),
        Err(e) => return super::invalid(format!("--refresh {:?}: {e}", args.refresh)),
    };
    let metrics = NodeMetrics::new(Options { trace: !args.no_trace, raw_tp: false });
    let mut current = applied_workloads(&args.state_dir)?;
    metrics.set_workloads(current.clone()).context("following the applied workloads")?;
    if let Some(e) = metrics.tracer_error() {
        if !args.no_trace && !current.is_empty() {
            super::warning(format_args!("no per-thread latency metrics: {e}"));
        }
    }
    let socket_path = args.report_socket.clone().unwrap_or_else(|| args.state_dir.join("report.sock"));
    if let Some(dir) = socket_path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {} for the report socket", dir.display()))?;
    }
    let _channel = ReportChannel::bind(&socket_path, metrics.clone())?;

    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        let _ = ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst));
    }
    eprintln!(
        "rtslice metrics: http://{}/metrics for {} workload(s) from {}; workloads report to {}={} (Ctrl-C stops)",
        args.listen,
        current.len(),
        args.state_dir.display(),
        REPORT_SOCKET_ENV,
        socket_path.display()
    );
    // Follow apply/reset while serving.
    let watcher = {
        let (metrics, stop, state_dir) = (metrics.clone(), stop.clone(), args.state_dir.clone());
        std::thread::spawn(move || {
            let mut last = std::time::Instant::now();
            while !stop.load(Ordering::Relaxed) {
                // Short sleeps so Ctrl-C ends the server promptly.
                std::thread::sleep(refresh.min(Duration::from_millis(200)));
                if last.elapsed() < refresh {
                    continue;
                }
                last = std::time::Instant::now();
                let Ok(now) = applied_workloads(&state_dir) else { continue };
                if now != current {
                    match metrics.set_workloads(now.clone()) {
                        Ok(()) => {
                            eprintln!("rtslice metrics: following {} workload(s)", now.len());
                            current = now;
                        }
                        Err(e) => super::warning(format_args!("{e}; trying again")),
                    }
                }
            }
        })
    };
    let registry = Arc::new(metrics.registry());
    let served = rtslice_metrics::serve(args.listen, registry, stop.clone());
    stop.store(true, Ordering::SeqCst);
    let _ = watcher.join();
    match served {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e @ rtslice_metrics::MetricsError::Listen { .. }) => {
            super::error(e);
            Ok(ExitCode::from(super::EXIT_FAILURE))
        }
        Err(e) => Err(e.into()),
    }
}
