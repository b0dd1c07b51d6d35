//! PCI devices: the address format (pure) and what sysfs says about one device — its driver, IOMMU
//! group, NUMA node, IRQs and the device nodes a container needs to use it.
//!
//! Every reader takes the root of the tree ("/" on a host) so tests read a directory shaped like
//! sysfs and /dev. Unlike [`crate::topology`], absence here is an answer the caller acts on (a device
//! that does not exist, or has no driver, is refused before anything is applied), so a missing
//! device directory is an error naming the fix, and the optional facts are `None`/empty.
//!
//! Which device nodes a device has, decided from the kernel's own records rather than from driver
//! names:
//! - every `dev` file (`MAJOR:MINOR`) in the device's sysfs subtree, symlinks not followed and child
//!   PCI functions (behind a bridge) left out, is a device node the kernel created for it; its name
//!   under /dev is the `DEVNAME` of the `uevent` beside it (what devtmpfs and udev use), and whether
//!   it is a character or a block device is the subsystem it belongs to (`block` or anything else).
//!   That finds a virtio or NVMe disk's block device, a GPU's DRM nodes, a UIO device's `/dev/uioN`,
//!   and the vfio cdev `/dev/vfio/devices/vfioN` of kernels with VFIO_DEVICE_CDEV;
//! - a device bound to `vfio-pci` is used through its IOMMU group's node, which the kernel creates
//!   without the device as parent (so the subtree does not show it): `/sys/class/vfio/<group>` (or
//!   `noiommu-<group>` in VFIO's no-IOMMU mode), plus the container node `/dev/vfio/vfio`
//!   (`/sys/class/misc/vfio`);
//! - a network interface (a VF bound to iavf, …) has no device node: it is not a file to pass.
//!
//! Each node is then `stat`ed under the root's `dev/`: its type and numbers must be the ones sysfs
//! names (major/minor come from the real node, and a node someone replaced is an error).

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::topology::text;
use crate::SysError;

/// A PCI function's address as sysfs names it: `DDDD:BB:DD.F` (domain, bus, device, function).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddress {
    pub domain: u32,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{:04x}:{:02x}:{:02x}.{}", self.domain, self.bus, self.device, self.function)
    }
}

impl FromStr for PciAddress {
    type Err = String;

    /// `0000:3b:02.1` (sysfs, `lspci -D`), or `3b:02.1` (`lspci`'s short form, domain 0); hex
    /// digits in either case. The domain may have more than 4 digits (Intel VMD domains do).
    fn from_str(text: &str) -> Result<PciAddress, String> {
        let t = text.trim();
        let bad = |why: &str| {
            format!("`{t}` is not a PCI address: {why}; write DOMAIN:BUS:DEVICE.FUNCTION as sysfs and `lspci -D` print it, e.g. `0000:3b:02.1`")
        };
        let hex = |s: &str, max_digits: usize, what: &str| -> Result<u32, String> {
            if s.is_empty() || s.len() > max_digits || !s.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(bad(&format!("the {what} must be 1-{max_digits} hex digits")));
            }
            u32::from_str_radix(s, 16).map_err(|_| bad(&format!("the {what} is out of range")))
        };
        let (head, function) = t.rsplit_once('.').ok_or_else(|| bad("no `.FUNCTION`"))?;
        let parts: Vec<&str> = head.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [d, b, s] => (hex(d, 8, "domain")?, hex(b, 2, "bus")?, hex(s, 2, "device")?),
            [b, s] => (0, hex(b, 2, "bus")?, hex(s, 2, "device")?),
            _ => return Err(bad("expected DOMAIN:BUS:DEVICE.FUNCTION")),
        };
        if device > 0x1f {
            return Err(bad("the device number is at most 1f (32 devices per bus)"));
        }
        let function = match function.parse::<u8>() {
            Ok(f) if f <= 7 && function.len() == 1 => f,
            _ => return Err(bad("the function is one digit 0-7")),
        };
        Ok(PciAddress { domain, bus: bus as u8, device: device as u8, function })
    }
}

impl serde::Serialize for PciAddress {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for PciAddress {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Character or block device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    Char,
    Block,
}

/// A device node a container needs to use the device, as it is on this host.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceNode {
    /// Where it is under /dev (`/dev/vfio/12`), which is also where the container sees it.
    pub path: PathBuf,
    pub kind: NodeKind,
    pub major: u32,
    pub minor: u32,
    /// Permission bits, owner and group of the host's node (the container's copy gets the same).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// What sysfs says about one PCI function.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PciDevice {
    pub address: PciAddress,
    /// `vendor`, `device`: the IDs `lspci -n` shows.
    pub vendor: u16,
    pub device_id: u16,
    /// The bound driver (`driver` link's name); `None`: no driver, nothing can use the device.
    pub driver: Option<String>,
    /// The IOMMU group (`iommu_group` link); `None` without an IOMMU.
    pub iommu_group: Option<u32>,
    /// `numa_node`; `None` for -1 (a single-node machine, or firmware that does not say).
    pub numa_node: Option<u32>,
    /// Its interrupts: the MSI/MSI-X vectors (`msi_irqs/*`), else its legacy line (`irq`, when not 0).
    /// A vfio-pci device has vectors only while the program using it has enabled them.
    pub irqs: Vec<u32>,
    /// The device nodes to pass into a container (see the module's description).
    pub nodes: Vec<DeviceNode>,
}

fn hex_id(path: &Path) -> u16 {
    text(path).and_then(|s| u16::from_str_radix(s.trim_start_matches("0x"), 16).ok()).unwrap_or(0)
}

fn link_name(path: &Path) -> Option<String> {
    std::fs::read_link(path).ok().and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()))
}

/// The sysfs directory of a PCI function under `root`.
pub fn device_dir(root: &Path, addr: PciAddress) -> PathBuf {
    root.join("sys/bus/pci/devices").join(addr.to_string())
}

/// Reads one PCI function and the device nodes it needs. Errors: the device is not there (with the
/// fix), or a device node sysfs names is missing from /dev or is not what sysfs says.
pub fn pci_device(root: &Path, addr: PciAddress) -> Result<PciDevice, SysError> {
    let dir = device_dir(root, addr);
    if !dir.exists() {
        return Err(SysError::Read {
            path: dir,
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "no PCI device {addr} on this host; list them with `lspci -D` (an SR-IOV VF exists only after \
                     its VFs are created: `echo N > /sys/bus/pci/devices/<PF>/sriov_numvfs`)"
                ),
            ),
        });
    }
    let driver = link_name(&dir.join("driver"));
    let iommu_group = link_name(&dir.join("iommu_group")).and_then(|g| g.parse().ok());
    let numa_node = text(&dir.join("numa_node")).and_then(|s| s.parse::<i64>().ok()).and_then(|n| u32::try_from(n).ok());
    let mut irqs: Vec<u32> = std::fs::read_dir(dir.join("msi_irqs"))
        .map(|rd| rd.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    irqs.sort_unstable();
    if irqs.is_empty() {
        irqs.extend(text(&dir.join("irq")).and_then(|s| s.parse::<u32>().ok()).filter(|&n| n != 0));
    }
    let mut sysfs_nodes = Vec::new();
    subtree_nodes(&dir, &mut sysfs_nodes);
    if driver.as_deref() == Some("vfio-pci") {
        sysfs_nodes.extend(vfio_nodes(root, iommu_group));
    }
    sysfs_nodes.sort_by(|a, b| a.0.cmp(&b.0));
    sysfs_nodes.dedup_by(|a, b| a.0 == b.0);
    let nodes = sysfs_nodes.into_iter().map(|(name, kind, major, minor)| dev_node(root, &name, kind, major, minor)).collect::<Result<_, _>>()?;
    Ok(PciDevice { address: addr, vendor: hex_id(&dir.join("vendor")), device_id: hex_id(&dir.join("device")), driver, iommu_group, numa_node, irqs, nodes })
}

/// (DEVNAME, kind, major, minor) of a sysfs device directory that has a `dev` file.
fn node_of(dir: &Path) -> Option<(String, NodeKind, u32, u32)> {
    let dev = text(&dir.join("dev"))?;
    let (major, minor) = dev.split_once(':')?;
    let name = text(&dir.join("uevent"))?.lines().find_map(|l| l.strip_prefix("DEVNAME=").map(str::to_string))?;
    let kind = if link_name(&dir.join("subsystem")).as_deref() == Some("block") { NodeKind::Block } else { NodeKind::Char };
    Some((name, kind, major.parse().ok()?, minor.parse().ok()?))
}

/// Every device node below `dir` (itself included), not following symlinks (`driver`, `subsystem`,
/// `iommu_group` lead elsewhere) and not entering child PCI functions (their own devices).
fn subtree_nodes(dir: &Path, out: &mut Vec<(String, NodeKind, u32, u32)>) {
    out.extend(node_of(dir));
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
        let child_function = e.file_name().to_str().is_some_and(|n| n.parse::<PciAddress>().is_ok() && n.contains(':'));
        if is_dir && !child_function {
            subtree_nodes(&e.path(), out);
        }
    }
}

/// The VFIO container node and the node of the device's IOMMU group.
fn vfio_nodes(root: &Path, group: Option<u32>) -> Vec<(String, NodeKind, u32, u32)> {
    let mut out: Vec<_> = node_of(&root.join("sys/class/misc/vfio")).into_iter().collect();
    if let Some(g) = group {
        let class = root.join("sys/class/vfio");
        out.extend([g.to_string(), format!("noiommu-{g}")].iter().find_map(|n| node_of(&class.join(n))));
    }
    out
}

/// The node `name` under the root's `dev/`, checked against what sysfs says it is.
fn dev_node(root: &Path, name: &str, kind: NodeKind, major: u32, minor: u32) -> Result<DeviceNode, SysError> {
    use rustix::fs::FileType;
    let host_path = root.join("dev").join(name);
    let st = rustix::fs::stat(&host_path).map_err(|e| SysError::Read {
        path: host_path.clone(),
        source: std::io::Error::new(
            std::io::Error::from(e).kind(),
            format!(
                "the kernel names device node {name} ({major}:{minor}) but it is not in /dev: is devtmpfs mounted on /dev \
                 (`mount -t devtmpfs devtmpfs /dev`), or did a udev rule rename it?"
            ),
        ),
    })?;
    let found = match FileType::from_raw_mode(st.st_mode) {
        FileType::CharacterDevice => Some(NodeKind::Char),
        FileType::BlockDevice => Some(NodeKind::Block),
        _ => None,
    };
    let (fmaj, fmin) = (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev));
    if found != Some(kind) || (fmaj, fmin) != (major, minor) {
        return Err(SysError::Invalid(format!(
            "{} is {} but the kernel says the device's node is a {} device {major}:{minor}; remove the stale file and let \
             devtmpfs/udev recreate it (`udevadm trigger`)",
            host_path.display(),
            match found {
                Some(k) => format!("a {} device {fmaj}:{fmin}", if k == NodeKind::Char { "character" } else { "block" }),
                None => "not a device node".to_string(),
            },
            if kind == NodeKind::Char { "character" } else { "block" },
        )));
    }
    Ok(DeviceNode {
        path: Path::new("/dev").join(name),
        kind,
        major,
        minor,
        mode: st.st_mode & 0o7777,
        uid: st.st_uid,
        gid: st.st_gid,
    })
}

/// The NUMA node of every PCI function that has one (`numa_node` ≥ 0), bridges left out (nothing is
/// passed through a bridge); sorted by address. Empty on single-node machines (all -1).
pub fn pci_numa_nodes(root: &Path) -> Vec<(PciAddress, u32)> {
    let mut out: Vec<(PciAddress, u32)> = std::fs::read_dir(root.join("sys/bus/pci/devices"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let addr: PciAddress = e.file_name().to_str()?.parse().ok()?;
                    let class = text(&e.path().join("class")).and_then(|c| u32::from_str_radix(c.trim_start_matches("0x"), 16).ok());
                    if class.is_some_and(|c| c >> 16 == 0x06) {
                        return None;
                    }
                    let node = text(&e.path().join("numa_node"))?.parse::<i64>().ok()?;
                    Some((addr, u32::try_from(node).ok()?))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::tests::w;
    use std::os::unix::fs::symlink;

    fn addr(s: &str) -> PciAddress {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_parse_in_sysfs_and_lspci_forms_and_print_as_sysfs_does() {
        assert_eq!(addr("0000:3b:02.1"), PciAddress { domain: 0, bus: 0x3b, device: 2, function: 1 });
        assert_eq!(addr("3B:02.1").to_string(), "0000:3b:02.1");
        assert_eq!(addr("10000:00:1f.7").to_string(), "10000:00:1f.7");
        for bad in ["", "0000:3b:02", "0000:3b:20.1", "0000:3b:02.8", "0000:3b:02.10", "0000:3bb:02.1", "0000:3b:0g.1", "0:0:0:0.0", "0000:3b:02.-1"] {
            let e = bad.parse::<PciAddress>().unwrap_err();
            assert!(e.contains("0000:3b:02.1"), "{bad}: {e}");
        }
        let json = serde_json::to_string(&addr("0000:af:00.0")).unwrap();
        assert_eq!(json, "\"0000:af:00.0\"");
        assert_eq!(serde_json::from_str::<PciAddress>(&json).unwrap(), addr("af:00.0"));
    }

    /// A sysfs/dev tree of: a vfio-pci VF in IOMMU group 12 (node 1, three MSI-X vectors), an NVMe-like
    /// disk with a block node and a partition, a device without a driver, a bridge. The device nodes
    /// are symlinks to /dev/null (character 1:3), the one node every host has, so no mknod is needed.
    fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        let vf = "sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:02.1";
        w(r, &format!("{vf}/vendor"), "0x8086\n");
        w(r, &format!("{vf}/device"), "0x154c\n");
        w(r, &format!("{vf}/class"), "0x020000\n");
        w(r, &format!("{vf}/numa_node"), "1\n");
        w(r, &format!("{vf}/irq"), "0\n");
        for irq in [140, 141, 139] {
            w(r, &format!("{vf}/msi_irqs/{irq}"), "msix\n");
        }
        std::fs::create_dir_all(r.join("sys/bus/pci/drivers/vfio-pci")).unwrap();
        std::fs::create_dir_all(r.join("sys/kernel/iommu_groups/12")).unwrap();
        symlink(r.join("sys/bus/pci/drivers/vfio-pci"), r.join(vf).join("driver")).unwrap();
        symlink(r.join("sys/kernel/iommu_groups/12"), r.join(vf).join("iommu_group")).unwrap();
        w(r, "sys/devices/virtual/misc/vfio/dev", "1:3\n");
        w(r, "sys/devices/virtual/misc/vfio/uevent", "MAJOR=10\nMINOR=196\nDEVNAME=vfio/vfio\n");
        w(r, "sys/devices/virtual/vfio/12/dev", "1:3\n");
        w(r, "sys/devices/virtual/vfio/12/uevent", "DEVNAME=vfio/12\n");
        std::fs::create_dir_all(r.join("sys/class/misc")).unwrap();
        std::fs::create_dir_all(r.join("sys/class/vfio")).unwrap();
        symlink(r.join("sys/devices/virtual/misc/vfio"), r.join("sys/class/misc/vfio")).unwrap();
        symlink(r.join("sys/devices/virtual/vfio/12"), r.join("sys/class/vfio/12")).unwrap();

        let disk = "sys/devices/pci0000:00/0000:00:02.0";
        w(r, &format!("{disk}/numa_node"), "-1\n");
        w(r, &format!("{disk}/irq"), "11\n");
        w(r, &format!("{disk}/class"), "0x010802\n");
        std::fs::create_dir_all(r.join("sys/bus/pci/drivers/nvme")).unwrap();
        std::fs::create_dir_all(r.join("sys/class/block")).unwrap();
        std::fs::create_dir_all(r.join("sys/class/nvme")).unwrap();
        symlink(r.join("sys/bus/pci/drivers/nvme"), r.join(disk).join("driver")).unwrap();
        // The controller's character node, and its namespace's block node: the fixture's block node
        // is the host's first real block device (a block node cannot be faked without mknod).
        w(r, &format!("{disk}/nvme/nvme0/dev"), "1:3\n");
        w(r, &format!("{disk}/nvme/nvme0/uevent"), "MAJOR=1\nMINOR=3\nDEVNAME=nvme0\n");
        symlink(r.join("sys/class/nvme"), r.join(disk).join("nvme/nvme0/subsystem")).unwrap();
        if let Some((name, dev)) = host_block_device() {
            let ns = format!("{disk}/nvme/nvme0/nvme0n1");
            w(r, &format!("{ns}/dev"), &format!("{dev}\n"));
            w(r, &format!("{ns}/uevent"), &format!("DEVNAME={name}\n"));
            symlink(r.join("sys/class/block"), r.join(&ns).join("subsystem")).unwrap();
            let p = r.join("dev").join(&name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            symlink(Path::new("/dev").join(&name), p).unwrap();
        }
        // A loop through a symlink must not be followed.
        symlink(r.join(disk), r.join(disk).join("nvme/nvme0/device")).unwrap();

        let bare = "sys/devices/pci0000:00/0000:00:05.0";
        w(r, &format!("{bare}/numa_node"), "0\n");
        w(r, &format!("{bare}/class"), "0x120000\n");
        let bridge = "sys/devices/pci0000:3a/0000:3a:00.0";
        w(r, &format!("{bridge}/class"), "0x060400\n");
        w(r, &format!("{bridge}/numa_node"), "1\n");
        std::fs::create_dir_all(r.join("sys/bus/pci/devices")).unwrap();
        for (name, at) in [("0000:3b:02.1", vf), ("0000:00:02.0", disk), ("0000:00:05.0", bare), ("0000:3a:00.0", bridge)] {
            symlink(r.join(at), r.join("sys/bus/pci/devices").join(name)).unwrap();
        }
        for node in ["vfio/vfio", "vfio/12", "nvme0"] {
            let p = r.join("dev").join(node);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            symlink("/dev/null", p).unwrap();
        }
        d
    }

    #[test]
    fn a_vfio_device_needs_the_container_and_its_group_node() {
        let d = tree();
        let dev = pci_device(d.path(), addr("0000:3b:02.1")).unwrap();
        assert_eq!(dev.driver.as_deref(), Some("vfio-pci"));
        assert_eq!((dev.vendor, dev.device_id), (0x8086, 0x154c));
        assert_eq!(dev.iommu_group, Some(12));
        assert_eq!(dev.numa_node, Some(1));
        assert_eq!(dev.irqs, vec![139, 140, 141]);
        let paths: Vec<&Path> = dev.nodes.iter().map(|n| n.path.as_path()).collect();
        assert_eq!(paths, vec![Path::new("/dev/vfio/12"), Path::new("/dev/vfio/vfio")]);
        let null = rustix::fs::stat("/dev/null").unwrap();
        assert!(dev.nodes.iter().all(|n| n.kind == NodeKind::Char && (n.major, n.minor) == (1, 3) && n.mode == null.st_mode & 0o7777));
    }

    /// DEVNAME and `MAJOR:MINOR` of a block device of this host that has its node in /dev.
    fn host_block_device() -> Option<(String, String)> {
        std::fs::read_dir("/sys/dev/block").ok()?.flatten().find_map(|e| {
            let dev = text(&e.path().join("dev"))?;
            let name = text(&e.path().join("uevent"))?.lines().find_map(|l| l.strip_prefix("DEVNAME=").map(str::to_string))?;
            Path::new("/dev").join(&name).exists().then_some((name, dev))
        })
    }

    #[test]
    fn other_drivers_pass_the_nodes_of_their_subtree() {
        let d = tree();
        let dev = pci_device(d.path(), addr("0000:00:02.0")).unwrap();
        assert_eq!(dev.driver.as_deref(), Some("nvme"));
        assert_eq!((dev.iommu_group, dev.numa_node), (None, None));
        assert_eq!(dev.irqs, vec![11], "no MSI vectors: the legacy line");
        let nodes: Vec<(String, NodeKind, u32, u32)> = dev.nodes.iter().map(|n| (n.path.display().to_string(), n.kind, n.major, n.minor)).collect();
        assert!(nodes.contains(&("/dev/nvme0".to_string(), NodeKind::Char, 1, 3)), "{nodes:?}");
        match host_block_device() {
            Some((name, numbers)) => {
                assert_eq!(nodes.len(), 2, "{nodes:?}");
                let block = nodes.iter().find(|n| n.1 == NodeKind::Block).expect("the namespace's block node");
                assert_eq!(block.0, format!("/dev/{name}"));
                assert_eq!(format!("{}:{}", block.2, block.3), numbers);
            }
            None => eprintln!("skipped the block-node half: this host has no block device with a node in /dev (/sys/dev/block)"),
        }
    }

    #[test]
    fn a_device_without_driver_or_node_and_a_missing_one() {
        let d = tree();
        let bare = pci_device(d.path(), addr("0000:00:05.0")).unwrap();
        assert_eq!((bare.driver, bare.nodes.len(), bare.irqs.len()), (None, 0, 0));
        let e = pci_device(d.path(), addr("0000:99:00.0")).unwrap_err().to_string();
        assert!(e.contains("no PCI device 0000:99:00.0") && e.contains("lspci -D"), "{e}");
        // Bridges are left out of the NUMA map; devices on -1 have none.
        assert_eq!(pci_numa_nodes(d.path()), vec![(addr("0000:00:05.0"), 0), (addr("0000:3b:02.1"), 1)]);
    }

    #[test]
    fn a_node_that_is_not_what_sysfs_says_is_refused() {
        let d = tree();
        let r = d.path();
        std::fs::remove_file(r.join("dev/vfio/12")).unwrap();
        let e = pci_device(r, addr("0000:3b:02.1")).unwrap_err().to_string();
        assert!(e.contains("vfio/12 (1:3)") && e.contains("devtmpfs"), "{e}");
        std::fs::write(r.join("dev/vfio/12"), "").unwrap();
        let e = pci_device(r, addr("0000:3b:02.1")).unwrap_err().to_string();
        assert!(e.contains("not a device node"), "{e}");
        std::fs::remove_file(r.join("dev/vfio/12")).unwrap();
        symlink("/dev/zero", r.join("dev/vfio/12")).unwrap();
        let e = pci_device(r, addr("0000:3b:02.1")).unwrap_err().to_string();
        assert!(e.contains("character device 1:5") && e.contains("1:3"), "{e}");
    }
}
