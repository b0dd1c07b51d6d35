//! rtslice-loadgen: a DistWalk-style client/server pair that makes real CPU work on request. The
//! model validation that drives it (`rtslice model validate`) is an experiment kind of rtslice-bench.
//!
//! - [`server::serve`]: answers each request after doing its compute amount of real CPU work (a busy
//!   loop calibrated in [`work::Spinner`]), one request at a time, so the socket queue is the M/M/1 queue.
//! - [`client::run`]: open-loop client; inter-arrival times and compute amounts from a [`dist::Dist`]
//!   (exponential by default), records every round trip.
//! - [`netns::NetnsPair`]: server and client in two network namespaces joined by a veth pair,
//!   optionally shaped with a tc token bucket (study B §6.3).

pub mod client;
pub mod dist;
pub mod hrtick;
pub mod netns;
pub mod proto;
pub mod server;
pub mod stats;
pub mod work;

use std::io;

/// Transport between client and server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    #[default]
    Udp,
    Tcp,
}

impl std::str::FromStr for Protocol {
    type Err = LoadgenError;
    fn from_str(s: &str) -> Result<Protocol> {
        match s.to_ascii_lowercase().as_str() {
            "udp" => Ok(Protocol::Udp),
            "tcp" => Ok(Protocol::Tcp),
            _ => Err(LoadgenError::Invalid(format!("protocol `{s}` is neither `udp` nor `tcp`"))),
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Protocol::Udp => "udp",
            Protocol::Tcp => "tcp",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LoadgenError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("`{command}` failed ({status}): {stderr}")]
    Command { command: String, status: String, stderr: String },
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A system call, /proc read or network-namespace step failed (the message names it).
    #[error(transparent)]
    Os(#[from] rtslice_sys::SysError),
}

pub type Result<T> = std::result::Result<T, LoadgenError>;

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> LoadgenError {
    let what = what.into();
    move |source| LoadgenError::Io { what, source }
}

/// True when running as root (namespaces and reservations need it).
pub use rtslice_sys::process::is_root;
