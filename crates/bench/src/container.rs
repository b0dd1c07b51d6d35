//! Study C's container variants: a measured workload run inside a runc container (`runc run`, in the
//! foreground, so its output and exit reach the runner like any child's) with or without Docker's
//! default seccomp profile and with the host's network or a namespace of its own.
//!
//! The container's root is a directory of read-only bind mounts of the host's /usr, /etc and the
//! rtslice binary's directory (merged-/usr symlinks recreated), so the workload is the same binary
//! the plain variant runs: the variants differ only in the isolation being measured. The emulator's
//! calibration directory is bound read-only so it does not re-calibrate inside the window.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::experiment::OciVariant;

/// A prepared container: the bundle directory, its id and the runc state root.
#[derive(Debug, Clone)]
pub struct Container {
    pub id: String,
    pub bundle: PathBuf,
    pub runc_root: PathBuf,
    pub runc: PathBuf,
}

impl Container {
    /// `runc run` in the foreground: runc forwards signals to the container's process and removes
    /// the container when it ends.
    pub fn argv(&self) -> Vec<String> {
        vec![
            self.runc.display().to_string(),
            "--root".into(),
            self.runc_root.display().to_string(),
            "run".into(),
            "--bundle".into(),
            self.bundle.display().to_string(),
            self.id.clone(),
        ]
    }

    /// Removes the container if runc did not (a killed `runc run` leaves it behind).
    pub fn remove(&self) {
        let _ = rtslice_host::oci::runc_delete(&self.runc, &self.runc_root, &self.id);
    }
}

/// Builds the bundle for `argv` under `dir` with the variant's isolation.
pub fn prepare(dir: &Path, id: &str, argv: &[String], v: &OciVariant) -> Result<Container, String> {
    let runc = rtslice_host::oci::find_runc().ok_or("runc is not installed (apt-get install runc, or `sudo make deps`)")?;
    let mk = |p: &Path| std::fs::create_dir_all(p).map_err(|e| format!("cannot create {}: {e}", p.display()));
    // runc resolves a relative root against the bundle: every path it gets is absolute.
    mk(dir)?;
    let dir = &std::fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let bundle = dir.join(format!("bundle-{id}"));
    let rootfs = bundle.join("rootfs");
    mk(&rootfs)?;
    let mut mounts: Vec<serde_json::Value> = vec![];
    let mut bind = |host: &Path| -> Result<(), String> {
        mk(&rootfs.join(host.strip_prefix("/").unwrap_or(host)))?;
        mounts.push(json!({"destination": host, "type": "bind", "source": host, "options": ["rbind", "ro", "nosuid"]}));
        Ok(())
    };
    for top in ["usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
        let host = Path::new("/").join(top);
        match std::fs::symlink_metadata(&host) {
            // Merged /usr: /bin -> usr/bin and so on; the same link inside the container.
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&host).map_err(|e| format!("{}: {e}", host.display()))?;
                std::os::unix::fs::symlink(&target, rootfs.join(top)).map_err(|e| format!("symlink {top}: {e}"))?;
            }
            Ok(m) if m.is_dir() => bind(&host)?,
            _ => {}
        }
    }
    // The program itself when it lives outside /usr (a cargo target directory).
    let prog = std::fs::canonicalize(argv.first().ok_or("empty command")?).map_err(|e| format!("{}: {e}", argv[0]))?;
    if let Some(d) = prog.parent().filter(|d| !d.starts_with("/usr")) {
        bind(d)?;
    }
    let mut env = vec!["PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin".to_string()];
    if let Some(calib) = rtslice_emu::Calibration::default_path().filter(|p| p.exists()) {
        if let Some(d) = calib.parent() {
            bind(d)?;
            env.push(format!("RTSLICE_CALIBRATION={}", calib.display()));
        }
    }
    let mut args = argv.to_vec();
    args[0] = prog.display().to_string();
    let cpus = rtslice_host::facts::online_cpus();
    let mems = std::fs::read_to_string("/sys/devices/system/node/online").map(|s| s.trim().to_string()).unwrap_or_else(|_| "0".into());
    let cc = rtslice_host::oci::ContainerConfig {
        id: id.to_string(),
        args,
        // Directly under the root (runc removes it with the container): a parent left behind with
        // every CPU would block exclusive cpuset partitions of later runs (EINVAL on cpu_exclusive).
        cgroups_path: format!("/{id}"),
        cpus,
        mems,
        rt: None,
        scheduler: None,
        netns: v.network == "own",
        seccomp: v.seccomp == "default",
    };
    let mut cfg = rtslice_host::oci::config_json(&cc, None);
    cfg["root"] = json!({"path": rootfs, "readonly": true});
    cfg["process"]["env"] = json!(env);
    if let Some(m) = cfg["mounts"].as_array_mut() {
        m.extend(mounts);
    }
    rtslice_host::oci::write_config(&bundle, &cfg).map_err(|e| e.to_string())?;
    Ok(Container { id: id.to_string(), bundle, runc_root: dir.join("runc"), runc })
}
