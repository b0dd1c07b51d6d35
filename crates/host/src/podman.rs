//! Containers run by podman (`launch: {podman: IMAGE}`): podman pulls or copies the image, builds
//! the container's configuration and keeps it in `podman ps`; rtslice places the container's
//! processes in the workload's CPU groups before its program runs.
//!
//! The order mirrors the runc launch: `podman create`, `podman init` (runc's init process exists,
//! the user's program not yet), the init process moved into the workload's cpuset and cpu groups
//! (`launch::attach`, journaled) and its thread rules applied, then `podman start`. Everything the
//! program forks is born in rtslice's groups. Podman keeps the container's other cgroups (devices,
//! pids, blkio, memory unless the workload asks for memory), so the limits the user gave podman
//! still hold; its cpu and cpuset groups stay empty. Podman's own cgroup parent is used (with the
//! cgroupfs manager, as the node has no systemd to ask): a `--cgroup-parent` inside rtslice's tree
//! would make podman create that path in every v1 hierarchy, where no journal of ours would remove
//! it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::error::{HostError, Result};
use crate::setup::PodmanLaunch;

/// `podman` on PATH (or in the usual directories).
pub fn find_podman() -> Option<PathBuf> {
    crate::oci::find_in_path("podman")
}

/// podman, or the refusal every podman launch gives before anything is applied.
pub(crate) fn require(workload: &str) -> Result<PathBuf> {
    find_podman().ok_or_else(|| {
        HostError::Rejected(format!("workload {workload}: a podman launch needs podman, which is not installed (apt-get install podman)"))
    })
}

/// The container's name: `rtslice-<workload>` unless the launch names one.
pub fn container_name(workload: &str, l: &PodmanLaunch) -> String {
    l.name.clone().unwrap_or_else(|| format!("rtslice-{workload}"))
}

fn podman(bin: &Path) -> Command {
    let mut c = Command::new(bin);
    // Deterministic placement whatever podman's configuration says: rootful, cgroupfs.
    c.args(["--cgroup-manager", "cgroupfs"]);
    c
}

fn run(bin: &Path, args: &[String], what: &str) -> Result<String> {
    let out = podman(bin)
        .args(args)
        .output()
        .map_err(|e| HostError::Launch { what: what.to_string(), reason: format!("running {}: {e}", bin.display()) })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(HostError::Launch { what: what.to_string(), reason: format!("podman {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()) })
    }
}

fn has_option(options: &[String], names: &[&str]) -> bool {
    options.iter().any(|o| names.iter().any(|n| o == n || o.starts_with(&format!("{n}="))))
}

/// The `podman create` arguments: the user's options, then rtslice's defaults for what they did not
/// set — the host's network (as a command has; `--network` in options to change it), the caller's
/// file and process limits (see `rtslice_sys::process::file_and_process_limits`), runc as the
/// runtime (the one rtslice's own OCI launch is tested with) — then the image and its arguments.
pub fn create_args(name: &str, l: &PodmanLaunch, runc: Option<&Path>) -> Vec<String> {
    let mut a: Vec<String> = vec!["create".into(), "--name".into(), name.into()];
    a.extend(l.options.iter().cloned());
    if !has_option(&l.options, &["--network", "--net"]) {
        a.extend(["--network".into(), "host".into()]);
    }
    if !has_option(&l.options, &["--ulimit"]) {
        let limits = rtslice_sys::process::file_and_process_limits();
        for (kind, (soft, hard)) in ["nofile", "nproc"].iter().zip(limits) {
            let v = |x: Option<u64>| x.map_or("-1".to_string(), |n| n.to_string());
            a.extend(["--ulimit".into(), format!("{kind}={}:{}", v(soft), v(hard))]);
        }
    }
    if let (false, Some(r)) = (has_option(&l.options, &["--runtime"]), runc) {
        a.extend(["--runtime".into(), r.display().to_string()]);
    }
    a.push(l.image.clone());
    a.extend(l.args.iter().cloned());
    a
}

/// Creates the container and initialises it (runc's init waits for `start`); returns the init
/// process's pid. The caller journals the container first (`Change::Podman`).
pub(crate) fn create(bin: &Path, name: &str, l: &PodmanLaunch, runc: Option<&Path>) -> Result<i32> {
    let what = format!("podman container {name}");
    run(bin, &create_args(name, l, runc), &what)?;
    run(bin, &["init".into(), name.into()], &what)?;
    let pid = run(bin, &["inspect".into(), "--format".into(), "{{.State.Pid}}".into(), name.into()], &what)?;
    match pid.parse::<i32>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(HostError::Launch { what, reason: format!("podman inspect gave no init pid ({pid:?}) after podman init") }),
    }
}

/// Lets the initialised container run its program.
pub(crate) fn start(bin: &Path, name: &str) -> Result<()> {
    run(bin, &["start".into(), name.into()], &format!("podman container {name}")).map(|_| ())
}

/// Stops the container (SIGTERM, `grace`, SIGKILL) and removes it; one that does not exist is fine.
pub fn stop(bin: &Path, name: &str, grace: Duration) -> Result<()> {
    // Read before the container's processes go: their deadline bandwidth is released late.
    let dl_period = init_pid(bin, name).and_then(|pid| crate::sched::longest_deadline_period(crate::oci::container_pids(pid)));
    let secs = grace.as_secs().max(1).to_string();
    let out = podman(bin)
        .args(["rm", "--force", "--time", &secs, name])
        .output()
        .map_err(|e| HostError::Launch { what: format!("podman rm {name}"), reason: e.to_string() })?;
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.success() || err.contains("no such container") {
        crate::sched::wait_deadline_release(dl_period);
        Ok(())
    } else {
        Err(HostError::Launch { what: format!("podman rm {name}"), reason: err.trim().to_string() })
    }
}

/// The pid of a running container's init process (`podman inspect`), None when it is not running.
fn init_pid(bin: &Path, name: &str) -> Option<i32> {
    let out = podman(bin).args(["inspect", "--format", "{{.State.Pid}}", name]).output().ok().filter(|o| o.status.success())?;
    String::from_utf8_lossy(&out.stdout).trim().parse::<i32>().ok().filter(|&p| p > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_users_options_win_over_rtslices_defaults() {
        let l = PodmanLaunch { image: "oci:/img".into(), args: vec!["-c".into(), "x".into()], options: vec![], name: None };
        let a = create_args("rtslice-w", &l, Some(Path::new("/usr/sbin/runc")));
        let s = a.join(" ");
        assert!(s.starts_with("create --name rtslice-w --network host --ulimit nofile="), "{s}");
        assert!(s.ends_with("--runtime /usr/sbin/runc oci:/img -c x"), "{s}");
        let l = PodmanLaunch { options: vec!["--network=none".into(), "--ulimit".into(), "nofile=64:64".into(), "--runtime".into(), "crun".into()], ..l };
        let s = create_args("n", &l, Some(Path::new("/usr/sbin/runc"))).join(" ");
        assert_eq!(s, "create --name n --network=none --ulimit nofile=64:64 --runtime crun oci:/img -c x");
    }
}
