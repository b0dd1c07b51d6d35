//! `rtslice list`: the daemon's workloads, running and pending.

use std::process::ExitCode;

use super::node_api::{call, failed, Socket};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub socket: Socket,
    #[command(flatten)]
    pub json: super::Json,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let reply = call(&args.socket.socket, "GET", "/v1/workloads", None)?;
    if reply.status != 200 {
        return Ok(failed(&reply));
    }
    if args.json.json {
        println!("{}", serde_json::to_string_pretty(&reply.body)?);
        return Ok(ExitCode::SUCCESS);
    }
    let list = reply.body["workloads"].as_array().cloned().unwrap_or_default();
    println!("{:<24} {:<8} {:>4} {:<8} {:<16} {:>5}  REASON", "NAME", "PHASE", "GEN", "CPUS", "PIDS", "DRIFT");
    for w in &list {
        let pids: Vec<String> = w["pids"].as_array().map(|a| a.iter().map(|p| p.to_string()).collect()).unwrap_or_default();
        let drift = w["drift"].as_array().map_or(0, |d| d.len());
        println!(
            "{:<24} {:<8} {:>4} {:<8} {:<16} {:>5}  {}",
            w["name"].as_str().unwrap_or("?"),
            w["phase"].as_str().unwrap_or("?"),
            w["generation"].as_u64().unwrap_or(0),
            w["cpus"].as_str().unwrap_or(""),
            pids.join(","),
            drift,
            w["reason"].as_str().unwrap_or("")
        );
    }
    if list.is_empty() {
        println!("(no workloads)");
    }
    Ok(ExitCode::SUCCESS)
}
