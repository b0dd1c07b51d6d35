//! A process identity that survives PID reuse ([`ProcRef`]: pid + start time), the members of a
//! session, stopping processes the way a service manager does, launching a child in its own session,
//! and signalling an identified process or its whole group.
//!
//! What /proc says about a process or thread (start time, state, names, threads, flags, cgroups) is
//! read by [`crate::procfs`]; signals, waits and the session set-up go through rustix.

use std::ffi::CString;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitOptions};
use serde::{Deserialize, Serialize};

use crate::procfs::process_stat;

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
        process_stat(pid).map(|s| ProcRef { pid, start: s.starttime })
    }

    /// The same process still runs (PID not reused) a thread that has not exited: its leader is no
    /// zombie, or it is one whose other threads still run. A leader that ended first (a SIGKILL reaches
    /// the threads one by one, and those in a throttled group's budget end late) shows `Z` while
    /// its threads still run in its cgroups, and its parent cannot reap it until they end: counted
    /// as gone, it was dropped from a stop unreaped, and the zombie kept its HCBS group's budget
    /// until the parent exited.
    pub fn alive(&self) -> bool {
        process_stat(self.pid).is_some_and(|s| s.starttime == self.start && runs(&s))
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

/// A process has a thread that has not exited: not a zombie, or a zombie leader whose thread count
/// (the threads not yet released, itself included) says others remain.
fn runs(s: &procfs::process::Stat) -> bool {
    !matches!(s.state, 'Z' | 'X') || s.num_threads > 1
}

/// What [`stop_gracefully`] did: how many processes left on SIGTERM within the grace period, how
/// many needed SIGKILL, and which (if any) still exist after that (stuck in the kernel, e.g. in
/// uninterruptible sleep on a dead NFS server).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopReport {
    pub terminated: usize,
    pub killed: usize,
    pub left: Vec<ProcRef>,
}

/// Every live process of the session `leader` leads (rtslice launches workloads as session leaders,
/// so this is everything they started that did not start a session of its own), and of its process
/// group, leader included. Processes started before the leader are not its descendants: a reused
/// session id is never matched.
pub fn session_members(leader: &ProcRef) -> Vec<ProcRef> {
    let mut out = Vec::new();
    let Ok(all) = procfs::process::all_processes() else { return out };
    for p in all.flatten() {
        let Ok(s) = p.stat() else { continue };
        if (s.session == leader.pid || s.pgrp == leader.pid) && s.starttime >= leader.start && runs(&s) {
            out.push(ProcRef { pid: s.pid, start: s.starttime });
        }
    }
    out
}

/// Stops processes the way a service manager does: SIGTERM to every session led by one of `leaders`
/// (their whole process groups and sessions) and to every process of `others`, up to `grace` for them
/// to shut down, then SIGKILL to whatever is left, and waits up to `kill_wait` until every one of them
/// is gone (zombie children of this process are reaped). Processes that appear meanwhile in a
/// leader's session (a shutdown hook that forks) are waited for too. Only identities still alive are
/// signalled, so reused PIDs are never hit.
pub fn stop_gracefully(leaders: &[ProcRef], others: &[ProcRef], grace: Duration, kill_wait: Duration) -> StopReport {
    let members = || {
        let mut v: Vec<ProcRef> = leaders.iter().flat_map(session_members).chain(others.iter().copied()).collect();
        v.extend(leaders.iter().copied());
        v.sort_unstable_by_key(|p| (p.pid, p.start));
        v.dedup();
        // Alive first, then reaped if not: a child that exits between a reap and the check would
        // otherwise leave the list as a zombie nobody reaps.
        v.retain(|p| {
            let alive = p.alive();
            if !alive {
                p.reap();
            }
            alive
        });
        v
    };
    let signal = |procs: &[ProcRef], sig: Signal| {
        for l in leaders.iter().filter(|l| l.alive()) {
            if let Some(pid) = l.pid_arg() {
                // ESRCH (the group is already empty) is the outcome wanted.
                let _ = rustix::process::kill_process_group(pid, sig);
            }
        }
        for p in procs.iter().filter(|p| p.alive()) {
            if let Some(pid) = p.pid_arg() {
                let _ = rustix::process::kill_process(pid, sig);
            }
        }
    };
    let mut report = StopReport::default();
    let mut seen: Vec<ProcRef> = members();
    if seen.is_empty() {
        return report;
    }
    signal(&seen, Signal::TERM);
    let deadline = Instant::now() + grace;
    let mut alive = seen.clone();
    while !alive.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        let now = members();
        // A process forked during shutdown (a shutdown hook) is part of it: it is waited for, not
        // signalled, as systemd does.
        seen.extend(now.iter().filter(|p| !seen.contains(p)).copied().collect::<Vec<_>>());
        alive = now;
    }
    report.terminated = seen.len() - alive.len();
    if alive.is_empty() {
        return report;
    }
    report.killed = alive.len();
    signal(&alive, Signal::KILL);
    let mut deadline = Instant::now() + kill_wait;
    let mut released = false;
    loop {
        let now = members();
        let new: Vec<ProcRef> = now.iter().filter(|p| !seen.contains(p)).copied().collect();
        if !new.is_empty() {
            report.killed += new.len();
            signal(&new, Signal::KILL);
            seen.extend(new);
        }
        if !now.is_empty() && Instant::now() >= deadline && !released {
            // Killed and still there: a SCHED_DEADLINE thread throttled for good keeps a dying
            // process alive (crate::sched::release_deadline_threads); once in SCHED_OTHER it exits.
            released = true;
            if now.iter().map(|p| crate::sched::release_deadline_threads(p.pid as u32)).sum::<usize>() > 0 {
                deadline = Instant::now() + kill_wait;
            }
        }
        if now.is_empty() || Instant::now() >= deadline {
            report.left = now;
            return report;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
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
    // A confined parent (a daemon kept on housekeeping CPUs) hands its children the affinity it had
    // before, as if they had inherited it; the cgroups joined below narrow it further (a cpuset).
    let affinity = crate::sched::spawn_affinity().map(|cpus| crate::sched::cpu_set(cpus.iter().copied()));
    // SAFETY: the closure runs between fork and exec in the child; it only makes raw system calls
    // (sched_setaffinity, setsid, open, write, close through rustix's direct syscalls), which are
    // async-signal-safe, and allocates nothing (the CStrings and the CPU set were built before the fork).
    unsafe {
        cmd.pre_exec(move || {
            if let Some(set) = &affinity {
                rustix::thread::sched_setaffinity(None, set)?;
            }
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
    use crate::procfs::{cgroup_membership, comm, is_kernel_thread, process_comm, tasks};

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
                tx.send(crate::thread::gettid()).unwrap();
                let _ = stop_rx.recv();
            })
            .unwrap();
        let tid = rx.recv().unwrap();
        let tids = tasks(me as u32);
        assert!(tids.contains(&(me as u32)) && tids.contains(&(tid as u32)), "{tids:?}");
        assert_eq!(comm(me as u32, tid as u32).as_deref(), Some("proc-ref-probe"));
        assert!(ProcRef::of(tid).is_some(), "a thread id is an identity too");
        assert!(!is_kernel_thread(me));
        assert!(cgroup_membership(me).is_some_and(|t| t.lines().all(|l| l.splitn(3, ':').count() == 3)));
        stop_tx.send(()).unwrap();
        t.join().unwrap();
        assert!(tasks(i32::MAX as u32).is_empty());
        assert!(is_kernel_thread(2) || process_comm(2).is_none(), "pid 2 is kthreadd when this is a full system");
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
        let (mut child, me) = spawn_in_session(&mut cmd, std::slice::from_ref(&file)).unwrap();
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

    fn spawn_sh(script: &str) -> (Child, ProcRef) {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]);
        spawn_in_session(&mut cmd, &[]).unwrap()
    }

    /// Waits until the session has `n` live members and its `sleep` runs: a signal that reached a
    /// forked shell before it reset its traps and exec'd would be lost, and the test would measure
    /// that race instead of the stop.
    fn wait_members(leader: &ProcRef, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(5);
        let ready = || {
            let m = session_members(leader);
            m.len() >= n && m.iter().any(|p| process_comm(p.pid).as_deref() == Some("sleep"))
        };
        while !ready() {
            assert!(Instant::now() < deadline, "session never reached {n} members");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_workload_that_traps_sigterm_gets_its_grace_period() {
        // The shell traps TERM, lets its child finish a 1 s shutdown, then exits: no SIGKILL needed.
        let (mut child, me) =
            spawn_sh("trap 'sleep 1; exit 0' TERM; sleep 60 & while :; do wait; done");
        wait_members(&me, 2);
        let members = session_members(&me);
        let started = Instant::now();
        let r = stop_gracefully(&[me], &[], Duration::from_secs(5), Duration::from_secs(5));
        let took = started.elapsed();
        assert!(r.left.is_empty(), "{r:?}");
        assert_eq!(r.killed, 0, "everything left on SIGTERM: {r:?}");
        assert!(r.terminated >= 2, "{r:?}");
        assert!(took >= Duration::from_millis(900), "the shutdown's 1 s was waited for: {took:?}");
        assert!(members.iter().all(|p| !p.alive()), "every member is gone when it returns");
        let _ = child.wait();
    }

    #[test]
    fn a_workload_that_ignores_sigterm_is_killed_after_the_grace_period() {
        let (mut child, me) = spawn_sh("trap '' TERM; sh -c \"trap '' TERM; sleep 60\" & while :; do wait; done");
        wait_members(&me, 3);
        let members = session_members(&me);
        let started = Instant::now();
        let r = stop_gracefully(&[me], &[], Duration::from_millis(500), Duration::from_secs(5));
        let took = started.elapsed();
        assert!(r.left.is_empty(), "{r:?}");
        assert!(r.killed >= 2, "the shells ignored SIGTERM and needed SIGKILL: {r:?}");
        assert!(took >= Duration::from_millis(500), "the grace period was given: {took:?}");
        assert!(members.iter().all(|p| !p.alive()), "every member is gone when it returns");
        let _ = child.wait();
        assert_eq!(stop_gracefully(&[me], &[], Duration::from_secs(1), Duration::from_secs(1)), StopReport::default());
    }

    /// A process whose main thread has ended while another still runs and ignores SIGTERM: the
    /// leader shows `Z` and cannot be reaped until that thread ends. (ctypes drops the GIL around
    /// the call, so the sleeping thread is not left waiting for it.)
    fn spawn_zombie_leader() -> (Child, ProcRef) {
        let mut cmd = Command::new("python3");
        cmd.args([
            "-c",
            "import ctypes, signal, threading, time\n\
             signal.signal(signal.SIGTERM, signal.SIG_IGN)\n\
             threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n\
             ctypes.CDLL(None).pthread_exit(None)\n",
        ]);
        // Not the test's output: a helper left by a failed assertion would hold libtest's pipe open.
        cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
        let (child, me) = spawn_in_session(&mut cmd, &[]).expect("python3 (make deps installs it)");
        // Until the leader has ended: python3's start-up is slow on a loaded host, so no time bound
        // but the child's own exit.
        loop {
            let s = process_stat(me.pid).expect("the helper exited instead of ending only its main thread");
            if s.state == 'Z' {
                assert!(s.num_threads > 1, "the sleeping thread runs on: {s:?}");
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        (child, me)
    }

    /// A failed assertion leaves no helper running.
    struct KillOnDrop(ProcRef);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            self.0.kill(false);
        }
    }

    #[test]
    fn a_process_whose_leader_ended_first_is_stopped_and_reaped() {
        let (mut child, me) = spawn_zombie_leader();
        let _gone = KillOnDrop(me);
        assert!(me.alive(), "a zombie leader whose thread still runs is a running process");
        assert_eq!(session_members(&me), vec![me], "and a member of its session");
        let r = stop_gracefully(&[me], &[], Duration::from_millis(200), Duration::from_secs(30));
        assert_eq!((r.terminated, r.killed, r.left.as_slice()), (0, 1, &[][..]), "SIGTERM is ignored, SIGKILL ends it: {r:?}");
        assert!(process_stat(me.pid).is_none_or(|s| s.starttime != me.start), "stopped and reaped: no zombie left");
        assert!(child.try_wait().is_err(), "already reaped (ECHILD)");
    }

    #[test]
    fn kill_and_wait_reaps_a_process_whose_leader_ended_first() {
        let (mut child, me) = spawn_zombie_leader();
        let _gone = KillOnDrop(me);
        assert!(me.kill_and_wait(true, Duration::from_secs(30)), "gone after SIGKILL");
        assert!(process_stat(me.pid).is_none_or(|s| s.starttime != me.start), "reaped: no zombie left");
        assert!(child.try_wait().is_err(), "already reaped (ECHILD)");
    }
}
