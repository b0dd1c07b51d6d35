//! DRA claims prepared on this node (docs/dra.md): the kubelet plugin (k8s/dra) hands each
//! allocated ResourceClaim to the service at NodePrepareResources; the service admits its demand
//! (`rtslice_dra::claim`) with the live planner — the node's admission is the final word, a claim
//! it cannot honour fails preparation with the planner's reason — and keeps it here, in
//! `<state>/claims.json`, until NodeUnprepareResources. The container that uses the claim (its CDI
//! device's environment entry says which) takes the claim's budget at CreateContainer; until then,
//! and after it stops, the claim itself holds the bandwidth.

use rtslice_spec::Workload;
use serde::{Deserialize, Serialize};

use crate::containers::Records;

pub(crate) const FILE: &str = "claims.json";

/// One prepared claim.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClaimEntry {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// The pods it was reserved for at preparation, by UID.
    #[serde(default)]
    pub pods: Vec<String>,
    /// Its demand pinned to its CPUs, named `claim.<namespace>.<name>` (what the planner counts
    /// while no container holds it).
    pub workload: Workload,
    pub cpus: Vec<u32>,
    /// The container (runtime id) using it, once created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
}

pub type Claims = Records<ClaimEntry>;

impl Claims {
    pub(crate) fn open(dir: &std::path::Path) -> crate::error::Result<Claims> {
        Records::load(dir, FILE, "claims")
    }

    /// The claims no container holds, as the planner counts them (a held claim is counted through
    /// its container's workload, which has the same CPUs and budget).
    pub(crate) fn pinned(&self) -> impl Iterator<Item = Workload> + '_ {
        self.entries.values().filter(|c| c.holder.is_none()).map(|c| c.workload.clone())
    }

    /// The workload names of every claim and of the containers holding one: what kube-scheduler
    /// already counts through the claims' allocations, left out of the published capacity.
    pub(crate) fn counted_by_the_scheduler(&self, containers: &crate::containers::Containers) -> Vec<String> {
        let mut out: Vec<String> = self.entries.values().map(|c| c.workload.name.clone()).collect();
        out.extend(containers.entries.values().filter(|e| e.claim.is_some()).map(|e| e.workload.name.clone()));
        out
    }
}
