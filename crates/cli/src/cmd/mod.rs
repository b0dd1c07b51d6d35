//! One module per subcommand. Each exposes `Args` (or `Command`) and `run`, returning the exit code.
//! Exit codes: 0 success, 1 a request was refused or a check failed (e.g. a workload rejected),
//! 2 invalid input, 3 the host could not do what was asked (permissions, missing kernel feature).

pub const EXIT_REJECTED: u8 = 1;
pub const EXIT_INVALID: u8 = 2;
pub const EXIT_FAILURE: u8 = 3;

pub mod agent;
pub mod apply;
pub mod bench;
pub mod demo;
pub mod doctor;
pub mod emulate;
pub mod import;
pub mod loadgen;
pub mod model;
pub mod noise;
pub mod plan;
pub mod reset;
pub mod status;
pub mod trace;
