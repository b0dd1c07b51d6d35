//! Whether a CPU was there at all: a `SCHED_FIFO 99` thread pinned to each watched CPU, outside
//! rtslice's cgroups, wakes every 500 µs, does a fixed ~10 µs of arithmetic and two hand-offs to a
//! second FIFO 99 thread on the same CPU and back, and records each span in which its wake-ups came
//! more than 1 ms late or that probe ran several times slower than calibrated (when, how long, on
//! which CPU).
//!
//! On the development and CI machines (a Firecracker guest, preemption "none", memory the host
//! backs on first touch) a vCPU now and then stalls for milliseconds under every task on it, and
//! sometimes runs on at a fraction of its speed for ~10 ms after such a stall (traced here: the
//! vBS threads' 5-30 µs hand-offs took 0.3-1.1 ms each while this thread's wake-ups were under 2 ms
//! late) — which a wake-up latency alone does not show. Arithmetic alone does not show all of it
//! either: in such spans (traced on sched_switch) a vBS's threads ran ten times their usual slices
//! while an arithmetic-only probe saw no span at all (docs/results.md). What slows is the kernel's
//! path (wake-ups, context switches, timers), so the probe takes that path too: the hand-off a vBS
//! pipeline makes between its threads, at the highest priority. A stall or slowdown that the highest
//! priority suffers too is the host's: no reservation and no priority protects a workload from it,
//! so a timing test may excuse the deadline misses such spans explain — and only those. Anything
//! the scheduler does to a workload (budgets, cpusets, policies, another real-time thread) leaves
//! this thread alone, so it never excuses a miss the system under test caused.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The sentinel's period: short enough that a stall of 1 ms cannot fall between two wake-ups
/// unseen, long enough to cost nothing measurable (2,000 wake-ups a second per CPU).
const PERIOD_NS: u64 = 500_000;
/// A wake-up this late is a stall (the scheduler's own latency at FIFO 99 is tens of µs here), and
/// a span of slowed work this long is one too.
const STALL_NS: u64 = 1_000_000;
/// The fixed arithmetic each wake-up does, as calibrated on an undisturbed run.
const PROBE_NS: u64 = 10_000;
/// Round trips to the partner thread after the arithmetic: each wakes it (a futex wake and a
/// context switch on this CPU) and is woken back, as a stack's pipeline hands a TTI on.
const HANDOFFS: usize = 2;
/// The work ran this many times slower than calibrated (and by at least [`SLOW_MIN_NS`]): the CPU
/// was not all there. An interrupt handled meanwhile stretches one sample by tens of µs; only spans
/// of consecutive slow samples longer than [`STALL_NS`] count.
const SLOW_FACTOR: u64 = 4;
const SLOW_MIN_NS: u64 = 20_000;

/// A span of more than 1 ms in which a sentinel's wake-ups came late or its work ran slowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stall {
    pub cpu: u32,
    /// CLOCK_MONOTONIC time of the first wake-up of the span that was due, in ns.
    pub due_ns: u64,
    /// How long the span lasted, in ns: from that due time to the end of its last late or slow
    /// wake-up's work (for a single late wake-up, how late it came).
    pub late_ns: u64,
    /// No wake-up of the span came late or did its arithmetic slowly: only the hand-offs were slow
    /// (a span the sentinel saw only since it makes them).
    pub handoffs_only: bool,
}

/// The stalls of a time span, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stalls {
    pub count: usize,
    /// Of those, the spans in which only the hand-offs were slow ([`Stall::handoffs_only`]).
    pub handoffs_only: usize,
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
                // The partner: same CPU, same priority, outside rtslice's cgroups like this thread.
                // A partner that is not FIFO 99 would wait behind the workloads, and the sentinel
                // would then excuse misses they caused: both threads are set up, or neither watches.
                let (to_partner, partner_rx) = std::sync::mpsc::sync_channel::<()>(1);
                let (partner_tx, from_partner) = std::sync::mpsc::sync_channel::<()>(1);
                let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
                let partner = std::thread::spawn(move || {
                    let setup = highest_priority_on(cpu);
                    let ok = setup.is_ok();
                    let _ = ready_tx.send(setup);
                    while ok && partner_rx.recv().is_ok() {
                        if partner_tx.send(()).is_err() {
                            break;
                        }
                    }
                });
                let setup = highest_priority_on(cpu)
                    .and_then(|_| ready_rx.recv().unwrap_or_else(|_| Err("its partner thread died".into())).map_err(|e| format!("its partner: {e}")));
                let ok = setup.is_ok();
                let _ = tx.send(setup);
                if !ok {
                    drop(to_partner);
                    let _ = partner.join();
                    return;
                }
                let handoffs = || {
                    for _ in 0..HANDOFFS {
                        // The partner only ends when this thread drops its sender, below.
                        let _ = to_partner.send(());
                        let _ = from_partner.recv();
                    }
                };
                let probe = |rounds: u64| {
                    arithmetic(rounds);
                    handoffs();
                };
                let (rounds, arithmetic_ns, probe_ns) = calibrate(&probe);
                let push = |stall: Option<Span>| {
                    if let Some(sp) = stall {
                        st.lock().unwrap_or_else(|p| p.into_inner()).push(Stall {
                            cpu,
                            due_ns: sp.from,
                            late_ns: sp.to - sp.from,
                            handoffs_only: sp.handoffs_only,
                        });
                    }
                };
                let mut spans = Spans { arithmetic_ns, probe_ns, open: None };
                let mut next = rtslice_sys::time::monotonic_ns();
                while !s.load(Ordering::Relaxed) {
                    next += PERIOD_NS;
                    rtslice_sys::time::sleep_until_ns(next);
                    let woke = rtslice_sys::time::monotonic_ns();
                    arithmetic(rounds);
                    let computed = rtslice_sys::time::monotonic_ns();
                    handoffs();
                    let done = rtslice_sys::time::monotonic_ns();
                    push(spans.wake_up(next, woke, computed, done));
                    if done.saturating_sub(next) > PERIOD_NS {
                        next = done;
                    }
                }
                push(spans.close());
                drop(to_partner);
                let _ = partner.join();
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
            handoffs_only: inside.iter().filter(|s| s.handoffs_only).count(),
            total_ms: inside.iter().map(|s| s.late_ns as f64 / 1e6).sum(),
            explained_misses: inside.iter().map(|s| 2 * s.late_ns.div_ceil(tti_ns.max(1)) + in_flight).sum(),
        }
    }
}

/// A span of late or slow wake-ups: from the due time of its first to the end of its last one's
/// work (ns), and whether only hand-offs were slow in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    from: u64,
    to: u64,
    handoffs_only: bool,
}

/// Joins consecutive late or slow wake-ups into spans; a span ends at the first wake-up that is
/// neither, and is a stall when it lasted more than [`STALL_NS`].
struct Spans {
    /// The calibrated arithmetic, and the whole probe (arithmetic and hand-offs), in ns.
    arithmetic_ns: u64,
    probe_ns: u64,
    open: Option<Span>,
}

/// Took `ns` where `calibrated` was expected: several times slower, and by more than an
/// interrupt's worth.
fn slowed(ns: u64, calibrated: u64) -> bool {
    ns > SLOW_FACTOR * calibrated && ns - calibrated > SLOW_MIN_NS
}

impl Spans {
    /// One wake-up: due at `due`, woke at `woke`, its arithmetic done at `computed`, its hand-offs
    /// at `done` (ns). Returns the stall it ended, if any.
    fn wake_up(&mut self, due: u64, woke: u64, computed: u64, done: u64) -> Option<Span> {
        let late = woke.saturating_sub(due) > STALL_NS;
        let slow_arithmetic = slowed(computed.saturating_sub(woke), self.arithmetic_ns);
        let slow = slowed(done.saturating_sub(woke), self.probe_ns);
        if late || slow_arithmetic || slow {
            let handoffs_only = !late && !slow_arithmetic;
            self.open = Some(match self.open {
                Some(sp) => Span { to: done, handoffs_only: sp.handoffs_only && handoffs_only, ..sp },
                None => Span { from: due, to: done, handoffs_only },
            });
            None
        } else {
            self.close()
        }
    }

    /// Ends the open span (at the end of a run too).
    fn close(&mut self) -> Option<Span> {
        self.open.take().filter(|sp| sp.to.saturating_sub(sp.from) > STALL_NS)
    }
}

/// Makes the calling thread SCHED_FIFO 99 on `cpu`, in the root cpu cgroup: under v1 RT groups a
/// FIFO thread needs a group with RT runtime, the root's (no such file elsewhere, which is fine).
fn highest_priority_on(cpu: u32) -> Result<(), String> {
    let tid = rtslice_sys::thread::gettid();
    let _ = std::fs::write("/sys/fs/cgroup/cpu/tasks", tid.to_string());
    rtslice_sys::sched::set_affinity(0, [cpu])
        .and_then(|_| rtslice_sys::sched::set_attr(0, rtslice_sys::sched::SchedAttr::Fifo { priority: 99 }))
        .map_err(|e| format!("cannot make a SCHED_FIFO 99 thread on CPU {cpu}: {e}"))
}

/// The fixed arithmetic: `rounds` steps of an xorshift the optimiser cannot remove.
fn arithmetic(rounds: u64) {
    let mut x = std::hint::black_box(0x9e37_79b9_7f4a_7c15u64);
    for _ in 0..rounds {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    std::hint::black_box(x);
}

/// How many rounds of arithmetic take about [`PROBE_NS`] here, how long they take, and how long
/// `probe` (that arithmetic and the hand-offs) takes, each: the fastest of 50 runs (at FIFO 99 only interrupts and the
/// host can slow a run, and the fastest had neither).
fn calibrate(probe: &dyn Fn(u64)) -> (u64, u64, u64) {
    let time = |probe: &dyn Fn(u64), rounds: u64| {
        (0..50)
            .map(|_| {
                let t = rtslice_sys::time::monotonic_ns();
                probe(rounds);
                rtslice_sys::time::monotonic_ns().saturating_sub(t)
            })
            .min()
            .unwrap_or(0)
            .max(1)
    };
    let per_1000 = time(&arithmetic, 1000);
    let rounds = (PROBE_NS * 1000 / per_1000).max(1);
    (rounds, time(&arithmetic, rounds), time(probe, rounds))
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
            Stall { cpu: 0, due_ns: 10, late_ns: 1_500_000, handoffs_only: false },
            Stall { cpu: 1, due_ns: 20, late_ns: 4_000_000, handoffs_only: true },
            Stall { cpu: 1, due_ns: 30, late_ns: 2_000_000, handoffs_only: false },
        ]);
        let w = s.between(10, 30, 1_000_000, 3);
        assert_eq!(w.count, 2);
        assert_eq!(w.handoffs_only, 1);
        assert!((w.total_ms - 5.5).abs() < 1e-9);
        // 2·⌈1.5⌉ + 3 and 2·4 + 3.
        assert_eq!(w.explained_misses, 7 + 11);
        assert_eq!(s.between(31, 40, 1_000_000, 3), Stalls::default());
    }

    #[test]
    fn late_and_slowed_wake_ups_join_into_spans() {
        const MS: u64 = 1_000_000;
        // 10 µs of arithmetic, then 10 µs of hand-offs, when undisturbed.
        let mut sp = Spans { arithmetic_ns: 10_000, probe_ns: 20_000, open: None };
        let span = |from, to, handoffs_only| Some(Span { from, to, handoffs_only });
        // On time, calibrated work: nothing.
        assert_eq!(sp.wake_up(0, 20_000, 30_000, 40_000), None);
        // One interrupt stretching one sample (60 µs of arithmetic): slow, but a span of 0.09 ms is
        // no stall.
        assert_eq!(sp.wake_up(MS / 2, MS / 2 + 20_000, MS / 2 + 80_000, MS / 2 + 90_000), None);
        assert_eq!(sp.wake_up(MS, MS + 20_000, MS + 30_000, MS + 40_000), None);
        // A 1.9 ms late wake-up, then four samples whose arithmetic took 0.5 ms (50x), then a normal
        // one: one stall from the first due time to the end of the last slow work.
        let due = 10 * MS;
        assert_eq!(sp.wake_up(due, due + 1_900_000, due + 1_910_000, due + 1_920_000), None);
        let mut t = due + 2 * MS;
        for _ in 0..4 {
            assert_eq!(sp.wake_up(t, t + 10_000, t + 510_000, t + 520_000), None);
            t += MS / 2 + 20_000;
        }
        let end = t - MS / 2 - 20_000 + 520_000;
        assert_eq!(sp.wake_up(t, t + 10_000, t + 20_000, t + 30_000), span(due, end, false));
        // Arithmetic 3x slower and the probe 2x (under the factor of 4): not slow.
        assert_eq!(sp.wake_up(t + MS, t + MS + 10_000, t + MS + 40_000, t + MS + 50_000), None);
        assert_eq!(sp.close(), None);
        // A single wake-up 1.2 ms late is a stall of its lateness plus its work.
        assert_eq!(sp.wake_up(50 * MS, 51 * MS + 200_000, 51 * MS + 210_000, 51 * MS + 220_000), None);
        assert_eq!(sp.close(), span(50 * MS, 51 * MS + 220_000, false));
        // Arithmetic on time but the hand-offs 0.4 ms each time (20x the probe), for 1.5 ms: a
        // stall only the hand-offs saw.
        let due = 60 * MS;
        for k in 0..3 {
            let d = due + k * MS / 2;
            assert_eq!(sp.wake_up(d, d + 10_000, d + 20_000, d + 420_000), None);
        }
        assert_eq!(sp.close(), span(due, due + MS + 420_000, true));
        // Slow hand-offs and then a late wake-up in one span: the arithmetic probe saw it too.
        let due = 70 * MS;
        assert_eq!(sp.wake_up(due, due + 10_000, due + 20_000, due + 420_000), None);
        assert_eq!(sp.wake_up(due + MS / 2, due + 2 * MS, due + 2 * MS + 10_000, due + 2 * MS + 20_000), None);
        assert_eq!(sp.close(), span(due, due + 2 * MS + 20_000, false));
    }

    #[test]
    fn a_sentinel_and_its_partner_start_at_fifo_99_and_stop_when_dropped() {
        crate::skip_unless!(crate::is_root(), crate::skip::ROOT, "needs root for SCHED_FIFO 99 (CI runs as root)");
        let s = Sentinel::start(&[0]);
        assert_eq!(s.failed, None);
        std::thread::sleep(std::time::Duration::from_millis(100));
        // Joins both threads of each CPU: a partner left blocked would hang here.
        drop(s);
    }

    #[test]
    fn calibration_finds_about_ten_microseconds_of_work() {
        let (rounds, ns, probe_ns) = calibrate(&arithmetic);
        assert_eq!(probe_ns.max(ns) / probe_ns.min(ns).max(1), 1, "the same probe twice: {ns} and {probe_ns} ns");
        assert!(rounds >= 1);
        // The fastest of 50 runs, scaled from 1000 rounds: within a factor of 3 of the target here
        // (it is the fastest run of a noisy VM, not a benchmark).
        assert!((PROBE_NS / 3..=PROBE_NS * 3).contains(&ns), "{rounds} rounds took {ns} ns");
    }
}
