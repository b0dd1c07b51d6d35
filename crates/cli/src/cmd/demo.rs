//! `rtslice demo`: the showcase — a short version of study A's tables and of the efficiency
//! frontier on this machine, the headline table in the terminal and a self-contained report.html.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use rtslice_bench::report;
use rtslice_bench::runner::{self, Options};

use super::bench::{install_ctrlc, print_headlines, MeasureLock};
use super::EXIT_FAILURE;

#[derive(clap::Args)]
pub struct Args {
    /// Where to write the results and report.html
    #[arg(long, default_value = "results/demo")]
    out: PathBuf,
    /// No progress bar
    #[arg(long)]
    no_progress: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let exp = rtslice_bench::demo_experiment();
    let cells = rtslice_bench::matrix::cells(&exp).len();
    println!("rtslice demo: {} — {cells} runs of {} s each (about 2 minutes)", exp.title, (exp.warmup + exp.duration).as_secs());
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("rtslice demo: warning: not root; applying strategies and kernel interference need root (sudo make demo)");
    }
    let rtslice = std::env::current_exe().context("cannot find the rtslice executable")?;
    let mut opt = Options::new(rtslice, args.out.clone());
    opt.progress = !args.no_progress;
    install_ctrlc(&opt);
    let _lock = MeasureLock::acquire()?;
    let results = match runner::run(&exp, &opt) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rtslice demo: {e}");
            return Ok(ExitCode::from(EXIT_FAILURE));
        }
    };
    let sections = report::sections(&results);
    println!();
    print_headlines(&sections);
    let failed = results.runs.iter().filter(|r| matches!(r.status, rtslice_bench::results::RunStatus::Failed { .. })).count();
    if failed > 0 {
        println!("{failed} run(s) failed; the report lists why.");
    }
    let html = std::fs::canonicalize(args.out.join("report.html")).unwrap_or_else(|_| args.out.join("report.html"));
    println!("report: {}", html.display());
    Ok(if failed == results.runs.len() && failed > 0 { ExitCode::from(EXIT_FAILURE) } else { ExitCode::SUCCESS })
}
