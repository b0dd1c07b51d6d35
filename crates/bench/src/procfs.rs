//! The few /proc and /sys readings the runner takes itself: host facts, CPU time of process trees
//! and of the host, context switches. Cheap enough to sample every few hundred ms.

use std::path::Path;

use crate::results::Machine;
use crate::layout::HostShape;

fn read(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// Parses a kernel CPU list (`0-3,8,10-11`); empty text gives an empty list.
pub fn parse_cpu_list(s: &str) -> Vec<u32> {
    rtslice_spec::parse_cpu_list(s.trim()).unwrap_or_default()
}

pub fn host_facts() -> HostShape {
    let mut cpus = read("/sys/devices/system/cpu/online").map(|s| parse_cpu_list(&s)).unwrap_or_default();
    if cpus.is_empty() {
        let n = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as u32;
        cpus = (0..n).collect();
    }
    let isolated = read("/sys/devices/system/cpu/isolated").map(|s| parse_cpu_list(&s)).unwrap_or_default();
    HostShape { cpus, isolated }
}

pub fn machine() -> Machine {
    let facts = host_facts();
    let cpuinfo = read("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let mem_kib: f64 = read("/proc/meminfo")
        .and_then(|m| m.lines().find(|l| l.starts_with("MemTotal:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()))
        .unwrap_or(0.0);
    let version = read("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
    let full = read("/proc/version").unwrap_or_default();
    // A PREEMPT_DYNAMIC kernel shows the active mode in parentheses in debugfs, e.g.
    // `(none) voluntary full`; debugfs may be unmounted or locked down.
    let dynamic = || match read("/sys/kernel/debug/sched/preempt") {
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
    let cmdline = read("/proc/cmdline").unwrap_or_default();
    // Firecracker puts its own init arguments after `--`; they say nothing about scheduling.
    let cmdline = cmdline.split(" -- ").next().unwrap_or("").trim().to_string();
    Machine {
        hostname: read("/proc/sys/kernel/hostname").unwrap_or_default().trim().to_string(),
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
    let s = read("/proc/stat")?;
    let line = s.lines().next()?;
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    if v.len() < 5 {
        return None;
    }
    // user nice system idle iowait irq softirq steal guest guest_nice; guest time is already
    // counted in user, so only the first eight fields add up to the total.
    let total: u64 = v.iter().take(8).sum();
    let idle = v[3] + v[4];
    Some((total - idle, total))
}

/// Tasks (thread ids) of a process.
pub fn tasks(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default()
}

/// Descendants of `pid` including itself (a workload may be a wrapper with children).
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        for t in tasks(p) {
            if let Some(children) = read(format!("/proc/{p}/task/{t}/children")) {
                out.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
            }
        }
        i += 1;
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Nanoseconds on CPU of every thread of the process tree (schedstat: exact, not tick-sampled).
pub fn tree_cpu_ns(pid: u32) -> u64 {
    process_tree(pid)
        .iter()
        .flat_map(|p| tasks(*p).into_iter().map(move |t| (*p, t)))
        .filter_map(|(p, t)| read(format!("/proc/{p}/task/{t}/schedstat"))?.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Voluntary + involuntary context switches of every thread of the process tree.
pub fn tree_switches(pid: u32) -> u64 {
    process_tree(pid)
        .iter()
        .flat_map(|p| tasks(*p).into_iter().map(move |t| (*p, t)))
        .filter_map(|(p, t)| read(format!("/proc/{p}/task/{t}/status")))
        .map(|s| {
            s.lines()
                .filter(|l| l.starts_with("voluntary_ctxt_switches:") || l.starts_with("nonvoluntary_ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}

/// Names of a process's threads (comm).
pub fn thread_names(pid: u32) -> Vec<String> {
    tasks(pid).iter().filter_map(|t| read(format!("/proc/{pid}/task/{t}/comm")).map(|s| s.trim().to_string())).collect()
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
}
