//! `rtslice`: the thin command-line front of the loop spec → plan → apply → observe → model → bench.
//! Each subcommand lives in `cmd/<name>.rs` and only translates arguments into calls of the stage crates.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod cmd;

#[derive(Parser)]
#[command(name = "rtslice", version, about = "Per-thread real-time slicing of edge servers for vRAN and NFV")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Admission control and placement of a spec (pure: touches nothing)
    Plan(cmd::plan::Args),
    /// Import workloads from other descriptors (TOSCA)
    #[command(subcommand)]
    Import(cmd::import::Command),
    /// Report what this host offers for latency-critical work, with a fix for each problem
    Doctor(cmd::doctor::Args),
    /// Make a spec's plan real on this host (transactional, reversible)
    Apply(cmd::apply::Args),
    /// Compare the applied plan with what the kernel shows now
    Status(cmd::status::Args),
    /// Undo everything rtslice applied, also after a crash
    Reset(cmd::reset::Args),
    /// Tune the host for real-time work (governor, C-states, IRQ/workqueue CPUs, THP, hugepages), reversibly
    Tune(cmd::tune::Args),
    /// Keep applied workloads in policy: give threads born later their rules
    Agent(cmd::agent::Args),
    /// The node service: admit, resize and remove workloads one at a time, with an HTTP API
    Daemon(cmd::daemon::Args),
    /// The kube-scheduler extender: place pods by real-time bandwidth with each node's planner
    Extender(cmd::extender::Args),
    /// Deploy workloads through the daemon (each admitted on its own; exit 1 if any is pending)
    Deploy(cmd::deploy::Args),
    /// Remove a workload the daemon runs
    Remove(cmd::remove::Args),
    /// Resize a workload the daemon runs, in place
    Resize(cmd::resize::Args),
    /// The daemon's workloads
    List(cmd::list::Args),
    /// One of the daemon's workloads
    Get(cmd::get::Args),
    /// The daemon's live view in a terminal: CPUs, workloads, latency, misses, throttling, events
    Top(cmd::top::Args),
    /// Per-thread scheduling latency, switches, CPU, IRQs and counters
    Trace(cmd::trace::Args),
    /// A running workload's execution demand per period, as a profile file for a spec's SLO
    Profile(cmd::profile::Args),
    /// The Prometheus view of the node: serve /metrics for the applied workloads
    #[command(subcommand)]
    Metrics(cmd::metrics::Command),
    /// A virtualized base station that computes for real
    Emulate(cmd::emulate::Args),
    /// Real interference generators
    Noise(cmd::noise::Args),
    /// The reservation performance model: predict, size, sweep, validate
    #[command(subcommand)]
    Model(cmd::model::Command),
    /// DistWalk-style client/server load generator
    #[command(subcommand)]
    Loadgen(cmd::loadgen::Command),
    /// Run an experiment file and write its report
    Bench(cmd::bench::Args),
    /// The short showcase: study A's tables and the efficiency frontier
    Demo(cmd::demo::Args),
    /// Write man pages or shell completions (used by packaging)
    #[command(hide = true, subcommand)]
    Generate(cmd::generate::Command),
}

fn main() -> ExitCode {
    // Once for the whole binary: a closed pipe (`rtslice plan --json x | head -1`) ends the process
    // quietly, as it does `cat`, instead of making the next print panic.
    if let Err(e) = rtslice_sys::signal::restore_default_sigpipe() {
        cmd::warning(format_args!("cannot restore SIGPIPE's default action ({e}); a closed output pipe may end in a panic"));
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let result = match cli.command {
        Command::Plan(a) => cmd::plan::run(a),
        Command::Import(c) => cmd::import::run(c),
        Command::Doctor(a) => cmd::doctor::run(a),
        Command::Apply(a) => cmd::apply::run(a),
        Command::Status(a) => cmd::status::run(a),
        Command::Reset(a) => cmd::reset::run(a),
        Command::Tune(a) => cmd::tune::run(a),
        Command::Agent(a) => cmd::agent::run(a),
        Command::Daemon(a) => cmd::daemon::run(a),
        Command::Extender(a) => cmd::extender::run(a),
        Command::Deploy(a) => cmd::deploy::run(a),
        Command::Remove(a) => cmd::remove::run(a),
        Command::Resize(a) => cmd::resize::run(a),
        Command::List(a) => cmd::list::run(a),
        Command::Get(a) => cmd::get::run(a),
        Command::Top(a) => cmd::top::run(a),
        Command::Trace(a) => cmd::trace::run(a),
        Command::Profile(a) => cmd::profile::run(a),
        Command::Metrics(c) => cmd::metrics::run(c),
        Command::Emulate(a) => cmd::emulate::run(a),
        Command::Noise(a) => cmd::noise::run(a),
        Command::Model(c) => cmd::model::run(c),
        Command::Loadgen(c) => cmd::loadgen::run(c),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Demo(a) => cmd::demo::run(a),
        Command::Generate(c) => cmd::generate::run(c, Cli::command()),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            cmd::error(cmd::chain(&err));
            ExitCode::from(cmd::EXIT_FAILURE)
        }
    }
}

/// Help and version go to stdout as clap prints them; a usage error gets rtslice's one error prefix
/// (clap's own is a bare `error:`) and exit code 2 like every other invalid input.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand) {
        let _ = e.print();
        return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
            ExitCode::from(cmd::EXIT_INVALID)
        } else {
            ExitCode::SUCCESS
        };
    }
    let text = e.to_string();
    eprint!("rtslice: {}", text.strip_prefix("error: ").map(|t| format!("error: {t}")).unwrap_or(text));
    ExitCode::from(cmd::EXIT_INVALID)
}
