//! A node driven through the CRI for one test (cri_pod.rs): the rtslice daemon, containerd with NRI
//! and the rtslice NRI plugin, images made here from busybox, and crictl as the client kubelet
//! would be — everything under one temp dir (a matrix guest mounts tmpfs on /tmp, /run and
//! /var/lib/rtslice and nothing else is writable there), every pod under one cgroup of its own
//! (`/rtslice-cri-<test pid>`, where kubelet has kubepods). Dropped, it stops and removes all of
//! it, also when the test panics; [`CriNode::teardown`] does the same and returns what it could not
//! remove, so the test can assert that nothing is left behind.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::live::{bin, reset_node};

/// The pods' Kubernetes namespace: the access policy names it, with reservations and dedicated
/// CPUs allowed (docs/kubernetes.md "Who may ask").
pub const NAMESPACE: &str = "rtslice-cri-test";
const PAUSE_IMAGE: &str = "docker.io/rtslice/pause:cri-pod";
pub const BUSYBOX_IMAGE: &str = "docker.io/rtslice/busybox:cri-pod";
/// Paths containerd or runc would use whatever they are configured with (containerd's shims keep
/// their sockets in /run/containerd/s): those absent before are the test's to remove.
const FIXED_PATHS: [&str; 4] = ["/run/containerd", "/run/nri", "/var/lib/containerd", "/opt/containerd"];

/// How long a component may take to come up or a CRI call to answer: functional waits, sized for a
/// TCG guest on a loaded host (containerd's start takes tens of seconds there).
const WAIT: Duration = Duration::from_secs(120);

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository's root")
}

/// What the node runs, found where `make test` builds it.
pub struct Binaries {
    /// k8s/build/build.sh's bin directory: containerd, containerd-shim-runc-v2, ctr, crictl.
    pub k8s_bin: PathBuf,
    pub nri: PathBuf,
    pub runc: PathBuf,
}

/// The directory k8s/build/build.sh prints for the pins in k8s/build (the same key over the same
/// files), or a skip naming what is missing.
pub fn binaries() -> Option<Binaries> {
    use rtslice_testkit::skip::{skip, CONTAINERD};
    let repo = repo();
    let build = repo.join("k8s/build");
    let mut pins = Vec::new();
    for f in ["versions.env", "kubernetes/go.sum", "containerd/go.sum", "cri-tools/go.sum"] {
        pins.extend(std::fs::read(build.join(f)).unwrap_or_else(|e| panic!("{}: {e}", build.join(f).display())));
    }
    let key = &sha256_hex(&pins)[..12];
    let cache = PathBuf::from(std::env::var("RTSLICE_K8S_CACHE").unwrap_or_else(|_| "/var/cache/rtslice/k8s".into()));
    let prefix = format!("bin-{key}-");
    let found = std::fs::read_dir(&cache)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&prefix)) && p.join(".complete").exists())
        .max();
    let Some(k8s_bin) = found else {
        skip(CONTAINERD, format!("no {}/{prefix}*: the cluster's binaries for the pins in k8s/build are not built; run k8s/build/build.sh (make test does, first)", cache.display()));
        return None;
    };
    for b in ["containerd", "containerd-shim-runc-v2", "ctr", "crictl"] {
        if !k8s_bin.join(b).exists() {
            skip(CONTAINERD, format!("{} has no {b}; remove that directory and run k8s/build/build.sh", k8s_bin.display()));
            return None;
        }
    }
    // Where `make nri` puts it (the repository's target/, whatever CARGO_TARGET_DIR says).
    let nri = repo.join("target/rtslice-nri");
    if !nri.exists() {
        skip(CONTAINERD, format!("no NRI plugin at {}: build it with `make nri` (make test does, first)", nri.display()));
        return None;
    }
    let Some(runc) = ["/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc", "/usr/local/bin/runc"].iter().map(PathBuf::from).find(|p| p.exists()) else {
        skip("runc", "no runc (make deps installs Debian's)");
        return None;
    };
    Some(Binaries { k8s_bin, nri, runc })
}

fn sha256_hex(data: &[u8]) -> String {
    use std::io::Write;
    let mut c = Command::new("sha256sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("sha256sum (coreutils)");
    c.stdin.take().unwrap().write_all(data).unwrap();
    let out = c.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap_or_default().to_string()
}

/// A pod sandbox made by `crictl runp`.
pub struct Pod {
    pub id: String,
    pub uid: String,
    config: PathBuf,
    /// Its cgroup parent (kubelet's `kubepods/<qos>/pod<uid>`).
    pub cgroup_parent: String,
}

pub struct CriNode {
    pub dir: tempfile::TempDir,
    bins: Binaries,
    pub api_socket: PathBuf,
    containerd_socket: PathBuf,
    crictl_config: PathBuf,
    state: PathBuf,
    /// What it started, in start order (stopped in reverse).
    procs: Vec<(&'static str, Child)>,
    /// `rtslice-cri-<pid>`: the cgroup every pod of the test lives under, at the root of each hierarchy.
    pub cgroup_root: String,
    absent_before: Vec<&'static str>,
    /// Each cgroup2 mount's root `cgroup.subtree_control` before (runc enables controllers on the
    /// way down to a container's cgroup and never disables them).
    controls_before: Vec<(PathBuf, String)>,
    pods: u32,
    torn_down: bool,
}

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) -> Result<Duration, String> {
    let t0 = Instant::now();
    while !ok() {
        if t0.elapsed() > WAIT {
            return Err(format!("{what}: not within {} s", WAIT.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(t0.elapsed())
}

fn cgroup_mounts() -> Vec<rtslice_sys::procfs::CgroupMount> {
    rtslice_sys::procfs::cgroup_mounts().expect("reading /proc/self/mountinfo")
}

impl CriNode {
    /// Starts the daemon, containerd and the NRI plugin, and imports the two images. Panics with the
    /// components' logs when one does not come up.
    pub fn start(bins: Binaries) -> CriNode {
        let dir = tempfile::tempdir().expect("a temp dir");
        let d = dir.path().to_path_buf();
        for sub in ["logs", "containerd/root", "containerd/state", "containerd/opt", "runc", "nri/plugins", "nri/conf.d", "cni", "images", "pod-logs"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        let mut node = CriNode {
            api_socket: d.join("api.sock"),
            containerd_socket: d.join("containerd/containerd.sock"),
            crictl_config: d.join("crictl.yaml"),
            state: d.join("state"),
            procs: Vec::new(),
            cgroup_root: format!("rtslice-cri-{}", std::process::id()),
            absent_before: FIXED_PATHS.into_iter().filter(|p| !Path::new(p).exists()).collect(),
            controls_before: cgroup_mounts()
                .into_iter()
                .filter(|m| m.unified)
                .filter_map(|m| std::fs::read_to_string(m.path.join("cgroup.subtree_control")).ok().map(|c| (m.path.clone(), c.trim().to_string())))
                .collect(),
            pods: 0,
            torn_down: false,
            bins,
            dir,
        };
        let t0 = Instant::now();
        node.make_pods_root();
        node.start_daemon();
        node.make_images();
        node.start_containerd();
        node.start_nri();
        eprintln!("the CRI node (daemon, containerd with NRI, the NRI plugin, two images) came up in {:.1} s", t0.elapsed().as_secs_f64());
        node
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join("logs").join(format!("{name}.log"))
    }

    fn spawn(&mut self, name: &'static str, cmd: &mut Command) {
        let log = std::fs::File::create(self.log(name)).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name} ({:?}): {e}", cmd.get_program()));
        self.procs.push((name, child));
    }

    /// The last lines of every component's log, for a failure message.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        for (name, _) in &self.procs {
            let text = std::fs::read_to_string(self.log(name)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            s.push_str(&format!("\n--- {name} (last lines of {}):\n", self.log(name).display()));
            for l in &lines[lines.len().saturating_sub(12)..] {
                s.push_str(&format!("    {l}\n"));
            }
        }
        s
    }

    /// The pods' root cgroup in every hierarchy, made before the daemon starts, as kubelet makes
    /// kubepods at its start before the node service (a DaemonSet) comes up. The order matters on
    /// cgroup v1: a daemon started first makes its own cpuset exclusive over every CPU (partitions
    /// for dedicated CPUs and SCHED_DEADLINE), and runc could then give a pod's cpuset no CPU; one
    /// started after finds kubelet's cpuset beside it and runs without partitions, as on a node.
    fn make_pods_root(&self) {
        for m in cgroup_mounts() {
            let d = m.path.join(&self.cgroup_root);
            std::fs::create_dir(&d).unwrap_or_else(|e| panic!("creating the pods' cgroup {}: {e}", d.display()));
            if !m.unified && m.has_controller("cpuset") {
                // A new v1 cpuset starts empty: the parent's CPUs and memory nodes, as kubelet writes.
                for f in ["cpuset.cpus", "cpuset.mems"] {
                    let v = std::fs::read_to_string(m.path.join(f)).unwrap_or_default();
                    std::fs::write(d.join(f), v.trim()).unwrap_or_else(|e| panic!("writing {}: {e}", d.join(f).display()));
                }
            }
        }
    }

    fn start_daemon(&mut self) {
        let access = self.dir.path().join("access.yaml");
        std::fs::write(&access, format!("apiVersion: rtslice/v1\naccess:\n  namespaces:\n    {NAMESPACE}: {{reservation: true, dedicated: true}}\n")).unwrap();
        // The default mechanism (HCBS, else RT groups, else SCHED_DEADLINE): the node's, as a
        // DaemonSet runs it. No tracer: the test reads the kernel, not /metrics.
        let mut cmd = Command::new(bin());
        cmd.args(["daemon", "--reset-on-exit", "--no-trace", "--grace", "1", "--state-dir"])
            .arg(&self.state)
            .arg("--socket")
            .arg(&self.api_socket)
            .arg("--access")
            .arg(&access);
        self.spawn("daemon", &mut cmd);
        let socket = self.api_socket.clone();
        if let Err(e) = wait_until("the rtslice daemon's socket", || std::os::unix::net::UnixStream::connect(&socket).is_ok()) {
            panic!("{e}{}", self.logs());
        }
    }

    /// A sandbox image (busybox sleeping, the pause container's part) and a busybox image, made by
    /// k8s/images/mkimage.py from the host's static busybox: no Go (the guests have none), no registry.
    fn make_images(&self) {
        let busybox = Path::new("/bin/busybox");
        assert!(is_static_elf(busybox), "/bin/busybox is missing or not statically linked: apt-get install busybox-static (make deps)");
        let mkimage = repo().join("k8s/images/mkimage.py");
        for (file, name, entrypoint) in [("pause.tar", PAUSE_IMAGE, r#"["/bin/sleep", "2147483647"]"#), ("busybox.tar", BUSYBOX_IMAGE, r#"["/bin/sh"]"#)] {
            let out = Command::new("python3")
                .arg(&mkimage)
                .arg(self.dir.path().join("images").join(file))
                .args([name, "--entrypoint", entrypoint, "--file", "/bin/busybox:/bin/busybox", "--symlink", "/bin/sh:busybox", "--symlink", "/bin/sleep:busybox"])
                .output()
                .expect("python3 (make deps)");
            assert!(out.status.success(), "mkimage.py {file}: {}", String::from_utf8_lossy(&out.stderr));
        }
    }

    fn start_containerd(&mut self) {
        let d = self.dir.path().to_path_buf();
        let p = |s: &str| d.join(s).display().to_string();
        // lib.sh's start_containerd, trimmed: no CNI network (the pods use the host's), no CDI, every
        // path under the temp dir, NRI on with timeouts a TCG guest's node service can meet (the
        // default 2 s request timeout would fail a container's creation there).
        let config = format!(
            r#"version = 3
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{sock}"

[ttrpc]
  address = "{sock}.ttrpc"

[plugins.'io.containerd.internal.v1.opt']
  path = "{opt}"

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{cni}"
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        Root = "{runc_root}"
        SystemdCgroup = false

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{PAUSE_IMAGE}"

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = "{nri}"
  plugin_path = "{nri_plugins}"
  plugin_config_path = "{nri_conf}"
  plugin_registration_timeout = "60s"
  plugin_request_timeout = "60s"
"#,
            root = p("containerd/root"),
            state = p("containerd/state"),
            sock = self.containerd_socket.display(),
            opt = p("containerd/opt"),
            cni = p("cni"),
            runc = self.bins.runc.display(),
            runc_root = p("runc"),
            nri = p("nri/nri.sock"),
            nri_plugins = p("nri/plugins"),
            nri_conf = p("nri/conf.d"),
        );
        let file = d.join("containerd.toml");
        std::fs::write(&file, config).unwrap();
        assert!(
            std::fs::read_to_string("/proc/filesystems").unwrap_or_default().contains("\toverlay\n"),
            "this kernel has no overlayfs (/proc/filesystems), which containerd's snapshotter needs: modprobe overlay \
             (the kernel matrix's guests load it from their initramfs: kernels/matrix.sh)"
        );
        // containerd finds its shim on PATH.
        let path = format!("{}:{}", self.bins.k8s_bin.display(), std::env::var("PATH").unwrap_or_default());
        let mut cmd = Command::new(self.bins.k8s_bin.join("containerd"));
        cmd.arg("--config").arg(&file).env("PATH", path);
        self.spawn("containerd", &mut cmd);
        let ctr = |args: &[&str]| Command::new(self.bins.k8s_bin.join("ctr")).arg("--address").arg(&self.containerd_socket).args(args).output().unwrap();
        if let Err(e) = wait_until("containerd answering `ctr version`", || ctr(&["version"]).status.success()) {
            panic!("{e}{}", self.logs());
        }
        for image in ["pause.tar", "busybox.tar"] {
            let tar = d.join("images").join(image);
            let out = ctr(&["-n", "k8s.io", "images", "import", &tar.display().to_string()]);
            assert!(out.status.success(), "ctr images import {image}: {}{}", String::from_utf8_lossy(&out.stderr), self.logs());
        }
    }

    fn start_nri(&mut self) {
        let mut cmd = Command::new(&self.bins.nri);
        cmd.arg("--nri-socket").arg(self.dir.path().join("nri/nri.sock")).arg("--socket").arg(&self.api_socket);
        self.spawn("nri-plugin", &mut cmd);
        // Containers created before the runtime has synchronized with the plugin would not be
        // rtslice's: wait for the plugin's own line (k8s/nri main.go, Synchronize).
        let log = self.log("nri-plugin");
        if let Err(e) = wait_until("the NRI plugin synchronized with containerd", || std::fs::read_to_string(&log).is_ok_and(|t| t.contains("rtslice-nri: synchronized"))) {
            panic!("{e} (a plugin built before k8s/nri had its Synchronize handler never says so: rebuild it with `make nri`){}", self.logs());
        }
    }

    /// crictl against this node's containerd (its own config file: the endpoints and a timeout a
    /// TCG guest meets).
    pub fn crictl(&self, args: &[&str]) -> Output {
        if !self.crictl_config.exists() {
            let sock = self.containerd_socket.display();
            std::fs::write(&self.crictl_config, format!("runtime-endpoint: unix://{sock}\nimage-endpoint: unix://{sock}\ntimeout: 120\npull-image-on-create: false\n")).unwrap();
        }
        Command::new(self.bins.k8s_bin.join("crictl")).arg("--config").arg(&self.crictl_config).args(args).output().expect("running crictl")
    }

    /// crictl, which must succeed: its output's last line (an id, for runp and create).
    pub fn crictl_ok(&self, args: &[&str]) -> String {
        let out = self.crictl(args);
        assert!(out.status.success(), "crictl {}: {}{}", args.join(" "), String::from_utf8_lossy(&out.stderr), self.logs());
        String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().trim().to_string()
    }

    fn write_json(&self, name: &str, v: &Value) -> PathBuf {
        let f = self.dir.path().join(name);
        std::fs::write(&f, serde_json::to_vec_pretty(v).unwrap()).unwrap();
        f
    }

    /// `crictl runp`: a pod sandbox in the host's network (no CNI here) with these annotations,
    /// under `/<cgroup_root>/pod<uid>` as kubelet puts one under kubepods.
    pub fn run_pod(&mut self, name: &str, annotations: &[(&str, &str)]) -> Pod {
        self.pods += 1;
        let uid = format!("{}-{}", self.cgroup_root, self.pods);
        let cgroup_parent = format!("/{}/pod{uid}", self.cgroup_root);
        let annotations: serde_json::Map<String, Value> = annotations.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        let logs = self.dir.path().join("pod-logs").join(&uid);
        std::fs::create_dir_all(&logs).unwrap();
        // Namespace modes (CRI): network NODE (2), pid CONTAINER (1), as kubelet asks for a
        // hostNetwork pod.
        let config = self.write_json(
            &format!("pod-{uid}.json"),
            &json!({
                "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid, "attempt": 0},
                "log_directory": logs,
                "annotations": annotations,
                "linux": {"cgroup_parent": cgroup_parent, "security_context": {"namespace_options": {"network": 2, "pid": 1}}}
            }),
        );
        let id = self.crictl_ok(&["runp", &config.display().to_string()]);
        Pod { id, uid, config, cgroup_parent }
    }

    /// `crictl create`: the container's id, or crictl's error output (a refusal carries the node
    /// service's reason there).
    pub fn create(&self, pod: &Pod, name: &str, command: &[&str]) -> Result<String, String> {
        let config = self.write_json(
            &format!("container-{}-{name}.json", pod.uid),
            &json!({
                "metadata": {"name": name},
                "image": {"image": BUSYBOX_IMAGE},
                "command": command,
                "log_path": format!("{name}.log"),
                "linux": {"security_context": {"namespace_options": {"network": 2, "pid": 1}}}
            }),
        );
        let out = self.crictl(&["create", "--no-pull", &pod.id, &config.display().to_string(), &pod.config.display().to_string()]);
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// The container's process (`crictl inspect`: info.pid).
    pub fn pid(&self, container: &str) -> i32 {
        let out = self.crictl_ok_json(&["inspect", container]);
        out["info"]["pid"].as_i64().unwrap_or_else(|| panic!("crictl inspect {container} has no info.pid: {out}")) as i32
    }

    fn crictl_ok_json(&self, args: &[&str]) -> Value {
        let out = self.crictl(args);
        assert!(out.status.success(), "crictl {}: {}{}", args.join(" "), String::from_utf8_lossy(&out.stderr), self.logs());
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("crictl {}: not JSON ({e}): {}", args.join(" "), String::from_utf8_lossy(&out.stdout)))
    }

    /// What a kubelet does when a pod goes: the container stopped and removed, then the sandbox.
    pub fn remove_container(&self, container: &str) {
        self.crictl_ok(&["stop", container]);
        self.crictl_ok(&["rm", container]);
    }

    pub fn remove_pod(&self, pod: &Pod) {
        self.crictl_ok(&["stopp", &pod.id]);
        self.crictl_ok(&["rmp", &pod.id]);
    }

    /// A GET of the daemon's API over its unix socket: the JSON body of a 2xx answer.
    pub fn api(&self, path: &str) -> Value {
        let out = Command::new("curl").args(["-s", "-f", "--unix-socket"]).arg(&self.api_socket).arg(format!("http://rtslice{path}")).output().expect("curl (make deps)");
        assert!(out.status.success(), "GET {path} from the daemon: curl exit {:?}{}", out.status.code(), self.logs());
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("GET {path}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
    }

    /// The node's reservation mechanism, as the daemon reports it (`GET /v1/node`).
    pub fn mechanism(&self) -> String {
        let node = self.api("/v1/node");
        node["mechanism"].as_str().unwrap_or_else(|| panic!("GET /v1/node has no mechanism: {node}")).to_string()
    }

    /// The containers the daemon holds (`GET /v1/containers`).
    pub fn containers(&self) -> Vec<Value> {
        self.api("/v1/containers")["containers"].as_array().cloned().unwrap_or_default()
    }

    /// Stops and removes everything the node started or made; returns what is still there (empty:
    /// nothing left behind).
    pub fn teardown(&mut self) -> Vec<String> {
        self.torn_down = true;
        let mut left = Vec::new();
        let dir = self.dir.path().display().to_string();
        // 1. Pods first, while the plugin and the daemon are up to release what they applied. A
        // test that failed half-way may leave FIFO threads that never block: the runtime kills a
        // container's init alone, which such threads starve, so every process in the pods' cgroups
        // is killed first (after a passing test there is none).
        for pid in self.processes_in_cgroups() {
            left.push(format!("process {pid} ({}) in the pods' cgroups: killed", comm(pid)));
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
        if self.procs.iter().any(|(n, _)| *n == "containerd") {
            let out = self.crictl(&["rmp", "--force", "--all"]);
            if !out.status.success() {
                left.push(format!("crictl rmp --force --all: {}", String::from_utf8_lossy(&out.stderr).trim()));
            }
        }
        // 2. In reverse start order — the plugin, containerd, the daemon (--reset-on-exit undoes the
        // node) —: SIGTERM, then SIGKILL after a grace a loaded guest needs.
        while let Some((name, mut child)) = self.procs.pop() {
            let grace = if name == "daemon" { 60 } else { 30 };
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let t0 = Instant::now();
            while child.try_wait().ok().flatten().is_none() && t0.elapsed() < Duration::from_secs(grace) {
                std::thread::sleep(Duration::from_millis(50));
            }
            if child.try_wait().ok().flatten().is_none() {
                left.push(format!("{name} (pid {}) ignored SIGTERM for {grace} s: killed", child.id()));
                let _ = child.kill();
            }
            let _ = child.wait();
            if name == "daemon" {
                // What a killed daemon would have left applied.
                drop(reset_node(self.state.clone()));
            }
        }
        // 3. Whatever is left of the containers and their shims: processes in our cgroups, or
        // naming our temp dir (shims carry containerd's address, runc its root).
        for pid in self.processes(&dir) {
            left.push(format!("process {pid} ({}) still running: killed", comm(pid)));
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
        let _ = wait_until_quiet(|| self.processes(&dir).is_empty());
        // 4. Mounts under the temp dir (container rootfs overlays, sandbox shm), deepest first.
        for m in mounts_under(self.dir.path()).into_iter().rev() {
            let ok = Command::new("umount").arg(&m).status().is_ok_and(|s| s.success()) || Command::new("umount").arg("-l").arg(&m).status().is_ok_and(|s| s.success());
            left.push(format!("{} was still mounted{}", m.display(), if ok { ": unmounted" } else { " and cannot be unmounted" }));
        }
        // 5. The pods' cgroups (kubelet removes its pod groups; runc only the containers'), deepest
        // first, in every hierarchy.
        for dir in self.cgroup_dirs() {
            let mut all: Vec<PathBuf> = walk_dirs(&dir);
            all.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
            for d in all {
                let removed = (0..100).any(|_| {
                    let ok = std::fs::remove_dir(&d).is_ok() || !d.exists();
                    if !ok {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    ok
                });
                if !removed {
                    left.push(format!("cgroup {} cannot be removed", d.display()));
                }
            }
        }
        // 6. Controllers runc enabled at the root of a cgroup2 tree.
        for (root, before) in &self.controls_before {
            let file = root.join("cgroup.subtree_control");
            let now = std::fs::read_to_string(&file).unwrap_or_default();
            for c in now.split_whitespace().filter(|c| !before.split_whitespace().any(|b| b == *c)) {
                if let Err(e) = std::fs::write(&file, format!("-{c}")) {
                    left.push(format!("{}: cannot disable {c} again (enabled by runc for the pods): {e}", file.display()));
                }
            }
        }
        // 7. Fixed paths containerd made.
        for p in &self.absent_before {
            if Path::new(p).exists() && mounts_under(Path::new(p)).is_empty() {
                let _ = std::fs::remove_dir_all(p);
            }
            if Path::new(p).exists() {
                left.push(format!("{p} did not exist before the test and cannot be removed"));
            }
        }
        left
    }

    /// The directories of `cgroup_root` in every cgroup hierarchy that has one.
    fn cgroup_dirs(&self) -> Vec<PathBuf> {
        cgroup_mounts().into_iter().map(|m| m.path.join(&self.cgroup_root)).filter(|d| d.exists()).collect()
    }

    /// Processes in the pods' cgroups, in any hierarchy.
    fn processes_in_cgroups(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = Vec::new();
        for d in self.cgroup_dirs() {
            for g in walk_dirs(&d) {
                let procs = std::fs::read_to_string(g.join("cgroup.procs")).unwrap_or_default();
                pids.extend(procs.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
            }
        }
        pids.sort();
        pids.dedup();
        pids
    }

    /// Processes in our cgroups, or whose command line names `dir`.
    fn processes(&self, dir: &str) -> Vec<i32> {
        let mut pids = self.processes_in_cgroups();
        let me = std::process::id() as i32;
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
            if pid != me && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(dir)) {
                pids.push(pid);
            }
        }
        pids.sort();
        pids.dedup();
        pids
    }
}

impl Drop for CriNode {
    fn drop(&mut self) {
        if !self.torn_down {
            for l in self.teardown() {
                eprintln!("cri node teardown: {l}");
            }
        }
    }
}

fn wait_until_quiet(mut ok: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while !ok() {
        if t0.elapsed() > Duration::from_secs(10) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

pub fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim().to_string()
}

/// `dir` and every directory below it.
pub fn walk_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        for e in std::fs::read_dir(&out[i]).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.push(e.path());
            }
        }
        i += 1;
    }
    out
}

/// Mount points at or below `dir`, in mount order.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .map(|m| PathBuf::from(m.replace("\\040", " ")))
        .filter(|m| m.starts_with(dir))
        .collect()
}

/// An ELF file without a program interpreter (PT_INTERP): it runs in an image with no libc.
fn is_static_elf(path: &Path) -> bool {
    let Ok(b) = std::fs::read(path) else { return false };
    if b.len() < 64 || &b[..4] != b"\x7fELF" || b[4] != 2 {
        return false;
    }
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(b[0x20..0x28].try_into().unwrap()) as usize;
    let (size, count) = (u16_at(0x36), u16_at(0x38));
    (0..count).all(|i| {
        let o = phoff + i * size;
        o + 4 <= b.len() && u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) != 3
    })
}
