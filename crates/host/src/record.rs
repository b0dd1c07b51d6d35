//! What an apply recorded for `status`, `reset` and the agent (stored in the state file next to the
//! journal).

use rtslice_sys::proc_ref::ProcRef;
use serde::{Deserialize, Serialize};

use crate::cgroup::{Backend, GroupPaths};
use crate::cpus::CpuList;
use crate::setup::{Setup, ThreadRule};

/// How real-time reservations are enforced: the planner's type, so `plan` and `apply` speak of the
/// same mechanisms.
pub use rtslice_plan::Mechanism;

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
    /// Its resctrl control group (cache ways, bandwidth ceiling; its own occupancy counters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resctrl_group: Option<std::path::PathBuf>,
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
