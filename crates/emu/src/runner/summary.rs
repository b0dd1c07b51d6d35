//! What a run reports: the [`EmuSummary`] (`--json` prints exactly this) with its per-thread facts,
//! deadline misses and user-plane counts.

use serde::{Deserialize, Serialize};

use crate::calib::CostBreakdown;
use crate::os::Class;
use crate::profile::ThreadRole;

/// Per-thread facts at the end of a run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ThreadReport {
    pub name: String,
    pub tid: i32,
    pub role: ThreadRole,
    pub class_requested: Class,
    pub priority_requested: i32,
    pub class: Class,
    pub priority: i32,
    pub cpu_s: f64,
    pub cpu_percent: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Misses {
    /// Uplink decoded after the HARQ deadline (→ NACK / retransmission).
    pub ul_late: u64,
    /// Downlink ready after its air time (→ lost subframe).
    pub dl_late: u64,
    /// Uplink TTIs never processed: the radio buffer overflowed (the pipeline or the host held the
    /// clock back by more than 10 ms) and the samples were lost.
    pub ul_dropped: u64,
    /// Downlink TTIs never built for the same reasons.
    pub dl_dropped: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct UserPlaneReport {
    pub packets_sent: u64,
    pub bytes_sent: u64,
    pub packets_received: u64,
    pub bytes_received: u64,
    pub receiver: String,
}

/// The result of a run; `--json` prints exactly this.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EmuSummary {
    pub profile: String,
    pub duration_s: f64,
    pub tti_us: f64,
    pub budget_us: f64,
    pub prb: usize,
    pub prb_scheduled: usize,
    pub mcs: u8,
    pub antennas: usize,
    pub snr_db: f64,
    pub fft_size: usize,
    pub tbs_bits: usize,
    pub code_blocks: usize,
    pub load_target_percent: Option<f64>,
    /// The predicted PHY load of the peak level (every TTI's, under a constant pattern).
    pub load_predicted_percent: f64,
    pub predicted_cost: CostBreakdown,
    /// How the offered load varied over the run (docs/emulator.md, "Time-varying traffic").
    #[serde(default)]
    pub traffic_pattern: crate::traffic::Pattern,
    #[serde(default)]
    pub seed: u64,
    /// Scheduled PRBs of each load level of the pattern, lowest first (the last is `prb_scheduled`).
    #[serde(default)]
    pub prb_scheduled_levels: Vec<usize>,
    /// Predicted PHY load offered, in percent of one core: the mean over the run's TTIs and the
    /// highest of any TTI (equal under a constant pattern).
    #[serde(default)]
    pub offered_load_mean_percent: f64,
    #[serde(default)]
    pub offered_load_peak_percent: f64,
    pub ttis: u64,
    /// TTIs with any miss (late or dropped, either direction).
    pub deadline_misses: u64,
    pub misses: Misses,
    /// Uplink NACKs: decode failures + late + dropped uplink.
    pub nacks: u64,
    pub decode_failures: u64,
    pub nack_ratio: f64,
    /// Lost downlink subframes: late + dropped.
    pub lost_subframes: u64,
    /// UL + DL bits of transport blocks delivered in time, per second.
    pub throughput_bps: f64,
    pub ul_throughput_bps: f64,
    pub dl_throughput_bps: f64,
    /// What every TTI in time would give (the mean over the run's TTIs under a varying pattern).
    pub offered_bps: f64,
    /// Delivered throughput of each full second of the run (median/IQR within one run).
    pub throughput_series_bps: Vec<f64>,
    pub proc_mean_us: f64,
    pub proc_p50_us: f64,
    pub proc_p99_us: f64,
    pub proc_p9999_us: f64,
    pub proc_max_us: f64,
    pub slack_min_us: f64,
    pub clock_wakeup_p99_us: f64,
    pub clock_wakeup_max_us: f64,
    pub ldpc_iterations_mean: f64,
    /// CPU the emulator's own threads used (the pipeline's and the collector's), in % of one core
    /// over the run; a caller's other threads in the same process are not counted.
    pub cpu_percent_total: f64,
    pub threads: Vec<ThreadReport>,
    pub userplane: UserPlaneReport,
    pub warnings: Vec<String>,
}
