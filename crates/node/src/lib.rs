//! rtslice-node: the node service — live desired state, one writer, the HTTP API.
//!
//! - `service`: the desired state (running and pending workloads), admission through the live
//!   planner (`rtslice_plan::Planner`, running workloads pinned where they are), every change one
//!   transaction of the host's [`rtslice_host::Node`], recovery after a crash or a reboot, events.
//! - `adapt`: the closed loop's decision (pure): the runtime an adapting reservation holds next,
//!   from an interval's CPU use and reported misses, between its minimum and maximum.
//! - `api`: the `/v1` resources (axum), errors as JSON, body limit, bearer token on TCP.
//! - `server`: `rtslice daemon` — unix socket (0600) and optional TCP listener, reaping, signals.
//! - `tls`: HTTPS on the TCP listener (rustls, ring provider).
//! - `client`: requests over the unix socket (the CLI).
//! - `telemetry`: the Prometheus collector following the deployed workloads, the report socket
//!   they get, the live views' history (`GET /metrics`, `GET /v1/telemetry`).
//! - `dashboard`: the live dashboard at `/` (one self-contained page) and its access on TCP.
//! - `containers`: Kubernetes containers through the NRI plugin — admission at creation, in-place
//!   application at start, release; `GET /v1/inventory` for the scheduler extender (docs/kubernetes.md).
//! - `openapi`: the OpenAPI document (`GET /v1/openapi.json`, checked in as docs/openapi.json).

mod adapt;
mod api;
mod client;
mod dashboard;
mod containers;
mod error;
mod openapi;
mod server;
mod service;
mod telemetry;
mod tls;

pub use api::{router, App, BODY_LIMIT};
pub use containers::{ContainerEntry, CreateContainer};
pub use client::{request, request_blocking, Reply};
pub use error::{NodeError, Result};
pub use openapi::document as openapi_document;
pub use server::{read_token, run, run_until, DaemonOptions, DEFAULT_SOCKET};
pub use service::{Action, Change, Entry, Event, ExitStatus, Outcome, Phase, Resize, Service, ServiceOptions};
pub use telemetry::{Telemetry, TelemetryOptions};
pub use tls::TlsFiles;
pub use dashboard::{PAGE as DASHBOARD_PAGE, TOKEN_COOKIE};
