//! Cache allocation through the whole apply path — spec → plan → setup → `apply_setup` (real
//! cgroups, a real launched process) → `reset` — with resctrl's root pointed at a plain directory
//! shaped like resctrl. This machine has no resctrl (no `resctrl` in /proc/filesystems, no
//! `rdt_a`/`cat_l3` CPU flag; qemu cannot emulate RDT), so the resctrl side is NOT the kernel's:
//! the files are what rtslice writes, checked and restored; the kernel's own checks (a refused
//! mask, a thread really changing its CLOSID) are not exercised here. On a host with resctrl,
//! `RTSLICE_TEST_RESCTRL=/sys/fs/resctrl` runs the same test against the kernel's. The node's
//! cache allocation (one workload at a time, the default group derived from the deployed set) is
//! tested the same way.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use rtslice_host::{apply_setup, reset, setup_from_plan, ApplyOptions, Fault, HostError, Node, NodeOptions, OciDefaults, ResetOptions};
use rtslice_testkit::resctrl::{host_has_resctrl, make, snapshot, xeon_2s};
use rtslice_testkit::{root_or_skip, KernelLock};

/// The resctrl root under test: the kernel's when asked for and present, else a shaped directory.
fn resctrl_root() -> (PathBuf, Option<tempfile::TempDir>) {
    if let Ok(root) = std::env::var("RTSLICE_TEST_RESCTRL") {
        assert!(host_has_resctrl(), "RTSLICE_TEST_RESCTRL is set but this host has no resctrl L3");
        return (PathBuf::from(root), None);
    }
    eprintln!(
        "NOTE: resctrl here is a directory shaped like it, not the kernel's (this host: resctrl in /proc/filesystems: {}, RDT CPU flags: {:?})",
        rtslice_sys::resctrl::kernel_supports(),
        rtslice_sys::resctrl::cpu_flags()
    );
    let d = tempfile::tempdir().unwrap();
    // The L3 domains are this host's (its CPUs' cache ids): a 4-vCPU qemu guest has one L3 per
    // vCPU, this VM one for both CPUs; a fixture with other ids would describe another machine.
    make(d.path(), &rtslice_testkit::resctrl::ResctrlInfo { domains: host_l3_domains(), ..xeon_2s() });
    (d.path().to_path_buf(), Some(d))
}

fn online() -> Vec<u32> {
    rtslice_host::facts::online_cpus().iter().collect()
}

/// The L3 domain of `cpu` as resctrl would number it (0 where sysfs gives no cache id).
fn l3_of(cpu: u32) -> u32 {
    rtslice_sys::topology::llc_id(Path::new("/"), cpu).unwrap_or(0)
}

/// This host's L3 domains, sorted: the ids resctrl's schemata lines would name.
fn host_l3_domains() -> Vec<u32> {
    let mut domains: Vec<u32> = online().iter().map(|&c| l3_of(c)).collect();
    domains.sort_unstable();
    domains.dedup();
    domains
}

/// The CPU the test's workload runs on (the last online one, never housekeeping CPU 0 on a host of
/// several) and its L3 domain: the schemata lines name that domain only.
fn workload_cpu() -> (u32, u32) {
    let cpu = *online().last().unwrap();
    (cpu, l3_of(cpu))
}

/// A best-effort workload launched as `sleep`, with 3 exclusive ways and a 30% bandwidth ceiling.
fn setup_for(root: &Path, name: &str) -> rtslice_host::Setup {
    let online = online();
    let (cpu, _) = workload_cpu();
    let cache = rtslice_host::resctrl::Resctrl::new(root).discover(Path::new("/"), &online).unwrap().expect("an L3 to allocate");
    let spec = rtslice_spec::parse(
        &format!(
            "apiVersion: rtslice/v1\nworkloads:\n  - name: {name}\n    launch: {{command: [sleep, '60']}}\n    demand: {{bestEffort: {{cpus: [{cpu}]}}}}\n    cache: {{ways: 3}}\n    memoryBandwidth: 30%\n"
        ),
        "t.yaml",
    )
    .unwrap();
    let plan = rtslice_plan::plan(&spec, &rtslice_plan::NodeFacts { online, cache: Some(cache), ..Default::default() });
    assert!(plan.rejected.is_empty(), "{:?}", plan.rejected);
    setup_from_plan(&plan, OciDefaults::default()).unwrap()
}

/// Kernel values apply may touch (cgroups, IRQs…), as the other real-kernel tests snapshot them.
fn snapshot_kernel() -> std::collections::BTreeMap<String, String> {
    common::snapshot()
}

fn opts(state: &Path, root: &Path, fault: Fault) -> ApplyOptions {
    ApplyOptions { resctrl: Some(root.to_path_buf()), fault, ..ApplyOptions::with_state_dir(state) }
}

#[test]
fn apply_creates_the_group_moves_the_launched_thread_and_reset_restores_resctrl_and_cgroups() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let (root, _keep) = resctrl_root();
    let kernel_before = snapshot_kernel();
    let resctrl_before = snapshot(&root);
    let name = format!("cat-{}", std::process::id());
    let setup = setup_for(&root, &name);
    let state = tempfile::tempdir().unwrap();
    let applied = apply_setup(&setup, &opts(state.path(), &root, Fault::default())).expect("apply");
    let _cleanup = reset_on_drop(state.path());
    let group = root.join(format!("rtslice-{name}"));
    let pid = applied.workloads[0].pids[0].pid;
    // 11 ways with the top two shareable: the bottom three are the workload's, the default keeps 7f8.
    let (_, d) = workload_cpu();
    assert_eq!(l3_mask(&group.join("schemata"), d), 0x7);
    assert_eq!(entry(&group.join("schemata"), "MB", d), "30");
    // The default group's line names every domain: narrowed where the workload runs, whole elsewhere.
    for x in host_l3_domains() {
        assert_eq!(l3_mask(&root.join("schemata"), x), if x == d { 0x7f8 } else { 0x7ff }, "default group, L3 {x}");
    }
    // `sleep` has one thread: its id is the last (only) one written.
    assert_eq!(read(group.join("tasks")), pid.to_string());
    reset(&rtslice_host::StateDir::new(state.path()), ResetOptions::default()).expect("reset");
    assert_eq!(snapshot(&root), resctrl_before, "resctrl as found");
    assert_restored(&kernel_before);
}

#[test]
fn a_fault_at_every_change_of_a_cache_apply_rolls_back_resctrl_exactly() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let (root, _keep) = resctrl_root();
    let resctrl_before = snapshot(&root);
    let kernel_before = snapshot_kernel();
    let name = format!("catf-{}", std::process::id());
    let setup = setup_for(&root, &name);
    let total = {
        let state = tempfile::tempdir().unwrap();
        let a = apply_setup(&setup, &opts(state.path(), &root, Fault::default())).expect("apply");
        reset(&rtslice_host::StateDir::new(state.path()), ResetOptions::default()).unwrap();
        a.changes
    };
    assert!(total >= 4, "narrow + group + schemata + task at least, got {total}");
    // Fail at every change in turn, until an apply makes them all with the fault index past the last
    // one. (The base's record of the default group's ways, kept by the node after the deploy, is
    // counted in `total` but made by no step a fault can hit.)
    for k in 0.. {
        let state = tempfile::tempdir().unwrap();
        let e = match apply_setup(&setup, &opts(state.path(), &root, Fault { fail_change: Some(k) })) {
            Ok(a) => {
                assert!(k + 1 >= total && a.changes == total, "no fault left to inject at change {k} of {total}");
                reset(&rtslice_host::StateDir::new(state.path()), ResetOptions::default()).unwrap();
                assert_eq!(snapshot(&root), resctrl_before);
                assert_restored(&kernel_before);
                break;
            }
            Err(e) => e,
        };
        assert!(e.to_string().contains("everything this run changed was rolled back"), "#{k}: {e}");
        assert!(!e.to_string().contains("except:"), "#{k}: {e}");
        assert_eq!(snapshot(&root), resctrl_before, "fault at change #{k}: resctrl");
        assert_restored(&kernel_before);
    }
}

/// Three workloads on the test CPU planned together — `a` 4 ways, `b` a 30% bandwidth ceiling in the
/// default group's ways, `c` 2 ways — each as the setup of one node deploy.
fn node_setups(root: &Path, tag: &str) -> Vec<rtslice_host::Setup> {
    let online = online();
    let (cpu, _) = workload_cpu();
    let cache = rtslice_host::resctrl::Resctrl::new(root).discover(Path::new("/"), &online).unwrap().expect("an L3 to allocate");
    let w = |n: &str, asks: &str| {
        format!("  - name: {n}-{tag}\n    launch: {{command: [sleep, '60']}}\n    demand: {{bestEffort: {{cpus: [{cpu}]}}}}\n{asks}")
    };
    let text = format!(
        "apiVersion: rtslice/v1\nworkloads:\n{}{}{}",
        w("a", "    cache: {ways: 4}\n"),
        w("b", "    memoryBandwidth: 30%\n"),
        w("c", "    cache: {ways: 2}\n")
    );
    let plan = rtslice_plan::plan(&rtslice_spec::parse(&text, "t.yaml").unwrap(), &rtslice_plan::NodeFacts { online, cache: Some(cache), ..Default::default() });
    assert!(plan.rejected.is_empty(), "{:?}", plan.rejected);
    plan.workloads
        .iter()
        .map(|wp| {
            let mut one = plan.clone();
            one.workloads.retain(|x| x.name == wp.name);
            setup_from_plan(&one, OciDefaults::default()).unwrap()
        })
        .collect()
}

/// The value of resource `res` (`L3`, `MB`) for domain `d` in the schemata `file`.
fn entry(file: &Path, res: &str, d: u32) -> String {
    let text = read(file);
    let prefix = format!("{res}:");
    let line = text.lines().map(str::trim).find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("{}: no {res} line in {text:?}", file.display()));
    let e = line[prefix.len()..].split(';').find(|e| e.starts_with(&format!("{d}="))).unwrap_or_else(|| panic!("{line}: no domain {d}"));
    e[format!("{d}=").len()..].to_string()
}

/// The L3 mask of `file`'s line for domain `d`, as a number.
fn l3_mask(file: &Path, d: u32) -> u64 {
    u64::from_str_radix(&entry(file, "L3", d), 16).unwrap()
}

#[test]
fn the_node_narrows_the_default_group_per_workload_and_removal_in_any_order_restores_it() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let (root, _keep) = resctrl_root();
    let resctrl_before = snapshot(&root);
    let kernel_before = snapshot_kernel();
    let (_, d) = workload_cpu();
    let setups = node_setups(&root, &std::process::id().to_string());
    let names: Vec<String> = setups.iter().map(|s| s.workloads[0].name.clone()).collect();
    let group = |i: usize| root.join(format!("rtslice-{}", names[i])).join("schemata");
    let state = tempfile::tempdir().unwrap();
    let opts = NodeOptions { resctrl: Some(root.clone()), grace: std::time::Duration::from_secs(2), ..NodeOptions::with_state_dir(state.path()) };
    // Declared before the node, so dropped after it (the open node holds the state's lock).
    let _cleanup = rtslice_testkit::OnDrop::new(|| match Node::open(opts.clone()) {
        Ok((n, _)) => {
            if let Err(e) = n.reset() {
                eprintln!("cleanup: node reset failed: {e}");
            }
        }
        Err(e) => eprintln!("cleanup: cannot open the node: {e}"),
    });
    let (mut node, _) = Node::open(opts.clone()).expect("open the node");
    let no_drift = |node: &Node| {
        for n in node.names() {
            let st = node.status(&n).unwrap();
            assert!(st.drift.is_empty(), "{n}: {:?}", st.drift);
        }
        assert!(node.base_status().unwrap().drift.is_empty(), "base: {:?}", node.base_status().unwrap().drift);
    };
    // 11 ways, the top two shareable: a's 4 at the bottom, c's 2 above them; b's ceiling alone
    // takes no way and follows the default group's.
    node.deploy(&setups[0]).expect("deploy a");
    assert_eq!((l3_mask(&group(0), d), l3_mask(&root.join("schemata"), d)), (0x00f, 0x7f0));
    node.deploy(&setups[1]).expect("deploy b");
    assert_eq!(l3_mask(&group(1), d), 0x7f0);
    assert_eq!(entry(&group(1), "MB", d), "30");
    let a_files = (read(group(0)), node.record(&names[0]).unwrap().unwrap().workloads[0].pids.clone());
    node.deploy(&setups[2]).expect("deploy c");
    assert_eq!((l3_mask(&group(2), d), l3_mask(&root.join("schemata"), d), l3_mask(&group(1), d)), (0x030, 0x7c0, 0x7c0));
    assert_eq!((read(group(0)), node.record(&names[0]).unwrap().unwrap().workloads[0].pids.clone()), a_files, "a untouched by c's deploy");
    // Every thread of each workload is in its group (a plain file keeps the last id written).
    for (i, n) in names.iter().enumerate() {
        let pid = node.record(n).unwrap().unwrap().workloads[0].pids[0].pid;
        assert_eq!(read(group(i).with_file_name("tasks")), pid.to_string(), "{n}'s thread in its group");
    }
    no_drift(&node);
    // A resize keeps what a workload holds: b's plan names the default group's ways as they were
    // when it was planned (7f0 before c, here) — the same holding, as its L3 line follows the
    // default; a with other ways is refused before anything changes.
    let mut b_then = setups[1].clone();
    b_then.workloads[0].cache.as_mut().unwrap().l3.iter_mut().for_each(|m| m.mask = 0x7f0);
    node.resize(&b_then).expect("resize b, planned with the default's ways of another moment");
    assert_eq!(l3_mask(&group(1), d), 0x7c0, "b's L3 line is still the default's");
    let mut a_other = setups[0].clone();
    a_other.workloads[0].cache.as_mut().unwrap().l3.iter_mut().for_each(|m| m.mask = 0x780);
    let e = node.resize(&a_other).unwrap_err().to_string();
    assert!(e.contains("cannot change its cache ways"), "{e}");
    assert_eq!(l3_mask(&group(0), d), 0x00f);
    no_drift(&node);

    // A fault at every change of a deploy that claims ways: only that deploy is undone.
    node.remove(&names[2]).expect("remove c");
    let (base_resctrl, base_kernel) = (snapshot(&root), snapshot_kernel());
    let total = {
        node.deploy(&setups[2]).expect("deploy c");
        let n = node.status(&names[2]).unwrap().changes;
        node.remove(&names[2]).expect("remove c");
        n
    };
    assert_eq!(snapshot(&root), base_resctrl, "a clean deploy and removal of c leave resctrl as they found it");
    for k in 0..total {
        node.set_fault(Fault { fail_change: Some(k) });
        let e = node.deploy(&setups[2]).unwrap_err();
        assert!(matches!(&e, HostError::StepFailed { rollback_errors, .. } if rollback_errors.is_empty()), "#{k}: {e}");
        assert!(e.to_string().contains(&format!("injected fault at change #{k}")), "#{k}: {e}");
        node.set_fault(Fault::default());
        assert_eq!(snapshot(&root), base_resctrl, "fault at change #{k}: resctrl");
        assert_restored(&base_kernel);
    }
    eprintln!("deploy of c: {total} changes, each failed in turn, each rolled back exactly");
    node.deploy(&setups[2]).expect("deploy c");

    // The bottom of the stack goes first: its ways are free, the default keeps one run (7c0) and
    // waits for a grant of the hole; b's line follows it, c keeps its ways.
    node.remove(&names[0]).expect("remove a");
    assert_eq!((l3_mask(&root.join("schemata"), d), l3_mask(&group(1), d), l3_mask(&group(2), d)), (0x7c0, 0x7c0, 0x030));
    no_drift(&node);
    node.remove(&names[2]).expect("remove c");
    assert_eq!((l3_mask(&root.join("schemata"), d), l3_mask(&group(1), d)), (0x7ff, 0x7ff));
    no_drift(&node);
    node.remove(&names[1]).expect("remove b");
    assert!(!group(1).exists() && !group(0).exists() && !group(2).exists(), "every group removed");
    // A plain file keeps what was written last: the node's own line until the base's undo puts the
    // file back as it was (the kernel would read back the same masks either way).
    assert_eq!(l3_mask(&root.join("schemata"), d), 0x7ff);
    node.reset().expect("reset the node");
    assert_eq!(snapshot(&root), resctrl_before, "resctrl as found");
    assert_restored(&kernel_before);
}
