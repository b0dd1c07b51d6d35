//! SCHED_DEADLINE in tests: where a deadline task can be admitted, whether one is admitted now,
//! and what holds the bandwidth when it is not.

use std::path::Path;

use rtslice_sys::sched::SchedAttr;

/// The CPUs a deadline task's affinity must span to be admitted outside any partition: the root
/// domain of the CPUs not boot-isolated (all of them here; 0-3 in the matrix's isolcpus guest).
pub fn admission_cpus() -> Vec<u32> {
    let isolated = rtslice_sys::procfs::isolated_cpus().unwrap_or_default();
    rtslice_sys::procfs::online_cpus().expect("online CPUs").into_iter().filter(|c| !isolated.contains(c)).collect()
}

/// Whether the kernel admits a new 1 % deadline task (100 µs every 10 ms) on [`admission_cpus`]
/// now; `Err` says why not and what holds deadline bandwidth ([`state`]). A test calls it after
/// removing a deadline workload: a removal that corrupts the root domain's accounting (a negative
/// total after a late release) makes every later admission fail with EBUSY, for good.
///
/// An EPERM (the probe's affinity does not span its root domain) is retried for a second, each
/// refusal printed with where the probe was: once in a full matrix run in the 6.12-rt guest it came
/// right after a removal and the same probe alone passed; the corruption this probe is for does not
/// go away by waiting, so the retry cannot hide it.
pub fn probe_admission() -> Result<(), String> {
    let mut last = String::new();
    for attempt in 0..10 {
        if attempt > 0 {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        match probe_once() {
            Ok(()) => {
                if attempt > 0 {
                    eprintln!("deadline probe: admitted on attempt {} after: {last}", attempt + 1);
                }
                return Ok(());
            }
            Err((true, why)) => {
                eprintln!("deadline probe: attempt {} refused: {why}", attempt + 1);
                last = why;
            }
            Err((_, why)) => return Err(why),
        }
    }
    Err(last)
}

/// One probe; `Err((eperm, why))`.
fn probe_once() -> Result<(), (bool, String)> {
    let mut probe = std::process::Command::new("sleep").arg("30").spawn().map_err(|e| (false, format!("spawn sleep: {e}")))?;
    let tid = probe.id() as i32;
    let cpus = admission_cpus();
    let result = rtslice_sys::sched::set_affinity(tid, cpus.iter().copied())
        .map_err(|e| (false, format!("affinity {cpus:?}: {e}")))
        .and_then(|()| {
            let dl = SchedAttr::Deadline { runtime_ns: 100_000, deadline_ns: 10_000_000, period_ns: 10_000_000, reclaim: false };
            rtslice_sys::sched::set_attr(tid, dl)
                .map_err(|e| (e.kind() == std::io::ErrorKind::PermissionDenied, format!("a 1 % deadline task on CPUs {cpus:?}: {e}\n{}\n{}", where_it_is(tid), state())))
        });
    // Back to SCHED_OTHER before the kill: the bandwidth is given back at once, not at a timer.
    let _ = rtslice_sys::sched::set_attr(tid, SchedAttr::Other { nice: 0 });
    let _ = probe.kill();
    let _ = probe.wait();
    result
}

/// Where a refused task runs: the kernel admits a deadline task only if its effective affinity (its
/// own, masked by its cpuset) spans its CPU's root domain (EPERM otherwise).
fn where_it_is(tid: i32) -> String {
    let affinity = rtslice_sys::sched::get_affinity(tid).map(|c| format!("{c:?}")).unwrap_or_else(|e| e.to_string());
    let cgroup = rtslice_sys::procfs::cgroup_membership(tid).unwrap_or_default();
    let v2 = cgroup.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or("");
    let effective = std::fs::read_to_string(format!("/sys/fs/cgroup{v2}/cpuset.cpus.effective")).unwrap_or_default();
    format!(
        "the probe {tid}: effective affinity {affinity}, last on CPU {:?}, cgroup {:?} (v2 cpuset.cpus.effective {:?})",
        rtslice_sys::procfs::last_cpu(tid),
        cgroup.trim(),
        effective.trim()
    )
}

/// What holds deadline bandwidth now, for a refused admission: every SCHED_DEADLINE thread, the
/// cpuset partitions (each its own root domain), and the root domains' accounting where debugfs
/// shows it (the matrix's guests; this host locks debugfs).
pub fn state() -> String {
    let mut out = Vec::new();
    for p in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        for t in std::fs::read_dir(p.path().join("task")).into_iter().flatten().flatten() {
            let Ok(tid) = t.file_name().to_string_lossy().parse::<i32>() else { continue };
            if let Ok(a @ rtslice_sys::sched::SchedAttr::Deadline { .. }) = rtslice_sys::sched::get_attr(tid) {
                let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
                let state = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
                let state = state.rsplit_once(") ").map(|(_, r)| r.chars().next().unwrap_or('?')).unwrap_or('?');
                out.push(format!("deadline thread {tid} {} ({state}): {a:?}", comm.trim()));
            }
        }
    }
    fn partitions(dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let part = std::fs::read_to_string(e.path().join("cpuset.cpus.partition")).unwrap_or_default();
                if !part.trim().is_empty() && part.trim() != "member" {
                    let cpus = std::fs::read_to_string(e.path().join("cpuset.cpus.effective")).unwrap_or_default();
                    out.push(format!("partition {}: {} cpus {}", e.path().display(), part.trim(), cpus.trim()));
                }
                partitions(&e.path(), out);
            }
        }
    }
    partitions(Path::new("/sys/fs/cgroup"), &mut out);
    for d in ["/sys/kernel/debug/sched/debug", "/proc/sched_debug"] {
        if let Ok(text) = std::fs::read_to_string(d) {
            out.extend(text.lines().filter(|l| l.contains("dl_bw") || l.starts_with("cpu#")).map(|l| format!("{d}: {}", l.trim())));
            break;
        }
    }
    if out.is_empty() {
        "no SCHED_DEADLINE thread, no cpuset partition, no readable root-domain accounting".into()
    } else {
        out.join("\n")
    }
}

