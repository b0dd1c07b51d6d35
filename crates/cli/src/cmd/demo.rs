//! `rtslice demo`: the showcase — a short version of study A's tables and of the efficiency
//! frontier on this machine, the headline table in the terminal and a self-contained report.html.

use std::path::PathBuf;
use std::process::ExitCode;

use super::bench::run_and_summarize;
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
    if !rtslice_sys::process::is_root() {
        eprintln!("rtslice demo: warning: not root; applying strategies and kernel interference need root (sudo make demo)");
    }
    let Some((results, failed)) = run_and_summarize("demo", &exp, &args.out, !args.no_progress)? else {
        return Ok(ExitCode::from(EXIT_FAILURE));
    };
    if failed > 0 {
        println!("{failed} run(s) failed; the report lists why.");
    }
    let html = std::fs::canonicalize(args.out.join("report.html")).unwrap_or_else(|_| args.out.join("report.html"));
    println!("report: {}", html.display());
    Ok(if failed == results.runs.len() && failed > 0 { ExitCode::from(EXIT_FAILURE) } else { ExitCode::SUCCESS })
}
