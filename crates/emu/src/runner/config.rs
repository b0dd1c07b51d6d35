//! What a run of the emulator is asked to do: [`Config`] (defaults from the profile), the scheduling
//! mode and the user plane's sockets.

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::calib::Calibration;
use crate::os::Class;
use crate::profile::Profile;
use crate::traffic::Pattern;

/// How scheduling classes are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SchedMode {
    /// As the real stack: its RT threads get their class and priority.
    Profile,
    /// The profile's RT threads get this class instead (priorities kept); non-RT threads stay
    /// SCHED_OTHER. `Force(Other)` runs everything under CFS (for CFS-quota experiments).
    Force(Class),
}

/// The user plane's socket pair.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UserPlane {
    /// Network namespace (name under /var/run/netns) for the receiving ("core") socket.
    pub netns: Option<String>,
    /// Address of the receiving socket; default 127.0.0.1 on an ephemeral port.
    pub bind: Option<SocketAddr>,
}

/// Everything a run needs. `Config::new(profile)` gives the profile's defaults.
#[derive(Debug, Clone)]
pub struct Config {
    pub profile: Profile,
    pub duration: Duration,
    /// Carrier bandwidth in PRBs (default: the profile's).
    pub prb: Option<usize>,
    /// Fraction of the carrier scheduled per TTI (traffic demand), 0 < t ≤ 1.
    pub traffic: Option<f64>,
    /// Target load in percent of one core; picks the scheduled PRBs from the calibration.
    /// Used when set, and by default when neither `prb` nor `traffic` is given.
    pub load_percent: Option<f64>,
    /// How the offered load varies from TTI to TTI, as a fraction of the peak that `load_percent`,
    /// `prb` or `traffic` set (default: constant, every TTI at the peak).
    pub traffic_pattern: Pattern,
    /// Seed of the pattern's random draws (bursts); the same seed gives the same trace.
    pub seed: u64,
    pub mcs: Option<u8>,
    pub antennas: Option<usize>,
    pub snr_db: f64,
    pub sched: SchedMode,
    pub cpus: Option<Vec<usize>>,
    /// Processing budget in TTIs (default: LTE 3, NR 4).
    pub budget_ttis: Option<u32>,
    /// NR numerology µ (slot = 1 ms / 2^µ); ignored for LTE profiles.
    pub numerology: u8,
    pub workers: Option<usize>,
    /// nr-gnb's Tpool queue lock inherits priority (a PI futex) instead of OAI's plain mutex.
    pub pi_locks: bool,
    pub max_iterations: u32,
    pub userplane: UserPlane,
    /// Print one line per second on stderr.
    pub live: bool,
    pub calibration: Option<Calibration>,
    /// Set to stop early (Ctrl-C); the summary covers the TTIs run.
    pub stop: Option<Arc<AtomicBool>>,
}

impl Config {
    pub fn new(profile: Profile) -> Config {
        Config {
            profile,
            duration: Duration::from_secs(10),
            prb: None,
            traffic: None,
            load_percent: None,
            traffic_pattern: Pattern::Constant,
            seed: 1,
            mcs: None,
            antennas: None,
            snr_db: 25.0,
            sched: SchedMode::Profile,
            cpus: None,
            budget_ttis: None,
            numerology: 1,
            workers: None,
            pi_locks: false,
            max_iterations: 8,
            userplane: UserPlane::default(),
            live: false,
            calibration: None,
            stop: None,
        }
    }
}
