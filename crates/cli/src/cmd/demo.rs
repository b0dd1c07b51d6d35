//! `rtslice demo`: the showcase — a short version of study A's tables and of the density at an SLO
//! (with its efficiency frontier) on this machine, the headline table in the terminal and a
//! self-contained report.html.

use std::path::PathBuf;
use std::process::ExitCode;

use super::bench::run_and_summarize;
use super::EXIT_FAILURE;

#[derive(clap::Args)]
pub struct Args {
    /// Where to write the results and report.html
    #[arg(long, default_value = "results/demo")]
    out: PathBuf,
    #[command(flatten)]
    quiet: super::Quiet,
    // The results instead of the headline table.
    #[command(flatten)]
    json: super::Json,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let exp = rtslice_bench::demo_experiment();
    let cells = rtslice_bench::matrix::cells(&exp).len();
    // With --json stdout holds only the results; these lines go to stderr.
    let say = |line: String| if args.json.json { eprintln!("{line}") } else { println!("{line}") };
    say(format!("rtslice demo: {} — {cells} runs of {} s each (about 2.5 minutes)", exp.title, (exp.warmup + exp.duration).as_secs()));
    if !rtslice_sys::process::is_root() {
        super::warning("not root; applying strategies and kernel interference need root (sudo make demo)");
    }
    let Some((results, failed)) = run_and_summarize("demo", &exp, &args.out, !args.quiet.quiet, args.json.json)? else {
        return Ok(ExitCode::from(EXIT_FAILURE));
    };
    let refused = results.runs.iter().filter(|r| matches!(r.status, rtslice_bench::results::RunStatus::Refused { .. })).count();
    if refused > 0 {
        say(format!("{refused} run(s) did not fit this machine (refused by admission before anything was applied: its capacity, not a failure); the report says why."));
    }
    if failed > 0 {
        say(format!("{failed} run(s) failed; the report lists why."));
    }
    let html = std::fs::canonicalize(args.out.join("report.html")).unwrap_or_else(|_| args.out.join("report.html"));
    say(format!("report: {}", html.display()));
    Ok(if failed == results.runs.len() && failed > 0 { ExitCode::from(EXIT_FAILURE) } else { ExitCode::SUCCESS })
}
