//! `rtslice remove NAME`: stops a workload the daemon runs and returns its CPUs and bandwidth.

use std::process::ExitCode;

use super::node_api::{call, failed, Target};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub target: Target,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Args { target } = args;
    let path = match target.resource() {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let reply = call(&target.socket.socket, "DELETE", &path, None)?;
    if reply.status != 200 {
        return Ok(failed(&reply));
    }
    if target.json.json {
        println!("{}", serde_json::to_string_pretty(&reply.body)?);
    } else {
        println!("{}: removed", target.name);
    }
    Ok(ExitCode::SUCCESS)
}
