//! rtslice-node: the node service — live desired state, one writer, the HTTP API.
//!
//! - `service`: the desired state (running and pending workloads), admission through the live
//!   planner (`rtslice_plan::Planner`, running workloads pinned where they are), every change one
//!   transaction of the host's [`rtslice_host::Node`], recovery after a crash or a reboot, events.
//! - `agent_thread`: the thread-rule agent beside a service, on a thread of its own (the daemon's,
//!   and any in-process stand-in for it).
//! - `adapt`: the closed loop's decision (pure): the runtime an adapting reservation holds next,
//!   from an interval's CPU use and reported misses, between its minimum and maximum.
//! - `api`: the `/v1` resources (axum), the NRI plugin's container routes, bearer token on TCP.
//! - `http`: what the handlers share apart from the domain: the service behind its lock ([`App`]),
//!   JSON responses and errors, the body limit.
//! - `server`: `rtslice daemon` — unix socket (0600) and optional TCP listener, reaping, signals.
//! - `tls`: HTTPS on the TCP listener (rustls, ring provider).
//! - `client`: requests over the unix socket (the CLI).
//! - `telemetry`: the Prometheus collector following the deployed workloads, the report socket
//!   they get, the live views' history (`GET /metrics`, `GET /v1/telemetry`).
//! - `dashboard`: the live dashboard at `/` (one self-contained page) and its access on TCP.
//! - `containers`: the records of Kubernetes containers from the NRI plugin and what kubelet's
//!   cgroups rule out; the service admits them at creation, applies them in place at start and
//!   releases them (`service/containers.rs`); `GET /v1/inventory` for the scheduler extender
//!   (docs/kubernetes.md).
//! - `claims`: the DRA claims the kubelet plugin (k8s/dra) prepared, admitted by the live planner
//!   (`rtslice_dra`'s model); the service publishes the node's CPUs as DRA devices, prepares and
//!   unprepares claims, and hands a claim's budget to the container that uses it
//!   (`service/claims.rs`, docs/dra.md).
//! - `openapi`: the OpenAPI document (`GET /v1/openapi.json`, checked in as docs/openapi.json).

// serde_json's json! recurses once per token tree: the OpenAPI document (openapi.rs) is one literal.
#![recursion_limit = "256"]

mod adapt;
mod agent_thread;
mod api;
mod claims;
mod client;
mod dashboard;
mod containers;
mod error;
mod http;
mod openapi;
mod server;
mod service;
mod telemetry;
mod tls;

pub use agent_thread::AgentThread;
pub use api::router;
pub use http::{App, BODY_LIMIT};
pub use claims::ClaimEntry;
pub use containers::{ContainerEntry, CreateContainer};
pub use client::{request, request_blocking, Reply};
pub use error::{NodeError, Result};
pub use openapi::document as openapi_document;
pub use server::{read_token, run, run_until, DaemonOptions, DEFAULT_SOCKET};
pub use service::{Action, Change, Entry, Event, ExitStatus, Outcome, Phase, Resize, Service, ServiceOptions};
pub use telemetry::{followed as followed_workloads, Telemetry, TelemetryOptions};
pub use tls::TlsFiles;
pub use dashboard::{PAGE as DASHBOARD_PAGE, TOKEN_COOKIE};
