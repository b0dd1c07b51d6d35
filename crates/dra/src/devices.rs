//! A node's plan as the devices of its ResourceSlice (resource.k8s.io/v1 `Device`, as JSON).
//!
//! One device per CPU a claim can be given: not housekeeping, not held whole by a workload the
//! scheduler does not see, with bandwidth left under the cap. Its `bandwidth` capacity is that
//! bandwidth, in thousandths of a CPU rounded down, so what kube-scheduler allocates on a CPU plus
//! what the node already holds there stays under the node's cap. `allowMultipleAllocations` lets
//! several claims share a CPU (KEP-5075 consumable capacity); a request that names no bandwidth
//! consumes the whole device, which is how a dedicated CPU is asked for.
//!
//! No `requestPolicy`: its `validRange` would say "whole thousandths", but kube-scheduler 1.34
//! rounds a range's quantities with `Quantity.Value()`, i.e. up to whole units, so `step: 1m` made
//! every request of `50m` consume a whole CPU and nothing fit (found by the e2e test). Without a
//! policy a request consumes exactly what it asks; the node refuses finer than 1m at preparation.

use rtslice_plan::{CpuUse, NodePlan};
use serde_json::{json, Map, Value};

use crate::quantity::format_milli;
use crate::BANDWIDTH;

/// `cpu-<n>`: the device of CPU n.
pub fn device_name(cpu: u32) -> String {
    format!("cpu-{cpu}")
}

/// The CPU of a device name this driver publishes.
pub fn cpu_of(device: &str) -> Option<u32> {
    let n = device.strip_prefix("cpu-")?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || (n.len() > 1 && n.starts_with('0')) {
        return None;
    }
    n.parse().ok()
}

/// The bandwidth (thousandths of a CPU) still free under `cap` on one CPU of a plan: rounded down,
/// so the published capacity never exceeds what the node can admit. Computed from millionths
/// first: the plan's sums are floats, and 0.95 − 0.3 must give 650, not 649.
pub fn free_milli(u: &CpuUse, cap: f64) -> u64 {
    if u.housekeeping || u.exclusive_to.is_some() || u.held_for.is_some() {
        return 0;
    }
    let micro = ((cap - u.reserved - u.foreign) * 1e6).round();
    if micro <= 0.0 {
        0
    } else {
        (micro as u64) / 1000
    }
}

fn group_of(groups: &[Vec<u32>], cpu: u32) -> Option<(usize, u32)> {
    groups.iter().enumerate().find(|(_, g)| g.contains(&cpu)).map(|(i, g)| (i, g.iter().copied().min().unwrap_or(cpu)))
}

/// The devices of `node` (a plan made without the claims kube-scheduler already counts), for a
/// node whose reservations `mechanism` enforces (`deadline`, `rt_group`, `hcbs`).
pub fn devices(node: &NodePlan, mechanism: &str) -> Vec<Value> {
    let topo = node.topology.as_ref();
    let mut out = Vec::new();
    for u in &node.per_cpu {
        let free = free_milli(u, node.cap);
        if free == 0 {
            continue;
        }
        let mut attrs = Map::new();
        attrs.insert("cpu".into(), json!({"int": u.cpu}));
        // A core is named by its lowest CPU, as are LLCs: stable across restarts, comparable in
        // `matchAttribute` constraints (all of a claim's CPUs on one LLC).
        let core = topo.and_then(|t| group_of(&t.cores, u.cpu)).map(|(_, lowest)| lowest).unwrap_or(u.cpu);
        attrs.insert("core".into(), json!({"int": core}));
        if let Some((_, lowest)) = topo.and_then(|t| group_of(&t.llc, u.cpu)) {
            attrs.insert("llc".into(), json!({"int": lowest}));
        }
        if let Some((i, _)) = topo.and_then(|t| group_of(&t.numa, u.cpu)) {
            attrs.insert("numa".into(), json!({"int": i}));
        }
        attrs.insert("isolated".into(), json!({"bool": node.isolcpus.contains(&u.cpu)}));
        attrs.insert("mechanism".into(), json!({"string": mechanism}));
        // Nothing the scheduler cannot see runs here: the only CPUs the dedicated class selects.
        attrs.insert("idle".into(), json!({"bool": u.reserved == 0.0 && u.foreign == 0.0}));
        let value = format_milli(free);
        out.push(json!({
            "name": device_name(u.cpu),
            "attributes": attrs,
            "capacity": {
                BANDWIDTH: {"value": value}
            },
            "allowMultipleAllocations": true,
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_map_back_to_their_cpu_only() {
        assert_eq!(cpu_of(&device_name(17)), Some(17));
        for bad in ["cpu-", "cpu-01", "cpu-x", "gpu-1", "cpu--1", "cpu-99999999999"] {
            assert_eq!(cpu_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn free_bandwidth_rounds_down_from_exact_sums() {
        let u = CpuUse { cpu: 3, reserved: 0.3, ..CpuUse::default() };
        assert_eq!(free_milli(&u, 0.95), 650);
        let u = CpuUse { cpu: 3, reserved: 0.3333, foreign: 0.05, ..CpuUse::default() };
        assert_eq!(free_milli(&u, 0.95), 566);
        let u = CpuUse { cpu: 3, reserved: 0.96, ..CpuUse::default() };
        assert_eq!(free_milli(&u, 0.95), 0);
        let u = CpuUse { cpu: 3, exclusive_to: Some("x".into()), ..CpuUse::default() };
        assert_eq!(free_milli(&u, 0.95), 0);
    }
}
