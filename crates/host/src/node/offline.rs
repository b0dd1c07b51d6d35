//! What a node's directory says when no process holds the node open (a stopped daemon's, or an
//! in-process apply's), read without its lock: the workloads' records, which the agent process
//! serving the node reads when it starts (`Node::start_agent`), and the status of the base, every
//! workload and that agent (`rtslice status`). A daemon running on the directory answers with
//! more (`rtslice list`, `GET /v1/workloads`).

use super::*;

/// A workload's segment in the node directory `dir` (see `Node::segment`).
pub(super) fn segment_in(dir: &Path, name: &str) -> StateDir {
    StateDir::volatile(dir.join("workloads").join(name))
}

/// Names of the workloads with a segment in the node directory `dir`, in deploy order.
pub(super) fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<(std::time::SystemTime, String)> = std::fs::read_dir(dir.join("workloads"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().join("state.json").exists())
                .map(|e| {
                    let t = std::fs::metadata(e.path().join("created")).and_then(|m| m.modified()).unwrap_or(std::time::UNIX_EPOCH);
                    (t, e.file_name().to_string_lossy().into_owned())
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v.into_iter().map(|(_, n)| n).collect()
}

/// The records of the workloads the node directory `dir` (`<state dir>/node`) holds, read without
/// its lock: what the agent process serving the node reads when it starts. `None`: `dir` is not a
/// node's directory.
pub fn records_in(dir: &Path) -> Option<Result<Vec<AppliedRecord>>> {
    if !crate::journal::holds_node_base(dir) {
        return None;
    }
    let records = names_in(dir)
        .into_iter()
        .map(|n| segment_in(dir, &n).load().map(|s| s.and_then(|s| s.record)))
        .filter_map(|r| r.transpose())
        .collect();
    Some(records)
}

/// The records of what the state directory `root` holds, read without its lock: each workload's of
/// its node (a one-shot apply's or the node service's), else the record of a journal written by an
/// older rtslice's one-shot apply (one record for every workload). Empty when nothing is applied.
pub fn applied_records(root: &StateDir) -> Result<Vec<AppliedRecord>> {
    match records_in(&node_dir(root)) {
        Some(records) => records,
        None => Ok(root.load()?.and_then(|s| s.record).into_iter().collect()),
    }
}

/// What the state directory holds, against the kernel: a node's (an apply's, or a node service's,
/// stopped or running) base, workloads and agent merged; else one journal's (an older rtslice's
/// one-shot apply, or nothing).
pub fn status(root: &StateDir) -> Result<Status> {
    if !crate::journal::node_active(root) {
        return journal_status(root);
    }
    status_in(root)
}

/// `status` of the node a state directory holds: its base, each workload's segment and its agent
/// process, merged as one apply's would be (changes summed, workloads and drift listed together).
fn status_in(root: &StateDir) -> Result<Status> {
    let dir = node_dir(root);
    let mut st = journal_status(root)?;
    let parts = [StateDir::new(dir.join("base")), StateDir::new(dir.join("agent"))]
        .into_iter()
        .chain(names_in(&dir).into_iter().map(|n| segment_in(&dir, &n)));
    for part in parts {
        let s = journal_status(&part)?;
        st.applied |= s.applied;
        st.changes += s.changes;
        st.mechanism = st.mechanism.or(s.mechanism);
        st.agent = st.agent.or(s.agent);
        st.workloads.extend(s.workloads);
        st.drift.extend(s.drift);
        st.warnings.extend(s.warnings);
    }
    Ok(st)
}
