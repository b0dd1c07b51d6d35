//! The ping target of study A's RTT measurement: a network namespace the bench creates, joined to
//! the host by a veth pair whose host end is named `rts…` (so IRQ/RPS steering rules match it),
//! with a /30 of its own. Nothing leaves the machine.

use rtslice_sys::netns::{self, Netns};

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
    netns::delete_link_if_present(&host_if);
    // A failure drops `target`, which deletes the namespace and with it both veth ends.
    let setup = || -> rtslice_sys::Result<Netns> {
        let target = Netns::create(&ns)?;
        netns::veth_pair(&host_if, None, &ns_if, Some(&target))?;
        netns::host_address(&host_if, &format!("{host_addr}/30"))?;
        target.address(&ns_if, &format!("{ns_addr}/30"))?;
        Ok(target)
    };
    match setup() {
        // The runner tracks the namespace by name and removes it after the run.
        Ok(target) => Ok((target.keep(), ns_addr)),
        Err(e) => Err(format!("cannot create the ping target namespace (needs root): {e}")),
    }
}

/// Removes the namespace (its veth end goes with it, and so does the host end).
pub fn remove(ns: &str) {
    let _ = netns::delete(ns);
}
