//! One module per subcommand. Each exposes `Args` (or `Command`) and `run`, returning the exit code.
//! Exit codes: 0 success, 1 a request was refused or a check failed (e.g. a workload rejected),
//! 2 invalid input, 3 the host could not do what was asked (permissions, missing kernel feature).
//!
//! The conventions every subcommand shares live here, so they are spelled once: the `rtslice: error:`
//! and `rtslice: warning:` prefixes, `--json`, `-q/--quiet`, ratios written as `0.95` or `95%`,
//! and the reservation mechanisms' names.

use std::fmt::Display;
use std::process::ExitCode;

pub const EXIT_REJECTED: u8 = 1;
pub const EXIT_INVALID: u8 = 2;
pub const EXIT_FAILURE: u8 = 3;

pub mod agent;
pub mod apply;
pub mod bench;
pub mod daemon;
pub mod demo;
pub mod deploy;
pub mod doctor;
pub mod emulate;
pub mod extender;
pub mod generate;
pub mod get;
pub mod import;
pub mod list;
pub mod loadgen;
pub mod metrics;
pub mod model;
pub mod node_api;
pub mod noise;
pub mod plan;
pub mod plan_usage;
pub mod profile;
pub mod remove;
pub mod reset;
pub mod resize;
pub mod status;
pub mod top;
pub mod trace;
pub mod tune;

/// Prints an error with the one prefix all of rtslice's errors carry.
pub fn error(msg: impl Display) {
    eprintln!("rtslice: error: {msg}");
}

/// An error and its causes on one line, each cause once: the libraries' errors already name their
/// source in their own message (`creating X: it already exists; …`), so anyhow's `{:#}`, which
/// appends every cause again, printed the same sentence two or three times.
pub fn chain(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let c = cause.to_string();
        if text.contains(&c) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&c);
    }
    text
}

/// Prints a warning with the one prefix all of rtslice's warnings carry.
pub fn warning(msg: impl Display) {
    eprintln!("rtslice: warning: {msg}");
}

/// Reports invalid input (a bad argument or file) and gives its exit code, 2.
pub fn invalid(msg: impl Display) -> anyhow::Result<ExitCode> {
    error(msg);
    Ok(ExitCode::from(EXIT_INVALID))
}

/// An access policy file (`--access` of the daemon and the extender), or its located errors as one
/// message (one per line).
pub fn read_access(f: &std::path::Path) -> Result<rtslice_spec::access::Access, String> {
    let bytes = std::fs::read(f).map_err(|e| format!("--access {}: {e}", f.display()))?;
    let file = f.display().to_string();
    rtslice_spec::utf8_text(&bytes, &file)
        .and_then(|t| rtslice_spec::access::parse_access(t, &file))
        .map_err(|e| e.iter().map(|x| x.to_string()).collect::<Vec<_>>().join("\n"))
}

/// `--json`, with one meaning on every subcommand that reports a result.
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct Json {
    /// Print the result as JSON on standard output instead of the human view
    #[arg(long)]
    pub json: bool,
}

/// `-q/--quiet`, with one meaning on every subcommand that shows progress while it runs.
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct Quiet {
    /// No live view or progress (the result is still printed)
    // `--no-progress` was bench's and demo's name for it; kept working for scripts.
    #[arg(short, long, alias = "no-progress")]
    pub quiet: bool,
}

/// The value parser of every ratio on the command line: `0.95` or `95%`, between 0 and 1
/// (the spec's own parser, so a cap reads the same in a spec file and in a flag).
pub fn ratio(text: &str) -> Result<f64, String> {
    rtslice_spec::units::parse_fraction(text).map_err(|e| e.to_string())
}

/// A reservation mechanism as typed on the command line. `rt_group` (as `rtslice doctor`, `apply`
/// and the journal print it) is the one spelling shown; `rt-group` is accepted as an alias.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MechanismArg {
    /// Hierarchical constant-bandwidth server: cgroup v2 cpu.rt.max (patched kernels)
    Hcbs,
    /// SCHED_DEADLINE on every thread of the workload
    Deadline,
    /// RT group scheduling: cgroup v1 cpu.rt_runtime_us / cpu.rt_period_us
    #[value(name = "rt_group", alias = "rt-group")]
    RtGroup,
    /// No reservation enforced (plain CFS, for comparison)
    None,
}

impl From<MechanismArg> for rtslice_host::Mechanism {
    fn from(m: MechanismArg) -> Self {
        match m {
            MechanismArg::Hcbs => rtslice_host::Mechanism::Hcbs,
            MechanismArg::Deadline => rtslice_host::Mechanism::Deadline,
            MechanismArg::RtGroup => rtslice_host::Mechanism::RtGroup,
            MechanismArg::None => rtslice_host::Mechanism::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::chain;

    #[test]
    fn each_cause_is_printed_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::AlreadyExists, "it already exists");
        // A message that already names its source (the host crate's errors do): printed once.
        let named = anyhow::Error::new(io()).context("creating /x: it already exists");
        assert_eq!(chain(&named), "creating /x: it already exists");
        // A bare context still gets its cause.
        let bare = anyhow::Error::new(io()).context("creating /x");
        assert_eq!(chain(&bare), "creating /x: it already exists");
        let real = anyhow::Error::new(rtslice_host::HostError::StepFailed {
            step: "apply the node's base".into(),
            source: Box::new(rtslice_host::HostError::Create { path: "/x".into(), source: io() }),
            rollback_errors: vec![],
        });
        assert_eq!(chain(&real).matches("it already exists").count(), 1, "{}", chain(&real));
    }
}
