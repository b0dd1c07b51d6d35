//! `status`: the recorded plan against what the kernel shows now — every journaled value, every
//! thread of every workload against its rule, launched processes and the agent. Anything that differs
//! is drift.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cpus::CpuList;
use crate::error::Result;
use crate::journal::{Change, StateDir};
use crate::record::Mechanism;
use crate::rules::CompiledRules;
use crate::sched;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadStatus {
    pub pid: i32,
    pub tid: i32,
    pub comm: String,
    pub policy: String,
    pub cpus: CpuList,
    /// Index of the rule that applies (first match), if any.
    pub rule: Option<usize>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkloadStatus {
    pub name: String,
    pub cpus: CpuList,
    pub cgroup: PathBuf,
    /// Live processes in the workload's cgroups.
    pub pids: Vec<i32>,
    pub container: Option<String>,
    pub threads: Vec<ThreadStatus>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drift {
    pub what: String,
    pub expected: String,
    pub actual: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentStatus {
    pub pid: i32,
    pub alive: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub state_dir: PathBuf,
    pub applied: bool,
    pub mechanism: Option<Mechanism>,
    pub workloads: Vec<WorkloadStatus>,
    pub drift: Vec<Drift>,
    pub agent: Option<AgentStatus>,
    /// Journaled changes `reset` would undo.
    pub changes: usize,
    pub warnings: Vec<String>,
}

/// The status of one journal (a state directory, or one segment of a node) against the kernel;
/// `rtslice_host::status` merges a node's.
pub(crate) fn journal_status(dir: &StateDir) -> Result<Status> {
    let mut st = Status {
        state_dir: dir.path.clone(),
        applied: false,
        mechanism: None,
        workloads: Vec::new(),
        drift: Vec::new(),
        agent: None,
        changes: 0,
        warnings: Vec::new(),
    };
    let Some(state) = dir.load()? else { return Ok(st) };
    st.changes = state.changes.len();
    st.applied = !state.changes.is_empty();
    if state.boot_id != crate::journal::boot_id() {
        st.drift.push(Drift {
            what: "boot".into(),
            expected: format!("boot {}", state.boot_id),
            actual: "the host rebooted since apply: nothing applied survives; `rtslice reset --forget` clears the state".into(),
        });
        return Ok(st);
    }
    for c in &state.changes {
        match c {
            Change::Wrote { path, new, .. } => {
                if path.file_name().is_some_and(|n| n == "cgroup.subtree_control") {
                    continue;
                }
                let actual = crate::fsio::read_opt(path).ok().flatten();
                let ok = match &actual {
                    None => false,
                    // sched/features reads as the whole flag list; the journal holds one flag.
                    Some(cur) if path.as_path() == Path::new(crate::facts::SCHED_FEATURES) => {
                        cur.split_whitespace().any(|f| f == new)
                    }
                    Some(cur) if path.file_name().is_some_and(|n| n == crate::resctrl_files::SCHEMATA) => {
                        crate::resctrl_files::schemata_holds(cur, new)
                    }
                    Some(cur) if path.to_string_lossy().ends_with("ps_cpus") => {
                        CpuList::parse_mask(cur).ok() == CpuList::parse_mask(new).ok()
                    }
                    Some(cur) => crate::txn::same_value(cur, new),
                };
                if !ok {
                    st.drift.push(Drift {
                        what: path.display().to_string(),
                        expected: new.clone(),
                        actual: actual.unwrap_or_else(|| "(missing)".into()),
                    });
                }
            }
            Change::Created { path, .. } if !path.exists() => st.drift.push(Drift {
                what: path.display().to_string(),
                expected: "cgroup exists".into(),
                actual: "(missing)".into(),
            }),
            Change::Launched { proc, what, .. } if !proc.alive() => st.drift.push(Drift {
                what: format!("launched {what}"),
                expected: format!("pid {} running", proc.pid),
                actual: "exited".into(),
            }),
            Change::Agent { proc } => {
                st.agent = Some(AgentStatus { pid: proc.pid, alive: proc.alive() });
                if !proc.alive() {
                    st.drift.push(Drift {
                        what: "agent".into(),
                        expected: format!("pid {} running", proc.pid),
                        actual: "exited: threads born from now on get no rules (see agent.log in the state dir)".into(),
                    });
                }
            }
            _ => {}
        }
    }
    if let Some(rec) = &state.record {
        st.mechanism = Some(rec.mechanism);
        st.warnings = rec.warnings.clone();
        for w in &rec.workloads {
            let wide = rec.setup.workloads.iter().find(|s| s.name == w.name).filter(|s| s.wide_affinity).map(|_| w.cpus.clone());
            let rules = CompiledRules::new(&w.rules, wide).ok();
            let pids = crate::cgroup::workload_pids(&w.group.cpuset);
            let mut threads = Vec::new();
            let all = crate::rules::workload_threads(&w.group.cpuset);
            let names: Vec<(i32, String)> = all.iter().map(|(_, tid, comm)| (*tid, comm.clone())).collect();
            // What each thread should hold, with SCHED_DEADLINE budgets split over the threads a rule
            // matches now (as apply and the agent split them).
            let assigned = rules.as_ref().map(|r| r.assign(&names)).unwrap_or_default();
            // Demand pools (reclaiming reservations): each thread's runtime follows its use, the
            // pool's total must stay within its budget.
            // Threads may hold their parts at different periods (a rule's own period): each is
            // counted in the pool's period, rounded up.
            for pool in rules.as_ref().map(|r| r.demand_pools(&assigned)).unwrap_or_default() {
                let held: u64 = pool.members.iter().map(|&i| pool.held(assigned[i].0)).sum();
                if held > pool.runtime_ns {
                    st.drift.push(Drift {
                        what: format!("workload {} SCHED_DEADLINE budget (counted every {} µs)", w.name, pool.period_ns / 1000),
                        expected: format!("at most {} µs in total over its {} thread(s)", pool.runtime_ns / 1000, pool.members.len()),
                        actual: format!("{} µs", held / 1000),
                    });
                }
            }
            {
                for (pid, tid, comm) in all {
                    let wanted = assigned.iter().find(|(t, _)| *t == tid).map(|(_, w)| w.clone());
                    if let Some(want) = &wanted {
                        if let Err(why) = crate::rules::conforms(tid, want) {
                            st.drift.push(Drift {
                                what: format!("workload {} thread {tid} ({comm})", w.name),
                                expected: describe_want(want),
                                actual: why,
                            });
                        }
                    }
                    threads.push(ThreadStatus {
                        pid,
                        tid,
                        comm,
                        policy: sched::get_attr(tid).map(|p| p.to_string()).unwrap_or_else(|_| "?".into()),
                        cpus: sched::get_affinity(tid).unwrap_or_default(),
                        rule: wanted.map(|x| x.rule).filter(|&r| r != usize::MAX),
                    });
                }
            }
            for p in &w.pids {
                if !p.alive() && !st.drift.iter().any(|d| d.expected == format!("pid {} running", p.pid)) {
                    st.drift.push(Drift {
                        what: format!("workload {} process", w.name),
                        expected: format!("pid {} running", p.pid),
                        actual: "exited".into(),
                    });
                }
            }
            st.workloads.push(WorkloadStatus {
                name: w.name.clone(),
                cpus: w.cpus.clone(),
                cgroup: w.group.cpuset.clone(),
                pids,
                container: w.container.clone(),
                threads,
            });
        }
    }
    Ok(st)
}

fn describe_want(w: &crate::rules::Wanted) -> String {
    let mut s = Vec::new();
    if let Some(p) = w.policy {
        s.push(p.to_string());
    }
    if let Some(c) = &w.cpus {
        s.push(format!("CPUs {c}"));
    }
    s.join(", ")
}
