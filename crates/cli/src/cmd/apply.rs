//! `rtslice apply SPEC`: plan the spec for this host, then make it real (transactionally). Exit codes:
//! 0 applied, 1 rejected (by the planner or by the host's admission), 2 invalid spec, 3 the host
//! failed a step (everything rolled back).

use std::path::PathBuf;
use std::process::ExitCode;

use rtslice_host::{AgentCommand, ApplyOptions, HostError, Mechanism, OciDefaults, StateDir};

use super::{EXIT_FAILURE, EXIT_INVALID, EXIT_REJECTED};

#[derive(clap::Args)]
pub struct Args {
    /// The spec file (YAML, `apiVersion: rtslice/v1`)
    pub spec: PathBuf,
    /// Where the journal lives (reset and status read it)
    #[arg(long, default_value = rtslice_host::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Reservation mechanism (default: the best this host has; see `rtslice doctor`)
    #[arg(long, value_enum)]
    pub mechanism: Option<super::MechanismArg>,
    /// Do not start the agent (threads created after apply then get no rules)
    #[arg(long)]
    pub no_agent: bool,
    /// Set the fair_server runtime to 0 on CPUs holding only reserved RT work (debugfs)
    #[arg(long)]
    pub fair_server_off: bool,
    /// Turn the HRTICK and HRTICK_DL scheduler features on (debugfs; reset restores them)
    #[arg(long)]
    pub hrtick: bool,
    /// OCI launches: give the container its own network namespace
    #[arg(long)]
    pub netns: bool,
    /// OCI launches: apply Docker's default seccomp allow-list
    #[arg(long)]
    pub seccomp: bool,
    #[command(flatten)]
    pub json: super::Json,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (text, name) = super::plan::read_spec(&args.spec)?;
    let spec = match rtslice_spec::parse(&text, &name) {
        Ok(s) => s,
        Err(errors) => {
            eprintln!("{errors}");
            super::error(format_args!("{} error(s) in {name}; nothing applied (see docs/spec.md)", errors.len()));
            return Ok(ExitCode::from(EXIT_INVALID));
        }
    };
    let facts = super::plan::host_facts(None, None)?;
    // The plan `rtslice plan` prints on this host: its kernel limits and mechanism (plan == apply).
    let plan = match rtslice_host::HostFacts::detect() {
        Ok(host) => rtslice_plan::plan_for_kernel(&spec, &facts, &host.kernel_facts(), args.mechanism.map(Mechanism::from)),
        Err(_) => rtslice_plan::plan(&spec, &facts),
    };
    for w in &plan.warnings {
        super::warning(w);
    }
    let opts = ApplyOptions {
        state_dir: StateDir::new(&args.state_dir),
        mechanism: args.mechanism.map(Mechanism::from),
        agent: if args.no_agent { None } else { Some(AgentCommand::rtslice_binary(std::env::current_exe()?)) },
        fair_server_off: args.fair_server_off,
        hrtick: args.hrtick,
        ..Default::default()
    };
    match rtslice_host::apply(&plan, OciDefaults { netns: args.netns, seccomp: args.seccomp }, &opts) {
        Ok(applied) => {
            if args.json.json {
                println!("{}", serde_json::to_string_pretty(&applied)?);
            } else {
                println!("applied {name}: mechanism {} ({})", applied.mechanism, applied.mechanism.describe());
                for w in &applied.workloads {
                    let pids: Vec<String> = w.pids.iter().map(|p| p.pid.to_string()).collect();
                    println!(
                        "  {:<16} CPUs {:<8} cgroup {}  pids [{}]{}",
                        w.name,
                        w.cpus.to_string(),
                        w.group.cpuset.display(),
                        pids.join(" "),
                        w.container.as_ref().map(|c| format!("  container {c}")).unwrap_or_default()
                    );
                }
                if let Some(a) = applied.agent {
                    println!("  agent pid {} keeps threads born later in policy", a.pid);
                }
                println!("  {} changes journaled in {}; undo with `rtslice reset`", applied.changes, args.state_dir.display());
            }
            for w in &applied.warnings {
                super::warning(w);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ HostError::Rejected(_)) => {
            super::error(e);
            Ok(ExitCode::from(EXIT_REJECTED))
        }
        Err(e) => {
            super::error(format_args!("apply failed: {e}"));
            Ok(ExitCode::from(EXIT_FAILURE))
        }
    }
}
