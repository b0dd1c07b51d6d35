//! Containers as users build them (issue 18): a bundle with the user's own config.json, and an OCI
//! image layout / `docker save` archive built locally (no registry), launched through real runc
//! under an RT-group reservation. What the user set (a bind mount, environment variables, the
//! image's command) survives; rtslice's budget is in the container's cgroup.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};

use common::*;
use rtslice_host::sched::SchedAttr;
use rtslice_host::{apply_setup, reset, ApplyOptions, CpuList, Launch, Mechanism, OciLaunch, ResetOptions, Reservation, Setup, StateDir, ThreadRule, WorkloadSetup};
use rtslice_testkit::{root_or_skip, skip, KernelLock, OnDrop};

fn runc_or_skip() -> Option<PathBuf> {
    let Some(runc) = rtslice_host::oci::find_runc() else {
        skip::skip("runc", "runc not installed (make deps installs it)");
        return None;
    };
    rt_groups_or_skip().then_some(runc)
}

/// Whether this host has the two CPUs and the RT group scheduling (cgroup v1) the container tests'
/// reservation needs; skips for the first it lacks.
fn rt_groups_or_skip() -> bool {
    skip::cpus_or_skip(2) && has_mechanism(Mechanism::RtGroup)
}

fn setup(name: &str, source: &Path) -> Setup {
    let s = Setup {
        workloads: vec![WorkloadSetup {
            name: name.into(),
            cpus: CpuList::parse("1").unwrap(),
            reservation: Some(Reservation::from_micros(20_000, 100_000)),
            threads: vec![ThreadRule { name: "^sh$".into(), policy: Some(SchedAttr::Fifo { priority: 10 }), cpus: None, period_ns: None }],
            // No args: the command is the user's (their config.json, or the image's).
            launch: Launch::Oci(OciLaunch { bundle: source.into(), args: vec![], netns: false, seccomp: true, id: None }),
            ..Default::default()
        }],
        ..Default::default()
    };
    planned(s, Some(Mechanism::RtGroup))
}

fn environ(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/environ")).unwrap().split(|b| *b == 0).map(|s| String::from_utf8_lossy(s).into_owned()).collect()
}

/// Applies, checks what the user set and the reservation, resets.
fn run_and_check(name: &str, source: &Path, check: impl Fn(i32)) {
    let runc = runc_or_skip();
    let Some(runc) = runc else { return };
    let dir = tempfile::tempdir().unwrap();
    let opts = ApplyOptions { mechanism: Some(Mechanism::RtGroup), runc: Some(runc), state_dir: StateDir::new(dir.path()), ..ApplyOptions::default() };
    let applied = apply_setup(&setup(name, source), &opts).expect("apply");
    let _cleanup = reset_on_drop(dir.path());
    let id = applied.workloads[0].container.clone().expect("a container");
    let pid = applied.workloads[0].pids[0].pid;
    let ctr = format!("/sys/fs/cgroup/cpu/rtslice/{name}/{id}");
    assert_eq!(read(format!("{ctr}/cpu.rt_runtime_us")), "20000", "the reservation is in the container's cgroup");
    assert_eq!(read(format!("/sys/fs/cgroup/cpuset/rtslice/{name}/{id}/cpuset.cpus")), "1");
    assert!(read(format!("/proc/{pid}/cgroup")).contains(&format!("/rtslice/{name}/{id}")));
    assert_eq!(rtslice_host::sched::get_attr(pid).unwrap(), SchedAttr::Fifo { priority: 10 });
    // Docker's default seccomp profile was added (the user's config had none): mode 2 = filter.
    assert!(read(format!("/proc/{pid}/status")).lines().any(|l| l.starts_with("Seccomp:") && l.trim_end().ends_with('2')));
    // The host's network (no namespace asked for, none in the user's config).
    assert_eq!(std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap(), std::fs::read_link("/proc/self/ns/net").unwrap());
    check(pid);
    reset(&StateDir::new(dir.path()), ResetOptions::default()).unwrap();
}

/// Debian's busybox-static as a rootfs directory.
fn busybox_rootfs(dir: &Path) -> Option<PathBuf> {
    match rtslice_host::oci::busybox_bundle(dir) {
        Ok(b) => Some(b.join("rootfs")),
        // busybox missing or not static; any other error (writing the bundle) is a failure.
        Err(e @ rtslice_host::HostError::Unsupported { .. }) => {
            skip::skip("busybox", e);
            None
        }
        Err(e) => panic!("building the busybox bundle in {}: {e}", dir.display()),
    }
}

#[test]
fn a_users_bundle_keeps_its_mount_env_and_command() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let bundle = tempfile::tempdir().unwrap();
    let Some(rootfs) = busybox_rootfs(bundle.path()) else { return };
    std::fs::create_dir_all(rootfs.join("data")).unwrap();
    let shared = tempfile::tempdir().unwrap();
    std::fs::write(shared.path().join("marker"), "from the host").unwrap();
    // The user's config.json as `runc spec` writes it, edited: a bind mount, an env var, a command.
    let mut spec = oci_spec::runtime::Spec::default();
    let mut process = spec.process().clone().unwrap();
    process.set_args(Some(vec!["sh".into(), "-c".into(), "while :; do sleep 1; done".into()]));
    process.set_env(Some(vec!["PATH=/bin".into(), "USER_SETTING=kept".into()]));
    process.set_terminal(Some(true));
    spec.set_process(Some(process));
    let mut mounts = spec.mounts().clone().unwrap();
    mounts.push(
        oci_spec::runtime::MountBuilder::default()
            .destination("/data")
            .typ("bind")
            .source(shared.path())
            .options(vec!["rbind".to_string(), "ro".to_string()])
            .build()
            .unwrap(),
    );
    spec.set_mounts(Some(mounts));
    spec.set_hostname(Some("users-box".into()));
    if let Some(ns) = spec.linux_mut().as_mut().and_then(|l| l.namespaces_mut().as_mut()) {
        ns.retain(|n| n.typ() != oci_spec::runtime::LinuxNamespaceType::Network);
    }
    spec.save(bundle.path().join("config.json")).unwrap();
    let before = std::fs::read_to_string(bundle.path().join("config.json")).unwrap();
    run_and_check(&format!("ubundle-{}", std::process::id()), bundle.path(), |pid| {
        assert!(environ(pid).contains(&"USER_SETTING=kept".to_string()), "{:?}", environ(pid));
        assert_eq!(read(format!("/proc/{pid}/root/data/marker")), "from the host", "the user's bind mount");
        assert!(read(format!("/proc/{pid}/cmdline")).contains("while"), "the user's command");
    });
    assert_eq!(std::fs::read_to_string(bundle.path().join("config.json")).unwrap(), before, "the user's bundle is not modified");
}

/// A gzip'd tar of `dir`'s content (paths relative to it), plus extra entries.
fn layer(dir: Option<&Path>, extra: &[(&str, &[u8])]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    b.follow_symlinks(false);
    if let Some(d) = dir {
        b.append_dir_all(".", d).unwrap();
    }
    for (path, data) in extra {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_cksum();
        b.append_data(&mut h, path, *data).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap()
}

fn sha256_hex(data: &[u8]) -> String {
    let mut child = std::process::Command::new("sha256sum").stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap().to_string()
}

/// The image: busybox, then a layer that adds /etc/greeting and whites out /bin/vi.
fn image_parts(rootfs: &Path) -> (Vec<Vec<u8>>, Vec<u8>) {
    let l1 = layer(Some(rootfs), &[]);
    let l2 = layer(None, &[("etc/greeting", b"hello"), ("bin/.wh.vi", b"")]);
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": ["sh", "-c"], "Cmd": ["while :; do sleep 1; done"], "Env": ["PATH=/bin", "IMAGE_SETTING=from-image"], "WorkingDir": "/etc"},
        "rootfs": {"type": "layers", "diff_ids": []}
    }))
    .unwrap();
    (vec![l1, l2], config)
}

fn write_layout(dir: &Path, layers: &[Vec<u8>], config: &[u8]) {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |data: &[u8]| -> (String, usize) {
        let h = sha256_hex(data);
        std::fs::write(blobs.join(&h), data).unwrap();
        (format!("sha256:{h}"), data.len())
    };
    let (cd, cs) = put(config);
    let ls: Vec<serde_json::Value> = layers
        .iter()
        .map(|l| {
            let (d, s) = put(l);
            serde_json::json!({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": d, "size": s})
        })
        .collect();
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
        "layers": ls
    }))
    .unwrap();
    let (md, ms) = put(&manifest);
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    std::fs::write(
        dir.join("index.json"),
        serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": ms}]})).unwrap(),
    )
    .unwrap();
}

fn check_image(pid: i32) {
    assert!(environ(pid).contains(&"IMAGE_SETTING=from-image".to_string()), "{:?}", environ(pid));
    assert_eq!(read(format!("/proc/{pid}/root/etc/greeting")), "hello", "the second layer");
    assert!(std::path::Path::new(&format!("/proc/{pid}/root/bin/sh")).exists(), "the first layer");
    assert!(std::fs::symlink_metadata(format!("/proc/{pid}/root/bin/vi")).is_err(), "the whiteout");
    assert_eq!(std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap(), PathBuf::from("/etc"), "the image's working directory");
}

#[test]
fn an_oci_image_layout_runs_under_a_reservation() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let scratch = tempfile::tempdir().unwrap();
    let Some(rootfs) = busybox_rootfs(scratch.path()) else { return };
    let (layers, config) = image_parts(&rootfs);
    let layout = tempfile::tempdir().unwrap();
    write_layout(layout.path(), &layers, &config);
    run_and_check(&format!("uimage-{}", std::process::id()), layout.path(), check_image);
}

#[test]
fn a_docker_save_archive_runs_under_a_reservation() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let scratch = tempfile::tempdir().unwrap();
    let Some(rootfs) = busybox_rootfs(scratch.path()) else { return };
    let (layers, config) = image_parts(&rootfs);
    // The classic `docker save` format: manifest.json, <id>.json, <layer>/layer.tar (uncompressed).
    let mut b = tar::Builder::new(Vec::new());
    let mut add = |path: &str, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_cksum();
        b.append_data(&mut h, path, data).unwrap();
    };
    let mut names = vec![];
    for (i, l) in layers.iter().enumerate() {
        let mut plain = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&l[..]), &mut plain).unwrap();
        let name = format!("layer{i}/layer.tar");
        add(&name, &plain);
        names.push(name);
    }
    add("cfg.json", &config);
    add("manifest.json", &serde_json::to_vec(&serde_json::json!([{"Config": "cfg.json", "RepoTags": ["vbs:local"], "Layers": names}])).unwrap());
    let archive = scratch.path().join("vbs.tar");
    std::fs::write(&archive, b.into_inner().unwrap()).unwrap();
    run_and_check(&format!("udocker-{}", std::process::id()), &archive, check_image);
}

/// Podman as the launcher (issue 18): a locally built OCI image layout (`oci:DIR`, no registry) run
/// by real podman under an RT-group reservation. Its init process is in the workload's cpuset and
/// cpu groups (the reservation's budget) before the program runs, the thread rule applies, what the
/// image and the user's podman options set survive, `podman ps` shows it; reset stops and removes
/// the container and leaves rtslice's groups and the host as before.
#[test]
fn podman_runs_a_local_image_under_the_reservation() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let Some(podman) = rtslice_host::podman::find_podman() else {
        skip::skip("podman", "podman not installed (make deps installs it)");
        return;
    };
    if !rt_groups_or_skip() {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let Some(rootfs) = busybox_rootfs(scratch.path()) else { return };
    let (layers, config) = image_parts(&rootfs);
    // podman names an `oci:DIR` image after DIR (localhost/DIR): lowercase components that start
    // with a letter or digit, so not a tempdir's `.tmpXyZ`.
    let layout = tempfile::Builder::new().prefix("rtslice-podman-").rand_bytes(0).suffix(&std::process::id().to_string()).tempdir_in("/tmp").unwrap();
    write_layout(layout.path(), &layers, &config);
    // This test's images (an earlier run's too: the image id is its config's digest, the same each
    // run, with other layer digests) are removed before and after, even on panic.
    // Podman's cgroup parents (libpod_parent in every v1 hierarchy) appear with its first container
    // and stay; in the cpuset hierarchy that sibling holds every CPU, and the kernel then refuses
    // rtslice's exclusive partitions (cpu_exclusive: EINVAL; docs/host.md). The test removes them
    // again when it made them, even on panic (with its images).
    fn remove_images(podman: &Path) {
        let out = std::process::Command::new(podman)
            .args(["images", "--format", "{{.ID}}", "--filter", "reference=localhost/tmp/rtslice-podman-*"])
            .output()
            .unwrap();
        for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let _ = std::process::Command::new(podman).args(["rmi", "--force", id]).output();
        }
    }
    fn walk_dirs(d: &Path) -> Vec<PathBuf> {
        let mut v = vec![d.to_path_buf()];
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                v.extend(walk_dirs(&e.path()));
            }
        }
        v
    }
    let made_libpod_parents = !Path::new("/sys/fs/cgroup/cpuset/libpod_parent").exists();
    remove_images(&podman);
    let _images = OnDrop::new(|| {
        remove_images(&podman);
        if made_libpod_parents {
            for h in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
                let top = h.path().join("libpod_parent");
                if top.is_dir() {
                    let mut dirs: Vec<PathBuf> = walk_dirs(&top);
                    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
                    for d in dirs {
                        let _ = std::fs::remove_dir(&d);
                    }
                }
            }
        }
    });
    let shared = tempfile::tempdir().unwrap();
    std::fs::write(shared.path().join("marker"), "from the host").unwrap();
    let name = format!("upodman-{}", std::process::id());
    let podman_cmd = |args: &[&str]| {
        let out = std::process::Command::new(&podman).args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    // Podman's own cgroup parents (libpod_parent in every hierarchy) appear with its first
    // container and stay: podman's footprint, not rtslice's. Made before the snapshot.
    podman_cmd(&["--cgroup-manager", "cgroupfs", "run", "--rm", "--network", "host", "--runtime", "runc", "--ulimit", "nproc=1024:1024", "--ulimit", "nofile=1024:1024", &format!("oci:{}", layout.path().display()), "true"]);
    let before = snapshot();
    let mut s = setup(&name, layout.path());
    s.workloads[0].launch = Launch::Podman(rtslice_host::PodmanLaunch {
        image: format!("oci:{}", layout.path().display()),
        args: vec![],
        options: vec!["--env".into(), "USER_SETTING=kept".into(), "--volume".into(), format!("{}:/data:ro", shared.path().display())],
        name: None,
    });
    let dir = tempfile::tempdir().unwrap();
    let opts = ApplyOptions { mechanism: Some(Mechanism::RtGroup), state_dir: StateDir::new(dir.path()), ..ApplyOptions::default() };
    let applied = apply_setup(&s, &opts).expect("apply");
    let cleanup = reset_on_drop(dir.path());
    let cname = applied.workloads[0].container.clone().expect("a container name");
    assert_eq!(cname, format!("rtslice-{name}"));
    let pid = applied.workloads[0].pids[0].pid;
    let cg = read(format!("/proc/{pid}/cgroup"));
    let in_group = |cg: &str, ctrl: &str| {
        cg.lines().any(|l| {
            let f: Vec<&str> = l.splitn(3, ':').collect();
            f.len() == 3 && f[1].split(',').any(|c| c == ctrl) && f[2] == format!("/rtslice/{name}")
        })
    };
    assert!(in_group(&cg, "cpuset") && in_group(&cg, "cpu"), "{cg}");
    // Podman keeps the container's other groups (devices, pids, memory: the limits given to podman).
    assert!(cg.lines().any(|l| l.contains(":devices:/libpod_parent/")), "{cg}");
    assert_eq!(read(format!("/sys/fs/cgroup/cpu/rtslice/{name}/cpu.rt_runtime_us")), "20000");
    assert_eq!(read(format!("/proc/{pid}/status")).lines().find(|l| l.starts_with("Cpus_allowed_list:")).unwrap().split_whitespace().last(), Some("1"));
    assert_eq!(rtslice_host::sched::get_attr(pid).unwrap(), SchedAttr::Fifo { priority: 10 });
    // What the image set and what the user's options added.
    check_image(pid);
    assert!(environ(pid).contains(&"USER_SETTING=kept".to_string()), "{:?}", environ(pid));
    assert_eq!(read(format!("/proc/{pid}/root/data/marker")), "from the host", "the user's volume");
    // A process the container's program forks later (its `sleep 1`) is born in the workload's groups.
    let t0 = std::time::Instant::now();
    let child = loop {
        let kids = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        if let Some(k) = kids.split_whitespace().next() {
            break k.to_string();
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(3), "the container's shell forked nothing in 3 s");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let ccg = std::fs::read_to_string(format!("/proc/{child}/cgroup")).unwrap_or_default();
    assert!(ccg.is_empty() || (in_group(&ccg, "cpuset") && in_group(&ccg, "cpu")), "child {child}: {ccg}");
    assert_eq!(podman_cmd(&["inspect", "--format", "{{.State.Status}}", &cname]), "running");
    let status = rtslice_host::status(&StateDir::new(dir.path())).expect("status");
    assert!(status.drift.is_empty(), "{:?}", status.drift);
    assert_eq!(status.workloads[0].container.as_deref(), Some(cname.as_str()));
    assert!(status.workloads[0].pids.contains(&pid), "{:?}", status.workloads[0].pids);
    drop(cleanup);
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "the container's init is gone");
    assert_eq!(podman_cmd(&["ps", "-a", "--filter", &format!("name={cname}"), "--format", "{{.Names}}"]), "", "the container is removed");
    assert_restored(&before);
}
