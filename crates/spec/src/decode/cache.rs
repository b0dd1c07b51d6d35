//! `node.cache`, a workload's `cache` and `memoryBandwidth` (resctrl CAT / MBA).

use rtslice_yaml::{self as yaml, index, join, Reader, Val};

use super::values::SpecValues;
use crate::types::*;
use crate::{CacheDomain, CacheRequest, Mba, NodeCache};

/// `node.cache`: the L3 as resctrl's `info/L3` describes it.
pub(super) fn node_cache(cx: &mut Reader, n: &yaml::Node, path: &str, node_cpus: &NodeCpus) -> Option<NodeCache> {
    let f = cx.fields(n, path, &["ways", "minWays", "closids", "shareableMask", "domains", "mba"])?;
    let before = cx.error_count();
    let ways = f.required(cx, "ways", "give the ways of one L3 (the set bits of /sys/fs/resctrl/info/L3/cbm_mask)", |cx, v, p| {
        cx.int(v, p, 1, 64)
    })? as u32;
    let min_ways = f.optional(cx, "minWays", |cx, v, p| cx.int(v, p, 1, ways as i64)).map(|x| x as u32).unwrap_or(1);
    let closids =
        f.optional(cx, "closids", |cx, v, p| cx.int(v, p, 1, 4096)).map(|x| x as u32).unwrap_or(crate::DEFAULT_CLOSIDS);
    let mut cache = NodeCache { ways, min_ways, closids, shareable_mask: 0, domains: Vec::new(), mba: None };
    if let Some(v) = f.get("shareableMask") {
        let p = f.path_of("shareableMask");
        if let Some(mask) = hex_mask(cx, v, &p) {
            if mask & !cache.full_mask() != 0 {
                cx.err(v, &p, format!("{mask:#x} has bits outside the {ways} ways (mask {:#x})", cache.full_mask()));
            }
            cache.shareable_mask = mask;
        }
    }
    if let Some(v) = f.get("domains") {
        let p = f.path_of("domains");
        if let Some(items) = cx.seq(v, &p, "cache domains (`- {id: 0, cpus: 0-7}`)") {
            let mut claimed: Vec<(u32, u32)> = Vec::new(); // (cpu, domain id)
            for (i, item) in items.iter().enumerate() {
                let ip = index(&p, i);
                let Some(d) = cx.fields(item, &ip, &["id", "cpus"]) else { continue };
                let id = d.required(cx, "id", "give the L3 id (the `0` of `L3:0=fff` in schemata)", |cx, x, p| cx.int(x, p, 0, 4095));
                let cpus = d.required(cx, "cpus", "give the CPUs sharing this L3", |cx, x, p| cx.cpus(x, p));
                let (Some(id), Some(cpus)) = (id, cpus) else { continue };
                let id = id as u32;
                if cache.domains.iter().any(|x| x.id == id) {
                    cx.err(item, &join(&ip, "id"), format!("L3 id {id} is listed twice"));
                }
                for &c in &cpus {
                    if let Some((_, other)) = claimed.iter().find(|(cpu, _)| *cpu == c) {
                        cx.err(item, &join(&ip, "cpus"), format!("CPU {c} is already in L3 {other}; a CPU has one L3"));
                    }
                    claimed.push((c, id));
                }
                if let NodeCpus::List(node) = node_cpus {
                    let missing: Vec<u32> = cpus.iter().copied().filter(|c| !node.contains(c)).collect();
                    if !missing.is_empty() {
                        cx.err(item, &join(&ip, "cpus"), format!("CPU {} is not on the node", crate::format_cpu_list(&missing)));
                    }
                }
                cache.domains.push(CacheDomain { id, cpus });
            }
            if let NodeCpus::List(node) = node_cpus {
                let orphans: Vec<u32> = node.iter().copied().filter(|c| !claimed.iter().any(|(x, _)| x == c)).collect();
                if !cache.domains.is_empty() && !orphans.is_empty() {
                    cx.err(v, &p, format!("CPU {} has no L3 here; every node CPU belongs to one domain", crate::format_cpu_list(&orphans)));
                }
            }
        }
    }
    if let Some(v) = f.get("mba") {
        let p = f.path_of("mba");
        if let Some(m) = cx.fields(v, &p, &["min", "granularity"]) {
            let min = m.optional(cx, "min", |cx, x, p| cx.int(x, p, 1, 100)).map(|x| x as u32).unwrap_or(crate::DEFAULT_MBA_MIN);
            let granularity =
                m.optional(cx, "granularity", |cx, x, p| cx.int(x, p, 1, 100)).map(|x| x as u32).unwrap_or(crate::DEFAULT_MBA_GRANULARITY);
            cache.mba = Some(Mba { min, granularity });
        }
    }
    (cx.error_count() == before).then_some(cache)
}

/// A capacity bitmask as resctrl prints it (hex without `0x`), with `0x`, or as an integer.
fn hex_mask(cx: &mut Reader, n: &yaml::Node, path: &str) -> Option<u64> {
    match &n.val {
        Val::Int(i) if *i >= 0 => Some(*i as u64),
        Val::Str(s) => match u64::from_str_radix(s.trim().trim_start_matches("0x").trim_start_matches("0X"), 16) {
            Ok(m) => Some(m),
            Err(_) => {
                cx.err(n, path, format!("`{s}` is not a hexadecimal bitmask such as `0x3` (as in info/L3/shareable_bits)"));
                None
            }
        },
        _ => {
            cx.err(n, path, format!("expected a hexadecimal bitmask such as `0x3`, found {}", n.kind()));
            None
        }
    }
}

/// A workload's `cache`: `{ways: 4}`, `{share: 25%}` or `{masks: {0: f0}}`.
pub(super) fn cache_request(cx: &mut Reader, n: &yaml::Node, path: &str, node: Option<&NodeCache>) -> Option<CacheRequest> {
    let f = cx.fields(n, path, &["ways", "share", "masks"])?;
    let given: Vec<&str> = ["ways", "share", "masks"].into_iter().filter(|k| f.get(k).is_some()).collect();
    if given.len() > 1 {
        cx.err(n, path, format!("give one of `ways`, `share` or `masks`, not {}", given.join(" and ")));
        return None;
    }
    if let Some(v) = f.get("masks") {
        return cache_masks(cx, v, &f.path_of("masks"), node);
    }
    match (f.get("ways"), f.get("share")) {
        (Some(_), Some(_)) => None,
        (None, None) => {
            cx.err(n, path, "give `ways: N` (ways of the L3), `share: P%` (of the L3's ways) or `masks: {0: f0}` (the ways of each L3)");
            None
        }
        (Some(v), None) => {
            let p = f.path_of("ways");
            let max = node.map(|c| c.ways).unwrap_or(64);
            let ways = cx.int(v, &p, 1, 64)? as u32;
            if ways > max {
                cx.err(v, &p, format!("the node's L3 has {max} ways (node.cache.ways); ask for at most {max}"));
                return None;
            }
            if let Some(c) = node.filter(|c| ways < c.min_ways) {
                cx.err(v, &p, format!("the L3 allocates at least {} ways per group (node.cache.minWays)", c.min_ways));
                return None;
            }
            Some(CacheRequest::Ways(ways))
        }
        (None, Some(v)) => {
            let p = f.path_of("share");
            let share = cx.fraction(v, &p)?;
            if share <= 0.0 || share > 1.0 {
                cx.err(v, &p, "a share of the L3 lies above 0% and at most 100%");
                return None;
            }
            Some(CacheRequest::Share(share))
        }
    }
}

/// `masks`: one contiguous capacity bitmask per L3 id, inside the node's ways when `node.cache` says them.
fn cache_masks(cx: &mut Reader, n: &yaml::Node, path: &str, node: Option<&NodeCache>) -> Option<CacheRequest> {
    let Some(entries) = n.as_map() else {
        cx.err(n, path, format!("expected a map of L3 id to bitmask (`{{0: f0}}`), found {}", n.kind()));
        return None;
    };
    if entries.is_empty() {
        cx.err(n, path, "give the mask of at least one L3 (`{0: f0}`)");
        return None;
    }
    let before = cx.error_count();
    let mut out = std::collections::BTreeMap::new();
    for (k, v) in entries {
        let text = k.scalar_text().unwrap_or_default();
        let p = join(path, &text);
        let Ok(id) = text.trim().parse::<u32>() else {
            cx.err(k, &p, format!("`{text}` is not an L3 id (the `0` of `L3:0=f0` in schemata)"));
            continue;
        };
        let Some(mask) = hex_mask(cx, v, &p) else { continue };
        if !crate::contiguous(mask) {
            cx.err(v, &p, format!("{mask:#x} is not one run of set bits; Intel CAT takes only contiguous masks"));
            continue;
        }
        if let Some(c) = node {
            if mask & !c.full_mask() != 0 {
                cx.err(v, &p, format!("{mask:#x} has bits outside the {} ways (mask {:#x})", c.ways, c.full_mask()));
            } else if mask.count_ones() < c.min_ways {
                cx.err(v, &p, format!("the L3 allocates at least {} ways per group (node.cache.minWays)", c.min_ways));
            } else if !c.domains.is_empty() && !c.domains.iter().any(|d| d.id == id) {
                cx.err(n, &p, format!("L3 {id} is not in node.cache.domains"));
            }
        }
        out.insert(id, mask);
    }
    (cx.error_count() == before).then_some(CacheRequest::Masks(out))
}

/// `memoryBandwidth`: a ceiling as a fraction of the memory link (resctrl MBA's percent).
pub(super) fn memory_bandwidth(cx: &mut Reader, n: &yaml::Node, path: &str) -> Option<f64> {
    let f = cx.fraction(n, path)?;
    if f <= 0.0 || f > 1.0 {
        cx.err(n, path, "memory bandwidth is a ceiling above 0% and at most 100% (e.g. `50%`)");
        return None;
    }
    Some(f)
}
