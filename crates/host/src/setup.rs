//! The host-level description of what to apply: concrete CPUs, budgets, thread rules, IRQ and network
//! rules, and how each workload is launched. `apply` and the node turn a `Plan` into a `Setup`
//! (`from_plan`), the kernel parameters as the planner computed them: thread policies after its
//! budget split, group budgets. A `Setup` built by hand (tests) states those parameters itself.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use rtslice_plan::Reservation;

use crate::cpus::CpuList;
use crate::sched::SchedAttr;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    /// A label for status output (the spec's name).
    pub name: String,
    /// CPUs left to the rest of the system (used by shields and to keep housekeeping load-balanced).
    pub housekeeping: CpuList,
    pub workloads: Vec<WorkloadSetup>,
    pub irqs: Vec<IrqRule>,
    pub nets: Vec<NetRule>,
    /// The L3 ways per domain and the default group's narrowed mask (resctrl), when a workload has
    /// a cache allocation or a memory-bandwidth ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<rtslice_plan::CachePlan>,
    /// The mechanism the workloads' kernel parameters (thread policies, group budgets) were planned
    /// for; a host or node enforcing another refuses the setup. `None`: the parameters as written,
    /// under whatever mechanism applies them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mechanism: Option<rtslice_plan::Mechanism>,
}

impl Setup {
    /// The setup as one setup per workload, in order: what a one-shot apply deploys on its node one
    /// at a time. Each holds its workload, and the cache plan if it takes cache. The IRQ and network
    /// rules stay together, in order, with the first workload: a node gives each IRQ and queue file
    /// one holder, and two workloads of one spec may name the same IRQ (the later rule wins it, as
    /// when the setup is applied whole); a one-shot apply is removed whole, so who holds them is
    /// no one's concern but the journal's.
    pub fn per_workload(&self) -> Vec<Setup> {
        self.workloads
            .iter()
            .enumerate()
            .map(|(i, w)| Setup {
                name: self.name.clone(),
                housekeeping: self.housekeeping.clone(),
                workloads: vec![w.clone()],
                irqs: if i == 0 { self.irqs.clone() } else { Vec::new() },
                nets: if i == 0 { self.nets.clone() } else { Vec::new() },
                cache: self.cache.clone().filter(|_| w.cache.is_some()),
                mechanism: self.mechanism,
            })
            .collect()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkloadSetup {
    /// Path-safe name: [A-Za-z0-9_.-], not starting with '.'.
    pub name: String,
    pub cpus: CpuList,
    /// Memory nodes ("0"); `None` = all nodes the parent has.
    pub mems: Option<String>,
    /// An exclusive scheduling partition (needed to pin SCHED_DEADLINE threads).
    pub partition: bool,
    /// Keep every other user task off these CPUs (soft isolation, like `cset shield`).
    pub shield: bool,
    /// Real-time reservation on each CPU of the workload, in whole microseconds (what the cgroup
    /// interfaces enforce; `Reservation::whole_micros`).
    #[serde(default, with = "reservation_us")]
    pub reservation: Option<Reservation>,
    /// The RT budget its cpu group gets (RT groups, HCBS; under SCHED_DEADLINE on cgroup v1 the
    /// real-time part a CFS pool's group needs), as the planner decided it
    /// (`rtslice_plan::kernel::kernel_workload_on`). The host writes it; it computes no budget itself.
    #[serde(default, with = "reservation_us")]
    pub group_budget: Option<Reservation>,
    /// SCHED_DEADLINE threads of the reservation may reclaim bandwidth nobody uses
    /// (SCHED_FLAG_RECLAIM, GRUB); their guarantee stays the reservation.
    #[serde(default)]
    pub reclaim: bool,
    /// Best-effort controls.
    pub cfs: Option<Cfs>,
    /// Memory limit in bytes (v1 memory.limit_in_bytes, v2 memory.max).
    pub memory: Option<u64>,
    pub threads: Vec<ThreadRule>,
    /// Give every thread not placed by a rule the whole workload CPU set (study A's wide affinity).
    pub wide_affinity: bool,
    pub launch: Launch,
    /// Its resctrl group's schemata (exclusive L3 ways, MB ceiling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<rtslice_plan::WorkloadCache>,
    /// PCI devices given to it: their nodes go into its OCI container, their IRQs to `irq_cpus`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceSetup>,
}

/// A PCI device of a workload; `irq_cpus`: where all of its IRQs go (`None`: left alone).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSetup {
    pub pci: rtslice_sys::pci::PciAddress,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub irq_cpus: Option<CpuList>,
}

/// The state file keeps a workload's reservation as `{"runtime_us", "period_us"}` (the cgroup
/// interfaces' unit, and the format state files have always had).
mod reservation_us {
    use rtslice_plan::Reservation;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    struct Micros {
        runtime_us: u64,
        period_us: u64,
    }

    pub fn serialize<S: Serializer>(r: &Option<Reservation>, s: S) -> Result<S::Ok, S::Error> {
        r.map(|r| Micros { runtime_us: r.runtime_us(), period_us: r.period_us() }).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Reservation>, D::Error> {
        Ok(Option::<Micros>::deserialize(d)?.map(|m| Reservation::from_micros(m.runtime_us, m.period_us)))
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Cfs {
    /// CPU-time quota per period in µs; `None` = unlimited.
    pub quota_us: Option<u64>,
    pub period_us: Option<u64>,
    /// v2-scale weight 1..10000 (100 = default).
    pub weight: Option<u64>,
    /// SCHED_IDLE-like group (cpu.idle=1).
    pub idle: bool,
}

/// A rule for the threads of a workload whose name (comm) matches `name` (a regex, unanchored unless it
/// says ^…$, as in the spec). Rules apply first-match-wins.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadRule {
    pub name: String,
    pub policy: Option<SchedAttr>,
    pub cpus: Option<CpuList>,
    /// The period (ns) the plan gave a real-time rule of its own (a FIFO/RR rule's `period`: under
    /// SCHED_DEADLINE its part of the budget is at this period, the same bandwidth with earlier
    /// deadlines). `None` = the reservation's period. Kept for what reads the record; the policy
    /// above already carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_ns: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Launch {
    /// Nothing to start: only the cgroups and rules are set up (processes may be attached later).
    #[default]
    None,
    /// A command started inside the workload's cgroups.
    Command { argv: Vec<String>, env: Vec<(String, String)>, cwd: Option<PathBuf> },
    /// An OCI bundle started through runc; rtslice writes its config.json.
    Oci(OciLaunch),
    /// A container image run by podman, its processes in the workload's CPU groups (`podman`).
    Podman(PodmanLaunch),
    /// Existing processes moved into the workload's cgroups (all their threads follow).
    Attach { pids: Vec<i32> },
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OciLaunch {
    /// Bundle directory holding `rootfs/`; rtslice writes `config.json` into it.
    pub bundle: PathBuf,
    pub args: Vec<String>,
    /// A new network namespace (otherwise the host's).
    pub netns: bool,
    /// Docker's default seccomp allow-list; `false` = no seccomp filter.
    pub seccomp: bool,
    /// Container id; default `rtslice-<workload>`.
    pub id: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PodmanLaunch {
    /// Any image reference podman takes (`oci:DIR`, `docker-archive:FILE`, a local name).
    pub image: String,
    /// Replace the image's command (the entrypoint stays).
    pub args: Vec<String>,
    /// More `podman create` options, passed as given (before rtslice's defaults, which they override).
    pub options: Vec<String>,
    /// Container name; default `rtslice-<workload>`.
    pub name: Option<String>,
}

/// IRQs whose action names (last column of /proc/interrupts) match `action` (a regex, unanchored) go to `cpus`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IrqRule {
    pub action: String,
    pub cpus: CpuList,
}

/// Receive/transmit packet steering masks for interfaces whose name matches `iface` (regex).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NetRule {
    pub iface: String,
    pub rps: Option<CpuList>,
    pub xps: Option<CpuList>,
}

pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Compiles a thread/IRQ/interface pattern (unanchored regex, like the spec's `match`).
pub fn pattern(p: &str) -> std::result::Result<regex::Regex, String> {
    regex::Regex::new(p).map_err(|e| format!("bad name pattern {p:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setup_splits_into_one_setup_per_workload_with_the_rules_on_the_first() {
        let cpus = |s: &str| CpuList::parse(s).unwrap();
        let w = |n: &str, c: &str| WorkloadSetup { name: n.into(), cpus: cpus(c), ..Default::default() };
        let mut cached = w("b", "2");
        cached.cache = Some(Default::default());
        let setup = Setup {
            name: "s".into(),
            housekeeping: cpus("0"),
            workloads: vec![w("a", "1"), cached],
            irqs: vec![IrqRule { action: "eth0".into(), cpus: cpus("1") }, IrqRule { action: "eth0".into(), cpus: cpus("2") }],
            nets: vec![NetRule { iface: "eth0".into(), rps: Some(cpus("2")), xps: None }],
            cache: Some(Default::default()),
            mechanism: Some(rtslice_plan::Mechanism::Deadline),
        };
        let parts = setup.per_workload();
        assert_eq!(parts.iter().map(|p| p.workloads[0].name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert!(parts.iter().all(|p| p.workloads.len() == 1 && p.mechanism == setup.mechanism && p.housekeeping == setup.housekeeping));
        // Both rules naming eth0, in order (the later wins it), and the queue rule: one holder.
        assert_eq!((parts[0].irqs.clone(), parts[0].nets.clone()), (setup.irqs.clone(), setup.nets.clone()));
        assert!(parts[1].irqs.is_empty() && parts[1].nets.is_empty());
        // The cache plan goes with the workload that takes cache.
        assert_eq!((parts[0].cache.is_some(), parts[1].cache.is_some()), (false, true));
    }
}
