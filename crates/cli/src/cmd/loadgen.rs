//! `rtslice loadgen`: the DistWalk-style server and client (rtslice-loadgen).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Context;
use rtslice_loadgen::client::{self, ClientConfig};
use rtslice_loadgen::dist::Dist;
use rtslice_loadgen::server::{server_main, ServerMain};
use rtslice_loadgen::stats::RttSummary;
use rtslice_loadgen::Protocol;


#[derive(clap::Subcommand)]
pub enum Command {
    /// Answer each request after doing its compute amount of real CPU work (one thread, FIFO order)
    Server(ServerArgs),
    /// Send requests open-loop at random inter-arrival times and record every round trip
    Client(ClientArgs),
}

#[derive(clap::Args)]
pub struct ServerArgs {
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1:7013")]
    bind: SocketAddr,
    /// udp or tcp
    #[arg(long, default_value = "udp")]
    protocol: Protocol,
    /// Enter this network namespace (from `ip netns`) before binding
    #[arg(long)]
    netns: Option<String>,
    /// Exit after this many requests (default: until a client sends a stop message)
    #[arg(long)]
    max_requests: Option<u64>,
}

fn dist(s: &str) -> Result<Dist, String> {
    s.parse::<Dist>().map_err(|e| e.to_string())
}

#[derive(clap::Args)]
pub struct ClientArgs {
    /// Server address
    #[arg(long, default_value = "127.0.0.1:7013")]
    server: SocketAddr,
    /// udp or tcp
    #[arg(long, default_value = "udp")]
    protocol: Protocol,
    /// Inter-arrival distribution: `exp:1ms` (Poisson), `const:1ms`, `uniform:500us:1500us`
    #[arg(long, default_value = "exp:1ms", value_parser = dist)]
    interarrival: Dist,
    /// Per-request compute amount (CPU work at the server), same forms
    #[arg(long, default_value = "exp:500us", value_parser = dist)]
    compute: Dist,
    /// Number of requests
    #[arg(long, default_value_t = 10_000)]
    count: usize,
    /// Request size in bytes (at least the 40-byte header)
    #[arg(long, default_value_t = 128)]
    request_bytes: u32,
    /// Reply size in bytes
    #[arg(long, default_value_t = 128)]
    reply_bytes: u32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run the client's threads SCHED_FIFO at this priority
    #[arg(long)]
    fifo: Option<i32>,
    /// Run in this network namespace (from `ip netns`)
    #[arg(long)]
    netns: Option<String>,
    /// Write every sample (id, send time, RTT, compute) as CSV here
    #[arg(long)]
    samples_out: Option<PathBuf>,
    /// Tell the server to exit when done
    #[arg(long)]
    stop_server: bool,
    #[command(flatten)]
    json: super::Json,
}

pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Server(a) => {
            let m = ServerMain { bind: a.bind, protocol: a.protocol, netns: a.netns, max_requests: a.max_requests };
            let stop = AtomicBool::new(false);
            let stats = server_main(&m, &stop)?;
            eprintln!(
                "rtslice loadgen server: {} requests served, {:.3} s of work asked, {:.3} s of CPU used ({:.3}×)",
                stats.requests,
                stats.work_ns as f64 * 1e-9,
                stats.cpu_ns as f64 * 1e-9,
                stats.cpu_ns as f64 / (stats.work_ns.max(1)) as f64
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Client(a) => run_client(a),
    }
}

fn run_client(a: ClientArgs) -> anyhow::Result<ExitCode> {
    if a.count == 0 {
        return super::invalid("--count must be at least 1");
    }
    let cfg = ClientConfig {
        server: a.server,
        protocol: a.protocol,
        interarrival: a.interarrival,
        compute: a.compute,
        request_bytes: a.request_bytes,
        reply_bytes: a.reply_bytes,
        count: a.count,
        seed: a.seed,
        drain: Duration::from_secs(2),
        fifo_priority: a.fifo,
        netns: a.netns.clone(),
        cpus: None,
    };
    let run = client::run(&cfg)?;
    if a.stop_server {
        client::stop_server(a.server, a.protocol, a.netns.as_deref())?;
    }
    if let Some(path) = &a.samples_out {
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
        );
        writeln!(f, "id,send_s,rtt_s,compute_s")?;
        for s in &run.samples {
            writeln!(f, "{},{:.9},{:.9},{:.9}", s.id, s.send_s, s.rtt_s, s.compute_s)?;
        }
        f.flush()?;
    }
    let summary = RttSummary::of(&run.rtts_s());
    if a.json.json {
        #[derive(serde::Serialize)]
        struct Out<'a> {
            sent: usize,
            lost: usize,
            max_send_lag_s: f64,
            elapsed_s: f64,
            interarrival: String,
            compute: String,
            rtt: Option<&'a RttSummary>,
        }
        let out = Out {
            sent: run.sent,
            lost: run.lost,
            max_send_lag_s: run.max_send_lag_s,
            elapsed_s: run.elapsed_s,
            interarrival: a.interarrival.to_string(),
            compute: a.compute.to_string(),
            rtt: summary.as_ref(),
        };
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "{} requests to {} {} ({} inter-arrival, {} work): {} answered, {} lost, sender at most {:.1} µs late",
            run.sent,
            a.protocol,
            a.server,
            a.interarrival,
            a.compute,
            run.samples.len(),
            run.lost,
            run.max_send_lag_s * 1e6
        );
        if let Some(s) = summary {
            println!(
                "RTT µs: min {:.1}  avg {:.1}  p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
                s.min_s * 1e6,
                s.mean_s * 1e6,
                s.p50_s * 1e6,
                s.p90_s * 1e6,
                s.p99_s * 1e6,
                s.p999_s * 1e6,
                s.max_s * 1e6
            );
        }
    }
    Ok(if run.samples.is_empty() { ExitCode::from(super::EXIT_FAILURE) } else { ExitCode::SUCCESS })
}
