//! The scheduler's debugfs knobs that apply and the node set, journaled: the HRTICK features
//! (`sched/features`) and the fair servers' runtimes (`sched/fair_server/cpuN/runtime`). Both are
//! requests a host may not grant (no debugfs, kernel lockdown, a kernel without the flag): they are
//! then reported as warnings and nothing is changed, since neither is what a reservation's budget
//! depends on.

use std::path::{Path, PathBuf};

use crate::facts::SCHED_FEATURES;
use crate::journal::Change;
use crate::txn::{step, StepResult, Txn};

const DEBUGFS: &str = "/sys/kernel/debug";

/// The fair server's runtime file of `cpu`.
pub(crate) fn fair_server_runtime(cpu: u32) -> PathBuf {
    Path::new(DEBUGFS).join(format!("sched/fair_server/cpu{cpu}/runtime"))
}

/// Turns HRTICK and HRTICK_DL on: CFS slices and SCHED_DEADLINE runtimes are then enforced by
/// high-resolution timers instead of the tick (4 ms at HZ=250). Each flag is journaled as its old
/// spelling, so undo writes "NO_<flag>" back (one flag per write).
pub(crate) fn hrtick_on(txn: &mut Txn, warnings: &mut Vec<String>) -> StepResult<()> {
    let path = Path::new(SCHED_FEATURES);
    let list = match std::fs::read_to_string(path) {
        Ok(l) => l,
        Err(e) => {
            warnings.push(format!(
                "hrtick: {SCHED_FEATURES} is not usable ({e}; debugfs not mounted or locked down); HRTICK/HRTICK_DL left unchanged"
            ));
            return Ok(());
        }
    };
    let mut missing = true;
    for feature in ["HRTICK", "HRTICK_DL"] {
        let off = format!("NO_{feature}");
        let flags: Vec<&str> = list.split_whitespace().collect();
        missing &= !flags.contains(&feature) && !flags.contains(&off.as_str());
        if !flags.contains(&off.as_str()) {
            continue; // already on, or this kernel lacks the flag (HRTICK_DL is 6.x)
        }
        step(format!("journal {feature}"), txn.record(Change::Wrote { path: path.into(), old: off, new: feature.into() }))?;
        step(format!("turn {feature} on"), crate::fsio::write(path, feature))?;
    }
    if missing {
        warnings.push("hrtick: this kernel has no HRTICK feature (built without CONFIG_SCHED_HRTICK); budgets are enforced at the tick".into());
    }
    Ok(())
}

/// Mounts debugfs if the scheduler's directory is not there, journaling the mount (undo unmounts).
/// `Ok(false)` with a warning when it cannot be mounted.
pub(crate) fn mount_debugfs(txn: &mut Txn, warnings: &mut Vec<String>) -> StepResult<bool> {
    let debug = Path::new(DEBUGFS);
    if debug.join("sched").exists() {
        return Ok(true);
    }
    if let Err(e) = rtslice_sys::fs::mount_pseudo("debugfs", debug) {
        warnings.push(format!("fair_server: cannot mount debugfs ({e}); left unchanged"));
        return Ok(false);
    }
    step("journal debugfs mount", txn.record(Change::Mounted { target: debug.to_path_buf() }))?;
    Ok(true)
}

/// Whether the fair servers' runtimes can be read here (kernel lockdown restricts debugfs; kernels
/// before 6.12 have no fair server). Says why not.
pub(crate) fn fair_server_usable(cpu: u32) -> std::result::Result<(), String> {
    let probe = fair_server_runtime(cpu);
    std::fs::read_to_string(&probe)
        .map(drop)
        .map_err(|e| format!("fair_server: {} is not usable ({e}; kernel lockdown, or a kernel without fair servers)", probe.display()))
}

