//! Per-thread scheduling: `sched_setattr(2)`/`sched_getattr(2)` for every policy, and a thread's CPU
//! affinity. Neither libc, rustix nor nix wraps the *attr calls, so they go through `syscall(2)` with
//! the kernel's `struct sched_attr` layout (VER0, 48 bytes); affinity goes through rustix.
//!
//! Errors are the kernel's (`std::io::Error` with its errno) so callers can tell an exited thread
//! (ESRCH) from a refused admission (EBUSY) and say what to do.

use std::io;

use serde::{Deserialize, Serialize};

const SCHED_OTHER: u32 = 0;
const SCHED_FIFO: u32 = 1;
const SCHED_RR: u32 = 2;
const SCHED_BATCH: u32 = 3;
const SCHED_IDLE: u32 = 5;
const SCHED_DEADLINE: u32 = 6;
/// Deadline threads cannot fork; resetting on fork gives children SCHED_OTHER instead of failing.
pub const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;
/// GRUB: a deadline thread may use bandwidth other deadline threads leave unused (its guarantee
/// stays runtime/period).
pub const SCHED_FLAG_RECLAIM: u64 = 0x02;

/// The kernel's `struct sched_attr` (include/uapi/linux/sched/types.h), first version.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
struct KernelSchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
}

/// A thread's kernel scheduling policy with its parameters, as `sched_setattr(2)` takes them.
/// Deadline times are in nanoseconds (the kernel's unit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "policy", rename_all = "lowercase")]
pub enum SchedAttr {
    Other { nice: i32 },
    Batch { nice: i32 },
    Idle,
    Fifo { priority: u32 },
    Rr { priority: u32 },
    Deadline {
        runtime_ns: u64,
        deadline_ns: u64,
        period_ns: u64,
        /// SCHED_FLAG_RECLAIM (GRUB): may run beyond its runtime on bandwidth nobody uses.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        reclaim: bool,
    },
}

impl SchedAttr {
    pub fn is_realtime(&self) -> bool {
        matches!(self, SchedAttr::Fifo { .. } | SchedAttr::Rr { .. } | SchedAttr::Deadline { .. })
    }

    pub fn name(&self) -> &'static str {
        match self {
            SchedAttr::Other { .. } => "SCHED_OTHER",
            SchedAttr::Batch { .. } => "SCHED_BATCH",
            SchedAttr::Idle => "SCHED_IDLE",
            SchedAttr::Fifo { .. } => "SCHED_FIFO",
            SchedAttr::Rr { .. } => "SCHED_RR",
            SchedAttr::Deadline { .. } => "SCHED_DEADLINE",
        }
    }

    /// Checks parameters the kernel would refuse, so plans fail before anything is touched.
    pub fn validate(&self) -> Result<(), String> {
        match *self {
            SchedAttr::Other { nice } | SchedAttr::Batch { nice } if !(-20..=19).contains(&nice) => {
                Err(format!("nice {nice} outside -20..19"))
            }
            SchedAttr::Fifo { priority } | SchedAttr::Rr { priority } if !(1..=99).contains(&priority) => {
                Err(format!("RT priority {priority} outside 1..99"))
            }
            SchedAttr::Deadline { runtime_ns, deadline_ns, period_ns, .. } => {
                // The kernel's floor is 1024 ns (DL_SCALE); below it sched_setattr says EINVAL.
                if runtime_ns < 1024 || runtime_ns > deadline_ns || deadline_ns > period_ns {
                    Err(format!(
                        "deadline parameters need 1024 ns <= runtime ({runtime_ns}) <= deadline ({deadline_ns}) <= period ({period_ns})"
                    ))
                } else {
                    Ok(())
                }
            }
            _ => Ok(()),
        }
    }

    fn to_kernel(self) -> KernelSchedAttr {
        let mut a = KernelSchedAttr { size: std::mem::size_of::<KernelSchedAttr>() as u32, ..Default::default() };
        match self {
            SchedAttr::Other { nice } => {
                a.sched_policy = SCHED_OTHER;
                a.sched_nice = nice;
            }
            SchedAttr::Batch { nice } => {
                a.sched_policy = SCHED_BATCH;
                a.sched_nice = nice;
            }
            SchedAttr::Idle => a.sched_policy = SCHED_IDLE,
            SchedAttr::Fifo { priority } => {
                a.sched_policy = SCHED_FIFO;
                a.sched_priority = priority;
            }
            SchedAttr::Rr { priority } => {
                a.sched_policy = SCHED_RR;
                a.sched_priority = priority;
            }
            SchedAttr::Deadline { runtime_ns, deadline_ns, period_ns, reclaim } => {
                a.sched_policy = SCHED_DEADLINE;
                a.sched_flags = SCHED_FLAG_RESET_ON_FORK | if reclaim { SCHED_FLAG_RECLAIM } else { 0 };
                a.sched_runtime = runtime_ns;
                a.sched_deadline = deadline_ns;
                a.sched_period = period_ns;
            }
        }
        a
    }

    fn from_kernel(a: &KernelSchedAttr) -> SchedAttr {
        match a.sched_policy {
            SCHED_FIFO => SchedAttr::Fifo { priority: a.sched_priority },
            SCHED_RR => SchedAttr::Rr { priority: a.sched_priority },
            SCHED_BATCH => SchedAttr::Batch { nice: a.sched_nice },
            SCHED_IDLE => SchedAttr::Idle,
            SCHED_DEADLINE => SchedAttr::Deadline {
                runtime_ns: a.sched_runtime,
                deadline_ns: a.sched_deadline,
                period_ns: a.sched_period,
                reclaim: a.sched_flags & SCHED_FLAG_RECLAIM != 0,
            },
            _ => SchedAttr::Other { nice: a.sched_nice },
        }
    }
}

impl std::fmt::Display for SchedAttr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SchedAttr::Other { nice } | SchedAttr::Batch { nice } => write!(f, "{} nice {nice}", self.name()),
            SchedAttr::Idle => write!(f, "SCHED_IDLE"),
            SchedAttr::Fifo { priority } | SchedAttr::Rr { priority } => write!(f, "{} {priority}", self.name()),
            SchedAttr::Deadline { runtime_ns, deadline_ns, period_ns, reclaim } => {
                write!(f, "SCHED_DEADLINE {runtime_ns}/{deadline_ns}/{period_ns} ns{}", if *reclaim { " reclaim" } else { "" })
            }
        }
    }
}

/// Sets a thread's policy (`sched_setattr`). `tid` 0 means the calling thread. Parameters are not
/// validated here: call [`SchedAttr::validate`] first for a readable refusal.
pub fn set_attr(tid: i32, attr: SchedAttr) -> io::Result<()> {
    let k = attr.to_kernel();
    // SAFETY: `k` is a valid, initialized sched_attr whose `size` field matches its size; the kernel
    // only reads it during the call.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, tid, &k as *const KernelSchedAttr, 0u32) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A thread's `sched_flags` as the kernel reports them (e.g. [`SCHED_FLAG_RESET_ON_FORK`]).
pub fn get_flags(tid: i32) -> io::Result<u64> {
    get_kernel_attr(tid).map(|k| k.sched_flags)
}

/// A thread's policy (`sched_getattr`). `tid` 0 means the calling thread.
pub fn get_attr(tid: i32) -> io::Result<SchedAttr> {
    get_kernel_attr(tid).map(|k| SchedAttr::from_kernel(&k))
}

fn get_kernel_attr(tid: i32) -> io::Result<KernelSchedAttr> {
    let mut k = KernelSchedAttr::default();
    // SAFETY: the kernel writes at most the size passed (that of `k`) into `k`, which lives across the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid,
            &mut k as *mut KernelSchedAttr,
            std::mem::size_of::<KernelSchedAttr>() as u32,
            0u32,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(k)
}

/// rustix takes `None` for "the calling thread" (tid 0 in the kernel's convention).
fn pid_arg(tid: i32) -> io::Result<Option<rustix::process::Pid>> {
    if tid < 0 {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(rustix::process::Pid::from_raw(tid))
}

/// Sets a thread's CPU affinity (`sched_setaffinity`). `tid` 0 means the calling thread; CPUs beyond
/// the kernel's CPU_SETSIZE are ignored (no such CPU can be online).
pub fn set_affinity(tid: i32, cpus: impl IntoIterator<Item = u32>) -> io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    for cpu in cpus {
        if (cpu as usize) < rustix::thread::CpuSet::MAX_CPU {
            set.set(cpu as usize);
        }
    }
    rustix::thread::sched_setaffinity(pid_arg(tid)?, &set).map_err(io::Error::from)
}

/// A thread's CPU affinity (`sched_getaffinity`), ascending CPU ids. `tid` 0 means the calling thread.
pub fn get_affinity(tid: i32) -> io::Result<Vec<u32>> {
    let set = rustix::thread::sched_getaffinity(pid_arg(tid)?)?;
    Ok((0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).map(|c| c as u32).collect())
}

/// The calling thread's kernel thread id.
pub fn gettid() -> i32 {
    rustix::thread::gettid().as_raw_nonzero().get()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_catches_what_the_kernel_refuses() {
        assert!(SchedAttr::Fifo { priority: 0 }.validate().is_err());
        assert!(SchedAttr::Fifo { priority: 50 }.validate().is_ok());
        assert!(SchedAttr::Deadline { runtime_ns: 2_000, deadline_ns: 1_000, period_ns: 3_000, reclaim: false }.validate().is_err());
        assert!(SchedAttr::Deadline { runtime_ns: 100_000, deadline_ns: 1_000_000, period_ns: 1_000_000, reclaim: false }
            .validate()
            .is_ok());
        assert!(SchedAttr::Other { nice: 25 }.validate().is_err());
    }

    #[test]
    fn kernel_struct_round_trip() {
        assert_eq!(std::mem::size_of::<KernelSchedAttr>(), 48, "SCHED_ATTR_SIZE_VER0");
        for p in [
            SchedAttr::Other { nice: 5 },
            SchedAttr::Batch { nice: -3 },
            SchedAttr::Idle,
            SchedAttr::Fifo { priority: 10 },
            SchedAttr::Rr { priority: 99 },
            SchedAttr::Deadline { runtime_ns: 10_000, deadline_ns: 20_000, period_ns: 30_000, reclaim: false },
            SchedAttr::Deadline { runtime_ns: 10_000, deadline_ns: 20_000, period_ns: 30_000, reclaim: true },
        ] {
            assert_eq!(SchedAttr::from_kernel(&p.to_kernel()), p);
        }
    }

    #[test]
    fn own_thread_policy_and_affinity_round_trip() {
        // Raising nice and narrowing one's own affinity need no privilege: real syscalls.
        std::thread::spawn(|| {
            set_attr(0, SchedAttr::Batch { nice: 7 }).unwrap();
            assert_eq!(get_attr(gettid()).unwrap(), SchedAttr::Batch { nice: 7 });
            let aff = get_affinity(0).unwrap();
            assert!(!aff.is_empty());
            set_affinity(gettid(), [aff[0]]).unwrap();
            assert_eq!(get_affinity(0).unwrap(), vec![aff[0]]);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_missing_thread_is_esrch() {
        let e = get_attr(i32::MAX).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ESRCH));
        assert_eq!(set_affinity(-5, [0]).unwrap_err().raw_os_error(), Some(libc::ESRCH));
    }
}
