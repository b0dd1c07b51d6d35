//! Named network namespaces (as `ip netns` keeps them under /run/netns) joined by veth pairs, built
//! with iproute2 (`ip`, the tool every operator knows, so a leftover is easy to inspect and remove).
//! A [`Netns`] deletes its namespace on drop; deleting a namespace destroys the veth ends inside it,
//! and with them their peers, so nothing is left behind.

use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::process::Command;

use rustix::thread::LinkNameSpaceType;

use crate::error::{Result, SysError};

/// Where `ip netns add` binds namespaces.
pub const NETNS_DIR: &str = "/run/netns";

/// Runs `ip <args>`; returns its stdout, or the failure with its stderr.
pub fn ip<S: AsRef<OsStr>>(args: &[S]) -> Result<String> {
    run("ip", args)
}

/// Runs a command to completion; returns its stdout, or the failure with its stderr.
pub fn run<S: AsRef<OsStr>>(program: &str, args: &[S]) -> Result<String> {
    let shown = std::iter::once(program.to_string())
        .chain(args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(" ");
    let out = Command::new(program).args(args).output().map_err(|source| SysError::Spawn {
        command: shown.clone(),
        source,
        fix: "is iproute2 installed? `apt-get install iproute2`",
    })?;
    if !out.status.success() {
        return Err(SysError::Command {
            command: shown,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Names of the namespaces under /run/netns.
pub fn list() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(NETNS_DIR)
        .map(|d| d.flatten().filter_map(|e| e.file_name().to_str().map(str::to_string)).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Deletes namespace `name` (`ip netns del`).
pub fn delete(name: &str) -> Result<()> {
    ip(&["netns", "del", name]).map(drop)
}

/// Deletes a network interface of the host namespace if it exists (a leftover of a crashed run).
pub fn delete_link_if_present(dev: &str) {
    let _ = ip(&["link", "del", dev]);
}

/// A named network namespace this process created; deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
    deleted: bool,
}

impl Netns {
    /// Creates namespace `name` with its loopback up. A leftover of the same name (a crashed run)
    /// is deleted first.
    pub fn create(name: &str) -> Result<Netns> {
        if list().iter().any(|n| n == name) {
            let _ = delete(name);
        }
        ip(&["netns", "add", name])?;
        // From here on, drop deletes it if a later step fails.
        let ns = Netns { name: name.to_string(), deleted: false };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n <ns> <args>`.
    pub fn ip(&self, args: &[&str]) -> Result<String> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Gives device `dev` (already inside) address `cidr` (e.g. `10.213.0.1/30`) and brings it up.
    pub fn address(&self, dev: &str, cidr: &str) -> Result<()> {
        self.ip(&["addr", "add", cidr, "dev", dev])?;
        self.ip(&["link", "set", dev, "up"]).map(drop)
    }

    /// Runs `program args` inside the namespace to completion (`ip netns exec`); returns stdout.
    pub fn exec(&self, program: &str, args: &[&str]) -> Result<String> {
        let mut all = vec!["netns", "exec", self.name.as_str(), program];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// A command that runs `program` inside the namespace, to add arguments to and spawn.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Runs `f` on a new thread that has entered the namespace (sockets it opens live there) and
    /// returns its result; the calling thread stays where it is.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        std::thread::scope(|s| {
            s.spawn(|| {
                enter(&self.name)?;
                Ok(f())
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// Keeps the namespace past this handle (for a caller that tracks it by name and removes it
    /// later with [`delete`]); returns its name.
    pub fn keep(mut self) -> String {
        self.deleted = true;
        std::mem::take(&mut self.name)
    }

    /// Deletes the namespace now, reporting a failure (drop ignores it).
    pub fn delete(mut self) -> Result<()> {
        self.deleted = true;
        delete(&self.name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if !self.deleted {
            let _ = delete(&self.name);
        }
    }
}

/// Creates the veth pair `a` — `b`, each end in the given namespace (None: this one), addresses not
/// yet set and links down.
pub fn veth_pair(a: &str, a_ns: Option<&Netns>, b: &str, b_ns: Option<&Netns>) -> Result<()> {
    let mut args = vec!["link", "add", a];
    if let Some(ns) = a_ns {
        args.extend(["netns", ns.name()]);
    }
    args.extend(["type", "veth", "peer", "name", b]);
    if let Some(ns) = b_ns {
        args.extend(["netns", ns.name()]);
    }
    ip(&args).map(drop)
}

/// Gives host-namespace device `dev` address `cidr` and brings it up.
pub fn host_address(dev: &str, cidr: &str) -> Result<()> {
    ip(&["addr", "add", cidr, "dev", dev])?;
    ip(&["link", "set", dev, "up"]).map(drop)
}

/// Moves the calling thread into namespace `name`. Sockets it creates afterwards live there, and so
/// do threads it spawns.
pub fn enter(name: &str) -> Result<()> {
    let path = format!("{NETNS_DIR}/{name}");
    let f = std::fs::File::open(&path).map_err(|source| SysError::File {
        what: "opening network namespace (create it with `ip netns add`)",
        path: path.clone().into(),
        source,
    })?;
    rustix::thread::move_into_link_name_space(f.as_fd(), Some(LinkNameSpaceType::Network))
        .map_err(|e| SysError::call(format!("setns({path})"))(e.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_with_a_veth_pair_talk_and_vanish() {
        rtslice_testkit::root_or_skip!();
        let tag = std::process::id() % 100_000;
        let (na, nb) = (format!("rtsys-{tag}-a"), format!("rtsys-{tag}-b"));
        let (va, vb) = (format!("rtsys{tag}a"), format!("rtsys{tag}b"));
        let a = Netns::create(&na).unwrap();
        let b = Netns::create(&nb).unwrap();
        veth_pair(&va, Some(&a), &vb, Some(&b)).unwrap();
        a.address(&va, "10.213.254.1/30").unwrap();
        b.address(&vb, "10.213.254.2/30").unwrap();
        assert!(list().contains(&na));
        let server = b.run(|| std::net::UdpSocket::bind("10.213.254.2:0")).unwrap().unwrap();
        let port = server.local_addr().unwrap().port();
        let sent = a
            .run(move || {
                let s = std::net::UdpSocket::bind("10.213.254.1:0").unwrap();
                s.send_to(b"hi", ("10.213.254.2", port)).unwrap()
            })
            .unwrap();
        assert_eq!(sent, 2);
        let mut buf = [0u8; 8];
        server.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        assert_eq!(server.recv(&mut buf).unwrap(), 2);
        assert!(a.exec("ip", &["link", "show", &va]).unwrap().contains(&va));
        // The caller's own namespace is untouched: the veth is not visible here.
        assert!(ip(&["link", "show", &va]).is_err());
        a.delete().unwrap();
        let kept = b.keep();
        assert!(list().contains(&kept), "keep() must not delete");
        delete(&kept).unwrap();
        assert!(!list().contains(&na) && !list().contains(&nb));
        assert!(matches!(enter(&na), Err(SysError::File { .. })));
        assert!(matches!(ip(&["netns", "del", &na]), Err(SysError::Command { .. })));
    }
}
