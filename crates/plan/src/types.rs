//! The Plan: everything a later stage needs to apply a spec on a host, without re-reading the spec.
//! JSON field names are snake_case; durations are integer nanoseconds (`*_ns`), bandwidths are
//! fractions of one CPU (0.25 = 25%). docs/plan.md documents the schema.

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use rtslice_spec::{FitPolicy, Isolation, Launch};
use rtslice_spec::units::serde_nanos;

/// What only the host knows; the CLI fills it from /sys, tests and benchmarks make it up.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NodeFacts {
    /// Online CPU ids (/sys/devices/system/cpu/online). Used when the spec says `cpus: discovered`.
    pub online: Vec<u32>,
    /// CPUs isolated at boot (`isolcpus=`, /sys/devices/system/cpu/isolated).
    pub isolcpus: Vec<u32>,
}

impl NodeFacts {
    /// CPUs 0..n online, none isolated.
    pub fn with_cpus(n: u32) -> Self {
        NodeFacts { online: (0..n).collect(), isolcpus: Vec::new() }
    }
}

/// The result of planning: admitted workloads with their resources, the rejected ones with reasons.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Plan {
    pub api_version: String,
    pub node: NodePlan,
    /// Admitted workloads, in spec order.
    pub workloads: Vec<WorkloadPlan>,
    /// Refused workloads, in spec order.
    pub rejected: Vec<Rejection>,
    /// Things that do not block admission but deserve attention (e.g. listed CPUs that are not online).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// The node as planned: its CPUs and what each carries.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct NodePlan {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// All CPUs of the node, sorted.
    pub cpus: Vec<u32>,
    /// CPUs for the OS, kernel threads and unpinned IRQs; nothing reserved or dedicated runs here.
    pub housekeeping: Vec<u32>,
    /// The host's isolcpus list as given in the facts.
    pub isolcpus: Vec<u32>,
    pub cap: f64,
    pub policy: FitPolicy,
    /// One entry per node CPU, sorted by CPU id.
    pub per_cpu: Vec<CpuUse>,
}

/// One CPU of the node after planning.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CpuUse {
    pub cpu: u32,
    pub housekeeping: bool,
    /// The workload that owns this CPU exclusively (dedicated CPUs, or a shielded reservation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusive_to: Option<String>,
    /// Sum of reserved bandwidth on this CPU (1.0 when dedicated).
    pub reserved: f64,
    /// Who reserved what here.
    pub by: Vec<CpuShare>,
    /// What is still reservable here: cap − reserved (0 when exclusive to a workload or housekeeping).
    pub free: f64,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CpuShare {
    pub workload: String,
    pub bandwidth: f64,
}

/// One admitted workload, resolved.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct WorkloadPlan {
    pub name: String,
    /// The cpuset: CPU ids the workload may run on, sorted.
    pub cpus: Vec<u32>,
    pub allocation: Allocation,
    pub isolation: Isolation,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<Launch>,
    /// Memory limit in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// Thread rules in spec order; the first rule whose pattern matches a thread's name applies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<ThreadPin>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub irqs: Vec<IrqPin>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub net: Vec<NetPin>,
}

impl WorkloadPlan {
    /// The per-CPU reservation bandwidth (runtime/period), 0 for best-effort and 1 for dedicated.
    pub fn bandwidth(&self) -> f64 {
        match &self.allocation {
            Allocation::Reservation { runtime, period, .. } => runtime.as_secs_f64() / period.as_secs_f64(),
            Allocation::Dedicated { .. } => 1.0,
            Allocation::BestEffort { .. } => 0.0,
        }
    }
}

/// The CPU time a workload got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Allocation {
    /// `runtime` every `period` on each CPU of `per_cpu` (the RT group budget per CPU,
    /// cpu.rt_runtime_us / cpu.rt_period_us; HCBS semantics).
    Reservation {
        #[serde(rename = "runtime_ns", with = "serde_nanos")]
        runtime: Duration,
        #[serde(rename = "period_ns", with = "serde_nanos")]
        period: Duration,
        per_cpu: Vec<CpuReservation>,
    },
    /// Whole CPUs, exclusive.
    Dedicated { cpus: Vec<u32> },
    /// CFS on the shared CPUs: weight 1–10000 (cgroup v2 cpu.weight; v1 shares = weight × 1024 / 100)
    /// and an optional cap in CPUs (quota = cap × period).
    BestEffort {
        weight: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cap: Option<f64>,
    },
}

impl Default for Allocation {
    fn default() -> Self {
        Allocation::BestEffort { weight: 100, cap: None }
    }
}

/// A per-CPU share of a reservation: the planner may (in a defragmentation) move single shares.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CpuReservation {
    pub cpu: u32,
    #[serde(rename = "runtime_ns", with = "serde_nanos")]
    pub runtime: Duration,
    #[serde(rename = "period_ns", with = "serde_nanos")]
    pub period: Duration,
}

/// A thread rule with concrete CPUs and scheduling parameters.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ThreadPin {
    /// Regex on the thread name (comm); rules apply first-match-wins in this order.
    pub pattern: String,
    pub sched: ThreadSched,
    pub cpus: ThreadCpus,
}

/// A Linux scheduling class with every parameter resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "policy", rename_all = "snake_case")]
pub enum ThreadSched {
    Other { nice: i32 },
    Batch { nice: i32 },
    Idle,
    Fifo { priority: u32 },
    Rr { priority: u32 },
    /// SCHED_DEADLINE parameters per matched thread.
    Deadline {
        #[serde(rename = "runtime_ns", with = "serde_nanos")]
        runtime: Duration,
        #[serde(rename = "deadline_ns", with = "serde_nanos")]
        deadline: Duration,
        #[serde(rename = "period_ns", with = "serde_nanos")]
        period: Duration,
    },
}

impl Default for ThreadSched {
    fn default() -> Self {
        ThreadSched::Other { nice: 0 }
    }
}

/// Where matched threads may run.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", content = "cpus", rename_all = "snake_case")]
pub enum ThreadCpus {
    /// Anywhere in the workload's cpuset (affinity = `WorkloadPlan::cpus`).
    #[default]
    Anywhere,
    /// Exactly these CPU ids (a subset of the workload's cpuset).
    Cpus(Vec<u32>),
}

/// IRQs whose action name matches `pattern` get affinity `cpus`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct IrqPin {
    pub pattern: String,
    pub cpus: Vec<u32>,
}

/// RPS/XPS of interfaces matching `interface` (a regex): every RX queue's rps_cpus and every TX
/// queue's xps_cpus get these CPU masks. `None` leaves the kernel's setting alone.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NetPin {
    pub interface: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rps_cpus: Option<Vec<u32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xps_cpus: Option<Vec<u32>>,
}

/// A workload the node cannot take, and why.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Rejection {
    pub name: String,
    /// Says which CPUs were considered, how much was free, how much was asked.
    pub reason: String,
    /// Moves of existing per-CPU shares that would make room, when only fragmentation blocks the request.
    pub defrag: Option<Defrag>,
}

/// A defragmentation proposal: not applied; apply the moves (at the tasks' next sleep) and re-plan.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Defrag {
    pub moves: Vec<Move>,
    /// Where the rejected workload would go after the moves.
    pub then_cpus: Vec<u32>,
}

/// Move `workload`'s share of `bandwidth` from `from_cpu` to `to_cpu`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Move {
    pub workload: String,
    pub from_cpu: u32,
    pub to_cpu: u32,
    pub bandwidth: f64,
}

impl Plan {
    pub fn workload(&self, name: &str) -> Option<&WorkloadPlan> {
        self.workloads.iter().find(|w| w.name == name)
    }
    pub fn rejection(&self, name: &str) -> Option<&Rejection> {
        self.rejected.iter().find(|r| r.name == name)
    }
    pub fn all_admitted(&self) -> bool {
        self.rejected.is_empty()
    }
}
