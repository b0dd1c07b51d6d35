//! Other processes: who we are (root?), signals to whole process groups (tools such as stress-ng
//! and rt-app fork workers that must die with their leader), and whether a group still has members.

use rustix::process::{Pid, Signal as RawSignal};

use crate::error::{Result, SysError};

/// True when running with effective uid 0 (namespaces, reservations and BPF need it).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The signals rtslice sends to the tools it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT: tools print their summary and clean up.
    Interrupt,
    /// SIGTERM: please exit.
    Terminate,
    /// SIGKILL: exit now.
    Kill,
    /// SIGCONT: resume a stopped process (it sees other signals only once continued).
    Continue,
}

impl Signal {
    fn raw(self) -> RawSignal {
        match self {
            Signal::Interrupt => RawSignal::INT,
            Signal::Terminate => RawSignal::TERM,
            Signal::Kill => RawSignal::KILL,
            Signal::Continue => RawSignal::CONT,
        }
    }
}

fn pid(pgid: u32) -> Result<Pid> {
    i32::try_from(pgid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| SysError::Invalid(format!("{pgid} is not a process group id")))
}

/// Sends `signal` to every member of process group `pgid` (kill(-pgid)). A group with no member
/// left is an error the caller may ignore (ESRCH).
pub fn signal_group(pgid: u32, signal: Signal) -> Result<()> {
    let pid = pid(pgid)?;
    rustix::process::kill_process_group(pid, signal.raw())
        .map_err(|e| SysError::call(format!("kill(-{pgid}, {signal:?})"))(e.into()))
}

/// True while process group `pgid` has at least one member (kill(-pgid, 0)).
pub fn group_exists(pgid: u32) -> bool {
    pid(pgid).is_ok_and(|p| rustix::process::test_kill_process_group(p).is_ok())
}

/// This process's (soft, hard) limits on open files and on processes, as `--ulimit` values for a
/// container runtime: a container given limits above the caller's hard limits fails to start where
/// the caller lacks CAP_SYS_RESOURCE (podman's defaults are 1,048,576 files and 4,194,304 processes).
/// `None` for unlimited. The process limit is capped at the kernel's `pid_max`: podman's conmon
/// runs with that as its hard limit (measured: 32,768 here, and any container asking more than its
/// monitor's limit fails with EPERM).
pub fn file_and_process_limits() -> [(Option<u64>, Option<u64>); 2] {
    use rustix::process::{getrlimit, Resource};
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max").ok().and_then(|s| s.trim().parse::<u64>().ok());
    let cap = |v: Option<u64>| match (v, pid_max) {
        (Some(v), Some(m)) => Some(v.min(m)),
        (None, m) => m,
        (v, None) => v,
    };
    let (files, procs) = (getrlimit(Resource::Nofile), getrlimit(Resource::Nproc));
    [(files.current, files.maximum), (cap(procs.current), cap(procs.maximum))]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    #[test]
    fn signals_a_whole_group() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30; wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = child.id();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(group_exists(pgid));
        signal_group(pgid, Signal::Kill).unwrap();
        child.wait().unwrap();
        let t = std::time::Instant::now();
        while group_exists(pgid) && t.elapsed().as_secs() < 5 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(!group_exists(pgid), "the background sleep of the group survived SIGKILL to the group");
        assert!(signal_group(pgid, Signal::Terminate).is_err());
        assert!(matches!(signal_group(0, Signal::Kill), Err(SysError::Invalid(_))));
    }

    #[test]
    fn root_matches_proc() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let euid = status.lines().find(|l| l.starts_with("Uid:")).unwrap().split_whitespace().nth(2).unwrap();
        assert_eq!(is_root(), euid == "0");
    }
}
