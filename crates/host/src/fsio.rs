//! Kernel-file I/O with errors that name the file and the value.

use std::path::Path;

use crate::error::{HostError, Result};

pub fn read(path: impl AsRef<Path>) -> Result<String> {
    let path = path.as_ref();
    std::fs::read_to_string(path).map_err(|source| HostError::Read { path: path.to_path_buf(), source })
}

pub fn read_trim(path: impl AsRef<Path>) -> Result<String> {
    read(path).map(|s| s.trim().to_string())
}

/// Reads a file if it exists; `None` when it does not (other errors are errors).
pub fn read_opt(path: impl AsRef<Path>) -> Result<Option<String>> {
    let path = path.as_ref();
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(HostError::Read { path: path.to_path_buf(), source }),
    }
}

/// One `write(2)` of the whole value, as kernel interface files expect (O_TRUNC is ignored by sysfs and
/// cgroupfs, and makes the same code correct on regular files in tests).
pub fn write(path: impl AsRef<Path>, value: &str) -> Result<()> {
    use std::io::Write;
    let path = path.as_ref();
    let err = |source| HostError::Write { path: path.to_path_buf(), value: value.to_string(), source };
    let mut f = std::fs::OpenOptions::new().write(true).truncate(true).open(path).map_err(err)?;
    f.write_all(value.as_bytes()).map_err(err)
}

pub fn mkdir(path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    std::fs::create_dir(path).map_err(|source| HostError::Create { path: path.to_path_buf(), source })
}

pub fn rmdir(path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    std::fs::remove_dir(path).map_err(|source| HostError::Remove { path: path.to_path_buf(), source })
}

/// Creates a regular file with `contents` (only for directories shaped like a kernel file system in
/// tests: kernel files are never created, only written).
pub fn create(path: impl AsRef<Path>, contents: &str) -> Result<()> {
    let path = path.as_ref();
    std::fs::write(path, contents).map_err(|source| HostError::Create { path: path.to_path_buf(), source })
}
