//! What the cliff test and the cliff benchmark share: a capped cpu cgroup holding the calling
//! thread, and the heavy cell they run in it.
#![allow(dead_code)] // the test and the bench each use a part

use std::path::PathBuf;
use std::time::Duration;

use rtslice_emu::{Calibration, Class, Config, EmuSummary, Profile, SchedMode, TtiWork};

pub const CPU_ROOT: &str = "/sys/fs/cgroup/cpu";

/// A cpu cgroup holding the calling thread for its lifetime (and every thread it starts meanwhile);
/// the thread goes back where it was on drop. The group gets the largest CFS weight, so other
/// people's compiles on this shared machine do not take the cell's CPU: only the quota (when set)
/// limits it. Only this thread moves, not the process: the host-stall sentinel's FIFO 99 threads
/// must stay outside (a cgroup with no real-time runtime refuses them, and the quota must not
/// touch what watches the host).
pub struct Capped {
    pub path: PathBuf,
    home: PathBuf,
}

impl Capped {
    pub fn new(period_us: u64, quota_us: Option<u64>) -> Capped {
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
pub fn heavy(secs: u64, load: f64) -> Config {
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


/// One run on one line.
pub fn line(s: &EmuSummary) -> String {
    format!(
        "ttis={} misses={} (ul_late {} dl_late {} dropped {}) thr={:.2}/{:.2} Mbit/s proc p50/p99={:.0}/{:.0} µs cpu {:.0}%",
        s.ttis, s.deadline_misses, s.misses.ul_late, s.misses.dl_late, s.misses.ul_dropped,
        s.throughput_bps / 1e6, s.offered_bps / 1e6, s.proc_p50_us, s.proc_p99_us, s.cpu_percent_total
    )
}
