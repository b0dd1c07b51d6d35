//! rtslice-bench: the experiment runner. An experiment file declares workloads, interference
//! scenarios, isolation strategies and repetitions; the runner executes the interleaved matrix
//! through the same public commands a user has (`rtslice apply/reset/emulate/noise/trace`) and
//! writes raw data, `report.md` and a self-contained `report.html`.

pub mod experiment;
pub mod matrix;
pub mod stats;
pub mod strategy;

pub use experiment::{Experiment, ExperimentError};
pub use strategy::Strategy;
pub mod aggregate;
pub mod plots;
pub mod results;
pub mod report;
pub mod specgen;
pub mod netns;
pub mod parse;
pub mod proc;
pub mod procfs;
pub mod runner;
