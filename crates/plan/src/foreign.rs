//! Real-time bandwidth on the host that rtslice did not place: another tool's SCHED_DEADLINE threads,
//! FIFO/RR threads (rt-app, a PTP daemon, a foreign vBS), RT groups (cgroup v1 `cpu.rt_runtime_us`)
//! of other cgroups. The kernel's RT/DEADLINE cap per CPU is one budget shared by all of them, so a
//! reservation planned as if rtslice were alone either fails admission (SCHED_DEADLINE: EBUSY) or
//! is admitted next to FIFO threads that then starve it or get throttled with it. The host measures
//! these (rtslice-host `foreign_rt`, listed by `rtslice doctor`); the planner subtracts them from each
//! CPU's free bandwidth like a reservation of its own.

use serde::{Deserialize, Serialize};

/// One source of foreign real-time bandwidth and what it takes of each CPU it may run on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForeignRt {
    /// Who holds it, for the plan's output and its refusals ("rt-app[4242] SCHED_FIFO 50, 4 threads").
    pub source: String,
    /// How the figure was obtained: `declared` (SCHED_DEADLINE runtime/period, an RT group's budget)
    /// or `measured` (CPU time of FIFO/RR threads over a sampling window).
    pub basis: ForeignBasis,
    /// Fraction of each CPU in `cpus` it holds (0.06 = 6 % of every one of them).
    pub per_cpu: f64,
    pub cpus: Vec<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ForeignBasis {
    Declared,
    Measured,
}

/// The foreign bandwidth on `cpu`, summed over every source (uncapped: more than the cap means the
/// CPU is already over-committed and has nothing left).
pub fn foreign_on(foreign: &[ForeignRt], cpu: u32) -> f64 {
    foreign.iter().filter(|f| f.cpus.contains(&cpu)).map(|f| f.per_cpu.max(0.0)).sum()
}
