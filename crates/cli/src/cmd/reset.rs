//! `rtslice reset`: undo everything rtslice applied (also after a crash), from the journal.

use std::path::PathBuf;
use std::process::ExitCode;

use rtslice_host::{ResetOptions, StateDir};

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = rtslice_host::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Leave launched workloads running (they move back to the root cgroups)
    #[arg(long)]
    pub keep_workloads: bool,
    /// Drop a state written before the last reboot without touching the kernel
    #[arg(long)]
    pub forget: bool,
    /// Seconds launched workloads get to exit after SIGTERM before SIGKILL
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    pub grace: f64,
    #[command(flatten)]
    pub json: super::Json,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let grace = std::time::Duration::try_from_secs_f64(args.grace)
        .map_err(|_| anyhow::anyhow!("--grace {}: give a number of seconds ≥ 0, e.g. --grace 5", args.grace))?;
    let report = rtslice_host::reset(
        &StateDir::new(&args.state_dir),
        ResetOptions { keep_workloads: args.keep_workloads, forget_stale: args.forget, grace },
    )?;
    if args.json.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if report.nothing_applied {
        println!("nothing to reset ({} holds no applied state)", args.state_dir.display());
    } else {
        // reset returns only when every launched process is gone, so this is true when printed.
        let how = if report.stopped == 0 {
            String::new()
        } else {
            format!(
                " ({} process(es) exited on SIGTERM, {} needed SIGKILL after {} s; none is left)",
                report.terminated, report.killed, args.grace
            )
        };
        println!(
            "reset: {} changes undone, {} launched workload(s) stopped{how}; the host is as before apply",
            report.undone, report.stopped
        );
    }
    Ok(ExitCode::SUCCESS)
}
