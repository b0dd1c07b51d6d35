//! What the agent tests share: the agent is the test binary itself re-executed in a helper role
//! (selected by an environment variable), and every applied setup is reset even when an assertion
//! fails, before its temporary state directory goes away.

use rtslice_host::{reset, AgentCommand, ResetOptions, StateDir};

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

/// Resets the state directory when dropped (a failed assertion unwinds through it).
pub struct ResetOnDrop(pub StateDir);

impl Drop for ResetOnDrop {
    fn drop(&mut self) {
        if let Err(e) = reset(&self.0, ResetOptions::default()) {
            eprintln!("cleanup reset failed: {e}");
        }
    }
}
