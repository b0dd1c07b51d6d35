//! `rtslice get NAME`: one workload of the daemon — phase, CPUs, pids, threads and drift.

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
    let name = &target.name;
    let reply = call(&target.socket.socket, "GET", &path, None)?;
    if reply.status != 200 {
        return Ok(failed(&reply));
    }
    let w = &reply.body;
    if target.json.json {
        println!("{}", serde_json::to_string_pretty(w)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{name}: {} (generation {})", w["phase"].as_str().unwrap_or("?"), w["generation"]);
    if let Some(r) = w["reason"].as_str() {
        println!("  pending: {r}");
    }
    if let Some(x) = w["exit"].as_str() {
        println!("  exited: {x}");
    }
    if let Some(p) = w["restart"]["policy"].as_str() {
        let next = w["restartAt"].as_f64().map(|t| format!(", next restart in {:.1} s", t - now())).unwrap_or_default();
        println!("  restart: {p} ({} in a row{next})", w["restarts"].as_u64().unwrap_or(0));
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

fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}
