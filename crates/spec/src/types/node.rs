//! The spec's `node` section: the CPUs the node offers, its cap, housekeeping CPUs and fit policy,
//! and its topology (SMT cores, LLC groups, NUMA nodes, NIC and PCI device nodes).

use super::*;

/// Which CPUs the node offers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum NodeCpus {
    /// The online CPUs of the host the plan is made for (the CLI reads /sys/devices/system/cpu/online).
    #[default]
    Discovered,
    /// Exactly these CPU ids.
    List(Vec<u32>),
}

impl Serialize for NodeCpus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            NodeCpus::Discovered => s.serialize_str("discovered"),
            NodeCpus::List(c) => serde_cpus::serialize(c, s),
        }
    }
}

impl<'de> Deserialize<'de> for NodeCpus {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = NodeCpus;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"discovered\" or a CPU list")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<NodeCpus, E> {
                if v == "discovered" {
                    Ok(NodeCpus::Discovered)
                } else {
                    serde_cpus::CpusVisitor.visit_str(v).map(NodeCpus::List)
                }
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<NodeCpus, A::Error> {
                serde_cpus::CpusVisitor.visit_seq(seq).map(NodeCpus::List)
            }
        }
        d.deserialize_any(V)
    }
}

/// How the planner picks CPUs for a multi-CPU reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, Hash)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum FitPolicy {
    /// The CPUs with the most free bandwidth (study B); spreads load, leaves room everywhere.
    #[default]
    WorstFit,
    /// The CPUs with the least free bandwidth that still fit; packs, keeps whole CPUs free.
    BestFit,
    /// The lowest-numbered CPUs that fit.
    FirstFit,
}

impl FitPolicy {
    pub const ALL: [FitPolicy; 3] = [FitPolicy::WorstFit, FitPolicy::BestFit, FitPolicy::FirstFit];
    pub fn name(self) -> &'static str {
        match self {
            FitPolicy::WorstFit => "worst-fit",
            FitPolicy::BestFit => "best-fit",
            FitPolicy::FirstFit => "first-fit",
        }
    }
}

/// The machine the workloads share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Node {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default)]
    pub cpus: NodeCpus,
    /// CPUs kept for the OS, kernel threads and unpinned IRQs: never given to reserved or dedicated work.
    #[serde(default, with = "serde_cpus")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::schema::CpuListText"))]
    pub housekeeping: Vec<u32>,
    /// Per-CPU cap on the sum of reserved bandwidth (0 < cap ≤ 1).
    #[serde(default = "default_cap")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::schema::FractionText"))]
    pub cap: f64,
    /// Period of reservations that give only a runtime.
    #[serde(default = "default_period", with = "serde_duration")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::schema::DurationText"))]
    pub default_period: Duration,
    #[serde(default)]
    pub policy: FitPolicy,
    /// SMT siblings, LLC groups, NUMA nodes and NIC locality, when the spec declares them; absent,
    /// the planner uses what it was told of the host (`NodeFacts::topology`), if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<Topology>,
    /// The L3 cache for cache allocation (resctrl); `None`: discovered on the host, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<crate::NodeCache>,
}

/// Where CPUs sit relative to each other: what `isolation.smt` and `isolation.locality` are checked
/// against. The same type holds a declared topology (the spec's `node.topology`) and one discovered
/// on a host (`Topology::from_host`), so the planner treats both alike.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Topology {
    /// Which CPUs are hardware threads of one core.
    #[serde(default, skip_serializing_if = "Smt::is_none")]
    pub smt: Smt,
    /// Groups of CPUs sharing a last-level cache (disjoint CPU lists).
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "crate::cpulist::serde_cpu_groups")]
    #[cfg_attr(feature = "schema", schemars(with = "Vec<crate::schema::CpuListText>"))]
    pub llc: Vec<Vec<u32>>,
    /// The CPUs of NUMA node n at index n (an empty list for a node without CPUs).
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "crate::cpulist::serde_cpu_groups")]
    #[cfg_attr(feature = "schema", schemars(with = "Vec<crate::schema::CpuListText>"))]
    pub numa: Vec<Vec<u32>>,
    /// Network interface name → the NUMA node of its device.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub nics: BTreeMap<String, u32>,
    /// PCI address (canonical, `0000:3b:02.1`) → the NUMA node of the device: where a workload that
    /// is passed the device is placed first.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub devices: BTreeMap<String, u32>,
}

/// SMT layout: which CPUs share a core.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Smt {
    /// Unknown, or no SMT: every CPU is a core of its own.
    #[default]
    None,
    /// `"+N"`: CPU n and CPU n+N are one core (Linux numbers a 2-socket 2×16-core SMT server's
    /// second threads 32–63, so `+32`; interleaved numbering is `+1`). See [`Topology::cores`].
    Offset(u32),
    /// Each entry is the CPUs of one core.
    Cores(Vec<Vec<u32>>),
}

impl Smt {
    pub fn is_none(&self) -> bool {
        matches!(self, Smt::None)
    }
}

impl Serialize for Smt {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Smt::None => s.serialize_str("none"),
            Smt::Offset(n) => s.serialize_str(&format!("+{n}")),
            Smt::Cores(c) => crate::cpulist::serde_cpu_groups::serialize(c, s),
        }
    }
}

impl<'de> Deserialize<'de> for Smt {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Smt;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"none\", \"+N\" (CPU n and n+N share a core) or a list of cores' CPU lists")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Smt, E> {
                Smt::parse_text(v).map_err(E::custom)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Smt, A::Error> {
                let mut cores = Vec::new();
                while let Some(c) = seq.next_element::<String>()? {
                    cores.push(crate::parse_cpu_list(&c).map_err(serde::de::Error::custom)?);
                }
                Ok(Smt::Cores(cores))
            }
        }
        d.deserialize_any(V)
    }
}

impl Smt {
    /// The text forms: `none` or `+N` (N ≥ 1).
    pub fn parse_text(v: &str) -> Result<Smt, String> {
        let v = v.trim();
        if v == "none" {
            return Ok(Smt::None);
        }
        match v.strip_prefix('+').map(|n| n.trim().parse::<u32>()) {
            Some(Ok(n)) if n >= 1 => Ok(Smt::Offset(n)),
            _ => Err(format!("`{v}` is not an SMT layout; write `+N` (CPU n and n+N share a core, e.g. `+32`), `none`, or a list of cores such as [\"0,32\", \"1,33\"]")),
        }
    }
}

impl Topology {
    /// The cores of `cpus`, each a sorted list of its CPUs (one CPU when its siblings are unknown),
    /// sorted by lowest CPU. `+N` pairs from the lowest CPU up: n with n+N when both are among
    /// `cpus` and n is not already paired; listed cores keep only CPUs among `cpus`.
    pub fn cores(&self, cpus: &[u32]) -> Vec<Vec<u32>> {
        let mut sorted = cpus.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let mut cores: Vec<Vec<u32>> = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        match &self.smt {
            Smt::None => {}
            Smt::Offset(n) => {
                for &c in &sorted {
                    if seen.contains(&c) {
                        continue;
                    }
                    if let Some(s) = c.checked_add(*n).filter(|s| sorted.binary_search(s).is_ok() && !seen.contains(s)) {
                        seen.extend([c, s]);
                        cores.push(vec![c, s]);
                    }
                }
            }
            Smt::Cores(list) => {
                for core in list {
                    let on: Vec<u32> = core.iter().copied().filter(|c| sorted.binary_search(c).is_ok() && !seen.contains(c)).collect();
                    if !on.is_empty() {
                        seen.extend(on.iter().copied());
                        cores.push(on);
                    }
                }
            }
        }
        cores.extend(sorted.iter().filter(|c| !seen.contains(c)).map(|&c| vec![c]));
        for c in &mut cores {
            c.sort_unstable();
        }
        cores.sort();
        cores
    }

    /// A topology read from a host (rtslice-sys's readers): cores from each CPU's thread siblings,
    /// LLC groups from its last-level cache, NUMA nodes, and the nodes of the NICs and PCI devices
    /// that have one.
    pub fn from_host(
        cpus: &[rtslice_sys::topology::CpuTopology],
        numa: &[(u32, Vec<u32>)],
        nics: &[rtslice_sys::topology::NicLocality],
        devices: &[(rtslice_sys::pci::PciAddress, u32)],
    ) -> Topology {
        let mut cores: Vec<Vec<u32>> = cpus.iter().map(|c| c.smt_siblings.clone()).filter(|s| s.len() > 1).collect();
        cores.sort();
        cores.dedup();
        let mut llc: Vec<Vec<u32>> = cpus.iter().map(|c| c.llc.clone()).filter(|l| !l.is_empty()).collect();
        llc.sort();
        llc.dedup();
        let mut numa_lists: Vec<Vec<u32>> = Vec::new();
        for (node, list) in numa {
            let at = *node as usize;
            if at >= numa_lists.len() {
                numa_lists.resize(at + 1, Vec::new());
            }
            numa_lists[at] = list.clone();
        }
        // One node says nothing a placement could use.
        if numa_lists.iter().filter(|l| !l.is_empty()).count() <= 1 {
            numa_lists.clear();
        }
        let (nics, devices) = if numa_lists.is_empty() {
            (BTreeMap::new(), BTreeMap::new())
        } else {
            (
                nics.iter().filter_map(|n| n.node.map(|node| (n.name.clone(), node))).collect(),
                devices.iter().map(|(a, node)| (a.to_string(), *node)).collect(),
            )
        };
        Topology { smt: if cores.is_empty() { Smt::None } else { Smt::Cores(cores) }, llc, numa: numa_lists, nics, devices }
    }
}

fn default_cap() -> f64 {
    DEFAULT_CAP
}
fn default_period() -> Duration {
    DEFAULT_PERIOD
}

impl Default for Node {
    fn default() -> Self {
        Node {
            name: None,
            cpus: NodeCpus::Discovered,
            housekeeping: Vec::new(),
            cap: DEFAULT_CAP,
            default_period: DEFAULT_PERIOD,
            policy: FitPolicy::WorstFit,
            topology: None,
            cache: None,
        }
    }
}
