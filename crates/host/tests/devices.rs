//! PCI devices given to workloads, on the real kernel: every PCI device of this machine resolved
//! and checked against what /proc/interrupts and /dev say on their own; a device's IRQs following
//! its workload's CPUs and restored by reset; a missing or driverless device refused before anything
//! is touched; a device's node usable inside a runc container; the node giving a device to one
//! workload at a time. Each test says why when it skips
//! (Firecracker with virtio-mmio has no PCI bus; a qemu guest whose root is 9p has no block node).

mod common;

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::time::Duration;

use common::*;
use rtslice_host::{
    apply_setup, reset, status, ApplyOptions, CpuList, DeviceSetup, HostError, Launch, Node, NodeOptions, OciLaunch, ResetOptions, Setup,
    StateDir, WorkloadSetup,
};
use rtslice_sys::pci::{pci_device, NodeKind, PciAddress, PciDevice};
use rtslice_testkit::{root_or_skip, skip, KernelLock};

/// Every PCI function of this machine, read by rtslice-sys; `None` (said why) without a PCI bus.
fn pci_devices() -> Option<Vec<PciDevice>> {
    let Ok(rd) = std::fs::read_dir("/sys/bus/pci/devices") else {
        skip::skip(skip::PCI, "no /sys/bus/pci/devices: this machine has no PCI bus (e.g. Firecracker with virtio-mmio only)");
        return None;
    };
    let mut addrs: Vec<PciAddress> = rd.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect();
    addrs.sort();
    let devs: Vec<PciDevice> = addrs.iter().map(|a| pci_device(Path::new("/"), *a).unwrap_or_else(|e| panic!("{a}: {e}"))).collect();
    if devs.is_empty() {
        skip::skip(skip::PCI, "/sys/bus/pci/devices is empty: no PCI device on this machine");
        return None;
    }
    Some(devs)
}

/// The IRQs /proc/interrupts attributes to `addr` through its MSI domain. Kernels name it two ways:
/// by the device (`PCI-MSIX-0000:00:04.0 0-edge`, per-device MSI domains, 6.2+), or by the global
/// PCI-MSI domain with the hardware IRQ number (`PCI-MSI 65536-edge`, 6.1), which encodes the
/// device as `(domain << 27) | (bus << 19) | (devfn << 11) | vector` (pci_msi_domain_calc_hwirq).
fn msi_irqs_in_proc_interrupts(addr: PciAddress) -> Vec<u32> {
    let text = std::fs::read_to_string("/proc/interrupts").unwrap();
    let chip = format!("-{addr}");
    let devfn = (u64::from(addr.device) << 3) | u64::from(addr.function);
    let want = (u64::from(addr.domain) << 16) | (u64::from(addr.bus) << 8) | devfn;
    let ours = |line: &str| {
        let tokens: Vec<&str> = line.split_whitespace().collect();
        tokens.iter().enumerate().any(|(i, t)| {
            if !t.starts_with("PCI-MSI") {
                return false;
            }
            if t.ends_with(&chip) {
                return true;
            }
            // The global domain: the next token is `<hwirq>-edge` (or `-level`).
            tokens.get(i + 1).and_then(|h| h.split('-').next()?.parse::<u64>().ok()).is_some_and(|hwirq| hwirq >> 11 == want)
        })
    };
    let mut v: Vec<u32> = text.lines().filter(|l| ours(l)).filter_map(|l| l.trim_start().split(':').next()?.trim().parse().ok()).collect();
    v.sort_unstable();
    v
}

#[test]
fn every_pci_device_resolves_as_the_kernel_says() {
    let Some(devs) = pci_devices() else { return };
    let (mut with_driver, mut nodes, mut irqs) = (0, 0, 0);
    for d in &devs {
        let dir = Path::new("/sys/bus/pci/devices").join(d.address.to_string());
        let driver = std::fs::read_link(dir.join("driver")).ok().map(|l| l.file_name().unwrap().to_string_lossy().into_owned());
        assert_eq!(d.driver, driver, "{}", d.address);
        with_driver += usize::from(driver.is_some());
        let vendor = std::fs::read_to_string(dir.join("vendor")).unwrap();
        assert_eq!(format!("0x{:04x}", d.vendor), vendor.trim(), "{}", d.address);
        // MSI vectors are listed under the device's MSI chip in /proc/interrupts.
        if dir.join("msi_irqs").is_dir() && std::fs::read_dir(dir.join("msi_irqs")).unwrap().next().is_some() {
            assert_eq!(d.irqs, msi_irqs_in_proc_interrupts(d.address), "{}: msi_irqs vs /proc/interrupts", d.address);
        }
        irqs += d.irqs.len();
        for n in &d.nodes {
            let md = std::fs::metadata(&n.path).unwrap_or_else(|e| panic!("{}: {}: {e}", d.address, n.path.display()));
            let kind = if md.file_type().is_block_device() { NodeKind::Block } else { NodeKind::Char };
            assert!(md.file_type().is_block_device() || md.file_type().is_char_device(), "{}", n.path.display());
            assert_eq!(kind, n.kind, "{}", n.path.display());
            assert_eq!((libc::major(md.rdev()), libc::minor(md.rdev())), (n.major, n.minor), "{}", n.path.display());
            // The kernel's own index of device numbers agrees.
            let class = if kind == NodeKind::Block { "block" } else { "char" };
            assert!(Path::new(&format!("/sys/dev/{class}/{}:{}", n.major, n.minor)).exists(), "{}", n.path.display());
            nodes += 1;
        }
    }
    eprintln!("{} PCI device(s), {with_driver} bound to a driver, {irqs} IRQ(s), {nodes} device node(s)", devs.len());
    for d in &devs {
        eprintln!(
            "  {} {:04x}:{:04x} driver {} iommu group {:?} node {:?} irqs {:?} nodes {:?}",
            d.address,
            d.vendor,
            d.device_id,
            d.driver.as_deref().unwrap_or("-"),
            d.iommu_group,
            d.numa_node,
            d.irqs,
            d.nodes.iter().map(|n| format!("{} {}:{}", n.path.display(), n.major, n.minor)).collect::<Vec<_>>()
        );
    }
}

/// The cgroup of `pid` in the v1 hierarchy of `controller` ("" when there is none).
fn cgroup_of_controller(pid: i32, controller: &str) -> String {
    read(format!("/proc/{pid}/cgroup"))
        .lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
            ctrls.split(',').any(|c| c == controller).then(|| path.to_string())
        })
        .unwrap_or_default()
}

/// A workload on the last online CPU given `dev`, its IRQs steered there.
fn device_setup(name: &str, dev: &PciDevice, launch: Launch) -> (Setup, String) {
    let cpu = rtslice_host::facts::online_cpus().iter().last().unwrap().to_string();
    let ws = WorkloadSetup {
        name: name.into(),
        cpus: CpuList::parse(&cpu).unwrap(),
        devices: vec![DeviceSetup { pci: dev.address, irq_cpus: Some(CpuList::parse(&cpu).unwrap()) }],
        launch,
        ..Default::default()
    };
    (Setup { workloads: vec![ws], ..Default::default() }, cpu)
}

/// Whether the kernel lets IRQ `n`'s affinity be written (managed IRQs refuse even their own value).
fn movable(n: u32) -> bool {
    let f = rtslice_host::irq::affinity_file(n);
    std::fs::read_to_string(&f).map(|cur| std::fs::write(&f, cur.trim()).is_ok()).unwrap_or(false)
}

/// A PCI device bound to a driver with an IRQ whose affinity can be written; `None` having skipped.
fn device_with_a_movable_irq() -> Option<PciDevice> {
    let dev = pci_devices()?.into_iter().find(|d| d.driver.is_some() && d.irqs.iter().any(|&i| movable(i)));
    if dev.is_none() {
        skip::skip(skip::PCI_IRQ, "no PCI device bound to a driver has an IRQ whose affinity can be written (all managed, or none)");
    }
    dev
}

#[test]
fn a_devices_irqs_follow_its_workload_and_reset_restores_them() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let Some(dev) = &device_with_a_movable_irq() else { return };
    let (setup, cpu) = device_setup(&format!("dev-irq-{}", std::process::id()), dev, Launch::None);
    let before = snapshot();
    let dir = tempfile::tempdir().unwrap();
    let opts = ApplyOptions::with_state_dir(dir.path());
    let applied = apply_setup(&setup, &opts).unwrap_or_else(|e| panic!("{}: {e}", dev.address));
    let _cleanup = reset_on_drop(dir.path());
    let (mut moved, mut managed) = (0, 0);
    for &irq in &dev.irqs {
        let now = read(rtslice_host::irq::affinity_file(irq));
        if movable(irq) {
            assert_eq!(now, cpu, "IRQ {irq} of {}", dev.address);
            moved += 1;
        } else {
            managed += 1;
            assert!(applied.warnings.iter().any(|w| w.contains("managed by the kernel") && w.contains(&irq.to_string())), "{:?}", applied.warnings);
        }
    }
    let st = status(&StateDir::new(dir.path())).unwrap();
    assert!(st.drift.is_empty(), "{:?}", st.drift);
    eprintln!("{} ({}): {moved} IRQ(s) moved to CPU {cpu}, {managed} managed left alone; {} change(s) journaled", dev.address, dev.driver.as_deref().unwrap_or("-"), applied.changes);
    reset(&StateDir::new(dir.path()), ResetOptions::default()).unwrap();
    assert_restored(&before);
}

/// A PCI device through the node: its IRQs follow the workload that names it; a second workload
/// naming it is refused with the holder named and nothing changes; removing the holder puts every
/// IRQ's affinity back, after which the other may take the device.
#[test]
fn the_node_gives_a_device_to_one_workload_at_a_time_and_puts_its_irqs_back() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let Some(dev) = &device_with_a_movable_irq() else { return };
    let before = snapshot();
    let affinities = || dev.irqs.iter().map(|&i| read(rtslice_host::irq::affinity_file(i))).collect::<Vec<_>>();
    let original = affinities();
    let dir = tempfile::tempdir().unwrap();
    let _cleanup = reset_on_drop(dir.path());
    let (node, _) = Node::open(NodeOptions::with_state_dir(dir.path())).expect("open the node");
    let id = std::process::id();
    let (a, cpu) = device_setup(&format!("dev-a-{id}"), dev, Launch::None);
    let (b, _) = device_setup(&format!("dev-b-{id}"), dev, Launch::None);
    node.deploy(&a).unwrap_or_else(|e| panic!("deploy a with {}: {e}", dev.address));
    for &irq in dev.irqs.iter().filter(|&&i| movable(i)) {
        assert_eq!(read(rtslice_host::irq::affinity_file(irq)), cpu, "IRQ {irq} of {} on a's CPU", dev.address);
    }
    assert!(node.status(&a.workloads[0].name).unwrap().drift.is_empty());
    let snap = snapshot();
    match node.deploy(&b) {
        Err(HostError::Rejected(why)) => assert!(why.contains("serves workload") && why.contains(&a.workloads[0].name), "{why}"),
        other => panic!("a second workload naming {}: expected a refusal, got {:?}", dev.address, other.map(|r| r.name)),
    }
    assert_restored(&snap);
    node.remove(&a.workloads[0].name).expect("remove a");
    assert_eq!(affinities(), original, "every IRQ of {} put back", dev.address);
    node.deploy(&b).expect("b takes the device once a is gone");
    node.reset().expect("reset");
    assert_eq!(affinities(), original);
    assert_restored(&before);
}

#[test]
fn a_missing_or_driverless_device_is_refused_before_anything_is_touched() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let absent: PciAddress = "ffff:ff:1f.7".parse().unwrap();
    assert!(!Path::new("/sys/bus/pci/devices").join(absent.to_string()).exists());
    let fake = PciDevice { address: absent, vendor: 0, device_id: 0, driver: None, iommu_group: None, numa_node: None, irqs: vec![], nodes: vec![] };
    let mut cases = vec![(fake, "no PCI device ffff:ff:1f.7")];
    // Without a PCI bus pci_devices() has recorded that skip; the absent device's half still runs.
    match pci_devices().map(|devs| devs.into_iter().find(|d| d.driver.is_none())) {
        Some(Some(d)) => cases.push((d, "is bound to no driver")),
        Some(None) => skip::skip(skip::PCI_DRIVERLESS, "the driverless half: every PCI device here is bound to a driver"),
        None => {}
    }
    for (dev, says) in cases {
        let (setup, _) = device_setup(&format!("dev-refused-{}", std::process::id()), &dev, Launch::None);
        let before = snapshot();
        let dir = tempfile::tempdir().unwrap();
        let e = apply_setup(&setup, &ApplyOptions::with_state_dir(dir.path())).unwrap_err();
        assert!(matches!(e, HostError::Rejected(_)), "{e}");
        let msg = e.to_string();
        assert!(msg.contains(says) && (msg.contains("lspci -D") || msg.contains("drivers_probe")), "{msg}");
        assert!(StateDir::new(dir.path()).load().unwrap().is_none_or(|s| s.changes.is_empty()), "nothing journaled");
        assert_restored(&before);
        eprintln!("{}: {msg}", dev.address);
    }
}

#[test]
fn a_containers_device_node_and_its_cgroup_rule_are_there_and_it_reads_where_the_host_can() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let Some(runc) = rtslice_host::oci::find_runc() else {
        skip::skip("runc", "runc not installed (make deps installs it)");
        return;
    };
    let Some(devs) = pci_devices() else { return };
    // A block node can be read harmlessly (its first sector) to prove the cgroup's device rule.
    let Some((dev, node)) = devs.iter().find_map(|d| Some((d, d.nodes.iter().find(|n| n.kind == NodeKind::Block)?.clone()))) else {
        skip::skip(skip::PCI_BLOCK, "no PCI device here has a block device node (a guest whose root is on 9p has none)");
        return;
    };
    let bundle = tempfile::tempdir().unwrap();
    rtslice_host::oci::busybox_bundle(bundle.path()).expect("busybox bundle");
    let script = format!("head -c 512 {} > /tmp/sector 2> /tmp/err; echo $? > /tmp/rc; while :; do sleep 1; done", node.path.display());
    let launch = Launch::Oci(OciLaunch { bundle: bundle.path().into(), args: vec!["sh".into(), "-c".into(), script], netns: true, seccomp: true, id: None });
    let (setup, _) = device_setup(&format!("dev-oci-{}", std::process::id()), dev, launch);
    let before = snapshot();
    let dir = tempfile::tempdir().unwrap();
    let opts = ApplyOptions { runc: Some(runc), ..ApplyOptions::with_state_dir(dir.path()) };
    let applied = apply_setup(&setup, &opts).unwrap_or_else(|e| panic!("{e}"));
    let _cleanup = reset_on_drop(dir.path());
    let pid = applied.workloads[0].pids[0].pid;
    let root = format!("/proc/{pid}/root");
    assert!(wait_until(Duration::from_secs(10), || Path::new(&format!("{root}/tmp/rc")).exists() && !read(format!("{root}/tmp/rc")).is_empty()), "the container did not run its script");
    let inside = std::fs::metadata(format!("{root}{}", node.path.display())).unwrap();
    assert!(inside.file_type().is_block_device());
    assert_eq!((libc::major(inside.rdev()), libc::minor(inside.rdev())), (node.major, node.minor));
    // The container's device rule: v1's devices.list shows it (v2 enforces it with a BPF program).
    let devices_list = Path::new("/sys/fs/cgroup/devices").join(cgroup_of_controller(pid, "devices").trim_start_matches('/')).join("devices.list");
    if devices_list.exists() {
        let rules = read(&devices_list);
        assert!(rules.lines().any(|l| l == format!("b {}:{} rwm", node.major, node.minor)), "{}: {rules}", devices_list.display());
    }
    // Reading it proves the rule end to end, where the host itself may read it: some sandboxes
    // (this development VM) refuse any open of the boot disk, to root on the host as well.
    let mut buf = [0u8; 512];
    match std::fs::File::open(&node.path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut buf)) {
        Ok(()) => {
            assert_eq!(read(format!("{root}/tmp/rc")), "0", "reading {} inside the container failed: {}", node.path.display(), read(format!("{root}/tmp/err")));
            assert_eq!(std::fs::metadata(format!("{root}/tmp/sector")).unwrap().len(), 512);
            assert_eq!(std::fs::read(format!("{root}/tmp/sector")).unwrap(), buf.to_vec(), "the same first sector inside and outside");
        }
        Err(e) => eprintln!(
            "reading {} is refused on the host itself ({e}), so the read inside (\"{}\") proves nothing; checked: the node and the cgroup rule",
            node.path.display(),
            read(format!("{root}/tmp/err"))
        ),
    }
    eprintln!("{}: {} ({}:{}) is in the container with the host's numbers", dev.address, node.path.display(), node.major, node.minor);
    reset(&StateDir::new(dir.path()), ResetOptions::default()).unwrap();
    assert_restored(&before);
}
