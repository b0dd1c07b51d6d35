//! The node's topology as the placement uses it: per CPU (by index into the planner's sorted CPU
//! list) its SMT siblings, its core, its LLC group and NUMA node, and which NUMA node a workload's
//! PCI devices and NIC sit on. Built once per plan from the spec's declared `node.topology`, else the host's
//! discovered one (`NodeFacts::topology`), else nothing (every CPU a core of its own, no groups).

use std::collections::BTreeMap;

use rtslice_spec::{format_cpu_list, Locality, Topology, Workload};

use crate::{TopologySource, TopologyUse};

#[derive(Clone, Debug, Default)]
pub(crate) struct Topo {
    /// Per CPU index: the indices of the other hardware threads of its core.
    pub siblings: Vec<Vec<usize>>,
    /// Per CPU index: its core's number (cores in order of their lowest CPU).
    pub core: Vec<usize>,
    /// Per CPU index: its LLC group, when the topology lists the CPU in one.
    pub llc: Vec<Option<usize>>,
    /// Per CPU index: its NUMA node, when the topology lists the CPU in one.
    pub numa: Vec<Option<usize>>,
    pub llc_known: bool,
    pub numa_known: bool,
    pub nics: BTreeMap<String, u32>,
    /// PCI address (canonical) → NUMA node.
    pub devices: BTreeMap<String, u32>,
    /// What the plan reports (`NodePlan::topology`).
    pub used: Option<TopologyUse>,
}

impl Topo {
    /// `wants_locality`: some workload asks for one; only then do CPUs a group list leaves out matter.
    pub fn new(cpus: &[u32], declared: Option<&Topology>, discovered: Option<&Topology>, wants_locality: bool, warnings: &mut Vec<String>) -> Topo {
        let n = cpus.len();
        let (t, source) = match (declared, discovered) {
            (Some(t), _) => (t.clone(), TopologySource::Declared),
            (None, Some(t)) => (t.clone(), TopologySource::Discovered),
            (None, None) => (Topology::default(), TopologySource::None),
        };
        let idx = |c: u32| cpus.binary_search(&c).ok();
        let cores = t.cores(cpus);
        let mut siblings = vec![Vec::new(); n];
        let mut core = vec![0; n];
        for (k, members) in cores.iter().enumerate() {
            let ids: Vec<usize> = members.iter().filter_map(|&c| idx(c)).collect();
            for &i in &ids {
                core[i] = k;
                siblings[i] = ids.iter().copied().filter(|&j| j != i).collect();
            }
        }
        let group_of = |groups: &[Vec<u32>]| {
            let mut of = vec![None; n];
            for (g, members) in groups.iter().enumerate() {
                for &c in members {
                    if let Some(i) = idx(c) {
                        of[i].get_or_insert(g);
                    }
                }
            }
            of
        };
        let (llc, numa) = (group_of(&t.llc), group_of(&t.numa));
        let (llc_known, numa_known) = (!t.llc.is_empty(), !t.numa.is_empty());
        for (known, of, what) in [(llc_known, &llc, "LLC group"), (numa_known, &numa, "NUMA node")] {
            let unlisted: Vec<u32> = (0..n).filter(|&i| of[i].is_none()).map(|i| cpus[i]).collect();
            if wants_locality && known && !unlisted.is_empty() {
                warnings.push(format!(
                    "the {} topology lists CPU {} in no {what}; workloads kept within one {what} will not use them",
                    source.name(),
                    format_cpu_list(&unlisted)
                ));
            }
        }
        let on_node = |groups: &[Vec<u32>]| -> Vec<Vec<u32>> {
            groups.iter().map(|g| g.iter().copied().filter(|&c| idx(c).is_some()).collect()).collect()
        };
        let used = (source != TopologySource::None).then(|| TopologyUse {
            source,
            cores: cores.iter().filter(|c| c.len() > 1).cloned().collect(),
            llc: on_node(&t.llc),
            numa: on_node(&t.numa),
            nics: t.nics.clone(),
            devices: t.devices.clone(),
        });
        Topo { siblings, core, llc, numa, llc_known, numa_known, nics: t.nics, devices: t.devices, used }
    }

    /// The groups (CPU indices, by group id) a workload with `locality` must stay within; `Any` is
    /// one group of every CPU. An unknown level is also one group of every CPU (the plan warns).
    pub fn groups(&self, locality: Locality) -> Vec<Vec<usize>> {
        let n = self.core.len();
        let of = match locality {
            Locality::Llc if self.llc_known => &self.llc,
            Locality::Numa if self.numa_known => &self.numa,
            _ => return vec![(0..n).collect()],
        };
        let count = of.iter().flatten().max().map_or(0, |m| m + 1);
        let mut groups = vec![Vec::new(); count];
        for (i, g) in of.iter().enumerate() {
            if let Some(g) = g {
                groups[*g].push(i);
            }
        }
        groups
    }

    /// Whether a locality level is unknown here (the workload then gets the whole node).
    pub fn unknown(&self, locality: Locality) -> bool {
        match locality {
            Locality::Any => false,
            Locality::Llc => !self.llc_known,
            Locality::Numa => !self.numa_known,
        }
    }

    /// The NUMA node preferred for a workload: that of its first PCI device (in the order of its
    /// `devices`) whose node the topology knows — a device passed to the workload is its own, its
    /// DMA and interrupts are local there — else that of the first NIC (by name) its IRQ or net
    /// rules name.
    pub fn preferred_node(&self, w: &Workload) -> Option<(String, usize)> {
        if !self.numa_known {
            return None;
        }
        if let Some((pci, &node)) = w.devices.iter().find_map(|d| self.devices.get_key_value(&d.pci.to_string())) {
            return Some((format!("device {pci}"), node as usize));
        }
        let patterns: Vec<&str> = w.irqs.iter().map(|r| r.pattern.as_str()).chain(w.net.iter().map(|r| r.interface.as_str())).collect();
        self.nics
            .iter()
            .find(|(nic, _)| patterns.iter().any(|p| names(p, nic)))
            .map(|(nic, &node)| (format!("NIC {nic}"), node as usize))
    }
}

/// Whether a rule's pattern names interface `nic`: the name appears in it as a whole token (IRQ
/// action names start with the interface, `eth1-TxRx-0`; `^eth1-` names eth1, `eth10` does not).
/// A textual test on purpose: the pattern is a regex over IRQ names, not over interface names.
pub(crate) fn names(pattern: &str, nic: &str) -> bool {
    if nic.is_empty() {
        return false;
    }
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    pattern.match_indices(nic).any(|(at, _)| !word(pattern[..at].chars().next_back()) && !word(pattern[at + nic.len()..].chars().next()))
}

#[cfg(test)]
mod tests {
    use super::names;

    #[test]
    fn a_pattern_names_a_nic_as_a_whole_token() {
        assert!(names("^eth1-TxRx-", "eth1"));
        assert!(names("ens1f0", "ens1f0"));
        assert!(names("^(ens1f0|ens1f1)-", "ens1f1"));
        assert!(!names("^eth10-TxRx", "eth1"));
        assert!(!names("veth1", "eth1"));
    }
}
