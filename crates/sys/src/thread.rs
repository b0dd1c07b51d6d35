//! The calling thread's identity: its id, its name and its timer slack. Scheduling (policies,
//! priorities, SCHED_DEADLINE, CPU affinity of any thread, the calling one included) lives in
//! [`crate::sched`].

use std::ffi::CString;
use std::num::NonZeroU64;

use crate::error::{Result, SysError};

/// The calling thread's id: the kernel's `pid_t` tid (the pid for the main thread), the type every
/// per-thread call of [`crate::sched`] takes.
pub fn gettid() -> i32 {
    rustix::thread::gettid().as_raw_nonzero().get()
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

/// Timer slack of the calling thread in ns (1 = timers fire as exactly as the hardware allows; the
/// default 50 µs would add jitter to short sleeps).
pub fn set_timer_slack_ns(ns: u64) -> Result<()> {
    // 0 would mean "back to the default": the smallest real slack is 1 ns.
    rustix::thread::set_current_timer_slack(NonZeroU64::new(ns.max(1)))
        .map_err(|e| SysError::call(format!("prctl(PR_SET_TIMERSLACK, {ns})"))(e.into()))
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
            set_timer_slack_ns(1).unwrap();
            assert_eq!(rustix::thread::current_timer_slack().unwrap(), 1);
        })
        .join()
        .unwrap();
    }
}
