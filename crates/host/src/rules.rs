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

use regex::Regex;

use crate::cpus::CpuList;
use crate::error::{HostError, Result};
use crate::sched::{self, SchedAttr};
use crate::setup::ThreadRule;

#[derive(Clone, Debug)]
pub struct CompiledRules {
    rules: Vec<(Regex, ThreadRule)>,
    /// Affinity for threads no rule places (wide affinity), if asked.
    pub wide: Option<CpuList>,
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

/// The runtime a thread's SCHED_DEADLINE policy holds now, 0 for any other policy (or a gone thread).
fn current_runtime(tid: i32) -> u64 {
    match sched::get_attr(tid) {
        Ok(SchedAttr::Deadline { runtime_ns, .. }) => runtime_ns,
        _ => 0,
    }
}

/// Whether applying `w` to `tid` gives back (or keeps) deadline bandwidth rather than taking more.
pub fn shrinks(tid: i32, w: &Wanted) -> bool {
    match w.policy {
        Some(SchedAttr::Deadline { runtime_ns, .. }) => runtime_ns <= current_runtime(tid),
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
        ThreadRule { name: name.into(), policy, cpus: None, budget_share: None }
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
