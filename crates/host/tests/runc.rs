//! A runc container launched with an RT budget: the budget shows in its cgroup and its SCHED_FIFO
//! spinner is throttled to its share. The bundle is built at test time from Debian's busybox-static.

mod common;

use std::time::Duration;

use common::*;
use rtslice_host::Mechanism;
use rtslice_host::sched::{self, SchedAttr};
use rtslice_host::{apply_setup, reset, status, ApplyOptions, CpuList, Launch, OciLaunch, ResetOptions, Reservation, Setup, StateDir, ThreadRule, WorkloadSetup};
use rtslice_testkit::{root_or_skip, KernelLock};

/// A runc-launched busybox spinner (SCHED_FIFO 10 by rule) on CPU 1 with a 30 ms / 100 ms
/// reservation, in its own network namespace; `None` (with the reason printed) when this host lacks
/// runc, a second CPU or `mechanism`.
fn spinner_container(prefix: &str, mechanism: Mechanism, bundle: &std::path::Path) -> Option<(String, Setup, ApplyOptions)> {
    let Some(runc) = rtslice_host::oci::find_runc() else {
        eprintln!("SKIPPED: runc not installed (make deps installs it)");
        return None;
    };
    if rtslice_host::doctor::online_cpus().len() < 2 || !rtslice_host::doctor().mechanisms.contains(&mechanism) {
        eprintln!("SKIPPED: needs 2 CPUs and the {mechanism} mechanism");
        return None;
    }
    rtslice_host::oci::busybox_bundle(bundle).expect("busybox bundle");
    let name = format!("{prefix}-{}", std::process::id());
    let setup = Setup {
        workloads: vec![WorkloadSetup {
            name: name.clone(),
            cpus: CpuList::parse("1").unwrap(),
            reservation: Some(Reservation::from_micros(30_000, 100_000)),
            threads: vec![ThreadRule { name: "^sh$".into(), policy: Some(SchedAttr::Fifo { priority: 10 }), cpus: None, budget_share: None }],
            launch: Launch::Oci(OciLaunch {
                bundle: bundle.into(),
                args: vec!["sh".into(), "-c".into(), "while :; do :; done".into()],
                netns: true,
                seccomp: true,
                id: None,
            }),
            ..Default::default()
        }],
        ..Default::default()
    };
    let opts = ApplyOptions { mechanism: Some(mechanism), runc: Some(runc), ..ApplyOptions::default() };
    Some((name, setup, opts))
}

/// The spinner container applied under `mechanism` with a state directory of its own, and what the
/// tests need to check and undo it; `None` when this host lacks what [`spinner_container`] needs.
/// Fields drop in order: the reset first, then the directories it used.
struct AppliedSpinner {
    _cleanup: ResetOnDrop,
    dir: tempfile::TempDir,
    _bundle: tempfile::TempDir,
    name: String,
    /// The container's id and its first process.
    id: String,
    pid: i32,
    /// The kernel state before apply, for [`assert_same`] after reset.
    before: std::collections::BTreeMap<String, String>,
}

fn apply_spinner(prefix: &str, mechanism: Mechanism) -> Option<AppliedSpinner> {
    let bundle = tempfile::tempdir().unwrap();
    let (name, setup, opts) = spinner_container(prefix, mechanism, bundle.path())?;
    let before = snapshot();
    let dir = tempfile::tempdir().unwrap();
    let opts = ApplyOptions { state_dir: StateDir::new(dir.path()), ..opts };
    let applied = apply_setup(&setup, &opts).expect("apply");
    let cleanup = ResetOnDrop::new(dir.path());
    let id = applied.workloads[0].container.clone().unwrap();
    let pid = applied.workloads[0].pids[0].pid;
    Some(AppliedSpinner { _cleanup: cleanup, dir, _bundle: bundle, name, id, pid, before })
}

#[test]
fn runc_container_with_rt_budget_is_throttled_to_its_share() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let Some(spinner) = apply_spinner("ctr", Mechanism::RtGroup) else { return };
    let AppliedSpinner { name, id, pid, before, dir, .. } = &spinner;
    let pid = *pid;
    let ctr = format!("/sys/fs/cgroup/cpu/rtslice/{name}/{id}");
    assert_eq!(read(format!("{ctr}/cpu.rt_runtime_us")), "30000", "runc wrote the budget into the container's cgroup");
    assert_eq!(read(format!("{ctr}/cpu.rt_period_us")), "100000");
    assert_eq!(read(format!("/sys/fs/cgroup/cpuset/rtslice/{name}/{id}/cpuset.cpus")), "1");
    assert!(read(format!("/proc/{pid}/cgroup")).contains(&format!("/rtslice/{name}/{id}")));
    assert_eq!(sched::get_attr(pid).unwrap(), SchedAttr::Fifo { priority: 10 });
    // Its own network namespace.
    assert_ne!(std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap(), std::fs::read_link("/proc/self/ns/net").unwrap());
    let share = measure_share(pid, Duration::from_secs(2));
    eprintln!("MEASURED: runc SCHED_FIFO spinner with RT budget 30 ms / 100 ms got {:.1}% of CPU 1", share * 100.0);
    assert!(share > 0.15 && share < 0.45, "throttled near 30%: {share}");
    let st = status(&StateDir::new(dir.path())).unwrap();
    assert!(st.drift.is_empty(), "{:?}", st.drift);
    assert_eq!(st.workloads[0].container.as_deref(), Some(id.as_str()));
    reset(&StateDir::new(dir.path()), ResetOptions::default()).unwrap();
    assert!(!std::path::Path::new(&format!("/proc/{pid}/stat")).exists() || read(format!("/proc/{pid}/stat")).contains(") Z"));
    assert_same(&before, &snapshot());
    for h in ["memory", "pids", "freezer", "cpuacct", "unified"] {
        assert!(!std::path::Path::new(&format!("/sys/fs/cgroup/{h}/rtslice")).exists(), "{h}/rtslice removed");
    }
}

/// The same container under the SCHED_DEADLINE mechanism, as on cgroup v2 hosts (no RT groups): runc
/// (cgroupfs driver, no systemd) creates the container's cgroup inside the workload's partition,
/// rtslice turns its FIFO rule into SCHED_DEADLINE with the workload's budget, and reset removes it.
#[test]
fn runc_container_in_a_deadline_partition_is_throttled_to_its_budget() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let Some(spinner) = apply_spinner("dlctr", Mechanism::Deadline) else { return };
    let AppliedSpinner { name, id, pid, before, dir, .. } = &spinner;
    let pid = *pid;
    assert_partition(&name);
    assert_eq!(cgroup_of(pid), format!("/{}/{name}/{id}", parent_name()));
    assert_eq!(read(group(&name).cpuset.join(&id).join("cpuset.cpus")), "1");
    assert_eq!(
        sched::get_attr(pid).unwrap(),
        SchedAttr::Deadline { runtime_ns: 30_000_000, deadline_ns: 100_000_000, period_ns: 100_000_000, reclaim: false }
    );
    assert_ne!(std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap(), std::fs::read_link("/proc/self/ns/net").unwrap());
    let share = measure_share(pid, Duration::from_secs(2));
    eprintln!("MEASURED: runc spinner under SCHED_DEADLINE 30 ms / 100 ms got {:.1}% of CPU 1", share * 100.0);
    assert!(share > 0.10, "it runs: {share}");
    assert!(share < rtslice_testkit::timing_bound("runc deadline share", 0.45, 0.65), "throttled near 30%: {share}");
    let st = status(&StateDir::new(dir.path())).unwrap();
    assert!(st.drift.is_empty(), "{:?}", st.drift);
    reset(&StateDir::new(dir.path()), ResetOptions::default()).unwrap();
    assert!(!std::path::Path::new(&format!("/proc/{pid}/stat")).exists() || read(format!("/proc/{pid}/stat")).contains(") Z"));
    assert_same(&before, &snapshot());
}
