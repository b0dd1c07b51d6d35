//! `rtslice trace`: per-thread scheduling latency (eBPF), switches, CPU, IRQs and counters of a
//! workload, process or cgroup; a live view while it runs, then the studies' table.
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use rtslice_trace::{Mode, Options, Target, TraceError, TraceReport, TraceSession};

use super::EXIT_FAILURE;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    /// One row per thread
    Tid,
    /// Merge threads with the same name (thread pools)
    Name,
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["workload", "pid", "tid", "cgroup"])))]
pub struct Args {
    /// A workload applied by `rtslice apply` (its cgroup, so threads born later are traced too)
    #[arg(long)]
    pub workload: Option<String>,
    /// Process id(s): all their threads (comma-separated or repeated)
    #[arg(long, value_delimiter = ',')]
    pub pid: Vec<u32>,
    /// Exactly these thread ids
    #[arg(long, value_delimiter = ',')]
    pub tid: Vec<u32>,
    /// A cgroup directory (v1 cpuset/cpu/cpuacct/memory/pids hierarchy, or v2) and its descendants
    #[arg(long)]
    pub cgroup: Option<PathBuf>,
    /// How long to trace (e.g. 10s, 500ms, 2m); Ctrl-C stops early and still reports
    #[arg(long, default_value = "10s")]
    pub duration: String,
    /// Live view refresh interval
    #[arg(long, default_value = "1s")]
    pub interval: String,
    /// Rows of the table: per thread, or merged by thread name
    #[arg(long, value_enum, default_value = "tid")]
    pub by: By,
    // The report with raw histograms as JSON on stdout; the table then goes to stderr.
    #[command(flatten)]
    pub json: super::Json,
    /// Also write the report (with raw histograms) as JSON to FILE
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also write the raw histograms as CSV to FILE
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// IRQs to attribute separately (regex over /proc/interrupts names, or an IRQ number); with
    /// --workload the spec's IRQ rules are added
    #[arg(long = "irq")]
    pub irqs: Vec<String>,
    /// Use only the /proc schedstat fallback (no BPF; means, no histograms)
    #[arg(long, conflicts_with = "require_bpf")]
    pub schedstat: bool,
    /// Fail instead of falling back to schedstat when BPF cannot be used
    #[arg(long)]
    pub require_bpf: bool,
    #[command(flatten)]
    pub quiet: super::Quiet,
    /// rtslice state directory (where `apply` recorded its workloads)
    #[arg(long, default_value = rtslice_host::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
}

pub(super) fn duration(flag: &str, text: &str) -> Result<Duration, String> {
    let d = rtslice_spec::units::parse_duration(text).map_err(|e| format!("--{flag} {text:?}: {e}"))?;
    if d.is_zero() {
        return Err(format!("--{flag} must be longer than 0"));
    }
    Ok(d)
}

/// The workload's cgroup and IRQ patterns from what `rtslice apply` recorded.
/// A workload with a cache allocation also names its own resctrl group.
type Resolved = (Target, Vec<String>, Option<std::path::PathBuf>);

fn resolve_workload(name: &str, state_dir: &std::path::Path) -> anyhow::Result<Result<Resolved, String>> {
    let dir = rtslice_host::StateDir::new(state_dir);
    let records = rtslice_host::applied_records(&dir).with_context(|| format!("reading rtslice state in {}", state_dir.display()))?;
    if records.is_empty() {
        return Ok(Err(format!(
            "no workload is applied (no state in {}): run `rtslice apply SPEC` first, or trace with --pid/--cgroup",
            state_dir.display()
        )));
    }
    let Some(w) = records.iter().flat_map(|r| &r.workloads).find(|w| w.name == name) else {
        let names: Vec<&str> = records.iter().flat_map(|r| &r.workloads).map(|w| w.name.as_str()).collect();
        return Ok(Err(format!("no applied workload named {name:?}; applied: {}", names.join(", "))));
    };
    // Every IRQ rule applied with it: a rule that moves IRQs away from the workload's CPUs is one
    // workload's claim but concerns them all.
    let irqs = records.iter().flat_map(|r| &r.setup.irqs).map(|r| r.action.clone()).collect();
    Ok(Ok((Target::Cgroup(w.group.cpuset.clone()), irqs, w.resctrl_group.clone())))
}

/// A tracer that could not start: a target that does not exist is invalid input (exit 2), a tracer
/// the host cannot run a host failure (exit 3).
pub(super) fn start_failed(e: TraceError) -> anyhow::Result<ExitCode> {
    match e {
        TraceError::NoSuchProcess(_) | TraceError::NoSuchThread(_) | TraceError::Cgroup { .. } | TraceError::Empty(_) => {
            super::invalid(e.to_string())
        }
        e => {
            super::error(e);
            Ok(ExitCode::from(EXIT_FAILURE))
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let invalid = |msg: String| super::invalid(msg);
    let total = match duration("duration", &args.duration) {
        Ok(d) => d,
        Err(e) => return invalid(e),
    };
    let interval = match duration("interval", &args.interval) {
        Ok(d) => d,
        Err(e) => return invalid(e),
    };
    let mut irq_names = args.irqs.clone();
    let mut resctrl_group = None;
    let target = if let Some(name) = &args.workload {
        match resolve_workload(name, &args.state_dir)? {
            Ok((t, irqs, group)) => {
                irq_names.extend(irqs);
                resctrl_group = group;
                t
            }
            Err(e) => return invalid(e),
        }
    } else if !args.pid.is_empty() {
        Target::Pids(args.pid.clone())
    } else if !args.tid.is_empty() {
        Target::Tids(args.tid.clone())
    } else {
        Target::Cgroup(args.cgroup.clone().expect("clap requires one target"))
    };
    let mode = if args.schedstat {
        Mode::Schedstat
    } else if args.require_bpf {
        Mode::Bpf
    } else {
        Mode::Auto
    };
    let target_desc = target.to_string();
    let session = match TraceSession::start(target, Options { mode, irq_names, hw_counters: true, raw_tp: false, resctrl_group }) {
        Ok(s) => s,
        Err(e) => return start_failed(e),
    };
    let json_to_stdout = args.json.json;
    let report = trace_loop(session, &target_desc, total, interval, args.quiet.quiet)?;
    let report = if args.by == By::Name { report.merged_by_name() } else { report };

    let table = report.render_table();
    if json_to_stdout {
        eprint!("{table}");
    } else {
        print!("{table}");
    }
    if json_to_stdout || args.output.is_some() {
        let text = serde_json::to_string_pretty(&report)?;
        if let Some(path) = &args.output {
            std::fs::write(path, text.clone() + "\n").with_context(|| format!("cannot write the JSON report to {}", path.display()))?;
            eprintln!("JSON report: {}", path.display());
        }
        if json_to_stdout {
            println!("{text}");
        }
    }
    if let Some(path) = &args.csv {
        std::fs::write(path, report.to_csv()).with_context(|| format!("cannot write the CSV histograms to {}", path.display()))?;
        eprintln!("CSV histograms: {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn trace_loop(session: TraceSession, target: &str, total: Duration, interval: Duration, quiet: bool) -> anyhow::Result<TraceReport> {
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        // A second handler cannot be installed in one process; tracing still works without it.
        let _ = ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst));
    }
    let started = Instant::now();
    let mut next = started + interval;
    let mut last_events: std::collections::HashMap<u32, (u64, u64)> = Default::default();
    eprintln!(
        "rtslice trace: {} via {} for {:.1} s (Ctrl-C stops early)",
        target,
        match session.source() {
            rtslice_trace::Source::Bpf => "BPF",
            rtslice_trace::Source::Schedstat => "schedstat (fallback)",
        },
        total.as_secs_f64()
    );
    while !stop.load(Ordering::SeqCst) && started.elapsed() < total {
        let now = Instant::now();
        let wake = next.min(started + total);
        if wake > now {
            std::thread::sleep((wake - now).min(Duration::from_millis(100)));
            continue;
        }
        next += interval;
        if quiet {
            continue;
        }
        let snap = session.snapshot();
        let mut out = std::io::stderr().lock();
        let _ = writeln!(
            out,
            "[{:>6.1}s] {:<16} {:>7} {:>8} {:>8} {:>9} {:>9} {:>6}",
            snap.duration_s, "thread", "tid", "wake/s", "preem/s", "p99 µs", "max µs", "CPU%"
        );
        let mut rows: Vec<_> = snap.threads.iter().collect();
        rows.sort_by(|a, b| b.wakeup.events.cmp(&a.wakeup.events));
        for t in rows.iter().take(12) {
            let (w0, p0) = last_events.get(&t.tid).copied().unwrap_or((0, 0));
            let secs = interval.as_secs_f64();
            let _ = writeln!(
                out,
                "{:>9} {:<16} {:>7} {:>8.0} {:>8.0} {:>9} {:>9} {:>6.1}",
                "",
                t.name.chars().take(16).collect::<String>(),
                t.tid,
                (t.wakeup.events - w0) as f64 / secs,
                (t.preempt.events - p0) as f64 / secs,
                t.wakeup.p99_us.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into()),
                t.wakeup.max_us.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into()),
                t.cpu_pct
            );
        }
        if rows.len() > 12 {
            let _ = writeln!(out, "{:>9} … {} more threads", "", rows.len() - 12);
        }
        for t in &snap.threads {
            last_events.insert(t.tid, (t.wakeup.events, t.preempt.events));
        }
    }
    Ok(session.finish())
}
