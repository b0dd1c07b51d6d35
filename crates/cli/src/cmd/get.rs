//! `rtslice get NAME`: one workload of the daemon — phase, CPUs, pids, threads and drift.

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
    let reply = call(&args.socket.socket, "GET", &format!("/v1/workloads/{name}"), None)?;
    if reply.status != 200 {
        return Ok(failed(&reply));
    }
    let w = &reply.body;
    if args.json.json {
        println!("{}", serde_json::to_string_pretty(w)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{name}: {} (generation {})", w["phase"].as_str().unwrap_or("?"), w["generation"]);
    if let Some(r) = w["reason"].as_str() {
        println!("  pending: {r}");
    }
    println!("  cpus: {}", w["cpus"].as_str().unwrap_or(""));
    if let Some(pids) = w["pids"].as_array() {
        println!("  pids: {}", pids.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", "));
    }
    for t in w["threads"].as_array().into_iter().flatten() {
        println!("  thread {} ({}): {} on [{}]", t["tid"], t["comm"].as_str().unwrap_or(""), t["policy"].as_str().unwrap_or(""), t["cpus"].as_str().unwrap_or(""));
    }
    let drift = w["drift"].as_array().cloned().unwrap_or_default();
    for d in &drift {
        println!("  drift: {}: expected {}, actual {}", d["what"].as_str().unwrap_or(""), d["expected"], d["actual"]);
    }
    Ok(if drift.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(super::EXIT_REJECTED) })
}
