//! The node service's side of the NRI plugin on the real kernel (root, KernelLock), without
//! Kubernetes: a kubelet-like cgroup tree (`kubepods/pod<uid>/<container id>` in the v1 cpu and
//! cpuset hierarchies, or in the cgroup2 tree of an HCBS kernel) with a process already in it, as
//! runc leaves it; then create (admission by the live planner), start (in place: the container's RT
//! budget, the budgets of the ancestors that must hold it — every ancestor on v1, the root group on
//! HCBS —, its threads' policies, threads born later), refusals with the planner's reason and the
//! annotations' located errors, and release — the process never leaves its cgroup and every value
//! comes back.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rtslice_testkit::{root_or_skip, skip, KernelLock, KillOnDrop};
use serde_json::{json, Value};

fn curl(socket: &Path, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut c = Command::new("curl");
    c.args(["-s", "-o", "-", "-w", "\n%{http_code}", "--unix-socket"]).arg(socket).args(["-X", method]);
    if let Some(b) = body {
        c.args(["-H", "Content-Type: application/json", "--data-binary", &b.to_string()]);
    }
    let out = c.arg(format!("http://rtslice{path}")).output().expect("curl is installed");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (json, code) = text.rsplit_once('\n').expect("curl printed the status");
    (code.trim().parse().unwrap(), serde_json::from_str(json).unwrap_or(Value::Null))
}

/// Where kubelet's groups would be on this host, and how a group's RT budget reads there.
enum Kube {
    /// cgroup v1 with RT group scheduling: the cpu and cpuset hierarchies.
    V1 { cpu: PathBuf, cpuset: PathBuf },
    /// An HCBS kernel's cgroup2 tree (`cpu.rt.max`).
    Hcbs { root: PathBuf },
}

impl Kube {
    fn cpu(&self) -> &Path {
        match self {
            Kube::V1 { cpu, .. } => cpu,
            Kube::Hcbs { root } => root,
        }
    }
    fn cpuset(&self) -> &Path {
        match self {
            Kube::V1 { cpuset, .. } => cpuset,
            Kube::Hcbs { root } => root,
        }
    }
    fn mounts(&self) -> Vec<PathBuf> {
        match self {
            Kube::V1 { cpu, cpuset } => vec![cpu.clone(), cpuset.clone()],
            Kube::Hcbs { root } => vec![root.clone()],
        }
    }
    /// A group's RT budget as "runtime period" (µs): v1's two files, HCBS's `cpu.rt.max`.
    fn budget(&self, dir: &Path) -> String {
        match self {
            Kube::V1 { .. } => format!("{} {}", read(&dir.join("cpu.rt_runtime_us")), read(&dir.join("cpu.rt_period_us"))),
            Kube::Hcbs { .. } => read(&dir.join("cpu.rt.max")),
        }
    }
    /// The groups whose budgets must hold a container's: every ancestor on v1 (the kernel wants a
    /// parent's at least its children's sum), the root group on HCBS (kubelet's groups stay `max`,
    /// deferring to it).
    fn holders(&self, ancestors: &[PathBuf]) -> Vec<PathBuf> {
        match self {
            Kube::V1 { .. } => ancestors.to_vec(),
            Kube::Hcbs { root } => vec![root.clone()],
        }
    }
}

/// The runtime of a "runtime period" budget scaled to a 1 s period (`max` as unlimited).
fn per_second(budget: &str) -> i64 {
    let mut it = budget.split_whitespace();
    let (r, p) = (it.next().unwrap(), it.next().unwrap().parse::<i64>().unwrap());
    match r {
        "max" | "-1" => i64::MAX,
        r => r.parse::<i64>().unwrap() * 1_000_000 / p.max(1),
    }
}

/// A kubelet-like tree in the cpu and cpuset hierarchies (one tree on v2, its parents delegating
/// cpu and cpuset as kubelet's do), removed (deepest first) on drop with the root's
/// `cgroup.subtree_control` as it was. A type rather than an `OnDrop`: it builds the tree and finds
/// its leaves (`leaf`) for the test.
struct KubeTree {
    dirs: Vec<PathBuf>,
    /// v2: the root's `cgroup.subtree_control` before (restored after the tree is gone).
    root_control: Option<(PathBuf, String)>,
}

impl KubeTree {
    fn new(kube: &Kube, rel: &[String]) -> KubeTree {
        let mut t = KubeTree { dirs: Vec::new(), root_control: None };
        let v2 = matches!(kube, Kube::Hcbs { .. });
        for m in kube.mounts() {
            let mut d = m.clone();
            if v2 {
                let f = m.join("cgroup.subtree_control");
                t.root_control = Some((f.clone(), read(&f)));
            }
            for part in rel {
                let parent = d.clone();
                if v2 {
                    let f = parent.join("cgroup.subtree_control");
                    std::fs::write(&f, "+cpu +cpuset").unwrap_or_else(|e| panic!("{}: {e}", f.display()));
                }
                d = d.join(part);
                std::fs::create_dir(&d).unwrap_or_else(|e| panic!("creating {}: {e}", d.display()));
                t.dirs.push(d.clone());
                for f in ["cpuset.cpus", "cpuset.mems"] {
                    if let Ok(v) = std::fs::read_to_string(parent.join(f)) {
                        std::fs::write(d.join(f), v.trim()).unwrap();
                    }
                }
            }
        }
        t
    }
    fn leaf(&self, mount: &Path) -> PathBuf {
        self.dirs.iter().filter(|d| d.starts_with(mount)).max_by_key(|d| d.components().count()).unwrap().clone()
    }
}

impl Drop for KubeTree {
    fn drop(&mut self) {
        let mut dirs = self.dirs.clone();
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for d in dirs {
            for _ in 0..50 {
                if std::fs::remove_dir(&d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if let Some((f, before)) = &self.root_control {
            let had: Vec<&str> = before.split_whitespace().collect();
            let off: Vec<String> = ["cpu", "cpuset"].iter().filter(|c| !had.contains(c)).map(|c| format!("-{c}")).collect();
            if !off.is_empty() {
                let _ = std::fs::write(f, off.join(" "));
            }
        }
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).trim().to_string()
}

fn enter(dirs: &[PathBuf], pid: u32) {
    for d in dirs {
        std::fs::write(d.join("cgroup.procs"), pid.to_string()).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    }
}

fn policy(pid: u32) -> String {
    format!("{}", rtslice_host::sched::get_attr(pid as i32).unwrap())
}

/// The daemon in a thread, reset on exit. Stopped and joined by `stop`, or on drop — also when the
/// test panics: a daemon killed with the test process would leave its node base behind, and every
/// later daemon on the host would refuse to start until it is removed by hand.
struct Daemon {
    tx: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<rtslice_node::Result<()>>>,
}

impl Daemon {
    fn stop(mut self) -> rtslice_node::Result<()> {
        self.tx.take().map(|tx| tx.send(()));
        self.thread.take().expect("running").join().expect("the daemon's thread")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.tx.take().map(|tx| tx.send(()));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start_daemon(state: &Path, socket: &Path) -> Daemon {
    let opts = rtslice_node::DaemonOptions {
        service: rtslice_node::ServiceOptions {
            state_dir: state.to_path_buf(),
            node: Default::default(),
            mechanism: None,
            grace: Duration::from_secs(2),
            launch_env: Vec::new(),
            boot_id_file: None,
            resctrl: None,
            hrtick: false,
            fair_server_off: false,
            oci: Default::default(),
            // `ran` (these tests' pods) may ask for all of it; `lab` for 0.05 CPU; no one else for anything.
            access: rtslice_spec::access::parse_access(
                "apiVersion: rtslice/v1\naccess:\n  namespaces:\n    ran: {dedicated: true, deadline: true, irqs: true}\n    lab: {bandwidth: 0.05}\n",
                "access.yaml",
            )
            .unwrap(),
        },
        socket: socket.to_path_buf(),
        listen: None,
        token_file: None,
        tls: None,
        reset_on_exit: true,
        telemetry: None,
    };
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let daemon = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        rt.block_on(rtslice_node::run_until(opts, async move {
            let _ = rx.await;
        }))
    });
    let d = Daemon { tx: Some(tx), thread: Some(daemon) };
    wait_for("the daemon's socket", || std::os::unix::net::UnixStream::connect(socket).is_ok());
    d
}

/// Where kubelet's groups would be, when this host can hold reservations inside them (RT group
/// budgets: cgroup v1 with RT_GROUP_SCHED, or an HCBS kernel's cgroup v2 — the node's default
/// mechanism there) on at least two CPUs; else the skip, named.
fn kubelet_like_host_or_skip() -> Option<Kube> {
    let layout = rtslice_host::cgroup::CgroupLayout::detect().unwrap();
    let hcbs = rtslice_host::cgroup::hcbs_available(&layout);
    let (mechanism, need) = if hcbs { (rtslice_host::Mechanism::Hcbs, skip::HCBS) } else { (rtslice_host::Mechanism::RtGroup, skip::RT_GROUPS) };
    if let Err(why) = rtslice_host::inplace::reservations_supported(mechanism) {
        skip::skip(need, why);
        return None;
    }
    if !skip::cpus_or_skip(2) {
        return None;
    }
    if hcbs {
        return Some(Kube::Hcbs { root: layout.v2.clone().expect("HCBS is on cgroup v2") });
    }
    let (Some(cpu), Some(cpuset)) = (rtslice_testkit::cgroup_mount(&["cpu"]), rtslice_testkit::cgroup_mount(&["cpuset"])) else {
        skip::skip(skip::CGROUP_V1, "no v1 cpu and cpuset hierarchies");
        return None;
    };
    Some(Kube::V1 { cpu, cpuset })
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One test's container as runc leaves it: a kubelet-like tree (`kubepods-<tag><pid>/pod<uid>/<id>`)
/// with a process in its leaves, and where its daemon keeps its state and socket.
struct Fixture {
    /// Held for its drop (the state directory goes with it), as `tree` is.
    _tmp: tempfile::TempDir,
    state: PathBuf,
    socket: PathBuf,
    uid: String,
    cid: String,
    rel: Vec<String>,
    cpu_leaf: PathBuf,
    cpuset_leaf: PathBuf,
    /// The container's first process (`sleep`), already in its cgroups.
    first: KillOnDrop,
    // Last: removed after the processes are gone.
    _tree: KubeTree,
}

fn fixture(kube: &Kube, tag: &str) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let (state, socket) = (tmp.path().join("state"), tmp.path().join("api.sock"));
    let me = std::process::id();
    let (uid, cid) = (format!("uid-{tag}{me}"), format!("{tag}{me}"));
    let rel = vec![format!("kubepods-{tag}{me}"), format!("pod{uid}"), cid.clone()];
    let tree = KubeTree::new(kube, &rel);
    let (cpu_leaf, cpuset_leaf) = (tree.leaf(kube.cpu()), tree.leaf(kube.cpuset()));
    let first = KillOnDrop(Command::new("sleep").arg("600").spawn().unwrap());
    enter(&[cpu_leaf.clone(), cpuset_leaf.clone()], first.id());
    Fixture { _tmp: tmp, state, socket, uid, cid, rel, cpu_leaf, cpuset_leaf, first, _tree: tree }
}

#[test]
fn containers_are_admitted_applied_in_place_and_released() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let Some(kube) = kubelet_like_host_or_skip() else { return };
    let cpu = kube.cpu().to_path_buf();
    let f = fixture(&kube, "t");
    let (state, socket, uid, cid, rel) = (&f.state, &f.socket, &f.uid, &f.cid, &f.rel);
    let (cpu_leaf, cpuset_leaf) = (f.cpu_leaf.clone(), f.cpuset_leaf.clone());
    let kubepods = cpu.join(&rel[0]);
    let pod_dir = kubepods.join(&rel[1]);
    // Every budget the test looks at: kubelet's groups, and the root group on HCBS.
    let watched: Vec<PathBuf> = [kubepods.clone(), pod_dir.clone(), cpu_leaf.clone()].into_iter().chain(kube.holders(&[]).into_iter()).collect();
    let before: Vec<String> = watched.iter().map(|d| kube.budget(d)).collect();
    let root_budget = std::fs::read_to_string(cpu.join("rtslice").join("cpu.rt_runtime_us")).ok().and_then(|s| s.trim().parse::<i64>().ok());

    // The container's process, already in its cgroups (as runc leaves it).
    let mut procs = Vec::new();
    let pid = f.first.id();

    let daemon = start_daemon(state, socket);

    let annotations = json!({
        "rtslice.io/reservation.du": "{runtime: 100ms, period: 1s, count: 1}",
        "rtslice.io/threads.du": "[{match: ^sleep$, policy: fifo, priority: 10}]",
    });
    let create = |id: &str, container: &str, ann: &Value| {
        curl(&socket, "POST", "/v1/containers", Some(&json!({"id": id, "namespace": "ran", "pod": "vbs1", "podUid": uid, "container": container, "annotations": ann})))
    };

    // Not rtslice's business: no annotation applies to the sidecar.
    assert_eq!(create("side", "log", &annotations).0, 204);
    // Invalid annotations: the spec's located errors, naming the annotation.
    let (code, body) = create("bad", "du", &json!({"rtslice.io/threads.du": "[{match: x, policy: fif}]", "rtslice.io/reservation.du": "{runtime: 1ms}"}));
    assert_eq!(code, 400, "{body}");
    assert!(body["errors"][0].as_str().unwrap().starts_with("rtslice.io/threads.du:1:"), "{body}");
    // Deadline rules cannot work inside kubelet's tree: refused with why.
    let (code, body) = create("dl", "du", &json!({"rtslice.io/reservation.du": "{runtime: 1ms, period: 10ms}", "rtslice.io/threads.du": "[{match: x, policy: deadline}]"}));
    assert_eq!(code, 422, "{body}");
    assert!(body["error"].as_str().unwrap().contains("SCHED_DEADLINE inside kubelet's cgroups"), "{body}");

    let (code, body) = create(&cid, "du", &annotations);
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["workload"], "ran.vbs1.du");
    let cpus = body["cpus"].as_str().unwrap().to_string();
    // Idempotent: the runtime may retry.
    assert_eq!(create(&cid, "du", &annotations).1["cpus"], body["cpus"]);

    // A container that does not fit next to it fails creation with the planner's reason.
    let n = rtslice_host::facts::online_cpus().len();
    let (code, body) = create("big", "du2", &json!({"rtslice.io/reservation.du2": format!("{{runtime: 900ms, period: 1s, count: {n}}}")}));
    assert_eq!(code, 422, "{body}");
    assert!(body["error"].as_str().unwrap().contains("asks for 90%"), "{body}");

    let (code, inv) = curl(&socket, "GET", "/v1/inventory", None);
    assert_eq!(code, 200, "{inv}");
    assert_eq!(inv["pods"], json!([uid]));
    assert!(inv["perCpu"].as_array().unwrap().iter().any(|c| c["by"].as_array().unwrap().iter().any(|s| s["workload"] == "ran.vbs1.du")), "{inv}");

    let (code, body) = curl(&socket, "POST", &format!("/v1/containers/{cid}/start"), Some(&json!({"pid": pid})));
    assert_eq!(code, 200, "{body}");
    assert_eq!(kube.budget(&cpu_leaf), "100000 1000000");
    assert_eq!(read(&cpuset_leaf.join("cpuset.cpus")), cpus);
    for d in kube.holders(&[kubepods.clone(), pod_dir.clone()]) {
        assert!(per_second(&kube.budget(&d)) >= 100_000, "{} holds {}", d.display(), kube.budget(&d));
    }
    if let Kube::Hcbs { .. } = kube {
        // kubelet's groups defer to the root: none of them was given a budget.
        for d in [&kubepods, &pod_dir] {
            assert!(kube.budget(d).starts_with("max"), "{}: {}", d.display(), kube.budget(d));
        }
    }
    assert_eq!(policy(pid), "SCHED_FIFO 10");
    // The process is where runc put it: kubelet's accounting holds it.
    assert!(read(&cpu_leaf.join("cgroup.procs")).lines().any(|l| l == pid.to_string()));
    assert!(read(&cpuset_leaf.join("cgroup.procs")).lines().any(|l| l == pid.to_string()));

    // A process born later in the container gets its rule (the rescan).
    let later = KillOnDrop(Command::new("sleep").arg("601").spawn().unwrap());
    let later_pid = later.id();
    procs.push(later);
    enter(&[cpu_leaf.clone(), cpuset_leaf.clone()], later_pid);
    wait_for("the later thread's rule", || policy(later_pid) == "SCHED_FIFO 10");

    let (code, body) = curl(&socket, "DELETE", &format!("/v1/containers/{cid}"), None);
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["problems"], json!([]));
    assert_eq!(curl(&socket, "DELETE", &format!("/v1/containers/{cid}"), None).0, 404);
    assert_eq!(policy(pid), "SCHED_OTHER nice 0");
    assert_eq!(policy(later_pid), "SCHED_OTHER nice 0");
    let after: Vec<String> = watched.iter().map(|d| kube.budget(d)).collect();
    assert_eq!(after, before, "every RT budget is back ({watched:?})");
    assert!(read(&cpu_leaf.join("cgroup.procs")).lines().any(|l| l == pid.to_string()));
    let (_, inv) = curl(&socket, "GET", "/v1/inventory", None);
    assert_eq!(inv["pods"], json!([]));

    daemon.stop().expect("the daemon stops cleanly");
    if let Some(b) = root_budget {
        // The node was reset on exit: rtslice's own group is gone or back to its budget.
        let now = std::fs::read_to_string(cpu.join("rtslice").join("cpu.rt_runtime_us")).ok().and_then(|s| s.trim().parse::<i64>().ok());
        assert!(now.is_none() || now == Some(b), "rtslice's group budget: {now:?}, was {b}");
    }
    drop(procs);
    drop(f);
}

/// An allocated ResourceClaim as kubelet hands it to the plugin: `bandwidth` on each of `devices`.
fn allocated_claim(uid: &str, name: &str, devices: &[&str], bandwidth: &str, period: &str) -> Value {
    let results: Vec<Value> = devices
        .iter()
        .map(|d| json!({"request": "cpus", "driver": "rtslice.io", "pool": "node-a", "device": d, "consumedCapacity": {"bandwidth": bandwidth}}))
        .collect();
    json!({
        "metadata": {"uid": uid, "namespace": "ran", "name": name},
        "status": {
            "allocation": {"devices": {"results": results, "config": [{"source": "FromClaim", "opaque": {"driver": "rtslice.io", "parameters": {"period": period}}}]}},
            "reservedFor": [{"resource": "pods", "name": "du-0", "uid": "pod-uid"}]
        }
    })
}

#[test]
fn a_dra_claim_is_admitted_at_prepare_and_its_container_takes_its_budget() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let Some(kube) = kubelet_like_host_or_skip() else { return };
    let f = fixture(&kube, "dra");
    let (state, socket, cid, cpu_leaf, cpuset_leaf) = (&f.state, &f.socket, &f.cid, &f.cpu_leaf, &f.cpuset_leaf);
    let me = std::process::id();
    let uid = format!("claim-{me}");
    let before = kube.budget(cpu_leaf);
    let pid = f.first.id();
    let daemon = start_daemon(state, socket);

    // The node's CPUs as devices: each with bandwidth under the cap, shareable, named by its CPU.
    let (code, devs) = curl(&socket, "GET", "/v1/dra/devices", None);
    assert_eq!(code, 200, "{devs}");
    assert_eq!(devs["driver"], "rtslice.io");
    let list = devs["devices"].as_array().unwrap().clone();
    assert!(!list.is_empty(), "{devs}");
    for d in &list {
        assert_eq!(d["name"].as_str().unwrap(), format!("cpu-{}", d["attributes"]["cpu"]["int"]), "{d}");
        let m = rtslice_dra::quantity::parse_milli(d["capacity"]["bandwidth"]["value"].as_str().unwrap()).unwrap();
        assert!(m > 0 && m <= 1000, "{d}");
        assert_eq!(d["allowMultipleAllocations"], true);
    }
    let dev = list.last().unwrap();
    let name = dev["name"].as_str().unwrap().to_string();
    let the_cpu = dev["attributes"]["cpu"]["int"].to_string();
    let capacity = dev["capacity"]["bandwidth"]["value"].clone();

    // Prepare: admitted by the planner; the answer is the environment entry of its CDI device.
    let claim = allocated_claim(&uid, "du", &[&name], "100m", "1s");
    let prepare = |c: &Value| curl(&socket, "POST", "/v1/dra/claims", Some(&json!({"pool": "node-a", "claim": c})));
    let (code, body) = prepare(&claim);
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["cpus"].as_str().unwrap(), the_cpu);
    assert_eq!(body["workload"], "claim.ran.du");
    // The inventory the extender reads lists it in its namespace's sums.
    let (_, inv) = curl(&socket, "GET", "/v1/inventory", None);
    assert_eq!(inv["claims"], json!([{"namespace": "ran", "bandwidth": 0.1}]), "{inv}");
    let env = body["env"][0].as_str().unwrap().to_string();
    assert_eq!(env, rtslice_dra::claim_env(&uid));
    assert_eq!(prepare(&claim), (201, body.clone()), "preparing again gives the same answer");
    // kube-scheduler counts the claim itself: the published capacity does not change.
    let (_, again) = curl(&socket, "GET", "/v1/dra/devices", None);
    let same = again["devices"].as_array().unwrap().iter().find(|d| d["name"] == name.as_str()).unwrap();
    assert_eq!(same["capacity"]["bandwidth"]["value"], capacity);
    // The node's word is final: the whole published capacity on top of the first claim is refused.
    let (code, body) = prepare(&allocated_claim(&format!("big-{me}"), "big", &[&name], capacity.as_str().unwrap(), "1s"));
    assert_eq!(code, 422, "{body}");
    assert!(body["error"].as_str().unwrap().contains("claim ran/big on CPUs"), "{body}");
    // Who may ask: a namespace the access policy does not name, or one over its bandwidth, is refused.
    let mut guest = allocated_claim(&format!("g-{me}"), "g", &[&name], "10m", "1s");
    guest["metadata"]["namespace"] = json!("guests");
    let (code, body) = prepare(&guest);
    assert_eq!(code, 403, "{body}");
    assert!(body["error"].as_str().unwrap().contains("namespace `guests` may not ask for real-time CPUs"), "{body}");
    guest["metadata"]["namespace"] = json!("lab");
    let (code, body) = prepare(&guest);
    assert_eq!(code, 201, "10m fits lab's 0.05 CPU: {body}");
    let mut more = allocated_claim(&format!("m-{me}"), "m", &[&name], "50m", "1s");
    more["metadata"]["namespace"] = json!("lab");
    let (code, body) = prepare(&more);
    assert_eq!(code, 403, "{body}");
    assert!(body["error"].as_str().unwrap().contains("may hold 0.05 CPU(s) of real-time bandwidth on this node; it holds 0.010"), "{body}");
    assert_eq!(curl(&socket, "DELETE", &format!("/v1/dra/claims/g-{me}"), None).0, 200);
    let (code, body) = curl(&socket, "POST", "/v1/containers", Some(&json!({"id": "gc", "namespace": "guests", "pod": "p", "container": "du", "annotations": {"rtslice.io/reservation": "{runtime: 1ms, period: 10ms}"}})));
    assert_eq!(code, 403, "{body}");
    // A pool that is not this node's, an unallocated claim: refused with the reason.
    let (code, body) = curl(&socket, "POST", "/v1/dra/claims", Some(&json!({"pool": "node-b", "claim": claim})));
    assert_eq!(code, 422, "{body}");
    assert!(body["error"].as_str().unwrap().contains("this node's pool is `node-b`"), "{body}");

    // The container that uses it: the claim's CPU and budget, the pod's thread rules.
    let create = |id: &str, env: &[&str], ann: Value| {
        curl(&socket, "POST", "/v1/containers", Some(&json!({"id": id, "namespace": "ran", "pod": "du-0", "podUid": "pod-uid", "container": "du", "annotations": ann, "env": env})))
    };
    let threads = json!({"rtslice.io/threads.du": "[{match: ^sleep$, policy: fifo, priority: 10}]"});
    let (code, body) = create("other", &["RTSLICE_CLAIM_x=no-such-claim"], threads.clone());
    assert_eq!(code, 422, "{body}");
    assert!(body["error"].as_str().unwrap().contains("is not prepared on this node"), "{body}");
    let (code, body) = create("both", &[&env], json!({"rtslice.io/reservation": "{runtime: 1ms, period: 10ms}"}));
    assert_eq!(code, 422, "{body}");
    assert!(body["error"].as_str().unwrap().contains("drop the annotation `rtslice.io/reservation`"), "{body}");
    let (code, body) = create(&cid, &[&env], threads.clone());
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["cpus"].as_str().unwrap(), the_cpu);
    let (code, body) = create("second", &[&env], threads.clone());
    assert_eq!(code, 422, "{body}");
    assert!(body["error"].as_str().unwrap().contains(&format!("is held by container {cid}")), "{body}");
    let (code, body) = curl(&socket, "POST", &format!("/v1/containers/{cid}/start"), Some(&json!({"pid": pid})));
    assert_eq!(code, 200, "{body}");
    assert_eq!(kube.budget(&cpu_leaf), "100000 1000000");
    assert_eq!(read(&cpuset_leaf.join("cpuset.cpus")), the_cpu);
    assert_eq!(policy(pid), "SCHED_FIFO 10");

    // The container stops: its budget goes, the claim holds the bandwidth until kubelet unprepares it.
    assert_eq!(curl(&socket, "DELETE", &format!("/v1/containers/{cid}"), None).0, 200);
    assert_eq!(kube.budget(&cpu_leaf), before);
    assert_eq!(policy(pid), "SCHED_OTHER nice 0");
    let (_, claims) = curl(&socket, "GET", "/v1/dra/claims", None);
    assert_eq!(claims["claims"].as_array().unwrap().len(), 1, "{claims}");
    assert!(claims["claims"][0].get("holder").is_none(), "{claims}");
    assert_eq!(prepare(&allocated_claim(&format!("big-{me}"), "big", &[&name], capacity.as_str().unwrap(), "1s")).0, 422);
    let (code, body) = curl(&socket, "DELETE", &format!("/v1/dra/claims/{uid}"), None);
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["released"], true);
    assert_eq!(curl(&socket, "DELETE", &format!("/v1/dra/claims/{uid}"), None).1["released"], Value::Null, "unpreparing again is not an error");
    let (_, claims) = curl(&socket, "GET", "/v1/dra/claims", None);
    assert_eq!(claims["claims"], json!([]));
    // With the claim gone its bandwidth is free again: the big claim now fits, and goes.
    let (code, body) = prepare(&allocated_claim(&format!("big-{me}"), "big", &[&name], capacity.as_str().unwrap(), "1s"));
    assert_eq!(code, 201, "{body}");
    assert_eq!(curl(&socket, "DELETE", &format!("/v1/dra/claims/big-{me}"), None).0, 200);

    daemon.stop().expect("the daemon stops cleanly");
    assert!(!state.join("claims.json").exists(), "the reset forgets claims");
    drop(f);
}
