//! What the daemon's end-to-end tests (node_cli.rs) and the live-operations benchmark
//! (benches/live_operations.rs) share: the CLI run against a daemon's socket, the kernel's view of
//! a running workload, and the report channel's counters.
#![allow(dead_code)] // the test and the bench each use a part

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

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

/// The vBS both drive: OAI LTE on a 1.4 MHz carrier (6 PRBs) with one PRB scheduled, the lightest
/// real configuration, on CPU 1.
pub const EMU: [&str; 8] = ["--profile", "oai-lte", "--prb", "6", "--traffic", "17%", "--cpus", "1"];

/// A daemon (`--mechanism rt_group --reset-on-exit`, CPU 0 as housekeeping) with three emulated
/// vBS `du1`-`du3` deployed on CPU 1, as the live-operations test and benchmark start it. Dropped,
/// it stops the daemon (SIGTERM) and then resets what a killed one would have left.
pub struct LiveNode {
    pub child: Child,
    pub socket: PathBuf,
    tag: u32,
    stop: Option<OnDrop<Box<dyn FnOnce()>>>,
    _reset: OnDrop<Box<dyn FnOnce()>>,
}

impl LiveNode {
    /// A workload's name on this node (`vbs<pid>-<n>`).
    pub fn full(&self, n: &str) -> String {
        format!("vbs{}-{n}", self.tag)
    }

    /// One vBS's entry in a spec, under `runtime_us` every `period_us`.
    pub fn vbs(&self, n: &str, runtime_us: u64, period_us: u64) -> String {
        format!(
            "  - name: {}\n    launch:\n      command: [{}, emulate, {}, --duration, 30m, --quiet]\n    demand: {{ reservation: {{ runtime: {runtime_us}us, period: {period_us}us, count: 1 }} }}\n",
            self.full(n),
            bin(),
            EMU[..6].join(", ")
        )
    }

    /// SIGTERM: `--reset-on-exit` stops every emulator and undoes the node; the daemon exits 0.
    /// Once: after the wait the pid may belong to another process.
    pub fn stop(mut self) {
        drop(self.stop.take());
        assert!(self.child.wait().unwrap().success(), "the daemon exits 0 on SIGTERM");
    }
}

/// Starts the daemon in `dir` and deploys du1-du3 under `runtime_us` every `period_us`; returns once
/// each reports TTIs. Checks on the way that the daemon's own threads stay on CPU 0 and each vBS
/// runs where its cpuset says (CPU 1), though the daemon that spawned it is confined to CPU 0.
pub fn start_three_vbs(dir: &Path, runtime_us: u64, period_us: u64) -> LiveNode {
    let state = dir.join("state");
    let socket = dir.join("api.sock");
    let reset = reset_node(state.clone());
    let node = write(dir, "node.yaml", "apiVersion: rtslice/v1\nnode:\n  housekeeping: 0\nworkloads: []\n");
    let child = Command::new(bin())
        .args(["daemon", "--mechanism", "rt_group", "--reset-on-exit", "--grace", "2", "--no-trace", "--node"])
        .arg(&node)
        .arg("--state-dir")
        .arg(&state)
        .arg("--socket")
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("daemon.log")).unwrap())
        .spawn()
        .unwrap();
    let stop = term(child.id());
    let live = LiveNode {
        tag: std::process::id(),
        socket,
        stop: Some(OnDrop::new(Box::new(move || drop(stop)) as Box<dyn FnOnce()>)),
        _reset: OnDrop::new(Box::new(move || drop(reset)) as Box<dyn FnOnce()>),
        child,
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::os::unix::net::UnixStream::connect(&live.socket).is_err() {
        assert!(std::time::Instant::now() < deadline, "the daemon did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The daemon's own threads (API, telemetry, agent) stay on the housekeeping CPU, off CPU 1.
    for tid in rtslice_sys::procfs::tasks(live.child.id()) {
        assert_eq!(rtslice_sys::sched::get_affinity(tid as i32).unwrap(), vec![0], "daemon thread {tid} runs on housekeeping CPU 0 only");
    }
    let spec = format!("apiVersion: rtslice/v1\nworkloads:\n{}{}{}", live.vbs("du1", runtime_us, period_us), live.vbs("du2", runtime_us, period_us), live.vbs("du3", runtime_us, period_us));
    let o = rtslice(&live.socket, &["deploy", "-"], Some(&spec));
    assert_eq!(o.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    for n in ["du1", "du2", "du3"] {
        let cpus = std::fs::read_to_string(format!("/sys/fs/cgroup/cpuset/rtslice/{}/cpuset.cpus", live.full(n))).unwrap();
        assert_eq!(cpus.trim(), "1", "{n} shares CPU 1 (CPU 0 is housekeeping)");
        let pid = std::fs::read_to_string(format!("/sys/fs/cgroup/cpuset/rtslice/{}/cgroup.procs", live.full(n))).unwrap();
        let pid: i32 = pid.lines().next().and_then(|l| l.trim().parse().ok()).expect("the vBS runs");
        assert_eq!(rtslice_sys::sched::get_affinity(pid).unwrap(), vec![1], "{n}'s process runs on its cpuset's CPU 1");
    }
    // The emulators calibrate for a few seconds, then report once a second.
    let t0 = std::time::Instant::now();
    while !["du1", "du2", "du3"].iter().all(|n| sli_counters(&live.socket).get(&live.full(n)).is_some_and(|c| c.1 > 2000)) {
        assert!(t0.elapsed() < Duration::from_secs(90), "the emulators report TTIs in /metrics: {:?}", sli_counters(&live.socket));
        std::thread::sleep(Duration::from_millis(200));
    }
    live
}
