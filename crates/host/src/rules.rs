//! The thread-rule engine shared by `apply` (threads that exist now, journaled) and the agent
//! (threads born later): first matching rule by thread name wins; it sets the policy and the affinity.

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
