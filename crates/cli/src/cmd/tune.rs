//! `rtslice tune [SPEC]`: the host tuning of a real-time node (what tuned's realtime profile and
//! OpenShift's PerformanceProfile do at run time), journaled so `rtslice reset` (or `tune --undo`)
//! puts every value back. Without `--apply` it only shows what it would change (a dry run). The
//! reserved and housekeeping CPUs come from the spec's node (its CPUs minus `housekeeping`) or from
//! `--reserved` / `--housekeeping`. Exit codes: 0 done (or dry run), 1 refused (already tuned),
//! 2 invalid input, 3 the host failed a write (everything rolled back).

use std::path::PathBuf;
use std::process::ExitCode;

use rtslice_host::tune::{self, HugepageRequest, Knob, Thp, TuneRequest, TuningPlan};
use rtslice_host::{CpuList, Fault, HostError, StateDir};

use super::{EXIT_FAILURE, EXIT_REJECTED};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThpArg {
    Always,
    Madvise,
    Never,
    /// Leave transparent hugepages as they are
    Keep,
}

#[derive(clap::Args)]
pub struct Args {
    /// A spec whose node gives the CPUs: reserved = the node's CPUs minus its housekeeping CPUs
    pub spec: Option<PathBuf>,
    /// Make the changes (journaled); without it nothing is written
    #[arg(long, conflicts_with_all = ["dry_run", "undo"])]
    pub apply: bool,
    /// Only show what would change (the default)
    #[arg(long)]
    pub dry_run: bool,
    /// Undo the tuning only (workloads applied with `rtslice apply` stay); `rtslice reset` undoes both
    #[arg(long, conflicts_with = "dry_run")]
    pub undo: bool,
    /// Reserved CPUs (overrides the spec's), e.g. 2-15
    #[arg(long, value_name = "CPUS")]
    pub reserved: Option<String>,
    /// Housekeeping CPUs (overrides the spec's), e.g. 0-1
    #[arg(long, value_name = "CPUS")]
    pub housekeeping: Option<String>,
    /// Longest C-state exit latency allowed on reserved CPUs, in µs (0: no idle state, the CPU polls)
    #[arg(long, default_value_t = 0, value_name = "US")]
    pub max_idle_latency: u32,
    /// Transparent hugepages mode
    #[arg(long, value_enum, default_value = "never")]
    pub thp: ThpArg,
    /// Set kernel.sched_rt_runtime_us (default: left alone; rtslice's admission needs RT throttling on)
    #[arg(long, value_name = "US", allow_negative_numbers = true)]
    pub rt_runtime_us: Option<i64>,
    /// Hugepages to reserve on a NUMA node, NODE:SIZE:COUNT (e.g. 0:2M:512, 1:1G:4); repeatable
    #[arg(long, value_name = "NODE:SIZE:COUNT", value_parser = HugepageRequest::parse)]
    pub hugepages: Vec<HugepageRequest>,
    /// Leave a knob alone (governor, pm_qos, cstates, timer_migration, irq_default_affinity,
    /// workqueue_cpumask, watchdog_cpumask, rt_runtime, thp, hugepages); repeatable
    #[arg(long, value_name = "KNOB", value_parser = parse_knob)]
    pub skip: Vec<Knob>,
    /// Where the journals live (reset and status read them)
    #[arg(long, default_value = rtslice_host::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    #[command(flatten)]
    pub json: super::Json,
}

fn parse_knob(text: &str) -> Result<Knob, String> {
    Knob::parse(text).ok_or_else(|| {
        format!("unknown knob {text:?}; one of: {}", Knob::ALL.iter().map(|k| k.name()).collect::<Vec<_>>().join(", "))
    })
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let dir = StateDir::new(&args.state_dir);
    if args.undo {
        let report = tune::reset_tuning(&dir)?;
        if args.json.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else if report.nothing_applied {
            println!("nothing to undo: the host is not tuned by rtslice ({})", tune::tuning_state_dir(&dir).path.display());
        } else {
            println!("tuning undone: {} values restored", report.undone);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let req = match request(&args) {
        Ok(r) => r,
        Err(Problem::Invalid(msg)) => return super::invalid(msg),
        Err(Problem::Other(e)) => return Err(e),
    };
    if !args.apply {
        return match tune::plan_tuning(&req) {
            Ok(plan) => {
                if args.json.json {
                    println!("{}", serde_json::to_string_pretty(&plan)?);
                } else {
                    print!("{}", render(&plan, false));
                    println!("dry run: nothing was changed; `rtslice tune --apply` makes these changes (journaled)");
                }
                Ok(ExitCode::SUCCESS)
            }
            Err(e @ HostError::Invalid(_)) => super::invalid(e),
            Err(e) => Err(e.into()),
        };
    }
    match tune::apply_tuning(&req, &dir, Fault::default()) {
        Ok(tuned) => {
            if args.json.json {
                println!("{}", serde_json::to_string_pretty(&tuned)?);
            } else {
                print!("{}", render(&tuned.plan, true));
                println!(
                    "{} values changed, journaled in {}; undo with `rtslice tune --undo` or `rtslice reset`",
                    tuned.changes,
                    tune::tuning_state_dir(&dir).path.display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ HostError::Invalid(_)) => super::invalid(e),
        Err(e @ HostError::Rejected(_)) => {
            super::error(e);
            Ok(ExitCode::from(EXIT_REJECTED))
        }
        Err(e) => {
            super::error(format_args!("tune failed: {e}"));
            Ok(ExitCode::from(EXIT_FAILURE))
        }
    }
}

enum Problem {
    Invalid(String),
    Other(anyhow::Error),
}

fn request(args: &Args) -> Result<TuneRequest, Problem> {
    let cpus = |flag: &str, text: &str| {
        CpuList::parse(text).map_err(|e| Problem::Invalid(format!("--{flag} {text:?}: {e}; write a CPU list such as 2-15 or 1,3")))
    };
    let (mut reserved, mut housekeeping) = (None, None);
    if let Some(path) = &args.spec {
        let (text, name) = super::plan::read_spec(path).map_err(Problem::Other)?;
        let spec = rtslice_spec::parse(&text, &name).map_err(|errors| {
            Problem::Invalid(format!("{errors}\n{} error(s) in {name}; nothing tuned (see docs/spec.md)", errors.len()))
        })?;
        let facts = rtslice_host::facts::planning_facts().map_err(|e| Problem::Other(e.into()))?;
        let plan = rtslice_plan::plan(&spec, &facts);
        let hk = CpuList::from_cpus(plan.node.housekeeping.iter().copied());
        reserved = Some(CpuList::from_cpus(plan.node.cpus.iter().copied()).difference(&hk));
        housekeeping = Some(hk);
    }
    if let Some(r) = &args.reserved {
        reserved = Some(cpus("reserved", r)?);
    }
    if let Some(h) = &args.housekeeping {
        housekeeping = Some(cpus("housekeeping", h)?);
    }
    let (Some(reserved), Some(housekeeping)) = (reserved, housekeeping) else {
        return Err(Problem::Invalid(
            "which CPUs? give a spec (its node's CPUs and housekeeping) or both --reserved and --housekeeping".into(),
        ));
    };
    let mut req = TuneRequest::new(reserved, housekeeping);
    req.skip = args.skip.clone();
    req.max_idle_latency_us = args.max_idle_latency;
    req.rt_runtime_us = args.rt_runtime_us;
    req.thp = match args.thp {
        ThpArg::Always => Some(Thp::Always),
        ThpArg::Madvise => Some(Thp::Madvise),
        ThpArg::Never => Some(Thp::Never),
        ThpArg::Keep => None,
    };
    req.hugepages = args.hugepages.clone();
    Ok(req)
}

/// The human view: each knob's change, what this host lacks, and the kernel command line to add.
fn render(plan: &TuningPlan, applied: bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "tuning: reserved CPUs [{}], housekeeping CPUs [{}]", plan.reserved, plan.housekeeping);
    for w in &plan.writes {
        let what = if !w.needed() {
            "already set"
        } else if applied {
            "changed"
        } else {
            "would change"
        };
        let _ = writeln!(out, "  {:<22} {}: {:?} -> {:?} ({what})", w.knob.name(), w.path.display(), w.current, w.wanted);
    }
    for a in &plan.absent {
        let _ = writeln!(out, "  {:<22} absent: {}", a.knob.name(), a.reason);
    }
    let add = plan.cmdline_to_add();
    if add.is_empty() {
        let _ = writeln!(out, "kernel command line: the running kernel was booted with every word needed");
    } else {
        let _ = writeln!(out, "kernel command line: add (takes effect at the next boot; rtslice never edits the boot loader):");
        let _ = writeln!(out, "  {add}");
        for b in plan.boot.iter().filter(|b| !b.satisfied()) {
            let now = b.booted_with.as_deref().map(|w| format!(" (booted with {w})")).unwrap_or_default();
            let _ = writeln!(out, "    {:<38} {}{now}", b.word, b.why);
        }
    }
    for n in &plan.boot_notes {
        let _ = writeln!(out, "  note: {n}");
    }
    out
}
