//! Whether a CPU was there at all: a `SCHED_FIFO 99` thread pinned to each watched CPU, outside
//! rtslice's cgroups, wakes every 500 µs and records each wake-up more than 1 ms late (when, how
//! late, on which CPU).
//!
//! On the development and CI machines (a Firecracker guest, preemption "none", memory the host
//! backs on first touch) a vCPU now and then stalls for milliseconds under every task on it. A stall
//! that the highest priority on the CPU suffers too is the host's: no reservation and no priority
//! protects a workload from it, so a timing test may excuse the deadline misses such stalls explain
//! — and only those. Anything the scheduler does to a workload (budgets, cpusets, policies, another
//! real-time thread) leaves this thread alone, so it never excuses a miss the system under test
//! caused.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The sentinel's period: short enough that a stall of 1 ms cannot fall between two wake-ups
/// unseen, long enough to cost nothing measurable (2,000 wake-ups a second per CPU).
const PERIOD_NS: u64 = 500_000;
/// A wake-up this late is a stall (the scheduler's own latency at FIFO 99 is tens of µs here).
const STALL_NS: u64 = 1_000_000;

/// One wake-up of a sentinel more than 1 ms late.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stall {
    pub cpu: u32,
    /// CLOCK_MONOTONIC time of the wake-up that was due, in ns.
    pub due_ns: u64,
    /// How late it came, in ns.
    pub late_ns: u64,
}

/// The stalls of a time span, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stalls {
    pub count: usize,
    pub total_ms: f64,
    /// How many periodic jobs of period `tti_ns` the stalls can make late: each stall's own periods
    /// twice over (the backlog it leaves behind is worked off at most at the rate it built up) plus
    /// `in_flight` jobs whose deadlines were already running when it began.
    pub explained_misses: u64,
}

/// FIFO 99 threads watching CPUs for stalls until dropped.
pub struct Sentinel {
    stop: Arc<AtomicBool>,
    stalls: Arc<Mutex<Vec<Stall>>>,
    handles: Vec<JoinHandle<()>>,
    /// Why a CPU is not watched, if one is not (the test then counts every miss against itself).
    pub failed: Option<String>,
}

impl Sentinel {
    /// Starts one sentinel thread on each of `cpus`.
    pub fn start(cpus: &[u32]) -> Sentinel {
        let stop = Arc::new(AtomicBool::new(false));
        let stalls = Arc::new(Mutex::new(Vec::new()));
        let mut handles = Vec::new();
        let mut failed = Vec::new();
        for &cpu in cpus {
            let (tx, rx) = std::sync::mpsc::channel::<Result<(), String>>();
            let (s, st) = (stop.clone(), stalls.clone());
            handles.push(std::thread::spawn(move || {
                // Under v1 RT groups a FIFO thread needs a group with RT runtime: the root's (no
                // such file elsewhere, which is fine).
                let tid = rtslice_sys::thread::gettid();
                let _ = std::fs::write("/sys/fs/cgroup/cpu/tasks", tid.to_string());
                let setup = rtslice_sys::sched::set_affinity(0, [cpu])
                    .and_then(|_| rtslice_sys::sched::set_attr(0, rtslice_sys::sched::SchedAttr::Fifo { priority: 99 }))
                    .map_err(|e| format!("cannot make a SCHED_FIFO 99 thread on CPU {cpu}: {e}"));
                let ok = setup.is_ok();
                let _ = tx.send(setup);
                if !ok {
                    return;
                }
                let mut next = rtslice_sys::time::monotonic_ns();
                while !s.load(Ordering::Relaxed) {
                    next += PERIOD_NS;
                    rtslice_sys::time::sleep_until_ns(next);
                    let now = rtslice_sys::time::monotonic_ns();
                    let late = now.saturating_sub(next);
                    if late > STALL_NS {
                        st.lock().unwrap_or_else(|p| p.into_inner()).push(Stall { cpu, due_ns: next, late_ns: late });
                    }
                    if late > PERIOD_NS {
                        next = now;
                    }
                }
            }));
            if let Some(why) = rx.recv().unwrap_or_else(|_| Err(format!("the sentinel thread of CPU {cpu} died"))).err() {
                failed.push(why);
            }
        }
        Sentinel { stop, stalls, handles, failed: (!failed.is_empty()).then(|| failed.join("; ")) }
    }

    /// Every stall seen so far.
    pub fn all(&self) -> Vec<Stall> {
        self.stalls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The stalls that began in [from_ns, to_ns), and how many jobs of a task with period `tti_ns`
    /// and `in_flight` jobs pending at any time they can make miss their deadlines.
    pub fn between(&self, from_ns: u64, to_ns: u64, tti_ns: u64, in_flight: u64) -> Stalls {
        let stalls = self.stalls.lock().unwrap_or_else(|p| p.into_inner());
        let inside: Vec<&Stall> = stalls.iter().filter(|s| s.due_ns >= from_ns && s.due_ns < to_ns).collect();
        Stalls {
            count: inside.len(),
            total_ms: inside.iter().map(|s| s.late_ns as f64 / 1e6).sum(),
            explained_misses: inside.iter().map(|s| 2 * s.late_ns.div_ceil(tti_ns.max(1)) + in_flight).sum(),
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explained_misses_grow_with_each_stall() {
        let s = Sentinel { stop: Arc::new(AtomicBool::new(true)), stalls: Arc::new(Mutex::new(Vec::new())), handles: Vec::new(), failed: None };
        s.stalls.lock().unwrap().extend([
            Stall { cpu: 0, due_ns: 10, late_ns: 1_500_000 },
            Stall { cpu: 1, due_ns: 20, late_ns: 4_000_000 },
            Stall { cpu: 1, due_ns: 30, late_ns: 2_000_000 },
        ]);
        let w = s.between(10, 30, 1_000_000, 3);
        assert_eq!(w.count, 2);
        assert!((w.total_ms - 5.5).abs() < 1e-9);
        // 2·⌈1.5⌉ + 3 and 2·4 + 3.
        assert_eq!(w.explained_misses, 7 + 11);
        assert_eq!(s.between(31, 40, 1_000_000, 3), Stalls::default());
    }
}
