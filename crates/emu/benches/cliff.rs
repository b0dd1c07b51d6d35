//! Study C, finding 2, measured on the real kernel: capping the emulator's CPU below its need with
//! CFS bandwidth control (cpu.cfs_quota_us) collapses its throughput — a cliff, not a slope.
//! A benchmark, not a test (`cargo bench -p rtslice-emu --bench cliff`, root): how far throughput
//! falls depends on the host (a VM's steal can make the uncapped cell itself fall short), so it
//! reports the uncapped and capped runs, their ratio and the host's stalls, for docs/results.md.
//! The test `tests/cliff.rs` judges what the kernel guarantees: the quota holds the cell's CPU time.
//! The bench's thread is moved into the capped cgroup, and the emulator's threads, which it
//! starts, are born there.

use rtslice_emu::run;
use rtslice_testkit::KernelLock;

#[path = "../tests/common/mod.rs"]
mod common;

use common::{heavy, line, Capped};

fn main() {
    if !rtslice_testkit::is_root() {
        rtslice_testkit::skip::skip(rtslice_testkit::skip::ROOT, "the cliff benchmark makes cpu cgroups and runs the emulator in them");
        return;
    }
    let _lock = KernelLock::acquire();
    // Uncapped: the cell's need in cores, and its throughput. The cliff is about a cell that keeps up
    // when it gets its need: the ladder starts at 50 % predicted (the pipeline's real cost is about
    // twice the calibration's best case) and lightens until the uncapped cell delivers 90 % of its
    // offered load. A FIFO 99 sentinel on every CPU records the host's stalls beside each run.
    let cpus = rtslice_sys::procfs::online_cpus().expect("online CPUs");
    let sentinel = rtslice_testkit::sentinel::Sentinel::start(&cpus);
    if let Some(why) = &sentinel.failed {
        eprintln!("no sentinel ({why}): the host's stalls are not shown");
    }
    let stolen_ms = || -> u64 { (rtslice_sys::procfs::stolen_s().iter().map(|(_, s)| s).sum::<f64>() * 1e3).round() as u64 };
    let mut chosen = None;
    for load in [50.0, 35.0, 25.0] {
        let (from, steal_before) = (rtslice_sys::time::monotonic_ns(), stolen_ms());
        let full = {
            let _cg = Capped::new(100_000, None);
            run(heavy(5, load)).expect("uncapped run")
        };
        let stalls = sentinel.between(from, rtslice_sys::time::monotonic_ns(), 1_000_000, 3);
        println!(
            "uncapped at {load}% predicted: {}; host stalls {} ({:.1} ms), {} ms stolen",
            line(&full),
            stalls.count,
            stalls.total_ms,
            stolen_ms().saturating_sub(steal_before)
        );
        if full.throughput_bps > 0.9 * full.offered_bps {
            chosen = Some((load, full));
            break;
        }
    }
    let Some((load, full)) = chosen else {
        println!("cliff: the uncapped cell never delivered 90 % of its offered load on this host now: no cliff to measure");
        return;
    };
    let need = full.cpu_percent_total / 100.0;
    // 80% of the need. CFS refuses quotas under 1 ms, and a period long against the 3 ms budget
    // would turn the cap into on/off bursts; keep the period near 2 ms.
    let cap = 0.8 * need;
    let period = ((1000.0 / cap).ceil() as u64).max(2000);
    let quota = (cap * period as f64) as u64;
    let (from, steal_before) = (rtslice_sys::time::monotonic_ns(), stolen_ms());
    let capped = {
        let _cg = Capped::new(period, Some(quota));
        run(heavy(10, load)).expect("capped run")
    };
    let stalls = sentinel.between(from, rtslice_sys::time::monotonic_ns(), 1_000_000, 3);
    println!(
        "capped at {:.0}% of need ({quota}/{period} µs): {}; host stalls {} ({:.1} ms), {} ms stolen",
        100.0 * cap / need,
        line(&capped),
        stalls.count,
        stalls.total_ms,
        stolen_ms().saturating_sub(steal_before)
    );
    let ratio = capped.throughput_bps / full.throughput_bps;
    println!(
        "cliff: throughput at 80 % of the need is {:.0} % of uncapped (a slope would give ≈ 80 %); misses {:.1} % capped vs {:.1} % uncapped",
        100.0 * ratio,
        100.0 * capped.deadline_misses as f64 / capped.ttis.max(1) as f64,
        100.0 * full.deadline_misses as f64 / full.ttis.max(1) as f64
    );
}
