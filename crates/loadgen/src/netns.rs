//! Two network namespaces joined by a veth pair, so client and server talk through a real network
//! stack (and, with a token bucket, a real bottleneck) without touching any other address.
//! Built with rtslice-sys's namespaces (iproute2) and `tc`; removed on drop.

use std::net::Ipv4Addr;

use rtslice_sys::netns::{self, Netns};
use rtslice_sys::SysError;

use crate::{LoadgenError, Result};

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
    /// Deleted on drop (server, then client); deleting a namespace destroys its veth end and the peer.
    namespaces: Vec<Netns>,
}

/// Runs a command, failing with its stderr.
pub(crate) fn run_cmd(program: &str, args: &[&str]) -> Result<String> {
    netns::run(program, args).map_err(command_error)
}

/// Keeps the `Command` form (command, status, stderr) callers and reports already show.
fn command_error(e: SysError) -> LoadgenError {
    match e {
        SysError::Command { command, status, stderr } => LoadgenError::Command { command, status, stderr },
        e => LoadgenError::Os(e),
    }
}

impl NetnsPair {
    /// Creates `rtlg-<tag>-s` and `rtlg-<tag>-c` with 10.213.X.1 (server) and 10.213.X.2 (client),
    /// X derived from the tag so concurrent runs with different tags do not collide.
    pub fn create(tag: &str, shaping: Option<Shaping>) -> Result<NetnsPair> {
        let tag: String = tag.chars().filter(|c| c.is_ascii_alphanumeric()).take(8).collect();
        let subnet = tag.bytes().fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32)) % 250 + 1;
        let mut pair = NetnsPair {
            server_ns: format!("rtlg-{tag}-s"),
            client_ns: format!("rtlg-{tag}-c"),
            server_addr: Ipv4Addr::new(10, 213, subnet as u8, 1),
            client_addr: Ipv4Addr::new(10, 213, subnet as u8, 2),
            shaping,
            veth_server: format!("rl{tag}s"),
            veth_client: format!("rl{tag}c"),
            namespaces: Vec::new(),
        };
        // Leftovers of a crashed run with the same tag are deleted by Netns::create; from then on
        // dropping `pair` cleans up whatever was made if a later step fails.
        pair.build().map_err(command_error)?;
        Ok(pair)
    }

    fn build(&mut self) -> rtslice_sys::Result<()> {
        self.namespaces.push(Netns::create(&self.server_ns)?);
        self.namespaces.push(Netns::create(&self.client_ns)?);
        let (s, c) = (&self.namespaces[0], &self.namespaces[1]);
        netns::veth_pair(&self.veth_server, Some(s), &self.veth_client, Some(c))?;
        for (ns, dev, addr) in [(s, &self.veth_server, self.server_addr), (c, &self.veth_client, self.client_addr)] {
            ns.address(dev, &format!("{addr}/30"))?;
            if let Some(sh) = self.shaping {
                // Burst: at least one MTU-sized frame and ~1 ms at the rate, or tbf stalls big packets.
                let burst = ((sh.rate_bps / 8.0 / 1000.0) as u64).max(4 * 1514);
                let rate = format!("{}bit", sh.rate_bps.round() as u64);
                ns.exec("tc", &["qdisc", "add", "dev", dev, "root", "tbf", "rate", &rate, "burst", &burst.to_string(), "latency", "200ms"])?;
            }
        }
        Ok(())
    }
}

/// Moves the calling thread into network namespace `name` (from /run/netns). Sockets it creates
/// afterwards live there, and so do threads it spawns.
pub fn enter(name: &str) -> Result<()> {
    Ok(netns::enter(name)?)
}
