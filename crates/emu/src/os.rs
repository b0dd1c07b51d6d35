//! Thin, checked wrappers over the Linux calls the emulator needs: thread names, scheduling
//! classes, affinity, the absolute-time clock and per-thread CPU time.

use std::io;

use serde::{Deserialize, Serialize};

/// Linux scheduling class of a thread, as the real stacks request them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    Other,
    Fifo,
    Rr,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Other => "SCHED_OTHER",
            Class::Fifo => "SCHED_FIFO",
            Class::Rr => "SCHED_RR",
        }
    }
    fn raw(self) -> libc::c_int {
        match self {
            Class::Other => libc::SCHED_OTHER,
            Class::Fifo => libc::SCHED_FIFO,
            Class::Rr => libc::SCHED_RR,
        }
    }
    /// The class from the kernel's numeric policy (`/proc/<tid>/stat` field 41).
    pub fn from_raw(policy: i32) -> Option<Class> {
        match policy {
            libc::SCHED_OTHER => Some(Class::Other),
            libc::SCHED_FIFO => Some(Class::Fifo),
            libc::SCHED_RR => Some(Class::Rr),
            _ => None,
        }
    }
}

pub fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// Names the calling thread (`comm`, at most 15 bytes), as `prctl(PR_SET_NAME)` in the real stacks.
pub fn set_thread_name(name: &str) -> io::Result<()> {
    let mut buf = [0u8; 16];
    let bytes = name.as_bytes();
    let n = bytes.len().min(15);
    buf[..n].copy_from_slice(&bytes[..n]);
    // SAFETY: buf is NUL-terminated and outlives the call.
    let rc = unsafe { libc::prctl(libc::PR_SET_NAME, buf.as_ptr() as libc::c_ulong, 0, 0, 0) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Sets the calling thread's class and priority (priority ignored for SCHED_OTHER).
pub fn set_thread_class(class: Class, priority: i32) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: if class == Class::Other { 0 } else { priority } };
    // SAFETY: pid 0 = calling thread; param is a valid pointer.
    let rc = unsafe { libc::sched_setscheduler(0, class.raw(), &param) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Pins the calling thread to `cpus`.
pub fn set_thread_affinity(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET bounds are checked below.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            if c >= libc::CPU_SETSIZE as usize {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("CPU {c} is out of range")));
            }
            libc::CPU_SET(c, &mut set);
        }
        let rc = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
    }
}

/// CLOCK_MONOTONIC in nanoseconds.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time of the calling thread in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sleeps until the absolute CLOCK_MONOTONIC time `deadline_ns` (TIMER_ABSTIME: no drift from
/// the time spent computing, as a radio's sample clock).
pub fn sleep_until_ns(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    loop {
        // SAFETY: valid timespec; remaining time is not needed with TIMER_ABSTIME.
        let rc = unsafe {
            libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut())
        };
        if rc != libc::EINTR {
            return;
        }
    }
}

/// The CPUs this process may run on now.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

/// (policy, rt_priority) of a task from `/proc/<pid>/task/<tid>/stat`.
pub fn task_policy(pid: u32, tid: i32) -> Option<(Class, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    // comm may contain spaces and parentheses: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); rt_priority is field 40, policy 41.
    let prio = f.get(40 - 3)?.parse().ok()?;
    let policy = f.get(41 - 3)?.parse().ok()?;
    Some((Class::from_raw(policy)?, prio))
}
