//! Where a workload's CPUs come from: the candidate CPUs in tiers of locality, the pick by the fit
//! policy, the SMT and best-effort conflicts that rule a CPU out, and the words a refusal or a
//! warning uses to say why.

use super::*;

/// Lists CPUs with their free bandwidth for messages, at most 8 (big nodes would drown the reason).
pub(super) fn describe_free(st: &State, cpus: &[usize]) -> String {
    let mut parts: Vec<String> = cpus.iter().take(8).map(|&ci| format!("CPU {}: {}", st.cpus[ci].id, pct(st.free(&st.cpus[ci])))).collect();
    if cpus.len() > 8 {
        parts.push(format!("… {} more", cpus.len() - 8));
    }
    parts.join(", ")
}

/// A CPU that takes nothing more: housekeeping, exclusive to a workload, or held idle for one.
pub(super) fn blocked(c: &CpuState) -> bool {
    c.housekeeping || c.exclusive.is_some() || c.held.is_some()
}

/// Why a CPU cannot take anything, for messages.
pub(super) fn why_not(st: &State, c: &CpuState) -> Option<String> {
    if c.housekeeping {
        Some(format!("CPU {} is housekeeping", c.id))
    } else if let Some(o) = c.held {
        Some(format!("CPU {} is an SMT sibling held idle for `{}` (whole-core)", c.id, st.names[o]))
    } else {
        c.exclusive.map(|o| format!("CPU {} is exclusive to `{}`", c.id, st.names[o]))
    }
}

/// Why CPU `ci` may not carry real-time work whose `isolation.smt` is `smt`, if it may not:
/// `no-best-effort-sibling` needs siblings without best effort, `whole-core` idle siblings.
pub(super) fn smt_conflict(st: &State, ci: usize, smt: SmtIsolation) -> Option<String> {
    let id = st.cpus[ci].id;
    st.topo.siblings[ci].iter().find_map(|&s| {
        let c = &st.cpus[s];
        let be = c.best_effort.first().map(|&b| format!("carries best-effort `{}`", st.names[b]));
        let what = match smt {
            SmtIsolation::Shared => None,
            SmtIsolation::NoBestEffortSibling => be,
            SmtIsolation::WholeCore => {
                if c.housekeeping {
                    Some("is housekeeping".to_string())
                } else if let Some(o) = c.exclusive.or(c.held) {
                    Some(format!("is taken by `{}`", st.names[o]))
                } else if !c.shares.is_empty() {
                    Some(format!("carries {}", sharers(st, c)))
                } else {
                    be
                }
            }
        }?;
        Some(format!("CPU {id}'s SMT sibling {} {what}", c.id))
    })
}

/// Why best-effort work may not run on CPU `ci`, if it may not: a sibling carries a workload whose
/// `isolation.smt` keeps best effort off its cores.
pub(super) fn best_effort_conflict(st: &State, ci: usize) -> Option<String> {
    st.topo.siblings[ci].iter().find_map(|&s| {
        let c = &st.cpus[s];
        c.shares.iter().find(|&&(w, _)| !st.smt[w].is_shared()).map(|&(w, _)| {
            format!("CPU {}'s SMT sibling {} carries `{}` (isolation.smt: {})", st.cpus[ci].id, c.id, st.names[w], st.smt[w].name())
        })
    })
}

/// The locality groups a workload may use, as tiers tried in order: with a NIC of known NUMA node
/// named in its IRQ or net rules, first the groups on that node (with `locality: any`, that node's
/// CPUs), then the rest.
pub(super) fn tiers(st: &State, w: &Workload) -> Vec<Vec<Vec<usize>>> {
    let by_locality = locality_tiers(st, w);
    // CPUs isolated at boot (isolcpus) are for the workloads that ask for them: the others go there
    // only when nothing else fits. (With SCHED_DEADLINE on cgroup v2 a workload on some of them
    // cannot even be admitted: they share one root domain; the kernel layer refuses that.)
    if w.isolation.isolcpus || !st.cpus.iter().any(|c| c.isolated) {
        return by_locality;
    }
    let housekeeping: Vec<Vec<Vec<usize>>> = by_locality
        .iter()
        .map(|tier| tier.iter().map(|g| g.iter().copied().filter(|&ci| !st.cpus[ci].isolated).collect()).collect())
        .collect();
    housekeeping.into_iter().chain(by_locality).collect()
}

pub(super) fn locality_tiers(st: &State, w: &Workload) -> Vec<Vec<Vec<usize>>> {
    let loc = w.isolation.locality;
    let groups = st.topo.groups(loc);
    let Some((_, node)) = st.topo.preferred_node(w) else { return vec![groups] };
    let on_node = |g: &Vec<usize>| !g.is_empty() && g.iter().all(|&ci| st.topo.numa[ci] == Some(node));
    if loc == Locality::Any {
        let near: Vec<usize> = (0..st.cpus.len()).filter(|&ci| st.topo.numa[ci] == Some(node)).collect();
        return vec![vec![near], groups];
    }
    let (near, far): (Vec<Vec<usize>>, Vec<Vec<usize>>) = groups.into_iter().partition(on_node);
    vec![near, far]
}

/// k of `cands` in `key` order (keys are unique), at most one per core when `per_core`.
pub(super) fn pick(st: &State, cands: &[usize], k: usize, per_core: bool, key: &dyn Fn(usize) -> (u64, u32)) -> Option<Vec<usize>> {
    if cands.len() < k {
        return None;
    }
    let mut c = cands.to_vec();
    if !per_core {
        // Selecting the k best and sorting only those gives the same order as sorting all; a
        // 256-CPU node needs no full sort.
        if k < c.len() {
            c.select_nth_unstable_by_key(k - 1, |&ci| key(ci));
            c.truncate(k);
        }
        c.sort_unstable_by_key(|&ci| key(ci));
        return Some(c);
    }
    c.sort_unstable_by_key(|&ci| key(ci));
    let mut cores = std::collections::BTreeSet::new();
    let out: Vec<usize> = c.into_iter().filter(|&ci| cores.insert(st.topo.core[ci])).take(k).collect();
    (out.len() == k).then_some(out)
}

/// Where k CPUs go: in the first tier with a group that can hold them, the group whose pick scores
/// best (the sum of its keys' first parts, then its lowest CPU id), so the fit policy also chooses
/// among groups: worst-fit the roomiest group, best-fit the fullest that fits.
pub(super) fn place_in(st: &State, tiers: &[Vec<Vec<usize>>], fits: &[usize], k: usize, per_core: bool, key: &dyn Fn(usize) -> (u64, u32)) -> Option<Vec<usize>> {
    let mut fit = vec![false; st.cpus.len()];
    for &ci in fits {
        fit[ci] = true;
    }
    for tier in tiers {
        let mut best: Option<((u128, u32), Vec<usize>)> = None;
        for g in tier {
            let cands: Vec<usize> = g.iter().copied().filter(|&ci| fit[ci]).collect();
            let Some(p) = pick(st, &cands, k, per_core, key) else { continue };
            let score = (p.iter().map(|&ci| key(ci).0 as u128).sum(), p.iter().map(|&ci| st.cpus[ci].id).min().unwrap_or(0));
            if best.as_ref().is_none_or(|(s, _)| score < *s) {
                best = Some((score, p));
            }
        }
        if let Some((_, p)) = best {
            return Some(p);
        }
    }
    None
}

/// Why `fits` (CPU indices that could each take the work) hold no placement of k CPUs: per locality
/// group, how many usable CPUs (distinct cores under `whole-core`) it has.
pub(super) fn placement_failure(st: &State, w: &Workload, fits: &[usize], k: usize) -> String {
    let iso = &w.isolation;
    let per_core = iso.smt == SmtIsolation::WholeCore;
    let usable = |g: &[usize]| -> Vec<usize> {
        let mut cores = std::collections::BTreeSet::new();
        g.iter().copied().filter(|ci| fits.contains(ci) && (!per_core || cores.insert(st.topo.core[*ci]))).collect()
    };
    let what = match iso.locality {
        Locality::Llc => "LLC group",
        Locality::Numa => "NUMA node",
        Locality::Any => "node",
    };
    let per_group: Vec<String> = st
        .topo
        .groups(iso.locality)
        .iter()
        .enumerate()
        .map(|(gi, g)| {
            let u: Vec<u32> = usable(g).iter().map(|&ci| st.cpus[ci].id).collect();
            let label = if iso.locality == Locality::Any { "the node".to_string() } else { format!("{what} {gi}") };
            format!("{label}: {} ({})", u.len(), if u.is_empty() { "none".into() } else { format_cpu_list(&u) })
        })
        .collect();
    let mut constraints = Vec::new();
    if iso.locality != Locality::Any {
        constraints.push(format!("within one {what} (isolation.locality: {})", iso.locality.name()));
    }
    if per_core {
        constraints.push("one per core (isolation.smt: whole-core)".to_string());
    }
    let mut todo = vec!["ask for fewer CPUs".to_string()];
    if iso.locality != Locality::Any {
        todo.push(if iso.locality == Locality::Llc { "use locality: numa or any" } else { "use locality: any" }.into());
    }
    if per_core {
        todo.push("use smt: no-best-effort-sibling or shared".into());
    }
    todo.push(format!("or free CPUs in one {what}"));
    format!(
        "needs {k} CPU(s) {}; CPUs that could take it, per {what}: {}; {}",
        constraints.join(" and "),
        per_group.join(", "),
        todo.join(", ")
    )
}

/// Holds the other threads of the cores of `chosen` idle for workload `i` (`whole-core`).
pub(super) fn hold_siblings(st: &mut State, i: usize, chosen: &[usize]) {
    for &ci in chosen {
        for s in st.topo.siblings[ci].clone() {
            st.cpus[s].held = Some(i);
        }
    }
}

/// A plan warning when a workload asks for a locality level the topology does not know.
pub(super) fn locality_warning(st: &State, w: &Workload) -> Option<String> {
    let loc = w.isolation.locality;
    st.topo.unknown(loc).then(|| {
        let field = if loc == Locality::Llc { "llc" } else { "numa" };
        format!(
            "`{}` asks for isolation.locality: {field}, but the topology lists no {}; planned as if the node were one (declare node.topology.{field})",
            w.name,
            if loc == Locality::Llc { "LLC groups" } else { "NUMA nodes" }
        )
    })
}

/// Problems with fixed CPUs under the workload's topology constraints.
pub(super) fn topology_problems(st: &State, w: &Workload, idxs: &[usize]) -> Vec<String> {
    let iso = &w.isolation;
    let mut problems: Vec<String> = idxs.iter().filter_map(|&ci| smt_conflict(st, ci, iso.smt)).collect();
    if iso.smt == SmtIsolation::WholeCore {
        for (a, &x) in idxs.iter().enumerate() {
            if let Some(&y) = idxs[a + 1..].iter().find(|&&y| st.topo.core[y] == st.topo.core[x]) {
                problems.push(format!("CPUs {} and {} are one core; whole-core takes one CPU per core", st.cpus[x].id, st.cpus[y].id));
            }
        }
    }
    if !st.topo.unknown(iso.locality) && iso.locality != Locality::Any {
        let of = if iso.locality == Locality::Llc { &st.topo.llc } else { &st.topo.numa };
        let what = if iso.locality == Locality::Llc { "LLC group" } else { "NUMA node" };
        let mut groups: Vec<(Option<usize>, u32)> = idxs.iter().map(|&ci| (of[ci], st.cpus[ci].id)).collect();
        groups.sort();
        groups.dedup_by_key(|g| g.0);
        if groups.len() > 1 || groups.first().is_some_and(|g| g.0.is_none()) {
            let list: Vec<String> = groups
                .iter()
                .map(|(g, id)| match g {
                    Some(g) => format!("CPU {id} in {what} {g}"),
                    None => format!("CPU {id} in none"),
                })
                .collect();
            problems.push(format!("isolation.locality: {} needs one {what}, but {}", iso.locality.name(), list.join(", ")));
        }
    }
    problems
}

/// For a refusal under an SMT constraint: up to 4 of `cpus` that it rules out, and why.
pub(super) fn smt_note(st: &State, cpus: &[usize], smt: SmtIsolation) -> String {
    let why: Vec<String> = cpus.iter().filter_map(|&ci| smt_conflict(st, ci, smt)).collect();
    if why.is_empty() {
        return String::new();
    }
    let more = if why.len() > 4 { format!(", … {} more", why.len() - 4) } else { String::new() };
    format!(" ({}{more})", why.into_iter().take(4).collect::<Vec<_>>().join(", "))
}

pub(super) fn sharers(st: &State, c: &CpuState) -> String {
    let mut names: Vec<&str> = c.shares.iter().map(|&(i, _)| st.names[i].as_str()).collect();
    names.dedup();
    names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
}

pub(super) fn occupancy_note(st: &State) -> String {
    let hk: Vec<u32> = st.cpus.iter().filter(|c| c.housekeeping).map(|c| c.id).collect();
    let ex: Vec<String> =
        st.cpus.iter().filter_map(|c| c.exclusive.map(|o| format!("{}→`{}`", c.id, st.names[o]))).collect();
    let mut parts = Vec::new();
    if !hk.is_empty() {
        parts.push(format!("housekeeping {}", format_cpu_list(&hk)));
    }
    if !ex.is_empty() {
        parts.push(format!("exclusive {}", ex.join(", ")));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join("; "))
    }
}
