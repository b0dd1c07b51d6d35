//! Advisory file locks (flock), the one place rtslice takes them: host-wide locks so measurements
//! and kernel-global tests of separate processes take turns ([`FileLock`], released when dropped or
//! when the process dies), and a fail-fast lock on a file the caller keeps open
//! ([`try_lock_exclusive`], the apply stage's state directory).

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use rustix::fs::FlockOperation;

use crate::error::{Result, SysError};

#[derive(Debug)]
pub struct FileLock {
    _file: File,
    path: PathBuf,
}

fn open(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
        .map_err(|source| SysError::File { what: "opening the lock file", path: path.to_path_buf(), source })
}

impl FileLock {
    /// Waits until the exclusive lock on `path` (created if missing) is ours.
    pub fn exclusive(path: &Path) -> Result<FileLock> {
        let file = open(path)?;
        rustix::fs::flock(&file, FlockOperation::LockExclusive)
            .map_err(|e| SysError::call(format!("flock({})", path.display()))(e.into()))?;
        Ok(FileLock { _file: file, path: path.to_path_buf() })
    }

    /// Takes the exclusive lock on `path` if nobody holds it; `Ok(None)` when somebody does.
    pub fn try_exclusive(path: &Path) -> Result<Option<FileLock>> {
        let file = open(path)?;
        match try_lock_exclusive(&file) {
            Ok(true) => Ok(Some(FileLock { _file: file, path: path.to_path_buf() })),
            Ok(false) => Ok(None),
            Err(e) => Err(SysError::call(format!("flock({})", path.display()))(e)),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Takes an exclusive `flock(2)` on `file` without waiting: `Ok(false)` when another open file
/// description holds it. The lock is released when `file` is closed.
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    match rustix::fs::flock(file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excludes_a_second_holder_until_dropped() {
        let path = std::env::temp_dir().join(format!("rtslice-sys-lock-test-{}", std::process::id()));
        let held = FileLock::exclusive(&path).unwrap();
        // flock locks belong to the open file description: a second open in this process conflicts.
        assert!(FileLock::try_exclusive(&path).unwrap().is_none());
        drop(held);
        let again = FileLock::try_exclusive(&path).unwrap().expect("free after drop");
        assert_eq!(again.path(), path);
        drop(again);
        let _ = std::fs::remove_file(&path);
        assert!(FileLock::exclusive(Path::new("/nonexistent-dir/x.lock")).is_err());
    }

    #[test]
    fn the_lock_is_exclusive_between_open_files() {
        let path = std::env::temp_dir().join(format!("rtslice-sys-lock-{}", std::process::id()));
        let a = File::create(&path).unwrap();
        let b = File::open(&path).unwrap();
        assert!(try_lock_exclusive(&a).unwrap());
        assert!(!try_lock_exclusive(&b).unwrap());
        drop(a);
        assert!(try_lock_exclusive(&b).unwrap());
        let _ = std::fs::remove_file(&path);
    }
}
