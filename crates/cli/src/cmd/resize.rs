//! `rtslice resize NAME --runtime/--period/--count/--cpus`: grows or shrinks a running workload in
//! place, through admission (refused with the reason when it does not fit).

use std::process::ExitCode;

use super::invalid;
use super::node_api::{call, failed, print_outcome, Target};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub target: Target,
    /// New runtime per period (e.g. 300us)
    #[arg(long)]
    pub runtime: Option<String>,
    /// New period (e.g. 1ms)
    #[arg(long)]
    pub period: Option<String>,
    /// New number of CPUs
    #[arg(long)]
    pub count: Option<u32>,
    /// Exactly these CPUs (e.g. 2-3)
    #[arg(long)]
    pub cpus: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let path = match args.target.resource() {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let socket = &args.target.socket.socket;
    if args.runtime.is_none() && args.period.is_none() && args.count.is_none() && args.cpus.is_none() {
        return invalid("nothing to resize: give --runtime, --period, --count or --cpus");
    }
    // The generation read now: if someone changes the workload before the PUT, the daemon answers 409.
    let cur = call(socket, "GET", &path, None)?;
    if cur.status != 200 {
        return Ok(failed(&cur));
    }
    let mut body = serde_json::json!({ "generation": cur.body["generation"] });
    for (k, v) in [("runtime", &args.runtime), ("period", &args.period), ("cpus", &args.cpus)] {
        if let Some(v) = v {
            body[k] = v.clone().into();
        }
    }
    if let Some(n) = args.count {
        body["count"] = n.into();
    }
    let reply = call(socket, "PUT", &path, Some(("application/json", serde_json::to_vec(&body)?)))?;
    if reply.status != 200 {
        return Ok(failed(&reply));
    }
    if args.target.json.json {
        println!("{}", serde_json::to_string_pretty(&reply.body)?);
    } else {
        print_outcome(&reply.body);
    }
    Ok(ExitCode::SUCCESS)
}
