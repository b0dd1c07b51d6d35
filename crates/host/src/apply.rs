//! `apply`: a whole [`Setup`] made real as a node run in-process — the node's base, then each
//! workload deployed in turn through [`Node::deploy`] (the daemon's code), then the agent for
//! threads born later — all or nothing: the whole setup is checked against the host before anything
//! is touched, and a failure at any step resets the node (every workload removed, then the base).
//! `reset` undoes it as it undoes any node.

use std::path::{Path, PathBuf};

use rtslice_sys::proc_ref::ProcRef;
use serde::{Deserialize, Serialize};

use crate::error::{HostError, Result};
use crate::facts::HostFacts;
use crate::journal::StateDir;
use crate::launch::{self, AgentCommand};
use crate::node::{Node, NodeOptions};
use crate::prepare::{prepare, rejected, resolve_mechanism};
use crate::record::{Mechanism, WorkloadRecord};
use crate::resctrl::Resctrl;
use crate::setup::Setup;
use crate::txn::Fault;

#[derive(Clone, Debug, Default)]
pub struct ApplyOptions {
    pub state_dir: StateDir,
    /// Force a reservation mechanism; `None` picks the best the host has (HCBS > SCHED_DEADLINE in
    /// partitions (when reserved CPU sets are disjoint) > RT groups).
    pub mechanism: Option<Mechanism>,
    /// The share of each CPU the node's reservations may take (the plan's node cap; RT groups: the
    /// parent group's budget). `None`: the spec's default cap.
    pub cap: Option<f64>,
    /// Start an agent for threads born after apply returns; `None` = rules only for threads that exist.
    pub agent: Option<AgentCommand>,
    /// Set fair_server runtime to 0 on CPUs that hold only reserved RT work.
    pub fair_server_off: bool,
    /// Turn the scheduler features HRTICK and HRTICK_DL on (debugfs `sched/features`): CFS slices
    /// and SCHED_DEADLINE runtimes are then enforced by high-resolution timers instead of the tick
    /// (4 ms at HZ=250). Journaled; reset restores the previous settings.
    pub hrtick: bool,
    /// The resctrl root for cache allocation (default `/sys/fs/resctrl`); only touched when a
    /// workload has a cache allocation or a memory-bandwidth ceiling.
    pub resctrl: Option<PathBuf>,
    /// runc binary (default: from PATH).
    pub runc: Option<PathBuf>,
    /// Test hook: make the n-th change fail (counted across the base, the deploys and the agent, in order).
    pub fault: Fault,
}

impl ApplyOptions {
    pub fn with_state_dir(path: impl Into<PathBuf>) -> ApplyOptions {
        ApplyOptions { state_dir: StateDir::new(path), ..Default::default() }
    }
}

/// What an apply did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Applied {
    pub mechanism: Mechanism,
    pub workloads: Vec<WorkloadRecord>,
    pub warnings: Vec<String>,
    /// Number of journaled changes (what `reset` will undo).
    pub changes: usize,
    pub agent: Option<ProcRef>,
}

/// Applies a setup. On failure everything done is rolled back and the error names the step.
pub fn apply_setup(setup: &Setup, opts: &ApplyOptions) -> Result<Applied> {
    let facts = HostFacts::detect()?;
    apply_with_facts(setup, opts, &facts)
}

/// [`apply_setup`] with the host's facts read by the caller.
pub fn apply_with_facts(whole: &Setup, opts: &ApplyOptions, facts: &HostFacts) -> Result<Applied> {
    let parts = whole.per_workload();
    let mech = resolve_mechanism(whole, facts, opts.mechanism)?;
    // The whole setup against the host before anything is touched (a deploy checks its own
    // workload again, against what the node holds by then).
    let (_, mut warnings) = prepare(whole, facts, mech)?;
    for w in &whole.workloads {
        launch::check_launch(w, opts.runc.as_deref())?;
    }
    crate::devices::resolve(Path::new("/"), whole)?;
    let resctrl = opts.resctrl.clone().map(Resctrl::new).unwrap_or_default();
    if let Some(plan) = &whole.cache {
        resctrl.check(plan)?;
    } else if let Some(w) = whole.workloads.iter().find(|w| w.cache.is_some()) {
        return Err(rejected(format!("workload {} has a resctrl group but the setup has no cache plan (a bug of its producer)", w.name)));
    }
    let mut node = open_empty_node(opts, facts, mech)?;
    warnings.extend(node.base().warnings.iter().cloned());
    let mut workloads = Vec::new();
    let mut done = node.journal_len_base();
    let result = (|| -> Result<Option<ProcRef>> {
        for part in &parts {
            // The fault counts the changes in order (the base's, each deploy's, the agent's): it
            // lands in the step that makes the n-th.
            node.set_fault(Fault { fail_change: opts.fault.fail_change.and_then(|n| n.checked_sub(done)) });
            let rec = node.deploy(part)?;
            done += node.journal_len(&rec.name);
            workloads.push(rec);
        }
        node.set_fault(Fault { fail_change: opts.fault.fail_change.and_then(|n| n.checked_sub(done)) });
        match &opts.agent {
            Some(cmd) => node.start_agent(cmd),
            None => Ok(None),
        }
    })();
    match result {
        Ok(agent) => {
            // The deploys' warnings as their records keep them (the apply is done: a record that
            // cannot be read now costs its warnings, not the apply).
            for r in node.records().unwrap_or_default() {
                warnings.extend(r.warnings);
            }
            let changes = node.journal_len_total();
            Ok(Applied { mechanism: mech, workloads, warnings, changes, agent })
        }
        Err(e) => {
            // All or nothing: the workloads deployed before the failure and the base go too (with
            // no fault injected: the node's removals take it as theirs).
            node.set_fault(Fault::default());
            if let Err(reset) = node.reset() {
                return Err(HostError::StepFailed {
                    step: "apply".into(),
                    source: Box::new(e),
                    rollback_errors: vec![format!("resetting the node after the failure: {reset}")],
                });
            }
            Err(e)
        }
    }
}

/// The node this apply runs: a fresh one, with this apply's mechanism and options. A state
/// directory that holds a node service's node, or an apply's workloads, is refused: one-shot apply
/// takes a host whole. An apply's base left without workloads is reset first, so the node has this
/// apply's options.
fn open_empty_node(opts: &ApplyOptions, facts: &HostFacts, mech: Mechanism) -> Result<Node> {
    if crate::journal::node_active(&opts.state_dir) && !crate::journal::one_shot_applied(&opts.state_dir) {
        // Even without workloads: its daemon deploys its desired state when it starts.
        return Err(rejected(format!(
            "{} holds a node (the `rtslice daemon`'s workloads); deploy through it, or reset the node first",
            crate::journal::node_dir(&opts.state_dir).display()
        )));
    }
    let node_opts = NodeOptions {
        mechanism: Some(mech),
        cap: opts.cap.unwrap_or(rtslice_spec::DEFAULT_CAP),
        runc: opts.runc.clone(),
        resctrl: opts.resctrl.clone(),
        hrtick: opts.hrtick,
        fair_server_off: opts.fair_server_off,
        one_shot: true,
        base_fault: opts.fault,
        ..NodeOptions::with_state_dir(&opts.state_dir.path)
    };
    let (node, opened) = Node::open_with_facts(node_opts.clone(), facts.clone())?;
    let names = node.names();
    if !names.is_empty() {
        return Err(rejected(format!(
            "{} already holds workloads ({}); run `rtslice reset` first, or apply through the node service (`rtslice apply \
             --declarative`, `rtslice daemon`)",
            opts.state_dir.path.display(),
            names.join(", ")
        )));
    }
    let node = if opened.created {
        node
    } else {
        node.reset()?;
        Node::open_with_facts(node_opts, facts.clone())?.0
    };
    node.mark_one_shot()?;
    Ok(node)
}
