//! The daemon end to end on the real kernel (root, KernelLock): the API over its unix socket with
//! curl, admission one workload at a time (pending, then running once capacity frees up), resize
//! with stale and fresh generations, 400/401/404/409/413 answers, restart with re-adoption.

#[path = "../../host/tests/common/mod.rs"]
mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::is_v2;
use rtslice_testkit::{root_or_skip, KernelLock, OnDrop};

/// cgroup v1 with RT groups (the development VM): the reservations are RT groups sharing the node's
/// 95 %. cgroup v2 (the kernel matrix's guests): SCHED_DEADLINE, every workload on CPU 1 (one node
/// partition; CPU 0 stays the system's), whose cap is the kernel's less the deadline servers'. So
/// 2 CPUs on both (lifecycle.rs, which spreads its workloads over CPUs 1 and 2, needs 3 on v2).
fn usable() -> bool {
    common::node_mechanism_or_skip(2, "CPU 0 stays the system's; every workload in one partition on CPU 1").is_some()
}

fn marker() -> String {
    format!("{}", 700_000 + std::process::id())
}

fn name(n: &str) -> String {
    format!("api{}-{n}", std::process::id())
}

fn workload_yaml(n: &str, runtime_ms: u64) -> String {
    // v2: all on CPU 1, so that they share one partition and its cap, as they share the node's 95 % under RT groups.
    let on = if is_v2() { "cpus: [1]" } else { "count: 1" };
    format!(
        "  - name: {}\n    launch: {{ command: [sleep, \"{}\"] }}\n    demand: {{ reservation: {{ runtime: {runtime_ms}ms, period: 1s, {on} }} }}\n    threads:\n      - {{ match: \"^sleep$\", policy: fifo, priority: 10 }}\n",
        name(n),
        marker()
    )
}

fn spec(ws: &[(&str, u64)]) -> String {
    let mut s = "apiVersion: rtslice/v1\nworkloads:\n".to_string();
    for (n, r) in ws {
        s.push_str(&workload_yaml(n, *r));
    }
    s
}

/// `curl --unix-socket`: (status, JSON body).
fn curl(socket: &Path, method: &str, path: &str, body: Option<&str>) -> (u16, serde_json::Value) {
    let mut c = Command::new("curl");
    c.args(["-s", "-o", "-", "-w", "\n%{http_code}", "--unix-socket"]).arg(socket).args(["-X", method]);
    if body.is_some() {
        c.args(["-H", "Content-Type: application/yaml", "--data-binary", "@-"]);
        c.stdin(std::process::Stdio::piped());
    }
    c.arg(format!("http://rtslice{path}")).stdout(std::process::Stdio::piped());
    let mut child = c.spawn().expect("curl is installed");
    if let Some(b) = body {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b.as_bytes()).unwrap();
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut text).unwrap();
    // The daemon under test runs in this process, and its watcher reaps every child of the process
    // (waitpid(-1): a real daemon's children are all its workloads), curl included: curl's exit
    // status may be gone (ECHILD; once in the 6.12 guest). What it printed is what the test reads.
    let _ = child.wait();
    let (json, code) = text.rsplit_once('\n').expect("curl printed the status");
    (code.trim().parse().unwrap(), serde_json::from_str(json).unwrap_or(serde_json::Value::Null))
}

/// A type rather than an `OnDrop`: besides stopping the daemon on drop, `stop` stops it on purpose
/// and checks that it ended cleanly (the restart half of the test).
struct Daemon {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<rtslice_node::Result<()>>>,
}

impl Daemon {
    fn start(state: &Path, socket: &Path, listen: Option<(std::net::SocketAddr, PathBuf)>, reset_on_exit: bool) -> Daemon {
        let opts = rtslice_node::DaemonOptions {
            service: rtslice_node::ServiceOptions {
                state_dir: state.into(),
                node: if is_v2() { rtslice_spec::Node { housekeeping: vec![0], ..Default::default() } } else { Default::default() },
                mechanism: None,
                grace: Duration::from_secs(2),
                launch_env: Vec::new(),
                boot_id_file: None,
                access: Default::default(),
                resctrl: None,
                hrtick: false,
                fair_server_off: false,
                oci: Default::default(),
            },
            socket: socket.into(),
            listen: listen.as_ref().map(|l| l.0),
            token_file: listen.map(|l| l.1),
            tls: None,
            reset_on_exit,
            telemetry: None,
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
            rt.block_on(rtslice_node::run_until(opts, async move {
                let _ = rx.await;
            }))
        });
        let d = Daemon { stop: Some(tx), thread: Some(thread) };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::os::unix::net::UnixStream::connect(socket).is_err() {
            assert!(std::time::Instant::now() < deadline, "the daemon did not start listening");
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    fn stop(mut self) {
        self.stop.take().unwrap().send(()).unwrap();
        self.thread.take().unwrap().join().unwrap().expect("the daemon stops cleanly");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}


fn pids_of(socket: &Path, n: &str) -> Vec<i64> {
    let (code, w) = curl(socket, "GET", &format!("/v1/workloads/{}", name(n)), None);
    assert_eq!(code, 200, "{w}");
    w["pids"].as_array().unwrap().iter().map(|p| p.as_i64().unwrap()).collect()
}

fn threads_of(socket: &Path, n: &str) -> String {
    let (_, w) = curl(socket, "GET", &format!("/v1/workloads/{}", name(n)), None);
    w["threads"].to_string()
}

#[test]
fn the_api_end_to_end_over_the_unix_socket() {
    root_or_skip!();
    if !usable() {
        return;
    }
    let _lock = KernelLock::acquire();
    let state = tempfile::tempdir().unwrap();
    // Undoes the node even when the test panics.
    let state_dir = state.path().to_path_buf();
    let _cleanup = OnDrop::new(move || {
        if !state_dir.join("node").exists() {
            return;
        }
        if let Ok((node, _)) = rtslice_host::Node::open(rtslice_host::NodeOptions::with_state_dir(&state_dir)) {
            if let Err(e) = node.reset() {
                eprintln!("cleanup: {e}");
            }
        }
    });
    let socket = state.path().join("api.sock");
    let token_file = state.path().join("token");
    std::fs::write(&token_file, "0123456789abcdef-test-token\n").unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let daemon = Daemon::start(state.path(), &socket, Some((port, token_file.clone())), false);
    assert_eq!(std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777, 0o600, "the socket is root's only");

    // The OpenAPI document served is the one checked in.
    let (code, doc) = curl(&socket, "GET", "/v1/openapi.json", None);
    assert_eq!(code, 200);
    assert_eq!(doc, rtslice_node::openapi_document());

    // Three fit (25% each: RT groups account 75% of the node's 95%; SCHED_DEADLINE 75 % of CPU 1's
    // 90-95 %).
    let (code, body) = curl(&socket, "POST", "/v1/workloads", Some(&spec(&[("a", 250), ("b", 250), ("c", 250)])));
    assert_eq!(code, 201, "{body}");
    let before: Vec<(Vec<i64>, String)> = ["a", "b", "c"].iter().map(|n| (pids_of(&socket, n), threads_of(&socket, n))).collect();
    let policy = if is_v2() { "SCHED_DEADLINE" } else { "SCHED_FIFO" };
    assert!(before.iter().all(|(p, t)| p.len() == 1 && t.contains(policy)), "{before:?}");
    // A fourth of 30% does not: pending with the reason (202); the three are untouched.
    let (code, body) = curl(&socket, "POST", "/v1/workloads", Some(&spec(&[("d", 300)])));
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["workloads"][0]["phase"], "pending");
    let why = if is_v2() { "asks for 30% on CPUs 1" } else { "105.0%" };
    assert!(body["workloads"][0]["reason"].as_str().unwrap().contains(why), "{body}");
    let again: Vec<(Vec<i64>, String)> = ["a", "b", "c"].iter().map(|n| (pids_of(&socket, n), threads_of(&socket, n))).collect();
    assert_eq!(before, again);
    // Same name again: 409. Spec errors: 400 with the located messages.
    let (code, _) = curl(&socket, "POST", "/v1/workloads", Some(&spec(&[("a", 10)])));
    assert_eq!(code, 409);
    let (code, body) = curl(&socket, "POST", "/v1/workloads", Some("apiVersion: rtslice/v1\nworkloads:\n  - name: x\n    demnd: {}\n"));
    assert_eq!(code, 400, "{body}");
    assert!(body["errors"][0].as_str().unwrap().starts_with("request body:4:"), "{body}");
    // More than 256 KiB: 413, nothing changes.
    let big = format!("apiVersion: rtslice/v1\n# {}\nworkloads: []\n", "x".repeat(300 * 1024));
    let (code, body) = curl(&socket, "POST", "/v1/workloads", Some(&big));
    assert_eq!(code, 413, "{body}");
    // Dry run: 5% would fit, and where.
    let (code, body) = curl(&socket, "POST", "/v1/plan", Some(&spec(&[("e", 50)])));
    assert_eq!(code, 200);
    assert_eq!(body["workloads"][0]["fits"], true, "{body}");

    // Remove a: its process stops, d (pending) is admitted on the freed bandwidth; b and c untouched.
    let (code, body) = curl(&socket, "DELETE", &format!("/v1/workloads/{}", name("a")), None);
    assert_eq!(code, 200, "{body}");
    let (_, d) = curl(&socket, "GET", &format!("/v1/workloads/{}", name("d")), None);
    assert_eq!(d["phase"], "running", "{d}");
    let (code, _) = curl(&socket, "GET", &format!("/v1/workloads/{}", name("a")), None);
    assert_eq!(code, 404);
    for (i, n) in ["b", "c"].iter().enumerate() {
        assert_eq!((pids_of(&socket, n), threads_of(&socket, n)), before[i + 1], "{n} noticed");
    }

    // Resize b with its generation: 200, in place; with the old one: 409; unknown field: 400.
    let (_, b) = curl(&socket, "GET", &format!("/v1/workloads/{}", name("b")), None);
    let generation = b["generation"].as_u64().unwrap();
    let put = |body: String| {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--unix-socket"])
            .arg(&socket)
            .args(["-X", "PUT", "-H", "Content-Type: application/json", "-d", &body])
            .arg(format!("http://rtslice/v1/workloads/{}", name("b")))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).parse::<u16>().unwrap()
    };
    assert_eq!(put(format!("{{\"generation\": {generation}, \"runtime\": \"150ms\"}}")), 200);
    if is_v2() {
        assert!(threads_of(&socket, "b").contains("SCHED_DEADLINE 150000000/"), "{}", threads_of(&socket, "b"));
    } else {
        assert_eq!(std::fs::read_to_string(format!("/sys/fs/cgroup/cpu/rtslice/{}/cpu.rt_runtime_us", name("b"))).unwrap().trim(), "150000");
    }
    assert_eq!(put(format!("{{\"generation\": {generation}, \"runtime\": \"100ms\"}}")), 409, "a stale generation");
    assert_eq!(put(format!("{{\"generation\": {}, \"runtme\": \"100ms\"}}", generation + 100)), 400, "an unknown field");
    let (_, b2) = curl(&socket, "GET", &format!("/v1/workloads/{}", name("b")), None);
    assert_eq!(pids_of(&socket, "b"), before[1].0, "resized in place");
    assert_eq!(put(format!("{{\"generation\": {}, \"runtime\": \"900ms\"}}", b2["generation"])), 422, "does not fit");

    // TCP: 401 without the token, 200 with it.
    let tcp = |auth: Option<&str>| {
        let mut c = Command::new("curl");
        c.args(["-s", "-o", "/dev/null", "-w", "%{http_code}"]);
        if let Some(a) = auth {
            c.args(["-H", &format!("Authorization: Bearer {a}")]);
        }
        let out = c.arg(format!("http://{port}/v1/node")).output().unwrap();
        String::from_utf8_lossy(&out.stdout).parse::<u16>().unwrap()
    };
    assert_eq!(tcp(None), 401);
    assert_eq!(tcp(Some("wrong-token-wrong-token")), 401);
    assert_eq!(tcp(Some("0123456789abcdef-test-token")), 200);
    let (code, inv) = curl(&socket, "GET", "/v1/node", None);
    assert_eq!(code, 200);
    assert_eq!(inv["mechanism"], if is_v2() { "deadline" } else { "rt_group" });
    assert_eq!((inv["hrtick"].as_bool(), inv["fairServerOff"].as_bool()), (Some(false), Some(false)), "a daemon started without --hrtick or --fair-server-off: {inv}");
    assert_eq!(inv["workloads"]["running"], 3);
    let (_, ev) = curl(&socket, "GET", "/v1/events", None);
    let kinds: Vec<&str> = ev["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    for k in ["admitted", "pending", "removed", "resized"] {
        assert!(kinds.contains(&k), "{kinds:?}");
    }

    // The daemon stops; the workloads keep running; a new daemon re-adopts them (same PIDs).
    let running: Vec<Vec<i64>> = ["b", "c", "d"].iter().map(|n| pids_of(&socket, n)).collect();
    daemon.stop();
    for p in running.iter().flatten() {
        assert!(Path::new(&format!("/proc/{p}")).exists(), "pid {p} survives the daemon");
    }
    let daemon = Daemon::start(state.path(), &socket, None, true);
    let adopted: Vec<Vec<i64>> = ["b", "c", "d"].iter().map(|n| pids_of(&socket, n)).collect();
    assert_eq!(running, adopted);
    let (_, ev) = curl(&socket, "GET", "/v1/events", None);
    assert_eq!(ev["events"].as_array().unwrap().iter().filter(|e| e["kind"] == "adopted").count(), 3, "{ev}");
    // --reset-on-exit: everything undone.
    daemon.stop();
    assert!(!state.path().join("node").exists());
    assert!(!Path::new("/sys/fs/cgroup/cpu/rtslice").exists() && !Path::new("/sys/fs/cgroup/rtslice.slice").exists());
    let partitions: Vec<_> = std::fs::read_dir("/sys/fs/cgroup")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(rtslice_host::cgroup::V2_PARTITION_PREFIX))
        .map(|e| e.path())
        .collect();
    assert!(partitions.is_empty(), "the node's partitions are gone: {partitions:?}");
    for p in running.iter().flatten() {
        let alive = std::fs::read_to_string(format!("/proc/{p}/stat")).map(|s| !s.contains(") Z")).unwrap_or(false);
        assert!(!alive, "pid {p} stopped by the reset");
    }
}

#[test]
fn the_checked_in_openapi_document_is_the_served_one() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
    let text = std::fs::read_to_string(&file).expect("docs/openapi.json");
    let checked_in: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        checked_in,
        rtslice_node::openapi_document(),
        "docs/openapi.json is out of date: rtslice daemon --openapi > docs/openapi.json"
    );
}
