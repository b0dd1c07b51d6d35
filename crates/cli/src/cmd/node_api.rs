//! What the daemon's client subcommands (`deploy`, `remove`, `resize`, `list`, `get`) share: the
//! socket option, one request, and the mapping of HTTP answers to rtslice's exit codes.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use rtslice_node::Reply;

use super::{error, EXIT_FAILURE, EXIT_INVALID, EXIT_REJECTED};

/// `--socket`: where the daemon listens.
#[derive(clap::Args, Clone, Debug)]
pub struct Socket {
    /// The daemon's unix socket
    #[arg(long, env = "RTSLICE_SOCKET", default_value = rtslice_node::DEFAULT_SOCKET)]
    pub socket: PathBuf,
}

/// What `get`, `remove` and `resize` share: the workload, the daemon's socket, `--json`.
#[derive(clap::Args, Clone, Debug)]
pub struct Target {
    /// The workload's name
    pub name: String,
    #[command(flatten)]
    pub socket: Socket,
    #[command(flatten)]
    pub json: super::Json,
}

impl Target {
    /// The workload's resource, `/v1/workloads/{name}`; `Err` (the message printed, exit code 2)
    /// when the name could not be one (names are `[A-Za-z0-9_.-]`).
    pub fn resource(&self) -> Result<String, ExitCode> {
        match segment(&self.name) {
            Some(n) => Ok(format!("/v1/workloads/{n}")),
            None => {
                error(format_args!("{:?} is not a workload name", self.name));
                Err(ExitCode::from(EXIT_INVALID))
            }
        }
    }
}

/// One request to the daemon.
pub fn call(socket: &Path, method: &str, path: &str, body: Option<(&str, Vec<u8>)>) -> anyhow::Result<Reply> {
    Ok(rtslice_node::request_blocking(socket, method, path, body)?)
}

/// The exit code of an answer that is not a success, after printing its error (and every located
/// spec error): 2 for invalid input, 1 for a refusal (exists, not found, stale, does not fit), 3 else.
pub fn failed(reply: &Reply) -> ExitCode {
    let msg = reply.body["error"].as_str().unwrap_or("the daemon gave no reason");
    error(format_args!("{msg} (HTTP {})", reply.status));
    if let Some(list) = reply.body["errors"].as_array() {
        for e in list.iter().filter_map(|e| e.as_str()) {
            eprintln!("  {e}");
        }
    }
    ExitCode::from(match reply.status {
        400 | 413 => EXIT_INVALID,
        404 | 409 | 422 => EXIT_REJECTED,
        _ => EXIT_FAILURE,
    })
}

/// A workload name as a path segment (names are `[A-Za-z0-9_.-]`; anything else is refused here).
fn segment(name: &str) -> Option<&str> {
    (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))).then_some(name)
}

pub fn print_outcome(o: &serde_json::Value) {
    let name = o["name"].as_str().unwrap_or("?");
    match o["phase"].as_str() {
        Some("running") => {
            let cpus: Vec<String> = o["cpus"].as_array().map(|a| a.iter().map(|c| c.to_string()).collect()).unwrap_or_default();
            println!("{name}: running on CPUs [{}] (generation {})", cpus.join(","), o["generation"]);
        }
        _ => {
            println!("{name}: pending: {}", o["reason"].as_str().unwrap_or("?"));
            if let Some(moves) = o["defrag"]["moves"].as_array() {
                for m in moves {
                    println!("  proposal: move {m}");
                }
            }
        }
    }
}
