//! Per-thread scheduling, the one place rtslice sets or reads a policy or a CPU affinity:
//! `sched_setattr(2)`/`sched_getattr(2)` for every policy (the emulator's and load generator's own
//! classes too, see [`set_sched_class`]) and `sched_{set,get}affinity(2)`. Neither libc, rustix nor
//! nix wraps the *attr calls, so they go through `syscall(2)` with the kernel's `struct sched_attr`
//! layout (VER0, 48 bytes); affinity goes through rustix.
//!
//! Errors are the kernel's (`std::io::Error` with its errno) so callers can tell an exited thread
//! (ESRCH) from a refused admission (EBUSY) and say what to do.

use std::io;

use serde::{Deserialize, Serialize};

use crate::error::{Result, SysError};

/// The kernel's numeric policies (`/proc/<tid>/stat` field 41, `sched_attr.sched_policy`).
pub const SCHED_OTHER: u32 = libc::SCHED_OTHER as u32;
pub const SCHED_FIFO: u32 = libc::SCHED_FIFO as u32;
pub const SCHED_RR: u32 = libc::SCHED_RR as u32;
pub const SCHED_BATCH: u32 = libc::SCHED_BATCH as u32;
pub const SCHED_IDLE: u32 = libc::SCHED_IDLE as u32;
pub const SCHED_DEADLINE: u32 = 6;
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
        let base = KernelSchedAttr { size: std::mem::size_of::<KernelSchedAttr>() as u32, ..Default::default() };
        match self {
            SchedAttr::Other { nice } => KernelSchedAttr { sched_policy: SCHED_OTHER, sched_nice: nice, ..base },
            SchedAttr::Batch { nice } => KernelSchedAttr { sched_policy: SCHED_BATCH, sched_nice: nice, ..base },
            SchedAttr::Idle => KernelSchedAttr { sched_policy: SCHED_IDLE, ..base },
            SchedAttr::Fifo { priority } => KernelSchedAttr { sched_policy: SCHED_FIFO, sched_priority: priority, ..base },
            SchedAttr::Rr { priority } => KernelSchedAttr { sched_policy: SCHED_RR, sched_priority: priority, ..base },
            SchedAttr::Deadline { runtime_ns, deadline_ns, period_ns, reclaim } => KernelSchedAttr {
                sched_policy: SCHED_DEADLINE,
                sched_flags: SCHED_FLAG_RESET_ON_FORK | if reclaim { SCHED_FLAG_RECLAIM } else { 0 },
                sched_runtime: runtime_ns,
                sched_deadline: deadline_ns,
                sched_period: period_ns,
                ..base
            },
        }
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
///
/// A thread leaving SCHED_DEADLINE first gives its bandwidth back ([`BANDWIDTH_RELEASE`]): the
/// kernel keeps a deadline thread's bandwidth in its root domain's admission total until the
/// thread's 0-lag time and frees it from the "inactive timer" — which is not armed for a thread
/// that is asleep when it is switched to another class, so that bandwidth is never freed, also
/// after the thread exits, until the root domains are rebuilt (measured on 6.1, 6.12-rt and 6.18:
/// three rounds of "SCHED_DEADLINE 60 % on a sleeping process, then SCHED_OTHER" and a 2-CPU root
/// domain admitted nothing more; docs/host.md). Changing a deadline thread's parameters moves the
/// accounting at once, so a shrink to a negligible bandwidth before the class change leaves nothing
/// behind.
///
/// When the kernel refuses the class change (an RT policy in a group without RT runtime), the
/// thread gets its deadline parameters back: left shrunk it would run 1 µs every 4 s, and a signal
/// it must handle — a SIGKILL's exit included — would take minutes (each overrun of a few µs
/// throttles it for hundreds of seconds; docs/testing.md has the hang this caused).
pub fn set_attr(tid: i32, attr: SchedAttr) -> io::Result<()> {
    let leaving = if matches!(attr, SchedAttr::Deadline { .. }) { None } else { get_attr(tid).ok().filter(|a| matches!(a, SchedAttr::Deadline { .. })) };
    let Some(was) = leaving else { return set_attr_raw(tid, attr) };
    // Best effort: if the shrink is refused the class change below still runs and says why.
    // A host whose sched_deadline_period_max_us is below 4 s takes 1 s (one 2^-20 unit kept).
    if set_attr_raw(tid, BANDWIDTH_RELEASE).is_err() {
        let _ = set_attr_raw(tid, SchedAttr::Deadline { runtime_ns: 1024, deadline_ns: 1_000_000_000, period_ns: 1_000_000_000, reclaim: false });
    }
    let changed = set_attr_raw(tid, attr);
    if changed.is_err() {
        // Re-admitted at what it held a moment ago; should another thread have taken that
        // bandwidth meanwhile, it keeps the shrunk parameters and the error below says why.
        let _ = set_attr_raw(tid, was);
    }
    changed
}

/// Switches every SCHED_DEADLINE thread of process `pid` to SCHED_OTHER (each through [`set_attr`],
/// so its bandwidth is given back first) and returns how many it switched. For a process that
/// outlives SIGKILL: a dying process exits only when its last thread runs, and a deadline thread can
/// be throttled for good — seen on 6.18 (docs/results.md, issue 15): a thread whose budget restore
/// the kernel refused (EBUSY) was left in a removed partition with a negative runtime, a deadline
/// minutes in the past and no replenishment timer, and its killed process waited 12 minutes until
/// the thread was switched to SCHED_OTHER, when it exited at once.
pub fn release_deadline_threads(pid: u32) -> usize {
    crate::procfs::tasks(pid)
        .into_iter()
        .filter_map(|t| i32::try_from(t).ok())
        .filter(|&tid| get_kernel_attr(tid).is_ok_and(|k| k.sched_policy == SCHED_DEADLINE))
        .filter(|&tid| set_attr(tid, SchedAttr::Other { nice: 0 }).is_ok())
        .count()
}

/// What a thread leaving SCHED_DEADLINE is shrunk to first: the kernel's smallest runtime (1024 ns)
/// every 4 s, the default `sched_deadline_period_max_us` — (1024 << 20) / 4e9 rounds to 0 in the
/// kernel's fixed-point bandwidth, so nothing is held back.
pub const BANDWIDTH_RELEASE: SchedAttr =
    SchedAttr::Deadline { runtime_ns: 1024, deadline_ns: 4_000_000_000, period_ns: 4_000_000_000, reclaim: false };

fn set_attr_raw(tid: i32, attr: SchedAttr) -> io::Result<()> {
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

/// A thread's numeric policy as the kernel reports it, with its [`SchedAttr`]: policies newer than
/// [`SchedAttr`] knows (SCHED_EXT, 7, on 6.12+ kernels) read as `Other` there, so a report that
/// must name them looks at the number.
pub fn get_policy_and_attr(tid: i32) -> io::Result<(u32, SchedAttr)> {
    get_kernel_attr(tid).map(|k| (k.sched_policy, SchedAttr::from_kernel(&k)))
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

/// Sets a thread's CPU affinity (`sched_setaffinity`). `tid` 0 means the calling thread (and the
/// threads it creates afterwards). CPUs beyond the kernel's CPU_SETSIZE are left out (no such CPU can
/// be online); a set left empty is the kernel's EINVAL.
pub fn set_affinity(tid: i32, cpus: impl IntoIterator<Item = u32>) -> io::Result<()> {
    rustix::thread::sched_setaffinity(pid_arg(tid)?, &cpu_set(cpus)).map_err(io::Error::from)
}

/// `cpus` as the kernel's CPU set, leaving out CPUs beyond CPU_SETSIZE (see [`set_affinity`]).
pub(crate) fn cpu_set(cpus: impl IntoIterator<Item = u32>) -> rustix::thread::CpuSet {
    let mut set = rustix::thread::CpuSet::new();
    for cpu in cpus {
        if (cpu as usize) < rustix::thread::CpuSet::MAX_CPU {
            set.set(cpu as usize);
        }
    }
    set
}

/// The affinity processes spawned with [`crate::proc_ref::spawn_in_session`] get after
/// [`confine_process`]: this process's own from before, which they would otherwise have inherited.
static SPAWN_AFFINITY: std::sync::OnceLock<Vec<u32>> = std::sync::OnceLock::new();

/// Confines every thread of this process, and so every thread they create later, to `cpus`: a
/// service's own work (its API, telemetry, thread-rule agent) stays on the housekeeping CPUs and off
/// the CPUs it reserves for others, where, under a kernel without preemption, its system calls hold
/// the CPU under what runs there. What it spawns afterwards through
/// [`crate::proc_ref::spawn_in_session`] gets the process's earlier affinity back.
pub fn confine_process(cpus: &[u32]) -> io::Result<()> {
    let before = get_affinity(0)?;
    let _ = SPAWN_AFFINITY.set(before);
    let mut want = cpus.to_vec();
    want.sort_unstable();
    want.dedup();
    // A thread created while this runs inherits its creator's affinity, which may not be confined
    // yet: passes repeat until one finds every thread confined.
    for _ in 0..16 {
        let mut changed = false;
        for tid in crate::procfs::tasks(std::process::id()) {
            let tid = tid as i32;
            if get_affinity(tid).is_ok_and(|a| a != want) {
                match set_affinity(tid, want.iter().copied()) {
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                    Err(e) => return Err(e),
                    Ok(()) => changed = true,
                }
            }
        }
        if !changed {
            break;
        }
    }
    Ok(())
}

/// The affinity spawned processes get back (see [`confine_process`]); `None` before it ran.
pub fn spawn_affinity() -> Option<&'static [u32]> {
    SPAWN_AFFINITY.get().map(Vec::as_slice)
}

/// A thread's CPU affinity (`sched_getaffinity`), ascending CPU ids. `tid` 0 means the calling thread.
pub fn get_affinity(tid: i32) -> io::Result<Vec<u32>> {
    let set = rustix::thread::sched_getaffinity(pid_arg(tid)?)?;
    Ok((0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).map(|c| c as u32).collect())
}

/// The classic scheduling classes a thread asks for itself (the emulator's and the load generator's
/// threads): the subset of [`SchedAttr`] that needs no bandwidth admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedClass {
    Other,
    Fifo,
    Rr,
}

impl SchedClass {
    /// The class from the kernel's numeric policy (`/proc/<tid>/stat` field 41, sched_getattr).
    pub fn from_raw(policy: u32) -> Option<SchedClass> {
        match policy {
            SCHED_OTHER => Some(SchedClass::Other),
            SCHED_FIFO => Some(SchedClass::Fifo),
            SCHED_RR => Some(SchedClass::Rr),
            _ => None,
        }
    }
}

/// Puts the calling thread into `class` at `priority` (ignored for SCHED_OTHER). Like
/// sched_setscheduler(2), moving to SCHED_OTHER keeps the thread's nice value.
pub fn set_sched_class(class: SchedClass, priority: i32) -> Result<()> {
    let call = || format!("sched_setattr({class:?}, priority {priority}) (real-time classes need root or CAP_SYS_NICE)");
    let attr = match class {
        SchedClass::Other => {
            // PRIO_PROCESS with pid 0 is the calling thread on Linux (nice is per thread).
            let nice = rustix::process::getpriority_process(None).map_err(|e| SysError::call(call())(e.into()))?;
            SchedAttr::Other { nice }
        }
        SchedClass::Fifo => SchedAttr::Fifo { priority: priority.max(0) as u32 },
        SchedClass::Rr => SchedAttr::Rr { priority: priority.max(0) as u32 },
    };
    set_attr(0, attr).map_err(SysError::call(call()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thread::gettid;

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
            let beyond = rustix::thread::CpuSet::MAX_CPU as u32;
            assert_eq!(set_affinity(0, [beyond]).unwrap_err().kind(), io::ErrorKind::InvalidInput, "no CPU left: EINVAL");
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

#[cfg(test)]
mod class_tests {
    use super::*;
    use crate::thread::gettid;

    #[test]
    fn own_class_is_read_back() {
        let info = get_attr(gettid()).unwrap();
        assert!(matches!(info, SchedAttr::Other { .. }));
        assert_eq!(get_policy_and_attr(gettid()).unwrap(), (SCHED_OTHER, info));
        assert_eq!(SchedClass::from_raw(SCHED_OTHER), Some(SchedClass::Other));
        assert_eq!(SchedClass::from_raw(SCHED_DEADLINE), None);
        assert!(get_attr(i32::MAX >> 2).is_err());
    }

    #[test]
    fn a_process_s_deadline_threads_are_released_to_sched_other() {
        rtslice_testkit::root_or_skip!();
        let _lock = rtslice_testkit::KernelLock::acquire(); // deadline admission is host-wide
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let dl = SchedAttr::Deadline { runtime_ns: 100_000, deadline_ns: 10_000_000, period_ns: 10_000_000, reclaim: false };
        let set = set_attr(pid as i32, dl);
        let released = release_deadline_threads(pid);
        let after = get_attr(pid as i32);
        let _ = child.kill();
        let _ = child.wait();
        set.expect("a 1 % deadline reservation for a sleeping child");
        assert_eq!(released, 1, "the child's one thread was SCHED_DEADLINE");
        assert_eq!(after.unwrap(), SchedAttr::Other { nice: 0 });
        assert_eq!(release_deadline_threads(pid), 0, "a reaped process has no threads to release");
    }

    #[test]
    fn fifo_when_root() {
        rtslice_testkit::root_or_skip!();
        std::thread::spawn(|| {
            rustix::process::setpriority_process(None, 4).unwrap();
            set_sched_class(SchedClass::Fifo, 3).unwrap();
            assert_eq!(get_attr(gettid()).unwrap(), SchedAttr::Fifo { priority: 3 });
            set_sched_class(SchedClass::Other, 99).unwrap();
            assert_eq!(get_attr(gettid()).unwrap(), SchedAttr::Other { nice: 4 }, "back to OTHER keeps the nice value");
        })
        .join()
        .unwrap();
    }
}
