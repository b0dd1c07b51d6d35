//! The agent process of a node no process holds open. After an in-process apply (`rtslice apply
//! --declarative` with no daemon) the threads its workloads start later still get their rules and
//! its demand pools follow demand, as after a one-shot apply: [`Node::start_agent`] starts
//! `rtslice agent` on the node's directory, which reads the workloads' records once, without the
//! node's lock ([`super::records_in`]). Its process is journaled apart from the base and the workloads
//! (`node/agent`), and whoever opens the node next stops it first (`Node::open`, `Node::reset`):
//! the daemon runs an agent of its own, and an in-process apply changes the workloads it ruled (it
//! starts a new one when it is done).

use super::*;

/// The agent process's journal (undoing it stops the process).
fn journal(root: &StateDir) -> StateDir {
    StateDir::new(node_dir(root).join("agent"))
}

impl Node {
    /// Starts the agent process that keeps the node's workloads' threads in policy once this
    /// process lets the node go (an in-process apply's last step), replacing one already running.
    /// `None`: no workload has a thread rule (or a wide affinity to give), and there is nothing for
    /// an agent to do. If it does not report ready it is stopped again, and the node is as before.
    pub fn start_agent(&self, cmd: &launch::AgentCommand) -> Result<Option<ProcRef>> {
        self.stop_agent()?;
        let ruled = |r: &AppliedRecord| r.workloads.iter().any(|w| !w.rules.is_empty()) || r.setup.workloads.iter().any(|s| s.wide_affinity);
        if !self.records()?.iter().any(ruled) {
            return Ok(None);
        }
        let journal = journal(&self.root);
        let mut state = State::new();
        journal.save(&state)?;
        let mut txn = Txn::begin(&journal, &mut state, self.opts.fault);
        match launch::start_agent(&mut txn, cmd, &crate::journal::agent_dir(&self.root)) {
            Ok(proc) => {
                txn.save()?;
                Ok(Some(proc))
            }
            Err(e) => {
                let errors = txn.rollback();
                if errors.is_empty() {
                    journal.remove()?;
                }
                Err(e)
            }
        }
    }

    /// Stops the agent process [`Node::start_agent`] started, if any.
    pub(super) fn stop_agent(&self) -> Result<()> {
        let journal = journal(&self.root);
        let Some(mut state) = journal.load()? else { return Ok(()) };
        let errors = undo_all(&mut state.changes, 0, &mut Undo { grace: self.opts.grace, ..Undo::default() });
        if !errors.is_empty() {
            journal.save(&state)?;
            return Err(HostError::State {
                path: journal.path.clone(),
                reason: format!("the node's agent process could not be stopped: {}", errors.join("; ")),
            });
        }
        journal.remove()?;
        let _ = std::fs::remove_dir(&journal.path);
        Ok(())
    }
}
