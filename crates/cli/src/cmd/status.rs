//! `rtslice status`: the recorded plan against what the kernel shows now. Exit code 1 when something drifted.

use std::path::PathBuf;
use std::process::ExitCode;

use rtslice_host::StateDir;

use super::EXIT_REJECTED;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = rtslice_host::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    // JSON: workloads[].name, workloads[].pids, drift[], mechanism, agent, agent_stats
    #[command(flatten)]
    pub json: super::Json,
    /// Refresh every N seconds until interrupted
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "2")]
    pub watch: Option<f64>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let dir = StateDir::new(&args.state_dir);
    loop {
        // A node's directory (a daemon's, or an apply's): its base, workloads and agent.
        let st = rtslice_host::status(&dir)?;
        let agent_dir = rtslice_host::agent_dir(&dir);
        let dir = &agent_dir;
        if args.json.json {
            let mut v = serde_json::to_value(&st)?;
            if let Some(stats) = current_agent_stats(&st, dir) {
                v["agent_stats"] = serde_json::to_value(stats)?;
            }
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            if args.watch.is_some() {
                print!("\x1b[2J\x1b[H");
            }
            print_human(&st, dir);
        }
        match args.watch {
            Some(secs) => std::thread::sleep(std::time::Duration::from_secs_f64(secs.max(0.1))),
            None => return Ok(if st.drift.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_REJECTED) }),
        }
    }
}

/// The statistics of the agent `apply` recorded, or none: a file left by an earlier agent (another
/// apply, or a crash before `reset`) describes a process that no longer keeps this plan.
fn current_agent_stats(st: &rtslice_host::Status, dir: &StateDir) -> Option<rtslice_agent::AgentStats> {
    let agent = st.agent.as_ref()?;
    rtslice_agent::read_stats(dir).filter(|s| i64::from(s.pid) == i64::from(agent.pid))
}

fn print_human(st: &rtslice_host::Status, dir: &StateDir) {
    if !st.applied {
        println!("nothing applied (state directory {})", st.state_dir.display());
        return;
    }
    println!(
        "applied: {} changes journaled in {}; mechanism {}",
        st.changes,
        st.state_dir.display(),
        st.mechanism.map(|m| format!("{m} ({})", m.describe())).unwrap_or_else(|| "unknown (not in the journal)".into())
    );
    match &st.agent {
        Some(a) => {
            let stats = current_agent_stats(st, dir);
            println!(
                "agent: pid {} {}{}",
                a.pid,
                if a.alive { "running" } else { "NOT RUNNING" },
                stats
                    .map(|s| format!(
                        " ({}, {} rules applied, {} errors{})",
                        s.mode,
                        s.applied,
                        s.errors,
                        s.latency_us.map(|l| format!(", event→rule p50 {:.0} µs max {:.0} µs", l[1], l[3])).unwrap_or_default()
                    ))
                    .unwrap_or_default()
            );
        }
        None => println!("agent: none (threads born later get no rules)"),
    }
    for w in &st.workloads {
        println!("workload {} CPUs {} cgroup {} pids {:?}{}", w.name, w.cpus, w.cgroup.display(), w.pids,
            w.container.as_ref().map(|c| format!(" container {c}")).unwrap_or_default());
        for t in &w.threads {
            println!(
                "  {:>7} {:<16} {:<32} CPUs {:<6} {}",
                t.tid,
                t.comm,
                t.policy,
                t.cpus.to_string(),
                t.rule.map(|r| format!("rule #{r}")).unwrap_or_default()
            );
        }
    }
    if st.drift.is_empty() {
        println!("drift: none — the kernel matches the plan");
    } else {
        println!("drift ({}):", st.drift.len());
        for d in &st.drift {
            println!("  {}: expected {}, found {}", d.what, d.expected, d.actual);
        }
    }
    for w in &st.warnings {
        super::warning(w);
    }
}
