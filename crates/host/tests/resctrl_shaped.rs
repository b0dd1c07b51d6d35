//! Cache allocation through the whole apply path — spec → plan → setup → `apply_setup` (real
//! cgroups, a real launched process) → `reset` — with resctrl's root pointed at a plain directory
//! shaped like resctrl. This machine has no resctrl (no `resctrl` in /proc/filesystems, no
//! `rdt_a`/`cat_l3` CPU flag; qemu cannot emulate RDT), so the resctrl side is NOT the kernel's:
//! the files are what rtslice writes, checked and restored; the kernel's own checks (a refused
//! mask, a thread really changing its CLOSID) are not exercised here. On a host with resctrl,
//! `RTSLICE_TEST_RESCTRL=/sys/fs/resctrl` runs the same test against the kernel's.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use rtslice_host::{apply_setup, reset, setup_from_plan, ApplyOptions, Fault, OciDefaults, ResetOptions};
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
    assert_eq!(read(group.join("schemata")), format!("L3:{d}=7\nMB:{d}=30"));
    // The default group's line names every domain: narrowed where the workload runs, whole elsewhere.
    let line: Vec<String> = host_l3_domains().iter().map(|&x| format!("{x}={}", if x == d { "7f8" } else { "7ff" })).collect();
    assert_eq!(read(root.join("schemata")), format!("L3:{}", line.join(";")));
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
    for k in 0..total {
        let state = tempfile::tempdir().unwrap();
        let e = apply_setup(&setup, &opts(state.path(), &root, Fault { fail_change: Some(k) })).unwrap_err();
        assert!(e.to_string().contains("everything this run changed was rolled back"), "#{k}: {e}");
        assert!(!e.to_string().contains("except:"), "#{k}: {e}");
        assert_eq!(snapshot(&root), resctrl_before, "fault at change #{k}: resctrl");
        assert_restored(&kernel_before);
    }
}
