//! Host-wide advisory locks on a file (flock), so measurements and kernel-global tests of separate
//! processes take turns. The lock is released when the [`FileLock`] is dropped, or when the
//! process dies.

use std::fs::{File, OpenOptions};
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
        match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(FileLock { _file: file, path: path.to_path_buf() })),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(e) => Err(SysError::call(format!("flock({})", path.display()))(e.into())),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
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
}
