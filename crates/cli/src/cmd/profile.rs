//! `rtslice profile`: a running workload's execution demand per period (its threads' on-CPU time
//! summed per period window, from the BPF tracer) written as a profile file a spec's `profile:`
//! reads (docs/spec.md, "SLOs and profiles").
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use rtslice_spec::units::format_duration;
use rtslice_trace::{DemandProfiler, Target};

use super::trace::duration;

use super::EXIT_FAILURE;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["workload", "pid", "cgroup"])))]
pub struct Args {
    /// A workload applied by `rtslice apply` or deployed by the daemon (its cgroup)
    #[arg(long)]
    pub workload: Option<String>,
    /// Process id(s): all their threads, also those born later
    #[arg(long, value_delimiter = ',')]
    pub pid: Vec<u32>,
    /// A cgroup directory (v1 cpuset/cpu/cpuacct/memory/pids hierarchy, or v2) and its descendants
    #[arg(long)]
    pub cgroup: Option<PathBuf>,
    /// The workload's period (a TTI: 1ms); demand is summed per window of this length
    #[arg(long)]
    pub period: String,
    /// The relative deadline written into the profile (default: the period), e.g. 3ms for HARQ
    #[arg(long)]
    pub deadline: Option<String>,
    /// How long to measure
    #[arg(long, default_value = "10s")]
    pub duration: String,
    /// Write the profile (JSON) here instead of standard output
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// rtslice state directory (where `apply` and the daemon record their workloads)
    #[arg(long, default_value = rtslice_host::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
}

/// The cgroup of a workload `rtslice apply` applied, or the daemon deployed (its own journal segment).
fn workload_cgroup(name: &str, state_dir: &std::path::Path) -> anyhow::Result<Result<PathBuf, String>> {
    let dir = rtslice_host::StateDir::new(state_dir);
    let records = rtslice_host::applied_records(&dir).with_context(|| format!("reading rtslice state in {}", state_dir.display()))?;
    if let Some(w) = records.into_iter().flat_map(|r| r.workloads).find(|w| w.name == name) {
        return Ok(Ok(w.group.cpuset));
    }
    Ok(Err(format!(
        "no workload named {name:?} is applied or deployed (state in {}); check `rtslice status` / `rtslice list`, or give --pid or --cgroup",
        state_dir.display()
    )))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let parsed = (|| {
        let period = duration("period", &args.period)?;
        let deadline = args.deadline.as_deref().map(|d| duration("deadline", d)).transpose()?.unwrap_or(period);
        let total = duration("duration", &args.duration)?;
        if total < period * 10 {
            return Err(format!("--duration {} holds fewer than 10 periods of {}; measure longer", args.duration, args.period));
        }
        Ok((period, deadline, total))
    })();
    let (period, deadline, total) = match parsed {
        Ok(p) => p,
        Err(e) => return super::invalid(e),
    };
    let target = if let Some(name) = &args.workload {
        match workload_cgroup(name, &args.state_dir)? {
            Ok(c) => Target::Cgroup(c),
            Err(e) => return super::invalid(e),
        }
    } else if !args.pid.is_empty() {
        Target::Pids(args.pid.clone())
    } else {
        Target::Cgroup(args.cgroup.clone().expect("clap requires one target"))
    };
    let what = target.to_string();
    let profiler = match DemandProfiler::start(&target, period) {
        Ok(p) => p,
        Err(e) => return super::trace::start_failed(e),
    };
    eprintln!("rtslice: profiling {what} for {} in windows of {}", format_duration(total), format_duration(period));
    let samples = profiler.measure(total);
    if samples.lost_buckets > 0 || samples.overflow_ns > 0 {
        super::warning(format_args!(
            "{} bucket(s) were read too late and {} of on-CPU time came in slices too long to spread over their windows; the profile undercounts them",
            samples.lost_buckets,
            format_duration(std::time::Duration::from_nanos(samples.overflow_ns))
        ));
    }
    let Some(profile) = samples.profile(deadline, format!("rtslice profile of {what} over {}", format_duration(total))) else {
        super::error(format_args!("{what} was never on a CPU in {}: is it running? Nothing written", format_duration(total)));
        return Ok(ExitCode::from(EXIT_FAILURE));
    };
    let e = &profile.execution;
    let show = |d: Option<std::time::Duration>| d.map(format_duration).unwrap_or_else(|| "-".into());
    eprintln!(
        "rtslice: {} windows: min {}, p50 {}, p90 {}, p99 {}, p99.9 {}, max {} per {}",
        profile.histogram.iter().map(|b| b.count).sum::<u64>(),
        show(e.min),
        show(e.p50),
        show(e.p90),
        show(e.p99),
        show(e.p999),
        format_duration(e.max),
        format_duration(period)
    );
    let json = serde_json::to_string_pretty(&profile)? + "\n";
    match &args.output {
        Some(path) => std::fs::write(path, json).with_context(|| format!("writing the profile to {}", path.display()))?,
        None => print!("{json}"),
    }
    Ok(ExitCode::SUCCESS)
}
