//! resctrl's files as the transaction changes them (the one writer, `txn`): a control group made
//! and removed, a write whose refusal carries the kernel's reason (`info/last_cmd_status`). On a
//! directory shaped like resctrl (tests) `mkdir` makes the `schemata` and `tasks` files the kernel
//! would, and `rmdir` removes them first (see `resctrl` for the model). What to write is `resctrl`'s.

use std::collections::BTreeMap;
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
    let value = match root_of(path) {
        // The kernel changes only the entries a schemata write names; a plain file is replaced.
        Some(root) if path.file_name().is_some_and(|n| n == SCHEMATA) && !rtslice_sys::resctrl::is_resctrl(root) => {
            merged(&fsio::read(path).unwrap_or_default(), &value)
        }
        _ => value,
    };
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

/// A schemata's entries as (resource, domain id) → value (`rtslice_sys::resctrl::parse_schemata`:
/// the kernel's padded lines and rtslice's unpadded ones give the same entries).
fn entries(schemata: &str) -> BTreeMap<(String, u32), String> {
    rtslice_sys::resctrl::parse_schemata(schemata)
        .into_iter()
        .flat_map(|(res, doms)| doms.into_iter().map(move |(id, v)| ((res.clone(), id), v)))
        .collect()
}

/// `current` with the entries of `written` put in (a shaped directory's model of a schemata
/// write): lines keep their order, a resource `current` lacks is appended.
fn merged(current: &str, written: &str) -> String {
    let mut all = entries(current);
    all.extend(entries(written));
    let mut resources: Vec<String> = Vec::new();
    for line in current.lines().chain(written.lines()) {
        if let Some((res, _)) = line.trim().split_once(':') {
            if !resources.iter().any(|r| r == res.trim()) {
                resources.push(res.trim().to_string());
            }
        }
    }
    let mut out = String::new();
    for res in resources {
        let doms: Vec<String> = all.iter().filter(|((r, _), _)| *r == res).map(|((_, id), v)| format!("{id}={v}")).collect();
        out.push_str(&format!("{res}:{}\n", doms.join(";")));
    }
    out
}

/// Whether the schemata `current` (read back) holds every entry of `wanted` (written): a write
/// of some lines leaves the others as they were, and masks compare as numbers.
pub fn schemata_holds(current: &str, wanted: &str) -> bool {
    let cur = entries(current);
    let same = |a: &str, b: &str| a == b || matches!((u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)), (Ok(x), Ok(y)) if x == y);
    entries(wanted).iter().all(|(k, v)| cur.get(k).is_some_and(|c| same(c, v)))
}

/// The L3 masks of a schemata, per domain id (`L3:0=7ff;1=3ff`).
pub fn l3_masks(schemata: &str) -> BTreeMap<u32, u64> {
    entries(schemata)
        .into_iter()
        .filter(|((res, _), _)| res == "L3")
        .filter_map(|((_, id), v)| Some((id, u64::from_str_radix(&v, 16).ok()?)))
        .collect()
}

/// The resctrl root above a group's file: the nearest ancestor with an `info` directory.
fn root_of(path: &Path) -> Option<&Path> {
    path.ancestors().skip(1).find(|a| a.join("info").is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemata_compare_by_entry_whatever_the_padding_and_the_lines_not_written() {
        let read = "    L3:0=7f0;1=07ff\n    MB:0=100;1=100\n";
        assert!(schemata_holds(read, "L3:0=7f0;1=7ff"));
        assert!(schemata_holds(read, "MB:1=100"));
        assert!(!schemata_holds(read, "L3:0=7ff"));
        assert!(!schemata_holds(read, "L3:2=1"), "a domain the file lacks");
        assert_eq!(l3_masks(read), [(0, 0x7f0), (1, 0x7ff)].into());
        assert_eq!(merged(read, "L3:1=3ff\n"), "L3:0=7f0;1=3ff\nMB:0=100;1=100\n");
        assert_eq!(merged("L3:0=7ff\n", "MB:0=30"), "L3:0=7ff\nMB:0=30\n");
    }
}
