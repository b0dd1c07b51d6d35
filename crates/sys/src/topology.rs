//! CPU topology and device locality from sysfs: SMT siblings, last-level-cache groups, NUMA nodes of
//! CPUs and of network interfaces. Every reader takes the root of the tree ("/" on a host) so the
//! same code reads a copied tree of another machine in tests. Missing files (a VM without cache
//! information, a virtual NIC without a PCI device) become `None`/empty, never errors: topology is
//! advice for placement, and its absence must not stop anything.

use std::path::{Path, PathBuf};

use crate::cpulist::parse_cpu_list;

/// Where one CPU sits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuTopology {
    pub cpu: u32,
    /// `topology/core_id` (unique only within a package).
    pub core_id: Option<u32>,
    /// `topology/physical_package_id` (the socket).
    pub package: Option<u32>,
    /// The NUMA node (the `nodeN` link in the CPU's directory).
    pub node: Option<u32>,
    /// `topology/thread_siblings_list`: the CPUs of this CPU's core (itself included).
    pub smt_siblings: Vec<u32>,
    /// `cache/indexK/shared_cpu_list` of the highest cache level: the CPUs sharing its last-level cache.
    pub llc: Vec<u32>,
}

/// A sysfs file's content without surrounding whitespace; `None` when it cannot be read.
pub(crate) fn text(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn list(path: &Path) -> Vec<u32> {
    text(path).and_then(|t| parse_cpu_list(&t).ok()).unwrap_or_default()
}

fn cpu_dir(root: &Path, cpu: u32) -> PathBuf {
    root.join(format!("sys/devices/system/cpu/cpu{cpu}"))
}

/// Reads one CPU's place.
pub fn cpu_topology(root: &Path, cpu: u32) -> CpuTopology {
    let dir = cpu_dir(root, cpu);
    let num = |f: &str| text(&dir.join("topology").join(f)).and_then(|s| s.parse().ok());
    let node = std::fs::read_dir(&dir).ok().and_then(|rd| {
        rd.flatten().find_map(|e| e.file_name().to_str().and_then(|n| n.strip_prefix("node")).and_then(|n| n.parse().ok()))
    });
    // The last-level cache is the cache index with the highest level (index3 on x86, often index2 on Arm).
    let mut llc = (0u32, Vec::new());
    if let Ok(rd) = std::fs::read_dir(dir.join("cache")) {
        for e in rd.flatten() {
            let level: u32 = text(&e.path().join("level")).and_then(|s| s.parse().ok()).unwrap_or(0);
            if level > llc.0 {
                llc = (level, list(&e.path().join("shared_cpu_list")));
            }
        }
    }
    let mut smt_siblings = list(&dir.join("topology/thread_siblings_list"));
    if smt_siblings.is_empty() {
        smt_siblings.push(cpu);
    }
    CpuTopology { cpu, core_id: num("core_id"), package: num("physical_package_id"), node, smt_siblings, llc: llc.1 }
}

/// The id of the CPU's last-level cache (`cache/indexK/id` of the highest level): resctrl's domain
/// id for the L3 (the `0` of `L3:0=fff`). `None` where sysfs has no cache ids (many VMs).
pub fn llc_id(root: &Path, cpu: u32) -> Option<u32> {
    let rd = std::fs::read_dir(cpu_dir(root, cpu).join("cache")).ok()?;
    let mut best: Option<(u32, Option<u32>)> = None;
    for e in rd.flatten() {
        let level: u32 = text(&e.path().join("level")).and_then(|s| s.parse().ok()).unwrap_or(0);
        if best.is_none_or(|(l, _)| level > l) {
            best = Some((level, text(&e.path().join("id")).and_then(|s| s.parse().ok())));
        }
    }
    best.and_then(|(_, id)| id)
}

/// The topology of each of `cpus`.
pub fn topology(root: &Path, cpus: &[u32]) -> Vec<CpuTopology> {
    cpus.iter().map(|&c| cpu_topology(root, c)).collect()
}

/// The NUMA nodes with CPUs, each with its CPU list (`node/nodeN/cpulist`), sorted by node.
pub fn numa_nodes(root: &Path) -> Vec<(u32, Vec<u32>)> {
    let mut nodes: Vec<(u32, Vec<u32>)> = std::fs::read_dir(root.join("sys/devices/system/node"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let id: u32 = e.file_name().to_str()?.strip_prefix("node")?.parse().ok()?;
                    Some((id, list(&e.path().join("cpulist"))))
                })
                .collect()
        })
        .unwrap_or_default();
    nodes.sort();
    nodes
}

/// A network interface and the NUMA node of the device behind it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NicLocality {
    pub name: String,
    /// `None`: a virtual interface (no device), a single-node machine (-1), or unreadable.
    pub node: Option<u32>,
    /// The PCI (or other bus) address of the device, when there is one.
    pub device: Option<String>,
}

/// Every interface in /sys/class/net with its device's NUMA node, sorted by name.
pub fn nic_locality(root: &Path) -> Vec<NicLocality> {
    let mut nics: Vec<NicLocality> = std::fs::read_dir(root.join("sys/class/net"))
        .map(|rd| {
            rd.flatten()
                .map(|e| {
                    let dev = e.path().join("device");
                    let node = text(&dev.join("numa_node")).and_then(|s| s.parse::<i64>().ok()).and_then(|n| u32::try_from(n).ok());
                    let device = std::fs::read_link(&dev).ok().and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()));
                    NicLocality { name: e.file_name().to_string_lossy().into_owned(), node, device }
                })
                .collect()
        })
        .unwrap_or_default();
    nics.sort_by(|a, b| a.name.cmp(&b.name));
    nics
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Writes `text` to `rel` under a sysfs-shaped test tree, creating the directories.
    pub(crate) fn w(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn reads_a_two_socket_smt_layout() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        // CPUs 0-3: socket 0 (node 0), 4-7: socket 1 (node 1); siblings n and n+2 within a socket.
        for cpu in 0..8u32 {
            let base = format!("sys/devices/system/cpu/cpu{cpu}");
            let (pkg, first) = if cpu < 4 { (0, 0) } else { (1, 4) };
            let core = (cpu - first) % 2;
            w(r, &format!("{base}/topology/core_id"), &format!("{core}\n"));
            w(r, &format!("{base}/topology/physical_package_id"), &format!("{pkg}\n"));
            w(r, &format!("{base}/topology/thread_siblings_list"), &format!("{},{}\n", first + core, first + core + 2));
            w(r, &format!("{base}/cache/index2/level"), "2\n");
            w(r, &format!("{base}/cache/index2/shared_cpu_list"), &format!("{},{}\n", first + core, first + core + 2));
            w(r, &format!("{base}/cache/index3/level"), "3\n");
            w(r, &format!("{base}/cache/index3/shared_cpu_list"), &format!("{}-{}\n", first, first + 3));
            std::fs::create_dir_all(r.join(format!("{base}/node{pkg}"))).unwrap();
        }
        w(r, "sys/devices/system/node/node0/cpulist", "0-3\n");
        w(r, "sys/devices/system/node/node1/cpulist", "4-7\n");
        w(r, "sys/class/net/ens1f0/device/numa_node", "1\n");
        w(r, "sys/class/net/lo/addr_len", "6\n");
        w(r, "sys/class/net/eth0/device/numa_node", "-1\n");

        let t = cpu_topology(r, 5);
        assert_eq!(t, CpuTopology { cpu: 5, core_id: Some(1), package: Some(1), node: Some(1), smt_siblings: vec![5, 7], llc: vec![4, 5, 6, 7] });
        assert_eq!(numa_nodes(r), vec![(0, vec![0, 1, 2, 3]), (1, vec![4, 5, 6, 7])]);
        let nics = nic_locality(r);
        assert_eq!(nics.iter().map(|n| (n.name.as_str(), n.node)).collect::<Vec<_>>(), vec![("ens1f0", Some(1)), ("eth0", None), ("lo", None)]);
        // A CPU with no topology files is its own core.
        assert_eq!(cpu_topology(r, 9).smt_siblings, vec![9]);
    }

    #[test]
    fn reads_this_host() {
        let t = topology(Path::new("/"), &[0]);
        assert!(t[0].smt_siblings.contains(&0));
    }
}
