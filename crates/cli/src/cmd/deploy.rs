//! `rtslice deploy FILE|-`: hands workloads (a spec: `apiVersion` and `workloads:`) to the daemon;
//! each is admitted on its own. Exit code 1 when any is pending.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use super::node_api::{call, failed, print_outcome, Socket};
use super::{invalid, EXIT_REJECTED};

#[derive(clap::Args)]
pub struct Args {
    /// Spec file, or - for standard input
    pub file: PathBuf,
    #[command(flatten)]
    pub socket: Socket,
    #[command(flatten)]
    pub json: super::Json,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let body = if args.file.as_os_str() == "-" {
        let mut b = Vec::new();
        if let Err(e) = std::io::stdin().read_to_end(&mut b) {
            return invalid(format_args!("standard input: {e}"));
        }
        b
    } else {
        match std::fs::read(&args.file) {
            Ok(b) => b,
            Err(e) => return invalid(format_args!("{}: {e}", args.file.display())),
        }
    };
    let reply = call(&args.socket.socket, "POST", "/v1/workloads", Some(("application/yaml", body)))?;
    if !(200..300).contains(&reply.status) {
        return Ok(failed(&reply));
    }
    if args.json.json {
        println!("{}", serde_json::to_string_pretty(&reply.body)?);
    } else {
        for w in reply.body["warnings"].as_array().into_iter().flatten() {
            super::warning(w.as_str().unwrap_or_default());
        }
        for o in reply.body["workloads"].as_array().into_iter().flatten() {
            print_outcome(o);
        }
    }
    Ok(if reply.status == 202 { ExitCode::from(EXIT_REJECTED) } else { ExitCode::SUCCESS })
}
