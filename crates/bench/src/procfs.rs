//! The few /proc and /sys readings the runner takes (through rtslice-sys): host facts, CPU time of process trees
//! and of the host, context switches. Cheap enough to sample every few hundred ms.

use std::path::Path;

use rtslice_sys::procfs as sys;

use crate::results::{Machine, Stolen};
use crate::layout::HostShape;

/// Parses a kernel CPU list (`0-3,8,10-11`); empty text gives an empty list.
pub fn parse_cpu_list(s: &str) -> Vec<u32> {
    rtslice_sys::cpulist::parse_cpu_list(s.trim()).unwrap_or_default()
}

pub fn host_facts() -> HostShape {
    let mut cpus = sys::online_cpus().unwrap_or_default();
    if cpus.is_empty() {
        let n = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as u32;
        cpus = (0..n).collect();
    }
    let isolated = sys::isolated_cpus().unwrap_or_default();
    HostShape { cpus, isolated }
}

pub fn machine() -> Machine {
    let facts = host_facts();
    let k = sys::kernel_facts();
    let cpu_model = k.cpu_model.clone().unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let mem_kib = k.mem_total_bytes.unwrap_or(0) as f64 / 1024.0;
    let version = k.release.clone().unwrap_or_default();
    let full = k.version.clone().unwrap_or_default();
    // A PREEMPT_DYNAMIC kernel shows the active mode in parentheses in debugfs, e.g.
    // `(none) voluntary full`; debugfs may be unmounted or locked down.
    let dynamic = || match &k.preempt_modes {
        Some(m) => format!("PREEMPT_DYNAMIC, active: {}", m.split('(').nth(1).and_then(|x| x.split(')').next()).unwrap_or(m.trim())),
        None => "PREEMPT_DYNAMIC (active mode not readable: /sys/kernel/debug/sched/preempt)".to_string(),
    };
    let preemption = if full.contains("PREEMPT_RT") {
        "PREEMPT_RT".to_string()
    } else if full.contains("PREEMPT_DYNAMIC") {
        dynamic()
    } else if full.contains("PREEMPT ") {
        "PREEMPT (full)".to_string()
    } else {
        "none (no PREEMPT in the version string)".to_string()
    };
    let cgroup = if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        "v2 (unified)".to_string()
    } else if Path::new("/sys/fs/cgroup/cpuset").exists() {
        "v1 (hybrid: cpu, cpuset, … hierarchies)".to_string()
    } else {
        "unknown".to_string()
    };
    let cmdline = k.cmdline.clone().unwrap_or_default();
    // Firecracker puts its own init arguments after `--`; they say nothing about scheduling.
    let cmdline = cmdline.split(" -- ").next().unwrap_or("").trim().to_string();
    Machine {
        hostname: k.hostname.clone().unwrap_or_default(),
        kernel: version,
        cpu_model,
        cpus: facts.cpus,
        isolated: facts.isolated,
        memory_gib: mem_kib / 1024.0 / 1024.0,
        preemption,
        cgroup,
        cmdline,
    }
}

/// Host busy and total time in USER_HZ ticks, from the first line of /proc/stat.
pub fn host_ticks() -> Option<(u64, u64)> {
    let all = sys::cpu_stat().ok()?.all;
    (all.total > 0).then_some((all.busy(), all.total))
}

pub use sys::stolen_s;

/// What the hypervisor took from each CPU between two [`stolen_s`] readings, in ms (CPUs in both).
pub fn stolen_between(before: &[(u32, f64)], after: &[(u32, f64)]) -> Vec<Stolen> {
    sys::stolen_between(before, after).into_iter().map(|(cpu, s)| Stolen { cpu, ms: s * 1e3 }).collect()
}

/// Tasks (thread ids) of a process.
pub fn tasks(pid: u32) -> Vec<u32> {
    sys::tasks(pid)
}

/// Descendants of `pid` including itself (a workload may be a wrapper with children).
pub fn process_tree(pid: u32) -> Vec<u32> {
    sys::process_tree(pid)
}

/// Nanoseconds on CPU of every thread of the process tree (schedstat: exact, not tick-sampled).
pub fn tree_cpu_ns(pid: u32) -> u64 {
    process_tree(pid).iter().flat_map(|p| tasks(*p).into_iter().map(move |t| (*p, t))).filter_map(|(p, t)| sys::oncpu_ns(p, t)).sum()
}

/// Voluntary + involuntary context switches of every thread of the process tree.
pub fn tree_switches(pid: u32) -> u64 {
    process_tree(pid)
        .iter()
        .flat_map(|p| tasks(*p).into_iter().map(move |t| (*p, t)))
        .filter_map(|(p, t)| sys::context_switches(p, t))
        .sum()
}

/// Names of a process's threads (comm).
pub fn thread_names(pid: u32) -> Vec<String> {
    tasks(pid).iter().filter_map(|&t| sys::comm(pid, t)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        assert!(tasks(me).contains(&me));
        // Burn a little CPU so the counter moves.
        let a = tree_cpu_ns(me);
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(tree_cpu_ns(me) > a);
        assert!(tree_switches(me) > 0);
        let (busy, total) = host_ticks().unwrap();
        assert!(busy <= total && total > 0);
        let f = host_facts();
        assert!(!f.cpus.is_empty());
        let m = machine();
        assert!(!m.kernel.is_empty() && m.memory_gib > 0.0);
    }

    #[test]
    fn steal_is_recorded_per_cpu_in_milliseconds() {
        assert_eq!(stolen_between(&[(0, 0.5), (3, 0.1)], &[(0, 0.75), (2, 0.2)]), vec![Stolen { cpu: 0, ms: 250.0 }]);
        assert_eq!(stolen_s().iter().map(|c| c.0).collect::<Vec<_>>(), host_facts().cpus);
    }
}
