//! Hardware counters with perf_event_open(2). Where the PMU is absent (virtual machines such as
//! this project's Firecracker VMs) opening fails with ENOENT/EOPNOTSUPP/ENODEV and callers report
//! "unsupported"; nothing here ever estimates a count.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

use crate::error::{Result, SysError};

/// A generic hardware event: (perf type, config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HwEvent {
    pub type_: u32,
    pub config: u64,
}

const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_TYPE_HW_CACHE: u32 = 3;

impl HwEvent {
    pub const CYCLES: HwEvent = HwEvent { type_: PERF_TYPE_HARDWARE, config: 0 };
    pub const INSTRUCTIONS: HwEvent = HwEvent { type_: PERF_TYPE_HARDWARE, config: 1 };
    pub const CACHE_REFERENCES: HwEvent = HwEvent { type_: PERF_TYPE_HARDWARE, config: 2 };
    pub const CACHE_MISSES: HwEvent = HwEvent { type_: PERF_TYPE_HARDWARE, config: 3 };
    /// LL cache, read, miss: id | (op << 8) | (result << 16).
    pub const LLC_READ_MISSES: HwEvent = HwEvent { type_: PERF_TYPE_HW_CACHE, config: 2 | (1 << 16) };
}

/// How a counter counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterOptions {
    /// Also count threads the target creates after opening.
    pub inherit: bool,
    /// Count user space only (exclude_kernel).
    pub user_only: bool,
    /// Open disabled (a probe that only checks the PMU is there).
    pub disabled: bool,
}

const PERF_FORMAT_TOTAL_TIME_ENABLED: u64 = 1;
const PERF_FORMAT_TOTAL_TIME_RUNNING: u64 = 2;
const FLAG_DISABLED: u64 = 1;
const FLAG_INHERIT: u64 = 1 << 1;
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// perf_event_attr up to PERF_ATTR_SIZE_VER0 (64 bytes), enough for counting.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

/// One open counter on one thread.
#[derive(Debug)]
pub struct Counter {
    fd: OwnedFd,
}

impl Counter {
    /// Opens `event` on thread `tid` (0: the calling thread), any CPU.
    pub fn open(event: HwEvent, tid: u32, options: CounterOptions) -> Result<Counter> {
        let mut flags = FLAG_EXCLUDE_HV;
        if options.inherit {
            flags |= FLAG_INHERIT;
        }
        if options.user_only {
            flags |= FLAG_EXCLUDE_KERNEL;
        }
        if options.disabled {
            flags |= FLAG_DISABLED;
        }
        let attr = PerfEventAttr {
            type_: event.type_,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: event.config,
            read_format: PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING,
            flags,
            ..Default::default()
        };
        // Neither rustix nor nix wraps perf_event_open.
        // SAFETY: attr is a valid perf_event_attr of the size it declares and outlives the call;
        // the kernel only reads it.
        let fd = unsafe {
            libc::syscall(libc::SYS_perf_event_open, &attr as *const PerfEventAttr, tid as libc::pid_t, -1i32, -1i32, PERF_FLAG_FD_CLOEXEC)
        };
        if fd < 0 {
            return Err(SysError::call(format!("perf_event_open({event:?}, thread {tid})"))(io::Error::last_os_error()));
        }
        // SAFETY: the kernel just returned this fd; nothing else owns it.
        Ok(Counter { fd: unsafe { OwnedFd::from_raw_fd(fd as i32) } })
    }

    /// The count scaled for multiplexing (value × enabled / running); None before it ever ran.
    pub fn read_scaled(&self) -> Option<u64> {
        let mut buf = [0u8; 24];
        if rustix::io::read(&self.fd, &mut buf).ok()? != 24 {
            return None;
        }
        let word = |i: usize| u64::from_ne_bytes(buf[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let (value, enabled, running) = (word(0), word(1), word(2));
        if running == 0 {
            return None;
        }
        Some((value as u128 * enabled as u128 / running as u128) as u64)
    }
}

/// Opens (disabled) and closes a CPU-cycles counter on the calling thread: `Ok` when the machine has
/// a PMU the kernel exposes, the kernel's error otherwise (ENOENT/EOPNOTSUPP in VMs without one).
pub fn hardware_counters() -> Result<()> {
    Counter::open(HwEvent::CYCLES, 0, CounterOptions { disabled: true, ..CounterOptions::default() }).map(drop)
}

/// Why counters cannot be opened, in words for a report ("no hardware PMU …", "not permitted …").
pub fn explain(err: &SysError) -> String {
    match err.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
            format!("no hardware PMU is exposed to this machine ({err}); VMs often hide it")
        }
        Some(libc::EACCES) | Some(libc::EPERM) => {
            format!("not permitted ({err}); run as root or lower kernel.perf_event_paranoid")
        }
        Some(libc::ENOSYS) => "the kernel has no perf events (CONFIG_PERF_EVENTS=n)".into(),
        _ => format!("perf_event_open failed: {err}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_has_the_version0_size() {
        assert_eq!(std::mem::size_of::<PerfEventAttr>(), 64);
    }

    /// With a PMU this counts our own thread; without one the error says why.
    #[test]
    fn counts_or_explains() {
        match Counter::open(HwEvent::INSTRUCTIONS, 0, CounterOptions::default()) {
            Ok(c) => {
                let mut x = 0u64;
                for i in 0..1_000_000u64 {
                    x = x.wrapping_mul(31).wrapping_add(i);
                }
                std::hint::black_box(x);
                assert!(c.read_scaled().unwrap_or(0) > 1_000_000);
                hardware_counters().unwrap();
            }
            Err(e) => {
                // The probe gives the same answer, with the kernel's errno, never a made-up one.
                let probe = hardware_counters().unwrap_err();
                assert_eq!(probe.raw_os_error(), e.raw_os_error(), "{probe}");
                assert!(probe.raw_os_error().is_some(), "{probe}");
                let why = explain(&e);
                assert!(why.contains("perf_event_open"), "{why}");
                eprintln!("hardware counters: {why}");
            }
        }
    }
}
