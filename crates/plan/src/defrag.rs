//! Defragmentation proposals (study B): when a reservation of bandwidth b on k CPUs is refused
//! although the node has enough free bandwidth in total, find the fewest moves of existing per-CPU
//! shares that would leave k CPUs with b free each. Nothing is applied; the plan only proposes.
//!
//! Per target CPU, the fewest evictions is found exactly (subsets by size, then by bandwidth moved)
//! up to MAX_EVICTIONS shares; a lower bound (its largest shares that fit somewhere else) orders and
//! prunes the targets, so a full 256-CPU node costs a few target evaluations, not 256.

use crate::{Bw, Defrag, Move, State};

/// Most shares moved off one target CPU (subsets grow exponentially; more moves is rarely a plan
/// an operator would run anyway).
const MAX_EVICTIONS: usize = 3;

/// `eligible`: CPUs shares may move between; `within`: the CPUs (a subset) the request may land on.
pub(crate) fn propose(st: &State, eligible: &[usize], within: &[usize], b: Bw, k: usize) -> Option<Defrag> {
    let total_free: Bw = eligible.iter().map(|&ci| st.free(&st.cpus[ci])).sum();
    // Only fragmentation may block: the node must have the bandwidth somewhere.
    if (total_free as u128) < b as u128 * k as u128 {
        return None;
    }
    // A share can only move if another CPU has room for it: on a full node most cannot, and knowing
    // that up front keeps the search from trying every subset everywhere.
    let mut frees: Vec<Bw> = eligible.iter().map(|&ci| st.free(&st.cpus[ci])).collect();
    frees.sort_unstable_by(|a, b| b.cmp(a));
    let roomiest = frees.first().copied().unwrap_or(0);
    let second = frees.get(1).copied().unwrap_or(0);
    let may_move = |ci: usize, s: Bw| s <= if st.free(&st.cpus[ci]) == roomiest { second } else { roomiest };
    // Lower bound of moves per target: how many of its largest movable shares cover the shortfall.
    let mut cands: Vec<(usize, Bw, usize)> = Vec::new(); // (lower bound, shortfall, cpu index)
    for &ci in within {
        let c = &st.cpus[ci];
        let Some(need) = b.checked_sub(st.free(c)).filter(|&n| n > 0) else {
            cands.push((0, 0, ci));
            continue;
        };
        let mut sizes: Vec<Bw> = c.shares.iter().filter(|&&(w, s)| st.movable[w] && may_move(ci, s)).map(|&(_, s)| s).collect();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        let mut sum = 0;
        let lb = sizes.iter().take(MAX_EVICTIONS).position(|&s| {
            sum += s;
            sum >= need
        });
        if let Some(lb) = lb {
            cands.push((lb + 1, need, ci));
        }
    }
    cands.sort_by_key(|&(lb, need, ci)| (lb, need, st.cpus[ci].id));
    // Exact costs, in lower-bound order, until no remaining target can enter the k best.
    let mut found: Vec<(usize, Bw, u32, usize)> = Vec::new(); // (moves, moved, cpu id, cpu index)
    for &(lb, _, ci) in &cands {
        if found.len() >= k {
            found.sort_unstable();
            // Nothing left can need fewer moves. (Equal counts are not explored further: candidates
            // come by smallest shortfall, which is what usually moves the least bandwidth.)
            if lb >= found[k - 1].0 {
                break;
            }
        }
        if lb == 0 {
            found.push((0, 0, st.cpus[ci].id, ci));
        } else if let Some((moved, moves)) = cheapest_eviction(st, eligible, ci, b, &[], &[]) {
            found.push((moves.len(), moved, st.cpus[ci].id, ci));
        }
    }
    found.sort_unstable();
    if found.len() < k {
        return None;
    }
    // Take the k cheapest targets; re-plan their evictions together so destinations neither land on
    // another target nor overfill a CPU that several moves share.
    let targets: Vec<usize> = found[..k].iter().map(|f| f.3).collect();
    let target_ids: Vec<u32> = targets.iter().map(|&t| st.cpus[t].id).collect();
    let mut planned: Vec<Move> = Vec::new();
    for &t in &targets {
        if st.free(&st.cpus[t]) >= b {
            continue;
        }
        let (_, moves) = cheapest_eviction(st, eligible, t, b, &planned, &target_ids)?;
        planned.extend(moves);
    }
    let mut then = target_ids;
    then.sort_unstable();
    Some(Defrag { moves: planned, then_cpus: then })
}

/// Fewest shares to move off CPU `ci` so that it has `b` free, each to a CPU that can take it;
/// among equally few, the least bandwidth moved. `planned` are moves already decided for other
/// targets; `targets` receive nothing.
fn cheapest_eviction(st: &State, eligible: &[usize], ci: usize, b: Bw, planned: &[Move], targets: &[u32]) -> Option<(Bw, Vec<Move>)> {
    let c = &st.cpus[ci];
    let need = b.checked_sub(st.free(c))?;
    let shares: Vec<(usize, Bw)> = c.shares.iter().copied().filter(|&(w, _)| st.movable[w]).collect();
    let n = shares.len();
    for size in 1..=MAX_EVICTIONS.min(n) {
        let mut subsets: Vec<(Bw, Vec<usize>)> = combinations(n, size)
            .into_iter()
            .map(|s| (s.iter().map(|&x| shares[x].1).sum(), s))
            .filter(|(moved, _)| *moved >= need)
            .collect();
        subsets.sort();
        for (moved, subset) in subsets {
            let evicted: Vec<(usize, Bw)> = subset.iter().map(|&x| shares[x]).collect();
            if let Some(moves) = place(st, eligible, ci, &evicted, planned, targets) {
                return Some((moved, moves));
            }
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
        if !st.movable[w] {
            return None;
        }
        let mut best: Option<(Bw, usize)> = None;
        for &di in eligible {
            if di == from {
                continue;
            }
            let d = &st.cpus[di];
            // Cheap test first: most CPUs of a full node cannot take the share at all.
            if st.free(d) < bw || best.is_some_and(|(f, _)| st.free(d) <= f) {
                continue;
            }
            if targets.contains(&d.id) || d.shares.iter().any(|&(x, _)| x == w) {
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
            workload: st.names[w].clone(),
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
