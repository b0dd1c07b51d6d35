//! Child processes of a run: each in its own process group (so a whole tree can be stopped, and a
//! terminal's Ctrl-C reaches only the runner, which then stops its children in order), with
//! stdout/stderr in files of the run's directory (no pipe can fill up and block a workload).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub use rtslice_sys::process::Signal;

pub struct Proc {
    pub name: String,
    pub argv: Vec<String>,
    child: Child,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    status: Option<ExitStatus>,
}

impl Proc {
    pub fn spawn(name: &str, argv: &[String], dir: &Path) -> Result<Proc, String> {
        let (prog, args) = argv.split_first().ok_or_else(|| format!("{name}: empty command"))?;
        let stdout = dir.join(format!("{name}.stdout"));
        let stderr = dir.join(format!("{name}.stderr"));
        let out = std::fs::File::create(&stdout).map_err(|e| format!("cannot create {}: {e}", stdout.display()))?;
        let err = std::fs::File::create(&stderr).map_err(|e| format!("cannot create {}: {e}", stderr.display()))?;
        use std::os::unix::process::CommandExt;
        let child = Command::new(prog)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| {
                let hint = if e.kind() == std::io::ErrorKind::NotFound {
                    format!(" (is `{prog}` installed? `make deps` installs the tools experiments use)")
                } else {
                    String::new()
                };
                format!("cannot start {name} (`{}`): {e}{hint}", argv.join(" "))
            })?;
        Ok(Proc { name: name.into(), argv: argv.to_vec(), child, stdout, stderr, status: None })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Exit status if it has exited (reaps it).
    pub fn poll(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Ok(Some(s)) = self.child.try_wait() {
                self.status = Some(s);
            }
        }
        self.status
    }

    pub fn wait_timeout(&mut self, limit: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + limit;
        loop {
            if let Some(s) = self.poll() {
                return Some(s);
            }
            if Instant::now() >= end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Signals the child's whole process group (a group already gone is not an error here).
    pub fn signal(&self, sig: Signal) {
        if self.status.is_none() {
            let _ = rtslice_sys::process::signal_group(self.child.id(), sig);
        }
    }

    /// SIGINT (tools print their summary and clean up), then SIGTERM, then SIGKILL.
    pub fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        if let Some(s) = self.poll() {
            return Some(s);
        }
        self.signal(Signal::Interrupt);
        // A process held stopped (a neighbour before apply) only sees signals once continued.
        self.signal(Signal::Continue);
        if let Some(s) = self.wait_timeout(grace) {
            return Some(s);
        }
        self.signal(Signal::Terminate);
        if let Some(s) = self.wait_timeout(Duration::from_secs(2)) {
            return Some(s);
        }
        self.signal(Signal::Kill);
        self.wait_timeout(Duration::from_secs(2)).or_else(|| self.release_stuck())
    }

    /// A killed child that is still there: release its SCHED_DEADLINE threads (one throttled for good
    /// keeps a dying process alive; `rtslice_sys::sched::release_deadline_threads`) and wait a little
    /// more. Never blocks for good.
    fn release_stuck(&mut self) -> Option<ExitStatus> {
        let n = rtslice_sys::sched::release_deadline_threads(self.child.id());
        if n > 0 {
            eprintln!(
                "rtslice bench: {} (pid {}) outlived SIGKILL; switched its {n} SCHED_DEADLINE thread(s) to SCHED_OTHER so it can exit",
                self.name,
                self.child.id()
            );
        }
        self.wait_timeout(Duration::from_secs(5))
    }

    pub fn stdout_text(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The last `n` non-empty lines of stderr, for error messages.
    pub fn stderr_tail(&self, n: usize) -> String {
        let s = self.stderr_text();
        let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    pub fn describe_exit(&self) -> String {
        match self.status {
            Some(s) => match s.code() {
                Some(c) => format!("exit code {c}"),
                None => {
                    use std::os::unix::process::ExitStatusExt;
                    format!("signal {}", s.signal().unwrap_or(0))
                }
            },
            None => "still running".into(),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Never leave a workload or an interference generator behind.
        if self.poll().is_none() {
            self.signal(Signal::Kill);
            if self.wait_timeout(Duration::from_secs(2)).or_else(|| self.release_stuck()).is_none() {
                eprintln!("rtslice bench: {} (pid {}) is still alive after SIGKILL; left behind", self.name, self.child.id());
            }
        }
    }
}

/// Runs a command to completion with a time limit; Ok(stdout) on exit 0, Err(what happened).
pub fn run_to_end(name: &str, argv: &[String], dir: &Path, limit: Duration) -> Result<String, String> {
    let mut p = Proc::spawn(name, argv, dir)?;
    match p.wait_timeout(limit) {
        Some(s) if s.success() => Ok(p.stdout_text()),
        Some(_) => Err(format!("`{}` failed ({}): {}", argv.join(" "), p.describe_exit(), p.stderr_tail(6))),
        None => {
            p.stop(Duration::from_secs(2));
            Err(format!("`{}` did not finish within {} s: {}", argv.join(" "), limit.as_secs(), p.stderr_tail(6)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_output_and_stops_trees() {
        let dir = tempfile::tempdir().unwrap();
        let out = run_to_end("echo", &["sh".into(), "-c".into(), "echo hi; echo oops >&2".into()], dir.path(), Duration::from_secs(5)).unwrap();
        assert_eq!(out, "hi\n");
        let err = run_to_end("fail", &["sh".into(), "-c".into(), "echo bad >&2; exit 3".into()], dir.path(), Duration::from_secs(5)).unwrap_err();
        assert!(err.contains("exit code 3") && err.contains("bad"), "{err}");
        // A shell with a child: stopping the group ends both.
        let mut p = Proc::spawn("tree", &["sh".into(), "-c".into(), "sleep 30 & wait".into()], dir.path()).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let t0 = Instant::now();
        assert!(p.stop(Duration::from_secs(1)).is_some());
        assert!(t0.elapsed() < Duration::from_secs(4));
        let missing = Proc::spawn("nope", &["/nonexistent/tool".into()], dir.path()).err().unwrap();
        assert!(missing.contains("installed"), "{missing}");
    }
}
