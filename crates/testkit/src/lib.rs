//! Test support shared by rtslice's crates (dev-dependency only).
//!
//! - [`skip`]: the one way a test skips, naming the capability it lacks ([`skip_unless!`],
//!   [`root_or_skip!`]); counted per capability by `make test`, and a failure where the run declared
//!   the machine has it.
//! - [`OnDrop`]: the one cleanup guard: runs its closure when dropped, also when the test panics.
//! - [`KernelLock`]: a host-wide `flock` so tests that change global kernel state (root cpuset,
//!   IRQ affinity, RT budgets) or that measure latency never overlap, even across test binaries.
//! - [`RestoreFile`]: puts a kernel file's old value back on drop, also when the test panics.
//! - [`cgroup_mount`], [`TempCgroup`]: a scratch cgroup in this host's hierarchies, removed on drop.
//! - [`in_guest`]: true inside a test guest of the real-kernel matrix (`make test-kernels`), where
//!   timing means nothing (qemu TCG): the few assertions on latencies or CPU shares relax there.
//! - [`deadline`]: where a SCHED_DEADLINE task is admitted, a probe that one is, and what holds the
//!   bandwidth when it is not.
//! - [`resctrl`]: a plain directory shaped like resctrl (no machine here has RDT), and snapshots of it.
//! - [`prom`]: a real Prometheus (Debian's package) scraping loopback targets, PromQL, plain HTTP GET.
//! - [`KillOnDrop`]: a child process killed and reaped when dropped (also when an assertion fails).
//! - [`sentinel`]: FIFO 99 threads that see the host stall a CPU, so timing tests excuse only the
//!   deadline misses the host caused.

use std::io;
use std::path::{Path, PathBuf};

use rtslice_sys::lock::FileLock;

pub mod deadline;
pub mod prom;
pub mod resctrl;
pub mod sentinel;
pub mod skip;

/// A child process killed and reaped when dropped (also when an assertion fails), so a test that
/// panics leaves no process behind.
pub struct KillOnDrop(pub std::process::Child);

impl KillOnDrop {
    pub fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs a closure when dropped — also when an assertion fails — so a test undoes what it changed
/// (a reset, a daemon's shutdown, a file put back) on every path out of it.
pub struct OnDrop<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> OnDrop<F> {
    pub fn new(f: F) -> OnDrop<F> {
        OnDrop(Some(f))
    }
}

impl<F: FnOnce()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

/// True when the test runs as root (CI does).
pub fn is_root() -> bool {
    rtslice_sys::process::is_root()
}

/// The variable `kernels/guest.sh` sets in every guest of the real-kernel matrix (never natively).
pub const GUEST_ENV: &str = "RTSLICE_TEST_GUEST";

/// True inside a test guest of the real-kernel matrix (`RTSLICE_TEST_GUEST=1`): an emulated CPU
/// (qemu TCG, no KVM) where a millisecond of guest time can take many on the host. Tests use it to
/// relax exactly their timing assertions (and say so on stderr), never their functional ones.
pub fn in_guest() -> bool {
    std::env::var(GUEST_ENV).is_ok_and(|v| v == "1")
}

/// A timing bound that holds natively but not under emulation: `native` on a real CPU, `guest` in a
/// matrix guest (printed, so a relaxed run is visible in the log).
pub fn timing_bound(what: &str, native: f64, guest: f64) -> f64 {
    if in_guest() {
        eprintln!("RELAXED in a TCG guest ({GUEST_ENV}=1): {what} bound {native} -> {guest}");
        guest
    } else {
        native
    }
}

const LOCK_PATH: &str = "/tmp/rtslice-kernel-tests.lock";

/// Exclusive host-wide lock for the duration of a test that touches global kernel state or measures
/// timing. Dropping it releases the lock.
pub struct KernelLock {
    _lock: FileLock,
}

impl KernelLock {
    pub fn acquire() -> KernelLock {
        let lock = FileLock::exclusive(Path::new(LOCK_PATH)).unwrap_or_else(|e| panic!("{e}"));
        KernelLock { _lock: lock }
    }
}

/// Remembers a file's content and writes it back on drop (panic included).
pub struct RestoreFile {
    path: PathBuf,
    original: String,
}

impl RestoreFile {
    pub fn remember(path: impl AsRef<Path>) -> io::Result<RestoreFile> {
        let path = path.as_ref().to_path_buf();
        let original = std::fs::read_to_string(&path)?;
        Ok(RestoreFile { path, original })
    }

    pub fn original(&self) -> &str {
        &self.original
    }
}

impl Drop for RestoreFile {
    fn drop(&mut self) {
        let value = self.original.trim_end();
        // Empty cpuset/affinity files cannot be written back as empty; nothing to restore then.
        if value.is_empty() {
            return;
        }
        if let Err(e) = std::fs::write(&self.path, value) {
            eprintln!("warning: could not restore {} to {value:?}: {e}", self.path.display());
        }
    }
}

/// The mount point of the first v1 hierarchy holding any of `controllers`, else of the unified (v2)
/// hierarchy; `None` when no cgroup filesystem is mounted.
pub fn cgroup_mount(controllers: &[&str]) -> Option<PathBuf> {
    let mounts = rtslice_sys::procfs::cgroup_mounts().ok()?;
    let v1 = mounts.iter().find(|m| controllers.iter().any(|c| m.has_controller(c)));
    v1.or_else(|| mounts.iter().find(|m| m.unified)).map(|m| m.path.clone())
}

/// A cgroup directory `rtslice-NAME-PID` created under each of the given hierarchy mount points
/// (one directory when they are the same, as on v2), removed on drop — also when the test panics.
pub struct TempCgroup {
    dirs: Vec<PathBuf>,
}

impl TempCgroup {
    pub fn new(mounts: &[PathBuf], name: &str) -> TempCgroup {
        let mut cg = TempCgroup { dirs: Vec::new() };
        for mount in mounts {
            let dir = mount.join(format!("rtslice-{name}-{}", std::process::id()));
            if cg.dirs.contains(&dir) {
                continue;
            }
            std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
            cg.dirs.push(dir.clone());
            if mount.join("cpuset.cpus").exists() {
                // A new v1 cpuset group starts empty: give it the parent's CPUs and memory nodes.
                for f in ["cpuset.cpus", "cpuset.mems"] {
                    let parent = std::fs::read_to_string(mount.join(f)).unwrap_or_else(|e| panic!("reading {f}: {e}"));
                    std::fs::write(dir.join(f), parent.trim()).unwrap_or_else(|e| panic!("writing {}: {e}", dir.join(f).display()));
                }
            }
        }
        cg
    }

    /// The directory in the first hierarchy given.
    pub fn dir(&self) -> &Path {
        &self.dirs[0]
    }

    /// One directory per distinct hierarchy, in the order given.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Moves a process into the group in every hierarchy.
    pub fn enter(&self, pid: u32) {
        for d in &self.dirs {
            std::fs::write(d.join("cgroup.procs"), pid.to_string()).unwrap_or_else(|e| panic!("moving {pid} into {}: {e}", d.display()));
        }
    }
}

impl Drop for TempCgroup {
    fn drop(&mut self) {
        // The kernel empties a group only once its exited tasks are reaped: retry for a second.
        for d in &self.dirs {
            let removed = (0..50).any(|_| {
                let ok = std::fs::remove_dir(d).is_ok();
                if !ok {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                ok
            });
            if !removed {
                eprintln!("warning: could not remove {}", d.display());
            }
        }
    }
}
