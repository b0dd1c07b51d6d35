//! Per-thread facts from /proc: the threads of a target, their names and policies, and the
//! schedstat counters used by the fallback without BPF and by the cross-check.

use std::fs;
use std::path::Path;

/// Threads (tgid, tid) of a process.
pub(crate) fn threads_of(pid: u32) -> Vec<(u32, u32)> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut v: Vec<(u32, u32)> =
        dir.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).map(|tid| (pid, tid)).collect();
    v.sort_unstable();
    v
}

/// The process a thread id belongs to.
pub(crate) fn tgid_of(tid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("Tgid:")).and_then(|v| v.trim().parse().ok())
}

/// Thread ids in a cgroup and its descendants (v1 `tasks`, v2 `cgroup.threads`).
pub(crate) fn threads_in_cgroup(dir: &Path) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for file in ["tasks", "cgroup.threads"] {
            if let Ok(text) = fs::read_to_string(d.join(file)) {
                for tid in text.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
                    out.push((tgid_of(tid).unwrap_or(tid), tid));
                }
                break;
            }
        }
        if let Ok(rd) = fs::read_dir(&d) {
            stack.extend(rd.flatten().filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false)).map(|e| e.path()));
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

pub(crate) fn comm(tgid: u32, tid: u32) -> Option<String> {
    fs::read_to_string(format!("/proc/{tgid}/task/{tid}/comm")).ok().map(|s| s.trim_end().to_string())
}

/// "SCHED_OTHER", "SCHED_FIFO/50", "SCHED_DEADLINE", … or "exited".
pub(crate) fn policy(tid: u32) -> String {
    // SAFETY: plain syscalls on a thread id; failures are reported through the return value.
    let pol = unsafe { libc::sched_getscheduler(tid as i32) };
    if pol < 0 {
        return "exited".into();
    }
    let mut param = libc::sched_param { sched_priority: 0 };
    // SAFETY: param is a valid out-parameter.
    unsafe { libc::sched_getparam(tid as i32, &mut param) };
    let base = pol & !libc::SCHED_RESET_ON_FORK;
    match base {
        libc::SCHED_OTHER => "SCHED_OTHER".into(),
        libc::SCHED_BATCH => "SCHED_BATCH".into(),
        libc::SCHED_IDLE => "SCHED_IDLE".into(),
        libc::SCHED_FIFO => format!("SCHED_FIFO/{}", param.sched_priority),
        libc::SCHED_RR => format!("SCHED_RR/{}", param.sched_priority),
        6 => deadline_params(tid).map(|(rt, dl, per)| format!("DL {}/{}/{}", us(rt), us(dl), us(per))).unwrap_or_else(|| "SCHED_DEADLINE".into()),
        p => format!("policy {p}"),
    }
}

fn us(ns: u64) -> String {
    if ns % 1_000_000 == 0 {
        format!("{}ms", ns / 1_000_000)
    } else {
        format!("{}us", ns / 1000)
    }
}

/// (runtime, deadline, period) in ns of a SCHED_DEADLINE thread.
fn deadline_params(tid: u32) -> Option<(u64, u64, u64)> {
    // struct sched_attr (SCHED_ATTR_SIZE_VER0 = 48 bytes; room for later versions).
    let mut attr = [0u64; 8];
    // SAFETY: attr is 64 writable bytes and we pass that size; the kernel fills at most that.
    let rc = unsafe { libc::syscall(libc::SYS_sched_getattr, tid as libc::c_long, attr.as_mut_ptr(), 64u32, 0u32) };
    // Layout: u32 size, u32 policy, u64 flags, i32 nice, u32 priority, u64 runtime, deadline, period.
    (rc == 0).then(|| (attr[3], attr[4], attr[5]))
}

/// Cumulative per-thread scheduler counters from /proc.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedStat {
    /// Time on CPU (ns).
    pub oncpu_ns: u64,
    /// Time waiting on a run queue (ns): schedstat's run_delay.
    pub run_delay_ns: u64,
    /// Times it was switched in (timeslices): schedstat's pcount.
    pub slices: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub migrations: u64,
}

/// Reads /proc/<tgid>/task/<tid>/{schedstat,status,sched}. None when the thread is gone.
pub fn schedstat(tgid: u32, tid: u32) -> Option<SchedStat> {
    let base = format!("/proc/{tgid}/task/{tid}");
    let ss = fs::read_to_string(format!("{base}/schedstat")).ok()?;
    let v: Vec<u64> = ss.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    if v.len() < 3 {
        return None;
    }
    let status = fs::read_to_string(format!("{base}/status")).unwrap_or_default();
    let field = |text: &str, key: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|r| r.trim_start_matches([' ', ':', '\t']).split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let sched = fs::read_to_string(format!("{base}/sched")).unwrap_or_default();
    Some(SchedStat {
        oncpu_ns: v[0],
        run_delay_ns: v[1],
        slices: v[2],
        voluntary_switches: field(&status, "voluntary_ctxt_switches"),
        involuntary_switches: field(&status, "nonvoluntary_ctxt_switches"),
        migrations: field(&sched, "se.nr_migrations"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_our_own_thread() {
        let pid = std::process::id();
        let tid = unsafe { libc::gettid() } as u32;
        assert!(threads_of(pid).contains(&(pid, tid)));
        assert_eq!(tgid_of(tid), Some(pid));
        let s = schedstat(pid, tid).expect("schedstat of our own thread");
        // sum_exec_runtime of a running thread is only folded in at ticks and switches: may still be 0.
        assert!(s.slices > 0);
        assert_eq!(policy(tid), "SCHED_OTHER");
        assert!(comm(pid, tid).is_some());
    }
}
