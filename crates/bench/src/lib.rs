//! rtslice-bench: the experiment runner. An experiment file declares workloads, interference
//! scenarios, isolation strategies and repetitions; the runner executes the interleaved matrix
//! through the same public commands a user has (`rtslice apply/reset/emulate/noise/trace`) and
//! writes raw data, `report.md` and a self-contained `report.html`.
//!
//! The other experiment kind, [`validation`], checks the reservation model against this host with
//! rtslice-loadgen's client and server (`rtslice model validate`).

pub mod experiment;
pub mod matrix;
pub mod stats;
pub mod layout;
pub mod strategy;

pub use experiment::{Experiment, ExperimentError};
pub use strategy::Strategy;
pub mod aggregate;
pub mod plots;
pub mod results;
pub mod report;
pub mod specgen;
pub mod netns;
pub mod closed_loop;
pub mod container;
pub mod periodic;
pub mod parse;
pub mod proc;
pub mod procfs;
pub mod runner;
pub mod slo_density;
pub mod validation;

/// The experiment `rtslice demo` runs: short versions of study A's tables and of the frontier.
pub const DEMO_EXPERIMENT: &str = include_str!("demo.yaml");

pub fn demo_experiment() -> Experiment {
    Experiment::parse(DEMO_EXPERIMENT, "built-in demo").expect("the built-in demo experiment is valid (tested)")
}

#[cfg(test)]
mod tests {
    #[test]
    fn demo_experiment_parses() {
        let e = super::demo_experiment();
        let cells = super::matrix::cells(&e).len();
        // Each cell is ~10 s on 2 CPUs and the demo runs them all: keep the count in check when editing it.
        assert!(cells <= 16, "{cells} cells");
    }
}
