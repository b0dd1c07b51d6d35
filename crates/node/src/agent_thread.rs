//! The thread-rule agent beside a node service, on a thread of its own: threads a workload creates
//! or names after its deploy get their rules, and SCHED_DEADLINE demand pools are re-split by
//! measured use (rtslice-agent). `rtslice daemon` runs one, and so does every in-process use of the
//! service that stands for the daemon (the bench's node path): without it a reclaiming pool keeps
//! the static split of its deploy.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::error::{NodeError, Result};
use crate::service::Service;

/// The running agent; dropping it stops the thread (within one rescan) and waits for it.
pub struct AgentThread {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl AgentThread {
    /// Gives `service` an agent that knows its deployed workloads and runs it. Call it before the
    /// service deploys anything that should be followed from its first moment.
    pub fn start(service: &mut Service) -> Result<AgentThread> {
        let agent = Arc::new(Mutex::new(rtslice_agent::Agent::empty(service.backend())));
        service.attach_agent(agent.clone())?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("rtslice-agent".into())
                .spawn(move || {
                    if let Err(e) = rtslice_agent::run_shared(&agent, &rtslice_agent::AgentOptions::default(), &stop) {
                        tracing::error!("the thread-rule agent stopped: {e}");
                    }
                })
                .map_err(|e| NodeError::State(format!("cannot start the thread-rule agent: {e}")))?
        };
        Ok(AgentThread { stop, thread: Some(thread) })
    }
}

impl Drop for AgentThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
