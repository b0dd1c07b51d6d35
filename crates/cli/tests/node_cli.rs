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
