//! What the daemon's end-to-end tests (node_cli.rs) and the live-operations benchmark
//! (benches/live_operations.rs) share: the CLI run against a daemon's socket, the kernel's view of
//! a running workload, and the report channel's counters.
#![allow(dead_code)] // the test and the bench each use a part

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use rtslice_testkit::OnDrop;

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_rtslice")
}

pub fn rtslice(socket: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut c = Command::new(bin());
    c.args(args).env("RTSLICE_SOCKET", socket).stdout(Stdio::piped()).stderr(Stdio::piped());
    if stdin.is_some() {
        c.stdin(Stdio::piped());
    }
    let mut child = c.spawn().unwrap();
    if let Some(text) = stdin {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    }
    child.wait_with_output().unwrap()
}

pub fn write(dir: &Path, file: &str, text: &str) -> PathBuf {
    let p = dir.join(file);
    std::fs::write(&p, text).unwrap();
    p
}

/// SIGTERM to a daemon the test started when the guard drops, also when an assertion fails (a
/// `--reset-on-exit` daemon then undoes the node, and [`reset_node`] needs the state directory's
/// lock it holds).
pub fn term(pid: u32) -> OnDrop<impl FnOnce()> {
    OnDrop::new(move || {
        let _ = Command::new("kill").arg(pid.to_string()).status();
    })
}

/// Resets the node kept in `state` when the guard drops: what a killed daemon left applied.
pub fn reset_node(state: PathBuf) -> OnDrop<impl FnOnce()> {
    OnDrop::new(move || {
        if let Ok((node, _)) = rtslice_host::Node::open(rtslice_host::NodeOptions::with_state_dir(&state)) {
            let _ = node.reset();
        }
    })
}

/// One running workload as the kernel shows it: each process (pid, start time), its cgroup files
/// in the cpu and cpuset hierarchies (counters left out), and per thread (name, policy, RT
/// priority, allowed CPUs). Equal snapshots mean an operation on another workload did not touch it.
#[derive(Debug, PartialEq)]
pub struct Untouched {
    pub procs: Vec<(i32, u64)>,
    pub cgroup_files: std::collections::BTreeMap<String, String>,
    pub threads: Vec<(i32, String, u32, u32, String)>,
}

/// Fields of /proc/…/stat after the command name (field 3 is index 0).
pub fn stat_fields(path: &str) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(path).ok()?;
    Some(s[s.rfind(')')? + 2..].split_whitespace().map(String::from).collect())
}

pub fn untouched(name: &str) -> Untouched {
    let mut cgroup_files = std::collections::BTreeMap::new();
    let mut pids = Vec::new();
    for h in ["cpu", "cpuset"] {
        let dir = PathBuf::from(format!("/sys/fs/cgroup/{h}/rtslice/{name}"));
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        for f in rd.flatten() {
            let file = f.file_name().to_string_lossy().into_owned();
            // Counters move by themselves; the rest is configuration and membership.
            if file.contains("stat") || file.contains("pressure") || !f.path().is_file() {
                continue;
            }
            if let Ok(v) = std::fs::read_to_string(f.path()) {
                if h == "cpuset" && file == "cgroup.procs" {
                    pids = v.split_whitespace().filter_map(|p| p.parse::<i32>().ok()).collect();
                }
                cgroup_files.insert(format!("{h}/{file}"), v);
            }
        }
    }
    assert!(!pids.is_empty(), "{name} has processes in its cpuset cgroup: {cgroup_files:?}");
    pids.sort();
    let procs = pids.iter().map(|p| (*p, stat_fields(&format!("/proc/{p}/stat")).map_or(0, |f| f[19].parse().unwrap_or(0)))).collect();
    let mut threads = Vec::new();
    for p in &pids {
        for t in std::fs::read_dir(format!("/proc/{p}/task")).into_iter().flatten().flatten() {
            let tid: i32 = t.file_name().to_string_lossy().parse().unwrap_or(0);
            let base = format!("/proc/{p}/task/{tid}");
            let (Some(f), Ok(status)) = (stat_fields(&format!("{base}/stat")), std::fs::read_to_string(format!("{base}/status"))) else { continue };
            let comm = std::fs::read_to_string(format!("{base}/comm")).unwrap_or_default().trim().to_string();
            let allowed = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap_or("").trim().to_string();
            threads.push((tid, comm, f[38].parse().unwrap_or(99), f[37].parse().unwrap_or(999), allowed));
        }
    }
    threads.sort();
    Untouched { procs, cgroup_files, threads }
}

/// (deadline misses, TTIs) per workload from the daemon's `/metrics` (the report channel).
pub fn sli_counters(socket: &Path) -> std::collections::BTreeMap<String, (u64, u64)> {
    let out = Command::new("curl").args(["-s", "--unix-socket"]).arg(socket).arg("http://rtslice/metrics").output().expect("curl (make deps)");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut m: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for l in text.lines() {
        for (family, misses) in [("rtslice_deadline_misses_total{workload=\"", true), ("rtslice_ttis_total{workload=\"", false)] {
            let Some(rest) = l.strip_prefix(family) else { continue };
            let Some((w, v)) = rest.split_once("\"} ") else { continue };
            let v = v.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) as u64;
            let e = m.entry(w.to_string()).or_default();
            if misses {
                e.0 = v
            } else {
                e.1 = v
            }
        }
    }
    m
}
