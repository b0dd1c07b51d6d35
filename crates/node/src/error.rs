//! The node service's one error type; each variant is one HTTP status of the API.

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// 400: the request is malformed (not UTF-8, not the expected JSON, a bad value).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// 400 with every located spec error (`file:line:col: field: reason`), as `rtslice plan` prints them.
    #[error("the spec has {} error(s): {}", .0.len(), .0.join("; "))]
    Spec(Vec<String>),
    /// 403: the access policy does not let this namespace ask for it (Kubernetes containers and
    /// claims, `rtslice daemon --access`).
    #[error("not allowed: {0}")]
    Forbidden(String),
    /// 404.
    #[error("{0}")]
    NotFound(String),
    /// 409: the name exists, or the workload is not in a state the request needs.
    #[error("{0}")]
    Conflict(String),
    /// 409: the request was computed from an older generation of the workload.
    #[error("stale request: {0}")]
    Stale(String),
    /// 422: admission refused the change (it does not fit); nothing changed.
    #[error("does not fit: {0}")]
    Unfit(String),
    /// 500: the node's state files.
    #[error("state: {0}")]
    State(String),
    /// 500 (or 422 for a host-side refusal before anything was touched).
    #[error(transparent)]
    Host(#[from] rtslice_host::HostError),
    /// The daemon could not be reached or answered something unexpected (client side).
    #[error("{0}")]
    Client(String),
}

impl NodeError {
    pub fn status(&self) -> u16 {
        match self {
            NodeError::Invalid(_) | NodeError::Spec(_) => 400,
            NodeError::Forbidden(_) => 403,
            NodeError::NotFound(_) => 404,
            NodeError::Conflict(_) | NodeError::Stale(_) => 409,
            NodeError::Unfit(_) | NodeError::Host(rtslice_host::HostError::Rejected(_)) => 422,
            NodeError::State(_) | NodeError::Host(_) | NodeError::Client(_) => 500,
        }
    }
}

pub type Result<T> = std::result::Result<T, NodeError>;
