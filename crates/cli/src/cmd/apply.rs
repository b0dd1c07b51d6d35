//! `rtslice apply SPEC`: make the spec real. Exit codes: 0 applied, 1 rejected (by the planner or by
//! the host's admission; declaratively: a workload is pending), 2 invalid spec, 3 the host failed a
//! step (that step rolled back).
//!
//! Two modes (docs/api.md "apply"):
//! - declarative, when the node service owns the host — a daemon answers on `--socket` /
//!   `RTSLICE_SOCKET` / the default socket, or (no daemon) the state directory holds a node, or
//!   `--declarative`: only the difference between the spec and what runs is deployed, resized,
//!   replaced or removed; `--dry-run` prints it. Without a daemon the same code runs in-process.
//! - one-shot otherwise (a fresh host): the whole spec, all or nothing, as a node run in-process
//!   (the node's base, then each workload deployed in turn: the daemon's code), marked as a
//!   one-shot apply's: refused while anything is applied (`rtslice reset` first).

use std::path::PathBuf;
use std::process::ExitCode;

use rtslice_host::{AgentCommand, ApplyOptions, HostError, Mechanism, OciDefaults, StateDir};

use super::{EXIT_FAILURE, EXIT_INVALID, EXIT_REJECTED};

#[derive(clap::Args)]
pub struct Args {
    /// The spec file (YAML, `apiVersion: rtslice/v1`)
    pub spec: PathBuf,
    /// Where the journal lives (reset and status read it)
    #[arg(long, default_value = rtslice_host::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Reservation mechanism (default: the best this host has; see `rtslice doctor`)
    #[arg(long, value_enum)]
    pub mechanism: Option<super::MechanismArg>,
    /// Do not start the agent (threads created after apply then get no rules)
    #[arg(long)]
    pub no_agent: bool,
    /// Set the fair_server runtime to 0 on CPUs holding only reserved RT work (debugfs)
    #[arg(long)]
    pub fair_server_off: bool,
    /// Turn the HRTICK and HRTICK_DL scheduler features on (debugfs; reset restores them)
    #[arg(long)]
    pub hrtick: bool,
    /// OCI launches: give the container its own network namespace
    #[arg(long)]
    pub netns: bool,
    /// OCI launches: apply Docker's default seccomp allow-list
    #[arg(long)]
    pub seccomp: bool,
    #[command(flatten)]
    pub json: super::Json,
    /// Print the difference between the spec and what runs (and whether each change would fit);
    /// change nothing (declarative mode)
    #[arg(long)]
    pub dry_run: bool,
    /// The node service's socket; when given (or RTSLICE_SOCKET is set) apply goes through that
    /// daemon. Without it a daemon answering on the default socket is used, if any
    #[arg(long, env = "RTSLICE_SOCKET")]
    pub socket: Option<PathBuf>,
    /// With no daemon running: apply declaratively in-process (the node service's code) even when
    /// the state directory holds no node yet
    #[arg(long)]
    pub declarative: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (text, name) = super::plan::read_spec(&args.spec)?;
    let spec = match super::plan::parse_spec(&args.spec, &text, &name) {
        Ok(s) => s,
        Err(errors) => {
            eprintln!("{errors}");
            super::error(format_args!("{} error(s) in {name}; nothing applied (see docs/spec.md)", errors.len()));
            return Ok(ExitCode::from(EXIT_INVALID));
        }
    };
    let socket = match &args.socket {
        Some(s) => Some(s.clone()),
        None => {
            let default = PathBuf::from(rtslice_node::DEFAULT_SOCKET);
            std::os::unix::net::UnixStream::connect(&default).is_ok().then_some(default)
        }
    };
    if let Some(socket) = socket {
        return through_daemon(&args, &socket, text);
    }
    let state = StateDir::new(&args.state_dir);
    if rtslice_host::one_shot_applied(&state) {
        super::error(format_args!(
            "{} already holds a one-shot apply; run `rtslice reset` first (a one-shot apply takes the host whole)",
            args.state_dir.display()
        ));
        return Ok(ExitCode::from(EXIT_REJECTED));
    }
    if args.declarative || rtslice_host::node_active(&state) {
        return in_process(&args, &spec);
    }
    if args.dry_run {
        return one_shot_dry_run(&spec, &name);
    }
    let facts = rtslice_host::facts::planning_facts()?;
    // The plan `rtslice plan` prints on this host: its kernel limits and mechanism (plan == apply).
    let plan = match rtslice_host::HostFacts::detect() {
        Ok(host) => rtslice_plan::plan_for_kernel(&spec, &facts, &host.kernel_facts(), args.mechanism.map(Mechanism::from)),
        Err(_) => rtslice_plan::plan(&spec, &facts),
    };
    for w in &plan.warnings {
        super::warning(w);
    }
    let opts = ApplyOptions {
        state_dir: StateDir::new(&args.state_dir),
        mechanism: args.mechanism.map(Mechanism::from),
        agent: if args.no_agent { None } else { Some(AgentCommand::rtslice_binary(std::env::current_exe()?)) },
        fair_server_off: args.fair_server_off,
        hrtick: args.hrtick,
        ..Default::default()
    };
    match rtslice_host::apply(&plan, OciDefaults { netns: args.netns, seccomp: args.seccomp }, &opts) {
        Ok(applied) => {
            if args.json.json {
                println!("{}", serde_json::to_string_pretty(&applied)?);
            } else {
                println!("applied {name}: mechanism {} ({})", applied.mechanism, applied.mechanism.describe());
                for w in &applied.workloads {
                    let pids: Vec<String> = w.pids.iter().map(|p| p.pid.to_string()).collect();
                    println!(
                        "  {:<16} CPUs {:<8} cgroup {}  pids [{}]{}",
                        w.name,
                        w.cpus.to_string(),
                        w.group.cpuset.display(),
                        pids.join(" "),
                        w.container.as_ref().map(|c| format!("  container {c}")).unwrap_or_default()
                    );
                }
                if let Some(a) = applied.agent {
                    println!("  agent pid {} keeps threads born later in policy", a.pid);
                }
                println!("  {} changes journaled in {}; undo with `rtslice reset`", applied.changes, args.state_dir.display());
            }
            for w in &applied.warnings {
                super::warning(w);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ HostError::Rejected(_)) => {
            super::error(e);
            Ok(ExitCode::from(EXIT_REJECTED))
        }
        Err(e) => {
            super::error(format_args!("apply failed: {e}"));
            Ok(ExitCode::from(EXIT_FAILURE))
        }
    }
}

fn through_daemon(args: &Args, socket: &std::path::Path, text: String) -> anyhow::Result<ExitCode> {
    if args.no_agent {
        // The daemon runs its agent on a thread of its own, for every workload it holds.
        super::warning("--no-agent is for an apply without a daemon; the daemon ignores it");
    }
    let daemons = [
        (args.mechanism.is_some(), "--mechanism"),
        (args.hrtick, "--hrtick"),
        (args.fair_server_off, "--fair-server-off"),
        (args.netns, "--netns"),
        (args.seccomp, "--seccomp"),
    ];
    for (given, flag) in daemons {
        if given {
            super::warning(format_args!("{flag} is the daemon's (rtslice daemon {flag}); ignored here"));
        }
    }
    let path = if args.dry_run { "/v1/workloads?dryRun=true" } else { "/v1/workloads" };
    let reply = super::node_api::call(socket, "PUT", path, Some(("application/yaml", text.into_bytes())))?;
    if reply.status != 200 {
        return Ok(super::node_api::failed(&reply));
    }
    for w in reply.body["warnings"].as_array().into_iter().flatten() {
        super::warning(w.as_str().unwrap_or_default());
    }
    print_changes(args, &reply.body)
}

fn in_process(args: &Args, spec: &rtslice_spec::Spec) -> anyhow::Result<ExitCode> {
    for w in spec.workloads.iter().filter(|w| w.adapt.is_some()) {
        super::warning(format_args!(
            "{}: `adapt` is the node service's closed loop; applied without a daemon the reservation stays as admitted \
             (start `rtslice daemon` and apply through it)",
            w.name
        ));
    }
    let opts = rtslice_node::ServiceOptions {
        state_dir: args.state_dir.clone(),
        // Used when the node starts now; a node that exists keeps the node section it started with.
        node: spec.node.clone(),
        mechanism: args.mechanism.map(Mechanism::from),
        grace: std::time::Duration::from_secs(5),
        launch_env: Vec::new(),
        boot_id_file: None,
        access: Default::default(),
        resctrl: None,
        // Taken when the node starts now; a node that exists keeps what it started with (as `node`).
        hrtick: args.hrtick,
        fair_server_off: args.fair_server_off,
        oci: OciDefaults { netns: args.netns, seccomp: args.seccomp },
    };
    // Opening the node stops the agent process a previous in-process apply left; once the
    // workloads are as the spec says, a new one keeps the threads they start later in policy (as
    // after a one-shot apply) until the next apply, a daemon or `rtslice reset` opens the node.
    let agent = (!args.dry_run && !args.no_agent).then(|| std::env::current_exe().map(AgentCommand::rtslice_binary)).transpose()?;
    let result = rtslice_node::Service::open(opts).and_then(|mut svc| {
        if args.dry_run {
            return Ok((svc.diff(spec, true)?, None));
        }
        let changes = svc.apply(spec)?;
        let agent = match &agent {
            Some(cmd) => svc.host().start_agent(cmd).map_err(rtslice_node::NodeError::from)?,
            None => None,
        };
        Ok((changes, agent))
    });
    match result {
        Ok((changes, agent)) => {
            let pending = changes.iter().any(|c| c.phase == Some(rtslice_node::Phase::Pending));
            let body = serde_json::json!({ "dryRun": args.dry_run, "changes": changes, "pending": pending, "agent": agent.map(|a| a.pid) });
            print_changes(args, &body)
        }
        Err(e) => Ok(super::node_api::failed(&rtslice_node::Reply { status: e.status(), body: serde_json::json!({ "error": e.to_string() }) })),
    }
}

/// Prints apply's difference (`changes`, as the API returns it); exit 1 when a workload is pending.
fn print_changes(args: &Args, body: &serde_json::Value) -> anyhow::Result<ExitCode> {
    if args.json.json {
        println!("{}", serde_json::to_string_pretty(body)?);
    } else {
        let dry = body["dryRun"].as_bool().unwrap_or(false);
        if dry {
            println!("dry run: nothing changed; apply would do:");
        }
        for c in body["changes"].as_array().into_iter().flatten() {
            let name = c["name"].as_str().unwrap_or("?");
            let action = c["action"].as_str().unwrap_or("?");
            let detail = c["detail"].as_str().map(|d| format!(" ({d})")).unwrap_or_default();
            let cpus: Vec<String> = c["cpus"].as_array().map(|a| a.iter().map(|x| x.to_string()).collect()).unwrap_or_default();
            let state = match c["phase"].as_str() {
                Some("running") => format!("running on CPUs [{}]", cpus.join(",")),
                Some("pending") => format!("pending: {}", c["reason"].as_str().unwrap_or("?")),
                Some(p) => p.to_string(),
                None => String::new(),
            };
            println!("  {action:<9} {name}{detail}{}", if state.is_empty() { String::new() } else { format!(": {state}") });
            for m in c["defrag"]["moves"].as_array().into_iter().flatten() {
                println!(
                    "            proposal: move {}'s share ({:.0}%) from CPU {} to CPU {}",
                    m["workload"].as_str().unwrap_or("?"),
                    m["bandwidth"].as_f64().unwrap_or(0.0) * 100.0,
                    m["from_cpu"],
                    m["to_cpu"]
                );
            }
        }
        if let Some(pid) = body["agent"].as_u64() {
            println!("  agent pid {pid} keeps threads born later in policy (until the next apply, a daemon or `rtslice reset`)");
        }
    }
    Ok(if body["pending"].as_bool().unwrap_or(false) { ExitCode::from(EXIT_REJECTED) } else { ExitCode::SUCCESS })
}

/// `--dry-run` on a host the node service does not own: every workload would be deployed; the
/// planner says where (what `rtslice plan` prints), nothing is touched.
fn one_shot_dry_run(spec: &rtslice_spec::Spec, name: &str) -> anyhow::Result<ExitCode> {
    let facts = rtslice_host::facts::planning_facts()?;
    let plan = rtslice_plan::plan(spec, &facts);
    println!("dry run: nothing runs under the node service here; apply {name} would do:");
    for w in &plan.workloads {
        println!("  deploy    {}: running on CPUs [{}]", w.name, w.cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(","));
    }
    for r in &plan.rejected {
        println!("  deploy    {}: rejected: {}", r.name, r.reason);
    }
    if !plan.rejected.is_empty() {
        println!("a one-shot apply takes all or nothing: it would apply none of them (the node service admits each on its own: `rtslice apply --declarative`, or run `rtslice daemon`)");
    }
    Ok(if plan.rejected.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_REJECTED) })
}
