//! rtslice-metrics: the Prometheus view of a node — metric families and their collection.
//!
//! ```no_run
//! use rtslice_metrics::{encode, NodeMetrics, Options, Workload};
//! let metrics = NodeMetrics::new(Options::default());
//! metrics.set_workloads(vec![/* Workload { name, cgroup, cpu_cgroup, cpus, reservation, mechanism } */])?;
//! let registry = metrics.registry();
//! let text = encode(&registry); // OpenMetrics text, collected fresh
//! let app = rtslice_metrics::router(std::sync::Arc::new(registry)); // GET /metrics, to nest in a server
//! # Ok::<(), rtslice_metrics::MetricsError>(())
//! ```
//!
//! Sources: per-thread latency histograms, switches, migrations and CPU time from the continuous BPF
//! tracer (rtslice-trace) following the workloads' cgroups; reservation parameters from the caller;
//! CPU accounting and throttling from the workloads' cgroup files; IRQ and softirq counts from /proc;
//! application SLIs reported by the workloads over the report channel ([`ReportChannel`]; what a
//! report holds is [`SliReport`]'s, docs/metrics.md). Every scrape collects afresh, so what Prometheus stores is what the kernel
//! counted at that moment.

mod collect;
mod families;
mod http;
mod report;
mod sample;
mod sli;

pub use collect::{NodeMetrics, Options, SliTotals, Workload};
pub use families::{latency_bounds_ns, LATENCY_BUCKETS_PER_OCTAVE};
pub use http::{encode, router, serve, CONTENT_TYPE};
pub use report::{ReportChannel, REPORT_SOCKET_ENV};
pub use sli::SliReport;
pub use sample::{CpuReading, Histogram, NodeSample, WorkloadSample};

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("workload {workload:?}: {reason}")]
    Workload { workload: String, reason: String },
    #[error("the report socket {path}: {source} (choose a path in a writable directory, and remove a stale socket file left by a crashed server)")]
    Socket { path: PathBuf, source: std::io::Error },
    #[error("cannot serve metrics on {addr}: {source} (is another server on that port? choose another with --listen)")]
    Listen { addr: std::net::SocketAddr, source: std::io::Error },
    #[error("the BPF tracer: {0}")]
    Trace(#[from] rtslice_trace::TraceError),
}
