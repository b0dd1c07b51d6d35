//! Real CPU work of a requested length: a busy loop, calibrated on this CPU, run in short chunks
//! until the thread's own CPU clock (CLOCK_THREAD_CPUTIME_ID) has advanced by the requested amount.
//!
//! Why the CPU clock and not only the calibration: the model's service time `C` is CPU time on a
//! dedicated CPU, and the kernel charges a reservation's budget from the same per-task clock. A pure
//! calibrated loop was measured here using 1.2× the requested CPU time (the fastest calibration run
//! is faster than the sustained loop under timer interrupts and VM exits), which shifts every point
//! of a validation towards instability. Preemption and throttling do not advance the thread's CPU
//! clock, so a request for `C` costs `C` of budget whatever happens around it — under a reservation
//! it takes longer in wall-clock time, which is what the model predicts.
//!
//! The calibration (the fastest of many short runs) only sizes the chunks, about 20 µs each.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// A calibrated busy loop.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Spinner {
    /// Loop iterations per nanosecond of undisturbed CPU time.
    pub iters_per_ns: f64,
}

const CHUNK: u64 = 4_000;

#[inline(never)]
fn burn(iters: u64) -> u64 {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in 0..iters {
        // A dependent multiply-add chain: the compiler cannot skip it or vectorize it away.
        x = black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
    }
    x
}

impl Spinner {
    /// Calibrates for about `budget` of wall time (100 ms is plenty).
    pub fn calibrate(budget: Duration) -> Spinner {
        burn(CHUNK * 10); // warm caches and the frequency governor
        let start = Instant::now();
        let mut best = f64::INFINITY;
        let mut runs = 0;
        while runs < 20 || (start.elapsed() < budget && runs < 100_000) {
            let t = Instant::now();
            black_box(burn(black_box(CHUNK)));
            best = best.min(t.elapsed().as_nanos() as f64);
            runs += 1;
        }
        Spinner { iters_per_ns: CHUNK as f64 / best.max(1.0) }
    }

    /// Uses `work` of this thread's CPU time.
    pub fn spin(&self, work: Duration) {
        let target = thread_cpu_ns() + work.as_nanos() as u64;
        loop {
            let now = thread_cpu_ns();
            if now >= target {
                break;
            }
            let chunk_ns = (target - now).min(CHUNK_NS);
            let iters = ((chunk_ns as f64 * self.iters_per_ns) as u64).max(1);
            black_box(burn(black_box(iters)));
        }
    }
}

/// Work between two looks at the CPU clock: small against any compute amount worth modelling, large
/// against the ~1 µs a clock read costs.
const CHUNK_NS: u64 = 20_000;

/// This thread's CPU time in ns.
pub use rtslice_sys::time::thread_cpu_ns;

#[cfg(test)]
mod tests {
    use super::*;

    /// The loop burns about the asked CPU time. Judged on this thread's CPU time (preemption by the
    /// other builds and tests on this 2-CPU VM does not count there) and on the best of several tries.
    #[test]
    fn spin_takes_the_asked_time() {
        let s = Spinner::calibrate(Duration::from_millis(50));
        assert!(s.iters_per_ns > 0.0);
        let best = |d: Duration| {
            (0..15)
                .map(|_| {
                    let t = thread_cpu_ns();
                    s.spin(d);
                    Duration::from_nanos(thread_cpu_ns() - t)
                })
                .min()
                .unwrap()
        };
        let two = best(Duration::from_millis(2));
        // Never less than asked; at most one chunk and a clock read more.
        assert!(two >= Duration::from_millis(2) && two <= Duration::from_micros(2100), "2 ms of work took {two:?} of CPU");
        assert!(best(Duration::from_micros(200)) < two);
    }
}
