//! Defragmentation proposals (study B): when a reservation of bandwidth b on k CPUs is refused
//! although the node has enough free bandwidth in total, find the fewest moves of existing per-CPU
//! shares that would leave k CPUs with b free each. Nothing is applied; the plan only proposes.

use crate::{Bw, Defrag, Move, State};

/// Most shares tried as one eviction set on a target CPU (subsets grow exponentially).
const MAX_EVICTIONS: usize = 3;

pub(crate) fn propose(st: &State, eligible: &[usize], b: Bw, k: usize) -> Option<Defrag> {
    let total_free: Bw = eligible.iter().map(|&ci| st.free(&st.cpus[ci])).sum();
    // Only fragmentation may block: the node must have the bandwidth somewhere.
    if (total_free as u128) < b as u128 * k as u128 {
        return None;
    }
    // Per target CPU, the cheapest eviction (fewest moves, then least bandwidth moved, then lowest id).
    let mut options: Vec<(usize, Bw, usize, Vec<Move>)> = Vec::new();
    for &ci in eligible {
        let c = &st.cpus[ci];
        if st.free(c) >= b {
            options.push((0, 0, ci, Vec::new()));
            continue;
        }
        if let Some((moved, moves)) = cheapest_eviction(st, eligible, ci, b, &[], &[]) {
            options.push((moves.len(), moved, ci, moves));
        }
    }
    options.sort_by(|a, b| (a.0, a.1, st.cpus[a.2].id).cmp(&(b.0, b.1, st.cpus[b.2].id)));
    if options.len() < k {
        return None;
    }
    // Take the k cheapest targets; re-plan their evictions together so destinations neither land on
    // another target nor overfill a CPU that several moves share.
    let targets: Vec<usize> = options[..k].iter().map(|o| o.2).collect();
    let target_ids: Vec<u32> = targets.iter().map(|&t| st.cpus[t].id).collect();
    let mut planned: Vec<Move> = Vec::new();
    for &t in &targets {
        if st.free(&st.cpus[t]) >= b {
            continue;
        }
        let (_, moves) = cheapest_eviction(st, eligible, t, b, &planned, &target_ids)?;
        planned.extend(moves);
    }
    let mut then: Vec<u32> = targets.iter().map(|&t| st.cpus[t].id).collect();
    then.sort_unstable();
    Some(Defrag { moves: planned, then_cpus: then })
}

/// Fewest shares to move off CPU `ci` so that it has `b` free, each to a CPU that can take it.
/// `planned` are moves already decided for other targets; `targets` receive nothing.
fn cheapest_eviction(st: &State, eligible: &[usize], ci: usize, b: Bw, planned: &[Move], targets: &[u32]) -> Option<(Bw, Vec<Move>)> {
    let c = &st.cpus[ci];
    let need = b.checked_sub(st.free(c))?;
    let shares: Vec<(usize, Bw)> = c.shares.iter().copied().filter(|&(w, _)| st.movable_to[w].is_some()).collect();
    let n = shares.len();
    for size in 1..=MAX_EVICTIONS.min(n) {
        let mut best: Option<(Bw, Vec<Move>)> = None;
        for subset in combinations(n, size) {
            let moved: Bw = subset.iter().map(|&s| shares[s].1).sum();
            if moved < need {
                continue;
            }
            if best.as_ref().is_some_and(|(m, _)| *m <= moved) {
                continue;
            }
            if let Some(moves) = place(st, eligible, ci, &subset.iter().map(|&s| shares[s]).collect::<Vec<_>>(), planned, targets) {
                best = Some((moved, moves));
            }
        }
        if best.is_some() {
            return best;
        }
    }
    None
}

/// Finds destinations for evicted shares: worst-fit, largest share first, never onto a CPU where the
/// same workload already has a share (one share per CPU per workload), never onto a target.
fn place(st: &State, eligible: &[usize], from: usize, evicted: &[(usize, Bw)], planned: &[Move], targets: &[u32]) -> Option<Vec<Move>> {
    let mut added: Vec<(usize, Bw)> = Vec::new(); // (cpu index, bandwidth added by these moves)
    let mut order: Vec<&(usize, Bw)> = evicted.iter().collect();
    order.sort_by_key(|&&(w, bw)| (std::cmp::Reverse(bw), w));
    let mut moves = Vec::new();
    for &&(w, bw) in &order {
        let allowed = st.movable_to[w].as_ref()?;
        let mut best: Option<(Bw, usize)> = None;
        for &di in eligible {
            if di == from {
                continue;
            }
            let d = &st.cpus[di];
            if !allowed.contains(&d.id) || d.shares.iter().any(|&(x, _)| x == w) {
                continue;
            }
            if targets.contains(&d.id) {
                continue;
            }
            if planned.iter().chain(moves.iter()).any(|m: &Move| m.to_cpu == d.id && m.workload == st.names[w]) {
                continue;
            }
            let promised: Bw = planned.iter().filter(|m| m.to_cpu == d.id).map(|m| crate::bw_from_f64(m.bandwidth)).sum::<Bw>()
                + added.iter().filter(|&&(x, _)| x == di).map(|&(_, a)| a).sum::<Bw>();
            let free = st.free(d).saturating_sub(promised);
            if free >= bw && best.is_none_or(|(f, _)| free > f) {
                best = Some((free, di));
            }
        }
        let (_, di) = best?;
        added.push((di, bw));
        moves.push(Move {
            workload: st.names[w].to_string(),
            from_cpu: st.cpus[from].id,
            to_cpu: st.cpus[di].id,
            bandwidth: crate::bw_f64(bw),
        });
    }
    Some(moves)
}

/// All `size`-subsets of 0..n in lexicographic order (n is the number of shares on one CPU: small).
fn combinations(n: usize, size: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let mut cur = Vec::with_capacity(size);
    fn rec(start: usize, n: usize, size: usize, cur: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if cur.len() == size {
            out.push(cur.clone());
            return;
        }
        for i in start..n {
            cur.push(i);
            rec(i + 1, n, size, cur, out);
            cur.pop();
        }
    }
    rec(0, n, size, &mut cur, &mut out);
    out
}
