//! resctrl's files as the transaction changes them (the one writer, `txn`): a control group made
//! and removed, a write whose refusal carries the kernel's reason (`info/last_cmd_status`). On a
//! directory shaped like resctrl (tests) `mkdir` makes the `schemata` and `tasks` files the kernel
//! would, and `rmdir` removes them first (see `resctrl` for the model). What to write is `resctrl`'s.

use std::path::Path;

use crate::error::{HostError, Result};
use crate::fsio;

pub const SCHEMATA: &str = "schemata";
pub const TASKS: &str = "tasks";
/// The kernel's reason for the last refused write.
pub const LAST_CMD_STATUS: &str = "info/last_cmd_status";

/// `mkdir` of a control group; on a directory shaped like resctrl, also the files the kernel would
/// create (see the module comment).
pub(crate) fn make_group(dir: &Path) -> Result<()> {
    fsio::mkdir(dir)?;
    let root = dir.parent().unwrap_or(dir);
    if rtslice_sys::resctrl::is_resctrl(root) {
        return Ok(());
    }
    let schemata = fsio::read(root.join(SCHEMATA)).unwrap_or_default();
    let made = fsio::create(dir.join(SCHEMATA), &schemata).and_then(|_| fsio::create(dir.join(TASKS), ""));
    made.inspect_err(|_| {
        let _ = remove_group(dir);
    })
}

/// `rmdir` of a control group (the kernel hands its tasks to the default group); on a directory
/// shaped like resctrl, the modelled files go first. Gone already is fine.
pub(crate) fn remove_group(dir: &Path) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    let root = dir.parent().unwrap_or(dir);
    if !rtslice_sys::resctrl::is_resctrl(root) {
        for f in [SCHEMATA, TASKS] {
            let _ = std::fs::remove_file(dir.join(f));
        }
    }
    match fsio::rmdir(dir) {
        Err(HostError::Remove { source, .. }) if source.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        other => other,
    }
}

/// One write to a resctrl file; a refusal carries the kernel's reason (`info/last_cmd_status`).
/// A schemata write must end with a newline (the kernel answers EINVAL otherwise).
pub(crate) fn write(path: &Path, value: &str) -> Result<()> {
    let value = if value.ends_with('\n') { value.to_string() } else { format!("{value}\n") };
    fsio::write(path, &value).map_err(|e| match e {
        HostError::Write { path, value, source } => {
            let status = root_of(&path)
                .and_then(|r| fsio::read_trim(r.join(LAST_CMD_STATUS)).ok())
                .unwrap_or_else(|| "(no info/last_cmd_status)".into());
            HostError::Resctrl { path, value, source, status }
        }
        other => other,
    })
}

/// The resctrl root above a group's file: the nearest ancestor with an `info` directory.
fn root_of(path: &Path) -> Option<&Path> {
    path.ancestors().skip(1).find(|a| a.join("info").is_dir())
}
