//! Hardware counters per workload thread with perf_event_open(2): cycles, instructions, cache
//! references/misses and LLC read misses → IPC and MPKI. Where the PMU is absent (this project's
//! Firecracker VMs) the report says "unsupported: <reason>"; no number is ever estimated.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use serde::Serialize;

use crate::host::Measurement;

const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_TYPE_HW_CACHE: u32 = 3;
const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
const PERF_COUNT_HW_INSTRUCTIONS: u64 = 1;
const PERF_COUNT_HW_CACHE_REFERENCES: u64 = 2;
const PERF_COUNT_HW_CACHE_MISSES: u64 = 3;
// LL cache, read, miss: id | (op << 8) | (result << 16)
const LLC_READ_MISS: u64 = 2 | (0 << 8) | (1 << 16);
const PERF_FORMAT_TOTAL_TIME_ENABLED: u64 = 1;
const PERF_FORMAT_TOTAL_TIME_RUNNING: u64 = 2;
const FLAG_INHERIT: u64 = 1 << 1;
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

const EVENTS: [(&str, u32, u64); 5] = [
    ("cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES),
    ("instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS),
    ("cache_references", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES),
    ("cache_misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES),
    ("llc_read_misses", PERF_TYPE_HW_CACHE, LLC_READ_MISS),
];

fn open_counter(type_: u32, config: u64, tid: i32) -> io::Result<OwnedFd> {
    let attr = PerfEventAttr {
        type_,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config,
        read_format: PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING,
        flags: FLAG_INHERIT | FLAG_EXCLUDE_HV,
        ..Default::default()
    };
    // SAFETY: attr is a valid perf_event_attr of the size it declares; the kernel reads it only.
    let fd = unsafe {
        libc::syscall(libc::SYS_perf_event_open, &attr as *const PerfEventAttr, tid, -1i32, -1i32, PERF_FLAG_FD_CLOEXEC)
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a new fd that we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Counter value scaled for multiplexing (value × enabled / running).
fn read_scaled(fd: &OwnedFd) -> Option<u64> {
    let mut buf = [0u64; 3];
    // SAFETY: buf is 24 writable bytes, the size of this read_format's record.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), 24) };
    if n != 24 || buf[2] == 0 {
        return None;
    }
    Some((buf[0] as u128 * buf[1] as u128 / buf[2] as u128) as u64)
}

fn explain(err: &io::Error) -> String {
    match err.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
            format!("no hardware PMU is exposed to this machine (perf_event_open cycles: {err}); VMs often hide it")
        }
        Some(libc::EACCES) | Some(libc::EPERM) => format!(
            "not permitted (perf_event_open cycles: {err}); run as root or lower kernel.perf_event_paranoid"
        ),
        Some(libc::ENOSYS) => "the kernel has no perf events (CONFIG_PERF_EVENTS=n)".into(),
        _ => format!("perf_event_open cycles failed: {err}"),
    }
}

/// Counters opened on every thread of the target at session start (`inherit` adds threads they
/// create later).
pub(crate) struct HwCounters {
    counters: Vec<(usize, OwnedFd)>, // (index into EVENTS, fd)
    unsupported: Option<String>,
}

impl HwCounters {
    pub fn open(tids: &[u32]) -> HwCounters {
        if tids.is_empty() {
            return HwCounters { counters: Vec::new(), unsupported: Some("no thread to count yet".into()) };
        }
        // Probe with the first thread: a missing PMU fails every open the same way.
        if let Err(e) = open_counter(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, tids[0] as i32) {
            return HwCounters { counters: Vec::new(), unsupported: Some(explain(&e)) };
        }
        let mut counters = Vec::new();
        for &tid in tids {
            for (i, (_, type_, config)) in EVENTS.iter().enumerate() {
                // A thread that exited meanwhile, or one event the PMU lacks: skip just that one.
                if let Ok(fd) = open_counter(*type_, *config, tid as i32) {
                    counters.push((i, fd));
                }
            }
        }
        HwCounters { counters, unsupported: None }
    }

    pub fn disabled() -> HwCounters {
        HwCounters { counters: Vec::new(), unsupported: Some("not measured (disabled by the caller)".into()) }
    }

    pub fn report(&self) -> Measurement<HwReport> {
        if let Some(reason) = &self.unsupported {
            return Measurement::Missing(format!("unsupported: {reason}"));
        }
        let mut sums = [None::<u64>; 5];
        for (i, fd) in &self.counters {
            if let Some(v) = read_scaled(fd) {
                sums[*i] = Some(sums[*i].unwrap_or(0) + v);
            }
        }
        let [cycles, instructions, cache_references, cache_misses, llc_read_misses] = sums;
        let ipc = match (instructions, cycles) {
            (Some(i), Some(c)) if c > 0 => Some(i as f64 / c as f64),
            _ => None,
        };
        let per_kilo = |m: Option<u64>| match (m, instructions) {
            (Some(m), Some(i)) if i > 0 => Some(m as f64 * 1000.0 / i as f64),
            _ => None,
        };
        Measurement::Value(HwReport {
            cycles,
            instructions,
            cache_references,
            cache_misses,
            llc_read_misses,
            ipc,
            cache_mpki: per_kilo(cache_misses),
            llc_mpki: per_kilo(llc_read_misses),
        })
    }
}

/// Sums over the target's threads; a field is null when that event could not be counted.
#[derive(Clone, Debug, Serialize)]
pub struct HwReport {
    pub cycles: Option<u64>,
    pub instructions: Option<u64>,
    pub cache_references: Option<u64>,
    pub cache_misses: Option<u64>,
    pub llc_read_misses: Option<u64>,
    pub ipc: Option<f64>,
    pub cache_mpki: Option<f64>,
    pub llc_mpki: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_has_the_version0_size() {
        assert_eq!(std::mem::size_of::<PerfEventAttr>(), 64);
    }

    /// On a machine with a PMU this counts our own thread; without one it must say why, never invent.
    #[test]
    fn counts_or_says_unsupported() {
        let tid = unsafe { libc::gettid() } as u32;
        let c = HwCounters::open(&[tid]);
        let mut x = 0u64;
        for i in 0..1_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        match c.report() {
            Measurement::Value(r) => assert!(r.instructions.unwrap_or(0) > 1_000_000),
            Measurement::Missing(reason) => {
                assert!(reason.starts_with("unsupported: "), "{reason}");
                eprintln!("hardware counters: {reason}");
            }
        }
    }
}
