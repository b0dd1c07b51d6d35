//! The Plan: everything a later stage needs to apply a spec on a host, without re-reading the spec.
//! JSON field names are snake_case; durations are integer nanoseconds (`*_ns`), bandwidths are
//! fractions of one CPU (0.25 = 25%). docs/plan.md documents the schema.

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use rtslice_spec::{FitPolicy, Isolation, Launch, Locality, SmtIsolation, Topology};
use rtslice_spec::units::serde_nanos;

/// What only the host knows; the CLI fills it from /sys, tests and benchmarks make it up.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct NodeFacts {
    /// Online CPU ids (/sys/devices/system/cpu/online). Used when the spec says `cpus: discovered`.
    pub online: Vec<u32>,
    /// CPUs isolated at boot (`isolcpus=`, /sys/devices/system/cpu/isolated).
    pub isolcpus: Vec<u32>,
    /// Real-time bandwidth already held on the host by threads and groups rtslice did not place
    /// (rtslice-host's `foreign_rt`); each CPU's free bandwidth is the cap less this and less the
    /// reservations. Empty: rtslice plans as if it were alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub foreign_rt: Vec<crate::ForeignRt>,
    /// The host's SMT siblings, LLC groups, NUMA nodes and NIC nodes (rtslice-host's
    /// `discovered_topology`), used when the spec declares no `node.topology`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<Topology>,
    /// The host's L3 as resctrl describes it (`/sys/fs/resctrl/info/L3`); `None`: no resctrl.
    /// A spec's `node.cache` takes precedence (planning for another machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<rtslice_spec::NodeCache>,
}

impl NodeFacts {
    /// CPUs 0..n online, none isolated.
    pub fn with_cpus(n: u32) -> Self {
        NodeFacts { online: (0..n).collect(), ..NodeFacts::default() }
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
    /// The kernel parameters apply will write (`plan_for_kernel`; absent from `plan`, which does not
    /// know the host's mechanism).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<crate::KernelPlan>,
    /// The L3 cache ways per domain and the default group's narrowed mask, when the node has
    /// cache allocation (resctrl) — declared in the spec or found on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<crate::CachePlan>,
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
    /// The topology the placement honoured, and where it came from; absent when none was known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopologyUse>,
}

/// The topology a plan was made with, restricted to the node's CPUs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TopologyUse {
    pub source: TopologySource,
    /// Cores with more than one CPU on the node (the other CPUs are cores of their own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cores: Vec<Vec<u32>>,
    /// LLC groups, by group id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub llc: Vec<Vec<u32>>,
    /// The CPUs of NUMA node n at index n.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub numa: Vec<Vec<u32>>,
    /// Interface → NUMA node.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub nics: std::collections::BTreeMap<String, u32>,
    /// PCI address → NUMA node.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub devices: std::collections::BTreeMap<String, u32>,
}

/// Where a plan's topology came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TopologySource {
    /// None known: every CPU a core of its own, no LLC or NUMA groups.
    #[default]
    None,
    /// The spec's `node.topology`.
    Declared,
    /// Read from the host the plan is made on (`NodeFacts::topology`).
    Discovered,
}

impl TopologyUse {
    /// The same topology in the spec's form (what a node publishes so that planners elsewhere, such
    /// as the scheduler extender, place with it).
    pub fn to_topology(&self) -> Topology {
        Topology {
            smt: if self.cores.is_empty() { rtslice_spec::Smt::None } else { rtslice_spec::Smt::Cores(self.cores.clone()) },
            llc: self.llc.clone(),
            numa: self.numa.clone(),
            nics: self.nics.clone(),
            devices: self.devices.clone(),
        }
    }
}

impl TopologySource {
    pub fn name(self) -> &'static str {
        match self {
            TopologySource::None => "unknown",
            TopologySource::Declared => "declared",
            TopologySource::Discovered => "discovered",
        }
    }
}

/// One CPU of the node after planning.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CpuUse {
    pub cpu: u32,
    pub housekeeping: bool,
    /// The workload that owns this CPU exclusively (dedicated CPUs, or a shielded reservation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusive_to: Option<String>,
    /// An SMT sibling kept idle for this workload (`isolation.smt: whole-core`): nothing is placed here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_for: Option<String>,
    /// Sum of reserved bandwidth on this CPU (1.0 when dedicated).
    pub reserved: f64,
    /// Real-time bandwidth held here by threads and groups rtslice did not place (`NodeFacts::foreign_rt`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub foreign: f64,
    /// Who reserved what here.
    pub by: Vec<CpuShare>,
    /// What is still reservable here: cap − reserved − foreign (0 when exclusive to a workload, held
    /// for one, or housekeeping).
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
    /// The PCI devices passed to it, with where their IRQs go.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DevicePin>,
    /// The reservation's SCHED_DEADLINE threads may reclaim unused bandwidth (SCHED_FLAG_RECLAIM).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reclaim: bool,
    /// A workload with an SLO: how its reservation was sized for it (or checked against it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sizing: Option<crate::Sizing>,
    /// Its resctrl group: exclusive L3 ways and a memory-bandwidth ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<crate::WorkloadCache>,
    /// The part of its reservation its SCHED_OTHER threads get as CFS bandwidth (`other` rules with a
    /// `share`); the real-time rules split the rest ([`WorkloadPlan::realtime_reservation`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<CfsPool>,
}

/// A reservation's CFS part: `quota` of CPU time every `period` for all the workload's SCHED_OTHER
/// threads together, over all its CPUs (the cgroup's `cpu.max` / `cpu.cfs_quota_us`), whole
/// microseconds as the kernel takes them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CfsPool {
    /// Fraction of the reservation's runtime on each CPU (the `other` rules' shares together).
    pub share: f64,
    #[serde(rename = "quota_ns", with = "serde_nanos")]
    pub quota: Duration,
    #[serde(rename = "period_ns", with = "serde_nanos")]
    pub period: Duration,
}

impl CfsPool {
    /// The pool of `share` of `reservation` on `cpus` CPUs. Its period is `period` when given, else
    /// the reservation's period lengthened by whole multiples until the quota reaches the kernel's
    /// 1 ms minimum (a 1 ms TTI's pool of 0.45 ms gets 0.45 × 3 = 1.35 ms every 3 ms). The quota is
    /// rounded down to the microsecond, so the pool and the real-time part never add up to more
    /// than the reservation. Refused (with the fix) where the kernel would refuse the quota.
    pub fn of(reservation: Reservation, cpus: u32, share: f64, period: Option<Duration>) -> Result<CfsPool, String> {
        use rtslice_spec::units::format_duration;
        let (min, max) = (rtslice_spec::CFS_MIN_PERIOD, rtslice_spec::CFS_MAX_PERIOD);
        let whole = reservation.whole_micros();
        let bw = whole.bandwidth() * share * f64::from(cpus.max(1));
        let quota_at = |p: Duration| Duration::from_micros((bw * p.as_micros() as f64 + 1e-6).floor() as u64);
        let period = match period {
            Some(p) => p,
            None => {
                let base = whole.period.max(Duration::from_micros(1));
                let mut p = base;
                while (p < min || quota_at(p) < min) && p + base <= max {
                    p += base;
                }
                p
            }
        };
        let period = Duration::from_micros(period.as_micros() as u64);
        let quota = quota_at(period);
        if quota < min || period < min || period > max {
            return Err(format!(
                "its `other` rules' share {:.0}% of {} every {} on {} CPU(s) is {} of CFS bandwidth every {}, but the kernel takes a \
                 quota and period of {} to {}; give the rule a longer `period` or a larger `share`",
                share * 100.0,
                format_duration(reservation.runtime),
                format_duration(reservation.period),
                cpus,
                format_duration(quota),
                format_duration(period),
                format_duration(min),
                format_duration(max)
            ));
        }
        Ok(CfsPool { share, quota, period })
    }

    /// The quota in whole microseconds, as `cpu.max` takes it.
    pub fn quota_us(&self) -> u64 {
        self.quota.as_micros() as u64
    }

    pub fn period_us(&self) -> u64 {
        self.period.as_micros() as u64
    }
}

impl WorkloadPlan {
    /// The reservation its real-time rules (or its RT group) hold: the whole reservation in whole
    /// microseconds, less its CFS pool's share rounded up (`None`: no reservation).
    pub fn realtime_reservation(&self) -> Option<Reservation> {
        let Allocation::Reservation { reservation, .. } = &self.allocation else { return None };
        let r = reservation.whole_micros();
        Some(match &self.pool {
            None => r,
            Some(p) => Reservation::from_micros(r.runtime_us() - ((r.runtime_us() as f64 * p.share - 1e-9).ceil() as u64).min(r.runtime_us()), r.period_us()),
        })
    }

    /// The per-CPU reservation bandwidth (runtime/period), 0 for best-effort and 1 for dedicated.
    pub fn bandwidth(&self) -> f64 {
        match &self.allocation {
            Allocation::Reservation { reservation: r, .. } => r.runtime.as_secs_f64() / r.period.as_secs_f64(),
            Allocation::Dedicated { .. } => 1.0,
            Allocation::BestEffort { .. } => 0.0,
        }
    }
}

/// The CPU time a workload got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Allocation {
    /// `reservation` on each CPU of `per_cpu` (the RT group budget per CPU, cpu.rt_runtime_us /
    /// cpu.rt_period_us; HCBS semantics). JSON: `runtime_ns` and `period_ns` beside `per_cpu`.
    Reservation {
        #[serde(flatten)]
        reservation: Reservation,
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

/// One CPU carrying a workload's reservation, in the order the placement chose it (study B lists
/// container 3 as "CPUs 3, 2, 0"). Every CPU carries the allocation's whole `reservation`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CpuReservation {
    pub cpu: u32,
}

/// A real-time CPU reservation: `runtime` of CPU time every `period` — the one representation from
/// the plan to the kernel (cgroup RT budgets, HCBS `cpu.rt.max`, OCI `realtimeRuntime`, and split
/// into SCHED_DEADLINE runtimes by [`Reservation::split`]). JSON: `runtime_ns`, `period_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Reservation {
    #[serde(rename = "runtime_ns", with = "serde_nanos")]
    pub runtime: Duration,
    #[serde(rename = "period_ns", with = "serde_nanos")]
    pub period: Duration,
}

impl Reservation {
    pub fn new(runtime: Duration, period: Duration) -> Reservation {
        Reservation { runtime, period }
    }

    /// Whole microseconds: the unit of cgroup RT budgets (cpu.rt_runtime_us, cpu.rt.max).
    pub fn from_micros(runtime_us: u64, period_us: u64) -> Reservation {
        Reservation { runtime: Duration::from_micros(runtime_us), period: Duration::from_micros(period_us) }
    }

    /// Runtime in whole microseconds, rounded down (what a cgroup RT budget file takes).
    pub fn runtime_us(&self) -> u64 {
        self.runtime.as_micros() as u64
    }

    pub fn period_us(&self) -> u64 {
        self.period.as_micros() as u64
    }

    /// This reservation truncated to whole microseconds, as the cgroup interfaces will enforce it.
    pub fn whole_micros(&self) -> Reservation {
        Reservation::from_micros(self.runtime_us(), self.period_us())
    }

    /// Fraction of one CPU (runtime / period), from the exact nanosecond counts.
    pub fn bandwidth(&self) -> f64 {
        self.runtime.as_nanos() as f64 / self.period.as_nanos().max(1) as f64
    }

    /// The one budget split: `cpus` CPUs' worth of this reservation (runtime × cpus every period) is
    /// divided among rules by `shares` (fractions of that whole), each part expressed as a runtime
    /// every `period` (a rule may run at its own period: the part keeps its bandwidth) and rounded
    /// down to the nanosecond. When the shares add up to at most 1, the parts never add up to more
    /// than the whole: should float rounding overshoot, the last parts give the excess back. Shares
    /// adding up to more than 1 over-subscribe on purpose (the caller reports it: the plan warns,
    /// apply checks the partition). Deterministic; the caller decides the shares (explicit ones, or an
    /// equal split).
    pub fn split(&self, cpus: u32, shares: &[f64], period: Duration) -> Vec<Duration> {
        let whole_ns = self.runtime.as_nanos() as f64 * cpus as f64;
        // Exactly 1.0 when the periods are equal, so the common case is whole × share, rounded once.
        let scale = period.as_nanos() as f64 / self.period.as_nanos().max(1) as f64;
        let mut parts: Vec<u128> = shares
            .iter()
            .map(|&s| {
                let v = whole_ns * s.max(0.0) * scale;
                if v.is_finite() { v.floor() as u128 } else { 0 }
            })
            .collect();
        // The whole, at the parts' period (exact integer arithmetic).
        let limit = self.runtime.as_nanos() * cpus as u128 * period.as_nanos() / self.period.as_nanos().max(1);
        let oversubscribed = shares.iter().map(|s| s.max(0.0)).sum::<f64>() > 1.0 + 1e-12;
        let mut excess = if oversubscribed { 0 } else { parts.iter().sum::<u128>().saturating_sub(limit) };
        for p in parts.iter_mut().rev() {
            let take = excess.min(*p);
            *p -= take;
            excess -= take;
        }
        parts.into_iter().map(|ns| Duration::from_nanos(ns.min(u64::MAX as u128) as u64)).collect()
    }
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
    /// `period`: the rule's own SCHED_DEADLINE period where a reservation enforced by SCHED_DEADLINE
    /// turns it into a deadline rule (its part of the budget scaled to that period); `None` = the
    /// reservation's period.
    Fifo {
        priority: u32,
        #[serde(default, skip_serializing_if = "Option::is_none", rename = "period_ns", with = "serde_nanos::option")]
        period: Option<Duration>,
    },
    Rr {
        priority: u32,
        #[serde(default, skip_serializing_if = "Option::is_none", rename = "period_ns", with = "serde_nanos::option")]
        period: Option<Duration>,
    },
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

impl ThreadSched {
    /// A real-time (SCHED_FIFO / SCHED_RR) rule's own period under a SCHED_DEADLINE reservation.
    pub fn rt_period(&self) -> Option<Duration> {
        match self {
            ThreadSched::Fifo { period, .. } | ThreadSched::Rr { period, .. } => *period,
            _ => None,
        }
    }
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

/// A PCI device given to the workload: its device nodes go into the workload's container, and every
/// IRQ of the device gets affinity `irq_cpus` (`None`: rtslice leaves them alone, the spec's `keep`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DevicePin {
    pub pci: rtslice_spec::PciAddress,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub irq_cpus: Option<Vec<u32>>,
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

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}
