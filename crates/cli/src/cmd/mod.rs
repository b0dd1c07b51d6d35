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

/// Prints a warning with the one prefix all of rtslice's warnings carry.
pub fn warning(msg: impl Display) {
    eprintln!("rtslice: warning: {msg}");
}

/// Reports invalid input (a bad argument or file) and gives its exit code, 2.
pub fn invalid(msg: impl Display) -> anyhow::Result<ExitCode> {
    error(msg);
    Ok(ExitCode::from(EXIT_INVALID))
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
