//! Per-thread scheduling for the apply stage: the kernel calls live in `rtslice_sys::sched`; this
//! module speaks the host's types (`CpuList`, `HostError` with a hint naming the fix).

use crate::cpus::CpuList;
use crate::error::{HostError, Result};

pub use rtslice_sys::sched::SchedAttr;

/// Sets a thread's policy after validating it. `tid` 0 means the calling thread.
pub fn set_attr(tid: i32, attr: SchedAttr) -> Result<()> {
    attr.validate().map_err(HostError::Invalid)?;
    rtslice_sys::sched::set_attr(tid, attr).map_err(|source| HostError::Sched { call: "sched_setattr", tid, source })
}

pub fn get_attr(tid: i32) -> Result<SchedAttr> {
    rtslice_sys::sched::get_attr(tid).map_err(|source| HostError::Sched { call: "sched_getattr", tid, source })
}

pub fn set_affinity(tid: i32, cpus: &CpuList) -> Result<()> {
    rtslice_sys::sched::set_affinity(tid, cpus.iter())
        .map_err(|source| HostError::Sched { call: "sched_setaffinity", tid, source })
}

pub fn get_affinity(tid: i32) -> Result<CpuList> {
    rtslice_sys::sched::get_affinity(tid)
        .map(CpuList::from_cpus)
        .map_err(|source| HostError::Sched { call: "sched_getaffinity", tid, source })
}

/// The affinity of every thread a cgroup.threads file lists whose affinity user space may set and
/// restore — not those the kernel owns (PF_NO_SETAFFINITY: per-CPU kthreads, workqueue workers and
/// rescuers) — skipping threads that exited since the read.
pub fn movable_affinities(threads_file: &std::path::Path) -> Vec<(i32, CpuList)> {
    crate::cgroup::read_pids(threads_file)
        .into_iter()
        .filter(|&tid| !no_setaffinity(tid))
        .filter_map(|tid| Some((tid, get_affinity(tid).ok()?)))
        .collect()
}

/// Thread ids of process `pid`, ascending; empty when it is gone.
pub fn threads_of(pid: i32) -> Vec<i32> {
    let Ok(pid) = u32::try_from(pid) else { return Vec::new() };
    rtslice_sys::procfs::tasks(pid).into_iter().filter_map(|tid| i32::try_from(tid).ok()).collect()
}

/// A thread's name (`comm`); `None` when it is gone.
pub fn comm_of(pid: i32, tid: i32) -> Option<String> {
    rtslice_sys::procfs::comm(u32::try_from(pid).ok()?, u32::try_from(tid).ok()?)
}

pub use rtslice_sys::procfs::no_setaffinity;
pub use rtslice_sys::thread::gettid;

/// The longest period among the SCHED_DEADLINE threads of processes `pids` (None: no such thread),
/// read before the processes are stopped: see [`wait_deadline_release`].
pub fn longest_deadline_period(pids: impl IntoIterator<Item = i32>) -> Option<std::time::Duration> {
    pids.into_iter()
        .flat_map(threads_of)
        .filter_map(|tid| match get_attr(tid) {
            Ok(SchedAttr::Deadline { period_ns, .. }) => Some(std::time::Duration::from_nanos(period_ns)),
            _ => None,
        })
        .max()
}

/// Waits, after a workload's processes are gone, for the kernel to release their deadline bandwidth.
/// A deadline thread that dies while blocked gives its bandwidth back only at its 0-lag time (the
/// kernel's inactive timer), up to a period after it blocked. A partition removed before then (the
/// next undo steps) is rebuilt without the dead thread, and the late release drives the rebuilt root
/// domain's total below zero: every later SCHED_DEADLINE admission on those CPUs fails with EBUSY
/// (6.12-rt guests: total_bw -104860 after a removed 300 ms / 1 s thread; docs/host.md). `period`
/// is [`longest_deadline_period`] of the processes, read before they were stopped.
pub fn wait_deadline_release(period: Option<std::time::Duration>) {
    if let Some(period) = period {
        std::thread::sleep(period);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_thread_policy_is_readable_and_nice_settable() {
        // Raising nice needs no privilege, and sched_getattr works for anyone: real syscalls.
        std::thread::spawn(|| {
            set_attr(0, SchedAttr::Batch { nice: 7 }).unwrap();
            assert_eq!(get_attr(gettid()).unwrap(), SchedAttr::Batch { nice: 7 });
            let aff = get_affinity(0).unwrap();
            assert!(!aff.is_empty());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn invalid_parameters_are_refused_before_the_kernel() {
        assert!(matches!(set_attr(0, SchedAttr::Fifo { priority: 0 }), Err(HostError::Invalid(_))));
    }
}
