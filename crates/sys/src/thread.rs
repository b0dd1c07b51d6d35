//! The calling thread: its id, name, CPU affinity, timer slack and (for the emulator and the load
//! generator) its plain scheduling class. SCHED_DEADLINE and the attributes apply writes on other
//! threads live in [`crate::sched`].

use std::ffi::CString;
use std::num::NonZeroU64;

use rustix::thread::CpuSet;

use crate::error::{Result, SysError};

/// The calling thread's id (the kernel's tid; the pid for the main thread).
pub fn gettid() -> u32 {
    rustix::thread::gettid().as_raw_nonzero().get() as u32
}

/// Names the calling thread (`comm`, what `ps -L`, thread rules and traces show). The kernel keeps
/// at most 15 bytes: longer names are cut, as `prctl(PR_SET_NAME)` does.
pub fn set_name(name: &str) -> Result<()> {
    let mut end = name.len().min(15);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    let c = CString::new(&name[..end]).map_err(|_| SysError::Invalid(format!("thread name {name:?} contains a NUL byte")))?;
    rustix::thread::set_name(&c).map_err(|e| SysError::call(format!("prctl(PR_SET_NAME, {name:?})"))(e.into()))
}

fn cpu_set(cpus: &[usize]) -> Result<CpuSet> {
    let mut set = CpuSet::new();
    for &c in cpus {
        if c >= CpuSet::MAX_CPU {
            return Err(SysError::Invalid(format!("CPU {c} is out of range (the affinity mask holds {} CPUs)", CpuSet::MAX_CPU)));
        }
        set.set(c);
    }
    Ok(set)
}

/// Restricts the calling thread (and the threads it creates afterwards) to `cpus`.
pub fn set_affinity(cpus: &[usize]) -> Result<()> {
    let set = cpu_set(cpus)?;
    rustix::thread::sched_setaffinity(None, &set)
        .map_err(|e| SysError::call(format!("sched_setaffinity(CPUs {cpus:?}) (are they online and in this cpuset?)"))(e.into()))
}

/// The CPUs the calling thread may run on now.
pub fn affinity() -> Result<Vec<usize>> {
    let set = rustix::thread::sched_getaffinity(None).map_err(|e| SysError::call("sched_getaffinity")(e.into()))?;
    Ok((0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect())
}

/// Timer slack of the calling thread in ns (1 = timers fire as exactly as the hardware allows; the
/// default 50 µs would add jitter to short sleeps).
pub fn set_timer_slack_ns(ns: u64) -> Result<()> {
    // 0 would mean "back to the default": the smallest real slack is 1 ns.
    rustix::thread::set_current_timer_slack(NonZeroU64::new(ns.max(1)))
        .map_err(|e| SysError::call(format!("prctl(PR_SET_TIMERSLACK, {ns})"))(e.into()))
}

/// The classic scheduling classes a thread can ask for itself with sched_setscheduler(2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedClass {
    Other,
    Fifo,
    Rr,
}

impl SchedClass {
    fn raw(self) -> libc::c_int {
        match self {
            SchedClass::Other => libc::SCHED_OTHER,
            SchedClass::Fifo => libc::SCHED_FIFO,
            SchedClass::Rr => libc::SCHED_RR,
        }
    }

    /// The class from the kernel's numeric policy (`/proc/<tid>/stat` field 41, sched_getattr).
    pub fn from_raw(policy: u32) -> Option<SchedClass> {
        match policy as libc::c_int {
            libc::SCHED_OTHER => Some(SchedClass::Other),
            libc::SCHED_FIFO => Some(SchedClass::Fifo),
            libc::SCHED_RR => Some(SchedClass::Rr),
            _ => None,
        }
    }
}

/// Puts the calling thread into `class` at `priority` (ignored, i.e. 0, for SCHED_OTHER).
pub fn set_sched_class(class: SchedClass, priority: i32) -> Result<()> {
    let param = libc::sched_param { sched_priority: if class == SchedClass::Other { 0 } else { priority } };
    // rustix and nix do not wrap sched_setscheduler.
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param that outlives the call.
    let rc = unsafe { libc::sched_setscheduler(0, class.raw(), &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(SysError::call(format!("sched_setscheduler({class:?}, priority {priority}) (real-time classes need root or CAP_SYS_NICE)"))(
            std::io::Error::last_os_error(),
        ))
    }
}

/// A thread's scheduling attributes as sched_getattr(2) reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedInfo {
    /// The kernel's numeric policy (SCHED_OTHER 0, FIFO 1, RR 2, BATCH 3, IDLE 5, DEADLINE 6).
    pub policy: u32,
    /// Real-time priority (FIFO/RR), 0 otherwise.
    pub priority: u32,
    /// SCHED_DEADLINE runtime, deadline and period in ns (0 for other policies).
    pub runtime_ns: u64,
    pub deadline_ns: u64,
    pub period_ns: u64,
}

pub const SCHED_OTHER: u32 = libc::SCHED_OTHER as u32;
pub const SCHED_FIFO: u32 = libc::SCHED_FIFO as u32;
pub const SCHED_RR: u32 = libc::SCHED_RR as u32;
pub const SCHED_BATCH: u32 = libc::SCHED_BATCH as u32;
pub const SCHED_IDLE: u32 = libc::SCHED_IDLE as u32;
pub const SCHED_DEADLINE: u32 = 6;

/// Scheduling attributes of thread `tid` (any process).
pub fn sched_info(tid: u32) -> Result<SchedInfo> {
    // struct sched_attr, SCHED_ATTR_SIZE_VER0 (48 bytes) with room for later versions:
    // u32 size, u32 policy, u64 flags, i32 nice, u32 priority, u64 runtime, deadline, period.
    let mut attr = [0u64; 8];
    // No crate wraps sched_getattr.
    // SAFETY: `attr` is 64 writable bytes and we pass that size; the kernel writes at most that.
    let rc = unsafe { libc::syscall(libc::SYS_sched_getattr, tid as libc::c_long, attr.as_mut_ptr(), 64u32, 0u32) };
    if rc != 0 {
        return Err(SysError::call(format!("sched_getattr(thread {tid})"))(std::io::Error::last_os_error()));
    }
    Ok(SchedInfo {
        policy: (attr[0] >> 32) as u32,
        priority: (attr[2] >> 32) as u32,
        runtime_ns: attr[3],
        deadline_ns: attr[4],
        period_ns: attr[5],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_thread() {
        let tid = gettid();
        assert!(std::path::Path::new(&format!("/proc/self/task/{tid}")).exists());
        std::thread::spawn(|| {
            set_name("rtsys-a-very-long-thread-name").unwrap();
            let comm = std::fs::read_to_string(format!("/proc/self/task/{}/comm", gettid())).unwrap();
            assert_eq!(comm.trim_end(), "rtsys-a-very-lo");
            assert!(set_name("bad\0name").is_err());
            let all = affinity().unwrap();
            assert!(!all.is_empty());
            set_affinity(&all[..1]).unwrap();
            assert_eq!(affinity().unwrap(), all[..1].to_vec());
            assert!(matches!(set_affinity(&[CpuSet::MAX_CPU]), Err(SysError::Invalid(_))));
            set_timer_slack_ns(1).unwrap();
            assert_eq!(rustix::thread::current_timer_slack().unwrap(), 1);
        })
        .join()
        .unwrap();
        let info = sched_info(tid).unwrap();
        assert_eq!(info.policy, SCHED_OTHER);
        assert_eq!(SchedClass::from_raw(info.policy), Some(SchedClass::Other));
        assert!(sched_info(u32::MAX >> 2).is_err());
    }

    #[test]
    fn fifo_when_root() {
        if !crate::process::is_root() {
            eprintln!("SKIPPED fifo_when_root: needs root (CI runs as root)");
            return;
        }
        std::thread::spawn(|| {
            set_sched_class(SchedClass::Fifo, 3).unwrap();
            let info = sched_info(gettid()).unwrap();
            assert_eq!((info.policy, info.priority), (SCHED_FIFO, 3));
            set_sched_class(SchedClass::Other, 99).unwrap();
            assert_eq!(sched_info(gettid()).unwrap().policy, SCHED_OTHER);
        })
        .join()
        .unwrap();
    }
}
