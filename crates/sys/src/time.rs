//! Clocks in nanoseconds and absolute sleeps. CLOCK_MONOTONIC is the one time base of every
//! timestamp rtslice compares across threads; the CPU-time clocks measure work, not wall time.

use rustix::time::{clock_gettime, ClockId, Timespec};

fn ns(ts: Timespec) -> u64 {
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC in nanoseconds.
pub fn monotonic_ns() -> u64 {
    ns(clock_gettime(ClockId::Monotonic))
}

/// CPU time consumed by the calling thread, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    ns(clock_gettime(ClockId::ThreadCPUTime))
}

/// Sleeps until the absolute CLOCK_MONOTONIC time `deadline_ns` (TIMER_ABSTIME: no drift from the
/// time spent computing, as a radio's sample clock). A signal does not cut the sleep short.
pub fn sleep_until_ns(deadline_ns: u64) {
    let ts = Timespec { tv_sec: (deadline_ns / 1_000_000_000) as i64, tv_nsec: (deadline_ns % 1_000_000_000) as _ };
    // Only EINTR can come back for a valid absolute time on a valid clock; retry it.
    while rustix::thread::clock_nanosleep_absolute(ClockId::Monotonic, &ts) == Err(rustix::io::Errno::INTR) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_advance_and_sleep_reaches_its_deadline() {
        let t0 = monotonic_ns();
        let c0 = thread_cpu_ns();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(thread_cpu_ns() > c0);
        let deadline = monotonic_ns() + 2_000_000;
        sleep_until_ns(deadline);
        assert!(monotonic_ns() >= deadline);
        assert!(monotonic_ns() > t0);
        // A deadline in the past returns at once.
        sleep_until_ns(t0);
    }
}
