//! Per-thread scheduling: `sched_setattr(2)`/`sched_getattr(2)` for every policy and
//! `sched_setaffinity(2)` by thread id. libc has no wrapper for the *attr calls, so they go through
//! `syscall(2)` with the kernel's `struct sched_attr` layout (VER0, 48 bytes).

use std::io;

use serde::{Deserialize, Serialize};

use crate::cpus::CpuList;
use crate::error::{HostError, Result};

const SCHED_OTHER: u32 = 0;
const SCHED_FIFO: u32 = 1;
const SCHED_RR: u32 = 2;
const SCHED_BATCH: u32 = 3;
const SCHED_IDLE: u32 = 5;
const SCHED_DEADLINE: u32 = 6;
/// Deadline threads cannot fork; resetting on fork gives children SCHED_OTHER instead of failing.
const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;

#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
}

/// A scheduling policy with its parameters. Deadline times are in nanoseconds (the kernel's unit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "policy", rename_all = "lowercase")]
pub enum Policy {
    Other { nice: i32 },
    Batch { nice: i32 },
    Idle,
    Fifo { priority: u32 },
    Rr { priority: u32 },
    Deadline { runtime_ns: u64, deadline_ns: u64, period_ns: u64 },
}

impl Policy {
    pub fn is_realtime(&self) -> bool {
        matches!(self, Policy::Fifo { .. } | Policy::Rr { .. } | Policy::Deadline { .. })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Policy::Other { .. } => "SCHED_OTHER",
            Policy::Batch { .. } => "SCHED_BATCH",
            Policy::Idle => "SCHED_IDLE",
            Policy::Fifo { .. } => "SCHED_FIFO",
            Policy::Rr { .. } => "SCHED_RR",
            Policy::Deadline { .. } => "SCHED_DEADLINE",
        }
    }

    /// Checks parameters the kernel would refuse, so plans fail before anything is touched.
    pub fn validate(&self) -> std::result::Result<(), String> {
        match *self {
            Policy::Other { nice } | Policy::Batch { nice } if !(-20..=19).contains(&nice) => {
                Err(format!("nice {nice} outside -20..19"))
            }
            Policy::Fifo { priority } | Policy::Rr { priority } if !(1..=99).contains(&priority) => {
                Err(format!("RT priority {priority} outside 1..99"))
            }
            Policy::Deadline { runtime_ns, deadline_ns, period_ns } => {
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

    fn to_attr(self) -> SchedAttr {
        let mut a = SchedAttr { size: std::mem::size_of::<SchedAttr>() as u32, ..Default::default() };
        match self {
            Policy::Other { nice } => {
                a.sched_policy = SCHED_OTHER;
                a.sched_nice = nice;
            }
            Policy::Batch { nice } => {
                a.sched_policy = SCHED_BATCH;
                a.sched_nice = nice;
            }
            Policy::Idle => a.sched_policy = SCHED_IDLE,
            Policy::Fifo { priority } => {
                a.sched_policy = SCHED_FIFO;
                a.sched_priority = priority;
            }
            Policy::Rr { priority } => {
                a.sched_policy = SCHED_RR;
                a.sched_priority = priority;
            }
            Policy::Deadline { runtime_ns, deadline_ns, period_ns } => {
                a.sched_policy = SCHED_DEADLINE;
                a.sched_flags = SCHED_FLAG_RESET_ON_FORK;
                a.sched_runtime = runtime_ns;
                a.sched_deadline = deadline_ns;
                a.sched_period = period_ns;
            }
        }
        a
    }

    fn from_attr(a: &SchedAttr) -> Policy {
        match a.sched_policy {
            SCHED_FIFO => Policy::Fifo { priority: a.sched_priority },
            SCHED_RR => Policy::Rr { priority: a.sched_priority },
            SCHED_BATCH => Policy::Batch { nice: a.sched_nice },
            SCHED_IDLE => Policy::Idle,
            SCHED_DEADLINE => Policy::Deadline {
                runtime_ns: a.sched_runtime,
                deadline_ns: a.sched_deadline,
                period_ns: a.sched_period,
            },
            _ => Policy::Other { nice: a.sched_nice },
        }
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Policy::Other { nice } | Policy::Batch { nice } => write!(f, "{} nice {nice}", self.name()),
            Policy::Idle => write!(f, "SCHED_IDLE"),
            Policy::Fifo { priority } | Policy::Rr { priority } => write!(f, "{} {priority}", self.name()),
            Policy::Deadline { runtime_ns, deadline_ns, period_ns } => {
                write!(f, "SCHED_DEADLINE {runtime_ns}/{deadline_ns}/{period_ns} ns")
            }
        }
    }
}

/// Sets a thread's policy. `tid` 0 means the calling thread.
pub fn set_policy(tid: i32, policy: Policy) -> Result<()> {
    policy.validate().map_err(HostError::Invalid)?;
    let attr = policy.to_attr();
    // SAFETY: attr is a valid, initialized sched_attr of the declared size; the kernel only reads it.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, tid, &attr as *const SchedAttr, 0u32) };
    if rc != 0 {
        return Err(HostError::Sched { call: "sched_setattr", tid, source: io::Error::last_os_error() });
    }
    Ok(())
}

pub fn get_policy(tid: i32) -> Result<Policy> {
    let mut attr = SchedAttr::default();
    // SAFETY: the kernel writes at most `size` bytes into attr, which is that large.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid,
            &mut attr as *mut SchedAttr,
            std::mem::size_of::<SchedAttr>() as u32,
            0u32,
        )
    };
    if rc != 0 {
        return Err(HostError::Sched { call: "sched_getattr", tid, source: io::Error::last_os_error() });
    }
    Ok(Policy::from_attr(&attr))
}

pub fn set_affinity(tid: i32, cpus: &CpuList) -> Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET stays within its fixed size for cpu < CPU_SETSIZE.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for cpu in cpus.iter() {
            if (cpu as usize) < libc::CPU_SETSIZE as usize {
                libc::CPU_SET(cpu as usize, &mut set);
            }
        }
        libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        return Err(HostError::Sched { call: "sched_setaffinity", tid, source: io::Error::last_os_error() });
    }
    Ok(())
}

pub fn get_affinity(tid: i32) -> Result<CpuList> {
    // SAFETY: as above; the kernel fills the set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(HostError::Sched { call: "sched_getaffinity", tid, source: io::Error::last_os_error() });
        }
        Ok(CpuList::from_cpus((0..libc::CPU_SETSIZE as u32).filter(|&c| libc::CPU_ISSET(c as usize, &set))))
    }
}

/// The calling thread's kernel thread id.
pub fn gettid() -> i32 {
    // SAFETY: no preconditions.
    unsafe { libc::gettid() }
}

/// Thread ids of a process (from /proc/<pid>/task); empty when it is gone.
pub fn threads_of(pid: i32) -> Vec<i32> {
    let mut tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    tids.sort_unstable();
    tids
}

/// A thread's name (comm), without the newline.
pub fn comm_of(pid: i32, tid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).ok().map(|s| s.trim_end().to_string())
}

/// True for threads whose CPU affinity the kernel owns (PF_NO_SETAFFINITY in /proc/<tid>/stat's
/// flags: per-CPU kernel threads, workqueue rescuers); sched_setaffinity refuses them.
pub fn no_setaffinity(tid: i32) -> bool {
    const PF_NO_SETAFFINITY: u64 = 0x0400_0000;
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{tid}/stat")) else { return false };
    let Some(i) = stat.rfind(')') else { return false };
    // Fields after comm: state(3) ppid pgrp session tty_nr tpgid flags(9).
    stat[i + 2..].split_whitespace().nth(6).and_then(|f| f.parse::<u64>().ok()).is_some_and(|f| f & PF_NO_SETAFFINITY != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_catches_what_the_kernel_refuses() {
        assert!(Policy::Fifo { priority: 0 }.validate().is_err());
        assert!(Policy::Fifo { priority: 50 }.validate().is_ok());
        assert!(Policy::Deadline { runtime_ns: 2_000, deadline_ns: 1_000, period_ns: 3_000 }.validate().is_err());
        assert!(Policy::Deadline { runtime_ns: 100_000, deadline_ns: 1_000_000, period_ns: 1_000_000 }
            .validate()
            .is_ok());
        assert!(Policy::Other { nice: 25 }.validate().is_err());
    }

    #[test]
    fn attr_round_trip() {
        for p in [
            Policy::Other { nice: 5 },
            Policy::Batch { nice: -3 },
            Policy::Idle,
            Policy::Fifo { priority: 10 },
            Policy::Rr { priority: 99 },
            Policy::Deadline { runtime_ns: 10_000, deadline_ns: 20_000, period_ns: 30_000 },
        ] {
            assert_eq!(Policy::from_attr(&p.to_attr()), p);
        }
    }

    #[test]
    fn own_thread_policy_is_readable_and_nice_settable() {
        // Raising nice needs no privilege, and sched_getattr works for anyone: real syscalls.
        std::thread::spawn(|| {
            set_policy(0, Policy::Batch { nice: 7 }).unwrap();
            assert_eq!(get_policy(gettid()).unwrap(), Policy::Batch { nice: 7 });
            let aff = get_affinity(0).unwrap();
            assert!(!aff.is_empty());
        })
        .join()
        .unwrap();
    }
}
