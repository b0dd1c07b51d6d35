//! Per-thread facts from /proc: the threads of a target, their names and policies, and the
//! schedstat counters used by the fallback without BPF and by the cross-check.

use rtslice_sys::sched::{self, SchedAttr};

// The readers are rtslice-sys's; trace names them as it always has.
pub(crate) use rtslice_sys::procfs::{comm, tasks, tgid_of, threads_in_cgroup};
pub use rtslice_sys::procfs::{schedstat, SchedStat};

/// Threads (tgid, tid) of a process.
pub(crate) fn threads_of(pid: u32) -> Vec<(u32, u32)> {
    tasks(pid).into_iter().map(|tid| (pid, tid)).collect()
}

/// "SCHED_OTHER", "SCHED_FIFO/50", "SCHED_DEADLINE", … or "exited".
pub(crate) fn policy(tid: u32) -> String {
    let Ok(tid) = i32::try_from(tid) else { return "exited".into() };
    let Ok((number, attr)) = sched::get_policy_and_attr(tid) else { return "exited".into() };
    match attr {
        SchedAttr::Other { .. } if number != sched::SCHED_OTHER => format!("policy {number}"),
        SchedAttr::Other { .. } | SchedAttr::Batch { .. } | SchedAttr::Idle => attr.name().into(),
        SchedAttr::Fifo { priority } | SchedAttr::Rr { priority } => format!("{}/{priority}", attr.name()),
        SchedAttr::Deadline { runtime_ns, deadline_ns, period_ns, .. } => {
            format!("DL {}/{}/{}", us(runtime_ns), us(deadline_ns), us(period_ns))
        }
    }
}

fn us(ns: u64) -> String {
    if ns % 1_000_000 == 0 {
        format!("{}ms", ns / 1_000_000)
    } else {
        format!("{}us", ns / 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_our_own_thread() {
        let pid = std::process::id();
        let tid = rtslice_sys::thread::gettid() as u32;
        assert!(threads_of(pid).contains(&(pid, tid)));
        assert_eq!(tgid_of(tid), Some(pid));
        let s = schedstat(pid, tid).expect("schedstat of our own thread");
        // sum_exec_runtime of a running thread is only folded in at ticks and switches: may still be 0.
        assert!(s.slices > 0);
        assert_eq!(policy(tid), "SCHED_OTHER");
        assert!(comm(pid, tid).is_some());
    }
}
