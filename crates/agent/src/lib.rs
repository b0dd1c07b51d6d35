//! rtslice-agent: keeps applied workloads in policy. vBS stacks create their real-time threads after
//! start (and name them afterwards), so `apply` alone cannot give them their rules. The agent listens
//! to the kernel's process connector (netlink: fork, exec and comm events) and applies the first
//! matching rule to each new or renamed thread of a workload, typically within tens of microseconds of
//! the event; where the connector is unavailable it polls the workloads' task lists (every 2 ms by
//! default). A slow full rescan (every 500 ms) also catches events lost to socket overruns.
//!
//! A SCHED_DEADLINE rule's runtime is the budget of all the threads it matches together: when a
//! thread joins such a rule, the agent re-splits the budget over the rule's threads — the others
//! shrink first, then the newcomer is admitted — and every rescan grows the shares again when threads
//! have exited (`rtslice_host::rules::assign`). Children of deadline threads start in SCHED_OTHER
//! (SCHED_FLAG_RESET_ON_FORK) and get their share here.
//!
//! Reclaiming reservations (`reclaim: true`) follow demand: every 200 ms the agent measures each of
//! their deadline threads' CPU time since the last time (schedstat) and re-splits the workload's pool
//! by it (`CompiledRules::assign_by_demand`), so the thread that is busy now holds the budget the
//! idle ones do not use; the pool's total never grows. At its start it splits by each thread's CPU
//! time so far when the threads have run before (a stack attached by pid), instead of keeping
//! apply's equal split for the first window.
//!
//! `apply` starts it detached and journals it; `reset` stops it; `status` reports it. It writes
//! `agent.ready` (its pid) into the state directory once it is subscribed and has done a first scan,
//! and `agent.stats.json` with event→rule latencies.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rtslice_host::cgroup::Backend;
use rtslice_host::rules::CompiledRules;
use rtslice_host::StateDir;
use rtslice_sys::proc_connector;
use rtslice_sys::procfs;
use serde::{Deserialize, Serialize};

/// The kernel's process connector the agent listens to (in `rtslice-sys`).
pub use rtslice_sys::proc_connector::{Event, ProcConnector};

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Host(#[from] rtslice_host::HostError),
    #[error("state directory {0}: nothing is applied (run `rtslice apply` first)")]
    NothingApplied(PathBuf),
    #[error("writing {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

#[derive(Clone, Debug)]
pub struct AgentOptions {
    /// Skip the process connector and poll (the fallback, forced).
    pub force_polling: bool,
    pub poll_interval: Duration,
    pub rescan_interval: Duration,
    /// How often demand pools (reclaiming reservations) are measured and re-split: often enough
    /// that a stack's shift of work (a worker pool warming up, a load change) is followed within a
    /// few hundred TTIs, rarely enough to measure each thread over many periods.
    pub demand_interval: Duration,
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            force_polling: false,
            poll_interval: Duration::from_millis(2),
            rescan_interval: Duration::from_millis(500),
            demand_interval: Duration::from_millis(200),
        }
    }
}

/// Latency from the kernel's event timestamp to the rule being in force, and counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentStats {
    /// The agent process that wrote these statistics: `rtslice status` shows them only while this
    /// is the recorded agent, never a previous run's left in the state directory.
    #[serde(default)]
    pub pid: u32,
    pub mode: String,
    pub events: u64,
    pub applied: u64,
    pub errors: u64,
    /// Event→applied latencies in µs (netlink mode), min/p50/p99/max over the last 10,000.
    pub latency_us: Option<[f64; 4]>,
    pub last_error: Option<String>,
}

struct Workload {
    name: String,
    dir: PathBuf,
    rules: CompiledRules,
    /// Demand pools: each thread's on-CPU ns at the last rescan, and its use over the window before.
    oncpu: HashMap<i32, u64>,
    demand: HashMap<i32, u64>,
    /// When the split by history was first put off because apply had not given every thread its
    /// budget yet ([`FIRST_SPLIT_WAIT`]).
    put_off: Option<Instant>,
}

/// How much CPU time a workload's threads must have used together before the agent started for
/// the agent's first split by demand to follow it (less is start-up, not demand): a quarter of the
/// default demand window of a whole CPU.
pub const FIRST_SPLIT_HISTORY: Duration = Duration::from_millis(50);

/// How long the split by history waits for apply to give every thread a deadline rule matches its
/// budget (apply rules a stack's threads within milliseconds; a thread it could not rule must not
/// hold the pool's demand split back longer).
pub const FIRST_SPLIT_WAIT: Duration = Duration::from_secs(1);

/// A demand pool is re-split only when some thread's share would change by more than this fraction
/// of the pool: sched_setattr on every thread every rescan for noise would buy nothing.
const RESPLIT_THRESHOLD: f64 = 0.02;

pub struct Agent {
    backend: Backend,
    workloads: Vec<Workload>,
    /// tid → comm last enforced; avoids repeated syscalls in rescans.
    seen: HashMap<i32, String>,
    stats: AgentStats,
    latencies: Vec<f64>,
}

/// Set by SIGTERM/SIGINT: the loop ends and the statistics are written one last time.
static STOP: std::sync::LazyLock<std::sync::Arc<AtomicBool>> = std::sync::LazyLock::new(|| std::sync::Arc::new(AtomicBool::new(false)));


impl Agent {
    /// Loads the applied records (workload cgroups and their rules): of the node whose directory
    /// `dir` is (`Node::start_agent`), or of what the state directory `dir` holds.
    pub fn load(dir: &StateDir) -> Result<Agent, AgentError> {
        let records = match rtslice_host::node_records_in(&dir.path) {
            Some(records) => records?,
            None => rtslice_host::applied_records(dir)?,
        };
        let first = records.first().ok_or_else(|| AgentError::NothingApplied(dir.path.clone()))?;
        let mut agent = Agent::empty(first.backend.clone());
        for rec in &records {
            agent.add(rec)?;
        }
        Ok(agent)
    }

    /// An agent with no workloads yet: the node service adds each workload once it is deployed
    /// ([`Agent::add`]) and takes it away before it is changed or removed ([`Agent::remove`]), so
    /// the agent never works on a workload while the node does.
    pub fn empty(backend: Backend) -> Agent {
        Agent { backend, workloads: Vec::new(), seen: HashMap::new(), stats: AgentStats::default(), latencies: Vec::new() }
    }

    /// Keeps the workloads of `rec` in policy from now on (replacing any of the same name). Their
    /// threads are handled at the next scan.
    pub fn add(&mut self, rec: &rtslice_host::AppliedRecord) -> Result<(), AgentError> {
        for w in &rec.workloads {
            self.remove(&w.name);
            let wide = rec.setup.workloads.iter().find(|s| s.name == w.name).filter(|s| s.wide_affinity).map(|_| w.cpus.clone());
            let rules = CompiledRules::new(&w.rules, wide).map_err(rtslice_host::HostError::Invalid)?;
            if !rules.is_empty() {
                self.workloads.push(Workload { name: w.name.clone(), dir: w.group.cpuset.clone(), rules, oncpu: HashMap::new(), demand: HashMap::new(), put_off: None });
            }
        }
        // Threads of a re-added workload are enforced again under its (possibly new) rules.
        self.seen.clear();
        Ok(())
    }

    /// Stops keeping workload `name` in policy (before the node changes or removes it).
    pub fn remove(&mut self, name: &str) {
        self.workloads.retain(|w| w.name != name);
    }

    /// The workloads kept in policy, by name.
    pub fn workload_names(&self) -> Vec<String> {
        self.workloads.iter().map(|w| w.name.clone()).collect()
    }

    /// Which workload a process belongs to (by its cgroup in the cpuset hierarchy).
    fn workload_of(&self, tgid: i32) -> Option<usize> {
        let text = procfs::cgroup_membership(tgid)?;
        let path = self.backend.cgroup_of(&text)?;
        self.workloads.iter().position(|w| path.starts_with(&w.dir))
    }

    /// Applies the rule for one thread; `event_ns` is the kernel timestamp of the triggering event.
    fn handle(&mut self, tgid: i32, tid: i32, comm: Option<String>, event_ns: Option<u64>) {
        let Some(wi) = self.workload_of(tgid) else { return };
        let Some(comm) = comm.or_else(|| rtslice_host::sched::comm_of(tgid, tid)) else { return };
        let w = &self.workloads[wi];
        let Some(want) = w.rules.wanted(&comm) else {
            self.seen.insert(tid, comm);
            return;
        };
        let result = if matches!(want.policy, Some(rtslice_host::SchedAttr::Deadline { .. })) {
            // The rule's budget is shared: re-split it over its threads, this one included.
            self.resplit(wi, Some(tid))
        } else {
            rtslice_host::rules::enforce(tid, &want)
        };
        let w = &self.workloads[wi];
        match result {
            Ok(changed) => {
                if changed {
                    self.stats.applied += 1;
                    if let Some(ts) = event_ns {
                        let lat = proc_connector::now_ns().saturating_sub(ts) as f64 / 1000.0;
                        if self.latencies.len() >= 10_000 {
                            self.latencies.remove(0);
                        }
                        self.latencies.push(lat);
                    }
                    // Log the first applications and then a sample, so thread churn cannot fill the disk.
                    let n = self.stats.applied;
                    if n <= 200 || n % 1000 == 0 {
                        println!("{tgid}: thread {tid} ({comm}) ← rule {} of {} (#{n})", want.rule, w.name);
                    }
                }
                self.seen.insert(tid, comm);
            }
            Err(e) => {
                // Exited threads are normal; other refusals are reported (status shows the drift).
                if !e.to_string().contains("No such process") {
                    self.stats.errors += 1;
                    let msg = format!("thread {tid} ({comm}) of {}: {e}", w.name);
                    eprintln!("{msg}");
                    self.stats.last_error = Some(msg);
                }
                self.seen.insert(tid, comm);
            }
        }
    }

    /// Re-splits workload `wi`'s SCHED_DEADLINE budgets over the threads their rules match now
    /// (others shrink first, then anyone who grows or joins). Returns whether `newcomer` changed, or its
    /// error; other threads' refusals are counted here.
    fn resplit(&mut self, wi: usize, newcomer: Option<i32>) -> rtslice_host::Result<bool> {
        let w = &self.workloads[wi];
        let names = thread_names(w);
        let assigned = if w.rules.has_demand_pool() { w.rules.assign_by_demand(&names, &w.demand) } else { w.rules.assign(&names) };
        if newcomer.is_none() && !worth_resplitting(&w.rules, &assigned) {
            return Ok(false);
        }
        let mut mine = Ok(false);
        let mut others = Vec::new();
        for (tid, want) in rtslice_host::rules::shrink_first(assigned) {
            let growing = !rtslice_host::rules::shrinks(tid, &want);
            let r = rtslice_host::rules::enforce(tid, &want);
            if Some(tid) == newcomer {
                mine = r;
                continue;
            }
            match r {
                Ok(true) => self.stats.applied += 1,
                Ok(false) => {}
                // EBUSY while growing: an exited deadline thread's bandwidth returns to the kernel
                // only at its 0-lag time (within a period); the next rescan grows it.
                Err(rtslice_host::HostError::Sched { source, .. })
                    if source.raw_os_error() == Some(libc::ESRCH) || (growing && source.raw_os_error() == Some(libc::EBUSY)) => {}
                Err(e) => others.push(format!("thread {tid} of {}: {e}", w.name)),
            }
        }
        for msg in others {
            self.stats.errors += 1;
            eprintln!("{msg}");
            self.stats.last_error = Some(msg);
        }
        mine
    }

    /// Measures the CPU time each thread of workload `wi`'s demand pools used since the last call.
    fn measure_demand(&mut self, wi: usize) {
        let w = &mut self.workloads[wi];
        let mut now = HashMap::new();
        let mut demand = HashMap::new();
        for (pid, tid, _) in rtslice_host::rules::workload_threads(&w.dir) {
            let Some(ns) = procfs::oncpu_ns(pid as u32, tid as u32) else { continue };
            if let Some(before) = w.oncpu.get(&tid) {
                demand.insert(tid, ns.saturating_sub(*before));
            }
            now.insert(tid, ns);
        }
        w.oncpu = now;
        w.demand = demand;
    }

    /// Re-splits every workload's shared SCHED_DEADLINE budgets (threads that exited give their
    /// share back to the others).
    pub fn rebalance(&mut self) {
        for wi in 0..self.workloads.len() {
            if self.workloads[wi].rules.has_pooled() {
                let _ = self.resplit(wi, None);
            }
        }
    }

    /// Measures the demand pools' threads and re-splits the pools by it (every `demand_interval`).
    /// A workload's first measurement takes the baseline ([`Agent::start_demand`]).
    pub fn follow_demand(&mut self) {
        for wi in 0..self.workloads.len() {
            if self.workloads[wi].rules.has_demand_pool() {
                self.demand_step(wi);
            }
        }
    }

    /// Takes the demand baseline of the workloads that have none yet: their threads appeared since
    /// the last measurement (the agent starts before apply launches or attaches anything). When
    /// those threads have run for a while already ([`FIRST_SPLIT_HISTORY`]: a stack attached by
    /// pid, or started a while before), it splits the pool by their CPU time since they started.
    /// Returns whether it took one, so the caller can start the next window from it.
    pub fn start_demand(&mut self) -> bool {
        let mut took = false;
        for wi in 0..self.workloads.len() {
            if self.workloads[wi].rules.has_demand_pool() && self.workloads[wi].oncpu.is_empty() {
                self.demand_step(wi);
                took |= !self.workloads[wi].oncpu.is_empty();
            }
        }
        took
    }

    fn demand_step(&mut self, wi: usize) {
        let first = self.workloads[wi].oncpu.is_empty();
        self.measure_demand(wi);
        if !first {
            let _ = self.resplit(wi, None);
            return;
        }
        // The threads' CPU time since they started is the best first estimate of their demand;
        // waiting one interval for a window keeps apply's equal split, which starves the busy
        // thread, for that long (docs/results.md, Run 11). A stack launched just now has only its
        // start-up to show, which says nothing yet: it waits for the window.
        let w = &mut self.workloads[wi];
        if w.oncpu.values().sum::<u64>() >= FIRST_SPLIT_HISTORY.as_nanos() as u64 {
            // Apply gives each thread its equal part one thread at a time, and leaves alone a
            // thread that already holds a pool budget when it comes to it. A split written while
            // it is still on its way would be overwritten, for the threads it has not reached yet,
            // by their equal parts: more than the one budget in force until the next split (one
            // thread at apply's 8 ms, the others at their split: 45.9 ms of a 40 ms budget). So the
            // split by history waits until every thread a deadline rule matches holds a deadline
            // budget; until then the baseline is dropped and taken again on the next pass — for at most
            // FIRST_SPLIT_WAIT: a thread apply could not rule must not stop the pool from
            // following demand, which it then does from the next window on.
            if !deadline_rules_in_force(w) {
                let since = *w.put_off.get_or_insert_with(Instant::now);
                if since.elapsed() < FIRST_SPLIT_WAIT {
                    w.oncpu.clear();
                }
                return;
            }
            w.demand = w.oncpu.clone();
            let _ = self.resplit(wi, None);
        }
    }

    /// Walks every workload's threads; with `only_new`, skips threads already handled under the same name.
    pub fn scan(&mut self, only_new: bool) {
        let mut todo = Vec::new();
        for w in &self.workloads {
            for pid in rtslice_host::workload_pids(&w.dir) {
                for tid in rtslice_host::sched::threads_of(pid) {
                    let comm = rtslice_host::sched::comm_of(pid, tid);
                    if only_new && comm.is_some() && self.seen.get(&tid) == comm.as_ref() {
                        continue;
                    }
                    todo.push((pid, tid, comm));
                }
            }
        }
        for (pid, tid, comm) in todo {
            self.handle(pid, tid, comm, None);
        }
        // Forget threads that are gone (tids are reused).
        if self.seen.len() > 4096 {
            self.seen.retain(|tid, _| std::path::Path::new(&format!("/proc/{tid}")).exists());
        }
    }

    pub fn stats(&self) -> AgentStats {
        let mut s = self.stats.clone();
        if !self.latencies.is_empty() {
            let mut v = self.latencies.clone();
            v.sort_by(f64::total_cmp);
            let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
            s.latency_us = Some([v[0], q(0.5), q(0.99), v[v.len() - 1]]);
        }
        s
    }
}

/// The threads of `w`'s cgroup now, with their names: what its rules match.
fn thread_names(w: &Workload) -> Vec<(i32, String)> {
    rtslice_host::rules::workload_threads(&w.dir).into_iter().map(|(_, tid, comm)| (tid, comm)).collect()
}

/// Whether every thread of `w` that a SCHED_DEADLINE rule matches holds a deadline budget now.
fn deadline_rules_in_force(w: &Workload) -> bool {
    w.rules.assign(&thread_names(w)).iter().all(|(tid, want)| {
        !matches!(want.policy, Some(rtslice_host::SchedAttr::Deadline { .. }))
            || matches!(rtslice_host::sched::get_attr(*tid), Ok(rtslice_host::SchedAttr::Deadline { .. }) | Err(_))
    })
}

/// Whether applying `assigned` would move some demand-pool share by more than
/// [`RESPLIT_THRESHOLD`] of its pool, or change anything outside the pools (a thread that joined or
/// left an equal split, a policy that drifted).
fn worth_resplitting(rules: &CompiledRules, assigned: &[(i32, rtslice_host::rules::Wanted)]) -> bool {
    let pools = rules.demand_pools(assigned);
    let in_pool: Vec<usize> = pools.iter().flat_map(|p| p.members.iter().copied()).collect();
    for (i, (tid, want)) in assigned.iter().enumerate() {
        if !in_pool.contains(&i) && rtslice_host::rules::conforms(*tid, want).is_err() {
            return true;
        }
    }
    pools.iter().any(|p| {
        let step = (p.runtime_ns as f64 * RESPLIT_THRESHOLD) as u64;
        p.members.iter().any(|&i| {
            let (tid, want) = &assigned[i];
            // Both counted in the pool's period (members may run at periods of their own).
            let now = p.held(*tid);
            let new = match want.policy {
                Some(rtslice_host::SchedAttr::Deadline { runtime_ns, period_ns, .. }) => p.counted(runtime_ns, period_ns),
                _ => 0,
            };
            // Not yet under its policy (runtime 0) or moved by more than the step.
            now == 0 || now.abs_diff(new) > step
        })
    })
}

fn write_atomic(path: &std::path::Path, text: &str) -> Result<(), AgentError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(|source| AgentError::Io { path: path.to_path_buf(), source })
}

/// Runs until SIGTERM/SIGINT. Reports readiness through `<state>/agent.ready`.
pub fn run(dir: &StateDir, opts: &AgentOptions) -> Result<(), AgentError> {
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, std::sync::Arc::clone(&STOP))
            .map_err(|source| AgentError::Io { path: PathBuf::from(format!("<signal {sig} handler>")), source })?;
    }
    let agent = std::sync::Mutex::new(Agent::load(dir)?);
    let stats_path = dir.path.join("agent.stats.json");
    let ready = || {
        write_atomic(&dir.path.join("agent.ready"), &std::process::id().to_string())?;
        let a = agent.lock().unwrap_or_else(|p| p.into_inner());
        println!("agent ready ({}), {} workload(s) with rules", a.stats.mode, a.workloads.len());
        Ok(())
    };
    let mut last_stats = AgentStats::default();
    drive(&agent, opts, &STOP, ready, |a| {
        let s = a.stats();
        if s != last_stats {
            let _ = write_atomic(&stats_path, &serde_json::to_string_pretty(&s).unwrap_or_default());
            last_stats = s;
        }
    })?;
    let a = agent.lock().unwrap_or_else(|p| p.into_inner());
    let _ = write_atomic(&stats_path, &serde_json::to_string_pretty(&a.stats()).unwrap_or_default());
    let _ = std::fs::remove_file(dir.path.join("agent.ready"));
    Ok(())
}

/// Runs an agent its owner shares — the node service adds and removes workloads through the same
/// mutex between operations — until `stop` is set. The agent is locked only while it handles a
/// batch of events or a scan, never while it waits for the kernel.
pub fn run_shared(agent: &std::sync::Mutex<Agent>, opts: &AgentOptions, stop: &AtomicBool) -> Result<(), AgentError> {
    drive(agent, opts, stop, || Ok(()), |_| {})
}

/// The agent's loop: the process connector's events (or polling), the demand pools every
/// `demand_interval`, a full rescan and re-split every `rescan_interval` (then `on_rescan`).
fn drive(
    agent: &std::sync::Mutex<Agent>,
    opts: &AgentOptions,
    stop: &AtomicBool,
    ready: impl FnOnce() -> Result<(), AgentError>,
    mut on_rescan: impl FnMut(&Agent),
) -> Result<(), AgentError> {
    let lock = || agent.lock().unwrap_or_else(|p| p.into_inner());
    let connector = if opts.force_polling {
        None
    } else {
        match ProcConnector::subscribe() {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("process connector unavailable ({e}); polling every {:?}", opts.poll_interval);
                None
            }
        }
    };
    {
        let mut a = lock();
        a.stats.pid = std::process::id();
        a.stats.mode = if connector.is_some() { "netlink".into() } else { "polling".into() };
        a.scan(false);
        // The demand baseline now (and a first split by the threads' use so far, when they have
        // a history), so the next re-split by demand comes one interval after start.
        a.follow_demand();
    }
    ready()?;
    let mut last_rescan = Instant::now();
    let mut last_demand = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        match &connector {
            Some(c) => match c.recv(Duration::from_millis(100)) {
                Ok(events) => {
                    let mut a = lock();
                    for ev in events {
                        a.stats.events += 1;
                        match ev {
                            Event::Fork { child_pid, child_tgid, ts_ns, .. } => a.handle(child_tgid, child_pid, None, Some(ts_ns)),
                            Event::Exec { pid, tgid, ts_ns } => a.handle(tgid, pid, None, Some(ts_ns)),
                            Event::Comm { pid, tgid, comm, ts_ns } => a.handle(tgid, pid, Some(comm), Some(ts_ns)),
                        }
                    }
                }
                // ENOBUFS: the socket overran and events were lost.
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => lock().scan(true),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    eprintln!("process connector: {e}");
                    std::thread::sleep(opts.poll_interval);
                    lock().scan(true);
                }
            },
            None => {
                std::thread::sleep(opts.poll_interval);
                lock().scan(true);
            }
        }
        if last_demand.elapsed() >= opts.demand_interval {
            lock().follow_demand();
            last_demand = Instant::now();
        } else if lock().start_demand() {
            // A window that starts at a baseline just taken is a whole interval long: a window of
            // a few ms would split by noise until the next one.
            last_demand = Instant::now();
        }
        if last_rescan.elapsed() >= opts.rescan_interval {
            let mut a = lock();
            a.scan(true);
            a.rebalance();
            last_rescan = Instant::now();
            on_rescan(&a);
        }
    }
    Ok(())
}

/// The agent's last written statistics, if any.
pub fn read_stats(dir: &StateDir) -> Option<AgentStats> {
    serde_json::from_str(&std::fs::read_to_string(dir.path.join("agent.stats.json")).ok()?).ok()
}
