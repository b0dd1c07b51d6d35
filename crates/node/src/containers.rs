//! Kubernetes containers, through the NRI plugin (k8s/nri, docs/kubernetes.md "Node side"):
//! admission at creation by the node's live planner (the same planner, against the spec workloads
//! and the other containers), in-place application at start (`rtslice_host::InPlace`: the
//! container's own cgroup, its threads and IRQs; its processes never move), release at stop or
//! removal. The admitted containers are kept in `<state>/containers.json`, so a restarted daemon
//! still counts them and can still release them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rtslice_host::{InPlace, IrqRule, WorkloadSetup};
use rtslice_spec::{Demand, SchedPolicy, Workload};
use serde::{Deserialize, Serialize};

use crate::error::{NodeError, Result};

const FILE: &str = "containers.json";

/// `POST /v1/containers`: what the NRI plugin knows at CreateContainer.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateContainer {
    /// The runtime's container id.
    pub id: String,
    pub namespace: String,
    pub pod: String,
    #[serde(default)]
    pub pod_uid: String,
    pub container: String,
    /// The pod's annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// The container's environment entries that name DRA claims (`RTSLICE_CLAIM_…=<uid>`, put
    /// there by the claims' CDI devices); the plugin passes no other variable.
    #[serde(default)]
    pub env: Vec<String>,
}

/// One admitted container.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ContainerEntry {
    pub id: String,
    pub namespace: String,
    pub pod: String,
    pub pod_uid: String,
    pub container: String,
    /// Its workload, pinned to the CPUs it was given (what the planner counts).
    pub workload: Workload,
    pub cpus: Vec<u32>,
    pub setup: WorkloadSetup,
    #[serde(default)]
    pub irqs: Vec<IrqRule>,
    /// What the start applied (None before the start).
    #[serde(default)]
    pub applied: Option<InPlace>,
    /// The DRA claim (UID) its CPUs and budget come from, if any (crate::claims).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
}

/// Records kept in one JSON file of the state directory, by key (containers by id, claims by UID):
/// written whole through a rename, so a crash leaves the old file or the new one.
#[derive(Debug, Default)]
pub struct Records<T> {
    pub(crate) entries: BTreeMap<String, T>,
    path: PathBuf,
}

impl<T: Serialize + serde::de::DeserializeOwned> Records<T> {
    pub(crate) fn load(dir: &Path, file: &str, what: &str) -> Result<Records<T>> {
        let path = dir.join(file);
        let entries = match std::fs::read_to_string(&path) {
            Ok(t) => serde_json::from_str(&t)
                .map_err(|e| NodeError::State(format!("{} is corrupt ({e}); move it away (its {what} are then not counted)", path.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(NodeError::State(format!("cannot read {}: {e}", path.display()))),
        };
        Ok(Records { entries, path })
    }

    pub(crate) fn save(&self) -> Result<()> {
        let json = serde_json::to_vec_pretty(&self.entries).map_err(|e| NodeError::State(e.to_string()))?;
        let tmp = self.path.with_extension("json.tmp");
        std::fs::write(&tmp, json)
            .and_then(|_| std::fs::rename(&tmp, &self.path))
            .map_err(|e| NodeError::State(format!("cannot write {}: {e}", self.path.display())))
    }

    /// Forgets every record and its file (the daemon's reset).
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The admitted containers, by container id.
pub type Containers = Records<ContainerEntry>;

impl Containers {
    pub(crate) fn open(dir: &Path) -> Result<Containers> {
        Records::load(dir, FILE, "containers")
    }

    /// The containers' workloads as the planner counts them.
    pub(crate) fn pinned(&self) -> impl Iterator<Item = Workload> + '_ {
        self.entries.values().map(|e| e.workload.clone())
    }

    /// Undoes every applied container (the daemon's reset).
    pub(crate) fn release_all(&mut self) {
        for e in self.entries.values_mut() {
            if let Some(mut a) = e.applied.take() {
                for p in a.release() {
                    tracing::warn!(container = %e.id, "release: {p}");
                }
            }
        }
        self.clear();
    }

    /// Threads born or renamed since the start get their rule.
    pub(crate) fn rescan(&mut self) {
        for e in self.entries.values_mut() {
            if let Some(a) = e.applied.as_mut() {
                if let Err(err) = a.rescan() {
                    tracing::warn!(container = %e.id, "thread rules: {err}");
                }
            }
        }
    }
}

/// What cannot be done inside kubelet's cgroup tree, refused at admission (docs/kubernetes.md).
pub(crate) fn refuse_unsupported(w: &Workload, mechanism: rtslice_host::Mechanism) -> std::result::Result<(), String> {
    if w.isolation.shield {
        return Err("shield (an exclusive cpuset) is not possible inside kubelet's cgroups: the pod's and QoS class's cpusets are kubelet's and not exclusive; drop `shield`".into());
    }
    if let Some(r) = w.threads.iter().find(|r| matches!(r.policy, SchedPolicy::Deadline { .. })) {
        return Err(format!(
            "thread rule `{}`: SCHED_DEADLINE inside kubelet's cgroups is not possible: a pinned deadline thread needs an exclusive partition whose ancestors (kubepods, the QoS class, the pod) are partitions too; use fifo or rr under the reservation",
            r.pattern
        ));
    }
    let group_budgets = rtslice_host::inplace::reservations_supported(mechanism);
    if let Some(Demand::Reservation(_)) = &w.demand {
        group_budgets.clone()?;
    }
    let rt_rule = w.threads.iter().find(|r| matches!(r.policy, SchedPolicy::Fifo { .. } | SchedPolicy::Rr { .. }));
    if let (Some(Demand::Dedicated(_)), Some(r), Ok(())) = (&w.demand, rt_rule, group_budgets) {
        // With RT group scheduling (v1, or HCBS on v2) a FIFO/RR thread needs its cgroup to hold
        // an RT budget, and a dedicated container has none (its CPUs are whole, not a bandwidth).
        return Err(format!(
            "thread rule `{}`: fifo/rr threads in a pod need an RT budget on this node (RT group scheduling: cgroup v1, or HCBS on cgroup v2); ask for a reservation (rtslice.io/reservation) instead of dedicated CPUs",
            r.pattern
        ));
    }
    Ok(())
}
