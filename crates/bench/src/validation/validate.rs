//! `rtslice model validate`: run an [`ValidationExperiment`] — server under a reservation in one network
//! namespace, open-loop client in another — and compare mean and p99 with the model point by point.

use std::net::{SocketAddr, SocketAddrV4};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rtslice_model::{predict_bandwidth, Accuracy, Link, Network, Scenario, ServiceModel};
use serde::Serialize;

use rtslice_loadgen::client::{self, ClientConfig};
use rtslice_loadgen::dist::Dist;
use rtslice_host::Mechanism;

use super::experiment::{mechanism_label, ValidationExperiment, Shape};
use rtslice_loadgen::netns::{NetnsPair, Shaping};
use rtslice_loadgen::stats::RttSummary;
use super::{Result, ValidationError};

/// Port the server listens on inside its namespace (the namespace is ours alone).
pub const SERVER_PORT: u16 = 7013;

/// A server process started under some reservation; stopping it undoes the reservation.
pub trait RunningServer {
    /// The server's main pid.
    fn pid(&self) -> u32;
    /// One line for the report: what reservation the server got and through what.
    fn describe(&self) -> String;
    /// CPUs the server's reservation is on (empty: anywhere); the client keeps off them.
    fn cpus(&self) -> Vec<u32> {
        Vec::new()
    }
    /// The rtslice spec that made the reservation, if one did.
    fn spec(&self) -> Option<String> {
        None
    }
    /// Stops the server and undoes what was applied. Also called from Drop by implementors.
    fn stop(&mut self) -> Result<()>;
}

/// Starts `command` (the server, already told its namespace and address) under the experiment's
/// reservation. [`PlainLauncher`] handles `mechanism: none`; rtslice's apply machinery does the rest.
pub trait Launcher {
    fn launch(&self, exp: &ValidationExperiment, command: &[String]) -> Result<Box<dyn RunningServer>>;
}

/// No reservation: the server as an ordinary CFS process.
pub struct PlainLauncher;

struct PlainServer {
    child: Child,
}

impl RunningServer for PlainServer {
    fn pid(&self) -> u32 {
        self.child.id()
    }
    fn describe(&self) -> String {
        "no reservation (SCHED_OTHER/CFS)".into()
    }
    fn stop(&mut self) -> Result<()> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        Ok(())
    }
}

impl Drop for PlainServer {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

impl Launcher for PlainLauncher {
    fn launch(&self, exp: &ValidationExperiment, command: &[String]) -> Result<Box<dyn RunningServer>> {
        if exp.mechanism != Mechanism::None {
            return Err(ValidationError::Reservation(format!(
                "the plain launcher cannot give mechanism `{}`; use rtslice's host launcher",
                mechanism_label(exp.mechanism)
            )));
        }
        let child = spawn(command)?;
        Ok(Box::new(PlainServer { child }))
    }
}

/// Spawns `command` with stdin closed and output inherited (the server logs its calibration).
pub fn spawn(command: &[String]) -> Result<Child> {
    let (prog, args) = command.split_first().ok_or_else(|| ValidationError::Invalid("empty server command".into()))?;
    Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .spawn()
        .map_err(|source| rtslice_loadgen::LoadgenError::Io { what: format!("cannot start the loadgen server `{}`", command.join(" ")), source }.into())
}

pub struct ValidateOptions {
    /// Use `quickSamples` instead of `samples` per point.
    pub quick: bool,
    /// Program and leading arguments that start a loadgen server, e.g. `[rtslice, loadgen, server]`;
    /// `--netns`, `--bind` and `--protocol` are appended.
    pub server_command: Vec<String>,
    /// SCHED_FIFO priority of the client's threads (None: CFS).
    pub client_fifo: Option<i32>,
    /// Tag for namespace names (unique per concurrent run).
    pub tag: String,
    /// Switch the scheduler's HRTICK/HRTICK_DL features for the run (None: leave them as they are).
    pub hrtick: Option<bool>,
    /// Take the host-wide lock the test suites use for timing-sensitive and kernel-global work
    /// (`/tmp/rtslice-kernel-tests.lock`) for the whole run. Off when the caller already holds it.
    pub kernel_lock: bool,
}

/// The host-wide measurement lock shared with rtslice's test suites (see crates/testkit).
pub struct KernelLock {
    _lock: rtslice_sys::lock::FileLock,
}

impl KernelLock {
    pub const PATH: &'static str = "/tmp/rtslice-kernel-tests.lock";

    pub fn acquire() -> Result<KernelLock> {
        let lock = rtslice_sys::lock::FileLock::exclusive(std::path::Path::new(Self::PATH))?;
        Ok(KernelLock { _lock: lock })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PointResult {
    pub interarrival_s: f64,
    pub lambda: f64,
    pub mu: f64,
    pub mean_compute_s: f64,
    pub measured: RttSummary,
    pub sent: usize,
    pub lost: usize,
    pub max_send_lag_s: f64,
    pub model_mean_s: f64,
    pub model_percentile_s: f64,
    pub measured_percentile_s: f64,
    pub mean_error_pct: f64,
    pub percentile_error_pct: f64,
    /// Server CPU per request beyond the requested work (receive, reply), measured in this point.
    pub server_overhead_s: Option<f64>,
    /// The model with that overhead added to every request's service time (and taken out of δ);
    /// None when the overhead makes the point unstable (λ ≥ μ'Q/P).
    pub corrected_mean_s: Option<f64>,
    pub corrected_percentile_s: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ValidationReport {
    pub experiment: ValidationExperiment,
    pub quick: bool,
    pub reservation: String,
    /// The rtslice spec applied to give the server its reservation.
    pub reservation_spec: Option<String>,
    pub model: String,
    /// δ, measured as half the median round trip of zero-work requests through the same path.
    pub one_way_delay_s: f64,
    pub probe: RttSummary,
    pub points: Vec<PointResult>,
    pub accuracy: Accuracy,
    /// Server overhead of the zero-work probe requests, and δ with it taken out (for the corrected model).
    pub probe_overhead_s: Option<f64>,
    pub corrected_one_way_delay_s: f64,
    /// Accuracy of the overhead-corrected model over the points where it is stable, and how many.
    pub corrected_accuracy: Option<Accuracy>,
    pub corrected_points: usize,
    pub host: HostNotes,
    pub wall_s: f64,
}

/// What about this host bears on the model's accuracy.
#[derive(Debug, Clone, Serialize)]
pub struct HostNotes {
    pub kernel: String,
    /// `HRTICK` in /sys/kernel/debug/sched/features: Some(true) on, Some(false) off, None unreadable.
    pub hrtick: Option<bool>,
    pub hrtick_dl: Option<bool>,
    pub online_cpus: usize,
}

pub fn host_notes() -> HostNotes {
    let (hrtick, hrtick_dl) = rtslice_loadgen::hrtick::read();
    HostNotes {
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string(),
        hrtick,
        hrtick_dl,
        online_cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
    }
}

/// The model's scenario for one point of the sweep.
pub fn scenario(exp: &ValidationExperiment, interarrival: Duration, one_way_delay_s: f64) -> Scenario {
    let lambda = 1.0 / interarrival.as_secs_f64();
    let mu = lambda / exp.load;
    let service = match exp.compute {
        Shape::Exponential => ServiceModel::Exponential,
        Shape::Constant => ServiceModel::General { cv: 0.0 },
        Shape::Uniform => ServiceModel::General { cv: 1.0 / 3f64.sqrt() },
    };
    let link = exp.link_bandwidth_bps.map(|bw| Link { bandwidth_bps: bw, mean_request_bytes: exp.request_bytes as f64 });
    Scenario { lambda, mu, network: Network { one_way_delay_s, link }, service }
}

#[allow(clippy::too_many_arguments)]
fn client_config(
    exp: &ValidationExperiment,
    server: SocketAddr,
    ns: &str,
    ia: Dist,
    compute: Dist,
    count: usize,
    seed: u64,
    fifo: Option<i32>,
    cpus: &Option<Vec<u32>>,
) -> ClientConfig {
    ClientConfig {
        server,
        protocol: exp.protocol,
        interarrival: ia,
        compute,
        request_bytes: exp.request_bytes,
        reply_bytes: exp.reply_bytes,
        count,
        seed,
        drain: Duration::from_secs(2),
        fifo_priority: fifo,
        netns: Some(ns.to_string()),
        cpus: cpus.clone(),
    }
}

/// Runs the whole experiment. `progress` gets one line per step.
pub fn validate(exp: &ValidationExperiment, opts: &ValidateOptions, launcher: &dyn Launcher, progress: &mut dyn FnMut(&str)) -> Result<ValidationReport> {
    let _lock = if opts.kernel_lock {
        progress(&format!("waiting for the host-wide measurement lock {}", KernelLock::PATH));
        Some(KernelLock::acquire()?)
    } else {
        None
    };
    let started = Instant::now();
    // Make the features readable for the report even when not switching them.
    let _ = rtslice_loadgen::hrtick::ensure_debugfs();
    let _hrtick = opts.hrtick.map(rtslice_loadgen::hrtick::HrtickGuard::set).transpose()?;
    let shaping = exp.link_bandwidth_bps.map(|rate_bps| Shaping { rate_bps });
    let pair = NetnsPair::create(&opts.tag, shaping)?;
    let server_addr = SocketAddr::V4(SocketAddrV4::new(pair.server_addr, SERVER_PORT));
    let mut command = opts.server_command.clone();
    command.extend([
        "--netns".to_string(),
        pair.server_ns.clone(),
        "--bind".to_string(),
        server_addr.to_string(),
        "--protocol".to_string(),
        exp.protocol.to_string(),
    ]);
    progress(&format!("namespaces {} / {} ready; starting the server: {}", pair.server_ns, pair.client_ns, command.join(" ")));
    let mut server = launcher.launch(exp, &command)?;
    let result = run_points(exp, opts, &pair, server_addr, &mut *server, progress);
    let stopped = server.stop();
    drop(server);
    drop(pair);
    let (probe, one_way_delay_s, points, reservation, reservation_spec, probe_overhead_s, corrected_one_way_delay_s) = result?;
    stopped?;

    let col = |f: &dyn Fn(&PointResult) -> f64| points.iter().map(f).collect::<Vec<f64>>();
    let accuracy = Accuracy::from_points(
        &col(&|p| p.measured.mean_s),
        &col(&|p| p.model_mean_s),
        &col(&|p| p.measured_percentile_s),
        &col(&|p| p.model_percentile_s),
    )
    .ok_or_else(|| ValidationError::Invalid("no point produced a measurement".into()))?;
    let stable: Vec<&PointResult> = points.iter().filter(|p| p.corrected_mean_s.is_some()).collect();
    let ccol = |f: &dyn Fn(&PointResult) -> f64| stable.iter().map(|p| f(p)).collect::<Vec<f64>>();
    let corrected_accuracy = Accuracy::from_points(
        &ccol(&|p| p.measured.mean_s),
        &ccol(&|p| p.corrected_mean_s.unwrap_or(f64::NAN)),
        &ccol(&|p| p.measured_percentile_s),
        &ccol(&|p| p.corrected_percentile_s.unwrap_or(f64::NAN)),
    );
    let model = predict_bandwidth(&scenario(exp, exp.interarrival[0], one_way_delay_s), exp.bandwidth, exp.phi)?.model.to_string();
    // Read while the run's setting is still in force.
    let host = host_notes();
    Ok(ValidationReport {
        experiment: exp.clone(),
        quick: opts.quick,
        reservation,
        reservation_spec,
        model,
        one_way_delay_s,
        probe,
        corrected_points: stable.len(),
        points,
        accuracy,
        probe_overhead_s,
        corrected_one_way_delay_s,
        corrected_accuracy,
        host,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

type PointsOutcome = (RttSummary, f64, Vec<PointResult>, String, Option<String>, Option<f64>, f64);

fn run_points(
    exp: &ValidationExperiment,
    opts: &ValidateOptions,
    pair: &NetnsPair,
    server: SocketAddr,
    running: &mut dyn RunningServer,
    progress: &mut dyn FnMut(&str),
) -> Result<PointsOutcome> {
    let ns = pair.client_ns.as_str();
    // Wait for the server to answer (it calibrates its loop first).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let cfg = client_config(exp, server, ns, Dist::Constant(Duration::ZERO), Dist::Constant(Duration::ZERO), 1, 0, None, &None);
        let cfg = ClientConfig { drain: Duration::from_millis(300), ..cfg };
        if client::run(&cfg).is_ok_and(|r| !r.samples.is_empty()) {
            break;
        }
        if Instant::now() > deadline {
            return Err(ValidationError::Invalid(format!(
                "the loadgen server (pid {}) did not answer at {server} within 15 s; see its output above",
                running.pid()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let reservation = running.describe();
    // The client keeps off the reserved CPU, so it never steals from (or waits behind) the server.
    let server_cpus = running.cpus();
    let client_cpus: Option<Vec<u32>> = if server_cpus.is_empty() {
        None
    } else {
        let online = std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1);
        let rest: Vec<u32> = (0..online).filter(|c| !server_cpus.contains(c)).collect();
        (!rest.is_empty()).then_some(rest)
    };
    progress(&format!("server pid {} answers; reservation: {reservation}", running.pid()));

    // δ the way study B got it from ping, but through the loadgen's own path: zero-work requests
    // spaced far apart, half the median round trip.
    let probe_cfg = client_config(
        exp,
        server,
        ns,
        Dist::Constant(Duration::from_millis(2)),
        Dist::Constant(Duration::ZERO),
        if opts.quick { 100 } else { 500 },
        exp.seed ^ 0xD17A,
        opts.client_fifo,
        &client_cpus,
    );
    let probe_run = client::run(&probe_cfg)?;
    let probe = RttSummary::of(&probe_run.rtts_s())
        .ok_or_else(|| ValidationError::Invalid("no reply to the delay probe".into()))?;
    let one_way_delay_s = probe.p50_s / 2.0;
    let probe_overhead_s = probe_run.server_overhead_s();
    let corrected_one_way_delay_s = ((probe.p50_s - probe_overhead_s.unwrap_or(0.0)) / 2.0).max(0.0);
    progress(&format!(
        "delay probe: RTT min {:.1} / median {:.1} / mean {:.1} / max {:.1} µs → δ = {:.1} µs",
        probe.min_s * 1e6,
        probe.p50_s * 1e6,
        probe.mean_s * 1e6,
        probe.max_s * 1e6,
        one_way_delay_s * 1e6
    ));

    let per_point = if opts.quick { exp.quick_samples } else { exp.samples };
    let warmup = exp.warmup.min(per_point);
    let mut points = Vec::new();
    for (i, &ia) in exp.interarrival.iter().enumerate() {
        let sc = scenario(exp, ia, one_way_delay_s);
        let pred = predict_bandwidth(&sc, exp.bandwidth, exp.phi)?;
        let cfg = client_config(
            exp,
            server,
            ns,
            Dist::Exponential { mean: ia },
            exp.compute_dist(ia),
            per_point + warmup,
            exp.seed.wrapping_add(i as u64),
            opts.client_fifo,
            &client_cpus,
        );
        let run = client::run(&cfg)?;
        let rtts: Vec<f64> = run.samples.iter().filter(|s| s.id as usize >= warmup).map(|s| s.rtt_s).collect();
        let measured = RttSummary::of(&rtts).ok_or_else(|| {
            ValidationError::Invalid(format!("no replies at inter-arrival {ia:?}: is the server still running (pid {})?", running.pid()))
        })?;
        let measured_percentile_s = RttSummary::percentile(&rtts, exp.phi);
        // The same model with the measured per-request overhead added to the service time.
        let server_overhead_s = run.server_overhead_s();
        let corrected = server_overhead_s.and_then(|o| {
            let mut c = scenario(exp, ia, corrected_one_way_delay_s);
            c.mu = 1.0 / (1.0 / c.mu + o);
            predict_bandwidth(&c, exp.bandwidth, exp.phi).ok()
        });
        let p = PointResult {
            interarrival_s: ia.as_secs_f64(),
            lambda: sc.lambda,
            mu: sc.mu,
            mean_compute_s: 1.0 / sc.mu,
            measured,
            sent: run.sent,
            lost: run.lost,
            max_send_lag_s: run.max_send_lag_s,
            model_mean_s: pred.mean_s,
            model_percentile_s: pred.percentile_s,
            measured_percentile_s,
            mean_error_pct: 100.0 * (pred.mean_s - measured.mean_s) / measured.mean_s,
            percentile_error_pct: 100.0 * (pred.percentile_s - measured_percentile_s) / measured_percentile_s,
            server_overhead_s,
            corrected_mean_s: corrected.as_ref().map(|c| c.mean_s),
            corrected_percentile_s: corrected.as_ref().map(|c| c.percentile_s),
        };
        progress(&format!(
            "T = {:>7.1} µs (λ = {:>7.1}/s, C̄ = {:>6.1} µs): mean {:>8.1} µs (model {:>8.1}, {:+.1}%), p{} {:>8.1} µs (model {:>8.1}, {:+.1}%), {} lost, overhead {:.1} µs/req → model+o mean {}, p99 {}",
            ia.as_secs_f64() * 1e6,
            sc.lambda,
            1e6 / sc.mu,
            measured.mean_s * 1e6,
            pred.mean_s * 1e6,
            p.mean_error_pct,
            exp.phi * 100.0,
            measured_percentile_s * 1e6,
            pred.percentile_s * 1e6,
            p.percentile_error_pct,
            run.lost,
            server_overhead_s.unwrap_or(f64::NAN) * 1e6,
            p.corrected_mean_s.map_or("unstable".to_string(), |v| format!("{:.1}", v * 1e6)),
            p.corrected_percentile_s.map_or("unstable".to_string(), |v| format!("{:.1}", v * 1e6)),
        ));
        points.push(p);
    }
    Ok((probe, one_way_delay_s, points, reservation, running.spec(), probe_overhead_s, corrected_one_way_delay_s))
}

impl ValidationReport {
    /// Study B's Table 3 row for this run, then the per-point detail, as Markdown.
    pub fn to_markdown(&self) -> String {
        let e = &self.experiment;
        let a = &self.accuracy;
        let pct = e.phi * 100.0;
        let mut s = String::new();
        s += &format!(
            "### {} — {} ({} samples/point{})\n\n",
            e.name,
            mechanism_label(e.mechanism),
            if self.quick { e.quick_samples } else { e.samples },
            if self.quick { ", quick" } else { "" }
        );
        s += &format!(
            "reservation: {}; model: {}; δ = {:.1} µs (half the median zero-work round trip; {:.1} µs without the server's overhead)\n\n",
            self.reservation,
            self.model,
            self.one_way_delay_s * 1e6,
            self.corrected_one_way_delay_s * 1e6
        );
        s += &format!("| request size (B) | load LD | Q/P | mechanism | mean RMSE (µs) | mean MAPE | p{pct} RMSE (µs) | p{pct} MAPE |\n");
        s += "|---|---|---|---|---|---|---|---|\n";
        s += &format!(
            "| {} | {} | {} | {} | {:.1} | {:.2}% | {:.1} | {:.2}% |\n",
            e.request_bytes, e.load, e.bandwidth, mechanism_label(e.mechanism), a.mean_rmse_us, a.mean_mape_pct, a.pct_rmse_us, a.pct_mape_pct
        );
        match &self.corrected_accuracy {
            Some(c) => {
                s += &format!(
                    "| {} | {} | {} | {} + measured overhead ({} of {} points stable) | {:.1} | {:.2}% | {:.1} | {:.2}% |\n\n",
                    e.request_bytes,
                    e.load,
                    e.bandwidth,
                    mechanism_label(e.mechanism),
                    self.corrected_points,
                    self.points.len(),
                    c.mean_rmse_us,
                    c.mean_mape_pct,
                    c.pct_rmse_us,
                    c.pct_mape_pct
                );
            }
            None => s += "\n",
        }
        s += &format!(
            "| T (µs) | λ (1/s) | C̄ (µs) | mean (µs) | model mean | err | p{pct} (µs) | model p{pct} | err | max (µs) | lost | overhead (µs) | model+o mean | model+o p{pct} |\n"
        );
        s += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
        for p in &self.points {
            s += &format!(
                "| {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {:+.1}% | {:.1} | {:.1} | {:+.1}% | {:.0} | {} | {:.1} | {} | {} |\n",
                p.interarrival_s * 1e6,
                p.lambda,
                p.mean_compute_s * 1e6,
                p.measured.mean_s * 1e6,
                p.model_mean_s * 1e6,
                p.mean_error_pct,
                p.measured_percentile_s * 1e6,
                p.model_percentile_s * 1e6,
                p.percentile_error_pct,
                p.measured.max_s * 1e6,
                p.lost,
                p.server_overhead_s.unwrap_or(f64::NAN) * 1e6,
                p.corrected_mean_s.map_or("unstable".to_string(), |v| format!("{:.1}", v * 1e6)),
                p.corrected_percentile_s.map_or("unstable".to_string(), |v| format!("{:.1}", v * 1e6)),
            );
        }
        let h = &self.host;
        let flag = |v: Option<bool>| match v {
            Some(true) => "on",
            Some(false) => "off",
            None => "unknown",
        };
        s += &format!(
            "\nhost: Linux {}, {} CPUs, HRTICK {}, HRTICK_DL {}; wall time {:.0} s\n",
            h.kernel,
            h.online_cpus,
            flag(h.hrtick),
            flag(h.hrtick_dl),
            self.wall_s
        );
        s
    }
}
