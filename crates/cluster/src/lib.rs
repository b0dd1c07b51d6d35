//! rtslice-cluster: the kube-scheduler extender — filters and scores nodes by real-time bandwidth
//! with the node's own planner (docs/kubernetes.md).
//!
//! - [`inventory`]: what each node publishes (the Node annotation `rtslice.io/inventory`) and the
//!   planner the extender rebuilds from it.
//! - [`extender`]: the pure decision — which nodes a pod's containers fit on, why not, and the
//!   score — over a [`Cluster`] snapshot (inventories, pods bound but not yet on their node).
//! - [`server`]: `rtslice extender`: the HTTP API kube-scheduler calls (`/filter`, `/prioritize`,
//!   `/bind`) and the kube-rs watches of Nodes and Pods that keep the snapshot current.
//! - [`publish`]: the node side — keeping a node's annotation current, and the inventory-only node
//!   (`rtslice daemon --inventory-only`): the real planner over a declared node, nothing launched.

pub mod extender;
pub mod inventory;
pub mod publish;
pub mod server;

pub use extender::{Cluster, Decision, PodRequest, Verdict};
pub use inventory::{Inventory, ANNOTATION, INVENTORY_VERSION};

/// What can go wrong on the cluster side.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("inventory: {0}")]
    Inventory(String),
    #[error("Kubernetes API: {0}")]
    Kube(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Io(String),
}

impl From<kube::Error> for ClusterError {
    fn from(e: kube::Error) -> Self {
        ClusterError::Kube(e.to_string())
    }
}
