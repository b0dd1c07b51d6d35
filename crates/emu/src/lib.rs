//! rtslice-emu: a virtualized base station that computes for real.
//!
//! Threads named and scheduled as in OpenAirInterface (LTE eNB, NR gNB) and srsRAN 4G's srsENB, an
//! absolute-time TTI clock, real PHY work per TTI (FFT, channel estimation, equalisation, LDPC
//! min-sum decoding with SNR-dependent iterations, encoding, modulation, IFFT), HARQ deadlines,
//! NACKs, lost subframes, throughput counted only for transport blocks delivered in time, and a
//! user plane that forwards decoded payload over a real UDP socket.
//!
//! Library use: `rtslice_emu::run(Config::new(Profile::OaiLte)) -> Result<EmuSummary, EmuError>`.
//! Process use: `rtslice emulate --json ...` prints the same `EmuSummary` as one JSON object.
//! With `RTSLICE_REPORT_SOCKET` set, the run also reports its SLI counters to the node once a second
//! (docs/metrics.md).

pub mod calib;
pub mod chain;
pub mod ldpc;
pub mod os;
pub mod phy;
pub mod profile;
mod report;
mod runner;
pub mod traffic;

pub use calib::{Calibration, CostBreakdown, LdpcPoint, TtiWork};
pub use os::Class;
pub use profile::{Defaults, Profile, ThreadRole, ThreadSpec};
pub use report::{SliCounters, REPORT_SOCKET_ENV};
pub use traffic::{Pattern, Trace};
pub use runner::{run, Config, Misses, SchedMode, EmuSummary, ThreadReport, UserPlane, UserPlaneReport};

#[derive(Debug, thiserror::Error)]
pub enum EmuError {
    #[error("invalid emulator configuration: {0}")]
    Invalid(String),
    #[error("a load of {requested:.1}% of one core is more than this carrier can demand ({max:.1}% with {hint})")]
    LoadTooHigh { requested: f64, max: f64, hint: String },
    #[error("{0}")]
    Io(String),
}
