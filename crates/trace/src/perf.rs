//! Hardware counters per workload thread with perf_event_open(2): cycles, instructions, cache
//! references/misses and LLC read misses → IPC and MPKI. Where the PMU is absent (this project's
//! Firecracker VMs) the report says "unsupported: <reason>"; no number is ever estimated.

use rtslice_sys::perf::{explain, Counter, CounterOptions, HwEvent};
use serde::Serialize;

use crate::host::Measurement;

const EVENTS: [(&str, HwEvent); 5] = [
    ("cycles", HwEvent::CYCLES),
    ("instructions", HwEvent::INSTRUCTIONS),
    ("cache_references", HwEvent::CACHE_REFERENCES),
    ("cache_misses", HwEvent::CACHE_MISSES),
    ("llc_read_misses", HwEvent::LLC_READ_MISSES),
];

/// `inherit`: threads the target creates after the session started are counted too.
const OPTIONS: CounterOptions = CounterOptions { inherit: true, user_only: false, disabled: false };

/// Counters opened on every thread of the target at session start (`inherit` adds threads they
/// create later).
pub(crate) struct HwCounters {
    counters: Vec<(usize, Counter)>, // (index into EVENTS, counter)
    unsupported: Option<String>,
}

impl HwCounters {
    pub fn open(tids: &[u32]) -> HwCounters {
        if tids.is_empty() {
            return HwCounters { counters: Vec::new(), unsupported: Some("no thread to count yet".into()) };
        }
        // Probe with the first thread: a missing PMU fails every open the same way.
        if let Err(e) = Counter::open(HwEvent::CYCLES, tids[0], OPTIONS) {
            return HwCounters { counters: Vec::new(), unsupported: Some(explain(&e)) };
        }
        let mut counters = Vec::new();
        for &tid in tids {
            for (i, (_, event)) in EVENTS.iter().enumerate() {
                // A thread that exited meanwhile, or one event the PMU lacks: skip just that one.
                if let Ok(counter) = Counter::open(*event, tid, OPTIONS) {
                    counters.push((i, counter));
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
        for (i, counter) in &self.counters {
            if let Some(v) = counter.read_scaled() {
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

    /// On a machine with a PMU this counts our own thread; without one it must say why, never invent.
    #[test]
    fn counts_or_says_unsupported() {
        let tid = rtslice_sys::thread::gettid() as u32;
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
