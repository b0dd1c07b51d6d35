//! What this host is, read once for everyone who decides: its CPUs, the CPUs isolated at boot, its
//! topology and L3, its cgroup layout and the reservation mechanisms it offers, the kernel's
//! admission limits. `rtslice plan`, the node service and the bench plan from [`planning_facts`];
//! apply, the node and doctor check against [`HostFacts`].

use std::path::Path;
use std::process::Command;

use rtslice_plan::NodeFacts;

use crate::cgroup::{self, Backend, CgroupLayout};
use crate::cpus::CpuList;
use crate::error::{HostError, Result};
use crate::fsio;
use crate::record::Mechanism;

/// The debugfs file of the scheduler's feature flags: reads as the whole list ("... NO_HRTICK ..."),
/// takes one flag per write ("HRTICK" or "NO_HRTICK").
pub const SCHED_FEATURES: &str = "/sys/kernel/debug/sched/features";

/// This host as the planner sees it: the online CPUs, those isolated at boot, the topology (SMT,
/// LLC, NUMA, NICs) and the L3 resctrl offers. `rtslice plan` and the node service both plan from
/// this, so a spec the CLI admits is what the daemon admits on the same host.
pub fn planning_facts() -> Result<NodeFacts> {
    planning_facts_with(&crate::resctrl::Resctrl::default())
}

/// [`planning_facts`] with the L3 of the resctrl at `resctrl` (a node opened on another root).
pub fn planning_facts_with(resctrl: &crate::resctrl::Resctrl) -> Result<NodeFacts> {
    let online = online_cpus();
    let cpus: Vec<u32> = online.iter().collect();
    let cache = resctrl.discover(Path::new("/"), &cpus).map_err(|e| HostError::Unsupported {
        what: format!("cannot read this host's resctrl ({}/info) for cache allocation: {e}", resctrl.root.display()),
        fix: format!("check that {} is mounted and readable, or unmount it to plan without cache allocation", resctrl.root.display()),
    })?;
    Ok(NodeFacts { topology: Some(discovered_topology(&cpus)), online: cpus, isolcpus: boot_isolated().iter().collect(), cache, ..Default::default() })
}

/// CPUs isolated from the scheduler domains at boot (`isolcpus=domain`): none when unreadable.
pub fn boot_isolated() -> CpuList {
    fsio::read_trim("/sys/devices/system/cpu/isolated").ok().and_then(|s| CpuList::parse(&s).ok()).unwrap_or_default()
}

/// What apply needs to know about the host.
#[derive(Clone, Debug)]
pub struct HostFacts {
    pub online: CpuList,
    pub mems: String,
    pub layout: CgroupLayout,
    pub backend: Backend,
    pub available: Vec<Mechanism>,
    /// Global RT ratio (sched_rt_runtime_us / sched_rt_period_us), the kernel's admission cap.
    pub rt_ratio: f64,
    /// sched_rt_runtime_us is -1: no admission at all (`rt_ratio` reads 1.0 then).
    pub rt_unlimited: bool,
    /// HCBS: the root group's budget and the group budgets it holds now (`cgroup::hcbs_root`).
    pub hcbs_root: Option<rtslice_plan::HcbsRoot>,
    /// Bandwidth per CPU the deadline servers (fair_server) hold in SCHED_DEADLINE admission.
    pub dl_server: f64,
    /// CPUs isolated from the scheduler domains at boot (`isolcpus=domain`,
    /// /sys/devices/system/cpu/isolated): outside load balancing, all in one root domain.
    pub boot_isolated: CpuList,
}

impl HostFacts {
    pub fn detect() -> Result<HostFacts> {
        let layout = CgroupLayout::detect().map_err(|e| HostError::Unsupported {
            what: format!("cannot read /proc/self/mountinfo: {e}"),
            fix: "run on Linux with /proc mounted".into(),
        })?;
        let backend = layout
            .backend()
            .map_err(|fix| HostError::Unsupported { what: "no usable cpuset+cpu cgroup controllers".into(), fix })?;
        let mems = fsio::read_trim(backend.root().cpuset.join("cpuset.mems"))
            .or_else(|_| fsio::read_trim(backend.root().cpuset.join("cpuset.mems.effective")))
            .unwrap_or_else(|_| "0".into());
        let runtime: i64 = fsio::read_trim("/proc/sys/kernel/sched_rt_runtime_us")?.parse().unwrap_or(950000);
        let period: f64 = fsio::read_trim("/proc/sys/kernel/sched_rt_period_us")?.parse().unwrap_or(1e6);
        let available = mechanisms(&layout);
        let hcbs_root = match &backend {
            Backend::V2 { root } if available.contains(&Mechanism::Hcbs) => crate::cgroup::hcbs_root(root),
            _ => None,
        };
        Ok(HostFacts {
            online: online_cpus(),
            mems: if mems.is_empty() { "0".into() } else { mems },
            available,
            layout,
            backend,
            rt_ratio: if runtime < 0 { 1.0 } else { runtime as f64 / period },
            rt_unlimited: runtime < 0,
            hcbs_root,
            dl_server: dl_server_share(),
            boot_isolated: boot_isolated(),
        })
    }

    /// What the planner needs to know about this kernel (`rtslice plan` on this host).
    pub fn kernel_facts(&self) -> rtslice_plan::KernelFacts {
        let (hz, hrtick) = tick_facts();
        rtslice_plan::KernelFacts {
            available: self.available.clone(),
            // A ratio of 1 is a cap too (the HCBS kernel's default): deadline threads and HCBS
            // budgets still leave the fair servers their share; only -1 disables admission.
            rt_cap: (!self.rt_unlimited).then_some(self.rt_ratio),
            dl_server: self.dl_server,
            hz,
            hrtick,
            no_partition_cpus: self.no_partition_cpus().iter().collect(),
            hcbs_root: self.hcbs_root.clone(),
        }
    }

    /// HCBS: the share of each CPU the root group's budget may hold — the kernel admits it as
    /// deadline bandwidth on every CPU, beside the fair servers (`None`: no admission, -1).
    pub fn hcbs_cap(&self) -> Option<f64> {
        (!self.rt_unlimited).then(|| (self.rt_ratio - self.dl_server).max(0.0))
    }

    /// The CPUs no exclusive partition may hold: v2 refuses partitions holding CPUs isolated at boot
    /// (boot_isolated_without_partition). They do not count as CPUs partitions leave the system.
    pub fn no_partition_cpus(&self) -> CpuList {
        if self.backend.is_v1() {
            CpuList::new()
        } else {
            self.boot_isolated.clone()
        }
    }
}

/// The deadline servers' share of each CPU in SCHED_DEADLINE admission: fair_server's
/// runtime/period from debugfs when readable; else the kernel's default (50 ms every 1 s) on kernels
/// that have it (6.12+), since it is accounted there even where debugfs is locked down; else 0.
fn dl_server_share() -> f64 {
    let base = std::path::Path::new("/sys/kernel/debug/sched/fair_server/cpu0");
    let read = |f: &str| fsio::read_trim(base.join(f)).ok().and_then(|s| s.parse::<f64>().ok());
    if let (Some(runtime), Some(period)) = (read("runtime"), read("period")) {
        if period > 0.0 {
            return runtime / period;
        }
    }
    let release = fsio::read_trim("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release.split(|c: char| !c.is_ascii_digit()).filter_map(|x| x.parse::<u32>().ok());
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if (major, minor) >= (6, 12) {
        0.05
    } else {
        0.0
    }
}

/// CONFIG_HZ (from /proc/config.gz or /boot/config-RELEASE) and whether HRTICK/HRTICK_DL is on
/// (debugfs sched/features; off when unreadable: both are off by default).
fn tick_facts() -> (Option<u32>, bool) {
    let hz = kernel_config_value("CONFIG_HZ").and_then(|v| v.parse().ok());
    let features = fsio::read_trim(SCHED_FEATURES).unwrap_or_default();
    let hrtick = features.split_whitespace().any(|f| f == "HRTICK" || f == "HRTICK_DL");
    (hz, hrtick)
}

/// The topology the planner uses when a spec declares none (`NodeFacts::topology`): this host's SMT
/// siblings, LLC groups, NUMA nodes and NIC nodes for `cpus`, read by rtslice-sys.
pub fn discovered_topology(cpus: &[u32]) -> rtslice_spec::Topology {
    let root = Path::new("/");
    rtslice_spec::Topology::from_host(
        &rtslice_sys::topology::topology(root, cpus),
        &rtslice_sys::topology::numa_nodes(root),
        &rtslice_sys::topology::nic_locality(root),
        &rtslice_sys::pci::pci_numa_nodes(root),
    )
}

pub fn online_cpus() -> CpuList {
    fsio::read_trim("/sys/devices/system/cpu/online").ok().and_then(|s| CpuList::parse(&s).ok()).unwrap_or_else(|| {
        CpuList::from_cpus(0..rtslice_sys::procfs::online_cpu_count())
    })
}

/// Mechanisms the host can enforce, best first (HCBS > SCHED_DEADLINE partition > RT groups).
pub fn mechanisms(layout: &CgroupLayout) -> Vec<Mechanism> {
    let mut m = Vec::new();
    if cgroup::hcbs_available(layout) {
        m.push(Mechanism::Hcbs);
    }
    match layout.backend() {
        Ok(Backend::V1 { cpuset, cpu }) => {
            if cpuset.join("cpuset.sched_load_balance").exists() {
                m.push(Mechanism::Deadline);
            }
            if cpu.join("cpu.rt_runtime_us").exists() {
                m.push(Mechanism::RtGroup);
            }
        }
        Ok(Backend::V2 { root }) => {
            // Partitions need cpuset.cpus.partition on non-root groups; the root lacks the file, so
            // check that the kernel version has it (5.11+) through any child or assume yes.
            let _ = root;
            m.push(Mechanism::Deadline);
        }
        Err(_) => {}
    }
    m
}

/// The running kernel's build configuration (/proc/config.gz, else /boot/config-RELEASE).
pub(crate) fn kernel_config() -> Option<String> {
    let out = Command::new("zcat").arg("/proc/config.gz").output().ok()?;
    if out.status.success() {
        return Some(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let release = fsio::read_trim("/proc/sys/kernel/osrelease").ok()?;
    std::fs::read_to_string(format!("/boot/config-{release}")).ok()
}

/// A value of the running kernel's build configuration (`CONFIG_HZ` → "250"), when the config is readable.
pub(crate) fn kernel_config_value(key: &str) -> Option<String> {
    let config = kernel_config()?;
    let prefix = format!("{key}=");
    config.lines().find_map(|l| l.strip_prefix(&prefix).map(|v| v.trim_matches('"').to_string()))
}

