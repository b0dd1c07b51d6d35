//! What the agent tests share: the agent is the test binary itself re-executed in a helper role
//! (selected by an environment variable), and every applied setup is reset even when an assertion
//! fails, before its temporary state directory goes away.

use rtslice_host::{reset, AgentCommand, ResetOptions, StateDir};
use rtslice_testkit::OnDrop;

/// The agent command for [`rtslice_host::ApplyOptions::agent`]: this test binary again, running only
/// its `helper_agent_role` test with `role_var=agent` plus `extra_env` in its environment.
pub fn self_as_agent(role_var: &str, extra_env: Vec<(String, String)>) -> AgentCommand {
    let mut env = vec![(role_var.to_string(), "agent".to_string())];
    env.extend(extra_env);
    AgentCommand {
        program: std::env::current_exe().expect("the test binary's path"),
        args: vec!["--exact".into(), "helper_agent_role".into(), "--nocapture".into()],
        env,
        state_dir_arg: false,
    }
}

/// Resets the state directory `dir` when dropped (a failed assertion unwinds through it).
pub fn reset_on_drop(dir: &std::path::Path) -> OnDrop<impl FnOnce()> {
    let dir = StateDir::new(dir);
    OnDrop::new(move || {
        if let Err(e) = reset(&dir, ResetOptions::default()) {
            eprintln!("cleanup reset failed: {e}");
        }
    })
}

/// True when this host offers `mech` (see `rtslice doctor`); else skips for it.
#[allow(dead_code)] // not every test binary picks a mechanism
pub fn has_mechanism(mech: rtslice_host::Mechanism) -> bool {
    let ok = rtslice_host::doctor().mechanisms.contains(&mech);
    if !ok {
        // RT groups need cgroup v1 with RT_GROUP_SCHED: not in the kernel matrix's v2 guests.
        rtslice_testkit::skip::skip(rtslice_testkit::skip::mechanism_need(&mech), format!("{mech} is not available on this host (see `rtslice doctor`)"));
    }
    ok
}

/// The helper role's body: when this binary runs as the agent (`role_var=agent`, set by
/// [`self_as_agent`]), the agent on the state directory apply named; otherwise nothing.
#[allow(dead_code)] // not every test binary runs its agent with the default options
pub fn run_as_agent(role_var: &str) {
    run_as_agent_with(role_var, rtslice_agent::AgentOptions::default);
}

/// As [`run_as_agent`], with the options `opts` gives (read in the agent's own process: from the
/// environment [`self_as_agent`] handed down).
pub fn run_as_agent_with(role_var: &str, opts: impl FnOnce() -> rtslice_agent::AgentOptions) {
    if std::env::var(role_var).as_deref() != Ok("agent") {
        return;
    }
    let dir = StateDir::new(std::env::var("RTSLICE_STATE_DIR").unwrap());
    rtslice_agent::run(&dir, &opts()).unwrap();
}

/// utime + stime of a process in clock ticks (its own, not its children's).
#[allow(dead_code)] // not every test binary measures CPU time
pub fn cpu_ticks(pid: i32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some(i) = s.rfind(')') else { return 0 };
    let f: Vec<&str> = s[i + 2..].split_whitespace().collect();
    f.get(11).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0) + f.get(12).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0)
}
