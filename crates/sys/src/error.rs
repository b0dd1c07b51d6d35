//! The one error type of the OS layer. Every variant names what failed (the call or path, with the
//! errno through `source`) and, where one exists, what the user can do about it.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SysError {
    /// A system call failed.
    #[error("{call}: {source}{}", hint(source))]
    Call { call: String, source: io::Error },
    /// A /proc or /sys file could not be read.
    #[error("reading {path}: {source}{}", hint(source))]
    Read { path: PathBuf, source: io::Error },
    /// A file could not be opened, created or written.
    #[error("{what} {path}: {source}{}", hint(source))]
    File { what: &'static str, path: PathBuf, source: io::Error },
    /// An external tool (iproute2's `ip`, …) could not be started.
    #[error("cannot run `{command}`: {source} ({fix})")]
    Spawn { command: String, source: io::Error, fix: &'static str },
    /// An external tool ran and failed.
    #[error("`{command}` failed ({status}): {stderr}{}", command_hint(stderr))]
    Command { command: String, status: String, stderr: String },
    /// The caller passed something the kernel cannot take (a CPU id beyond its limit, a name with NUL).
    #[error("invalid input: {0}")]
    Invalid(String),
}

pub type Result<T, E = SysError> = std::result::Result<T, E>;

impl SysError {
    pub(crate) fn call(call: impl Into<String>) -> impl FnOnce(io::Error) -> SysError {
        let call = call.into();
        move |source| SysError::Call { call, source }
    }

    pub(crate) fn read(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> SysError {
        let path = path.into();
        move |source| SysError::Read { path, source }
    }

    /// The errno behind the failure, when there is one (callers branch on ENOENT, EPERM, …).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            SysError::Call { source, .. }
            | SysError::Read { source, .. }
            | SysError::File { source, .. }
            | SysError::Spawn { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

fn hint(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => " (needs root or the matching capability: run with sudo)",
        Some(libc::ESRCH) => " (the process or thread has exited)",
        _ => "",
    }
}

fn command_hint(stderr: &str) -> &'static str {
    if stderr.contains("Operation not permitted") || stderr.contains("Permission denied") {
        " (needs root / CAP_NET_ADMIN: run with sudo)"
    } else {
        ""
    }
}

impl From<SysError> for io::Error {
    /// For callers whose own error type wraps `io::Error`: keeps the error kind and the full message.
    fn from(e: SysError) -> io::Error {
        let kind = match &e {
            SysError::Call { source, .. } | SysError::Read { source, .. } | SysError::File { source, .. } | SysError::Spawn { source, .. } => {
                source.kind()
            }
            SysError::Invalid(_) => io::ErrorKind::InvalidInput,
            SysError::Command { .. } => io::ErrorKind::Other,
        };
        io::Error::new(kind, e.to_string())
    }
}
