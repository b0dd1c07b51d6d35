//! `reset`: undo everything the journal lists, newest first — stop launched workloads (optional) and
//! the agent, restore every value rtslice changed, remove every cgroup it created. Works from the
//! state file alone, so also after a crash of the process that applied.

use serde::{Deserialize, Serialize};

use crate::error::{HostError, Result};
use crate::journal::StateDir;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResetOptions {
    /// Leave launched processes running (they move back to the root cgroups) instead of stopping them.
    pub keep_workloads: bool,
    /// The state comes from an earlier boot: drop it without touching the kernel.
    pub forget_stale: bool,
    /// How long launched workloads get between SIGTERM and SIGKILL (default 5 s).
    pub grace: std::time::Duration,
}

impl Default for ResetOptions {
    fn default() -> ResetOptions {
        ResetOptions { keep_workloads: false, forget_stale: false, grace: crate::txn::DEFAULT_GRACE }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResetReport {
    /// Journaled changes undone.
    pub undone: usize,
    /// Launched workloads (commands and containers) stopped.
    pub stopped: usize,
    /// Processes of launched workloads that exited on SIGTERM within the grace period.
    #[serde(default)]
    pub terminated: usize,
    /// Processes of launched workloads that needed SIGKILL after the grace period.
    #[serde(default)]
    pub killed: usize,
    pub nothing_applied: bool,
}

/// Undoes a node service's workloads and base (when its daemon has stopped), then the apply
/// journal, then the host tuning's (`rtslice tune`, kept in a journal of its own under the same
/// directory so workloads can be reset while the host stays tuned).
pub fn reset(dir: &StateDir, opts: ResetOptions) -> Result<ResetReport> {
    let node = if crate::journal::node_active(dir) { Some(reset_node(dir, opts)?) } else { None };
    let mut applied = reset_journal(dir, opts)?;
    if let Some(n) = node {
        applied = ResetReport {
            undone: applied.undone + n.undone,
            stopped: applied.stopped + n.stopped,
            terminated: applied.terminated + n.terminated,
            killed: applied.killed + n.killed,
            nothing_applied: false,
        };
    }
    let tuning = crate::journal::tuning_state_dir(dir);
    // Only when a tuning journal exists: locking would otherwise leave an empty directory behind.
    if !tuning.file().exists() {
        return Ok(applied);
    }
    let tuned = reset_journal(&tuning, opts)?;
    Ok(ResetReport {
        undone: applied.undone + tuned.undone,
        stopped: applied.stopped,
        terminated: applied.terminated,
        killed: applied.killed,
        nothing_applied: applied.nothing_applied && tuned.nothing_applied,
    })
}

/// The node a stopped `rtslice daemon` left (its workloads keep running when it stops without
/// --reset-on-exit): every workload removed (SIGTERM, grace, SIGKILL), then the node's base, then
/// the node service's desired state.
fn reset_node(dir: &StateDir, opts: ResetOptions) -> Result<ResetReport> {
    if opts.keep_workloads && !crate::journal::one_shot_applied(dir) {
        return Err(HostError::Invalid(format!(
            "{} holds a node service's workloads, which reset stops; --keep-workloads is for a one-shot apply (to \
             leave a node's workloads running, stop its daemon without --reset-on-exit and do not reset)",
            dir.path.display()
        )));
    }
    // The daemon holds the directory's lock for its life: say so rather than "wait for it".
    drop(dir.lock().map_err(|_| {
        HostError::State {
            path: dir.path.clone(),
            reason: "a node service (rtslice daemon) is running on this state directory: remove its workloads through \
                     it (`rtslice remove NAME`), or stop it (systemctl stop rtslice) and reset again"
                .into(),
        }
    })?);
    let (node, _) = crate::node::Node::open(crate::node::NodeOptions { grace: opts.grace, one_shot: true, ..crate::node::NodeOptions::with_state_dir(&dir.path) })?;
    let stopped = if opts.keep_workloads { 0 } else { node.launched() };
    let r = node.reset_with(opts.keep_workloads)?;
    let desired = dir.path.join(crate::journal::NODE_DESIRED_FILE);
    std::fs::remove_file(&desired).or_else(|e| if e.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(e) }).map_err(|e| {
        HostError::State { path: desired, reason: format!("the node is reset, but its desired state could not be removed ({e}): remove it, or the next daemon deploys its workloads again") }
    })?;
    Ok(ResetReport { undone: r.undone, stopped, terminated: r.terminated, killed: r.killed, nothing_applied: false })
}

fn reset_journal(dir: &StateDir, opts: ResetOptions) -> Result<ResetReport> {
    let _lock = dir.lock()?;
    let Some(mut state) = dir.load()? else {
        remove_agent_files(dir);
        return Ok(ResetReport { nothing_applied: true, ..Default::default() });
    };
    if state.boot_id != crate::journal::boot_id() {
        if opts.forget_stale {
            dir.remove()?;
            return Ok(ResetReport { nothing_applied: true, ..Default::default() });
        }
        return Err(HostError::State {
            path: dir.path.clone(),
            reason: "the state was written before the last reboot: the kernel values it would restore are gone; \
                     run `rtslice reset --forget` to drop it"
                .into(),
        });
    }
    let total = state.changes.len();
    let stopped = state.changes.iter().filter(|c| c.is_a_launch()).count();
    if opts.keep_workloads {
        state.changes.retain(|c| !c.is_a_launch());
    }
    let kept = total - state.changes.len();
    let mut ctx = crate::txn::Undo { grace: opts.grace, ..Default::default() };
    let errors = crate::txn::undo_all(&mut state.changes, 0, &mut ctx);
    if !errors.is_empty() {
        dir.save(&state)?;
        return Err(HostError::State {
            path: dir.path.clone(),
            reason: format!(
                "could not undo {} change(s), kept in the journal for another `rtslice reset`: {}",
                errors.len(),
                errors.join("; ")
            ),
        });
    }
    dir.remove()?;
    remove_agent_files(dir);
    let _ = std::fs::remove_dir_all(dir.path.join("oci-configs"));
    // Every launched process is gone at this point (undo waited for it, or failed above).
    Ok(ResetReport {
        undone: total - kept,
        stopped: if opts.keep_workloads { 0 } else { stopped },
        terminated: ctx.terminated,
        killed: ctx.killed,
        nothing_applied: false,
    })
}

/// The agent's files describe a plan that is undone; left behind, the next apply's status would show
/// them (and a reset must leave the state directory as before apply).
fn remove_agent_files(dir: &StateDir) {
    for file in ["agent.ready", "agent.log", "agent.stats.json", "agent.stats.tmp"] {
        let _ = std::fs::remove_file(dir.path.join(file));
    }
}
