//! `rtslice daemon` and its client subcommands as a user runs them: exit codes (0 ran, 1 pending or
//! refused, 2 invalid input, 3 no daemon), and SIGKILL of the daemon in the middle of deploys,
//! restarted each time: the workloads it admitted run once each, none orphaned, nothing drifted;
//! issue 12's live operations on three-four emulated vBS with the others' miss ratios compared
//! against counting noise; HTTPS on the TCP listener.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use rtslice_testkit::{root_or_skip, KernelLock};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_rtslice")
}

fn rtslice(socket: &Path, args: &[&str], stdin: Option<&str>) -> Output {
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

#[test]
fn without_a_daemon_the_clients_say_how_to_start_it() {
    let dir = tempfile::tempdir().unwrap();
    let o = rtslice(&dir.path().join("none.sock"), &["list"], None);
    assert_eq!(o.status.code(), Some(3));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.starts_with("rtslice: error: cannot reach the rtslice daemon") && err.contains("rtslice daemon"), "{err}");
    let o = rtslice(&dir.path().join("none.sock"), &["resize", "x"], None);
    assert_eq!(o.status.code(), Some(2), "nothing to resize is invalid input");
}

fn marker() -> String {
    format!("{}", 800_000 + std::process::id())
}

fn spec(ws: &[(&str, u64)]) -> String {
    let mut s = "apiVersion: rtslice/v1\nworkloads:\n".to_string();
    for (n, r) in ws {
        s.push_str(&format!(
            "  - name: cli{}-{n}\n    launch: {{ command: [sleep, \"{}\"] }}\n    demand: {{ reservation: {{ runtime: {r}ms, period: 1s }} }}\n    threads:\n      - {{ match: \"^sleep$\", policy: fifo, priority: 10 }}\n",
            std::process::id(),
            marker()
        ));
    }
    s
}

fn start(state: &Path, socket: &Path, reset_on_exit: bool) -> Child {
    let mut c = Command::new(bin());
    c.args(["daemon", "--grace", "1", "--state-dir"]).arg(state).arg("--socket").arg(socket);
    if reset_on_exit {
        c.arg("--reset-on-exit");
    }
    let child = c.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::os::unix::net::UnixStream::connect(socket).is_err() {
        assert!(std::time::Instant::now() < deadline, "the daemon did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn sleepers() -> Vec<i32> {
    let want = format!("sleep\0{}\0", marker());
    let mut v: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want.as_bytes()))
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z")))
        .collect();
    v.sort();
    v
}

/// SIGTERM to a daemon the test started, also when an assertion fails (a `--reset-on-exit` daemon
/// then undoes the node, and `Cleanup` needs the state directory's lock it holds).
struct Term(u32);

impl Drop for Term {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.to_string()).status();
    }
}

struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Ok((node, _)) = rtslice_host::Node::open(rtslice_host::NodeOptions::with_state_dir(&self.0)) {
            let _ = node.reset();
        }
    }
}

#[test]
fn deploy_resize_remove_and_kill_9_of_the_daemon() {
    root_or_skip!();
    if rtslice_host::doctor::online_cpus().len() < 2 || !rtslice_host::doctor().mechanisms.contains(&rtslice_host::Mechanism::RtGroup) {
        eprintln!("SKIPPED: needs 2 CPUs and RT groups");
        return;
    }
    let _lock = KernelLock::acquire();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let socket = dir.path().join("api.sock");
    let _cleanup = Cleanup(state.clone());
    let mut daemon = start(&state, &socket, false);
    let o = rtslice(&socket, &["deploy", "-"], Some(&spec(&[("a", 250), ("b", 250), ("c", 250)])));
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let o = rtslice(&socket, &["deploy", "-"], Some(&spec(&[("d", 300)])));
    assert_eq!(o.status.code(), Some(1), "pending: {}", String::from_utf8_lossy(&o.stdout));
    assert!(String::from_utf8_lossy(&o.stdout).contains("pending"));
    let name = |n: &str| format!("cli{}-{n}", std::process::id());
    let o = rtslice(&socket, &["resize", &name("a"), "--runtime", "950ms"], None);
    assert_eq!(o.status.code(), Some(1), "does not fit: {}", String::from_utf8_lossy(&o.stderr));
    let o = rtslice(&socket, &["remove", &name("b")], None);
    assert_eq!(o.status.code(), Some(0));
    let o = rtslice(&socket, &["get", &name("d")], None);
    assert_eq!(o.status.code(), Some(0), "d runs once b is gone: {}", String::from_utf8_lossy(&o.stdout));
    assert!(String::from_utf8_lossy(&o.stdout).contains("running"));
    let o = rtslice(&socket, &["deploy", "-"], Some("apiVersion: rtslice/v1\nworkloads:\n  - name: x\n    demnad: {}\n"));
    assert_eq!(o.status.code(), Some(2));
    // SIGKILL the daemon while it deploys and removes, at spread points; restart it each time.
    for round in 0..8u64 {
        let batch: Vec<(String, u64)> = (0..3).map(|i| (format!("k{round}x{i}"), 50)).collect();
        let names: Vec<(&str, u64)> = batch.iter().map(|(n, r)| (n.as_str(), *r)).collect();
        let mut client = Command::new(bin())
            .args(["deploy", "-"])
            .env("RTSLICE_SOCKET", &socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            client.stdin.take().unwrap().write_all(spec(&names).as_bytes()).unwrap();
        }
        std::thread::sleep(Duration::from_millis(40 + 53 * round));
        daemon.kill().unwrap(); // SIGKILL
        daemon.wait().unwrap();
        let _ = client.wait();
        daemon = start(&state, &socket, false);
        let o = rtslice(&socket, &["list", "--json"], None);
        let list: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let mut recorded: Vec<i32> = Vec::new();
        for w in list["workloads"].as_array().unwrap() {
            if w["phase"] == "running" {
                assert_eq!(w["drift"].as_array().map_or(0, |d| d.len()), 0, "round {round}: {w}");
                let pids: Vec<i32> = w["pids"].as_array().unwrap().iter().map(|p| p.as_i64().unwrap() as i32).collect();
                assert_eq!(pids.len(), 1, "round {round}: {w}");
                recorded.extend(pids);
            }
        }
        recorded.sort();
        assert_eq!(sleepers(), recorded, "round {round}: every launched process belongs to exactly one running workload");
        // Make room for the next round.
        for (n, _) in &batch {
            let _ = rtslice(&socket, &["remove", &format!("cli{}-{n}", std::process::id())], None);
        }
    }
    // A daemon with --reset-on-exit, stopped with SIGTERM: everything undone.
    let _ = Command::new("kill").arg(daemon.id().to_string()).status();
    daemon.wait().unwrap();
    let mut last = start(&state, &socket, true);
    let _ = Command::new("kill").arg(last.id().to_string()).status();
    assert!(last.wait().unwrap().success());
    assert!(sleepers().is_empty(), "the reset stopped every workload");
    assert!(!Path::new("/sys/fs/cgroup/cpu/rtslice").exists() && !Path::new("/sys/fs/cgroup/rtslice.slice").exists());
}

fn write(dir: &Path, file: &str, text: &str) -> PathBuf {
    let p = dir.join(file);
    std::fs::write(&p, text).unwrap();
    p
}

fn pids_by_name(socket: &Path) -> std::collections::BTreeMap<String, Vec<i64>> {
    let o = rtslice(socket, &["list", "--json"], None);
    let list: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&o.stderr)));
    list["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["name"].as_str().unwrap().to_string(), w["pids"].as_array().map(|a| a.iter().map(|p| p.as_i64().unwrap()).collect()).unwrap_or_default()))
        .collect()
}

#[test]
fn apply_through_the_daemon_and_in_process_changes_only_the_difference() {
    root_or_skip!();
    if rtslice_host::doctor::online_cpus().len() < 2 || !rtslice_host::doctor().mechanisms.contains(&rtslice_host::Mechanism::RtGroup) {
        eprintln!("SKIPPED: needs 2 CPUs and RT groups");
        return;
    }
    let _lock = KernelLock::acquire();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let socket = dir.path().join("api.sock");
    let _cleanup = Cleanup(state.clone());
    let name = |n: &str| format!("cli{}-{n}", std::process::id());
    let mut daemon = start(&state, &socket, false);
    let first = write(dir.path(), "first.yaml", &spec(&[("a", 250), ("b", 250), ("c", 250)]));
    let o = rtslice(&socket, &["apply", first.to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let before = pids_by_name(&socket);
    assert_eq!(before.len(), 3);

    // b shrinks, c goes, d comes: the dry run prints that and changes nothing.
    let second = write(dir.path(), "second.yaml", &spec(&[("a", 250), ("b", 150), ("d", 300)]));
    let o = rtslice(&socket, &["apply", "--dry-run", second.to_str().unwrap()], None);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.starts_with("dry run: nothing changed"), "{out}");
    for line in [format!("unchanged {}", name("a")), format!("resize    {} (demand)", name("b")), format!("remove    {}", name("c")), format!("deploy    {}: running", name("d"))] {
        assert!(out.contains(&line), "{line:?} in {out}");
    }
    assert_eq!(pids_by_name(&socket), before, "a dry run changes nothing");
    let o = rtslice(&socket, &["apply", second.to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let after = pids_by_name(&socket);
    assert_eq!(after[&name("a")], before[&name("a")], "a untouched");
    assert_eq!(after[&name("b")], before[&name("b")], "b resized in place");
    assert!(!after.contains_key(&name("c")) && after.contains_key(&name("d")));
    // A spec error: located in the file, exit 2, nothing changes.
    let bad = write(dir.path(), "bad.yaml", "apiVersion: rtslice/v1\nworkloads:\n  - name: x\n    demnad: {}\n");
    let o = rtslice(&socket, &["apply", bad.to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("bad.yaml:4:"), "{}", String::from_utf8_lossy(&o.stderr));

    // No daemon: the same apply runs in-process on the node's state directory.
    let _ = Command::new("kill").arg(daemon.id().to_string()).status();
    daemon.wait().unwrap();
    let third = write(dir.path(), "third.yaml", &spec(&[("a", 250), ("b", 150), ("d", 300), ("e", 900)]));
    let o = Command::new(bin()).args(["apply", "--state-dir"]).arg(&state).arg(&third).env_remove("RTSLICE_SOCKET").output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(o.status.code(), Some(1), "e does not fit: pending, exit 1: {out}{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains(&format!("unchanged {}", name("a"))) && out.contains(&format!("deploy    {}: pending", name("e"))), "{out}");
    // The next daemon re-adopts what the in-process apply left running.
    daemon = start(&state, &socket, false);
    let adopted = pids_by_name(&socket);
    assert_eq!(adopted[&name("a")], before[&name("a")]);
    assert_eq!(adopted.len(), 4, "{adopted:?}");
    let _ = Command::new("kill").arg(daemon.id().to_string()).status();
    daemon.wait().unwrap();
    let mut last = start(&state, &socket, true);
    let _ = Command::new("kill").arg(last.id().to_string()).status();
    assert!(last.wait().unwrap().success());
    assert!(sleepers().is_empty(), "the reset stopped every workload");
}

/// One running workload as the kernel shows it: each process (pid, start time), its cgroup files
/// in the cpu and cpuset hierarchies (counters left out), and per thread (name, policy, RT
/// priority, allowed CPUs). Equal snapshots mean an operation on another workload did not touch it.
#[derive(Debug, PartialEq)]
struct Untouched {
    procs: Vec<(i32, u64)>,
    cgroup_files: std::collections::BTreeMap<String, String>,
    threads: Vec<(i32, String, u32, u32, String)>,
}

/// Fields of /proc/…/stat after the command name (field 3 is index 0).
fn stat_fields(path: &str) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(path).ok()?;
    Some(s[s.rfind(')')? + 2..].split_whitespace().map(String::from).collect())
}

fn untouched(name: &str) -> Untouched {
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
fn sli_counters(socket: &Path) -> std::collections::BTreeMap<String, (u64, u64)> {
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

/// Issue 12's "Done when", on the real kernel: three emulated vBS (OAI LTE, 1 ms TTIs) run under
/// RT-group reservations, all on CPU 1 (CPU 0 is housekeeping); a fourth is deployed, one is
/// resized up and back down, another removed. Across every operation the others keep the same
/// processes (pid and start time), cgroup files and thread policies, and their deadline-miss ratio,
/// read from the daemon's `/metrics` (the report channel), is not worse than in the quiet windows
/// beyond counting noise once the CPU stalls a FIFO 99 sentinel saw are taken out. The budgets are
/// sized from one vBS measured alone on this host. Prints the per-window table (docs/api.md, "Live
/// operations").
#[test]
fn three_emulated_vbs_a_fourth_added_one_resized_one_removed_the_others_unaffected() {
    root_or_skip!();
    if rtslice_host::doctor::online_cpus().len() < 2 || !rtslice_host::doctor().mechanisms.contains(&rtslice_host::Mechanism::RtGroup) {
        eprintln!("SKIPPED: needs 2 CPUs and RT groups");
        return;
    }
    let _lock = KernelLock::acquire();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let socket = dir.path().join("api.sock");
    let _cleanup = Cleanup(state.clone());
    let node = write(dir.path(), "node.yaml", "apiVersion: rtslice/v1\nnode:\n  housekeeping: 0\nworkloads: []\n");
    let tag = std::process::id();
    let full = |n: &str| format!("vbs{tag}-{n}");
    // The vBS: OAI LTE on a 1.4 MHz carrier (6 PRBs) with one PRB scheduled, the lightest real
    // configuration. Its CPU cost is mostly per-TTI (FFTs of the whole carrier, 4-5 thread hand-offs
    // a millisecond) and differs ~2.5x between the VMs this test has run on (10 % PHY load on 25
    // PRBs cost ~10 % of a CPU on one, 26 % on another), so a fixed budget was either generous or
    // below the need: under 4 ms every 20 ms a vBS needing 5 ms was throttled for the rest of each
    // period and missed 5-50 % of its TTIs in every window, operation or not, which says nothing
    // about isolation. The budget is sized from this host's measurement instead.
    const EMU: [&str; 8] = ["--profile", "oai-lte", "--prb", "6", "--traffic", "17%", "--cpus", "1"];
    let solo = Command::new(bin()).arg("emulate").args(EMU).args(["--duration", "4s", "--quiet", "--json"]).output().unwrap();
    let solo: serde_json::Value = serde_json::from_slice(&solo.stdout).unwrap_or_else(|e| panic!("emulate --json: {e}: {}", String::from_utf8_lossy(&solo.stderr)));
    let share = solo["cpu_percent_total"].as_f64().expect("cpu_percent_total") / 100.0;
    // RT groups (v1) hold every group's runtime/period against one 95 % (plan: "reservations sum
    // to … above the kernel's cap"): four vBS and du1 grown by 10 % must sum to at most 0.95, so a
    // budget is at most 0.95 / 4.1 = 23 % of the period. Twice the measured need where that fits.
    const PERIOD_US: u64 = 20_000;
    let budget = (2.0 * share).min(0.23);
    if budget < 1.25 * share {
        eprintln!(
            "SKIPPED: one emulated vBS costs {:.1} % of a CPU on this host; four of them under RT groups' single 95 % \
             would get at most 23 % each, less than 1.25x the need — they would be throttled whatever the daemon does",
            100.0 * share
        );
        return;
    }
    let runtime_us = ((budget * PERIOD_US as f64 / 100.0).ceil() as u64) * 100;
    let grown_us = runtime_us + runtime_us / 10;
    eprintln!("MEASURED: one vBS alone uses {:.1} % of CPU 1; budget {runtime_us} µs every {PERIOD_US} µs ({:.1}x), grown {grown_us} µs", 100.0 * share, runtime_us as f64 / (share * PERIOD_US as f64));
    let vbs = |n: &str| {
        format!(
            "  - name: {}\n    launch:\n      command: [{}, emulate, {}, --duration, 30m, --quiet]\n    demand: {{ reservation: {{ runtime: {runtime_us}us, period: {PERIOD_US}us, count: 1 }} }}\n",
            full(n),
            bin(),
            EMU[..6].join(", ")
        )
    };
    let mut child = Command::new(bin())
        .args(["daemon", "--mechanism", "rt_group", "--reset-on-exit", "--grace", "2", "--no-trace", "--node"])
        .arg(&node)
        .arg("--state-dir")
        .arg(&state)
        .arg("--socket")
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("daemon.log")).unwrap())
        .spawn()
        .unwrap();
    let term = Term(child.id());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(std::time::Instant::now() < deadline, "the daemon did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The daemon's own threads (API, telemetry, agent) stay on the housekeeping CPU, off CPU 1.
    for tid in rtslice_sys::procfs::tasks(child.id()) {
        assert_eq!(rtslice_sys::sched::get_affinity(tid as i32).unwrap(), vec![0], "daemon thread {tid} runs on housekeeping CPU 0 only");
    }
    let ok = |o: Output| assert_eq!(o.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    ok(rtslice(&socket, &["deploy", "-"], Some(&format!("apiVersion: rtslice/v1\nworkloads:\n{}{}{}", vbs("du1"), vbs("du2"), vbs("du3")))));
    for n in ["du1", "du2", "du3"] {
        let cpus = std::fs::read_to_string(format!("/sys/fs/cgroup/cpuset/rtslice/{}/cpuset.cpus", full(n))).unwrap();
        assert_eq!(cpus.trim(), "1", "{n} shares CPU 1 (CPU 0 is housekeeping)");
        // Spawned by a daemon confined to CPU 0, the vBS still runs where its cpuset says.
        let pid = std::fs::read_to_string(format!("/sys/fs/cgroup/cpuset/rtslice/{}/cgroup.procs", full(n))).unwrap();
        let pid: i32 = pid.lines().next().and_then(|l| l.trim().parse().ok()).expect("the vBS runs");
        assert_eq!(rtslice_sys::sched::get_affinity(pid).unwrap(), vec![1], "{n}'s process runs on its cpuset's CPU 1");
    }
    // The emulators calibrate for a few seconds, then report once a second.
    let t0 = std::time::Instant::now();
    while !["du1", "du2", "du3"].iter().all(|n| sli_counters(&socket).get(&full(n)).is_some_and(|c| c.1 > 2000)) {
        assert!(t0.elapsed() < Duration::from_secs(90), "the emulators report TTIs in /metrics: {:?}", sli_counters(&socket));
        std::thread::sleep(Duration::from_millis(200));
    }

    // Windows of WINDOW each: quiet ones, and ones that begin with an operation.
    const WINDOW: Duration = Duration::from_secs(6);
    struct Window {
        label: String,
        operated: Option<String>,
        /// The node's configuration (which vBS run, with which budgets) when the window began and
        /// when it ended: the same for a quiet window.
        states: (&'static str, &'static str),
        counts: std::collections::BTreeMap<String, (u64, u64)>,
        /// CPU 1's stalls under the sentinel that can show in this window's counters.
        stalls: rtslice_testkit::sentinel::Stalls,
    }
    // Every CPU 1 stall seen by a FIFO 99 thread there (rtslice_testkit::sentinel): a stall the
    // highest priority suffers too is the host's, not the daemon's.
    let sentinel = rtslice_testkit::sentinel::Sentinel::start(&[1]);
    if let Some(why) = &sentinel.failed {
        eprintln!("no sentinel ({why}): every miss counts against the operations");
    }
    let mut windows: Vec<Window> = Vec::new();
    let mut last = sli_counters(&socket);
    let mut last_ns = rtslice_sys::time::monotonic_ns();
    let mut run_window = |label: &str, operated: Option<&str>, states: (&'static str, &'static str), op: &dyn Fn()| {
        let started = std::time::Instant::now();
        op();
        let took = started.elapsed();
        assert!(took < WINDOW, "{label} took {took:?}, longer than a window");
        std::thread::sleep(WINDOW - took);
        let now = sli_counters(&socket);
        let now_ns = rtslice_sys::time::monotonic_ns();
        let counts = now
            .iter()
            .filter_map(|(w, c)| last.get(w).map(|l| (w.clone(), (c.0.saturating_sub(l.0), c.1.saturating_sub(l.1)))))
            .collect();
        // The emulators report once a second: a miss shows up to a second after it happened.
        // 1 ms TTIs with 3 TTIs of HARQ budget in flight.
        let stalls = sentinel.between(last_ns.saturating_sub(1_500_000_000), now_ns, 1_000_000, 3);
        last = now;
        last_ns = now_ns;
        windows.push(Window { label: format!("{label} ({} ms)", took.as_millis()), operated: operated.map(|n| full(n)), states, counts, stalls });
    };
    // One operation on `operated`; the others' kernel view must be the same after it.
    let mut checked = Vec::new();
    let mut operate = |label: &str, operated: &str, others: &[&str], states: (&'static str, &'static str), op: &dyn Fn(), run_window: &mut dyn FnMut(&str, Option<&str>, (&'static str, &'static str), &dyn Fn())| {
        let before: Vec<Untouched> = others.iter().map(|n| untouched(&full(n))).collect();
        run_window(label, Some(operated), states, op);
        for (n, b) in others.iter().zip(before) {
            let a = untouched(&full(n));
            assert_eq!(a, b, "{n} changed during «{label}»");
            checked.push(format!("{label}: {n} kept {} processes, {} threads, {} cgroup files", a.procs.len(), a.threads.len(), a.cgroup_files.len()));
        }
    };
    // The node's configurations: three vBS; four; four with du1 grown; three without du2. Each
    // is observed quiet twice, so every operation's window has a quiet baseline on either side.
    let (three, four, grown_cfg, removed) = ("du1-du3", "du1-du4", "du1-du4, du1 grown", "du1, du3, du4");
    let nothing = || {};
    run_window("quiet", None, (three, three), &nothing);
    run_window("quiet", None, (three, three), &nothing);
    operate("deploy du4", "du4", &["du1", "du2", "du3"], (three, four), &|| ok(rtslice(&socket, &["deploy", "-"], Some(&format!("apiVersion: rtslice/v1\nworkloads:\n{}", vbs("du4"))))), &mut run_window);
    run_window("quiet", None, (four, four), &nothing);
    let du1 = untouched(&full("du1"));
    let (grown, back) = (format!("{grown_us}us"), format!("{runtime_us}us"));
    operate(&format!("resize du1 to {grown}"), "du1", &["du2", "du3", "du4"], (four, grown_cfg), &|| ok(rtslice(&socket, &["resize", &full("du1"), "--runtime", &grown], None)), &mut run_window);
    assert_eq!(untouched(&full("du1")).procs, du1.procs, "a resize keeps du1's processes running");
    assert_eq!(std::fs::read_to_string(format!("/sys/fs/cgroup/cpu/rtslice/{}/cpu.rt_runtime_us", full("du1"))).unwrap().trim(), grown_us.to_string());
    run_window("quiet", None, (grown_cfg, grown_cfg), &nothing);
    run_window("quiet", None, (grown_cfg, grown_cfg), &nothing);
    operate(&format!("resize du1 back to {back}"), "du1", &["du2", "du3", "du4"], (grown_cfg, four), &|| ok(rtslice(&socket, &["resize", &full("du1"), "--runtime", &back], None)), &mut run_window);
    assert_eq!(untouched(&full("du1")), du1, "grown and shrunk back, du1 is as it was");
    run_window("quiet", None, (four, four), &nothing);
    operate("remove du2", "du2", &["du1", "du3", "du4"], (four, removed), &|| ok(rtslice(&socket, &["remove", &full("du2")], None)), &mut run_window);
    run_window("quiet", None, (removed, removed), &nothing);
    run_window("quiet", None, (removed, removed), &nothing);

    // The bound. Under "the operation changes nothing" a workload's m misses in the n TTIs of an
    // operation's window are Binomial(n, p), p its miss probability in the node's configuration,
    // estimated by p̂ = M/N from its M misses in the N TTIs of the quiet windows of that
    // configuration. An operation moves the node from one configuration to another (a fourth vBS
    // adds load to the shared CPU: the others' queueing behind it is the new configuration's, not
    // the operation's doing), so its window is compared with the quiet windows on either side and
    // must be within the bound of at least one of them. m/n − p̂ has variance p(1−p)(1/n + 1/N).
    // Host stalls (the ms of jitter this VM sees) make misses come in bursts: those the sentinel
    // saw on CPU 1 are taken out of every window first; the rest inflate that variance by a
    // dispersion factor φ, φ̂ = Pearson's χ²/dof of the quiet windows within each configuration
    // (pooled over workloads and configurations, at least 1). Accepted: m/n ≤ p̂ + z·sqrt(φ̂
    // p̄(1−p̄)(1/n + 1/N)) with z = 4 (one-sided, ≈3e-5 false alarms per comparison, ≈4e-4 for the
    // test's ~12) and p̄ = max(p̂, 1/N) so that a workload with no quiet misses still has a non-zero
    // noise floor. An operation that disturbed its neighbours — restarted them, reset or shared
    // out their budgets, moved their threads — shows as percents of misses, far outside it.
    let counted = |win: &Window, w: &str| win.counts.get(w).map(|(m, n)| (m.saturating_sub(win.stalls.explained_misses), *n));
    let quiet: Vec<&Window> = windows.iter().filter(|w| w.operated.is_none()).collect();
    let pooled = |w: &str, state: &str| quiet.iter().filter(|q| q.states.0 == state).filter_map(|q| counted(q, w)).fold((0u64, 0u64), |a, c| (a.0 + c.0, a.1 + c.1));
    let (mut chi2, mut dof) = (0.0f64, 0usize);
    let names: std::collections::BTreeSet<String> = windows.iter().flat_map(|w| w.counts.keys().cloned()).collect();
    let configurations: std::collections::BTreeSet<&str> = quiet.iter().map(|q| q.states.0).collect();
    for w in &names {
        for state in &configurations {
            let (m, n) = pooled(w, state);
            let p = (m as f64 / n.max(1) as f64).max(1.0 / n.max(1) as f64);
            let cells: Vec<(u64, u64)> = quiet.iter().filter(|q| q.states.0 == *state).filter_map(|q| counted(q, w)).filter(|c| c.1 > 0).collect();
            for (mi, ni) in &cells {
                let e = *ni as f64 * p;
                chi2 += (*mi as f64 - e).powi(2) / (e * (1.0 - p));
            }
            dof += cells.len().saturating_sub(1);
        }
    }
    let phi = (chi2 / dof.max(1) as f64).max(1.0);
    let mut table = format!("{:<32}", "window");
    for w in &names {
        table += &format!(" {:>20}", w.trim_start_matches(&format!("vbs{tag}-")));
    }
    table += "   CPU 1 stalls (sentinel)\n";
    for win in &windows {
        table += &format!("{:<32}", win.label);
        for w in &names {
            table += &match win.counts.get(w) {
                Some((m, n)) if *n > 0 => format!(" {:>20}", format!("{m}/{n} {:.2}%", 100.0 * *m as f64 / *n as f64)),
                _ => format!(" {:>20}", "–"),
            };
        }
        let st = win.stalls;
        table += &if st.count == 0 {
            "   none\n".to_string()
        } else {
            let handoffs = if st.handoffs_only > 0 { format!("; {} only in its hand-offs", st.handoffs_only) } else { String::new() };
            format!("   {} ({:.1} ms; explain ≤{} misses each{handoffs})\n", st.count, st.total_ms, st.explained_misses)
        };
    }
    eprintln!("LIVE OPERATIONS (misses/TTIs per {} s window, from /metrics; dispersion φ̂ = {phi:.2} over {dof} dof):\n{table}", WINDOW.as_secs());
    let mut failures = Vec::new();
    for win in windows.iter().filter(|w| w.operated.is_some()) {
        for w in win.counts.keys() {
            let Some((m, n)) = counted(win, w) else { continue };
            if Some(w) == win.operated.as_ref() || n == 0 {
                continue;
            }
            let ratio = m as f64 / n as f64;
            // The configuration before and after the operation, each with its quiet windows.
            let baselines: Vec<(&str, u64, u64, f64)> = [win.states.0, win.states.1]
                .into_iter()
                .filter_map(|state| {
                    let (qm, qn) = pooled(w, state);
                    (qn > 0).then(|| {
                        let p_hat = qm as f64 / qn as f64;
                        let p_bar = p_hat.max(1.0 / qn as f64);
                        (state, qm, qn, p_hat + 4.0 * (phi * p_bar * (1.0 - p_bar) * (1.0 / n as f64 + 1.0 / qn as f64)).sqrt())
                    })
                })
                .collect();
            assert!(!baselines.is_empty(), "{w} had quiet windows before or after {}", win.label);
            let said: Vec<String> = baselines.iter().map(|(s, qm, qn, b)| format!("{s}: quiet {qm}/{qn}, bound {:.3}%", 100.0 * b)).collect();
            eprintln!("  {:<32} {w}: {:.3}% ({})", win.label, 100.0 * ratio, said.join("; "));
            if baselines.iter().all(|(_, _, _, bound)| ratio > *bound) {
                failures.push(format!("{w} during {}: {m}/{n} = {:.3}% above both configurations' bounds ({})", win.label, 100.0 * ratio, said.join("; ")));
            }
            // The others kept running through the operation: they completed TTIs in its window.
            assert!(n as f64 > 0.5 * WINDOW.as_millis() as f64, "{w} ran only {n} TTIs in the {} window", win.label);
        }
    }
    for c in &checked {
        eprintln!("  {c}");
    }
    assert!(failures.is_empty(), "miss ratios worse than the quiet windows' beyond counting noise:\n{}", failures.join("\n"));
    // --reset-on-exit: SIGTERM stops every emulator and undoes the node (once: after the wait the
    // pid may belong to another process).
    drop(term);
    assert!(child.wait().unwrap().success());
}

/// `curl` over TCP: (its exit code, the HTTP status it saw — 0 when there was no answer, the body).
fn curl_tcp(args: &[&str]) -> (i32, u16, String) {
    let out = Command::new("curl").args(["-s", "-o", "-", "-w", "\n%{http_code}", "--max-time", "20"]).args(args).output().expect("curl is installed (make deps)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (out.status.code().unwrap_or(-1), code.trim().parse().unwrap_or(0), body.to_string())
}

/// `rtslice daemon --listen --token-file --tls-cert --tls-key` serves HTTPS (rustls): with a
/// certificate made by openssl here, curl trusting it gets 200 with the token and 401 without;
/// plain HTTP to that port and a client that does not trust the certificate get no answer; the
/// dashboard's cookie is `Secure`. TCP without a token, TLS without TCP and a key that does not
/// belong to the certificate are refused before anything starts (exit 2).
#[test]
fn daemon_serves_https_on_tcp_with_the_token_only() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).display().to_string();
    let openssl = |cn: &str, key: &str, cert: &str| {
        let o = Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj"])
            .arg(format!("/CN={cn}"))
            .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", &p(key), "-out", &p(cert)])
            .output()
            .expect("openssl is installed (make deps)");
        assert!(o.status.success(), "openssl: {}", String::from_utf8_lossy(&o.stderr));
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p(key), std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    openssl("rtslice-test", "key.pem", "cert.pem");
    openssl("another", "other-key.pem", "other-cert.pem");
    let token = "tls-test-token-0123456789abcdef";
    std::fs::write(p("token"), token).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p("token"), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let state = dir.path().join("state");
    let socket = dir.path().join("api.sock");
    let _cleanup = Cleanup(state.clone());
    let port = rtslice_testkit::prom::free_port();
    let listen = format!("127.0.0.1:{port}");
    let daemon = |extra: &[&str]| {
        let mut c = Command::new(bin());
        c.args(["daemon", "--reset-on-exit", "--no-trace", "--state-dir"]).arg(&state).arg("--socket").arg(&socket).args(extra);
        c
    };

    // Refusals: exit 2 with the reason, the socket never bound.
    for (extra, says) in [
        (vec!["--listen", &listen], "needs --token-file"),
        (vec!["--listen", &listen, "--token-file", &p("token"), "--tls-cert", &p("cert.pem"), "--tls-key", &p("other-key.pem")], "do not go together"),
        (vec!["--tls-cert", &p("cert.pem"), "--tls-key", &p("key.pem")], "--listen"),
    ] {
        let o = daemon(&extra).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(says), "{extra:?} says why ({says}): {err}");
        assert!(!socket.exists(), "{extra:?} started nothing");
    }

    let mut child = daemon(&["--listen", &listen, "--token-file", &p("token"), "--tls-cert", &p("cert.pem"), "--tls-key", &p("key.pem")])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(p("daemon.log")).unwrap())
        .spawn()
        .unwrap();
    let term = Term(child.id());
    let url = format!("https://127.0.0.1:{port}/v1/node");
    let auth = format!("Authorization: Bearer {token}");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let ok = loop {
        let r = curl_tcp(&["--cacert", &p("cert.pem"), "-H", &auth, &url]);
        if r.1 == 200 || std::time::Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(ok.1, 200, "HTTPS with the token: {ok:?}\n{}", std::fs::read_to_string(p("daemon.log")).unwrap_or_default());
    let node: serde_json::Value = serde_json::from_str(&ok.2).unwrap();
    assert!(node["cpus"].is_array() || node["cpus"].is_string(), "GET /v1/node over HTTPS: {node}");
    let no_token = curl_tcp(&["--cacert", &p("cert.pem"), &url]);
    assert_eq!(no_token.1, 401, "HTTPS without the token: {no_token:?}");
    let plain = curl_tcp(&["-H", &auth, &format!("http://127.0.0.1:{port}/v1/node")]);
    assert!(plain.0 != 0 && plain.1 == 0, "plain HTTP to the TLS port must get no HTTP answer: {plain:?}");
    let untrusted = curl_tcp(&["--cacert", &p("other-cert.pem"), "-H", &auth, &url]);
    assert!(untrusted.0 != 0 && untrusted.1 == 0, "a client trusting another CA must refuse the server: {untrusted:?}");
    // The dashboard's login sets the token cookie Secure over HTTPS.
    let login = Command::new("curl")
        .args(["-s", "-D", "-", "-o", "/dev/null", "--cacert", &p("cert.pem")])
        .arg(format!("https://127.0.0.1:{port}/?token={token}"))
        .output()
        .unwrap();
    let headers = String::from_utf8_lossy(&login.stdout).to_lowercase();
    let cookie = headers.lines().find(|l| l.starts_with("set-cookie:")).unwrap_or_else(|| panic!("no cookie set: {headers}"));
    assert!(cookie.contains("httponly") && cookie.contains("; secure"), "{cookie}");
    eprintln!("HTTPS: 200 with the token, 401 without, plain HTTP → curl exit {}, untrusted CA → curl exit {}; {}", plain.0, untrusted.0, cookie.trim());

    drop(term);
    assert!(child.wait().unwrap().success(), "the daemon stops cleanly on SIGTERM");
}

/// `--tls-client-ca`: mutual TLS. A client certificate signed by that CA (made by openssl here) and
/// the token get 200; no client certificate, or one from another CA, get no answer (the handshake
/// fails); the token is still required. A CA file that holds no certificate is refused at start.
#[test]
fn daemon_with_a_client_ca_serves_only_clients_it_signed() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).display().to_string();
    let run = |args: &[&str]| {
        let o = Command::new("openssl").args(args).output().expect("openssl is installed (make deps)");
        assert!(o.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    // The server's self-signed certificate, a client CA, a client it signed, and a stranger.
    run(&[&["req", "-x509"][..], &ec, &["-days", "1", "-subj", "/CN=rtslice-test", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", &p("key.pem"), "-out", &p("cert.pem")]].concat());
    run(&[&["req", "-x509"][..], &ec, &["-days", "1", "-subj", "/CN=clients", "-keyout", &p("ca-key.pem"), "-out", &p("ca.pem")]].concat());
    run(&[&["req"][..], &ec, &["-subj", "/CN=operator", "-keyout", &p("client-key.pem"), "-out", &p("client.csr")]].concat());
    // An X.509 v3 client certificate (webpki refuses v1, which `x509 -req` makes without extensions).
    std::fs::write(p("client.ext"), "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n").unwrap();
    run(&[
        "x509", "-req", "-in", &p("client.csr"), "-CA", &p("ca.pem"), "-CAkey", &p("ca-key.pem"), "-CAcreateserial", "-days", "1",
        "-extfile", &p("client.ext"), "-out", &p("client.pem"),
    ]);
    run(&[&["req", "-x509"][..], &ec, &["-days", "1", "-subj", "/CN=stranger", "-keyout", &p("stranger-key.pem"), "-out", &p("stranger.pem")]].concat());
    let token = "mtls-test-token-0123456789abcdef";
    std::fs::write(p("token"), token).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        for f in ["token", "key.pem"] {
            std::fs::set_permissions(p(f), std::fs::Permissions::from_mode(0o600)).unwrap();
        }
    }
    std::fs::write(p("empty.pem"), "").unwrap();
    let state = dir.path().join("state");
    let socket = dir.path().join("api.sock");
    let _cleanup = Cleanup(state.clone());
    let port = rtslice_testkit::prom::free_port();
    let listen = format!("127.0.0.1:{port}");
    let daemon = |ca: &str| {
        let mut c = Command::new(bin());
        c.args(["daemon", "--reset-on-exit", "--no-trace", "--state-dir"]).arg(&state).arg("--socket").arg(&socket);
        c.args(["--listen", &listen, "--token-file", &p("token"), "--tls-cert", &p("cert.pem"), "--tls-key", &p("key.pem"), "--tls-client-ca", ca]);
        c
    };
    let o = daemon(&p("empty.pem")).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--tls-client-ca") && err.contains("holds no certificate"), "{err}");
    assert!(!socket.exists());

    let mut child = daemon(&p("ca.pem")).stdout(Stdio::null()).stderr(std::fs::File::create(p("daemon.log")).unwrap()).spawn().unwrap();
    let term = Term(child.id());
    let url = format!("https://127.0.0.1:{port}/v1/node");
    let auth = format!("Authorization: Bearer {token}");
    let with_client = ["--cacert", &p("cert.pem"), "--cert", &p("client.pem"), "--key", &p("client-key.pem")];
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let ok = loop {
        let r = curl_tcp(&[&with_client[..], &["-H", &auth, &url]].concat());
        if r.1 == 200 || std::time::Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(ok.1, 200, "mutual TLS with the token: {ok:?}\n{}", std::fs::read_to_string(p("daemon.log")).unwrap_or_default());
    let no_token = curl_tcp(&[&with_client[..], &[&url[..]]].concat());
    assert_eq!(no_token.1, 401, "a signed client still needs the token: {no_token:?}");
    let no_cert = curl_tcp(&["--cacert", &p("cert.pem"), "-H", &auth, &url]);
    assert!(no_cert.1 == 0, "a client without a certificate gets no answer: {no_cert:?}");
    let stranger = curl_tcp(&["--cacert", &p("cert.pem"), "--cert", &p("stranger.pem"), "--key", &p("stranger-key.pem"), "-H", &auth, &url]);
    assert!(stranger.1 == 0, "a client certificate from another CA gets no answer: {stranger:?}");
    eprintln!("mutual TLS: signed client 200 (401 without the token); no certificate → curl exit {}, stranger → curl exit {}", no_cert.0, stranger.0);
    drop(term);
    assert!(child.wait().unwrap().success(), "the daemon stops cleanly on SIGTERM");
}
