//! `rtslice agent`: keeps an applied plan's workloads in policy (started by `rtslice apply`).

use std::path::PathBuf;
use std::process::ExitCode;

use rtslice_host::StateDir;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = rtslice_host::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Poll task lists instead of listening to the netlink process connector
    #[arg(long)]
    pub poll: bool,
    /// Polling interval in milliseconds (with --poll, or when the connector is unavailable)
    #[arg(long, default_value_t = 2.0)]
    pub poll_ms: f64,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let opts = rtslice_agent::AgentOptions {
        force_polling: args.poll,
        poll_interval: std::time::Duration::from_secs_f64(args.poll_ms.max(0.1) / 1000.0),
        ..Default::default()
    };
    rtslice_agent::run(&StateDir::new(&args.state_dir), &opts)?;
    Ok(ExitCode::SUCCESS)
}
