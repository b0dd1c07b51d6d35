//! Two network namespaces joined by a veth pair, so client and server talk through a real network
//! stack (and, with a token bucket, a real bottleneck) without touching any other address.
//! Built with `ip` and `tc` (iproute2); removed on drop.

use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::Command;

use crate::{io_err, LoadgenError, Result};

/// Token-bucket shaping of both directions of the veth pair (`tc qdisc … tbf`), study B §6.3.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Shaping {
    /// σ, bits per second.
    pub rate_bps: f64,
}

#[derive(Debug)]
pub struct NetnsPair {
    pub server_ns: String,
    pub client_ns: String,
    pub server_addr: Ipv4Addr,
    pub client_addr: Ipv4Addr,
    pub shaping: Option<Shaping>,
    veth_server: String,
    veth_client: String,
}

/// Runs a command, failing with its stderr.
pub(crate) fn run_cmd(program: &str, args: &[&str]) -> Result<String> {
    let shown = format!("{program} {}", args.join(" "));
    let out = Command::new(program).args(args).output().map_err(|e| LoadgenError::Io {
        what: format!("cannot run `{shown}` (is iproute2 installed? `apt-get install iproute2`)"),
        source: e,
    })?;
    if !out.status.success() {
        return Err(LoadgenError::Command {
            command: shown,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl NetnsPair {
    /// Creates `rtlg-<tag>-s` and `rtlg-<tag>-c` with 10.213.X.1 (server) and 10.213.X.2 (client),
    /// X derived from the tag so concurrent runs with different tags do not collide.
    pub fn create(tag: &str, shaping: Option<Shaping>) -> Result<NetnsPair> {
        let tag: String = tag.chars().filter(|c| c.is_ascii_alphanumeric()).take(8).collect();
        let subnet = tag.bytes().fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32)) % 250 + 1;
        let pair = NetnsPair {
            server_ns: format!("rtlg-{tag}-s"),
            client_ns: format!("rtlg-{tag}-c"),
            server_addr: Ipv4Addr::new(10, 213, subnet as u8, 1),
            client_addr: Ipv4Addr::new(10, 213, subnet as u8, 2),
            shaping,
            veth_server: format!("rl{tag}s"),
            veth_client: format!("rl{tag}c"),
        };
        // Leftovers of a crashed run with the same tag would make `ip netns add` fail.
        pair.remove();
        // From here on, Drop cleans up whatever was made if a later step fails.
        pair.build()?;
        Ok(pair)
    }

    fn build(&self) -> Result<()> {
        let (s, c) = (self.server_ns.as_str(), self.client_ns.as_str());
        let (vs, vc) = (self.veth_server.as_str(), self.veth_client.as_str());
        run_cmd("ip", &["netns", "add", s])?;
        run_cmd("ip", &["netns", "add", c])?;
        run_cmd("ip", &["link", "add", vs, "type", "veth", "peer", "name", vc])?;
        run_cmd("ip", &["link", "set", vs, "netns", s])?;
        run_cmd("ip", &["link", "set", vc, "netns", c])?;
        for (ns, dev, addr) in [(s, vs, self.server_addr), (c, vc, self.client_addr)] {
            run_cmd("ip", &["-n", ns, "addr", "add", &format!("{addr}/30"), "dev", dev])?;
            run_cmd("ip", &["-n", ns, "link", "set", dev, "up"])?;
            run_cmd("ip", &["-n", ns, "link", "set", "lo", "up"])?;
            if let Some(sh) = self.shaping {
                // Burst: at least one MTU-sized frame and ~1 ms at the rate, or tbf stalls big packets.
                let burst = ((sh.rate_bps / 8.0 / 1000.0) as u64).max(4 * 1514);
                let rate = format!("{}bit", sh.rate_bps.round() as u64);
                run_cmd(
                    "ip",
                    &["netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", &rate, "burst", &burst.to_string(), "latency", "200ms"],
                )?;
            }
        }
        Ok(())
    }

    fn remove(&self) {
        // Deleting a namespace destroys the veth end inside it, and with it the peer.
        for ns in [&self.server_ns, &self.client_ns] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Moves the calling thread into network namespace `name` (from /run/netns). Sockets it creates
/// afterwards live there, and so do threads it spawns.
pub fn enter(name: &str) -> Result<()> {
    let path = format!("/run/netns/{name}");
    let f = std::fs::File::open(&path).map_err(io_err(format!("cannot open network namespace {path}")))?;
    // SAFETY: a valid namespace fd; CLONE_NEWNET checks it is a network namespace.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io_err(format!("setns({path}) (needs root)"))(std::io::Error::last_os_error()));
    }
    Ok(())
}
