//! `rtslice daemon` and its client subcommands as a user runs them: exit codes (0 ran, 1 pending or
//! refused, 2 invalid input, 3 no daemon), and SIGKILL of the daemon in the middle of deploys,
//! restarted each time: the workloads it admitted run once each, none orphaned, nothing drifted.

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

/// The latest SLI counters each emulator reported on its socket.
struct Reports {
    sockets: Vec<(String, std::os::unix::net::UnixDatagram)>,
    latest: std::collections::BTreeMap<String, serde_json::Value>,
}

impl Reports {
    fn bind(dir: &Path, names: &[&str]) -> Reports {
        let sockets = names
            .iter()
            .map(|n| {
                let s = std::os::unix::net::UnixDatagram::bind(dir.join(format!("{n}.sock"))).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                (n.to_string(), s)
            })
            .collect();
        Reports { sockets, latest: Default::default() }
    }

    fn drain(&mut self) -> Vec<String> {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        for (n, s) in &self.sockets {
            while let Ok(len) = s.recv(&mut buf) {
                if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&buf[..len]) {
                    self.latest.insert(n.clone(), v);
                    got.push(n.clone());
                }
            }
        }
        got
    }

    /// Waits until each of `names` sent two reports from now on (the second one counts everything
    /// up to at least one second after this call), and returns (ttis, deadline misses) of each.
    fn fresh(&mut self, names: &[&str]) -> std::collections::BTreeMap<String, (u64, u64)> {
        self.drain();
        let mut seen: std::collections::BTreeMap<String, u32> = Default::default();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while names.iter().any(|n| seen.get(*n).copied().unwrap_or(0) < 2) {
            assert!(std::time::Instant::now() < deadline, "no reports from {names:?}: {seen:?}");
            for n in self.drain() {
                *seen.entry(n).or_default() += 1;
            }
        }
        names
            .iter()
            .map(|n| {
                let v = &self.latest[*n];
                (n.to_string(), (v["ttis"].as_u64().unwrap(), v["deadline_misses"].as_u64().unwrap()))
            })
            .collect()
    }
}

/// Issue 12's "Done when": three emulated vBS run; a fourth is added, one resized, another
/// removed; the others notice nothing: the same PIDs, and their deadline-miss counters (reported by
/// the emulators themselves over RTSLICE_REPORT_SOCKET) printed across every operation.
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
    let tag = std::process::id();
    let vbs = |n: &str| {
        format!(
            "  - name: vbs{tag}-{n}\n    launch:\n      command: [{}, emulate, --profile, oai-lte, --duration, 10m, --prb, \"6\", --traffic, 20%, --quiet]\n      env: {{ RTSLICE_REPORT_SOCKET: {} }}\n    demand: {{ reservation: {{ runtime: 200ms, period: 1s, count: 1 }} }}\n",
            bin(),
            dir.path().join(format!("{n}.sock")).display()
        )
    };
    let mut reports = Reports::bind(dir.path(), &["du1", "du2", "du3", "du4"]);
    let mut daemon = start(&state, &socket, true);
    // Stopped even when an assertion fails (the cleanup needs the state directory's lock).
    struct Term(u32);
    impl Drop for Term {
        fn drop(&mut self) {
            let _ = Command::new("kill").arg(self.0.to_string()).status();
        }
    }
    let _term = Term(daemon.id());
    let o = rtslice(&socket, &["deploy", "-"], Some(&format!("apiVersion: rtslice/v1\nworkloads:\n{}{}{}", vbs("du1"), vbs("du2"), vbs("du3"))));
    assert_eq!(o.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let full = |n: &str| format!("vbs{tag}-{n}");
    let mut rows = Vec::new();
    // Each operation's window (from a fresh report before it to a fresh report after it) comes right
    // after a control window of the same shape with no operation: the host's own noise (other jobs
    // on this shared VM) shows there, the operation's effect is the difference.
    let mut step = |what: &str, reports: &mut Reports, watched: &[&str], op: &dyn Fn()| {
        let pids0 = pids_by_name(&socket);
        let k0 = reports.fresh(watched);
        let k1 = reports.fresh(watched);
        let c0 = k1.clone();
        op();
        let c1 = reports.fresh(watched);
        let pids1 = pids_by_name(&socket);
        for n in watched {
            assert_eq!(pids1[&full(n)], pids0[&full(n)], "{n}'s processes during {what}");
            assert!(c1[*n].0 > c0[*n].0, "{n} kept running (its TTI counter went on) during {what}");
            rows.push(format!(
                "{what:<24} {n}: pid {:?}  control: {} misses in {} TTIs  operation: deadline misses {} -> {} (+{}) in {} TTIs",
                pids1[&full(n)],
                k1[*n].1 - k0[*n].1,
                k1[*n].0 - k0[*n].0,
                c0[*n].1,
                c1[*n].1,
                c1[*n].1 - c0[*n].1,
                c1[*n].0 - c0[*n].0
            ));
        }
    };
    step("deploy du4", &mut reports, &["du1", "du2", "du3"], &|| {
        let o = rtslice(&socket, &["deploy", "-"], Some(&format!("apiVersion: rtslice/v1\nworkloads:\n{}", vbs("du4"))));
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    });
    step("resize du1 to 250ms/1s", &mut reports, &["du2", "du3", "du4"], &|| {
        let o = rtslice(&socket, &["resize", &full("du1"), "--runtime", "250ms"], None);
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    });
    step("remove du2", &mut reports, &["du1", "du3", "du4"], &|| {
        let o = rtslice(&socket, &["remove", &full("du2")], None);
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    });
    eprintln!("DONE-WHEN (debug build, shared 2-CPU VM):");
    for r in &rows {
        eprintln!("  {r}");
    }
    assert_eq!(
        std::fs::read_to_string(format!("/sys/fs/cgroup/cpu/rtslice/{}/cpu.rt_runtime_us", full("du1"))).unwrap().trim(),
        "250000"
    );
    // --reset-on-exit: SIGTERM stops every emulator and undoes the node.
    let _ = Command::new("kill").arg(daemon.id().to_string()).status();
    assert!(daemon.wait().unwrap().success());
}
