//! A process identity that survives PID reuse ([`ProcRef`]: pid + start time), what /proc says about
//! a process or thread (start time, state, name, threads, kernel-thread flag, cgroups), launching a
//! child in its own session, and signalling an identified process or its whole group.
//!
//! /proc/PID/stat is read with the `procfs` crate (the comm field may hold spaces and parentheses);
//! signals, waits and the session set-up go through rustix.

use std::ffi::CString;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitOptions};
use serde::{Deserialize, Serialize};

/// A process (or thread, given its tid) identified by its PID plus its start time in clock ticks since
/// boot: a PID reused by another process later has another start time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcRef {
    pub pid: i32,
    pub start: u64,
}

impl ProcRef {
    /// `None` if the process (or thread) does not exist.
    pub fn of(pid: i32) -> Option<ProcRef> {
        stat(pid).map(|s| ProcRef { pid, start: s.starttime })
    }

    /// The same process still runs (not exited, not a zombie, PID not reused).
    pub fn alive(&self) -> bool {
        stat(self.pid).is_some_and(|s| s.starttime == self.start && s.state != 'Z')
    }

    /// Sends SIGKILL to the process and, with `group`, first to its whole process group (rtslice
    /// launches workloads as session leaders, so the group is everything they started). A process that
    /// is no longer this identity is left alone.
    pub fn kill(&self, group: bool) {
        let Some(pid) = self.pid_arg() else { return };
        if !self.alive() {
            return;
        }
        if group {
            // ESRCH (the group is already empty) is the outcome wanted.
            let _ = rustix::process::kill_process_group(pid, Signal::KILL);
        }
        let _ = rustix::process::kill_process(pid, Signal::KILL);
    }

    /// Kills (see [`ProcRef::kill`]) and waits up to `timeout` until it is gone, reaping it if it is a
    /// child of this process. Returns whether it is gone.
    pub fn kill_and_wait(&self, group: bool, timeout: Duration) -> bool {
        if !self.alive() {
            self.reap();
            return true;
        }
        self.kill(group);
        let deadline = Instant::now() + timeout;
        while self.alive() && Instant::now() < deadline {
            self.reap();
            std::thread::sleep(Duration::from_millis(2));
        }
        self.reap();
        !self.alive()
    }

    /// Reaps it if it is a zombie child of this process; a no-op for anyone else's processes.
    pub fn reap(&self) {
        if let Some(pid) = self.pid_arg() {
            // WNOHANG never blocks; ECHILD for others' children is expected.
            let _ = rustix::process::waitpid(Some(pid), WaitOptions::NOHANG);
        }
    }

    fn pid_arg(&self) -> Option<Pid> {
        // 0 and negative values mean "my group" / "a group" to kill(2): never for an identity.
        if self.pid > 0 {
            Pid::from_raw(self.pid)
        } else {
            None
        }
    }
}

fn stat(pid: i32) -> Option<procfs::process::Stat> {
    if pid <= 0 {
        return None;
    }
    procfs::process::Process::new(pid).ok()?.stat().ok()
}

/// Thread ids of a process (from /proc/PID/task), ascending; empty when it is gone.
pub fn threads(pid: i32) -> Vec<i32> {
    let mut tids: Vec<i32> = match procfs::process::Process::new(pid).and_then(|p| p.tasks()) {
        Ok(tasks) => tasks.filter_map(|t| t.ok().map(|t| t.tid)).collect(),
        Err(_) => Vec::new(),
    };
    tids.sort_unstable();
    tids
}

/// A thread's name (/proc/PID/task/TID/comm), without the newline; `None` when it is gone.
pub fn thread_comm(pid: i32, tid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).ok().map(|s| s.trim_end().to_string())
}

/// A process's name (/proc/PID/comm), without the newline; `None` when it is gone.
pub fn comm(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|s| s.trim_end().to_string())
}

/// PIDs of every process whose name is `name` (like `pgrep -x`).
pub fn pids_named(name: &str) -> Vec<i32> {
    let mut pids: Vec<i32> = match procfs::process::all_processes() {
        Ok(all) => all.filter_map(|p| p.ok()).map(|p| p.pid()).filter(|&pid| comm(pid).as_deref() == Some(name)).collect(),
        Err(_) => Vec::new(),
    };
    pids.sort_unstable();
    pids
}

/// True for kernel threads (PF_KTHREAD in /proc/PID/stat flags), and for PIDs that are gone (nothing to
/// move either way).
pub fn is_kernel_thread(pid: i32) -> bool {
    const PF_KTHREAD: u32 = 0x0020_0000;
    stat(pid).map(|s| s.flags & PF_KTHREAD != 0).unwrap_or(true)
}

/// True for threads whose CPU affinity the kernel owns (PF_NO_SETAFFINITY in /proc/<tid>/stat's
/// flags: per-CPU kernel threads, workqueue rescuers); sched_setaffinity refuses them.
pub fn no_setaffinity(tid: i32) -> bool {
    const PF_NO_SETAFFINITY: u32 = 0x0400_0000;
    stat(tid).is_some_and(|s| s.flags & PF_NO_SETAFFINITY != 0)
}

/// The text of /proc/PID/cgroup (`hierarchy-id:controllers:path` lines); `None` when it is gone.
pub fn cgroup_membership(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()
}

/// Spawns `cmd` as the leader of a new session (so it outlives our terminal and its whole process
/// group can be signalled), after writing "0" into each of `join_procs` (cgroup.procs files) so the
/// child — and every thread it ever creates — starts inside those cgroups. Returns the child and its
/// identity.
pub fn spawn_in_session(cmd: &mut Command, join_procs: &[PathBuf]) -> io::Result<(Child, ProcRef)> {
    // Paths are converted before fork: between fork and exec nothing may allocate.
    let files: Vec<CString> = join_procs
        .iter()
        .map(|p| CString::new(p.as_os_str().as_encoded_bytes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e)))
        .collect::<io::Result<_>>()?;
    // SAFETY: the closure runs between fork and exec in the child; it only makes raw system calls
    // (setsid, open, write, close through rustix's direct syscalls), which are async-signal-safe, and
    // allocates nothing (the CStrings were built before the fork).
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::setsid()?;
            for f in &files {
                let fd = rustix::fs::open(f.as_c_str(), rustix::fs::OFlags::WRONLY, rustix::fs::Mode::empty())?;
                if rustix::io::write(&fd, b"0")? != 1 {
                    return Err(io::Error::from_raw_os_error(libc::EIO));
                }
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    let me = ProcRef::of(child.id() as i32)
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "the child exited at once"))?;
    Ok((child, me))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_detects_reuse() {
        let me = ProcRef::of(std::process::id() as i32).unwrap();
        assert!(me.alive());
        assert!(!ProcRef { start: me.start + 1, ..me }.alive());
        assert!(ProcRef::of(0).is_none() && ProcRef::of(-1).is_none());
    }

    #[test]
    fn threads_and_names_of_this_process() {
        let me = std::process::id() as i32;
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::Builder::new()
            .name("proc-ref-probe".into())
            .spawn(move || {
                tx.send(crate::sched::gettid()).unwrap();
                let _ = stop_rx.recv();
            })
            .unwrap();
        let tid = rx.recv().unwrap();
        let tids = threads(me);
        assert!(tids.contains(&me) && tids.contains(&tid), "{tids:?}");
        assert_eq!(thread_comm(me, tid).as_deref(), Some("proc-ref-probe"));
        assert!(ProcRef::of(tid).is_some(), "a thread id is an identity too");
        assert!(!is_kernel_thread(me));
        assert!(cgroup_membership(me).is_some_and(|t| t.lines().all(|l| l.splitn(3, ':').count() == 3)));
        stop_tx.send(()).unwrap();
        t.join().unwrap();
        assert!(threads(i32::MAX).is_empty());
        assert!(is_kernel_thread(2) || comm(2).is_none(), "pid 2 is kthreadd when this is a full system");
    }

    #[test]
    fn a_session_child_joins_files_and_dies_with_its_group() {
        let dir = std::env::temp_dir().join(format!("rtslice-sys-spawn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("procs");
        std::fs::write(&file, "").unwrap();
        // `sh` starts a grandchild in the same group; killing the group must take both.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 30 & wait"]);
        let (mut child, me) = spawn_in_session(&mut cmd, &[file.clone()]).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "0", "the child wrote its join before exec");
        assert!(me.alive());
        assert!(me.kill_and_wait(true, Duration::from_secs(5)));
        let _ = child.wait();
        assert!(!me.alive());
        let _ = std::fs::remove_dir_all(&dir);
        let mut bad = Command::new("true");
        let e = spawn_in_session(&mut bad, &[dir.join("missing/procs")]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    }
}
