//! Test support shared by rtslice's crates (dev-dependency only).
//!
//! - [`root_or_skip!`]: tests that need root print why they skip instead of failing or passing silently.
//! - [`KernelLock`]: a host-wide `flock` so tests that change global kernel state (root cpuset,
//!   IRQ affinity, RT budgets) or that measure latency never overlap, even across test binaries.
//! - [`RestoreFile`]: puts a kernel file's old value back on drop, also when the test panics.
//! - [`in_guest`]: true inside a test guest of the real-kernel matrix (`make test-kernels`), where
//!   timing means nothing (qemu TCG): the few assertions on latencies or CPU shares relax there.

use std::io;
use std::path::{Path, PathBuf};

use rtslice_sys::lock::FileLock;

/// True when the test runs as root (CI does).
pub fn is_root() -> bool {
    rtslice_sys::process::is_root()
}

/// Returns early from a test, with the reason on stderr, when not running as root.
#[macro_export]
macro_rules! root_or_skip {
    () => {
        if !$crate::is_root() {
            eprintln!("SKIPPED {}: needs root (CI runs as root)", module_path!());
            return;
        }
    };
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
