//! The journal: every change rtslice makes, with the value it replaced, persisted in a state directory
//! (default /var/lib/rtslice) so `reset` can undo it even after a crash. The file is replaced
//! atomically (write a temp file, fsync, rename, fsync the directory) after every change; a change is
//! logged *before* it is made (an intent), so undoing a logged change that never happened is harmless.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cpus::CpuList;
use crate::error::{HostError, Result};
use crate::record::AppliedRecord;
use crate::sched::SchedAttr;

pub use rtslice_sys::proc_ref::ProcRef;

pub const FORMAT: &str = "rtslice-state";
pub const VERSION: u32 = 1;
pub const DEFAULT_STATE_DIR: &str = "/var/lib/rtslice";
/// The node service's desired state in a state directory (which workloads should run): it goes
/// with the node when `rtslice reset` undoes it, or the next daemon would deploy them again.
pub const NODE_DESIRED_FILE: &str = "desired.json";
const STATE_FILE: &str = "state.json";

/// One change, with what is needed to undo it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum Change {
    /// A kernel file was written; `old` is what it held before.
    Wrote { path: PathBuf, old: String, new: String },
    /// A directory (cgroup) was created; undo moves leftover tasks to `evacuate_to` and removes it.
    Created { path: PathBuf, evacuate_to: PathBuf },
    /// A process was moved into a cgroup; undo writes it back into `from` (a cgroup.procs file).
    MovedProcess { proc: ProcRef, from: PathBuf, to: PathBuf },
    /// Many processes moved at once (a shield); undo writes the live ones back into `from`.
    MovedProcesses { procs: Vec<ProcRef>, from: PathBuf, to: PathBuf },
    /// A thread's scheduling policy changed.
    Sched { thread: ProcRef, old: SchedAttr, new: SchedAttr },
    /// A thread's CPU affinity changed.
    Affinity { thread: ProcRef, old: CpuList, new: CpuList },
    /// The affinities of the root cgroup's threads, kept as they were (cgroup v2 with boot isolation:
    /// the kernel resets them whenever a partition is created or removed). One change for all of
    /// them, so the journal does not grow or shrink with the kernel workers that come and go; undo
    /// restores the threads still alive.
    RootAffinities { threads: Vec<(ProcRef, CpuList)> },
    /// A filesystem was mounted (debugfs for fair_server).
    Mounted { target: PathBuf },
    /// A process rtslice launched (leader of its own session); undo stops its session gracefully
    /// (SIGTERM, a grace period, SIGKILL) together with every process left in `procs_files` (the
    /// workload's cgroup.procs files: children that started a session of their own stay there).
    Launched {
        proc: ProcRef,
        what: String,
        #[serde(default)]
        procs_files: Vec<PathBuf>,
    },
    /// An OCI container started through runc.
    Container { id: String, runc_root: PathBuf, runc: PathBuf },
    /// A podman container, journaled before `podman create`; undo stops and removes it (a
    /// container that was never created, or is gone, is fine).
    Podman { name: String, podman: PathBuf },
    /// The agent keeping late threads in policy.
    Agent { proc: ProcRef },
    /// A resctrl control group was created (`mkdir` under the resctrl root); undo removes it, and
    /// the kernel returns its tasks to the default group.
    ResctrlGroup { path: PathBuf },
    /// A thread was moved into a resctrl group (its id written to `to`, a `tasks` file); undo writes
    /// it back into `from`, the `tasks` file of the group it was in.
    ResctrlTask { thread: ProcRef, from: PathBuf, to: PathBuf },
}

impl Change {
    /// A workload's running processes: stopped first when a workload goes, kept by
    /// `reset --keep-workloads`.
    pub fn is_a_launch(&self) -> bool {
        matches!(self, Change::Launched { .. } | Change::Container { .. } | Change::Podman { .. })
    }

    pub fn describe(&self) -> String {
        match self {
            Change::Wrote { path, old, new } => format!("{} {old:?} -> {new:?}", path.display()),
            Change::Created { path, .. } => format!("created {}", path.display()),
            Change::MovedProcess { proc, to, .. } => format!("moved pid {} into {}", proc.pid, to.display()),
            Change::MovedProcesses { procs, to, .. } => format!("moved {} processes into {}", procs.len(), to.display()),
            Change::Sched { thread, old, new } => format!("thread {}: {old} -> {new}", thread.pid),
            Change::Affinity { thread, old, new } => format!("thread {} affinity {old} -> {new}", thread.pid),
            Change::RootAffinities { threads } => format!("affinity of {} root-cgroup threads kept", threads.len()),
            Change::Mounted { target } => format!("mounted {}", target.display()),
            Change::Launched { proc, what, .. } => format!("launched {what} (pid {})", proc.pid),
            Change::Container { id, .. } => format!("runc container {id}"),
            Change::Podman { name, .. } => format!("podman container {name}"),
            Change::Agent { proc } => format!("agent pid {}", proc.pid),
            Change::ResctrlGroup { path } => format!("created resctrl group {}", path.display()),
            Change::ResctrlTask { thread, to, .. } => format!("moved thread {} into {}", thread.pid, to.display()),
        }
    }
}

/// The persisted state: the journal plus what apply recorded for status and the agent.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct State {
    pub format: String,
    pub version: u32,
    /// /proc/sys/kernel/random/boot_id at apply time: after a reboot the kernel state is gone.
    pub boot_id: String,
    pub changes: Vec<Change>,
    pub record: Option<AppliedRecord>,
}

impl State {
    pub fn new() -> State {
        State { format: FORMAT.into(), version: VERSION, boot_id: boot_id(), changes: Vec::new(), record: None }
    }
}

impl Default for State {
    fn default() -> Self {
        State::new()
    }
}

pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The state directory. One apply at a time holds it (flock on `lock`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateDir {
    pub path: PathBuf,
    /// Saves skip fsync (see [`StateDir::volatile`]).
    pub volatile: bool,
}

impl Default for StateDir {
    fn default() -> Self {
        StateDir { path: PathBuf::from(DEFAULT_STATE_DIR), volatile: false }
    }
}

/// Held while a process changes the state; released on drop.
pub struct StateLock {
    _file: std::fs::File,
}

/// A state directory's layout beyond its own journal: the node's directory (`<state>/node`: its
/// base and one segment per workload) and the tuning journal's (`<state>/tune`), so apply, reset and
/// tune find each other's state without importing each other.
pub(crate) fn node_dir(root: &StateDir) -> PathBuf {
    root.path.join("node")
}

/// In a node's directory: the node is a one-shot apply's (`NodeOptions::one_shot`).
pub(crate) const ONE_SHOT_MARK: &str = "one-shot";

/// Whether a node's base is applied under this state directory (a one-shot apply's, or the node
/// service's).
pub fn node_active(root: &StateDir) -> bool {
    holds_node_base(&node_dir(root))
}

/// Whether the node under this state directory is a one-shot apply's (`apply` runs a node in-process
/// and marks it; the node service refuses such a node, and a second one-shot apply refuses it too).
pub fn one_shot_applied(root: &StateDir) -> bool {
    node_active(root) && node_dir(root).join(ONE_SHOT_MARK).exists()
}

/// Whether `dir` is a node's directory with its base applied.
pub(crate) fn holds_node_base(dir: &Path) -> bool {
    dir.join("base").join("state.json").exists()
}

/// Where the agent serving this state directory keeps its files (ready mark, log, statistics): the
/// node's directory when the state directory holds a node (`Node::start_agent`), else the state
/// directory itself (an older rtslice's one-shot apply's agent).
pub fn agent_dir(root: &StateDir) -> StateDir {
    if node_active(root) {
        StateDir::new(node_dir(root))
    } else {
        root.clone()
    }
}

/// The state directory of the tuning journal, inside the apply journal's directory.
pub fn tuning_state_dir(dir: &StateDir) -> StateDir {
    StateDir::new(dir.path.join("tune"))
}

impl StateDir {
    pub fn new(path: impl Into<PathBuf>) -> StateDir {
        StateDir { path: path.into(), volatile: false }
    }

    /// A journal whose saves are atomic (temp file, rename) but not fsynced: for journals that a
    /// reboot makes void anyway (the node's workload segments, docs/host.md). A process killed at
    /// any point loses nothing written before (the page cache survives it); only a kernel crash or a
    /// power loss can, and after those the node drops every segment because the boot id changed.
    pub fn volatile(path: impl Into<PathBuf>) -> StateDir {
        StateDir { path: path.into(), volatile: true }
    }

    pub fn file(&self) -> PathBuf {
        self.path.join(STATE_FILE)
    }

    fn state_err(&self, reason: impl Into<String>) -> HostError {
        HostError::State { path: self.path.clone(), reason: reason.into() }
    }

    /// Takes the directory's lock, failing fast if another rtslice holds it.
    pub fn lock(&self) -> Result<StateLock> {
        std::fs::create_dir_all(&self.path).map_err(|e| self.state_err(format!("cannot create it: {e}")))?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.path.join("lock"))
            .map_err(|e| self.state_err(format!("cannot open its lock file: {e}")))?;
        // A lock just released can stay held for a moment: flock belongs to the open file
        // description, and a child another thread forks between our open and its exec holds a copy
        // until the exec closes it (so `reset` right after `apply` returned was refused in a process
        // whose other threads spawn children). Holders that stay are refused after 1 s.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        loop {
            match rtslice_sys::lock::try_lock_exclusive(&file) {
                Ok(true) => return Ok(StateLock { _file: file }),
                Ok(false) if std::time::Instant::now() < deadline => std::thread::sleep(std::time::Duration::from_millis(10)),
                Ok(false) => {
                    return Err(self.state_err("another rtslice apply/reset is running on this state directory; wait for it"))
                }
                Err(e) => return Err(self.state_err(format!("cannot lock {}: {e}", self.path.join("lock").display()))),
            }
        }
    }

    /// Loads the state; `Ok(None)` when there is none. A corrupt file, another program's file, or a
    /// newer format is refused (never half-interpreted).
    pub fn load(&self) -> Result<Option<State>> {
        let file = self.file();
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.state_err(format!("cannot read {}: {e}", file.display()))),
        };
        let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            self.state_err(format!(
                "{} is corrupt ({e}); nothing was done. Inspect it: if the host was rebooted since, remove it; \
                 otherwise restore the values it lists by hand",
                file.display()
            ))
        })?;
        let format = value.get("format").and_then(|f| f.as_str()).unwrap_or("");
        if format != FORMAT {
            return Err(self.state_err(format!(
                "{} is not an rtslice state file (format {format:?}); refusing to use it. Point --state-dir at \
                 rtslice's own directory",
                file.display()
            )));
        }
        let version = value.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
        if version != VERSION as u64 {
            return Err(self.state_err(format!(
                "{} has state format version {version}, this rtslice understands {VERSION}; use the rtslice that wrote it",
                file.display()
            )));
        }
        let state: State = serde_json::from_value(value)
            .map_err(|e| self.state_err(format!("{} is corrupt ({e}); nothing was done", file.display())))?;
        Ok(Some(state))
    }

    /// Atomically replaces the state file: write temp, fsync, rename, fsync directory.
    pub fn save(&self, state: &State) -> Result<()> {
        std::fs::create_dir_all(&self.path).map_err(|e| self.state_err(format!("cannot create it: {e}")))?;
        let tmp = self.path.join(format!("{STATE_FILE}.tmp"));
        let json = serde_json::to_vec_pretty(state).map_err(|e| self.state_err(e.to_string()))?;
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&json)?;
            if !self.volatile {
                f.sync_all()?;
            }
            std::fs::rename(&tmp, self.file())?;
            if self.volatile {
                return Ok(());
            }
            std::fs::File::open(&self.path)?.sync_all()
        };
        write().map_err(|e| self.state_err(format!("cannot write {}: {e}", self.file().display())))
    }

    pub fn remove(&self) -> Result<()> {
        match std::fs::remove_file(self.file()) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.state_err(format!("cannot remove {}: {e}", self.file().display()))),
        }
    }
}

/// True when `path` lies inside a directory created by one of `changes` (so writing its old value back
/// is pointless: the directory goes away).
pub fn inside_created(changes: &[Change], path: &Path) -> bool {
    changes.iter().any(|c| {
        matches!(c, Change::Created { path: dir, .. } | Change::ResctrlGroup { path: dir }
            if path.starts_with(dir) && path != dir)
    })
}

/// Whether an older change (in `older`) restores the same thread's policy or affinity further back:
/// undoing `change` then would only pass through an intermediate value. Skipping it matters for
/// SCHED_DEADLINE: a budget a thread held before a shrink may no longer fit its root domain once
/// the bandwidth went to another workload (EBUSY), while the value before them all (the thread's
/// policy before rtslice) always does.
pub fn superseded(older: &[Change], change: &Change) -> bool {
    match change {
        Change::Sched { thread, .. } => older.iter().any(|c| matches!(c, Change::Sched { thread: t, .. } if t == thread)),
        Change::Affinity { thread, .. } => older.iter().any(|c| matches!(c, Change::Affinity { thread: t, .. } if t == thread)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_oldest_change_of_a_thread_is_undone() {
        let t = |pid| ProcRef { pid, start: 1 };
        let dl = |r| SchedAttr::Deadline { runtime_ns: r, deadline_ns: 1_000_000, period_ns: 1_000_000, reclaim: false };
        let changes = vec![
            Change::Sched { thread: t(1), old: SchedAttr::Other { nice: 0 }, new: dl(400_000) },
            Change::Sched { thread: t(2), old: SchedAttr::Other { nice: 0 }, new: dl(100_000) },
            Change::Sched { thread: t(1), old: dl(400_000), new: dl(300_000) },
        ];
        assert!(superseded(&changes[..2], &changes[2]), "the newer change of thread 1 passes through 400 µs: skipped");
        assert!(!superseded(&changes[..1], &changes[1]), "thread 2's only change is undone");
        assert!(!superseded(&[], &changes[0]));
    }

    #[test]
    fn save_load_round_trip_and_refusals() {
        let dir = tempfile::tempdir().unwrap();
        let sd = StateDir::new(dir.path());
        assert!(sd.load().unwrap().is_none());
        let mut st = State::new();
        st.changes.push(Change::Wrote { path: "/x".into(), old: "1".into(), new: "0".into() });
        sd.save(&st).unwrap();
        let back = sd.load().unwrap().unwrap();
        assert_eq!(back.changes, st.changes);
        assert!(!dir.path().join("state.json.tmp").exists());

        std::fs::write(sd.file(), "{\"changes\": [").unwrap();
        let e = sd.load().unwrap_err().to_string();
        assert!(e.contains("corrupt"), "{e}");

        std::fs::write(sd.file(), r#"{"format":"something-else","version":1}"#).unwrap();
        let e = sd.load().unwrap_err().to_string();
        assert!(e.contains("not an rtslice state file"), "{e}");

        std::fs::write(sd.file(), r#"{"format":"rtslice-state","version":99}"#).unwrap();
        assert!(sd.load().unwrap_err().to_string().contains("version 99"));
    }

    #[test]
    fn lock_is_exclusive() {
        let dir = tempfile::tempdir().unwrap();
        let sd = StateDir::new(dir.path());
        let held = sd.lock().unwrap();
        assert!(sd.lock().is_err());
        drop(held);
        assert!(sd.lock().is_ok());
    }

    #[test]
    fn created_dirs_cover_their_files() {
        let ch = vec![Change::Created { path: "/cg/rtslice".into(), evacuate_to: "/cg/cgroup.procs".into() }];
        assert!(inside_created(&ch, Path::new("/cg/rtslice/du/cpuset.cpus")));
        assert!(!inside_created(&ch, Path::new("/cg/cpuset.sched_load_balance")));
        assert!(!inside_created(&ch, Path::new("/cg/rtslice")));
    }
}
