//! Transactions over the journal: each operation logs its intent (with the value it replaces), saves
//! the state atomically, then acts. On failure the caller rolls back everything logged in this run,
//! newest first. `undo` is also what `reset` runs over a whole journal.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rtslice_sys::proc_ref::ProcRef;

use crate::cgroup::Op;
use crate::cpus::CpuList;
use crate::error::{HostError, Result};
use crate::fsio;
use crate::journal::{inside_created, Change, State, StateDir};
use crate::sched::{self, SchedAttr};

/// Fault injection for tests of rollback: the n-th change of a run (0-based) fails with EIO instead of
/// being made, as if the kernel had refused it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fault {
    pub fail_change: Option<usize>,
}

pub struct Txn<'a> {
    dir: &'a StateDir,
    pub state: &'a mut State,
    start: usize,
    made: usize,
    fault: Fault,
}

impl<'a> Txn<'a> {
    /// Carries out one cgroup operation in the transaction (journaled before it is made), the step
    /// named for the failure report; the one loop body of apply and the node. A `cpuset.cpus.partition`
    /// write is read back: cgroup v2 takes an impossible partition request without an error and says
    /// so only in the file.
    pub(crate) fn run(&mut self, op: Op) -> StepResult<()> {
        match op {
            Op::Mkdir { path, evacuate_to } => step(format!("create cgroup {}", path.display()), self.mkdir(&path, &evacuate_to)),
            Op::Write { path, value } => {
                step(format!("write {value:?} to {}", path.display()), self.write_if_changed(&path, &value))?;
                if path.ends_with("cpuset.cpus.partition") {
                    let state = step(format!("read {}", path.display()), crate::fsio::read_trim(&path))?;
                    if let Some(explanation) = crate::cgroup::invalid_partition(&state) {
                        let e = HostError::InvalidPartition { path: path.clone(), wanted: value, state, explanation };
                        return Err((format!("make {} a partition", path.parent().unwrap_or(&path).display()), e));
                    }
                }
                Ok(())
            }
        }
    }

    pub fn begin(dir: &'a StateDir, state: &'a mut State, fault: Fault) -> Txn<'a> {
        let start = state.changes.len();
        Txn { dir, state, start, made: 0, fault }
    }

    pub fn save(&self) -> Result<()> {
        self.dir.save(self.state)
    }

    fn log(&mut self, change: Change) -> Result<()> {
        if self.fault.fail_change == Some(self.made) {
            return Err(HostError::Write {
                path: PathBuf::from(format!("<injected fault at change #{}: {}>", self.made, change.describe())),
                value: String::new(),
                source: std::io::Error::from_raw_os_error(libc::EIO),
            });
        }
        self.made += 1;
        self.state.changes.push(change);
        self.save()
    }

    /// The change just logged did not happen: drop its intent.
    fn unlog(&mut self) {
        self.state.changes.pop();
        let _ = self.save();
    }

    /// Writes a kernel file, journaling its previous content.
    pub fn write(&mut self, path: &Path, value: &str) -> Result<()> {
        let old = fsio::read_trim(path)?;
        self.log(Change::Wrote { path: path.to_path_buf(), old, new: value.to_string() })?;
        write_rt_aware(path, value).inspect_err(|_| self.unlog())
    }

    /// Writes only if the current value differs (keeps the journal short and avoids needless EBUSY).
    pub fn write_if_changed(&mut self, path: &Path, value: &str) -> Result<()> {
        let cur = fsio::read_trim(path)?;
        if same_value(&cur, value) {
            return Ok(());
        }
        self.write(path, value)
    }

    pub fn mkdir(&mut self, path: &Path, evacuate_to: &Path) -> Result<()> {
        if path.exists() {
            return Err(HostError::Create {
                path: path.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "it already exists; a previous rtslice apply may not have been reset (run `rtslice reset`), \
                     or another tool owns it",
                ),
            });
        }
        self.log(Change::Created { path: path.to_path_buf(), evacuate_to: evacuate_to.to_path_buf() })?;
        fsio::mkdir(path).inspect_err(|_| self.unlog())
    }

    /// Creates a resctrl control group (see `resctrl`), journaled so undo removes it.
    pub fn mkdir_resctrl(&mut self, path: &Path) -> Result<()> {
        if path.exists() {
            return Err(HostError::Create {
                path: path.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "the resctrl group already exists; a previous rtslice apply may not have been reset (run `rtslice reset`), \
                     or another tool owns it",
                ),
            });
        }
        self.log(Change::ResctrlGroup { path: path.to_path_buf() })?;
        crate::resctrl_files::make_group(path).inspect_err(|_| self.unlog())
    }

    /// Moves one thread into a resctrl group (`to`, its `tasks` file), journaling the group it was in.
    /// A thread that exited meanwhile is skipped (`Ok(false)`).
    pub fn move_task(&mut self, tid: i32, from: &Path, to: &Path) -> Result<bool> {
        let Some(thread) = ProcRef::of(tid) else { return Ok(false) };
        self.log(Change::ResctrlTask { thread, from: from.to_path_buf(), to: to.to_path_buf() })?;
        match crate::resctrl_files::write(to, &tid.to_string()) {
            Ok(()) => Ok(true),
            Err(HostError::Resctrl { source, .. }) if source.raw_os_error() == Some(libc::ESRCH) => {
                self.unlog();
                Ok(false)
            }
            Err(e) => {
                self.unlog();
                Err(e)
            }
        }
    }

    /// Writes a resctrl file (a schemata), journaling its previous content; a refusal carries the
    /// kernel's reason from `info/last_cmd_status`.
    /// The previous content is kept as read (a schemata's lines, padding and final newline), which
    /// resctrl takes back as it is.
    pub fn write_resctrl(&mut self, path: &Path, value: &str) -> Result<()> {
        let old = fsio::read(path)?;
        self.log(Change::Wrote { path: path.to_path_buf(), old, new: value.to_string() })?;
        crate::resctrl_files::write(path, value).inspect_err(|_| self.unlog())
    }

    /// Moves a process into a cgroup (one hierarchy), journaling where it was.
    pub fn move_process(&mut self, pid: i32, from_procs: &Path, to_procs: &Path) -> Result<()> {
        let proc = ProcRef::of(pid).ok_or_else(|| HostError::Launch {
            what: format!("pid {pid}"),
            reason: "no such process".into(),
        })?;
        self.log(Change::MovedProcess { proc, from: from_procs.to_path_buf(), to: to_procs.to_path_buf() })?;
        fsio::write(to_procs, &pid.to_string()).inspect_err(|_| self.unlog())
    }

    pub fn set_attr(&mut self, tid: i32, policy: SchedAttr) -> Result<()> {
        let old = sched::get_attr(tid)?;
        if old == policy {
            return Ok(());
        }
        let thread = ProcRef::of(tid).ok_or(HostError::Sched {
            call: "sched_setattr",
            tid,
            source: std::io::Error::from_raw_os_error(libc::ESRCH),
        })?;
        self.log(Change::Sched { thread, old, new: policy })?;
        sched::set_attr(tid, policy).inspect_err(|_| self.unlog())
    }

    pub fn set_affinity(&mut self, tid: i32, cpus: &CpuList) -> Result<()> {
        let old = sched::get_affinity(tid)?;
        if &old == cpus {
            return Ok(());
        }
        let thread = ProcRef::of(tid).ok_or(HostError::Sched {
            call: "sched_setaffinity",
            tid,
            source: std::io::Error::from_raw_os_error(libc::ESRCH),
        })?;
        self.log(Change::Affinity { thread, old, new: cpus.clone() })?;
        sched::set_affinity(tid, cpus).inspect_err(|_| self.unlog())
    }

    /// Records something done outside this module (a launch, a container, the agent). Logged before the
    /// action when possible by the caller, so a crash in between still undoes it.
    pub fn record(&mut self, change: Change) -> Result<()> {
        self.log(change)
    }

    /// Undoes this run's changes, newest first; returns what could not be undone. Launched workloads
    /// get the default grace period to shut down.
    pub fn rollback(self) -> Vec<String> {
        let errors = undo_all(&mut self.state.changes, self.start, &mut Undo::default());
        let _ = self.dir.save(self.state);
        errors
    }
}

/// How long a launched workload gets between SIGTERM and SIGKILL unless the caller says otherwise
/// (docker stop's 10 s is tuned for databases; a vBS stack's threads exit within a TTI or two).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);
/// After SIGKILL a process must be gone within this; longer means it is stuck in the kernel.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// How undo stops launched processes, and what it counted doing so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Undo {
    /// SIGTERM → SIGKILL delay for launched workloads.
    pub grace: Duration,
    /// Processes that exited on SIGTERM within the grace period.
    pub terminated: usize,
    /// Processes that needed SIGKILL.
    pub killed: usize,
}

impl Default for Undo {
    fn default() -> Undo {
        Undo { grace: DEFAULT_GRACE, terminated: 0, killed: 0 }
    }
}

/// Undoes `changes[from..]` newest first, truncating the journal as it goes; errors are collected
/// (the failed entries stay journaled so a later `reset` can retry them).
///
/// A thread whose policy could not be restored and that still runs SCHED_DEADLINE keeps the CPU
/// sets it was admitted in: the cpuset changes and the cgroups older than it are kept journaled, not
/// undone. Removing an exclusive partition under a deadline thread hands its bandwidth to a root
/// domain that never admitted it (or moves the thread out of its group), so the kernel's accounting
/// would no longer match what runs; kept, the next `reset` undoes them once the thread is restored
/// or has exited.
pub fn undo_all(changes: &mut Vec<Change>, from: usize, ctx: &mut Undo) -> Vec<String> {
    let mut errors = Vec::new();
    let mut failed = Vec::new();
    // Threads left under SCHED_DEADLINE by a failed restore (checked again before each cpuset
    // change: undoing a launch older than the rules stops the workload, and its threads with it).
    let mut still_deadline: Vec<ProcRef> = Vec::new();
    // The agent keeps the workloads' threads in policy: left running while their policies are
    // undone, it rules them again, and a thread back under SCHED_DEADLINE refuses the affinity
    // restored after it (EBUSY: the reset fails and keeps its journal). It stops before anything
    // else is undone; if it cannot be stopped, it stays in its place below and says so there.
    let _ = undo_first(changes, from, ctx, |c| matches!(c, Change::Agent { .. }));
    // Then what was launched, so its threads die under the policies they run rather than being
    // restored first: a deadline thread restored to SCHED_OTHER goes through a 4 s shrink
    // (sched::set_attr) whose inactive timer, still pending when its partition and group go, can
    // leave an HCBS group dying for good with its budget counted against the root's (docs/host.md);
    // and a restore can be refused outright — a thread the agent ruled and a resize re-ruled is
    // journaled with a SCHED_DEADLINE budget as its "old" policy, which its siblings' budgets may no
    // longer leave room for (EBUSY). Threads that are gone need no restore. One that cannot be
    // stopped stays in its place below and says so.
    let _ = undo_first(changes, from, ctx, Change::is_a_launch);
    while changes.len() > from {
        let change = changes.pop().expect("len > from");
        if let Change::Wrote { path, .. } = &change {
            // Files inside directories this journal created vanish with them.
            if inside_created(changes, path) {
                continue;
            }
        }
        if crate::journal::superseded(&changes[from..], &change) {
            continue;
        }
        if holds_deadline_threads(&change) {
            still_deadline.retain(|t| t.alive() && matches!(sched::get_attr(t.pid), Ok(SchedAttr::Deadline { .. })));
            if !still_deadline.is_empty() {
                let tids: Vec<String> = still_deadline.iter().map(|t| t.pid.to_string()).collect();
                errors.push(format!(
                    "{}: kept, because thread(s) {} still run SCHED_DEADLINE in it (their restore failed, above); \
                     `rtslice reset` again undoes it once they are restored or have exited",
                    change.describe(),
                    tids.join(", ")
                ));
                failed.push(change);
                continue;
            }
        }
        if let Err(e) = undo(&change, ctx) {
            if let Change::Sched { thread, .. } = &change {
                if thread.alive() && matches!(sched::get_attr(thread.pid), Ok(SchedAttr::Deadline { .. })) {
                    still_deadline.push(*thread);
                }
            }
            errors.push(format!("{}: {e}", change.describe()));
            failed.push(change);
        }
    }
    failed.reverse();
    changes.extend(failed);
    errors
}

/// Whether undoing `change` could take a deadline thread's CPU set from under it: a cpuset knob
/// (`cpuset.cpu_exclusive`, `cpuset.cpus`, `cpuset.cpus.partition`, `cpuset.sched_load_balance`…)
/// or a cgroup rtslice created (removing it moves its threads to the parent).
fn holds_deadline_threads(change: &Change) -> bool {
    match change {
        Change::Wrote { path, .. } => path.file_name().is_some_and(|n| n.to_string_lossy().starts_with("cpuset.")),
        Change::Created { .. } => true,
        _ => false,
    }
}

/// Undoes the entries of `changes[from..]` that `which` picks, newest first, and drops them; the
/// ones that could not be undone stay in their place, and their errors are returned.
fn undo_first(changes: &mut Vec<Change>, from: usize, ctx: &mut Undo, which: impl Fn(&Change) -> bool) -> Vec<String> {
    let mut errors = Vec::new();
    let mut i = changes.len();
    while i > from {
        i -= 1;
        if which(&changes[i]) {
            match undo(&changes[i], ctx) {
                Ok(()) => {
                    changes.remove(i);
                }
                Err(e) => errors.push(format!("{}: {e}", changes[i].describe())),
            }
        }
    }
    errors
}

/// Normalizes kernel spellings ("0-1" vs "0,1", trailing newline) for comparison.
pub fn same_value(current: &str, wanted: &str) -> bool {
    let (c, w) = (current.trim(), wanted.trim());
    if c == w {
        return true;
    }
    if let (Ok(a), Ok(b)) = (CpuList::parse(c), CpuList::parse(w)) {
        if !c.is_empty() && !w.is_empty() && c.chars().all(|x| x.is_ascii_digit() || x == ',' || x == '-') {
            return a == b;
        }
    }
    false
}

fn ignore_gone(r: Result<()>) -> Result<()> {
    match r {
        Err(HostError::Write { source, .. }) | Err(HostError::Remove { source, .. })
            if source.raw_os_error() == Some(libc::ENOENT) =>
        {
            Ok(())
        }
        Err(HostError::Sched { source, .. }) if source.raw_os_error() == Some(libc::ESRCH) => Ok(()),
        other => other,
    }
}

pub fn undo(change: &Change, ctx: &mut Undo) -> Result<()> {
    match change {
        Change::Wrote { path, old, .. } => {
            if old.is_empty() && path.file_name().is_some_and(|n| n.to_string_lossy().ends_with("_cpus")) {
                // rps_cpus/xps_cpus read back as a mask; an empty one is "0".
                return ignore_gone(fsio::write(path, "0"));
            }
            if path.file_name().is_some_and(|n| n == "cgroup.subtree_control") {
                return undo_subtree_control(path, old);
            }
            let current = fsio::read_opt(path)?;
            match current {
                None => Ok(()),
                Some(cur) if same_value(&cur, old) => Ok(()),
                Some(_) => ignore_gone(restore_rt_aware(path, old)),
            }
        }
        Change::Created { path, evacuate_to } => remove_cgroup(path, evacuate_to),
        Change::MovedProcess { proc, from, .. } => {
            if proc.alive() {
                ignore_gone(fsio::write(from, &proc.pid.to_string()))
            } else {
                Ok(())
            }
        }
        Change::MovedProcesses { procs, from, .. } => {
            // One that cannot go back (pinned since, or moved elsewhere by its owner) is left where it
            // is: it was never ours to hold.
            crate::cgroup::move_processes(procs, from);
            Ok(())
        }
        Change::Sched { thread, old, .. } => {
            if thread.alive() {
                ignore_gone(sched::set_attr(thread.pid, *old))
            } else {
                Ok(())
            }
        }
        Change::Affinity { thread, old, .. } => {
            if thread.alive() {
                ignore_gone(sched::set_affinity(thread.pid, old))
            } else {
                Ok(())
            }
        }
        Change::RootAffinities { threads } => {
            // Threads that exited meanwhile need nothing; the others are all tried before reporting.
            let failed: Vec<String> = threads
                .iter()
                .filter(|(thread, _)| thread.alive())
                .filter_map(|(thread, cpus)| ignore_gone(sched::set_affinity(thread.pid, cpus)).err())
                .map(|e| e.to_string())
                .collect();
            if failed.is_empty() {
                Ok(())
            } else {
                Err(HostError::other(format!("restoring root-cgroup thread affinities: {}", failed.join("; "))))
            }
        }
        Change::Mounted { target } => match rtslice_sys::fs::unmount_detach(target) {
            // EINVAL: no longer a mount point (someone unmounted it already).
            Err(e) if e.raw_os_error() != Some(libc::EINVAL) => {
                Err(HostError::other(format!("umount {}: {e}; unmount it by hand (umount -l {0})", target.display())))
            }
            _ => Ok(()),
        },
        Change::Launched { proc, what, procs_files } => {
            // Processes still in the workload's cgroups that are younger than the launch are its
            // children, also those that started a session of their own.
            let others: Vec<ProcRef> = procs_files
                .iter()
                .flat_map(|f| crate::cgroup::read_pids(f))
                .filter_map(ProcRef::of)
                .filter(|p| p.start >= proc.start)
                .collect();
            let dl_period = sched::longest_deadline_period(std::iter::once(proc).chain(&others).filter(|p| p.alive()).map(|p| p.pid));
            let r = rtslice_sys::proc_ref::stop_gracefully(&[*proc], &others, ctx.grace, KILL_WAIT);
            ctx.terminated += r.terminated;
            ctx.killed += r.killed;
            sched::wait_deadline_release(dl_period);
            survivors(what, &r.left)
        }
        Change::Agent { proc } => {
            // The agent ends on SIGTERM after writing its statistics.
            let r = rtslice_sys::proc_ref::stop_gracefully(&[], &[*proc], ctx.grace, KILL_WAIT);
            survivors("the agent", &r.left)
        }
        Change::Container { id, runc_root, runc } => crate::oci::runc_stop(runc, runc_root, id, ctx.grace),
        Change::Podman { name, podman } => crate::podman::stop(podman, name, ctx.grace),
        Change::ResctrlGroup { path } => crate::resctrl_files::remove_group(path),
        Change::ResctrlTask { thread, from, to } => {
            // Back to the default group happens by itself: removing `to`'s group (journaled before
            // this move, so undone after it) hands its tasks to the default group.
            let from_default = to.parent().and_then(Path::parent).is_some_and(|root| from == &root.join(crate::resctrl_files::TASKS));
            if from_default || !thread.alive() {
                return Ok(());
            }
            match crate::resctrl_files::write(from, &thread.pid.to_string()) {
                Err(HostError::Resctrl { source, .. }) if matches!(source.raw_os_error(), Some(libc::ESRCH) | Some(libc::ENOENT)) => Ok(()),
                other => other,
            }
        }
    }
}

/// cgroup.subtree_control reads back as "cpu memory" but takes "+x -y": disable what was not enabled.
fn undo_subtree_control(path: &Path, old: &str) -> Result<()> {
    let Some(cur) = fsio::read_opt(path)? else { return Ok(()) };
    let before: Vec<&str> = old.split_whitespace().collect();
    let off: Vec<String> = cur
        .split_whitespace()
        .map(|c| c.trim_start_matches('+'))
        .filter(|c| !before.contains(c))
        .map(|c| format!("-{c}"))
        .collect();
    if off.is_empty() {
        return Ok(());
    }
    ignore_gone(fsio::write(path, &off.join(" ")))
}

fn survivors(what: &str, left: &[ProcRef]) -> Result<()> {
    if left.is_empty() {
        return Ok(());
    }
    let pids: Vec<String> = left.iter().map(|p| p.pid.to_string()).collect();
    Err(HostError::other(format!(
        "{what}: process(es) {} still exist {} s after SIGKILL (stuck in the kernel: see /proc/PID/stack and \
         /proc/PID/wchan); run `rtslice reset` again once they are gone",
        pids.join(", "),
        KILL_WAIT.as_secs()
    )))
}

/// A step of a transaction that failed: its name (what the user is told failed) and the error.
pub(crate) type StepResult<T> = std::result::Result<T, (String, HostError)>;

/// Names a step's result for the failure report.
pub(crate) fn step<T>(name: impl Into<String>, r: Result<T>) -> StepResult<T> {
    r.map_err(|e| (name.into(), e))
}

/// Removes a cgroup: leftover tasks go to `evacuate_to` (the hierarchy's root cgroup.procs), then
/// rmdir, retrying while exiting tasks still pin it.
pub fn remove_cgroup(dir: &Path, evacuate_to: &Path) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        // Children first (e.g. runc's container cgroup inside a workload group).
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    remove_cgroup(&e.path(), evacuate_to)?;
                }
            }
        }
        for pid in crate::cgroup::read_pids(&dir.join("cgroup.procs")) {
            let _ = fsio::write(evacuate_to, &pid.to_string());
        }
        // cgroup v2: the CPUs a removed group held as a partition return to its parent only when
        // the kernel takes the group offline, asynchronously after rmdir, so a reset that returned
        // at once could leave the root without them for a while (docs/testing.md, flaky runs).
        // (A member group's CPUs are its parent's already: the wait ends at once.)
        let held = fsio::read_trim(dir.join("cpuset.cpus.effective")).ok().and_then(|c| crate::CpuList::parse(&c).ok());
        match fsio::rmdir(dir) {
            Ok(()) => {
                if let (Some(cpus), Some(parent)) = (held, dir.parent()) {
                    wait_for_cpus(&parent.join("cpuset.cpus.effective"), &cpus);
                }
                return Ok(());
            }
            Err(HostError::Remove { source, .. }) if source.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Waits (at most 10 s) until a cpuset's effective CPUs include `cpus`. The offlining waits for an
/// RCU grace period and a workqueue, which a loaded TCG guest stretches to seconds; the wait ends as
/// soon as the CPUs are back, so a quiet host never pays for the bound. (The parent's tasks get the
/// CPUs back in their affinity after this, under the kernel's lock: nothing here can wait on that.)
fn wait_for_cpus(effective: &Path, cpus: &crate::CpuList) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let now = fsio::read_trim(effective).ok().and_then(|c| crate::CpuList::parse(&c).ok());
        if now.is_none_or(|n| cpus.is_subset(&n)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How long a refused RT budget write is retried: RT bandwidth freed by a cgroup that was just removed
/// (ours at the end of a reset, or another tool's) returns to the parent only when the kernel releases
/// the group after an RCU grace period, so an admission check right after a reset can see it as still
/// in use and answer EINVAL although the budget is free.
const RT_BUDGET_SETTLE: std::time::Duration = std::time::Duration::from_secs(2);
/// The same for HCBS: the 7.2 + RFC v6 kernel the matrix boots gave a removed group's budget back
/// within 50 ms mostly, but once only after more than 2 s (hcbs-4cpu row: a 10 % group reset, a
/// 20 % one applied at once was refused its budget).
const HCBS_BUDGET_SETTLE: std::time::Duration = std::time::Duration::from_secs(10);

/// Beyond [`HCBS_BUDGET_SETTLE`], an HCBS budget write refused with EINVAL is retried as long as a
/// removed group below it is still dying (`cgroup.stat`'s `nr_dying_descendants`): the kernel counts
/// a dying group's budget until it frees the group, and how long that takes is the kernel's.
/// Waiting on that cause, with this bound, instead of a longer blind timeout: when no group is
/// dying, the refusal is final at once after the settle time. Undo only ([`restore_rt_aware`]).
/// A group kept dying by an unreaped zombie never frees within any bound: stops reap a process only
/// once its last thread has ended (`rtslice_sys::proc_ref`), which is what keeps groups from that.
const HCBS_DYING_SETTLE: std::time::Duration = std::time::Duration::from_secs(60);

/// Whether a cgroup below `dir` was removed and is not freed yet.
fn dying_below(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.stat"))
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("nr_dying_descendants ")?.trim().parse::<u64>().ok()))
        .is_some_and(|n| n > 0)
}

/// HCBS (`cpu.rt.max`) the same: a removed group's budget is still counted in its parent's until
/// the kernel frees the group, so the root given back its value right after a reset can be refused
/// (EINVAL: the children above the parent); and a deadline thread that just exited holds its
/// bandwidth until its 0-lag time, refusing the root's budget meanwhile (EBUSY).
pub(crate) fn write_rt_aware(path: &Path, value: &str) -> Result<()> {
    write_rt_settling(path, value, false)
}

/// [`write_rt_aware`] for an undo: the value restored held before the change, so an HCBS refusal
/// while a removed group below is still dying is that group's budget not yet freed, and is waited
/// for up to [`HCBS_DYING_SETTLE`]. (Forward writes do not wait on it: a host whose memory cgroups
/// linger dying for long would make every genuine refusal slow.)
fn restore_rt_aware(path: &Path, old: &str) -> Result<()> {
    write_rt_settling(path, old, true)
}

fn write_rt_settling(path: &Path, value: &str, wait_for_dying: bool) -> Result<()> {
    let name = path.file_name().unwrap_or_default();
    let is_rt_budget = name == "cpu.rt_runtime_us" || name == "cpu.rt.max";
    let transient = |e: Option<i32>| e == Some(libc::EINVAL) || (name == "cpu.rt.max" && e == Some(libc::EBUSY));
    let settle = if name == "cpu.rt.max" { HCBS_BUDGET_SETTLE } else { RT_BUDGET_SETTLE };
    let started = std::time::Instant::now();
    let dying = || wait_for_dying && name == "cpu.rt.max" && started.elapsed() < HCBS_DYING_SETTLE && path.parent().is_some_and(dying_below);
    loop {
        match fsio::write(path, value) {
            Err(HostError::Write { source, .. })
                if is_rt_budget && transient(source.raw_os_error()) && (started.elapsed() < settle || dying()) =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dying_group_below_is_read_from_cgroup_stat() {
        let d = tempfile::tempdir().unwrap();
        assert!(!dying_below(d.path()), "no cgroup.stat: nothing known to be dying");
        std::fs::write(d.path().join("cgroup.stat"), "nr_descendants 3\nnr_dying_descendants 2\n").unwrap();
        assert!(dying_below(d.path()));
        std::fs::write(d.path().join("cgroup.stat"), "nr_descendants 3\nnr_dying_descendants 0\n").unwrap();
        assert!(!dying_below(d.path()));
    }

    #[test]
    fn values_compare_like_the_kernel_prints_them() {
        assert!(same_value("0-1\n", "0,1"));
        assert!(same_value("950000", "950000"));
        assert!(!same_value("1", "0"));
        assert!(!same_value("max 100000", "50000 100000"));
    }

    #[test]
    fn rollback_restores_files_in_a_temp_tree_and_injected_faults_stop_the_run() {
        // File logic only (no kernel): a temp dir stands in for a cgroup2 tree.
        let root = tempfile::tempdir().unwrap();
        let state_dir = tempfile::tempdir().unwrap();
        let sd = StateDir::new(state_dir.path());
        let knob = root.path().join("cpu.weight");
        std::fs::write(&knob, "100\n").unwrap();
        let procs = root.path().join("cgroup.procs");
        std::fs::write(&procs, "").unwrap();
        let mut state = State::new();
        {
            let mut txn = Txn::begin(&sd, &mut state, Fault { fail_change: Some(2) });
            txn.write(&knob, "50").unwrap();
            txn.mkdir(&root.path().join("child"), &procs).unwrap();
            assert!(txn.write(&knob, "10").is_err(), "change #2 is the injected fault");
            assert_eq!(std::fs::read_to_string(&knob).unwrap(), "50");
            let errors = txn.rollback();
            assert!(errors.is_empty(), "{errors:?}");
        }
        assert_eq!(std::fs::read_to_string(&knob).unwrap().trim(), "100");
        assert!(!root.path().join("child").exists());
        assert!(state.changes.is_empty());
        assert!(sd.load().unwrap().unwrap().changes.is_empty(), "the saved journal is empty too");
    }

    /// A deadline thread whose restore the kernel refuses keeps the partition it runs in: undo
    /// keeps the cpuset change journaled, says why, and undoes it on the next run once the thread
    /// is gone. The refusal is real: on a kernel with RT-group scheduling, a thread in a cpu group
    /// with no RT runtime cannot be given back SCHED_FIFO (EPERM), while SCHED_DEADLINE, admitted
    /// against the root domain, is allowed there. The partition knob is a temp file (file logic).
    #[test]
    fn a_deadline_thread_that_could_not_be_restored_keeps_its_partition() {
        rtslice_testkit::root_or_skip!();
        let Some(cpu_mount) = rtslice_testkit::cgroup_mount(&["cpu"]) else {
            eprintln!("skipped: no cgroup filesystem is mounted");
            return;
        };
        if !cpu_mount.join("cpu.rt_runtime_us").exists() {
            // The test needs a restore the kernel refuses on demand; without RT groups (cgroup v2,
            // or no CONFIG_RT_GROUP_SCHED: the qemu guests) SCHED_FIFO is always allowed back.
            eprintln!("skipped: no RT-group scheduling (cpu.rt_runtime_us) to make a restore fail on demand");
            return;
        }
        let _lock = rtslice_testkit::KernelLock::acquire();
        let group = rtslice_testkit::TempCgroup::new(&[cpu_mount], "undo-keeps");
        // A new group holds no RT runtime: SCHED_FIFO is refused inside it.
        assert_eq!(std::fs::read_to_string(group.dir().join("cpu.rt_runtime_us")).unwrap().trim(), "0");
        let child = rtslice_testkit::KillOnDrop(std::process::Command::new("sleep").arg("30").spawn().unwrap());
        let pid = child.0.id() as i32;
        group.enter(pid as u32);
        let dl = SchedAttr::Deadline { runtime_ns: 1_000_000, deadline_ns: 100_000_000, period_ns: 100_000_000, reclaim: false };
        sched::set_attr(pid, dl).unwrap();
        let root = tempfile::tempdir().unwrap();
        let knob = root.path().join("cpuset.cpu_exclusive");
        std::fs::write(&knob, "1\n").unwrap();
        let thread = ProcRef::of(pid).unwrap();
        let mut changes = vec![
            Change::Wrote { path: knob.clone(), old: "0".into(), new: "1".into() },
            Change::Sched { thread, old: SchedAttr::Fifo { priority: 1 }, new: dl },
        ];
        let errors = undo_all(&mut changes, 0, &mut Undo::default());
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[1].contains("kept") && errors[1].contains(&pid.to_string()), "{errors:?}");
        assert_eq!(std::fs::read_to_string(&knob).unwrap().trim(), "1", "the partition stays under the deadline thread");
        assert_eq!(changes.len(), 2, "both stay journaled for the next reset");
        assert!(matches!(sched::get_attr(pid), Ok(SchedAttr::Deadline { .. })));
        // A launch's threads hold no partition through the undo that stops it: the launch is stopped
        // (for real, SIGTERM) before any thread policy is restored, so its threads die under the
        // policies they run, their restore (refused here on demand) is never tried, and the cpuset
        // change is undone.
        let launched = rtslice_testkit::KillOnDrop(std::process::Command::new("sleep").arg("30").spawn().unwrap());
        let launched_pid = launched.0.id() as i32;
        group.enter(launched_pid as u32);
        sched::set_attr(launched_pid, dl).unwrap();
        let proc = ProcRef::of(launched_pid).unwrap();
        let other_knob = root.path().join("cpuset.cpus");
        std::fs::write(&other_knob, "1\n").unwrap();
        let mut same_run = vec![
            Change::Wrote { path: other_knob.clone(), old: "0-1".into(), new: "1".into() },
            Change::Launched { proc, what: "a test sleep".into(), procs_files: Vec::new() },
            Change::Sched { thread: proc, old: SchedAttr::Fifo { priority: 1 }, new: dl },
        ];
        let errors = undo_all(&mut same_run, 0, &mut Undo::default());
        assert!(errors.is_empty(), "{errors:?}");
        assert!(same_run.is_empty(), "{same_run:?}");
        assert!(!proc.alive());
        assert_eq!(std::fs::read_to_string(&other_knob).unwrap().trim(), "0-1", "the stopped thread holds nothing");
        drop(launched);
        // Once the thread has exited, the next run undoes both.
        drop(child);
        let errors = undo_all(&mut changes, 0, &mut Undo::default());
        assert!(errors.is_empty(), "{errors:?}");
        assert!(changes.is_empty());
        assert_eq!(std::fs::read_to_string(&knob).unwrap().trim(), "0");
        drop(group);
    }
}
