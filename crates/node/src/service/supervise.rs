//! Supervision: the host brought to the desired state after a crash, workloads' exits noticed
//! and restarted by their policy, drift reported.

use super::*;

impl Service {
    /// Brings the host to the desired state: deploys what should run and does not, removes what runs
    /// and should not, resizes what differs (after a crash between the host's change and ours).
    pub(super) fn reconcile(&mut self) -> Result<()> {
        let deployed = self.host.names();
        for n in &deployed {
            if !self.desired.workloads.iter().any(|e| &e.workload.name == n && e.phase.holds()) {
                self.host_remove(n)?;
                self.event("recovered", Some(n), "deployed but not desired: removed".into());
            }
        }
        let running: Vec<(String, Option<Setup>)> = self
            .desired
            .workloads
            .iter()
            .filter(|e| e.phase.holds())
            .map(|e| (e.workload.name.clone(), e.setup.clone()))
            .collect();
        for (n, setup) in running {
            match self.host.record(&n)? {
                Some(rec) => {
                    if let Some(s) = setup.filter(|s| s != &rec.setup) {
                        match self.host_resize(&s) {
                            Ok(_) => self.event("recovered", Some(&n), "resized back to the desired reservation".into()),
                            Err(e) => self.event("failed", Some(&n), format!("cannot bring it to the desired reservation: {e}")),
                        }
                    }
                }
                None => {
                    // Rolled back by the host's recovery, or gone with a reboot: deploy it again.
                    let e = self.entry_mut(&n);
                    e.phase = Phase::Pending;
                    self.event("recovered", Some(&n), "desired but not deployed: deploying it again".into());
                    self.try_run(&n)?;
                }
            }
        }
        self.save()?;
        self.retry_pending()
    }

    /// The daemon's watcher, every second: a workload whose launched process exited is logged
    /// (`exited`) and, as its restart policy says, started again after its backoff (`restarted`);
    /// every few seconds the running workloads are compared with their journals (`drift` when that
    /// changes).
    pub fn check_exits(&mut self) {
        let t = now();
        let names: Vec<(String, Phase)> = self.desired.workloads.iter().map(|e| (e.workload.name.clone(), e.phase)).collect();
        for (n, phase) in names {
            let result = match phase {
                Phase::Running => self.notice_exit(&n, t),
                Phase::Exited => self.restart_if_due(&n, t),
                Phase::Pending => Ok(()),
            };
            if let Err(e) = result {
                self.event("failed", Some(&n), format!("supervising it: {e}"));
            }
        }
        if self.last_drift_check.is_none_or(|at| at.elapsed() >= DRIFT_CHECK_EVERY) {
            self.last_drift_check = Some(Instant::now());
            self.check_drift();
        }
    }

    pub(super) fn notice_exit(&mut self, name: &str, t: f64) -> Result<()> {
        let Some(rec) = self.host.record(name)? else { return Ok(()) };
        let launched = !matches!(rec.setup.workloads.first().map(|w| &w.launch), None | Some(rtslice_host::Launch::None) | Some(rtslice_host::Launch::Attach { .. }));
        let procs: Vec<_> = rec.workloads.iter().flat_map(|w| w.pids.iter().copied()).collect();
        for p in &procs {
            reap(p.pid, &mut self.exits);
        }
        if !launched || procs.is_empty() || procs.iter().any(|p| p.alive()) {
            return Ok(());
        }
        // Reaped again now that every one is gone: a process that became a zombie between the
        // reap above and the liveness check is reaped here, its status known (a TCG guest once
        // logged its first crash as "status unknown" so).
        for p in &procs {
            reap(p.pid, &mut self.exits);
        }
        // Every launched process is gone: the workload exited. Its status is known when the daemon
        // was its parent (reaped); after a daemon restart it is not, and counts as a failure.
        let statuses: Vec<Option<ExitStatus>> = procs.iter().map(|p| self.exits.remove(&p.pid)).collect();
        let success = statuses.iter().all(|s| *s == Some(ExitStatus::Code(0)));
        let how = procs
            .iter()
            .zip(&statuses)
            .map(|(p, s)| match s {
                Some(ExitStatus::Code(c)) => format!("pid {} exited with status {c}", p.pid),
                Some(ExitStatus::Signal(sig)) => format!("pid {} was killed by signal {sig}", p.pid),
                None => format!("pid {} exited (status unknown: not reaped by this daemon)", p.pid),
            })
            .collect::<Vec<_>>()
            .join(", ");
        let e = self.entry_mut(name);
        let policy = e.workload.restart;
        let ran = e.started_at.map_or(0.0, |s| t - s);
        if ran > policy.max_backoff.as_secs_f64() {
            e.restarts = 0;
        }
        let restart = match policy.policy {
            RestartPolicy::Never => false,
            RestartPolicy::OnFailure => !success,
            RestartPolicy::Always => true,
        };
        e.phase = Phase::Exited;
        e.exit = Some(how.clone());
        let message = if restart {
            e.restarts += 1;
            let delay = policy.delay(e.restarts);
            e.restart_at = Some(t + delay.as_secs_f64());
            format!("{how}; restart {} in {:.1} s (policy {:?})", e.restarts, delay.as_secs_f64(), policy.policy)
        } else {
            e.restart_at = None;
            format!("{how}; not restarted (policy {:?}); it keeps its CPUs until removed", policy.policy)
        };
        self.save()?;
        self.event("exited", Some(name), message);
        Ok(())
    }

    /// Starts an exited workload again when its backoff is over: its segment is removed (leftover
    /// processes stopped, cgroups undone) and deployed anew with the same setup, on the same CPUs.
    pub(super) fn restart_if_due(&mut self, name: &str, t: f64) -> Result<()> {
        let e = self.entry_mut(name);
        let (Some(at), Some(setup)) = (e.restart_at, e.setup.clone()) else { return Ok(()) };
        if at > t {
            return Ok(());
        }
        let n = e.restarts;
        if self.host.record(name)?.is_some() {
            self.host_remove(name)?;
        }
        match self.host_deploy(&setup) {
            Ok(rec) => {
                let e = self.entry_mut(name);
                e.phase = Phase::Running;
                e.restart_at = None;
                e.started_at = Some(now());
                self.save()?;
                let pids: Vec<String> = rec.pids.iter().map(|p| p.pid.to_string()).collect();
                self.event("restarted", Some(name), format!("restart {n}: pids [{}]", pids.join(", ")));
                Ok(())
            }
            Err(err) => {
                self.set_pending(name, format!("its restart failed: {err}"), None)?;
                self.event("failed", Some(name), format!("restart {n}: {err}"));
                self.retry_pending()
            }
        }
    }

    pub(super) fn check_drift(&mut self) {
        let t = now();
        let names: Vec<String> = self.desired.workloads.iter().filter(|e| e.phase == Phase::Running).map(|e| e.workload.name.clone()).collect();
        self.drift_seen.retain(|n, _| names.contains(n));
        // A workload just started is still naming its threads and the agent is still giving the
        // late ones their rules: not drift (it showed as "drift detected" then "no drift any more"
        // seconds after every deploy).
        let settling: Vec<String> = self
            .desired
            .workloads
            .iter()
            .filter(|e| e.started_at.is_some_and(|s| t - s < DRIFT_CHECK_EVERY.as_secs_f64()))
            .map(|e| e.workload.name.clone())
            .collect();
        let names: Vec<String> = names.into_iter().filter(|n| !settling.contains(n)).collect();
        for n in names {
            let Ok(st) = self.host.status(&n) else { continue };
            let now_drift: Vec<String> = st.drift.iter().map(|d| format!("{}: expected {}, found {}", d.what, d.expected, d.actual)).collect();
            let key = now_drift.join("; ");
            if self.drift_seen.get(&n).map_or(!key.is_empty(), |k| *k != key) {
                self.drift_seen.insert(n.clone(), key.clone());
                let message = if key.is_empty() { "no drift any more".to_string() } else { format!("drift detected: {key}") };
                self.event("drift", Some(&n), message);
            }
        }
    }
}

/// Reaps `pid` if it is an exited child of this process (a workload this process launched: its exit
/// status is known then; after a daemon restart it is not, the new daemon is not its parent). Only
/// that pid: waiting for any child would take other children's statuses from their owners.
fn reap(pid: i32, exits: &mut HashMap<i32, ExitStatus>) {
    let Some(p) = rustix::process::Pid::from_raw(pid) else { return };
    if let Ok(Some((_, st))) = rustix::process::waitpid(Some(p), rustix::process::WaitOptions::NOHANG) {
        let status = match (st.exit_status(), st.terminating_signal()) {
            (Some(c), _) => ExitStatus::Code(c),
            (None, Some(s)) => ExitStatus::Signal(s),
            (None, None) => return,
        };
        exits.insert(pid, status);
    }
}
