//! `rtslice bench`: run an experiment file (rtslice-bench) and write its results directory.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use anyhow::Context;
use rtslice_bench::report::{self, Item};
use rtslice_bench::runner::{self, Options};
use rtslice_bench::results::{Results, RunStatus};
use rtslice_bench::{Experiment, ExperimentError};
use rtslice_sys::lock::FileLock;

use super::{EXIT_FAILURE, EXIT_INVALID};

#[derive(clap::Args)]
pub struct Args {
    /// Experiment file (see examples/experiments/ and docs/bench.md)
    #[arg(required_unless_present = "render")]
    experiment: Option<PathBuf>,
    /// Results directory (default: results/<experiment name>)
    #[arg(long)]
    out: Option<PathBuf>,
    /// Shorten every cell to seconds (the file's `quick:` settings, or 3 s with 1 s warm-up, 1 repetition)
    #[arg(long)]
    quick: bool,
    /// Override the number of repetitions
    #[arg(long)]
    repetitions: Option<u32>,
    /// Override the measured duration of each run (e.g. 30s)
    #[arg(long)]
    duration: Option<String>,
    /// Print the cells and the run order, run nothing
    #[arg(long)]
    list: bool,
    /// Re-render report.md/report.html of an existing results directory from its results.json
    #[arg(long, value_name = "DIR", conflicts_with = "experiment")]
    render: Option<PathBuf>,
    #[command(flatten)]
    quiet: super::Quiet,
    // The results (results.json's content) instead of the headline tables.
    #[command(flatten)]
    json: super::Json,
}

/// Loads an experiment, reporting a bad file as invalid input (exit 2).
pub(crate) fn load(path: &std::path::Path) -> Result<Experiment, ExitCode> {
    Experiment::load(path).map_err(|e| {
        super::error(&e);
        match e {
            ExperimentError::Read { .. } => ExitCode::from(EXIT_INVALID),
            _ => ExitCode::from(EXIT_INVALID),
        }
    })
}

/// Holds the host-wide measurement lock (the one rtslice's kernel tests take) while measuring, so
/// two measurements never overlap on one machine.
pub(crate) struct MeasureLock {
    _lock: FileLock,
}

impl MeasureLock {
    pub(crate) fn acquire() -> anyhow::Result<MeasureLock> {
        let path = Path::new("/tmp/rtslice-kernel-tests.lock");
        let lock = match FileLock::try_exclusive(path).context("cannot take the measurement lock")? {
            Some(lock) => lock,
            None => {
                eprintln!("rtslice: another measurement or kernel test holds {}; waiting for it to finish…", path.display());
                FileLock::exclusive(path).context("cannot take the measurement lock")?
            }
        };
        Ok(MeasureLock { _lock: lock })
    }
}

/// Runs an experiment for `rtslice <who>` under the host-wide measurement lock, then prints its
/// headline table. Returns the results and how many runs failed; `None` when the runner itself
/// could not run (already said on stderr).
pub(crate) fn run_and_summarize(
    who: &str,
    exp: &Experiment,
    out: &Path,
    progress: bool,
    json: bool,
) -> anyhow::Result<Option<(Results, usize)>> {
    let rtslice = std::env::current_exe().context("cannot find the rtslice executable")?;
    let mut opt = Options::new(rtslice, out.to_path_buf());
    opt.progress = progress;
    install_ctrlc(&opt);
    let _lock = MeasureLock::acquire()?;
    let results = match runner::run(exp, &opt) {
        Ok(r) => r,
        Err(e) => {
            super::error(format_args!("{who}: {e}"));
            return Ok(None);
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        println!();
        print_headlines(&report::sections(&results));
    }
    let failed = results.runs.iter().filter(|r| matches!(r.status, RunStatus::Failed { .. })).count();
    Ok(Some((results, failed)))
}

pub(crate) fn install_ctrlc(opt: &Options) {
    let stop = opt.stop.clone();
    let _ = ctrlc::set_handler(move || {
        if stop.swap(true, Ordering::SeqCst) {
            eprintln!("\nrtslice: second Ctrl-C, exiting now (the current run's teardown is skipped)");
            std::process::exit(130);
        }
        eprintln!("\nrtslice: stopping after tearing down the current run; what was measured is kept (Ctrl-C again to quit at once)");
    });
}

/// Prints the headline tables (overview and frontier, when present) for the terminal.
pub(crate) fn print_headlines(sections: &[report::Section]) {
    for s in sections {
        for it in &s.items {
            if let Item::Table(t) = it {
                if s.id == "overview" || t.caption.starts_with("Efficiency frontier") {
                    println!("{}", report::terminal_table(t));
                }
            }
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(dir) = &args.render {
        let results = rtslice_bench::results::Results::load(dir).with_context(|| format!("cannot read {}/results.json", dir.display()))?;
        let sections = report::write(&results, dir).with_context(|| format!("cannot write the report into {}", dir.display()))?;
        print_headlines(&sections);
        println!("report: {}", dir.join("report.html").display());
        return Ok(ExitCode::SUCCESS);
    }
    let path = args.experiment.expect("clap requires an experiment unless --render");
    let mut exp = match load(&path) {
        Ok(e) => e,
        Err(code) => return Ok(code),
    };
    if args.quick {
        exp = exp.into_quick();
    }
    if let Some(r) = args.repetitions {
        if r == 0 {
            super::error("--repetitions must be at least 1");
            return Ok(ExitCode::from(EXIT_INVALID));
        }
        exp.repetitions = r;
    }
    if let Some(d) = &args.duration {
        match rtslice_spec::units::parse_duration(d) {
            Ok(d) if !d.is_zero() => exp.duration = d,
            _ => {
                super::error(format_args!("--duration `{d}` is not a duration above zero (write e.g. 30s)"));
                return Ok(ExitCode::from(EXIT_INVALID));
            }
        }
    }
    let cells = rtslice_bench::matrix::cells(&exp);
    let runs = cells.len() * exp.repetitions as usize;
    let per_run = exp.warmup + exp.duration;
    eprintln!(
        "rtslice bench: {} — {} cells × {} repetition(s) = {runs} runs of {:.0} s (+ set-up) ≈ {:.1} min",
        exp.name,
        cells.len(),
        exp.repetitions,
        per_run.as_secs_f64(),
        runs as f64 * (per_run.as_secs_f64() + 2.5) / 60.0
    );
    if args.list {
        for slot in rtslice_bench::matrix::schedule(cells.len(), exp.repetitions) {
            println!("{:4}  {}  #{}", slot.seq, cells[slot.cell].id, slot.repetition + 1);
        }
        return Ok(ExitCode::SUCCESS);
    }
    if cfg!(debug_assertions) {
        super::warning("this is a debug build; the emulator's compute is an order of magnitude slower than in a release build (cargo build --release -p rtslice)");
    }
    if !rtslice_sys::process::is_root() {
        super::warning("not root; strategies other than `none` and kernel interference will fail (run with sudo)");
    }
    let out = args.out.unwrap_or_else(|| PathBuf::from("results").join(&exp.name));
    let Some((results, failed)) = run_and_summarize("bench", &exp, &out, !args.quiet.quiet, args.json.json)? else {
        return Ok(ExitCode::from(EXIT_FAILURE));
    };
    // With --json stdout holds only the JSON; where the files are goes to stderr.
    let where_to = format!(
        "raw data: {}/results.json, runs.csv, threads.csv, samples.csv\nreport:   {}/report.md, {}/report.html",
        out.display(),
        out.display(),
        out.display()
    );
    if args.json.json {
        eprintln!("{where_to}");
    } else {
        println!("{where_to}");
    }
    if results.interrupted {
        println!("interrupted: {} of {runs} runs done", results.runs.len());
        return Ok(ExitCode::from(130));
    }
    let refused = results.runs.iter().filter(|r| matches!(r.status, RunStatus::Refused { .. })).count();
    if refused > 0 {
        println!("{refused} run(s) did not fit this host (refused by admission, nothing applied); the report lists why");
    }
    if failed > 0 {
        super::error(format_args!("{failed} run(s) failed; see the report's \"Failed and skipped runs\" section"));
        return Ok(ExitCode::from(EXIT_FAILURE));
    }
    Ok(ExitCode::SUCCESS)
}
