//! The `closed-loop` strategy's node side: a cell's workloads deployed through the node service
//! in-process (rtslice-node's `Service`: admission one workload at a time, a journal segment each,
//! the adapting loop) with its telemetry (rtslice-metrics: each workload's CPU use from its cgroup,
//! the misses it reports on the report channel) read every second and handed to the loop — what
//! `rtslice daemon` does, without its HTTP API. Its own state directory, so the bench's one-shot
//! reset never meets it. A `via: node` variant deploys its cells the same way, with a spec that
//! does not adapt: the platform path measured beside one-shot apply.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rtslice_node::{AgentThread, Phase, Service, ServiceOptions, Telemetry, TelemetryOptions};

/// How often the loop gets a reading (the `adapt.interval` of the workloads decides how often it acts).
const READ_EVERY: Duration = Duration::from_secs(1);

/// Why a node could not be started for a cell: its admission said no (the cell's layout does not
/// fit — a result, recorded as refused), or something failed (an error of the run).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("closed loop: the node did not admit every workload: {0}")]
    Refused(String),
    #[error("closed loop: {0}")]
    Failed(String),
}

pub struct ClosedLoop {
    service: Arc<Mutex<Option<Service>>>,
    stop: Arc<AtomicBool>,
    ticker: Option<JoinHandle<()>>,
    /// Stopped before the node is reset (it holds the workloads' rules).
    agent: Option<AgentThread>,
}

fn lock(m: &Mutex<Option<Service>>) -> std::sync::MutexGuard<'_, Option<Service>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ClosedLoop {
    /// Opens a node in `state_dir`, deploys every workload of `spec` (all must be admitted: a
    /// pending one fails the run with the planner's reason, and the node is reset) and starts the
    /// loop. Workloads that report SLIs send them to `report_socket` (bound here).
    pub fn start(spec: &rtslice_spec::Spec, state_dir: &Path, report_socket: &Path, mechanism: Option<rtslice_host::Mechanism>) -> Result<ClosedLoop, StartError> {
        let telemetry = Telemetry::start(
            &TelemetryOptions {
                // The loop needs CPU use and reported misses, not latency histograms: no BPF cost.
                trace: false,
                report_socket: Some(report_socket.to_path_buf()),
                metrics_listen: None,
                sample_every: READ_EVERY,
                history: Duration::from_secs(120),
            },
            report_socket,
        )
        .map_err(|e| StartError::Failed(format!("telemetry: {e}")))?;
        let mut svc = Service::open(ServiceOptions {
            state_dir: state_dir.to_path_buf(),
            node: spec.node.clone(),
            mechanism,
            grace: Duration::from_secs(2),
            launch_env: Vec::new(),
            boot_id_file: None,
            access: Default::default(),
            resctrl: None,
            hrtick: false,
            fair_server_off: false,
            oci: Default::default(),
        })
        .map_err(|e| StartError::Failed(format!("cannot open the node in {}: {e}", state_dir.display())))?;
        // As the daemon runs it: without the agent a reclaiming SCHED_DEADLINE pool would keep its
        // deploy's static split (measured: the via-node cells under SCHED_DEADLINE collapsed).
        let agent = match AgentThread::start(&mut svc) {
            Ok(a) => a,
            Err(e) => {
                let _ = svc.reset();
                return Err(StartError::Failed(format!("agent: {e}")));
            }
        };
        let deployed = match svc.deploy(spec) {
            Ok(o) => o,
            Err(e) => {
                drop(agent);
                let _ = svc.reset();
                return Err(StartError::Failed(format!("deploy: {e}")));
            }
        };
        let pending: Vec<String> =
            deployed.iter().filter(|o| o.phase != Phase::Running).map(|o| format!("{}: {}", o.name, o.reason.clone().unwrap_or_default())).collect();
        if !pending.is_empty() {
            drop(agent);
            let _ = svc.reset();
            return Err(StartError::Refused(pending.join("; ")));
        }
        telemetry.sync(&svc);
        let service = Arc::new(Mutex::new(Some(svc)));
        let stop = Arc::new(AtomicBool::new(false));
        let ticker = {
            let (service, stop) = (service.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(READ_EVERY);
                    let mut guard = lock(&service);
                    let Some(svc) = guard.as_mut() else { break };
                    telemetry.sync(svc);
                    telemetry.sample_now();
                    if let Some(reading) = telemetry.latest() {
                        svc.adapt(&reading);
                    }
                }
            })
        };
        Ok(ClosedLoop { service, stop, ticker: Some(ticker), agent: Some(agent) })
    }

    /// The reservation mechanism the node enforces (its own choice unless one was asked for).
    pub fn mechanism(&self) -> Option<rtslice_host::Mechanism> {
        lock(&self.service).as_ref().map(|s| s.mechanism())
    }

    /// Stops the loop, undoes the node (every workload's changes; launched processes are the
    /// runner's, attached by pid, and keep running) and returns the loop's decisions in order.
    pub fn finish(mut self) -> Result<Vec<String>, String> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
        drop(self.agent.take());
        let svc = lock(&self.service).take().ok_or("closed loop: the node is gone")?;
        let mut decisions: Vec<String> = svc
            .events(0)
            .into_iter()
            .filter(|e| e.kind == "adapted" || e.kind == "failed")
            .map(|e| format!("{}: {}", e.workload.unwrap_or_default(), e.message))
            .collect();
        // Each workload's last decision, a "keep" too: why it did (not) change at the end.
        for w in svc.list() {
            if let (Some(name), Some(last)) = (w["name"].as_str(), w["adaptLast"].as_str()) {
                decisions.push(format!("{name}: last decision: {last}"));
            }
        }
        svc.reset().map_err(|e| format!("closed loop: reset of the node: {e}"))?;
        Ok(decisions)
    }
}

impl Drop for ClosedLoop {
    /// A run that fails or is interrupted still undoes the node.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
        drop(self.agent.take());
        if let Some(svc) = lock(&self.service).take() {
            let _ = svc.reset();
        }
    }
}
