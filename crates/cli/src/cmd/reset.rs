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
    #[command(flatten)]
    pub json: super::Json,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let report = rtslice_host::reset(
        &StateDir::new(&args.state_dir),
        ResetOptions { keep_workloads: args.keep_workloads, forget_stale: args.forget },
    )?;
    if args.json.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if report.nothing_applied {
        println!("nothing to reset ({} holds no applied state)", args.state_dir.display());
    } else {
        println!(
            "reset: {} changes undone, {} launched workload(s) stopped; the host is as before apply",
            report.undone, report.stopped
        );
    }
    Ok(ExitCode::SUCCESS)
}
