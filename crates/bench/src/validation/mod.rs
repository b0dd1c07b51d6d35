//! Model validation, study B's Table 3 (`rtslice model validate`): an experiment kind of its own,
//! next to the matrix experiments. A [`ValidationExperiment`] file names one row (load LD,
//! bandwidth Q/P, period P, mechanism); [`validate()`] runs rtslice-loadgen's server under that
//! reservation in one network namespace and its open-loop client in another, sweeps the mean
//! inter-arrival period and compares mean and percentile round trips with rtslice-model point by point.
//!
//! Shipped files are in `crates/bench/validation/`, the results they produced in
//! `crates/bench/validation/results/` (method and numbers in docs/model.md).

mod experiment;
mod plot;
mod reserve;
mod validate;

pub use experiment::{mechanism_label, parse_mechanism, Shape, ValidationExperiment};
pub use plot::write_svg;
pub use reserve::HostLauncher;
pub use validate::{
    host_notes, scenario, spawn, validate, HostNotes, KernelLock, Launcher, PlainLauncher, PointResult, RunningServer,
    ValidateOptions, ValidationReport, SERVER_PORT,
};

#[derive(Debug, thiserror::Error)]
pub enum ValidationError {
    #[error("{0}")]
    Invalid(String),
    #[error("the model refuses this point: {0}")]
    Model(#[from] rtslice_model::ModelError),
    /// The validation file has problems; each is at its line and column.
    #[error("{0}")]
    Located(rtslice_yaml::Errors),
    #[error("reservation: {0}")]
    Reservation(String),
    /// The load generator (client, namespaces, server: starting it too) failed; its message says
    /// what to do.
    #[error(transparent)]
    Loadgen(#[from] rtslice_loadgen::LoadgenError),
    /// A system call or /proc read failed (the message names it and what to do).
    #[error(transparent)]
    Os(#[from] rtslice_sys::SysError),
}

pub type Result<T> = std::result::Result<T, ValidationError>;
