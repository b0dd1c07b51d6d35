//! Real-time bandwidth held on this host by threads and groups rtslice did not place, as the planner
//! takes it (`rtslice_plan::NodeFacts::foreign_rt`) and `rtslice doctor` lists it.
//!
//! The kernel's RT/DEADLINE cap (`sched_rt_runtime_us / sched_rt_period_us` of every CPU) is one
//! budget for everything real-time: another tool's SCHED_DEADLINE threads take part of the admission
//! budget a reservation needs, and FIFO/RR threads (rt-app, a PTP daemon, another vBS) compete with
//! a reservation's FIFO threads for the same CPU time. So the planner must see them:
//! - SCHED_DEADLINE threads: their declared runtime/period, spread over the CPUs they may run on
//!   (the kernel admits them against their root domain);
//! - FIFO/RR threads: they declare nothing, so their CPU time is measured over a sampling window
//!   and spread over their allowed CPUs;
//! - cgroup v1 RT groups outside rtslice's own parent with a budget (`cpu.rt_runtime_us` > 0): the
//!   budget on every CPU (the kernel gives each group its runtime per CPU); the FIFO threads inside
//!   such a group are covered by it and not measured again.
//!
//! Kernel threads are left out (per-CPU housekeeping such as migration/N runs for microseconds), and
//! so are the processes the caller names (rtslice's own workloads, the caller itself).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use rtslice_plan::{ForeignBasis, ForeignRt};
use rtslice_sys::procfs;
use rtslice_sys::sched::{self, SchedAttr};

use crate::cgroup::CgroupLayout;

/// How long FIFO/RR threads are watched by default: long enough to cover a 100 ms period a few
/// times (rt-app's study-B noise runs 6 ms every 100 ms).
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(500);

/// One real-time thread found on the host (before the window's measurement).
#[derive(Clone, Debug)]
struct RtThread {
    pid: u32,
    tid: u32,
    attr: SchedAttr,
    cpus: Vec<u32>,
    oncpu_ns: u64,
}

/// The foreign real-time bandwidth on this host, watched for `window` (FIFO/RR threads' CPU time).
/// `exclude` names processes that are not foreign (rtslice's own workloads); the calling process is
/// always excluded. Threads that vanish during the window are dropped; nothing here fails, a host
/// where nothing can be read simply has no foreign bandwidth listed.
pub fn foreign_rt(window: Duration, exclude: &[u32]) -> Vec<ForeignRt> {
    let me = std::process::id();
    let online: Vec<u32> = crate::facts::online_cpus().iter().collect();
    let groups = rt_groups();
    let in_budgeted_group = |pid: u32| -> bool {
        let Some(text) = procfs::cgroup_membership(pid as i32) else { return false };
        text.lines().any(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, ctrls, path) = (parts.next(), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            ctrls.split(',').any(|c| c == "cpu") && groups.iter().any(|(g, _)| path == g || path.starts_with(&format!("{g}/")))
        })
    };
    let mut found: Vec<RtThread> = Vec::new();
    // The window starts before the scan: a thread's first reading is taken during it, and a scan of
    // a busy host's /proc takes a good part of the window.
    let t0 = Instant::now();
    for pid in all_pids() {
        if pid == me || exclude.contains(&pid) || procfs::is_kernel_thread(pid as i32) || in_budgeted_group(pid) {
            continue;
        }
        for tid in procfs::tasks(pid) {
            let Ok(attr) = sched::get_attr(tid as i32) else { continue };
            if !attr.is_realtime() {
                continue;
            }
            let cpus = sched::get_affinity(tid as i32).unwrap_or_else(|_| online.clone());
            let oncpu_ns = procfs::oncpu_ns(pid, tid).unwrap_or(0);
            found.push(RtThread { pid, tid, attr, cpus, oncpu_ns });
        }
    }
    let measured = found.iter().any(|t| !matches!(t.attr, SchedAttr::Deadline { .. }));
    if measured && !window.is_zero() {
        std::thread::sleep(window);
    }
    let elapsed = t0.elapsed().as_secs_f64().max(1e-3);
    let mut out: Vec<ForeignRt> = Vec::new();
    // One entry per process and kind: what a user recognizes ("rt-app[4242]").
    let pids: BTreeSet<u32> = found.iter().map(|t| t.pid).collect();
    for pid in pids {
        let comm = procfs::process_comm(pid as i32).unwrap_or_else(|| "?".into());
        let threads: Vec<&RtThread> = found.iter().filter(|t| t.pid == pid).collect();
        let (dl, rt): (Vec<&RtThread>, Vec<&RtThread>) = threads.iter().partition(|t| matches!(t.attr, SchedAttr::Deadline { .. }));
        if !dl.is_empty() {
            let mut per_cpu: std::collections::BTreeMap<u32, f64> = Default::default();
            for t in &dl {
                if let SchedAttr::Deadline { runtime_ns, period_ns, .. } = t.attr {
                    let share = runtime_ns as f64 / period_ns.max(1) as f64 / t.cpus.len().max(1) as f64;
                    for &c in &t.cpus {
                        *per_cpu.entry(c).or_default() += share;
                    }
                }
            }
            push_spread(&mut out, format!("{comm}[{pid}] SCHED_DEADLINE, {} thread(s)", dl.len()), ForeignBasis::Declared, per_cpu);
        }
        if !rt.is_empty() {
            let mut per_cpu: std::collections::BTreeMap<u32, f64> = Default::default();
            let mut alive = 0;
            for t in &rt {
                let Some(now) = procfs::oncpu_ns(t.pid, t.tid) else { continue };
                alive += 1;
                let share = now.saturating_sub(t.oncpu_ns) as f64 / 1e9 / elapsed / t.cpus.len().max(1) as f64;
                for &c in &t.cpus {
                    *per_cpu.entry(c).or_default() += share;
                }
            }
            if alive > 0 {
                let prio = rt.iter().filter_map(|t| match t.attr {
                    SchedAttr::Fifo { priority } | SchedAttr::Rr { priority } => Some(priority),
                    _ => None,
                });
                let top = prio.max().unwrap_or(0);
                let policy = if rt.iter().all(|t| matches!(t.attr, SchedAttr::Rr { .. })) { "SCHED_RR" } else { "SCHED_FIFO" };
                push_spread(&mut out, format!("{comm}[{pid}] {policy} up to priority {top}, {alive} thread(s)"), ForeignBasis::Measured, per_cpu);
            }
        }
    }
    for (path, share) in groups {
        out.push(ForeignRt { source: format!("RT group {path} (cpu.rt_runtime_us)"), basis: ForeignBasis::Declared, per_cpu: share, cpus: online.clone() });
    }
    out
}

/// Entries with one share each: CPUs with the same share together (usually one entry per process).
fn push_spread(out: &mut Vec<ForeignRt>, source: String, basis: ForeignBasis, per_cpu: std::collections::BTreeMap<u32, f64>) {
    let mut by_share: Vec<(f64, Vec<u32>)> = Vec::new();
    for (cpu, share) in per_cpu {
        // Round to 0.1 % so measurement noise does not split one process into per-CPU lines.
        let share = (share * 1000.0).round() / 1000.0;
        if share <= 0.0 {
            continue;
        }
        match by_share.iter_mut().find(|(s, _)| *s == share) {
            Some((_, cpus)) => cpus.push(cpu),
            None => by_share.push((share, vec![cpu])),
        }
    }
    for (share, cpus) in by_share {
        out.push(ForeignRt { source: source.clone(), basis, per_cpu: share, cpus });
    }
}

fn all_pids() -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut v: Vec<u32> = rd.flatten().filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok())).collect();
    v.sort_unstable();
    v
}

/// Top-level cgroup v1 RT groups other than rtslice's own parent that hold a budget: (path relative
/// to the cpu hierarchy, runtime/period). Children's budgets are part of their parent's.
fn rt_groups() -> Vec<(String, f64)> {
    let Ok(layout) = CgroupLayout::detect() else { return Vec::new() };
    let Some(cpu) = layout.v1.get("cpu") else { return Vec::new() };
    rt_groups_under(cpu)
}

pub(crate) fn rt_groups_under(cpu_root: &Path) -> Vec<(String, f64)> {
    let Ok(rd) = std::fs::read_dir(cpu_root) else { return Vec::new() };
    let mut v = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !e.path().is_dir() || name == crate::cgroup::V1_PARENT {
            continue;
        }
        let read = |f: &str| std::fs::read_to_string(e.path().join(f)).ok().and_then(|s| s.trim().parse::<i64>().ok());
        if let (Some(rt), Some(period)) = (read("cpu.rt_runtime_us"), read("cpu.rt_period_us")) {
            if rt > 0 && period > 0 {
                v.push((format!("/{name}"), rt as f64 / period as f64));
            }
        }
    }
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rt_groups_with_a_budget_are_listed_and_rtslices_own_parent_is_not() {
        let d = tempfile::tempdir().unwrap();
        let mk = |name: &str, rt: &str, period: &str| {
            let g = d.path().join(name);
            std::fs::create_dir_all(&g).unwrap();
            std::fs::write(g.join("cpu.rt_runtime_us"), rt).unwrap();
            std::fs::write(g.join("cpu.rt_period_us"), period).unwrap();
        };
        mk("ptp", "100000\n", "1000000\n");
        mk("idle", "0\n", "1000000\n");
        mk(crate::cgroup::V1_PARENT, "500000\n", "1000000\n");
        assert_eq!(rt_groups_under(d.path()), vec![("/ptp".to_string(), 0.1)]);
    }

    #[test]
    fn shares_are_grouped_by_value() {
        let mut out = Vec::new();
        let per_cpu = [(0, 0.1204), (1, 0.1196), (2, 0.3)].into_iter().collect();
        push_spread(&mut out, "x".into(), ForeignBasis::Measured, per_cpu);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].cpus, vec![0, 1]);
        assert_eq!(out[0].per_cpu, 0.12);
        assert_eq!(out[1].cpus, vec![2]);
    }
}
