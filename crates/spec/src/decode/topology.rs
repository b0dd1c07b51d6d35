//! `node.topology`: SMT cores, LLC groups, NUMA nodes, NIC and PCI device locality, each CPU checked against the
//! node's CPU list when the spec gives one (a `discovered` node is checked by the planner instead).

use std::collections::BTreeMap;

use rtslice_yaml::{self as yaml, index, join, Reader, Val};

use super::values::SpecValues;
use crate::cpulist::format_cpu_list;
use crate::types::*;

pub(super) fn topology(cx: &mut Reader, n: &yaml::Node, path: &str, node_cpus: Option<&[u32]>) -> Option<Topology> {
    let f = cx.fields(n, path, &["smt", "llc", "numa", "nics", "devices"])?;
    let before = cx.error_count();
    let mut out = Topology::default();
    if let Some(v) = f.get("smt") {
        let p = join(path, "smt");
        match &v.val {
            Val::Str(s) => match Smt::parse_text(s) {
                Ok(smt) => out.smt = smt,
                Err(e) => cx.err(v, &p, e),
            },
            Val::Seq(_) => {
                if let Some(cores) = groups(cx, v, &p, "core", node_cpus, false) {
                    if let Some((i, _)) = cores.iter().enumerate().find(|(_, c)| c.is_empty()) {
                        cx.err(v, &index(&p, i), "a core needs at least one CPU");
                    }
                    out.smt = Smt::Cores(cores);
                }
            }
            _ => cx.err(v, &p, format!("expected `+N` (e.g. `+32`: CPU n and n+32 share a core), `none` or a list of cores, found {}", v.kind())),
        }
    }
    if let Some(v) = f.get("llc") {
        if let Some(g) = groups(cx, v, &join(path, "llc"), "LLC group", node_cpus, true) {
            out.llc = g;
        }
    }
    // A NIC's node is checked only against a `numa` that read without error (its own are the true ones).
    let mut numa_ok = true;
    if let Some(v) = f.get("numa") {
        match groups(cx, v, &join(path, "numa"), "NUMA node", node_cpus, true) {
            Some(g) => out.numa = g,
            None => numa_ok = false,
        }
    }
    if let Some(v) = f.get("nics") {
        let p = join(path, "nics");
        match &v.val {
            Val::Map(pairs) => {
                let mut nics = BTreeMap::new();
                for (k, val) in pairs {
                    let Some(name) = cx.string(k, &p) else { continue };
                    let np = join(&p, &name);
                    let Some(node) = cx.int(val, &np, 0, 4095).map(|x| x as u32) else { continue };
                    if !f.has("numa") {
                        cx.err(val, &np, "a NIC's NUMA node means something only with `numa` (the CPUs of each node); add it");
                    } else if numa_ok && out.numa.get(node as usize).is_none_or(|c| c.is_empty()) {
                        cx.err(val, &np, format!("NUMA node {node} has no CPUs in `numa` ({} node(s) listed)", out.numa.len()));
                    }
                    nics.insert(name, node);
                }
                out.nics = nics;
            }
            _ => cx.err(v, &p, format!("must map interface names to NUMA nodes (`{{ens1f0: 1}}`), found {}", v.kind())),
        }
    }
    if let Some(v) = f.get("devices") {
        let p = join(path, "devices");
        match &v.val {
            Val::Map(pairs) => {
                for (k, val) in pairs {
                    let Some(addr) = super::workload::pci_address(cx, k, &p) else { continue };
                    let np = join(&p, &addr.to_string());
                    let Some(node) = cx.int(val, &np, 0, 4095).map(|x| x as u32) else { continue };
                    if !f.has("numa") {
                        cx.err(val, &np, "a device's NUMA node means something only with `numa` (the CPUs of each node); add it");
                    } else if numa_ok && out.numa.get(node as usize).is_none_or(|c| c.is_empty()) {
                        cx.err(val, &np, format!("NUMA node {node} has no CPUs in `numa` ({} node(s) listed)", out.numa.len()));
                    }
                    if out.devices.insert(addr.to_string(), node).is_some() {
                        cx.err(k, &np, format!("{addr} is listed twice (addresses are compared in their canonical form)"));
                    }
                }
            }
            _ => cx.err(v, &p, format!("must map PCI addresses to NUMA nodes (`{{\"0000:3b:02.1\": 1}}`), found {}", v.kind())),
        }
    }
    (cx.error_count() == before).then_some(out)
}

/// A list of disjoint CPU lists, each CPU on the node; with `cover`, every node CPU in one of them.
fn groups(cx: &mut Reader, n: &yaml::Node, path: &str, what: &str, node_cpus: Option<&[u32]>, cover: bool) -> Option<Vec<Vec<u32>>> {
    let Val::Seq(items) = &n.val else {
        cx.err(n, path, format!("must be a list of CPU lists, one per {what} (e.g. [\"0-15,32-47\", \"16-31,48-63\"]), found {}", n.kind()));
        return None;
    };
    let before = cx.error_count();
    let mut out = Vec::new();
    let mut owner: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        let ip = index(path, i);
        let Some(cpus) = cx.cpus(item, &ip) else { continue };
        let twice: Vec<String> = cpus.iter().filter_map(|c| owner.get(c).map(|o| format!("CPU {c} (also in {path}[{o}])"))).collect();
        if !twice.is_empty() {
            cx.err(item, &ip, format!("{}: a CPU belongs to one {what}", twice.join(", ")));
        }
        if let Some(node) = node_cpus {
            let off: Vec<u32> = cpus.iter().copied().filter(|c| !node.contains(c)).collect();
            if !off.is_empty() {
                cx.err(item, &ip, format!("CPU {} is not on the node (node CPUs: {})", format_cpu_list(&off), format_cpu_list(node)));
            }
        }
        for &c in &cpus {
            owner.entry(c).or_insert(i);
        }
        out.push(cpus);
    }
    if let (true, Some(node)) = (cover && cx.error_count() == before, node_cpus) {
        let missing: Vec<u32> = node.iter().copied().filter(|c| !owner.contains_key(c)).collect();
        if !missing.is_empty() {
            cx.err(n, path, format!("CPU {} is in no {what}; list every node CPU (or leave the field out)", format_cpu_list(&missing)));
        }
    }
    (cx.error_count() == before).then_some(out)
}
