//! Switching the scheduler's high-resolution tick for a run (study B ran with HRTICK on).
//!
//! Without it, the kernel notices an exhausted budget only at the next tick (4 ms at HZ=250) or when
//! the task blocks, so a reservation overruns by up to a tick and is then throttled longer to pay it
//! back. `HRTICK_DL` arms an hrtimer at the exact budget end of SCHED_DEADLINE tasks; RT group
//! throttling has no such timer and stays tick-granular. The features live in debugfs
//! (`/sys/kernel/debug/sched/features`); the old values are restored on drop.

use std::path::Path;

use crate::netns::run_cmd;
use crate::{io_err, LoadgenError, Result};

const FEATURES: &str = "/sys/kernel/debug/sched/features";

/// Reads `HRTICK` and `HRTICK_DL` (None when the kernel lacks them or debugfs is unavailable).
pub fn read() -> (Option<bool>, Option<bool>) {
    let Ok(text) = std::fs::read_to_string(FEATURES) else { return (None, None) };
    let words: Vec<&str> = text.split_whitespace().collect();
    let flag = |name: &str| {
        if words.contains(&name) {
            Some(true)
        } else if words.iter().any(|w| w.strip_prefix("NO_") == Some(name)) {
            Some(false)
        } else {
            None
        }
    };
    (flag("HRTICK"), flag("HRTICK_DL"))
}

/// Mounts debugfs at /sys/kernel/debug if the scheduler features are not visible yet.
pub fn ensure_debugfs() -> Result<()> {
    if Path::new(FEATURES).exists() || Path::new("/sys/kernel/debug/sched").exists() {
        return Ok(());
    }
    run_cmd("mount", &["-t", "debugfs", "debugfs", "/sys/kernel/debug"])?;
    Ok(())
}

/// Sets HRTICK and HRTICK_DL to `on` until dropped.
pub struct HrtickGuard {
    old: (Option<bool>, Option<bool>),
}

fn write(name: &str, on: bool) -> Result<()> {
    let value = if on { name.to_string() } else { format!("NO_{name}") };
    std::fs::write(FEATURES, &value).map_err(io_err(format!("cannot write {value} to {FEATURES}")))
}

impl HrtickGuard {
    pub fn set(on: bool) -> Result<HrtickGuard> {
        ensure_debugfs()?;
        if let Err(e) = std::fs::read_to_string(FEATURES) {
            return Err(LoadgenError::Invalid(format!(
                "cannot read {FEATURES} ({e}): this kernel does not let root switch scheduler features \
                 (debugfs restricted); run without --hrtick (HRTICK and HRTICK_DL default to off)"
            )));
        }
        let old = read();
        if old.0.is_none() && old.1.is_none() {
            return Err(LoadgenError::Invalid(format!(
                "{FEATURES} has no HRTICK feature (kernel built without CONFIG_SCHED_HRTICK?)"
            )));
        }
        let guard = HrtickGuard { old };
        if old.0.is_some() {
            write("HRTICK", on)?;
        }
        if old.1.is_some() {
            write("HRTICK_DL", on)?;
        }
        Ok(guard)
    }
}

impl Drop for HrtickGuard {
    fn drop(&mut self) {
        if let Some(v) = self.old.0 {
            let _ = write("HRTICK", v);
        }
        if let Some(v) = self.old.1 {
            let _ = write("HRTICK_DL", v);
        }
    }
}
