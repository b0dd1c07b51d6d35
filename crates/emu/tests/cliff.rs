//! Study C, finding 2, on the real kernel: capping the emulator's CPU below its need with CFS
//! bandwidth control (cpu.cfs_quota_us) collapses its throughput — a cliff, not a slope.
//! One test in its own binary: the test's thread is moved into the capped cgroup, and the
//! emulator's threads, which it starts, are born there.

use std::path::PathBuf;
use std::time::Duration;

use rtslice_emu::{run, Calibration, Class, Config, Profile, SchedMode, EmuSummary, TtiWork};
use rtslice_testkit::{root_or_skip, KernelLock};

const CPU_ROOT: &str = "/sys/fs/cgroup/cpu";

/// A cpu cgroup holding the calling thread for its lifetime (and every thread it starts meanwhile);
/// the thread goes back where it was on drop. The group gets the largest CFS weight, so other
/// people's compiles on this shared machine do not take the cell's CPU: only the quota (when set)
/// limits it. Only this thread moves, not the process: the host-stall sentinel's FIFO 99 threads
/// must stay outside (a cgroup with no real-time runtime refuses them, and the quota must not
/// touch what watches the host).
struct Capped {
    path: PathBuf,
    home: PathBuf,
}

impl Capped {
    fn new(period_us: u64, quota_us: Option<u64>) -> Capped {
        let home = std::fs::read_to_string("/proc/self/cgroup")
            .expect("/proc/self/cgroup")
            .lines()
            .find_map(|l| {
                let mut f = l.splitn(3, ':');
                let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
                ctrl.split(',').any(|c| c == "cpu").then(|| PathBuf::from(format!("{CPU_ROOT}{path}")))
            })
            .unwrap_or_else(|| PathBuf::from(CPU_ROOT));
        let path = PathBuf::from(format!("{CPU_ROOT}/rtslice-emu-cliff-{}", std::process::id()));
        std::fs::create_dir_all(&path).expect("create cpu cgroup");
        let c = Capped { path, home };
        std::fs::write(c.path.join("cpu.shares"), "262144").expect("cpu.shares");
        std::fs::write(c.path.join("cpu.cfs_period_us"), period_us.to_string()).expect("cfs period");
        let quota = quota_us.map(|q| q.to_string()).unwrap_or_else(|| "-1".into());
        std::fs::write(c.path.join("cpu.cfs_quota_us"), quota).expect("cfs quota");
        std::fs::write(c.path.join("tasks"), rtslice_sys::thread::gettid().to_string()).expect("move the test's thread");
        c
    }
}

impl Drop for Capped {
    fn drop(&mut self) {
        let _ = std::fs::write(self.home.join("tasks"), rtslice_sys::thread::gettid().to_string());
        for _ in 0..50 {
            if std::fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("warning: could not remove {}", self.path.display());
    }
}

/// A substantial load: `load`% of one core where the carrier allows it, else the smallest cell.
fn heavy(secs: u64, load: f64) -> Config {
    let (cal, _, _) = Calibration::load_or_measure();
    let mut c = Config::new(Profile::Srsenb);
    c.sched = SchedMode::Force(Class::Other);
    c.duration = Duration::from_secs(secs);
    // Largest LTE carrier first: how many PRBs make "70% of a core" depends on how fast this build's
    // kernels are (an optimized emulator needs 50-100 PRBs, a slow one fewer).
    for prb in [100usize, 50, 25, 15, 6] {
        let shape = rtslice_emu::chain::Carrier { prb, prb_scheduled: 1, mcs: 16, antennas: 1, snr_db: 25.0, max_iterations: 8 };
        let cost = |n| 100.0 * cal.predict(&TtiWork::estimate(&shape, n, 1.0)).total_us / 1000.0;
        if cost(1) < 35.0 && cost(prb) > 75.0 {
            c.prb = Some(prb);
            c.load_percent = Some(load);
            return c;
        }
    }
    c.prb = Some(6);
    c.traffic = Some(1.0 / 6.0);
    c
}

fn line(s: &EmuSummary) -> String {
    format!(
        "ttis={} misses={} (ul_late {} dl_late {} dropped {}) thr={:.2}/{:.2} Mbit/s proc p50/p99={:.0}/{:.0} µs cpu {:.0}%",
        s.ttis, s.deadline_misses, s.misses.ul_late, s.misses.dl_late, s.misses.ul_dropped,
        s.throughput_bps / 1e6, s.offered_bps / 1e6, s.proc_p50_us, s.proc_p99_us, s.cpu_percent_total
    )
}

#[test]
fn cpu_capped_below_need_gives_a_throughput_cliff() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    // Uncapped: the cell's need in cores, and its throughput. The cliff is about a cell that keeps up
    // when it gets its need, so the baseline must deliver. The calibration is each kernel's best
    // case, and the pipeline's real cost is about twice that (a debug build's "50 %" used 104 % of a
    // core on a quiet host, 28 Nov), so the ladder starts at 50 % predicted and lightens before the
    // test concludes the uncapped cell cannot keep up at all.
    //
    // When none keeps up, the host may be why: this VM's host can stall or slow a vCPU for
    // milliseconds under every thread on it (CI's run of 28 Nov: the same cell used 1.8x the CPU it
    // needed on a quiet host, and missed 17 % of its TTIs even at the lightest load). A FIFO 99
    // sentinel on every CPU (rtslice_testkit::sentinel) records those stalls; the shortfall of the
    // lightest rung is excused only if they explain every TTI it missed, and the test then says it
    // was inconclusive instead of passing.
    let cpus = rtslice_sys::procfs::online_cpus().expect("online CPUs");
    let sentinel = rtslice_testkit::sentinel::Sentinel::start(&cpus);
    if let Some(why) = &sentinel.failed {
        eprintln!("no sentinel ({why}): a baseline that cannot keep up fails the test");
    }
    let stolen_ms = || -> u64 {
        (rtslice_sys::procfs::stolen_s().iter().map(|(_, s)| s).sum::<f64>() * 1e3).round() as u64
    };
    let mut tried = Vec::new();
    let (load, full) = loop {
        let load = [50.0, 35.0, 25.0][tried.len()];
        let (from, steal_before) = (rtslice_sys::time::monotonic_ns(), stolen_ms());
        let full = {
            let _cg = Capped::new(100_000, None);
            run(heavy(5, load)).expect("uncapped run")
        };
        let stalls = sentinel.between(from, rtslice_sys::time::monotonic_ns(), 1_000_000, 3);
        let host = format!(
            "host stalls {} ({:.1} ms, explain ≤ {} TTIs), {} ms stolen",
            stalls.count,
            stalls.total_ms,
            stalls.explained_misses,
            stolen_ms().saturating_sub(steal_before)
        );
        eprintln!("uncapped at {load}% predicted: {}; {host}", line(&full));
        if full.throughput_bps > 0.9 * full.offered_bps {
            break (load, full);
        }
        tried.push(format!("{load}%: {}; {host}", line(&full)));
        if tried.len() == 3 {
            assert!(
                full.deadline_misses <= stalls.explained_misses,
                "the uncapped cell never delivered 90 % of its offered load, and at the lightest its {} misses are \
                 more than the host's stalls explain: {tried:#?}",
                full.deadline_misses
            );
            eprintln!("INCONCLUSIVE: the uncapped cell kept up at no load, and the host's stalls explain its misses ({tried:#?}); rerun on a quiet machine");
            return;
        }
    };
    let need = full.cpu_percent_total / 100.0;
    // 80% of the need. CFS refuses quotas under 1 ms, and a period long against the 3 ms budget
    // would turn the cap into on/off bursts; keep the period near 2 ms.
    let cap = 0.8 * need;
    let period = ((1000.0 / cap).ceil() as u64).max(2000);
    let quota = (cap * period as f64) as u64;
    let capped = {
        let _cg = Capped::new(period, Some(quota));
        run(heavy(10, load)).expect("capped run")
    };
    eprintln!("capped at {:.0}% of need ({quota}/{period} µs): {}", 100.0 * cap / need, line(&capped));
    assert!(capped.deadline_misses > capped.ttis / 10, "a cap below the need must miss deadlines");
    let ratio = capped.throughput_bps / full.throughput_bps;
    assert!(
        ratio < 0.5,
        "throughput at 80% of the need is {:.0}% of full: a slope, not the cliff of study C",
        100.0 * ratio
    );
}
