//! `rtslice remove NAME`: stops a workload the daemon runs and returns its CPUs and bandwidth.

use std::process::ExitCode;

use super::invalid;
use super::node_api::{call, failed, segment, Socket};

#[derive(clap::Args)]
pub struct Args {
    pub name: String,
    #[command(flatten)]
    pub socket: Socket,
    #[command(flatten)]
    pub json: super::Json,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Some(name) = segment(&args.name) else { return invalid(format_args!("{:?} is not a workload name", args.name)) };
    let reply = call(&args.socket.socket, "DELETE", &format!("/v1/workloads/{name}"), None)?;
    if reply.status != 200 {
        return Ok(failed(&reply));
    }
    if args.json.json {
        println!("{}", serde_json::to_string_pretty(&reply.body)?);
    } else {
        println!("{name}: removed");
    }
    Ok(ExitCode::SUCCESS)
}
