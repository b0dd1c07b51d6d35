//! What an apply recorded for `status`, `reset` and the agent (stored in the state file next to the
//! journal).

use serde::{Deserialize, Serialize};

use crate::cgroup::{Backend, GroupPaths};
use crate::cpus::CpuList;
use crate::journal::ProcRef;
use crate::setup::{Setup, ThreadRule};

/// How real-time reservations are enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// Hierarchical CBS through cgroup v2 `cpu.rt.max` (patched kernels).
    Hcbs,
    /// Per-thread SCHED_DEADLINE inside an exclusive partition.
    Deadline,
    /// Legacy RT group throttling (cgroup v1 cpu.rt_runtime_us/cpu.rt_period_us).
    RtGroup,
    /// No enforcement (no reservation requested).
    None,
}

impl Mechanism {
    pub fn describe(&self) -> &'static str {
        match self {
            Mechanism::Hcbs => "HCBS cgroup reservations (cpu.rt.max)",
            Mechanism::Deadline => "SCHED_DEADLINE per real-time thread in an exclusive partition",
            Mechanism::RtGroup => "RT group runtime/period (cgroup v1 cpu.rt_runtime_us)",
            Mechanism::None => "no reservation enforced",
        }
    }
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mechanism::Hcbs => "hcbs",
            Mechanism::Deadline => "deadline",
            Mechanism::RtGroup => "rt_group",
            Mechanism::None => "none",
        })
    }
}

impl std::str::FromStr for Mechanism {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "hcbs" => Ok(Mechanism::Hcbs),
            "deadline" => Ok(Mechanism::Deadline),
            "rt_group" | "rt-group" | "rtgroup" => Ok(Mechanism::RtGroup),
            "none" => Ok(Mechanism::None),
            _ => Err(format!("unknown mechanism {s:?}; use hcbs, deadline, rt_group or none")),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkloadRecord {
    pub name: String,
    pub cpus: CpuList,
    pub group: GroupPaths,
    /// Processes rtslice launched or attached (the cgroup may hold more: their children).
    pub pids: Vec<ProcRef>,
    pub container: Option<String>,
    /// The rules in force, after the mechanism translated RT rules (e.g. FIFO → DEADLINE).
    pub rules: Vec<ThreadRule>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AppliedRecord {
    pub setup: Setup,
    pub mechanism: Mechanism,
    pub backend: Backend,
    pub workloads: Vec<WorkloadRecord>,
    pub agent: Option<ProcRef>,
    pub warnings: Vec<String>,
}
