//! Helpers for the real-kernel tests: snapshots of every kernel value apply may touch, so a test can
//! assert that reset/rollback restored the host exactly.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rtslice_host::irq;

/// Everything apply may change, as path → content (cgroup dirs as "exists").
pub fn snapshot() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut read = |p: &Path| {
        if let Ok(s) = std::fs::read_to_string(p) {
            m.insert(p.display().to_string(), s.trim().to_string());
        }
    };
    for f in [
        "/sys/fs/cgroup/cpuset/cpuset.sched_load_balance",
        "/sys/fs/cgroup/cpuset/cpuset.cpus",
        "/sys/fs/cgroup/cpu/cpu.rt_runtime_us",
        "/sys/fs/cgroup/cpu/cpu.rt_period_us",
        "/proc/sys/kernel/sched_rt_runtime_us",
    ] {
        read(Path::new(f));
    }
    for i in irq::read_interrupts().unwrap() {
        read(&i.affinity_file());
    }
    for iface in irq::interfaces(Path::new("/sys/class/net")) {
        let (rps, xps) = irq::steering_files(Path::new("/sys/class/net"), &iface);
        for f in rps.iter().chain(xps.iter()) {
            read(f);
        }
    }
    // Our own cgroups (the test process must end where it started). The memory hierarchy's root
    // cgroup.procs is not listed (it changes with every process on the host).
    read(Path::new("/proc/self/cgroup"));
    for e in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        for name in ["rtslice", "rtslice.slice"] {
            let d = e.path().join(name);
            if d.exists() {
                m.insert(d.display().to_string(), "exists".into());
            }
        }
    }
    m
}

pub fn assert_same(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) {
    let mut diffs = Vec::new();
    for (k, v) in before {
        match after.get(k) {
            Some(a) if a == v => {}
            other => diffs.push(format!("{k}: before {v:?}, after {other:?}")),
        }
    }
    for (k, v) in after {
        if !before.contains_key(k) {
            diffs.push(format!("{k}: new {v:?}"));
        }
    }
    assert!(diffs.is_empty(), "kernel state differs:\n{}", diffs.join("\n"));
}

/// An IRQ whose affinity can be written here (managed IRQs refuse any write, even of the same value).
pub fn movable_irq() -> Option<irq::Irq> {
    irq::read_interrupts().ok()?.into_iter().find(|i| {
        let f = i.affinity_file();
        std::fs::read_to_string(&f).map(|cur| std::fs::write(&f, cur.trim()).is_ok()).unwrap_or(false)
    })
}

/// An interface with RPS files.
pub fn rps_interface() -> Option<String> {
    irq::interfaces(Path::new("/sys/class/net"))
        .into_iter()
        .find(|i| !irq::steering_files(Path::new("/sys/class/net"), i).0.is_empty())
}

pub fn read(p: impl AsRef<Path>) -> String {
    std::fs::read_to_string(p.as_ref()).unwrap_or_else(|e| panic!("{}: {e}", p.as_ref().display())).trim().to_string()
}

/// CPU time (utime + stime, in clock ticks) of one thread/process.
pub fn cpu_ticks(pid: i32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some(i) = s.rfind(')') else { return 0 };
    let f: Vec<&str> = s[i + 2..].split_whitespace().collect();
    f.get(11).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0) + f.get(12).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0)
}

/// Fraction of one CPU a process used over `window` (from /proc ticks, so resolution is 1/HZ).
pub fn measure_share(pid: i32, window: Duration) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let t0 = Instant::now();
    let c0 = cpu_ticks(pid);
    std::thread::sleep(window);
    let c1 = cpu_ticks(pid);
    (c1 - c0) as f64 / hz / t0.elapsed().as_secs_f64()
}

pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    f()
}

pub fn sh() -> PathBuf {
    PathBuf::from("/bin/sh")
}

/// Resets on drop, so a failing assertion does not leave the host modified (the temp state dir
/// must outlive it: declare the guard after the dir). A second reset after the test's own is a no-op.
pub struct ResetOnDrop(pub rtslice_host::StateDir);

impl ResetOnDrop {
    pub fn new(path: &Path) -> ResetOnDrop {
        ResetOnDrop(rtslice_host::StateDir::new(path))
    }
}

impl Drop for ResetOnDrop {
    fn drop(&mut self) {
        if let Err(e) = rtslice_host::reset(&self.0, rtslice_host::ResetOptions::default()) {
            eprintln!("cleanup reset failed: {e}");
        }
    }
}
