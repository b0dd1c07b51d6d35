//! The runner: executes an experiment's interleaved run order through rtslice's own commands as
//! child processes (`rtslice noise`, `emulate`, `apply`, `trace`, `reset`, `loadgen`), so a crash
//! of one piece fails one run, not the bench, and every run is what a user could do by hand.
//!
//! One run: start the interference → start the workloads → plan and apply the strategy's spec
//! (adopting the workloads by PID) → warm up → measure for `duration` (tracer, CPU and switch
//! sampling, load generator / ping) → collect → `rtslice reset` → stop the interference.
//! Teardown happens whatever failed; a failed run is recorded with its error and the rest go on.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::experiment::{Experiment, Role, ScenarioKind, WorkloadSpec};
use crate::matrix::{self, Cell};
use crate::parse;
use crate::proc::Proc;
use crate::procfs;
use crate::results::{Counters, InstanceResult, Results, RunRecord, RunStatus};
use crate::specgen::{self, Steering};
use crate::strategy::Strategy;
use crate::layout::{self, HostShape, Layout};

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("cannot write results to {path}: {source}")]
    Write { path: String, source: std::io::Error },
    #[error("cannot find the rtslice binary to run experiments with: {0}")]
    NoBinary(String),
}

/// How to run an experiment.
#[derive(Debug, Clone)]
pub struct Options {
    /// The `rtslice` executable whose subcommands do the work.
    pub rtslice: PathBuf,
    /// Results directory.
    pub out: PathBuf,
    /// rtslice state directory used for apply/reset (private to the bench, so a bench never
    /// resets what a user applied).
    pub state_dir: PathBuf,
    pub progress: bool,
    /// Set by Ctrl-C: finish the current step, tear down, write what was measured.
    pub stop: Arc<AtomicBool>,
    pub steering: Steering,
    /// CPU sampling interval during the measurement window.
    pub sample_every: Duration,
}

impl Options {
    pub fn new(rtslice: PathBuf, out: PathBuf) -> Options {
        let state_dir = out.join("state");
        Options {
            rtslice,
            out,
            state_dir,
            progress: true,
            stop: Arc::new(AtomicBool::new(false)),
            steering: Steering::default(),
            sample_every: Duration::from_millis(500),
        }
    }
}

fn now_unix() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

fn s(x: &str) -> String {
    x.to_string()
}

fn fmt_dur(d: Duration) -> String {
    format!("{}ms", d.as_millis().max(1))
}

/// Sleeps up to `d`, waking early when asked to stop; true when the full time passed.
fn nap(d: Duration, stop: &AtomicBool) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20).min(end.saturating_duration_since(Instant::now())));
    }
    true
}

fn sanitize(id: &str) -> String {
    id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

/// Runs the whole experiment and writes the results directory (raw data and reports).
pub fn run(exp: &Experiment, opt: &Options) -> Result<Results, BenchError> {
    let wr = |e: std::io::Error| BenchError::Write { path: opt.out.display().to_string(), source: e };
    std::fs::create_dir_all(opt.out.join("runs")).map_err(wr)?;
    std::fs::create_dir_all(&opt.state_dir).map_err(wr)?;
    let cells = matrix::cells(exp);
    let order = matrix::schedule(cells.len(), exp.repetitions);
    let facts = procfs::host_facts();
    let mut results = Results {
        experiment: exp.clone(),
        machine: procfs::machine(),
        cells: cells.clone(),
        runs: vec![],
        interrupted: false,
        started_unix: now_unix(),
        finished_unix: 0.0,
        rtslice_version: version(&opt.rtslice),
    };
    // A bench that crashed earlier may have left its plan applied: start from a clean host.
    let _ = reset(opt, &opt.out.join("runs"));
    // An emulator that finds no calibration measures one at start-up, inside the measured window of
    // the first run (0.4 s of stalled TTIs, ~10% misses in a 4 s run): calibrate before any run.
    if exp.blocks.iter().any(|b| b.workloads.iter().any(|w| w.emulate.is_some())) {
        let _ = rtslice_emu::Calibration::load_or_measure();
    }
    let counters = counters_probe();
    let per_run = exp.warmup + exp.duration + Duration::from_secs(2);
    let bar = progress_bar(opt.progress, order.len() as u64, per_run);
    for slot in &order {
        if opt.stop.load(Ordering::SeqCst) {
            break;
        }
        let cell = &cells[slot.cell];
        bar.set_message(format!("{} #{}", cell.id, slot.repetition + 1));
        let mut rec = run_one(exp, cell, slot.seq, slot.repetition, &facts, opt);
        rec.counters = counters.clone();
        match &rec.status {
            RunStatus::Failed { error } => bar.println(format!("run {} ({}) failed: {}", slot.seq, cell.id, error.lines().next().unwrap_or(""))),
            RunStatus::Refused { reason } => bar.println(format!("run {} ({}) did not fit: {}", slot.seq, cell.id, reason.lines().next().unwrap_or(""))),
            _ => {}
        }
        results.runs.push(rec);
        // Written after every run: a killed bench still leaves everything measured so far.
        results.finished_unix = now_unix();
        results.write_raw(&opt.out).map_err(wr)?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    results.interrupted = opt.stop.load(Ordering::SeqCst) && results.runs.len() < order.len()
        || results.runs.iter().any(|r| r.status == RunStatus::Interrupted);
    results.finished_unix = now_unix();
    results.write_raw(&opt.out).map_err(wr)?;
    crate::report::write(&results, &opt.out).map_err(wr)?;
    Ok(results)
}

fn progress_bar(show: bool, len: u64, per_run: Duration) -> indicatif::ProgressBar {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    let bar = ProgressBar::new(len);
    if !show {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} runs · ETA {eta} · {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    // Until the first run finishes indicatif has no rate; the nominal time per run is a fair guess.
    let _ = per_run;
    bar
}

fn version(rtslice: &Path) -> String {
    std::process::Command::new(rtslice)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("rtslice-bench {}", env!("CARGO_PKG_VERSION")))
}

/// Whether hardware counters can be read here; the report says why not when they cannot.
pub fn counters_probe() -> Counters {
    use rtslice_sys::perf::{Counter, CounterOptions, HwEvent};
    let probe = CounterOptions { inherit: false, user_only: true, disabled: true };
    match Counter::open(HwEvent::INSTRUCTIONS, 0, probe) {
        // Dropping the counter closes it: this only asked whether the PMU is there.
        Ok(_) => Counters { available: true, reason: String::new(), ipc: None, mpki: None },
        Err(e) => {
            let code = e.raw_os_error();
            let errno = code.map(std::io::Error::from_raw_os_error).map(|e| e.to_string()).unwrap_or_else(|| e.to_string());
            let why = match code {
                Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) => "the CPU exposes no hardware performance counters to this (virtual) machine".to_string(),
                Some(libc::EACCES) | Some(libc::EPERM) => "perf_event_open is not permitted (run as root or lower kernel.perf_event_paranoid)".to_string(),
                _ => format!("perf_event_open failed: {errno}"),
            };
            Counters { available: false, reason: format!("{why} ({errno})"), ipc: None, mpki: None }
        }
    }
}

/// How often the closed-loop strategy's loop decides: a few decisions per compressed busy-hour
/// cycle, each over ~1000 TTIs.
const CLOSED_LOOP_INTERVAL: Duration = Duration::from_secs(1);

/// Where the closed-loop strategy's workloads report their SLIs.
fn report_socket(run_dir: &Path) -> PathBuf {
    run_dir.join("report.sock")
}

/// A node that did not admit the cell's workloads is the cell's result (refused, with the
/// planner's reason); any other failure to start it is an error of the run.
fn node_refusal(ctx: &mut RunCtx, e: crate::closed_loop::StartError) -> String {
    let msg = e.to_string();
    if matches!(e, crate::closed_loop::StartError::Refused(_)) {
        ctx.refused = Some(msg.clone());
    }
    msg
}

/// Undoes what the run applied (rtslice-host's reset: the journal in the bench's state dir).
/// Workloads are the runner's own children and are stopped by it, so they are kept here.
fn reset(opt: &Options, _dir: &Path) -> Result<(), String> {
    let dir = rtslice_host::StateDir::new(&opt.state_dir);
    let opts = rtslice_host::ResetOptions { keep_workloads: true, forget_stale: true, ..Default::default() };
    rtslice_host::reset(&dir, opts).map(|_| ()).map_err(|e| e.to_string())
}

/// A started workload instance.
struct Running {
    name: String,
    workload: WorkloadSpec,
    proc: Proc,
    /// Ping target namespace to remove afterwards.
    netns: Option<String>,
    /// Loadgen server address.
    addr: Option<String>,
    /// The runc container it runs in (study C's OCI variants), removed afterwards.
    container: Option<crate::container::Container>,
    cpu_last: u64,
    switches_start: u64,
}

struct RunCtx<'a> {
    exp: &'a Experiment,
    opt: &'a Options,
    dir: PathBuf,
    noise: Option<Proc>,
    instances: Vec<Running>,
    applied: bool,
    rec: RunRecord,
    /// Study C's variants: measured workloads run in a runc container with this isolation.
    oci: Option<crate::experiment::OciVariant>,
    /// The closed-loop strategy's node, or a `via: node` variant's (workloads deployed through the
    /// node service in-process).
    closed_loop: Option<crate::closed_loop::ClosedLoop>,
    /// The variant deploys through the node service instead of one-shot apply.
    via: crate::experiment::Via,
    /// The variant's mechanism, on either path (`None`: the path's own choice).
    mechanism: Option<rtslice_host::Mechanism>,
    /// Why the layout did not fit, when admission refused it (the planner's, or apply's before it
    /// touched anything): the run ends as `Refused`, not `Failed`.
    refused: Option<String>,
}

fn run_one(exp: &Experiment, cell: &Cell, seq: usize, repetition: u32, facts: &HostShape, opt: &Options) -> RunRecord {
    let mut rec = RunRecord::new(seq, cell, repetition);
    rec.started_unix = now_unix();
    let t0 = Instant::now();
    let steal_at_start = procfs::stolen_s();
    let block = &exp.blocks[cell.block];
    let variant = &block.variants[cell.variant];
    let workloads: Vec<(WorkloadSpec, u32)> = block
        .workloads
        .iter()
        .map(|w| {
            let mut w = w.clone();
            if let Some(extra) = variant.args.get(&w.name) {
                if let Some(e) = &mut w.emulate {
                    e.args.extend(extra.iter().cloned());
                } else if let Some(c) = &mut w.command {
                    c.extend(extra.iter().cloned());
                } else if let Some(l) = &mut w.loadgen {
                    l.client_args.extend(extra.iter().cloned());
                }
            }
            let n = variant.replicas.get(&w.name).copied().unwrap_or(w.replicas);
            (w, n)
        })
        .collect();
    let layout = match layout::layout(cell.strategy, &workloads, facts) {
        Ok(l) => l,
        Err(skip) => {
            rec.status = RunStatus::Skipped { reason: skip.to_string() };
            return rec;
        }
    };
    let dir = opt.out.join("runs").join(format!("{seq:04}-{}-r{}", sanitize(&cell.id), repetition + 1));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        rec.status = RunStatus::Failed { error: format!("cannot create {}: {e}", dir.display()) };
        return rec;
    }
    let mut ctx = RunCtx { exp, opt, dir, noise: None, instances: vec![], applied: false, rec, oci: variant.oci.clone(), closed_loop: None, via: variant.via, mechanism: variant.mechanism, refused: None };
    let outcome = execute(&mut ctx, cell, &layout, facts, &workloads);
    // Before teardown: the workloads' lives (the emulators end with their window), not the reset.
    ctx.rec.stolen = procfs::stolen_between(&steal_at_start, &procfs::stolen_s());
    let mut errors: Vec<String> = vec![];
    if let Err(e) = outcome {
        errors.push(e);
    }
    teardown(&mut ctx, &mut errors);
    let ctx_refused = ctx.refused.take();
    let mut rec = ctx.rec;
    rec.wall_s = t0.elapsed().as_secs_f64();
    rec.status = if let (Some(reason), [_]) = (ctx_refused, errors.as_slice()) {
        // Refused, and the teardown after it clean: the layout did not fit this host.
        RunStatus::Refused { reason }
    } else if !errors.is_empty() {
        RunStatus::Failed { error: errors.join("\n") }
    } else if opt.stop.load(Ordering::SeqCst) {
        RunStatus::Interrupted
    } else {
        RunStatus::Ok
    };
    rec
}

/// How long an emulator may run past the nominal end of its warm-up and window: a backstop only.
/// The runner ends it with SIGINT (it prints its summary and exits within a second) right after the
/// window, because the set-up between its start and the warm-up (apply, a shield moving every other
/// process, the interference starting) has no bound on a loaded host: with a tail of seconds, a
/// shielded run's vBS could exit on its own before the warm-up ended.
const EMU_TAIL: Duration = Duration::from_secs(60);

/// Time an interference generator gets to reach full strength before the warm-up goes on.
const NOISE_SETTLE: Duration = Duration::from_millis(700);

fn execute(ctx: &mut RunCtx, cell: &Cell, layout: &Layout, facts: &HostShape, workloads: &[(WorkloadSpec, u32)]) -> Result<(), String> {
    let exp = ctx.exp;
    let opt = ctx.opt;
    let rtslice = opt.rtslice.display().to_string();
    // 1. Workloads.
    let total = exp.warmup + exp.duration;
    for (idx, p) in layout.placements.iter().enumerate() {
        let w = workloads.iter().find(|(w, _)| w.name == p.workload).map(|(w, _)| w.clone()).ok_or("layout names an unknown workload")?;
        let mut netns = None;
        let mut addr = None;
        let argv: Vec<String> = if let Some(e) = &w.emulate {
            // SIGINT ends it right after the window; EMU_TAIL is the backstop should the runner die.
            let mut v = vec![rtslice.clone(), s("emulate"), s("--profile"), e.profile.clone(), s("--duration"), fmt_dur(total + EMU_TAIL), s("--json"), s("--quiet")];
            v.extend(e.args.iter().cloned());
            // Replicas draw their traffic (bursts) independently unless the file fixes a seed.
            if !e.args.iter().any(|a| a == "--seed") {
                v.extend([s("--seed"), (idx + 1).to_string()]);
            }
            if cell.strategy == Strategy::ClosedLoop {
                // The loop reads the misses the emulator reports (`env` execs: the PID stays).
                let mut with_env = vec![s("env"), format!("{}={}", rtslice_emu::REPORT_SOCKET_ENV, report_socket(&ctx.dir).display())];
                with_env.extend(v);
                v = with_env;
            }
            v
        } else if let Some(c) = &w.command {
            if w.role == Role::Neighbour {
                // Held stopped until the strategy is applied: a CPU hog running during apply made
                // it take minutes here, and its children (stress-ng forks workers) must be born
                // inside the cgroups apply puts the PID in. `exec` keeps the PID.
                let mut v = vec![s("sh"), s("-c"), s("kill -STOP $$; exec \"$@\""), s("sh")];
                v.extend(c.iter().cloned());
                v
            } else {
                c.clone()
            }
        } else if let Some(pg) = &w.ping {
            let (ns, target) = crate::netns::ping_target(ctx.rec.seq, idx)?;
            netns = Some(ns);
            let interval = pg.interval.as_deref().map(|i| rtslice_spec::units::parse_duration(i).unwrap_or(Duration::from_millis(10))).unwrap_or(Duration::from_millis(10));
            // Stopped after the window like the emulator; -D timestamps select the window's echoes.
            let deadline = (total + Duration::from_secs(300)).as_secs();
            vec![s("ping"), s("-n"), s("-D"), s("-i"), format!("{:.3}", interval.as_secs_f64()), s("-s"), pg.size.unwrap_or(56).to_string(), s("-w"), deadline.to_string(), target]
        } else if let Some(lg) = &w.loadgen {
            let port = 20000 + (ctx.rec.seq % 2000) * 8 + idx;
            let a = format!("127.0.0.1:{port}");
            let mut v = vec![rtslice.clone(), s("loadgen"), s("server"), s("--bind"), a.clone()];
            v.extend(lg.server_args.iter().cloned());
            addr = Some(a);
            v
        } else {
            return Err(format!("workload `{}` has nothing to run", w.name));
        };
        // Study C's OCI variants: the measured workload runs in a container (runc run, foreground).
        let container = match (&ctx.oci, w.role) {
            (Some(v), Role::Measured) => {
                let id = format!("rtsb-{}-{}-{idx}", std::process::id(), ctx.rec.seq);
                let c = crate::container::prepare(&ctx.dir, &id, &argv, v)?;
                ctx.rec.notes.push(format!("{} in runc container {id} (seccomp {}, network {})", p.name, v.seccomp, v.network));
                Some(c)
            }
            _ => None,
        };
        let argv = container.as_ref().map(|c| c.argv()).unwrap_or(argv);
        let proc = Proc::spawn(&p.name, &argv, &ctx.dir).inspect_err(|_| {
            if let Some(ns) = &netns {
                crate::netns::remove(ns);
            }
        })?;
        ctx.instances.push(Running { name: p.name.clone(), workload: w, proc, netns, addr, container, cpu_last: 0, switches_start: 0 });
    }
    // Threads of real stacks appear in the first few hundred ms; rules are applied to the threads
    // present when `apply` runs.
    if !nap(Duration::from_millis(400), &opt.stop) {
        return Ok(());
    }
    check_alive(ctx, "at start")?;
    for r in &ctx.instances {
        if r.workload.role == Role::Neighbour && r.workload.command.is_some() && !wait_stopped(r.proc.pid(), Duration::from_secs(5)) {
            return Err(format!("{} did not reach its stopped start state", r.name));
        }
    }
    if noise_before_plan(exp, cell) && !start_noise(ctx, cell, layout)? {
        return Ok(());
    }
    // 2-3. The strategy: plan (admission control, pure) then apply with the host backend.
    let pids: Vec<(String, u32)> = ctx.instances.iter().map(|r| (r.name.clone(), r.proc.pid())).collect();
    if let Some(spec) = specgen::spec_for(layout, &facts.cpus, &opt.steering, &|name| pids.iter().find(|(n, _)| n == name).map(|(_, p)| *p)) {
        let yaml = specgen::to_yaml(&spec)?;
        let path = ctx.dir.join("spec.yaml");
        std::fs::write(&path, &yaml).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        // Real-time threads the runner did not start as workloads (the interference, anything else
        // on the host) hold part of each CPU's cap: the planner takes them as facts.
        let ours: Vec<u32> = ctx.instances.iter().flat_map(|r| procfs_tree(r.proc.pid())).collect();
        let foreign_rt = rtslice_host::foreign::foreign_rt(rtslice_host::foreign::DEFAULT_WINDOW, &ours);
        for f in &foreign_rt {
            ctx.rec.notes.push(format!("foreign real-time bandwidth: {} holds {:.1}% of CPU(s) {:?}", f.source, f.per_cpu * 100.0, f.cpus));
        }
        // The facts `rtslice plan` and the node service plan from, with the foreign bandwidth only
        // this run can tell apart (it knows which threads are its own).
        let here = rtslice_host::facts::planning_facts().map_err(|e| format!("reading this host's facts for the planner: {e}"))?;
        let node_facts = rtslice_plan::NodeFacts { foreign_rt, ..here };
        let plan = rtslice_plan::plan(&spec, &node_facts);
        if !plan.all_admitted() {
            let why: Vec<String> = plan.rejected.iter().map(|r| format!("{}: {}", r.name, r.reason)).collect();
            let reason = format!("the planner rejected the {} layout: {}", cell.strategy, why.join("; "));
            ctx.refused = Some(reason.clone());
            return Err(reason);
        }
        // What the planner sized (the `slo` strategy), and where it put each reservation.
        for w in plan.workloads.iter().filter(|w| w.sizing.is_some() || layout.placements.iter().any(|p| p.name == w.name && p.planner_placed())) {
            if let rtslice_plan::Allocation::Reservation { reservation, .. } = &w.allocation {
                let sized = w.sizing.as_ref().map(|s| format!(", sized for its SLO: predicted miss ratio {:.2e}, budget utilisation {:.0}%", s.predicted_miss_ratio, s.utilization * 100.0)).unwrap_or_default();
                ctx.rec.notes.push(format!("{}: {:?} every {:?} on CPU {:?}{sized}", w.name, reservation.runtime, reservation.period, w.cpus));
            }
        }
        // The host backend in-process: apply is transactional (a failed step rolls back
        // everything it did) and journals into the bench's own state directory.
        let mut opts = rtslice_host::ApplyOptions::with_state_dir(&opt.state_dir);
        // SCHED_DEADLINE needs an exclusive partition; when a best-effort neighbour is meant to use
        // what the reservation leaves on the same CPUs (the frontier's question), RT group
        // throttling is the mechanism that allows it.
        let reserved: Vec<u32> = layout.placements.iter().filter(|p| p.reservation.is_some()).flat_map(|p| p.cpus.clone().unwrap_or_default()).collect();
        let shares_cpu = layout.placements.iter().any(|p| {
            p.role == Role::Neighbour && p.cpus.as_ref().is_none_or(|c| c.iter().any(|x| reserved.contains(x)))
        });
        // A reservation the planner places may land on any CPU, the neighbour's included.
        let floating = layout.placements.iter().any(|p| p.planner_placed());
        if (!reserved.is_empty() && shares_cpu) || floating {
            opts.mechanism = Some(rtslice_host::Mechanism::RtGroup);
            ctx.rec.notes.push("RT group throttling forced: the neighbour shares the reserved CPUs".into());
        }
        if let Some(m) = ctx.mechanism {
            opts.mechanism = Some(m);
            ctx.rec.notes.push(format!("mechanism {m} (the variant's)"));
        }
        // A reclaiming reservation's split follows each thread's measured use: the agent measures
        // and re-splits (as `rtslice apply` starts it for users). Reclaiming is the planner's
        // default for a reservation: every reservation not told otherwise gets the agent.
        if layout.placements.iter().any(|p| p.reservation.is_some() && p.reclaim != Some(false)) {
            opts.agent = Some(rtslice_host::AgentCommand::rtslice_binary(opt.rtslice.clone()));
        }
        if cell.strategy == Strategy::ClosedLoop {
            // The node service deploys it (admission one workload at a time, RT groups' global sum
            // included) and its loop adapts each reservation from the second reading on.
            let adapting = specgen::adapting(&spec, &plan, CLOSED_LOOP_INTERVAL)?;
            let yaml = specgen::to_yaml(&adapting)?;
            let path = ctx.dir.join("closed-loop.yaml");
            std::fs::write(&path, &yaml).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            let t = Instant::now();
            let node_dir = opt.state_dir.with_extension("closed-loop");
            let cl = crate::closed_loop::ClosedLoop::start(&adapting, &node_dir, &report_socket(&ctx.dir), opts.mechanism).map_err(|e| node_refusal(ctx, e))?;
            ctx.rec.notes.push(format!("closed loop: the node service deployed {} workload(s) in {} ms", adapting.workloads.len(), t.elapsed().as_millis()));
            ctx.closed_loop = Some(cl);
        } else if ctx.via == crate::experiment::Via::Node {
            // The spec as apply would get it, deployed by the node service one workload at a time
            // (its journal segments, its agent): the platform path, measured beside apply's.
            let t = Instant::now();
            let node_dir = opt.state_dir.with_extension("node");
            let node = crate::closed_loop::ClosedLoop::start(&spec, &node_dir, &report_socket(&ctx.dir), opts.mechanism).map_err(|e| node_refusal(ctx, e))?;
            // Its mechanism is the node's choice (HCBS > RT groups > SCHED_DEADLINE), which can
            // differ from apply's for the same spec: the report must say which one ran.
            ctx.rec.notes.push(format!(
                "via node: the node service deployed {} workload(s) in {} ms ({:?})",
                spec.workloads.len(),
                t.elapsed().as_millis(),
                node.mechanism().unwrap_or(rtslice_host::Mechanism::None)
            ));
            ctx.closed_loop = Some(node);
        } else {
        ctx.applied = true;
        let t_apply = Instant::now();
        // One retry: RT budget freed by the previous run's reset returns to the parent groups
        // asynchronously, and SCHED_DEADLINE bandwidth is released when the old tasks are gone.
        let applied = match rtslice_host::apply(&plan, rtslice_host::OciDefaults::default(), &opts) {
            Ok(a) => a,
            Err(first) => {
                nap(Duration::from_secs(1), &opt.stop);
                let a = rtslice_host::apply(&plan, rtslice_host::OciDefaults::default(), &opts).map_err(|e| {
                    let msg = format!("apply ({} layout), tried twice 1 s apart: {e} (first attempt: {first})", cell.strategy);
                    // The kernel's admission (or apply's own) said no before anything was touched.
                    if matches!(e, rtslice_host::HostError::Rejected(_)) {
                        ctx.refused = Some(msg.clone());
                    }
                    msg
                })?;
                ctx.rec.notes.push(format!("apply succeeded on the second attempt; the first failed: {first}"));
                a
            }
        };
        ctx.rec.notes.push(format!("apply took {} ms ({:?})", t_apply.elapsed().as_millis(), applied.mechanism));
        let mut record = serde_json::to_value(&applied).unwrap_or_default();
        match rtslice_host::status(&opts.state_dir) {
            Ok(st) => {
                if !st.drift.is_empty() {
                    ctx.rec.notes.push(format!("{} drift item(s) right after apply", st.drift.len()));
                }
                record["status"] = serde_json::to_value(&st).unwrap_or_default();
            }
            Err(e) => ctx.rec.notes.push(format!("status after apply: {e}")),
        }
        ctx.rec.applied = Some(record);
        }
    }
    for r in &ctx.instances {
        if r.workload.role == Role::Neighbour && r.workload.command.is_some() {
            r.proc.signal(crate::proc::Signal::Continue);
        }
    }
    // 4. Interference, after apply: the host's apply and reset journal with fsync, and an I/O
    //    stressor (study A's User set writes to disk) can stretch one fsync to a minute. Real-time
    //    noise started before the plan (it is what the planner must see).
    if ctx.noise.is_none() && !start_noise(ctx, cell, layout)? {
        return Ok(());
    }
    // 5. Warm-up (the time since the workloads started counts).
    let warm_left = exp.warmup.saturating_sub(Duration::from_millis(400) + if ctx.noise.is_some() { NOISE_SETTLE } else { Duration::ZERO });
    if !nap(warm_left, &opt.stop) {
        return Ok(());
    }
    check_alive(ctx, "after warm-up")?;
    // 6. Measurement window.
    measure(ctx, cell)
}

/// Starts the cell's interference (none for `idle`); false when asked to stop meanwhile.
fn start_noise(ctx: &mut RunCtx, cell: &Cell, layout: &Layout) -> Result<bool, String> {
    let exp = ctx.exp;
    let opt = ctx.opt;
    let rtslice = opt.rtslice.display().to_string();
    let block = &exp.blocks[cell.block];
    let scenario = &block.scenarios[cell.scenario];
    let noise_argv: Option<Vec<String>> = match &scenario.kind {
        ScenarioKind::Idle => None,
        ScenarioKind::Noise { kind, args } => {
            let mut v = vec![rtslice.clone(), s("noise"), kind.clone(), s("--quiet"), s("--json")];
            // The flood's veths live in namespaces of their own, out of reach of apply's RPS rules;
            // under IRQ-steering strategies the flood generator itself steers its receive softirq
            // to the strategy's IRQ CPU (study A's IA: the NIC's IRQs next to the non-RT threads).
            let irq_cpu = layout.placements.iter().find(|p| p.role == Role::Measured).and_then(|p| p.irq_cpu);
            if let (true, Some(cpu)) = (kind == "kernel" && !args.iter().any(|a| a == "--cpus"), irq_cpu) {
                v.extend([s("--cpus"), cpu.to_string()]);
                ctx.rec.notes.push(format!("flood softirq steered to CPU {cpu} (IRQ steering)"));
            }
            v.extend(args.iter().cloned());
            Some(v)
        }
        ScenarioKind::Command { argv } => Some(argv.clone()),
    };
    if let Some(argv) = noise_argv {
        let mut p = Proc::spawn("noise", &argv, &ctx.dir)?;
        if !nap(NOISE_SETTLE, &opt.stop) {
            ctx.noise = Some(p);
            return Ok(false);
        }
        if let Some(st) = p.poll() {
            if !st.success() {
                return Err(format!("interference `{}` stopped at start ({}): {}", scenario.name, p.describe_exit(), p.stderr_tail(6)));
            }
            ctx.rec.notes.push(format!("interference `{}` exited by itself at start ({})", scenario.name, p.describe_exit()));
        }
        ctx.noise = Some(p);
    }
    Ok(true)
}

/// Real-time interference runs before the plan: study B's question is whether a reservation holds
/// next to real-time tasks already running, and the planner must see their bandwidth to answer it.
fn noise_before_plan(exp: &Experiment, cell: &Cell) -> bool {
    matches!(&exp.blocks[cell.block].scenarios[cell.scenario].kind, ScenarioKind::Noise { kind, .. } if kind == "rt")
}

/// A process and its descendants (the workloads' own processes are not foreign).
fn procfs_tree(pid: u32) -> Vec<u32> {
    rtslice_sys::procfs::process_tree(pid)
}

/// True once the process is in the stopped state (`T` in /proc/PID/stat).
fn wait_stopped(pid: u32, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.rsplit(')').next().and_then(|r| r.split_whitespace().next()) == Some("T") {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

fn check_alive(ctx: &mut RunCtx, when: &str) -> Result<(), String> {
    for r in &mut ctx.instances {
        if let Some(_st) = r.proc.poll() {
            if r.workload.role == Role::Measured || !r.proc.poll().is_some_and(|s| s.success()) {
                return Err(format!("{} exited {when} ({}): {}", r.name, r.proc.describe_exit(), r.proc.stderr_tail(6)));
            }
        }
    }
    if let Some(n) = &mut ctx.noise {
        if let Some(st) = n.poll() {
            if !st.success() {
                return Err(format!("the interference generator exited {when} ({}): {}", n.describe_exit(), n.stderr_tail(6)));
            }
        }
    }
    Ok(())
}

fn measure(ctx: &mut RunCtx, _cell: &Cell) -> Result<(), String> {
    let exp = ctx.exp;
    let opt = ctx.opt;
    let rtslice = opt.rtslice.display().to_string();
    let window = exp.duration;
    // Tracers: one per measured process (the emulator or a command), for exactly the window.
    let mut tracers: Vec<(usize, Proc)> = vec![];
    if exp.wants("sched_latency") {
        for (i, r) in ctx.instances.iter().enumerate() {
            if r.workload.role == Role::Measured && (r.workload.emulate.is_some() || r.workload.command.is_some()) {
                let argv = vec![
                    rtslice.clone(),
                    s("trace"),
                    s("--pid"),
                    r.proc.pid().to_string(),
                    s("--duration"),
                    fmt_dur(window),
                    s("--json"),
                    s("--quiet"),
                ];
                tracers.push((i, Proc::spawn(&format!("trace-{}", r.name), &argv, &ctx.dir)?));
            }
        }
    }
    // Load generator clients, sized to the window.
    let mut clients: Vec<(usize, Proc, PathBuf)> = vec![];
    for (i, r) in ctx.instances.iter().enumerate() {
        if let (Some(lg), Some(addr)) = (&r.workload.loadgen, &r.addr) {
            let samples = ctx.dir.join(format!("{}-samples.csv", r.name));
            let mut argv = vec![rtslice.clone(), s("loadgen"), s("client"), s("--server"), addr.clone(), s("--samples-out"), samples.display().to_string(), s("--json")];
            let rate_args = lg.client_args.clone();
            if !rate_args.iter().any(|a| a == "--count") {
                // Enough requests to fill the window at the configured mean inter-arrival time.
                let mean = rate_args
                    .iter()
                    .position(|a| a == "--interarrival")
                    .and_then(|k| rate_args.get(k + 1))
                    .and_then(|d| d.rsplit(':').next().and_then(|x| rtslice_spec::units::parse_duration(x).ok()))
                    .unwrap_or(Duration::from_millis(1));
                let count = (window.as_secs_f64() / mean.as_secs_f64().max(1e-6)).max(10.0) as u64;
                argv.extend([s("--count"), count.to_string()]);
            }
            argv.extend(rate_args);
            clients.push((i, Proc::spawn(&format!("client-{}", r.name), &argv, &ctx.dir)?, samples));
        }
    }
    // CPU and context switches, sampled by the runner itself.
    let mut host_last = procfs::host_ticks();
    for r in &mut ctx.instances {
        r.cpu_last = procfs::tree_cpu_ns(r.proc.pid());
        r.switches_start = procfs::tree_switches(r.proc.pid());
    }
    let mut results: Vec<InstanceResult> =
        ctx.instances.iter().map(|r| {
            let mut ir = InstanceResult::new(&r.name, &r.workload.name, r.workload.role);
            ir.pid = Some(r.proc.pid());
            ir
        }).collect();
    let start = Instant::now();
    let start_unix = now_unix();
    let mut last = start;
    let mut last_switch_read: Vec<u64> = ctx.instances.iter().map(|r| r.switches_start).collect();
    let ncpu = procfs::host_facts().cpus.len().max(1) as f64;
    while start.elapsed() < window {
        let step = opt.sample_every.min(window.saturating_sub(start.elapsed()));
        if !nap(step, &opt.stop) {
            break;
        }
        let dt = last.elapsed().as_secs_f64();
        last = Instant::now();
        if dt < 0.05 {
            continue;
        }
        if let (Some((b0, t0)), Some((b1, t1))) = (host_last, procfs::host_ticks()) {
            if t1 > t0 {
                ctx.rec.host_cpu_samples.push((b1 - b0) as f64 / (t1 - t0) as f64 * ncpu);
            }
            host_last = Some((b1, t1));
        }
        for (k, r) in ctx.instances.iter_mut().enumerate() {
            if r.proc.poll().is_some() {
                continue;
            }
            let now = procfs::tree_cpu_ns(r.proc.pid());
            results[k].cpu_samples.push(now.saturating_sub(r.cpu_last) as f64 / 1e9 / dt);
            r.cpu_last = now;
            last_switch_read[k] = procfs::tree_switches(r.proc.pid()).max(last_switch_read[k]);
        }
    }
    let measured_ms = start.elapsed().as_secs_f64() * 1000.0;
    let window_unix = (start_unix, now_unix());
    for (k, r) in ctx.instances.iter_mut().enumerate() {
        if r.proc.poll().is_none() {
            last_switch_read[k] = procfs::tree_switches(r.proc.pid()).max(last_switch_read[k]);
        }
        results[k].switches_per_ms = Some(last_switch_read[k].saturating_sub(r.switches_start) as f64 / measured_ms.max(1.0));
    }
    let interrupted = opt.stop.load(Ordering::SeqCst);
    // Collect the tracers (they end with the window).
    for (i, mut t) in tracers {
        let st = if interrupted { t.stop(Duration::from_secs(3)) } else { t.wait_timeout(Duration::from_secs(20)) };
        match st {
            Some(s) if s.success() => match parse::trace(&t.stdout_text()) {
                Ok((threads, source)) => {
                    results[i].threads = threads;
                    results[i].trace_source = Some(source);
                }
                Err(e) => results[i].trace_source = Some(format!("unreadable trace: {e}")),
            },
            _ => {
                t.stop(Duration::from_secs(2));
                let msg = format!("trace failed ({}): {}", t.describe_exit(), t.stderr_tail(3));
                ctx.rec.notes.push(msg.clone());
                results[i].trace_source = Some(msg);
            }
        }
    }
    for (i, mut c, samples) in clients {
        let st = if interrupted { c.stop(Duration::from_secs(3)) } else { c.wait_timeout(window + Duration::from_secs(30)) };
        if st.is_none_or(|s| !s.success()) {
            c.stop(Duration::from_secs(2));
            return Err(format!("load generator client of {} failed ({}): {}", results[i].name, c.describe_exit(), c.stderr_tail(4)));
        }
        results[i].latency_samples_us = parse::loadgen_rtts_us(&std::fs::read_to_string(&samples).unwrap_or_default());
        results[i].extra = parse::last_json_object(&c.stdout_text()).unwrap_or_default();
    }
    // Workloads: emulators are told to end (SIGINT: each profile prints its summary and exits
    // within a second); the rest are stopped.
    for (k, r) in ctx.instances.iter_mut().enumerate() {
        let ir = &mut results[k];
        if r.workload.emulate.is_some() {
            r.proc.stop(Duration::from_secs(10));
            ir.exit_code = r.proc.poll().and_then(|s| s.code());
            match parse::emulator(&r.proc.stdout_text()) {
                Ok(e) => ir.emu = Some(e),
                Err(e) if !interrupted => {
                    ir.stderr_tail = r.proc.stderr_tail(6);
                    ctx.rec.instances = results;
                    return Err(format!("{}: {e} ({}): {}", r.name, r.proc.describe_exit(), r.proc.stderr_tail(6)));
                }
                Err(_) => {}
            }
        } else if r.workload.ping.is_some() {
            r.proc.stop(Duration::from_secs(2));
            ir.latency_samples_us = parse::ping_rtts_us(&r.proc.stdout_text(), Some(window_unix));
            if ir.latency_samples_us.is_empty() && !interrupted {
                ctx.rec.instances = results;
                return Err(format!("{}: ping got no replies ({}): {}", r.name, r.proc.describe_exit(), r.proc.stderr_tail(4)));
            }
        } else {
            r.proc.stop(Duration::from_secs(5));
            ir.exit_code = r.proc.poll().and_then(|s| s.code());
            let out = format!("{}\n{}", r.proc.stdout_text(), r.proc.stderr_text());
            match r.workload.output.as_deref() {
                Some("stress-ng") => ir.bogo_ops_per_s = parse::stress_ng_ops(&out),
                Some("json") => ir.extra = parse::last_json_object(&r.proc.stdout_text()).unwrap_or_default(),
                _ => {}
            }
            if r.workload.output.as_deref() == Some("stress-ng") && ir.bogo_ops_per_s.is_none() && !interrupted {
                ir.stderr_tail = r.proc.stderr_tail(6);
                ctx.rec.notes.push(format!("{}: no stress-ng metrics in its output (add --metrics-brief)", r.name));
            }
        }
    }
    ctx.rec.instances = results;
    Ok(())
}

/// Stops the workloads and the interference, then resets the host (with no I/O stressor running);
/// errors are added, never lost.
fn teardown(ctx: &mut RunCtx, errors: &mut Vec<String>) {
    // The closed loop's node first, while its workloads still run (its last decisions are read
    // from live threads; the node only attached them, so undoing it leaves them running).
    if let Some(cl) = ctx.closed_loop.take() {
        match cl.finish() {
            // A `via: node` cell's node has no loop to report on (its workloads do not adapt).
            Ok(_) if ctx.via == crate::experiment::Via::Node => {}
            Ok(decisions) => {
                let grown = decisions.iter().filter(|d| d.contains(": grown ")).count();
                let shrunk = decisions.iter().filter(|d| d.contains(": shrunk ")).count();
                let last = decisions.iter().filter(|d| d.contains(": last decision: ")).count();
                ctx.rec.notes.push(format!(
                    "closed loop: {grown} grow(s), {shrunk} shrink(s), {} refused or failed",
                    decisions.len() - grown - shrunk - last
                ));
                ctx.rec.notes.extend(decisions.into_iter().map(|d| format!("closed loop: {d}")));
            }
            Err(e) => errors.push(format!("the node service's workloads could not be undone: {e}")),
        }
    }
    for r in ctx.instances.iter_mut().rev() {
        r.proc.stop(Duration::from_secs(3));
    }
    if let Some(n) = &mut ctx.noise {
        if n.stop(Duration::from_secs(15)).is_none() {
            errors.push(format!("the interference generator did not stop: {}", n.stderr_tail(3)));
        }
        ctx.rec.interference = parse::last_json_object(&n.stdout_text());
    }
    if ctx.applied {
        if let Err(e) = reset(ctx.opt, &ctx.dir) {
            errors.push(format!("reset after the run failed, the host may keep this run's settings: {e}"));
        }
    }
    for r in ctx.instances.iter_mut() {
        if let Some(ns) = r.netns.take() {
            crate::netns::remove(&ns);
        }
        if let Some(c) = r.container.take() {
            c.remove();
        }
    }
}

/// Finds the rtslice binary: next to the running program, or on PATH.
pub fn find_rtslice() -> Result<PathBuf, BenchError> {
    if let Ok(p) = std::env::var("RTSLICE_BIN") {
        return Ok(PathBuf::from(p));
    }
    if let Ok(me) = std::env::current_exe() {
        if me.file_name().is_some_and(|n| n == "rtslice") {
            return Ok(me);
        }
        if let Some(dir) = me.parent() {
            for cand in [dir.join("rtslice"), dir.join("../rtslice")] {
                if cand.is_file() {
                    return Ok(cand);
                }
            }
        }
    }
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join("rtslice")).find(|p| p.is_file()))
        .ok_or_else(|| BenchError::NoBinary("set RTSLICE_BIN or build it with `cargo build --release -p rtslice`".into()))
}
