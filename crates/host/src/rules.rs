//! The thread-rule engine shared by `apply` (threads that exist now, journaled), the agent (threads
//! born later) and `status`: first matching rule by thread name wins; it sets the policy and the
//! affinity.
//!
//! One budget per rule: a SCHED_DEADLINE rule's runtime is what all the threads it matches get
//! *together* (the workload's reservation, split over its rules by `Reservation::split`), divided
//! equally among the threads it matches now ([`CompiledRules::assign`]). When threads come and go,
//! the split changes: the others shrink first, then the newcomer is admitted ([`enforce_all`]), so
//! the sum never exceeds the rule's budget — a workload that forks N workers never gets N × its
//! budget.
//!
//! Reclaiming reservations (the spec's `reclaim: true`, SCHED_FLAG_RECLAIM on their deadline rules)
//! also follow demand across periods: their rules' budgets form one pool of bandwidth that the agent
//! splits over the pool's threads by each thread's measured CPU use
//! ([`CompiledRules::assign_by_demand`], [`split_by_demand`]) — still never more than the pool in
//! total. The pool is counted in bandwidth, not per (deadline, period): a rule may run at a period of
//! its own (a stack's clock thread on a quarter of the TTI, for earlier deadlines), and its threads
//! still draw on the one budget of the workload, each part moved to its rule's period. A real
//! stack's busy thread moves (srsENB hands each TTI to whichever worker is idle), and an equal split
//! starves whichever thread is busy while the idle ones hold budget they do not use.

use regex::Regex;

use crate::cpus::CpuList;
use crate::error::{HostError, Result};
use crate::sched::{self, SchedAttr};
use crate::setup::ThreadRule;
// The split itself is the planner's (pure), so `plan --usage` shows the parts the agent gives.
use rtslice_plan::shares::{pool_budget, rescale_down, split_by_demand};

#[derive(Clone, Debug)]
pub struct CompiledRules {
    rules: Vec<(Regex, ThreadRule)>,
    /// Affinity for threads no rule places (wide affinity), if asked.
    pub wide: Option<CpuList>,
}

/// The reclaiming SCHED_DEADLINE rules of a workload: one budget of bandwidth split by demand.
/// Budgets and parts are counted as runtime every `period_ns` (the longest period of the pool's rules);
/// each thread's part is moved to its own rule's period when it is applied.
#[derive(Clone, Debug, PartialEq)]
pub struct DemandPool {
    /// The period the pool's runtimes are counted in.
    pub period_ns: u64,
    /// The pool's budget every `period_ns`: the sum of its rules' runtimes, each scaled to that period
    /// (rounded down: the pool never holds more bandwidth than its rules).
    pub runtime_ns: u64,
    /// Indices into the assignment the pool was found in.
    pub members: Vec<usize>,
}

impl DemandPool {
    /// A runtime every `period_ns` (a member's own period) counted in the pool's period, rounded up:
    /// what threads hold is never under-counted against the pool.
    pub fn counted(&self, runtime_ns: u64, period_ns: u64) -> u64 {
        let p = u128::from(period_ns.max(1));
        u64::try_from((u128::from(runtime_ns) * u128::from(self.period_ns)).div_ceil(p)).unwrap_or(u64::MAX)
    }

    /// What thread `tid` holds now counted in the pool's period (rounded up), 0 for a thread not
    /// under SCHED_DEADLINE (or gone): the measure `status` checks the pool with and the agent
    /// compares a re-split against.
    pub fn held(&self, tid: i32) -> u64 {
        match sched::get_attr(tid) {
            Ok(SchedAttr::Deadline { runtime_ns, period_ns, .. }) => self.counted(runtime_ns, period_ns),
            _ => 0,
        }
    }

    /// A part counted in the pool's period, as a runtime every `period_ns`, rounded down: a thread
    /// never gets more bandwidth than its part.
    pub fn at_period(&self, part_ns: u64, period_ns: u64) -> u64 {
        rescale_down(part_ns, period_ns, self.period_ns)
    }
}

/// What a rule asks for one thread.
#[derive(Clone, Debug, PartialEq)]
pub struct Wanted {
    pub rule: usize,
    pub policy: Option<SchedAttr>,
    pub cpus: Option<CpuList>,
}

impl CompiledRules {
    pub fn new(rules: &[ThreadRule], wide: Option<CpuList>) -> std::result::Result<CompiledRules, String> {
        let rules = rules
            .iter()
            .map(|r| crate::setup::pattern(&r.name).map(|re| (re, r.clone())))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(CompiledRules { rules, wide })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.wide.is_none()
    }

    /// The wanted state of each of a workload's threads (`(tid, comm)`, every process of the
    /// workload together): the first matching rule, with each SCHED_DEADLINE rule's runtime split
    /// equally among the threads it matches (floor, in ns: the sum never exceeds the budget; a share
    /// below the kernel's 1024 ns floor is refused by `SchedAttr::validate` with that reason).
    /// Threads no rule places are left out.
    pub fn assign(&self, threads: &[(i32, String)]) -> Vec<(i32, Wanted)> {
        let mut out: Vec<(i32, Wanted)> = threads.iter().filter_map(|(tid, comm)| Some((*tid, self.wanted(comm)?))).collect();
        let mut count = vec![0u64; self.rules.len()];
        for (_, w) in &out {
            if let (Some(c), Some(SchedAttr::Deadline { .. })) = (count.get_mut(w.rule), w.policy) {
                *c += 1;
            }
        }
        for (_, w) in out.iter_mut() {
            if let Some(SchedAttr::Deadline { runtime_ns, deadline_ns, period_ns, reclaim }) = w.policy {
                let n = count[w.rule].max(1);
                w.policy = Some(SchedAttr::Deadline { runtime_ns: runtime_ns / n, deadline_ns, period_ns, reclaim });
            }
        }
        out
    }

    /// As [`CompiledRules::assign`], with the reclaiming SCHED_DEADLINE rules pooled: their budgets
    /// are one budget of bandwidth ([`CompiledRules::demand_pools`]), split over every thread those
    /// rules match by `demand` (ns on CPU in the last window, by tid; a thread without a measurement
    /// counts as the pool's mean) with [`split_by_demand`], each part then moved to its thread's
    /// rule's period. Each part is at most its rule's deadline (the kernel refuses runtime >
    /// deadline); together they never exceed the pool. Rules without the reclaim flag keep the equal
    /// split.
    pub fn assign_by_demand(&self, threads: &[(i32, String)], demand: &std::collections::HashMap<i32, u64>) -> Vec<(i32, Wanted)> {
        let mut out = self.assign(threads);
        for pool in self.demand_pools(&out) {
            let known: Vec<u64> = pool.members.iter().filter_map(|&i| demand.get(&out[i].0).copied()).collect();
            let mean = if known.is_empty() { 0 } else { known.iter().sum::<u64>() / known.len() as u64 };
            let wants: Vec<u64> = pool.members.iter().map(|&i| demand.get(&out[i].0).copied().unwrap_or(mean)).collect();
            // Each member's rule: its deadline and period (the pool's members are reclaiming deadline rules).
            let own: Vec<(u64, u64)> =
                pool.members.iter().map(|&i| self.rule_timing(out[i].1.rule).unwrap_or((pool.period_ns, pool.period_ns))).collect();
            // Each part at most its deadline once moved back to its period (the kernel refuses
            // runtime > deadline): the deadline counted in the pool's period, rounded down.
            let caps: Vec<u64> = own.iter().map(|&(deadline_ns, period_ns)| rescale_down(deadline_ns, pool.period_ns, period_ns)).collect();
            for ((&i, part), (deadline_ns, period_ns)) in pool.members.iter().zip(split_by_demand(pool.runtime_ns, &caps, &wants)).zip(own) {
                let runtime_ns = pool.at_period(part, period_ns).min(deadline_ns);
                out[i].1.policy = Some(SchedAttr::Deadline { runtime_ns, deadline_ns, period_ns, reclaim: true });
            }
        }
        out
    }

    /// The (deadline, period) of a SCHED_DEADLINE rule.
    fn rule_timing(&self, rule: usize) -> Option<(u64, u64)> {
        match self.rules.get(rule)?.1.policy {
            Some(SchedAttr::Deadline { deadline_ns, period_ns, .. }) => Some((deadline_ns, period_ns)),
            _ => None,
        }
    }

    /// The demand pool of an assignment (from [`CompiledRules::assign`]): the reclaiming rules that
    /// match threads now, their budgets summed in the longest of their periods, and the indices of
    /// their threads in `assigned`. At most one pool (a workload's rules are one budget); none when no
    /// reclaiming rule matches a thread.
    pub fn demand_pools(&self, assigned: &[(i32, Wanted)]) -> Vec<DemandPool> {
        let mut rules: Vec<usize> = Vec::new();
        let mut members: Vec<usize> = Vec::new();
        for (i, (_, w)) in assigned.iter().enumerate() {
            let Some((_, r)) = self.rules.get(w.rule) else { continue };
            if !matches!(r.policy, Some(SchedAttr::Deadline { reclaim: true, .. })) {
                continue;
            }
            if !rules.contains(&w.rule) {
                rules.push(w.rule);
            }
            members.push(i);
        }
        let budgets: Vec<(u64, u64)> = rules
            .iter()
            .filter_map(|&r| match self.rules[r].1.policy {
                Some(SchedAttr::Deadline { runtime_ns, period_ns, .. }) => Some((runtime_ns, period_ns)),
                _ => None,
            })
            .collect();
        let Some((period_ns, runtime_ns)) = pool_budget(&budgets) else { return Vec::new() };
        vec![DemandPool { period_ns, runtime_ns, members }]
    }

    /// Whether any rule pools its budget by demand (a reclaiming SCHED_DEADLINE rule).
    pub fn has_demand_pool(&self) -> bool {
        self.rules.iter().any(|(_, r)| matches!(r.policy, Some(SchedAttr::Deadline { reclaim: true, .. })))
    }

    /// Whether any rule is a SCHED_DEADLINE rule (its budget is shared by the threads it matches).
    pub fn has_pooled(&self) -> bool {
        self.rules.iter().any(|(_, r)| matches!(r.policy, Some(SchedAttr::Deadline { .. })))
    }

    pub fn wanted(&self, comm: &str) -> Option<Wanted> {
        for (i, (re, r)) in self.rules.iter().enumerate() {
            if re.is_match(comm) {
                return Some(Wanted { rule: i, policy: r.policy, cpus: r.cpus.clone().or_else(|| self.wide.clone()) });
            }
        }
        self.wide.as_ref().map(|w| Wanted { rule: usize::MAX, policy: None, cpus: Some(w.clone()) })
    }
}

/// Applies a wanted state to a thread directly (the agent's path; not journaled). Affinity first, so
/// a FIFO thread never runs a moment on a CPU it should not; a SCHED_DEADLINE thread keeps the
/// partition's affinity (the kernel requires it to span the root domain).
pub fn enforce(tid: i32, w: &Wanted) -> Result<bool> {
    let mut changed = false;
    let deadline = matches!(w.policy, Some(SchedAttr::Deadline { .. }));
    if let (Some(cpus), false) = (&w.cpus, deadline) {
        if &sched::get_affinity(tid)? != cpus {
            sched::set_affinity(tid, cpus)?;
            changed = true;
        }
    }
    if let Some(p) = w.policy {
        if sched::get_attr(tid)? != p {
            sched::set_attr(tid, p)?;
            changed = true;
        }
    }
    Ok(changed)
}

/// Every thread of the processes in a workload's cgroup (`cgroup.procs` of `dir`), with its name.
pub fn workload_threads(dir: &std::path::Path) -> Vec<(i32, i32, String)> {
    let mut out = Vec::new();
    for pid in crate::cgroup::workload_pids(dir) {
        for tid in sched::threads_of(pid) {
            if let Some(comm) = sched::comm_of(pid, tid) {
                out.push((pid, tid, comm));
            }
        }
    }
    out
}

/// Whether applying `w` to `tid` gives back (or keeps) deadline bandwidth rather than taking more.
/// Compared as bandwidth (runtime / period), since a thread's period may change with its rule.
pub fn shrinks(tid: i32, w: &Wanted) -> bool {
    match w.policy {
        Some(SchedAttr::Deadline { runtime_ns, period_ns, .. }) => match sched::get_attr(tid) {
            Ok(SchedAttr::Deadline { runtime_ns: now, period_ns: now_period, .. }) => {
                u128::from(runtime_ns) * u128::from(now_period) <= u128::from(now) * u128::from(period_ns)
            }
            _ => false,
        },
        _ => true,
    }
}

/// Orders assignments so that every change that gives back deadline bandwidth comes before any that
/// takes more: the kernel admits each `sched_setattr` against what is in force at that moment, so a
/// newcomer is admitted only after the others have shrunk to their new share.
pub fn shrink_first(assignments: Vec<(i32, Wanted)>) -> Vec<(i32, Wanted)> {
    let (mut first, rest): (Vec<_>, Vec<_>) = assignments.into_iter().partition(|(tid, w)| shrinks(*tid, w));
    first.extend(rest);
    first
}

/// Applies every assignment (not journaled: the agent's path), shrinking first. Returns how many
/// threads changed and the errors per thread (an exited thread is not an error).
pub fn enforce_all(assignments: Vec<(i32, Wanted)>) -> (usize, Vec<(i32, HostError)>) {
    let mut changed = 0;
    let mut errors = Vec::new();
    for (tid, w) in shrink_first(assignments) {
        match enforce(tid, &w) {
            Ok(true) => changed += 1,
            Ok(false) => {}
            Err(HostError::Sched { source, .. }) if source.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => errors.push((tid, e)),
        }
    }
    (changed, errors)
}

/// Does the thread match what was wanted? (status: drift detection)
pub fn conforms(tid: i32, w: &Wanted) -> std::result::Result<(), String> {
    if let Some(p) = w.policy {
        match sched::get_attr(tid) {
            Ok(cur) if cur == p => {}
            // A demand pool's runtimes follow measured use (the agent re-splits them); the pool's
            // total is checked by the caller (`status`).
            Ok(SchedAttr::Deadline { runtime_ns, deadline_ns, period_ns, reclaim: true })
                if matches!(p, SchedAttr::Deadline { deadline_ns: d, period_ns: q, reclaim: true, .. } if d == deadline_ns && q == period_ns)
                    && runtime_ns > 0 => {}
            Ok(cur) => return Err(format!("policy {cur}, wanted {p}")),
            Err(HostError::Sched { .. }) => return Ok(()),
            Err(e) => return Err(e.to_string()),
        }
    }
    if let (Some(cpus), false) = (&w.cpus, matches!(w.policy, Some(SchedAttr::Deadline { .. }))) {
        match sched::get_affinity(tid) {
            Ok(cur) if &cur == cpus => {}
            Ok(cur) => return Err(format!("affinity {cur}, wanted {cpus}")),
            Err(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(name: &str, policy: Option<SchedAttr>) -> ThreadRule {
        ThreadRule { name: name.into(), policy, cpus: None, period_ns: None }
    }

    #[test]
    fn first_match_wins_and_wide_affinity_is_the_fallback() {
        let rules = CompiledRules::new(
            &[rule("^ru-thread$", Some(SchedAttr::Fifo { priority: 95 })), rule("thread", Some(SchedAttr::Fifo { priority: 1 }))],
            Some(CpuList::parse("4-7").unwrap()),
        )
        .unwrap();
        assert_eq!(rules.wanted("ru-thread").unwrap().policy, Some(SchedAttr::Fifo { priority: 95 }));
        assert_eq!(rules.wanted("fep_thread").unwrap().rule, 1);
        let other = rules.wanted("TASK_GTPV1_U").unwrap();
        assert_eq!((other.policy, other.cpus.unwrap().to_string()), (None, "4-7".to_string()));
        assert!(CompiledRules::new(&[rule("(", None)], None).is_err());
    }

    #[test]
    fn a_deadline_rule_splits_its_budget_over_the_threads_it_matches() {
        let dl = SchedAttr::Deadline { runtime_ns: 20_000_000, deadline_ns: 100_000_000, period_ns: 100_000_000, reclaim: false };
        let rules = CompiledRules::new(&[rule("^tx$", Some(SchedAttr::Fifo { priority: 9 })), rule(".*", Some(dl))], None).unwrap();
        let threads: Vec<(i32, String)> =
            [(1, "sh"), (2, "worker"), (3, "tx"), (4, "worker"), (5, "worker")].iter().map(|&(t, c)| (t, c.to_string())).collect();
        let a = rules.assign(&threads);
        assert_eq!(a.len(), 5);
        let runtimes: Vec<u64> = a
            .iter()
            .filter_map(|(_, w)| match w.policy {
                Some(SchedAttr::Deadline { runtime_ns, .. }) => Some(runtime_ns),
                _ => None,
            })
            .collect();
        assert_eq!(runtimes, vec![5_000_000; 4], "four threads share the rule's 20 ms");
        assert_eq!(a.iter().find(|(t, _)| *t == 3).unwrap().1.policy, Some(SchedAttr::Fifo { priority: 9 }));
        // One thread alone gets the whole budget; 3 threads never get more than it in total.
        assert_eq!(rules.assign(&threads[..1])[0].1.policy, Some(dl));
        let three = rules.assign(&threads[..2].iter().chain(&threads[3..4]).cloned().collect::<Vec<_>>());
        let sum: u64 = three.iter().filter_map(|(_, w)| match w.policy { Some(SchedAttr::Deadline { runtime_ns, .. }) => Some(runtime_ns), _ => None }).sum();
        assert!(sum <= 20_000_000 && sum > 19_999_990, "{sum}");
    }

    #[test]
    fn reclaiming_rules_pool_their_budgets_by_demand() {
        let dl = |runtime_ns, reclaim| SchedAttr::Deadline { runtime_ns, deadline_ns: 1_000_000, period_ns: 1_000_000, reclaim };
        // srsENB's layout: TXRX, the workers, STACK each a third of 0.9 ms.
        let rules = CompiledRules::new(
            &[rule("^TXRX$", Some(dl(300_000, true))), rule("^WORKER", Some(dl(300_000, true))), rule("^STACK$", Some(dl(300_000, true)))],
            None,
        )
        .unwrap();
        let threads: Vec<(i32, String)> =
            [(1, "TXRX"), (2, "WORKER0"), (3, "WORKER1"), (4, "WORKER2"), (5, "STACK")].iter().map(|&(t, c)| (t, c.to_string())).collect();
        let runtime = |a: &[(i32, Wanted)], tid: i32| match a.iter().find(|(t, _)| *t == tid).unwrap().1.policy {
            Some(SchedAttr::Deadline { runtime_ns, reclaim: true, .. }) => runtime_ns,
            other => panic!("{other:?}"),
        };
        let demand: std::collections::HashMap<i32, u64> = [(1, 20), (2, 150), (3, 150), (4, 150), (5, 10)].into_iter().collect();
        let a = rules.assign_by_demand(&threads, &demand);
        let total: u64 = (1..=5).map(|t| runtime(&a, t)).sum();
        assert!(total <= 900_000 && total > 899_990, "one pool of 0.9 ms: {total}");
        assert!(runtime(&a, 2) > 2 * runtime(&a, 1), "a busy worker holds more than TXRX");
        assert_eq!(rules.demand_pools(&a).len(), 1);
        // Rules without the reclaim flag keep the equal split per rule.
        let plain = CompiledRules::new(&[rule("^TXRX$", Some(dl(300_000, false))), rule("^WORKER", Some(dl(300_000, false)))], None).unwrap();
        let b = plain.assign_by_demand(&threads[..4], &demand);
        assert_eq!(b[1].1.policy, Some(dl(100_000, false)));
        assert!(plain.demand_pools(&b).is_empty());
    }

    /// `rtslice plan --usage` shows the parts the agent gives: the planner's thread_shares, made from
    /// the kernel plan's rules, equals assign_by_demand, made from the host's, for the same use
    /// (OAI's layout: a clock thread at a quarter of the TTI, three rules at the TTI, one pool).
    #[test]
    fn plan_shows_the_parts_the_agent_gives() {
        use rtslice_plan::kernel::{KernelThread, KernelWorkload};
        use rtslice_plan::shares::{thread_shares, Part, ThreadUse};
        use rtslice_plan::ThreadSched;
        use std::time::Duration;
        let layout = [("^ru-thread$", 56_250u64, 250_000u64), ("^fep_processing$", 225_000, 1_000_000), ("^feptx", 225_000, 1_000_000), ("^lte-softmodem$", 225_000, 1_000_000)];
        let dl = |runtime_ns, period_ns| SchedAttr::Deadline { runtime_ns, deadline_ns: period_ns, period_ns, reclaim: true };
        let rules = CompiledRules::new(&layout.map(|(p, r, t)| rule(p, Some(dl(r, t)))), None).unwrap();
        let kernel = KernelWorkload {
            name: "oai".into(),
            partition: true,
            group_budget: None,
            cfs_quota: None,
            threads: layout
                .map(|(p, r, t)| KernelThread {
                    pattern: p.into(),
                    sched: ThreadSched::Deadline { runtime: Duration::from_nanos(r), deadline: Duration::from_nanos(t), period: Duration::from_nanos(t) },
                    flags: vec!["reset_on_fork".into(), "reclaim".into()],
                    shared: true,
                })
                .to_vec(),
            budget: String::new(),
        };
        let names = ["ru-thread", "fep_processing", "feptx_thread", "feptx_ofdm", "lte-softmodem"];
        let threads: Vec<(i32, String)> = names.iter().enumerate().map(|(i, c)| (i as i32 + 1, c.to_string())).collect();
        for demand in [[50_000u64, 300_000, 100_000, 20_000, 10_000], [0, 0, 0, 0, 0], [1_000, 700_000, 1_000, 1_000, 1_000]] {
            let agent = rules.assign_by_demand(&threads, &(1..=5).zip(demand).collect());
            let used: Vec<ThreadUse> = names.iter().zip(demand).map(|(n, d)| ThreadUse { name: n.to_string(), cpu: d as f64 / 1e6 }).collect();
            let plan = thread_shares(&kernel, rtslice_plan::Mechanism::Deadline, 1, &used).unwrap();
            for ((tid, w), p) in agent.iter().zip(&plan.threads) {
                let (Some(SchedAttr::Deadline { runtime_ns, period_ns, .. }), Part::Deadline { runtime_ns: shown, period_ns: shown_period, by_demand: true }) = (w.policy, &p.part) else {
                    panic!("{tid}: {w:?} vs {p:?}")
                };
                assert_eq!(period_ns, *shown_period, "{tid}");
                assert!(runtime_ns.abs_diff(*shown) <= 2, "{tid} ({demand:?}): the agent gives {runtime_ns} ns, plan shows {shown}");
            }
        }
    }

    #[test]
    fn a_rule_at_its_own_period_draws_on_the_one_pool_by_bandwidth() {
        // OAI's layout with the clock thread at a quarter of the TTI: 225 µs every 1 ms is 56.25 µs
        // every 250 µs. One pool of 0.9 ms per 1 ms, counted in the longest period.
        let dl = |runtime_ns, period_ns| SchedAttr::Deadline { runtime_ns, deadline_ns: period_ns, period_ns, reclaim: true };
        let rules = CompiledRules::new(
            &[
                rule("^ru-thread$", Some(dl(56_250, 250_000))),
                rule("^fep_processing$", Some(dl(225_000, 1_000_000))),
                rule("^feptx", Some(dl(225_000, 1_000_000))),
                rule("^lte-softmodem$", Some(dl(225_000, 1_000_000))),
            ],
            None,
        )
        .unwrap();
        let threads: Vec<(i32, String)> =
            [(1, "ru-thread"), (2, "fep_processing"), (3, "feptx_thread"), (4, "lte-softmodem")].iter().map(|&(t, c)| (t, c.to_string())).collect();
        let a = rules.assign(&threads);
        let pools = rules.demand_pools(&a);
        assert_eq!(pools.len(), 1, "one pool across periods");
        assert_eq!((pools[0].period_ns, pools[0].runtime_ns, pools[0].members.len()), (1_000_000, 900_000, 4));
        for demand in [[0u64, 0, 0, 0], [300, 100, 50, 10], [1, 1_000_000, 1, 1], [1_000_000, 1, 1, 1]] {
            let demand: std::collections::HashMap<i32, u64> = (1..=4).zip(demand).collect();
            let b = rules.assign_by_demand(&threads, &demand);
            let mut bandwidth = 0u128; // in parts per 10^12 of a CPU
            for (tid, w) in &b {
                let Some(SchedAttr::Deadline { runtime_ns, deadline_ns, period_ns, reclaim: true }) = w.policy else { panic!("{w:?}") };
                assert_eq!(period_ns, if *tid == 1 { 250_000 } else { 1_000_000 }, "each thread keeps its rule's period");
                assert!(runtime_ns <= deadline_ns && runtime_ns >= 1024, "{tid}: {runtime_ns}");
                bandwidth += u128::from(runtime_ns) * 1_000_000_000_000 / u128::from(period_ns);
            }
            assert!(bandwidth <= 900_000_000_000, "never more than the pool's 90 %: {bandwidth}");
            assert!(bandwidth > 899_000_000_000, "the pool is handed out: {bandwidth}");
            // The status check counts what they hold in the pool's period, rounded up, within the pool.
            let held: u64 = b
                .iter()
                .map(|(_, w)| match w.policy {
                    Some(SchedAttr::Deadline { runtime_ns, period_ns, .. }) => pools[0].counted(runtime_ns, period_ns),
                    _ => 0,
                })
                .sum();
            assert!(held <= pools[0].runtime_ns, "{held}");
        }
        // The clock thread asking for everything is capped at its own deadline (250 µs per 250 µs
        // would be a whole CPU; the cap counts 1 ms per 1 ms), the surplus goes to the others.
        let greedy: std::collections::HashMap<i32, u64> = [(1, 1_000_000), (2, 0), (3, 0), (4, 0)].into_iter().collect();
        let c = rules.assign_by_demand(&threads, &greedy);
        let Some(SchedAttr::Deadline { runtime_ns, .. }) = c[0].1.policy else { panic!() };
        assert!(runtime_ns <= 250_000 && runtime_ns > 150_000, "{runtime_ns}");
    }

    #[test]
    fn enforce_changes_a_real_thread_once() {
        // SCHED_BATCH with a higher nice needs no privilege: exercises the real syscalls.
        let rules = CompiledRules::new(&[rule("^batchy$", Some(SchedAttr::Batch { nice: 3 }))], None).unwrap();
        std::thread::Builder::new()
            .name("batchy".into())
            .spawn(move || {
                let tid = sched::gettid();
                let comm = sched::comm_of(std::process::id() as i32, tid).unwrap();
                let w = rules.wanted(&comm).unwrap();
                assert!(conforms(tid, &w).is_err());
                assert!(enforce(tid, &w).unwrap());
                assert!(!enforce(tid, &w).unwrap(), "second pass changes nothing");
                assert!(conforms(tid, &w).is_ok());
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
