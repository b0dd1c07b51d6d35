//! PCI devices given to workloads (the spec's `devices`): resolved on this host before anything is
//! applied — a device that does not exist, is bound to no driver, or is named by two workloads is
//! refused with the fix — then their IRQs steered to the workload's CPUs (journaled like every IRQ
//! rule) and their device nodes passed into the workload's OCI container (`oci::add_devices`).
//! Reading sysfs and /dev is `rtslice_sys::pci`'s.

use std::collections::BTreeMap;
use std::path::Path;

use rtslice_sys::pci::{pci_device, PciDevice};

use crate::error::{HostError, Result};
use crate::setup::{Launch, Setup};
use crate::txn::Txn;

/// The resolved devices of each workload that has any, by workload name.
pub(crate) type Resolved = BTreeMap<String, Vec<PciDevice>>;

/// Reads every device of `setup` under `root` ("/" on a host). Refused (nothing touched yet): a
/// device missing, without a driver, named twice, or a vfio-pci device whose group node is absent.
/// Warnings: what a container will not get (a network interface is not a device node).
pub(crate) fn resolve(root: &Path, setup: &Setup) -> Result<(Resolved, Vec<String>)> {
    let mut out = Resolved::new();
    let mut warnings = Vec::new();
    let mut owner: BTreeMap<rtslice_sys::pci::PciAddress, &str> = BTreeMap::new();
    for w in setup.workloads.iter().filter(|w| !w.devices.is_empty()) {
        let mut devs = Vec::new();
        for d in &w.devices {
            if let Some(other) = owner.insert(d.pci, &w.name) {
                return Err(HostError::Rejected(format!(
                    "workloads {other} and {} both name PCI device {}; a device serves one workload (remove it from one)",
                    w.name, d.pci
                )));
            }
            let dev = pci_device(root, d.pci).map_err(|e| HostError::Rejected(format!("workload {}: {e}", w.name)))?;
            let Some(driver) = &dev.driver else {
                return Err(HostError::Rejected(format!(
                    "workload {}: PCI device {} ({:04x}:{:04x}) is bound to no driver, so nothing can use it; bind it — for \
                     passthrough to a container's DPDK/FlexRAN: `modprobe vfio-pci; echo vfio-pci > \
                     /sys/bus/pci/devices/{}/driver_override; echo {} > /sys/bus/pci/drivers_probe` (or `driverctl \
                     set-override {} vfio-pci`), else load its kernel driver",
                    w.name, d.pci, dev.vendor, dev.device_id, d.pci, d.pci, d.pci
                )));
            };
            let oci = matches!(w.launch, Launch::Oci(_));
            // Its group's node (/dev/vfio/<group>), or the per-device cdev (/dev/vfio/devices/vfioN) of
            // kernels built without the group interface.
            if driver == "vfio-pci" && !dev.nodes.iter().any(|n| n.path.starts_with("/dev/vfio/") && n.path != Path::new("/dev/vfio/vfio")) {
                return Err(HostError::Rejected(format!(
                    "workload {}: PCI device {} is bound to vfio-pci but its IOMMU group ({}) has no node in /dev/vfio; \
                     enable the IOMMU (intel_iommu=on / amd_iommu=on on the kernel command line) or, without one, \
                     `modprobe vfio enable_unsafe_noiommu_mode=1` and rebind the device",
                    w.name,
                    d.pci,
                    dev.iommu_group.map_or("none".to_string(), |g| g.to_string())
                )));
            }
            if oci && dev.nodes.is_empty() {
                warnings.push(format!(
                    "workload {}: PCI device {} (driver {driver}) has no device node, so nothing of it is passed into the \
                     container (a network interface stays in the host's network namespace); bind it to vfio-pci to pass \
                     the device itself",
                    w.name, d.pci
                ));
            }
            if dev.irqs.is_empty() && d.irq_cpus.is_some() && driver == "vfio-pci" {
                warnings.push(format!(
                    "workload {}: PCI device {} has no IRQ vectors yet (vfio-pci allocates them when the program using it \
                     enables them, after apply): they get /proc/irq/default_smp_affinity (`rtslice tune` sets it to the \
                     housekeeping CPUs)",
                    w.name, d.pci
                ));
            }
            devs.push(dev);
        }
        out.insert(w.name.clone(), devs);
    }
    Ok((out, warnings))
}

/// Sets the affinity of every IRQ of every device whose workload steers them (`irq_cpus`),
/// journaled. An IRQ the kernel manages (its affinity is the kernel's spread of a multi-queue
/// device: the write is refused with EPERM) is left as it is, with a warning: a device mixes managed
/// queue vectors with unmanaged ones, and the user cannot choose per vector.
pub(crate) fn steer_irqs(txn: &mut Txn, setup: &Setup, resolved: &Resolved, warnings: &mut Vec<String>) -> std::result::Result<(), (String, HostError)> {
    for w in &setup.workloads {
        for d in &w.devices {
            let Some(cpus) = &d.irq_cpus else { continue };
            let Some(dev) = resolved.get(&w.name).and_then(|v| v.iter().find(|x| x.address == d.pci)) else { continue };
            let mut managed = Vec::new();
            for &irq in &dev.irqs {
                match txn.write_if_changed(&crate::irq::affinity_file(irq), &cpus.to_string()) {
                    Ok(()) => {}
                    Err(HostError::Write { source, .. }) if source.raw_os_error() == Some(libc::EPERM) => managed.push(irq),
                    Err(e) => return Err((format!("IRQ {irq} of PCI device {} ({}) affinity {cpus}", d.pci, w.name), e)),
                }
            }
            if !managed.is_empty() {
                warnings.push(format!(
                    "workload {}: IRQ(s) {} of PCI device {} are managed by the kernel (spread over all CPUs, affinity not \
                     writable) and were left as they are; boot with isolcpus=managed_irq,<reserved CPUs> to keep managed \
                     IRQs off reserved CPUs",
                    w.name,
                    managed.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
                    d.pci
                ));
            }
        }
    }
    Ok(())
}

/// The device nodes of a workload's PCI devices, each once (what its OCI container gets).
pub(crate) fn nodes_of(resolved: &Resolved, workload: &str) -> Vec<rtslice_sys::pci::DeviceNode> {
    let mut nodes: Vec<_> = resolved.get(workload).into_iter().flatten().flat_map(|d| d.nodes.iter().cloned()).collect();
    nodes.sort_by(|a, b| a.path.cmp(&b.path));
    nodes.dedup_by(|a, b| a.path == b.path);
    nodes
}

/// The IRQ affinity files `steer_irqs` writes for `setup` (devices whose workload steers their IRQs).
pub(crate) fn irq_files(setup: &Setup, resolved: &Resolved) -> Vec<std::path::PathBuf> {
    setup
        .workloads
        .iter()
        .flat_map(|w| w.devices.iter().filter(|d| d.irq_cpus.is_some()).map(move |d| (w, d)))
        .filter_map(|(w, d)| resolved.get(&w.name)?.iter().find(|x| x.address == d.pci))
        .flat_map(|dev| dev.irqs.iter().map(|&irq| crate::irq::affinity_file(irq)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::setup::{DeviceSetup, WorkloadSetup};

    fn setup(workloads: &[(&str, &str, Launch)]) -> Setup {
        Setup {
            workloads: workloads
                .iter()
                .map(|(name, pci, launch)| WorkloadSetup {
                    name: name.to_string(),
                    devices: vec![DeviceSetup { pci: pci.parse().unwrap(), irq_cpus: None }],
                    launch: launch.clone(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn refusals_and_warnings_name_the_device_and_the_fix() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        // A netdev VF bound to iavf (no device node), and a function with no driver.
        let vf = r.join("sys/bus/pci/devices/0000:3b:02.1");
        std::fs::create_dir_all(&vf).unwrap();
        std::fs::create_dir_all(r.join("sys/bus/pci/drivers/iavf")).unwrap();
        std::os::unix::fs::symlink(r.join("sys/bus/pci/drivers/iavf"), vf.join("driver")).unwrap();
        std::fs::create_dir_all(r.join("sys/bus/pci/devices/0000:3b:02.2")).unwrap();
        let oci = Launch::Oci(Default::default());

        let (resolved, warnings) = resolve(r, &setup(&[("du", "0000:3b:02.1", oci.clone())])).unwrap();
        assert_eq!(resolved["du"][0].driver.as_deref(), Some("iavf"));
        assert!(warnings[0].contains("no device node") && warnings[0].contains("vfio-pci"), "{warnings:?}");
        // The same device outside a container: nothing to pass, nothing to warn about.
        assert!(resolve(r, &setup(&[("du", "0000:3b:02.1", Launch::None)])).unwrap().1.is_empty());

        let e = resolve(r, &setup(&[("a", "0000:3b:02.1", Launch::None), ("b", "3b:02.1", Launch::None)])).unwrap_err().to_string();
        assert!(e.contains("a and b both name PCI device 0000:3b:02.1"), "{e}");
        let e = resolve(r, &setup(&[("a", "0000:3b:02.2", Launch::None)])).unwrap_err().to_string();
        assert!(e.contains("bound to no driver") && e.contains("driver_override"), "{e}");
        let e = resolve(r, &setup(&[("a", "0000:3b:02.3", Launch::None)])).unwrap_err().to_string();
        assert!(e.starts_with("rejected before touching anything") && e.contains("no PCI device 0000:3b:02.3"), "{e}");
    }
}
