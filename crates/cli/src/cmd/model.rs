//! `rtslice model`: predict, size, sweep and validate the reservation model (rtslice-model, study B).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use rtslice_model::{
    predict, processing_time, size, sweep_lambda, worst_case_response, worst_case_response_periodic, Link,
    ModelError, Network, Reservation, Scenario, ServiceModel, Target,
};
use serde::Serialize;

use super::EXIT_REJECTED;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Mean and φ-percentile of the round trip of a server under a (runtime, period) reservation
    Predict(PredictArgs),
    /// Smallest runtime for a period that keeps the mean or the φ-percentile under a target
    Size(SizeArgs),
    /// Run an experiment file (server under a reservation, open-loop client) and compare with the model
    Validate(ValidateArgs),
}

fn duration(s: &str) -> Result<Duration, String> {
    rtslice_spec::units::parse_duration(s).map_err(|e| e.to_string())
}

fn bitrate(s: &str) -> Result<f64, String> {
    rtslice_spec::units::parse_bitrate(s).map_err(|e| e.to_string())
}

fn bytes(s: &str) -> Result<u64, String> {
    rtslice_spec::units::parse_bytes(s).map_err(|e| e.to_string())
}

/// What the model needs besides the reservation.
#[derive(clap::Args)]
pub struct Inputs {
    /// λ, arrival rate in requests per second
    #[arg(long, value_name = "RATE")]
    lambda: f64,
    /// μ, service rate in requests per second on a whole CPU (1 / mean compute time)
    #[arg(long, value_name = "RATE")]
    mu: f64,
    /// P, the reservation period (e.g. `2ms`)
    #[arg(long, value_name = "DUR", value_parser = duration)]
    period: Duration,
    /// δ, one-way network latency (e.g. `181.5us`, what ping shows halved)
    #[arg(long, value_name = "DUR", value_parser = duration, default_value = "0s")]
    delay: Duration,
    /// σ, link bandwidth in bits per second (`10Mbit`): the network becomes a second M/M/1 queue
    #[arg(long, value_name = "BITS_PER_S", value_parser = bitrate, requires = "size")]
    bandwidth: Option<f64>,
    /// E[z], mean request size in bytes (with --bandwidth)
    #[arg(long, value_name = "BYTES", value_parser = bytes, requires = "bandwidth")]
    size: Option<u64>,
    /// φ, the percentile: `0.99` or `99%`
    #[arg(long, default_value = "0.99", value_parser = super::ratio)]
    phi: f64,
    /// Extension: service-time coefficient of variation for M/G/1 (1 = exponential = study B)
    #[arg(long, value_name = "CV")]
    cv: Option<f64>,
    #[command(flatten)]
    json: super::Json,
}

impl Inputs {
    fn scenario(&self) -> Scenario {
        Scenario {
            lambda: self.lambda,
            mu: self.mu,
            network: Network {
                one_way_delay_s: self.delay.as_secs_f64(),
                link: match (self.bandwidth, self.size) {
                    (Some(bw), Some(z)) => Some(Link { bandwidth_bps: bw, mean_request_bytes: z as f64 }),
                    _ => None,
                },
            },
            service: match self.cv {
                Some(cv) => ServiceModel::General { cv },
                None => ServiceModel::Exponential,
            },
        }
    }
}

#[derive(clap::Args)]
pub struct PredictArgs {
    #[command(flatten)]
    inputs: Inputs,
    /// Q, the reservation runtime per period (e.g. `1.4ms`)
    #[arg(long, value_name = "DUR", value_parser = duration)]
    runtime: Duration,
    /// Also show the processing time of one request of this much work (fluid value, bounds, worst cases)
    #[arg(long, value_name = "DUR", value_parser = duration)]
    work: Option<Duration>,
    /// Print a curve instead of one point: `lambda=FROM:TO:STEPS` (like study B's figures)
    #[arg(long, value_name = "lambda=FROM:TO:STEPS")]
    sweep: Option<String>,
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["target_mean", "target_percentile"])))]
pub struct SizeArgs {
    #[command(flatten)]
    inputs: Inputs,
    /// Keep the mean round trip at or under this
    #[arg(long, value_name = "DUR", value_parser = duration)]
    target_mean: Option<Duration>,
    /// Keep the φ-percentile of the round trip at or under this
    #[arg(long, value_name = "DUR", value_parser = duration)]
    target_percentile: Option<Duration>,
    /// Per-CPU bandwidth cap the reservation must fit under: `0.95` or `95%`
    #[arg(long, default_value = "0.95", value_parser = super::ratio)]
    cap: f64,
}

#[derive(clap::Args)]
pub struct ValidateArgs {
    /// Experiment file (YAML; see docs/model.md and examples in crates/bench/validation/)
    experiment: PathBuf,
    /// Few samples per point (the file's quickSamples): a smoke run, not a measurement
    #[arg(long)]
    quick: bool,
    /// Run with this mechanism instead of the file's (hcbs is not supported by validation)
    #[arg(long, value_enum)]
    mechanism: Option<super::MechanismArg>,
    /// Directory for the SVG plot, the JSON report and the Markdown table
    #[arg(long, default_value = "rtslice-validate")]
    out: PathBuf,
    /// SCHED_FIFO priority of the client's threads (0: leave them CFS)
    #[arg(long, default_value_t = 50)]
    client_fifo: i32,
    /// Switch the scheduler's high-resolution tick (HRTICK, HRTICK_DL) on or off for the run,
    /// restoring it afterwards (study B ran with it on)
    #[arg(long, value_name = "on|off")]
    hrtick: Option<OnOff>,
    #[command(flatten)]
    json: super::Json,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Predict(a) => run_predict(a),
        Command::Size(a) => run_size(a),
        Command::Validate(a) => run_validate(a),
    }
}

/// Input outside the model's domain: say which condition failed, exit 2.
fn invalid(e: ModelError) -> anyhow::Result<ExitCode> {
    super::invalid(e)
}

/// Checks a reservation given on the command line with the spec's own rules (period within the
/// kernel's range, runtime above 0 and at most the period), by handing it to the spec parser as a
/// one-workload spec: one set of limits and messages for a spec file and for these flags.
fn check_reservation(runtime: Option<Duration>, period: Duration) -> Result<(), String> {
    use rtslice_spec::units::format_duration;
    let text = format!(
        "apiVersion: rtslice/v1\nworkloads:\n  - name: model\n    demand:\n      reservation:\n        runtime: {}\n        period: {}\n",
        format_duration(runtime.unwrap_or(period)),
        format_duration(period)
    );
    match rtslice_spec::parse(&text, "command line") {
        Ok(_) => Ok(()),
        Err(errors) => Err(errors
            .iter()
            .map(|e| {
                let flag = if e.path.ends_with(".period") { "--period" } else { "--runtime" };
                format!("{flag}: {}", e.reason)
            })
            .collect::<Vec<_>>()
            .join("; ")),
    }
}

fn fmt_s(seconds: f64) -> String {
    rtslice_spec::units::format_duration(Duration::from_secs_f64(seconds.max(0.0)))
}

#[derive(Serialize)]
struct PredictOut {
    runtime_s: f64,
    period_s: f64,
    #[serde(flatten)]
    prediction: rtslice_model::Prediction,
    #[serde(skip_serializing_if = "Option::is_none")]
    processing: Option<ProcessingOut>,
}

#[derive(Serialize)]
struct ProcessingOut {
    work_s: f64,
    fluid_s: f64,
    lower_s: f64,
    upper_s: f64,
    /// Extension: ⌈C/Q⌉P for hard deadlines (CBS: fresh budget on arrival)
    worst_case_s: f64,
    /// Extension: periodic-resource bound (budget anywhere in the period, e.g. RT throttling)
    worst_case_periodic_s: f64,
}

fn parse_sweep(spec: &str) -> anyhow::Result<(f64, f64, usize)> {
    let bad = || anyhow::anyhow!("--sweep `{spec}`: write `lambda=FROM:TO:STEPS`, e.g. `lambda=100:1500:15`");
    let rest = spec.strip_prefix("lambda=").ok_or_else(bad)?;
    let parts: Vec<&str> = rest.split(':').collect();
    let [from, to, steps] = parts.as_slice() else { return Err(bad()) };
    Ok((from.parse().map_err(|_| bad())?, to.parse().map_err(|_| bad())?, steps.parse().map_err(|_| bad())?))
}

/// A duration the model computed, in µs (a tenth of a µs is the model's useful precision).
fn us(s: f64) -> String {
    format!("{:.1} µs", s * 1e6)
}

fn run_predict(a: PredictArgs) -> anyhow::Result<ExitCode> {
    if let Err(e) = check_reservation(Some(a.runtime), a.inputs.period) {
        return super::invalid(e);
    }
    let scenario = a.inputs.scenario();
    let reservation = match Reservation::new(a.runtime.as_secs_f64(), a.inputs.period.as_secs_f64()) {
        Ok(r) => r,
        Err(e) => return invalid(e),
    };
    let phi = a.inputs.phi;
    if let Some(spec) = &a.sweep {
        let (from, to, steps) = match parse_sweep(spec) {
            Ok(x) => x,
            Err(e) => return super::invalid(e),
        };
        let points = match sweep_lambda(&scenario, &reservation, phi, from, to, steps) {
            Ok(p) => p,
            Err(e) => return invalid(e),
        };
        if a.inputs.json.json {
            println!("{}", serde_json::to_string_pretty(&points)?);
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "# Q = {} every P = {} (Q/P = {:.3}), μ = {}/s; stable while λ < μQ/P = {:.1}/s",
            fmt_s(reservation.runtime_s),
            fmt_s(reservation.period_s),
            reservation.bandwidth(),
            a.inputs.mu,
            a.inputs.mu * reservation.bandwidth()
        );
        println!("{:>12} {:>8} {:>8} {:>14} {:>14}", "lambda(1/s)", "LD", "rho", "mean(us)", format!("p{}(us)", phi * 100.0));
        let max = points.iter().filter_map(|p| p.prediction.as_ref()).map(|p| p.percentile_s).fold(0.0, f64::max);
        for p in &points {
            match &p.prediction {
                Some(x) => {
                    // A bar of the percentile, so the knee towards instability shows in a terminal.
                    let bar = "#".repeat(((x.percentile_s / max) * 40.0).round() as usize);
                    println!(
                        "{:>12.1} {:>8.3} {:>8.3} {:>14.1} {:>14.1}  {bar}",
                        p.lambda,
                        p.lambda / a.inputs.mu,
                        x.utilization,
                        x.mean_s * 1e6,
                        x.percentile_s * 1e6
                    );
                }
                None => println!("{:>12.1} {:>8.3} {:>8} {:>14} {:>14}", p.lambda, p.lambda / a.inputs.mu, "-", "unstable", "unstable"),
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let prediction = match predict(&scenario, &reservation, phi) {
        Ok(p) => p,
        Err(e) => return invalid(e),
    };
    let processing = match a.work {
        None => None,
        Some(w) => {
            let c = w.as_secs_f64();
            let t = match processing_time(c, &reservation) {
                Ok(t) => t,
                Err(e) => return invalid(e),
            };
            Some(ProcessingOut {
                work_s: c,
                fluid_s: t.fluid_s,
                lower_s: t.lower_s,
                upper_s: t.upper_s,
                worst_case_s: worst_case_response(c, &reservation).map_err(anyhow::Error::from)?,
                worst_case_periodic_s: worst_case_response_periodic(c, &reservation).map_err(anyhow::Error::from)?,
            })
        }
    };
    let out = PredictOut { runtime_s: reservation.runtime_s, period_s: reservation.period_s, prediction, processing };
    if a.inputs.json.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    let p = &out.prediction;
    print_head(
        &p.model,
        "reservation: ",
        reservation.runtime_s,
        reservation.period_s,
        format_args!("(Q/P = {:.4}); μQ/P = {:.1}/s, ρ = λ/(μQ/P) = {:.4}", p.bandwidth, p.effective_rate, p.utilization),
    );
    println!("server:       mean {}", us(p.server_mean_s));
    if p.network_mean_s > 0.0 {
        println!("network:      mean queue {} + 2δ = {}", us(p.network_mean_s), us(2.0 * a.inputs.delay.as_secs_f64()));
    }
    println!("round trip:   mean {}", us(p.mean_s));
    println!(
        "              p{} {} ({})",
        p.phi * 100.0,
        us(p.percentile_s),
        match p.percentile_kind {
            rtslice_model::PercentileKind::Exact => "exact for the model",
            rtslice_model::PercentileKind::UpperBound => "upper bound",
            rtslice_model::PercentileKind::Approximation => "approximation",
        }
    );
    if let Some(t) = &out.processing {
        println!(
            "one request of {}: fluid {} (bounds {} .. {}); hard worst case ⌈C/Q⌉P = {}, periodic-resource {}",
            us(t.work_s),
            us(t.fluid_s),
            us(t.lower_s),
            us(t.upper_s),
            us(t.worst_case_s),
            us(t.worst_case_periodic_s)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The first two lines of `predict`'s and `size`'s reports: the model, then `label Q = … every P = …`
/// and what each adds about the reservation.
fn print_head(model: &impl std::fmt::Display, label: &str, runtime_s: f64, period_s: f64, detail: std::fmt::Arguments) {
    println!("model:        {model}");
    println!("{label} Q = {} every P = {} {detail}", fmt_s(runtime_s), fmt_s(period_s));
}

fn run_size(a: SizeArgs) -> anyhow::Result<ExitCode> {
    if let Err(e) = check_reservation(None, a.inputs.period) {
        return super::invalid(e);
    }
    let scenario = a.inputs.scenario();
    let target = match (a.target_mean, a.target_percentile) {
        (Some(t), _) => Target::Mean { value_s: t.as_secs_f64() },
        (None, Some(t)) => Target::Percentile { value_s: t.as_secs_f64() },
        (None, None) => unreachable!("clap requires one target"),
    };
    let sizing = match size(&scenario, a.inputs.period.as_secs_f64(), target, a.inputs.phi, a.cap) {
        Ok(s) => s,
        Err(e) => return invalid(e),
    };
    if a.inputs.json.json {
        println!("{}", serde_json::to_string_pretty(&sizing)?);
    } else {
        let p = &sizing.prediction;
        print_head(
            &p.model,
            "smallest reservation:",
            sizing.runtime_s,
            sizing.period_s,
            format_args!("(Q/P = {:.4}; exact minimum {:.6})", sizing.bandwidth, sizing.min_bandwidth),
        );
        println!("predicted:    mean {}, p{} {}", us(p.mean_s), p.phi * 100.0, us(p.percentile_s));
        println!(
            "margins:      {:.4} above the instability boundary λ/μ = {:.4}; {:.4} {} the per-CPU cap {:.4}",
            sizing.margin_to_instability,
            sizing.stability_bandwidth,
            sizing.margin_to_cap.abs(),
            if sizing.fits_cap { "under" } else { "OVER" },
            sizing.cap
        );
    }
    if !sizing.fits_cap {
        super::error(format_args!(
            "the reservation needs Q/P = {:.4}, more than the per-CPU cap {:.4}; it would be refused \
             (raise the target, lower the load, or split it over more CPUs)",
            sizing.bandwidth, sizing.cap
        ));
        return Ok(ExitCode::from(EXIT_REJECTED));
    }
    Ok(ExitCode::SUCCESS)
}

fn run_validate(a: ValidateArgs) -> anyhow::Result<ExitCode> {
    use rtslice_bench::validation::{
        mechanism_label, validate, HostLauncher, Launcher, PlainLauncher, ValidateOptions, ValidationExperiment,
    };
    use rtslice_host::Mechanism;

    let text = std::fs::read_to_string(&a.experiment)
        .with_context(|| format!("cannot read experiment file {}", a.experiment.display()))?;
    let mut exp = match ValidationExperiment::parse(&text, &a.experiment.display().to_string()) {
        Ok(e) => e,
        Err(e) => return super::invalid(e),
    };
    if let Some(m) = a.mechanism {
        exp.mechanism = match m {
            super::MechanismArg::Deadline => Mechanism::Deadline,
            super::MechanismArg::RtGroup => Mechanism::RtGroup,
            super::MechanismArg::None => Mechanism::None,
            super::MechanismArg::Hcbs => {
                return super::invalid("--mechanism hcbs: validation runs deadline, rt_group or none")
            }
        };
    }
    if !rtslice_loadgen::is_root() {
        anyhow::bail!("validation creates network namespaces and reservations: run it as root (sudo)");
    }
    let exe = std::env::current_exe().context("cannot find the rtslice executable to start the server")?;
    let opts = ValidateOptions {
        quick: a.quick,
        server_command: vec![exe.display().to_string(), "loadgen".into(), "server".into()],
        client_fifo: (a.client_fifo > 0).then_some(a.client_fifo),
        tag: format!("v{}", std::process::id() % 1_000_000),
        hrtick: a.hrtick.map(|h| matches!(h, OnOff::On)),
        kernel_lock: true,
    };
    let launcher: Box<dyn Launcher> = match exp.mechanism {
        Mechanism::None => Box::new(PlainLauncher),
        _ => Box::new(HostLauncher::new(&opts.tag)),
    };
    eprintln!(
        "rtslice model validate: {} — LD {}, Q/P {}, P {:?}, {}, {} points × {} samples",
        exp.name,
        exp.load,
        exp.bandwidth,
        exp.period,
        // The experiment file's `rt-group` printed as everywhere else on the command line (`rt_group`).
        exp.mechanism,
        exp.interarrival.len(),
        if a.quick { exp.quick_samples } else { exp.samples }
    );
    let report = validate(&exp, &opts, &*launcher, &mut |line| eprintln!("  {line}"))?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("cannot create {}", a.out.display()))?;
    let stem = match a.hrtick {
        None => format!("{}-{}", exp.name, mechanism_label(exp.mechanism)),
        Some(OnOff::On) => format!("{}-{}-hrtick", exp.name, mechanism_label(exp.mechanism)),
        Some(OnOff::Off) => format!("{}-{}-nohrtick", exp.name, mechanism_label(exp.mechanism)),
    };
    let svg = a.out.join(format!("{stem}.svg"));
    rtslice_bench::validation::write_svg(&report, &svg)?;
    let json = serde_json::to_string_pretty(&report)?;
    std::fs::write(a.out.join(format!("{stem}.json")), &json).context("cannot write the JSON report")?;
    if let Some(spec) = &report.reservation_spec {
        std::fs::write(a.out.join(format!("{stem}.spec.yaml")), spec).context("cannot write the applied spec")?;
    }
    let md = report.to_markdown();
    std::fs::write(a.out.join(format!("{stem}.md")), &md).context("cannot write the Markdown report")?;
    if a.json.json {
        println!("{json}");
    } else {
        println!("{md}");
    }
    eprintln!("rtslice model validate: wrote {} (plot), {stem}.json and {stem}.md", svg.display());
    Ok(ExitCode::SUCCESS)
}
