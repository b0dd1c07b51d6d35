//! Child processes in their own process group, so teardown reaches every process a tool forks
//! (stress-ng's stressors, rt-app's threads are in-process) and nothing outlives the guard.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rtslice_sys::process::{group_exists, signal_group, Signal};

use crate::NoiseError;

static SEQ: AtomicU64 = AtomicU64::new(0);

pub fn next_seq() -> u64 {
    SEQ.fetch_add(1, Ordering::Relaxed)
}

/// Fails with an install hint when `tool` is not on PATH (or in the sbin directories `ip` uses).
pub fn require(tool: &str, package: &str) -> Result<PathBuf, NoiseError> {
    find(tool).ok_or_else(|| NoiseError::MissingTool { tool: tool.to_string(), package: package.to_string() })
}

pub fn find(tool: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.is_file());
    found
}

pub struct Managed {
    what: String,
    child: Child,
    log: PathBuf,
    exited: Option<String>,
}

impl Managed {
    /// Starts `program args` in a new process group with output to a log in `workdir`.
    pub fn spawn(what: &str, program: &str, args: &[&str], workdir: &Path, stdin_null: Option<()>) -> Result<Managed, NoiseError> {
        let _ = stdin_null;
        let exe = find(program).ok_or_else(|| NoiseError::MissingTool { tool: program.into(), package: program.into() })?;
        let log = workdir.join(format!("{}-{}.log", program.replace('/', "_"), next_seq()));
        let out = File::create(&log).map_err(|e| NoiseError::Io(format!("cannot create {}: {e}", log.display())))?;
        let err = out.try_clone().map_err(|e| NoiseError::Io(e.to_string()))?;
        let child = Command::new(&exe)
            .args(args)
            .current_dir(workdir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| NoiseError::Command { what: format!("starting {what} ({})", exe.display()), detail: e.to_string() })?;
        Ok(Managed { what: what.to_string(), child, log, exited: None })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn running(&mut self) -> bool {
        self.exited.is_none() && matches!(self.child.try_wait(), Ok(None))
    }

    pub fn check(&mut self) -> Result<(), NoiseError> {
        if let Ok(Some(status)) = self.child.try_wait() {
            let output = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = output.lines().rev().take(15).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            self.exited = Some(status.to_string());
            return Err(NoiseError::Exited { what: self.what.clone(), status: status.to_string(), output: tail.join("\n") });
        }
        Ok(())
    }

    /// SIGTERM to the whole group, SIGKILL after 3 s, then reap.
    pub fn kill(&mut self) {
        let pgid = self.child.id();
        // The group may be gone already: nothing to signal then.
        let _ = signal_group(pgid, Signal::Terminate);
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(3) {
            if let Ok(Some(_)) = self.child.try_wait() {
                // The leader is gone; stragglers of the group get SIGKILL below.
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = signal_group(pgid, Signal::Kill);
        let _ = self.child.wait();
        // Wait until no member of the group is left (stress-ng children exit after the leader).
        let t = Instant::now();
        while group_exists(pgid) && t.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
