//! `rtslice status` shows the statistics of the agent this apply started, never those a previous
//! agent left in the state directory (issue 17). Root and the real kernel: a real apply starts a real
//! agent; the agent is stopped (SIGSTOP) while the test writes its statistics file, so what status
//! reads is exactly what the test wrote.

use std::path::PathBuf;
use std::process::{Command, Output};

use rtslice_agent::AgentStats;
use rtslice_testkit::{root_or_skip, skip, KernelLock};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rtslice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rtslice")).args(args).current_dir(root()).output().expect("run rtslice")
}

fn signal(pid: u64, sig: &str) {
    let ok = Command::new("kill").args([sig, &pid.to_string()]).status().map(|s| s.success()).unwrap_or(false);
    assert!(ok, "kill {sig} {pid}");
}

fn status_json(dir: &str) -> Value {
    let out = rtslice(&["status", "--json", "--state-dir", dir]);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("status --json: {e}: {}", String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn status_never_shows_a_previous_agents_statistics() {
    root_or_skip!();
    if !skip::cpus_or_skip(2) {
        return;
    }
    let _k = KernelLock::acquire();
    let dir = std::env::temp_dir().join(format!("rtslice-status-agent-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap().to_string();
    let out = rtslice(&["apply", "examples/host-smoke.yaml", "--state-dir", &d, "--json"]);
    assert_eq!(out.status.code(), Some(0), "apply: {}", String::from_utf8_lossy(&out.stderr));
    let applied: Value = serde_json::from_slice(&out.stdout).unwrap();
    let agent = applied["agent"]["pid"].as_u64().expect("host-smoke has a thread rule, so apply starts the agent");

    signal(agent, "-STOP");
    let write = |pid: u32, events: u64| {
        let stats = AgentStats { pid, mode: "netlink".into(), events, ..Default::default() };
        // The agent keeps its files where the state directory's agent does (the node's directory).
        let file = rtslice_host::agent_dir(&rtslice_host::StateDir::new(&dir)).path.join("agent.stats.json");
        std::fs::write(file, serde_json::to_string(&stats).unwrap()).unwrap();
    };
    // A file from an earlier run's agent (another pid): not shown.
    write(agent as u32 + 1, 999);
    let stale = status_json(&d);
    // The current agent's own file: shown.
    write(agent as u32, 7);
    let current = status_json(&d);
    signal(agent, "-CONT");
    let out = rtslice(&["reset", "--state-dir", &d]);
    assert_eq!(out.status.code(), Some(0), "reset: {}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);

    assert!(stale.get("agent_stats").is_none_or(Value::is_null), "a previous agent's statistics shown: {stale:#}");
    assert_eq!(current["agent_stats"]["events"].as_u64(), Some(7), "{current:#}");
}
