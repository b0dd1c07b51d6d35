//! `tune` against the real kernel (root, KernelLock): applied then reset leaves every knob as it was,
//! and a failure injected at any step rolls back exactly. Knobs this machine lacks (cpufreq and
//! cpuidle in a VM) are exercised on a copy of the sysfs layout where real hardware would have them.

use std::path::Path;

use rtslice_host::tune::{self, FileKind, HugepageRequest, Knob, Thp, TuneRequest};
use rtslice_host::{reset, CpuList, Fault, HostError, ResetOptions, StateDir};
use rtslice_testkit::{root_or_skip, skip, KernelLock, OnDrop};

/// Resets whatever tuning `dir` holds when dropped, also on a panic: a panic between apply and
/// reset would drop the tempdir (and its journal), and the host would stay tuned (timer migration,
/// IRQ and workqueue masks, RT runtime, THP, hugepages) for every test after it.
fn undo_tuning_on_drop(dir: &Path) -> OnDrop<impl FnOnce()> {
    let sd = StateDir::new(dir);
    OnDrop::new(move || {
        if tune::tuning_state_dir(&sd).file().exists() {
            if let Err(e) = tune::reset_tuning(&sd) {
                eprintln!("cleanup: resetting the tuning in {} failed: {e}", sd.path.display());
            }
        }
    })
}

/// Housekeeping CPU 0, the other online CPUs reserved; every knob asked to change something.
fn real_request() -> Option<TuneRequest> {
    let online = rtslice_host::facts::online_cpus();
    if !skip::cpus_or_skip(2) {
        return None;
    }
    let hk = CpuList::from_cpus([0]);
    let mut req = TuneRequest::new(online.difference(&hk), hk);
    // A THP mode other than the current one, so the selection file is written and restored.
    let thp_now = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    req.thp = Some(if thp_now.contains("[never]") { Thp::Madvise } else { Thp::Never });
    let rt: i64 = std::fs::read_to_string("/proc/sys/kernel/sched_rt_runtime_us").unwrap().trim().parse().unwrap();
    // Raised: on RT_GROUP_SCHED kernels the global runtime cannot drop below the root group's (EINVAL).
    req.rt_runtime_us = Some(if rt < 0 { 950_000 } else { (rt + 10_000).min(1_000_000) });
    let hp = Path::new("/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages");
    if let Ok(n) = std::fs::read_to_string(hp) {
        let n: u64 = n.trim().parse().unwrap();
        req.hugepages.push(HugepageRequest { node: 0, size_kb: 2048, count: n + 2 });
    }
    req.max_idle_latency_us = 0;
    Some(req)
}

#[test]
fn tune_then_reset_leaves_every_knob_as_it_was() {
    root_or_skip!();
    let _k = KernelLock::acquire();
    let Some(req) = real_request() else { return };
    let dir = tempfile::tempdir().unwrap();
    let sd = StateDir::new(dir.path());
    let _undo = undo_tuning_on_drop(dir.path());
    let before = tune::snapshot(&req);

    let tuned = tune::apply_tuning(&req, &sd, Fault::default()).unwrap();
    assert!(tuned.changes > 0, "{tuned:#?}");
    for w in tuned.plan.writes.iter().filter(|w| w.needed()) {
        let now = std::fs::read_to_string(&w.path).unwrap();
        let now = now.trim();
        let shows = match (w.kind, w.knob) {
            (FileKind::Selection, _) => now.contains(&format!("[{}]", w.wanted)),
            (_, Knob::IrqDefaultAffinity | Knob::WorkqueueCpumask) => CpuList::parse_mask(now) == CpuList::parse_mask(&w.wanted),
            (_, Knob::WatchdogCpumask) => CpuList::parse(now) == CpuList::parse(&w.wanted),
            _ => now == w.wanted,
        };
        assert!(shows, "{} reads {now:?} after tune wrote {:?}", w.path.display(), w.wanted);
    }
    let during = tune::snapshot(&req);
    assert_ne!(before, during, "tune changed nothing");
    // What this machine lacks is said, not silently skipped.
    let first = req.reserved.iter().next().unwrap();
    if !Path::new(&format!("/sys/devices/system/cpu/cpu{first}/cpufreq")).exists() {
        assert!(tuned.plan.absent.iter().any(|a| a.knob == Knob::Governor && a.reason.contains("no cpufreq")), "{:?}", tuned.plan.absent);
    }
    if !Path::new(&format!("/sys/devices/system/cpu/cpu{first}/cpuidle")).exists() {
        assert!(tuned.plan.absent.iter().any(|a| a.knob == Knob::Cstates && a.reason.contains("no cpuidle")), "{:?}", tuned.plan.absent);
    }
    // Tuning twice is refused (the journal would lose the first old values).
    let again = tune::apply_tuning(&req, &sd, Fault::default()).unwrap_err();
    assert!(matches!(again, HostError::Rejected(_)), "{again}");

    let report = reset(&sd, ResetOptions::default()).unwrap();
    assert_eq!(report.undone, tuned.changes);
    assert_eq!(tune::snapshot(&req), before);
    assert!(!tune::tuning_state_dir(&sd).file().exists());
}

#[test]
fn a_failure_at_any_tuning_step_rolls_back_exactly() {
    root_or_skip!();
    let _k = KernelLock::acquire();
    let Some(req) = real_request() else { return };
    let dir = tempfile::tempdir().unwrap();
    let sd = StateDir::new(dir.path());
    let _undo = undo_tuning_on_drop(dir.path());
    let before = tune::snapshot(&req);
    let n = tune::apply_tuning(&req, &sd, Fault::default()).unwrap().changes;
    tune::reset_tuning(&sd).unwrap();
    assert_eq!(tune::snapshot(&req), before);
    assert!(n >= 4, "expected several writes on this host, got {n}");
    for step in 0..n {
        let e = tune::apply_tuning(&req, &sd, Fault { fail_change: Some(step) }).unwrap_err();
        match &e {
            HostError::StepFailed { rollback_errors, .. } => assert!(rollback_errors.is_empty(), "step {step}: {e}"),
            other => panic!("step {step}: expected a failed step, got {other}"),
        }
        assert_eq!(tune::snapshot(&req), before, "step {step} left a change behind");
        assert!(!tune::tuning_state_dir(&sd).file().exists(), "step {step} left a journal");
    }
    // The workload journal's reset leaves a tuning alone when asked only for it, and vice versa.
    assert!(reset(&sd, ResetOptions::default()).unwrap().nothing_applied);
}

/// The sysfs files of a 4-CPU machine with cpufreq and cpuidle (absent from this VM), as regular files.
fn fake_host(root: &Path) {
    let w = |rel: &str, text: &str| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    w("sys/devices/system/cpu/online", "0-3\n");
    for cpu in 0..4 {
        let d = format!("sys/devices/system/cpu/cpu{cpu}");
        w(&format!("{d}/cpufreq/scaling_governor"), "powersave\n");
        w(&format!("{d}/cpufreq/scaling_available_governors"), if cpu == 3 { "powersave\n" } else { "performance powersave\n" });
        w(&format!("{d}/power/pm_qos_resume_latency_us"), "0\n");
        for (i, (name, lat)) in [("POLL", 0), ("C1", 2), ("C1E", 10), ("C6", 133)].iter().enumerate() {
            w(&format!("{d}/cpuidle/state{i}/name"), &format!("{name}\n"));
            w(&format!("{d}/cpuidle/state{i}/latency"), &format!("{lat}\n"));
            w(&format!("{d}/cpuidle/state{i}/disable"), "0\n");
        }
    }
    w("sys/devices/system/cpu/intel_pstate/status", "active\n");
    w("proc/sys/kernel/timer_migration", "1\n");
    w("proc/irq/default_smp_affinity", "f\n");
    w("proc/sys/kernel/watchdog_cpumask", "0-3\n");
    // A regular file cannot show the kernel's "always [madvise] never" after a write: it holds the choice.
    w("sys/kernel/mm/transparent_hugepage/enabled", "madvise\n");
    w("proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 nohz_full=1-3 skew_tick=1\n");
    // No workqueue cpumask: an old kernel.
}

#[test]
fn present_knobs_are_written_and_absent_ones_said() {
    let dir = tempfile::tempdir().unwrap();
    fake_host(dir.path());
    let mut req = TuneRequest::new(CpuList::parse("1-3").unwrap(), CpuList::parse("0").unwrap());
    req.root = dir.path().to_path_buf();
    req.max_idle_latency_us = 5;
    let plan = tune::plan_tuning(&req).unwrap();
    let paths = |k: Knob| -> Vec<String> {
        plan.writes.iter().filter(|w| w.knob == k).map(|w| w.path.strip_prefix(dir.path()).unwrap().display().to_string()).collect()
    };
    // Governor on 1 and 2; CPU 3's driver has no `performance`, which is said.
    assert_eq!(paths(Knob::Governor).len(), 2);
    assert!(plan.absent.iter().any(|a| a.knob == Knob::Governor && a.reason.contains("cpu3")));
    // C-states deeper than 5 µs (C1E, C6) disabled on the reserved CPUs only; POLL and C1 stay.
    let cstates = paths(Knob::Cstates);
    assert_eq!(cstates.len(), 6, "{cstates:?}");
    assert!(cstates.iter().all(|p| p.ends_with("state2/disable") || p.ends_with("state3/disable")));
    assert!(!cstates.iter().any(|p| p.contains("cpu0/")));
    assert!(plan.writes.iter().any(|w| w.knob == Knob::PmQos && w.wanted == "5"));
    assert!(plan.absent.iter().any(|a| a.knob == Knob::WorkqueueCpumask));
    // Boot parameters: nohz_full and skew_tick are there; the rest is to add, intel_pstate included.
    let add = plan.cmdline_to_add();
    assert_eq!(add, "isolcpus=managed_irq,domain,1-3 rcu_nocbs=1-3 irqaffinity=0 intel_pstate=passive");

    let sd = StateDir::new(dir.path().join("state"));
    let before = tune::snapshot(&req);
    let tuned = tune::apply_tuning(&req, &sd, Fault::default()).unwrap();
    let read = |rel: &str| std::fs::read_to_string(dir.path().join(rel)).unwrap();
    assert_eq!(read("sys/devices/system/cpu/cpu1/cpufreq/scaling_governor"), "performance");
    assert_eq!(read("sys/devices/system/cpu/cpu3/cpufreq/scaling_governor"), "powersave\n");
    assert_eq!(read("sys/devices/system/cpu/cpu2/cpuidle/state3/disable"), "1");
    assert_eq!(read("sys/devices/system/cpu/cpu0/cpuidle/state3/disable"), "0\n");
    assert_eq!(read("proc/irq/default_smp_affinity"), "00000001");
    assert_eq!(read("sys/kernel/mm/transparent_hugepage/enabled"), "never");
    assert_eq!(tuned.changes, plan.writes.iter().filter(|w| w.needed()).count());
    reset(&sd, ResetOptions::default()).unwrap();
    assert_eq!(tune::snapshot(&req), before);
}

#[test]
fn bad_requests_are_refused_before_anything() {
    let dir = tempfile::tempdir().unwrap();
    fake_host(dir.path());
    let with = |r: &str, h: &str| {
        let mut req = TuneRequest::new(CpuList::parse(r).unwrap(), CpuList::parse(h).unwrap());
        req.root = dir.path().to_path_buf();
        req
    };
    let msg = |req: TuneRequest| tune::plan_tuning(&req).unwrap_err().to_string();
    assert!(msg(with("1-3", "")).contains("housekeeping"));
    assert!(msg(with("", "0")).contains("reserved CPUs"));
    assert!(msg(with("0-3", "0")).contains("both reserved and housekeeping"));
    assert!(msg(with("1-7", "0")).contains("not online"));
    let mut req = with("1-3", "0");
    req.hugepages.push(HugepageRequest { node: 5, size_kb: 2048, count: 1 });
    assert!(msg(req).contains("no such node"));
}
