//! The ping target of study A's RTT measurement: a network namespace the bench creates, joined to
//! the host by a veth pair whose host end is named `rts…` (so IRQ/RPS steering rules match it),
//! with a /30 of its own. Nothing leaves the machine.

use std::process::Command;

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("cannot run `ip` (install iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`ip {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Creates the namespace for run `seq`, instance `idx`; returns (namespace, address to ping).
pub fn ping_target(seq: usize, idx: usize) -> Result<(String, String), String> {
    let tag = format!("{}{}", std::process::id() % 100_000, (seq * 8 + idx) % 1000);
    let ns = format!("rtsb-{tag}");
    let host_if = format!("rtsb{tag}a");
    let ns_if = format!("rtsb{tag}b");
    // 10.213.x.y/30 with x,y from the run number: unique among concurrent targets of one bench.
    let k = (seq * 8 + idx) % 16_000;
    let (a, b) = (k / 64, (k % 64) * 4);
    let host_addr = format!("10.213.{a}.{}", b + 1);
    let ns_addr = format!("10.213.{a}.{}", b + 2);
    remove(&ns);
    let _ = ip(&["link", "del", &host_if]);
    let setup = || -> Result<(), String> {
        ip(&["netns", "add", &ns])?;
        ip(&["link", "add", &host_if, "type", "veth", "peer", "name", &ns_if, "netns", &ns])?;
        ip(&["addr", "add", &format!("{host_addr}/30"), "dev", &host_if])?;
        ip(&["link", "set", &host_if, "up"])?;
        ip(&["-n", &ns, "addr", "add", &format!("{ns_addr}/30"), "dev", &ns_if])?;
        ip(&["-n", &ns, "link", "set", &ns_if, "up"])?;
        ip(&["-n", &ns, "link", "set", "lo", "up"])
    };
    match setup() {
        Ok(()) => Ok((ns, ns_addr)),
        Err(e) => {
            remove(&ns);
            Err(format!("cannot create the ping target namespace (needs root): {e}"))
        }
    }
}

/// Removes the namespace (its veth end goes with it, and so does the host end).
pub fn remove(ns: &str) {
    let _ = ip(&["netns", "del", ns]);
}
