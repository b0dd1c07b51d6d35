//! What each thread of a workload gets of its budget: the agent's split of a reclaiming pool by
//! measured demand ([`split_by_demand`], which the host's rule engine executes), and the per-thread
//! parts `rtslice plan --usage` sets beside what each thread was measured to use ([`thread_shares`]).
//!
//! A reservation is one budget, but the kernel enforces it per thread (SCHED_DEADLINE) or per group
//! and CPU (RT groups, HCBS). A thread whose part is below what it uses is throttled every period
//! however much of the budget its siblings leave idle (a fixed split: an LTE eNB's worker held to
//! runtime / n lost half the stack's throughput, docs/results.md), so `plan` says, with the numbers,
//! which thread that would be before anything runs.

use regex::Regex;
use serde::Serialize;

use crate::kernel::{KernelWorkload, Mechanism};
use crate::ThreadSched;

/// The part of a demand pool every thread gets whatever it used: a thread that was idle in the last
/// window (a worker the pool did not pick) may be the busy one in the next, and must be able to run
/// until the agent's next re-split.
pub const DEMAND_FLOOR: f64 = 0.25;

/// Splits `total` ns of runtime over threads that used `demand` ns each in the last window:
/// [`DEMAND_FLOOR`] of the pool in equal parts, the rest in proportion to demand (equal when nobody
/// ran), no part above its `caps` entry (what is left over goes to the others, water-filling). Floors
/// every part to whole ns, so the parts never sum to more than `total`.
pub fn split_by_demand(total: u64, caps: &[u64], demand: &[u64]) -> Vec<u64> {
    let n = demand.len();
    if n == 0 {
        return Vec::new();
    }
    let cap = |i: usize| caps.get(i).copied().unwrap_or(u64::MAX) as f64;
    let floor = total as f64 * DEMAND_FLOOR / n as f64;
    let sum: f64 = demand.iter().map(|&d| d as f64).sum();
    let weight: Vec<f64> = if sum > 0.0 { demand.iter().map(|&d| d as f64 / sum).collect() } else { vec![1.0 / n as f64; n] };
    let mut part: Vec<f64> = weight.iter().map(|w| floor + (total as f64 - floor * n as f64) * w).collect();
    // Water-filling: parts above their cap are cut to it and the surplus goes to the uncapped ones in
    // proportion to their parts; each round caps at least one more part, so n rounds suffice.
    for _ in 0..n {
        let surplus: f64 = part.iter().enumerate().map(|(i, p)| (p - cap(i)).max(0.0)).sum();
        if surplus <= 0.0 {
            break;
        }
        let open: f64 = part.iter().enumerate().filter(|&(i, &p)| p < cap(i)).map(|(_, p)| p).sum();
        for (i, p) in part.iter_mut().enumerate() {
            if *p >= cap(i) {
                *p = cap(i);
            } else if open > 0.0 {
                *p += surplus * *p / open;
            }
        }
        if open <= 0.0 {
            break;
        }
    }
    let mut out: Vec<u64> = part.iter().enumerate().map(|(i, p)| p.min(cap(i)).max(0.0).floor() as u64).collect();
    // Float rounding must never grant more than the pool.
    let mut over = out.iter().sum::<u64>().saturating_sub(total);
    for x in out.iter_mut().rev() {
        let cut = over.min(*x);
        *x -= cut;
        over -= cut;
    }
    out
}

/// `ns` every `from_period` as a time every `to_period` (the same bandwidth), rounded down.
pub fn rescale_down(ns: u64, to_period: u64, from_period: u64) -> u64 {
    u64::try_from(u128::from(ns) * u128::from(to_period) / u128::from(from_period.max(1))).unwrap_or(u64::MAX)
}

/// A demand pool's budget from its rules' `(runtime, period)` in ns: `(period, runtime)`, the
/// runtimes summed in the longest of their periods, each rounded down (the pool never holds more
/// bandwidth than its rules). None without rules. The host's `CompiledRules::demand_pools` and
/// [`thread_shares`] both count the pool so.
pub fn pool_budget(rules: &[(u64, u64)]) -> Option<(u64, u64)> {
    let period = rules.iter().map(|&(_, p)| p).max()?;
    Some((period, rules.iter().map(|&(r, p)| rescale_down(r, period, p)).sum()))
}

/// One thread as measured (`rtslice trace --json`): its name and the CPU it used, as a fraction of
/// one CPU averaged over the measurement.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThreadUse {
    pub name: String,
    pub cpu: f64,
}

/// What a thread gets under the kernel plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Part {
    /// A SCHED_DEADLINE budget of its own: `runtime_ns` every `period_ns`. `by_demand`: its part of
    /// the workload's reclaiming pool as the agent splits it for the use measured (beyond it, GRUB
    /// lets it run only on bandwidth its partition leaves unused); else its rule's runtime over the
    /// threads the rule matches, fixed.
    Deadline { runtime_ns: u64, period_ns: u64, by_demand: bool },
    /// A FIFO/RR thread in a group budget (RT groups, HCBS): `runtime_us` every `period_us` on each of
    /// the group's `cpus` CPUs, shared with the group's other real-time threads; one thread runs on one
    /// CPU at a time, so it gets at most one CPU's budget.
    Group { runtime_us: u64, period_us: u64, cpus: usize },
    /// A SCHED_OTHER thread under the reservation's CFS pool: `quota_us` every `period_us` over the
    /// group's CPUs, shared with its other SCHED_OTHER threads.
    Cfs { quota_us: u64, period_us: u64 },
    /// No budget bounds it: a FIFO/RR thread outside any group budget (its priority decides), a
    /// SCHED_OTHER thread without a pool, or a thread no rule names.
    Unbounded,
}

impl Part {
    /// The most of one CPU the thread can count on, when a budget bounds it.
    pub fn share(&self) -> Option<f64> {
        match *self {
            Part::Deadline { runtime_ns, period_ns, .. } => Some(runtime_ns as f64 / period_ns.max(1) as f64),
            Part::Group { runtime_us, period_us, .. } => Some(runtime_us as f64 / period_us.max(1) as f64),
            Part::Cfs { quota_us, period_us } => Some((quota_us as f64 / period_us.max(1) as f64).min(1.0)),
            Part::Unbounded => None,
        }
    }
}

/// One measured thread: the rule that places it, what it gets, what it used.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThreadShare {
    pub thread: String,
    /// The first rule whose pattern matches its name (none: it keeps what it runs with).
    pub rule: Option<String>,
    pub part: Part,
    /// Measured use, a fraction of one CPU (an average: a lower bound of what it needs in its
    /// busiest periods).
    pub used: f64,
    /// Its part is below its measured use: the kernel will throttle it.
    pub short: bool,
}

/// The budgets several threads share, against what those threads used together.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SharedShort {
    /// What is shared: "the reclaiming pool", "the group budget", "the CFS pool".
    pub what: String,
    /// Its bandwidth, in CPUs.
    pub holds: f64,
    /// What its threads used together, in CPUs.
    pub used: f64,
}

/// Every measured thread's part, and the shared budgets whose threads used more than they hold.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Shares {
    pub threads: Vec<ThreadShare>,
    pub shared: Vec<SharedShort>,
}

/// The part each measured thread of workload `k` (on `cpus` CPUs, under `mech`) gets, matched to
/// its rule as the host does (first match of the unanchored pattern wins), split as the host splits
/// (a deadline rule's runtime over the threads it matches; the reclaiming rules' budgets pooled and
/// split by the measured use with [`split_by_demand`], each part at most its rule's deadline). Err:
/// a rule's pattern is not a valid regex.
pub fn thread_shares(k: &KernelWorkload, mech: Mechanism, cpus: usize, used: &[ThreadUse]) -> Result<Shares, String> {
    let rules: Vec<Regex> = k.threads.iter().map(|t| Regex::new(&t.pattern).map_err(|e| format!("rule {:?}: {e}", t.pattern))).collect::<Result<_, _>>()?;
    let rule_of: Vec<Option<usize>> = used.iter().map(|u| rules.iter().position(|r| r.is_match(&u.name))).collect();
    let matched = |r: usize| rule_of.iter().filter(|&&x| x == Some(r)).count() as u64;
    let reclaims = |r: usize| k.threads[r].flags.iter().any(|f| f == "reclaim");

    // The reclaiming deadline rules that match a measured thread: one pool, counted in the longest
    // of their periods (the host's `CompiledRules::demand_pools`).
    let pool_rules: Vec<usize> = (0..k.threads.len())
        .filter(|&r| reclaims(r) && matched(r) > 0 && matches!(k.threads[r].sched, ThreadSched::Deadline { .. }))
        .collect();
    let timing = |r: usize| match k.threads[r].sched {
        ThreadSched::Deadline { runtime, deadline, period } => (runtime.as_nanos() as u64, deadline.as_nanos() as u64, period.as_nanos() as u64),
        _ => (0, 0, 1),
    };
    let budgets: Vec<(u64, u64)> = pool_rules.iter().map(|&r| (timing(r).0, timing(r).2)).collect();
    let (pool_period, pool_runtime) = pool_budget(&budgets).unwrap_or((1, 0));
    let members: Vec<usize> = (0..used.len()).filter(|&i| rule_of[i].is_some_and(|r| pool_rules.contains(&r))).collect();
    let caps: Vec<u64> = members.iter().map(|&i| {
        let (_, d, p) = timing(rule_of[i].unwrap_or_default());
        rescale_down(d, pool_period, p)
    }).collect();
    let demand: Vec<u64> = members.iter().map(|&i| (used[i].cpu.max(0.0) * pool_period as f64) as u64).collect();
    let parts = split_by_demand(pool_runtime, &caps, &demand);

    let mut out = Shares::default();
    for (i, u) in used.iter().enumerate() {
        let part = match rule_of[i].map(|r| (r, &k.threads[r].sched)) {
            Some((r, ThreadSched::Deadline { .. })) => {
                let (runtime, deadline, period) = timing(r);
                match members.iter().position(|&m| m == i) {
                    Some(j) => Part::Deadline { runtime_ns: rescale_down(parts[j], period, pool_period).min(deadline), period_ns: period, by_demand: true },
                    None => Part::Deadline { runtime_ns: runtime / matched(r).max(1), period_ns: period, by_demand: false },
                }
            }
            Some((_, ThreadSched::Fifo { .. } | ThreadSched::Rr { .. })) => match (mech, k.group_budget) {
                (Mechanism::RtGroup | Mechanism::Hcbs, Some(b)) => Part::Group { runtime_us: b.runtime_us, period_us: b.period_us, cpus },
                _ => Part::Unbounded,
            },
            Some((_, ThreadSched::Other { .. } | ThreadSched::Batch { .. } | ThreadSched::Idle)) | None => match k.cfs_quota {
                Some(q) => Part::Cfs { quota_us: q.runtime_us, period_us: q.period_us },
                None => Part::Unbounded,
            },
        };
        // A whole-ns runtime rounds a share down by < 1e-6: "short" only beyond that.
        let short = part.share().is_some_and(|s| s + 1e-6 < u.cpu);
        out.threads.push(ThreadShare { thread: u.name.clone(), rule: rule_of[i].map(|r| k.threads[r].pattern.clone()), part, used: u.cpu, short });
    }

    // Shared budgets against their threads' use together.
    let sum = |f: &dyn Fn(&Part) -> bool| out.threads.iter().filter(|t| f(&t.part)).map(|t| t.used).sum::<f64>();
    if !members.is_empty() {
        let used = sum(&|p| matches!(p, Part::Deadline { by_demand: true, .. }));
        let holds = pool_runtime as f64 / pool_period as f64;
        if used > holds + 1e-6 {
            out.shared.push(SharedShort { what: "the reclaiming pool".into(), holds, used });
        }
    }
    if let Some(b) = k.group_budget.filter(|_| out.threads.iter().any(|t| matches!(t.part, Part::Group { .. }))) {
        let used = sum(&|p| matches!(p, Part::Group { .. }));
        let holds = b.runtime_us as f64 / b.period_us.max(1) as f64 * cpus as f64;
        if used > holds + 1e-6 {
            out.shared.push(SharedShort { what: "the group budget".into(), holds, used });
        }
    }
    if let Some(q) = k.cfs_quota.filter(|_| out.threads.iter().any(|t| matches!(t.part, Part::Cfs { .. }))) {
        let used = sum(&|p| matches!(p, Part::Cfs { .. }));
        let holds = q.runtime_us as f64 / q.period_us.max(1) as f64;
        if used > holds + 1e-6 {
            out.shared.push(SharedShort { what: "the CFS pool".into(), holds, used });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{GroupBudget, KernelThread};
    use std::time::Duration;

    fn dl(pattern: &str, runtime_us: u64, period_us: u64, reclaim: bool) -> KernelThread {
        let (runtime, period) = (Duration::from_micros(runtime_us), Duration::from_micros(period_us));
        KernelThread {
            pattern: pattern.into(),
            sched: ThreadSched::Deadline { runtime, deadline: period, period },
            flags: if reclaim { vec!["reset_on_fork".into(), "reclaim".into()] } else { vec!["reset_on_fork".into()] },
            shared: true,
        }
    }

    fn workload(threads: Vec<KernelThread>) -> KernelWorkload {
        KernelWorkload { name: "enb".into(), partition: true, group_budget: None, cfs_quota: None, threads, budget: String::new() }
    }

    /// The eNB of issue 39: TX/RX, three workers and a stack thread under 7 ms every 10 ms, one rule
    /// per class.
    fn enb_use() -> Vec<ThreadUse> {
        let u = |name: &str, cpu| ThreadUse { name: name.into(), cpu };
        vec![u("TXRX", 0.06), u("WORKER0", 0.12), u("WORKER1", 0.03), u("WORKER2", 0.01), u("STACK", 0.04)]
    }

    #[test]
    fn a_fixed_split_names_the_worker_it_starves() {
        // 7 ms / 3 rules = 2.333 ms each; the workers' rule over three workers: 0.778 ms every 10 ms.
        let k = workload(vec![dl("^TXRX$", 2333, 10_000, false), dl("^WORKER[0-9]+$", 2333, 10_000, false), dl("^STACK$", 2333, 10_000, false)]);
        let s = thread_shares(&k, Mechanism::Deadline, 1, &enb_use()).unwrap();
        let w0 = &s.threads[1];
        assert_eq!(w0.part, Part::Deadline { runtime_ns: 777_666, period_ns: 10_000_000, by_demand: false });
        assert!(w0.short, "{w0:?}");
        assert_eq!(s.threads.iter().filter(|t| t.short).map(|t| t.thread.as_str()).collect::<Vec<_>>(), vec!["WORKER0"]);
        assert!(s.shared.is_empty());
    }

    #[test]
    fn the_demand_split_covers_the_same_stack() {
        let k = workload(vec![dl("^TXRX$", 2333, 10_000, true), dl("^WORKER[0-9]+$", 2333, 10_000, true), dl("^STACK$", 2333, 10_000, true)]);
        let s = thread_shares(&k, Mechanism::Deadline, 1, &enb_use()).unwrap();
        assert!(s.threads.iter().all(|t| matches!(t.part, Part::Deadline { by_demand: true, .. }) && !t.short), "{s:?}");
        let total: f64 = s.threads.iter().filter_map(|t| t.part.share()).sum();
        assert!(total <= 0.6999 + 1e-9, "the parts never exceed the pool: {total}");
        // A stack that uses more than the pool holds: the pool is named, and so is the busiest thread.
        let mut heavy = enb_use();
        heavy[1].cpu = 0.75;
        let s = thread_shares(&k, Mechanism::Deadline, 1, &heavy).unwrap();
        assert_eq!(s.shared.len(), 1, "{s:?}");
        assert!((s.shared[0].holds - 0.6999).abs() < 1e-9 && (s.shared[0].used - 0.89).abs() < 1e-9, "{s:?}");
        assert!(s.threads[1].short);
    }

    #[test]
    fn fifo_threads_share_the_group_budget_on_each_cpu() {
        let fifo = |p: &str| KernelThread { pattern: p.into(), sched: ThreadSched::Fifo { priority: 10, period: None }, flags: vec![], shared: false };
        let mut k = workload(vec![fifo("^WORKER"), fifo(".")]);
        k.group_budget = Some(GroupBudget { runtime_us: 20_000, period_us: 100_000 });
        let u = |name: &str, cpu| ThreadUse { name: name.into(), cpu };
        let s = thread_shares(&k, Mechanism::Hcbs, 2, &[u("WORKER0", 0.15), u("WORKER1", 0.15), u("main", 0.05)]).unwrap();
        assert!(s.threads.iter().all(|t| t.part == Part::Group { runtime_us: 20_000, period_us: 100_000, cpus: 2 } && !t.short));
        assert!(s.shared.is_empty(), "0.35 of 0.4 CPUs: {s:?}");
        let s = thread_shares(&k, Mechanism::Hcbs, 2, &[u("WORKER0", 0.25), u("WORKER1", 0.15), u("main", 0.05)]).unwrap();
        assert!(s.threads[0].short && !s.threads[1].short);
        assert_eq!(s.shared[0].what, "the group budget");
        // The same rules under SCHED_DEADLINE as the mechanism: no group budget bounds FIFO threads.
        let s = thread_shares(&k, Mechanism::Deadline, 2, &[u("WORKER0", 0.9)]).unwrap();
        assert_eq!(s.threads[0].part, Part::Unbounded);
    }

    #[test]
    fn a_bad_pattern_is_an_error_not_a_panic() {
        let k = workload(vec![dl("(", 1000, 10_000, false)]);
        assert!(thread_shares(&k, Mechanism::Deadline, 1, &enb_use()).unwrap_err().contains("\"(\""));
    }

    #[test]
    fn a_demand_split_follows_use_and_never_exceeds_the_pool() {
        // The busy thread gets most; the idle ones keep the floor; the sum stays within the pool.
        let parts = split_by_demand(900_000, &[1_000_000; 5], &[10, 400, 0, 0, 20]);
        assert_eq!(parts.len(), 5);
        assert!(parts.iter().sum::<u64>() <= 900_000);
        let floor = (900_000.0 * DEMAND_FLOOR / 5.0) as u64;
        assert!(parts.iter().all(|&p| p >= floor - 1), "{parts:?}");
        assert!(parts[1] > 600_000, "the busy thread holds most of the pool: {parts:?}");
        // Nobody ran: equal parts.
        assert_eq!(split_by_demand(900_000, &[1_000_000; 3], &[0, 0, 0]), vec![300_000; 3]);
        // A part above the cap (runtime ≤ deadline) is cut and the surplus goes to the others.
        let capped = split_by_demand(1_800_000, &[1_000_000; 3], &[1000, 1, 1]);
        assert_eq!(capped[0], 1_000_000, "{capped:?}");
        assert!(capped.iter().sum::<u64>() <= 1_800_000 && capped.iter().sum::<u64>() > 1_799_990, "{capped:?}");
        assert!(split_by_demand(5, &[1_000], &[]).is_empty());
    }
}
