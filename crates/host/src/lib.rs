//! rtslice-host: makes plans real on a Linux host — cgroup v1/v2, sched_setattr, IRQ/RPS/XPS,
//! runc launch — transactionally (every change journaled with the value it replaced), and reports
//! what the host offers (`doctor`), what drifted (`status`) and undoes everything (`reset`).
//!
//! Table of contents (the kernel calls themselves live in `rtslice-sys`):
//! - `from_plan`: `Plan` → [`Setup`] (what to write), with the [`OciDefaults`] a spec does not carry.
//! - [`facts`]: what this host is, read once: [`HostFacts`] for apply, [`facts::planning_facts`] for
//!   the planner (`rtslice plan`, the node service and the bench plan from the same facts).
//! - `prepare`: pure validation against [`HostFacts`] and the choice of [`Mechanism`].
//! - `ops`: pure generation of one workload's cgroup directories and writes.
//! - `launch`: commands, attached processes, OCI containers (runc), podman containers ([`podman`])
//!   and the agent.
//! - `txn` and `journal`: the journal of replaced values.
//! - `steering`: IRQ affinity and RPS/XPS rules as the files they write, for the node's deploys.
//! - `sched_debug`: HRTICK and the fair servers' runtimes (debugfs), journaled, for the node.
//! - `node`: the one engine — a base applied once, then one journal segment per workload, deployed,
//!   resized and removed one at a time ([`Node`]); the node service's host side.
//! - `apply`: one-shot apply, a whole [`Setup`] all or nothing: a node run in-process.
//! - `status`, `reset`, [`doctor`]: drift, undo, what the host offers.
//! - [`tune`]: reversible host tuning (governor, C-states, IRQ/workqueue/watchdog CPUs, THP,
//!   hugepages) in a journal of its own, and the kernel command line that completes it.
//! - [`sched`], [`rules`], [`cgroup`], [`irq`], [`oci`]: per-thread scheduling, the thread-rule engine
//!   (shared with the agent), cgroup layouts, IRQ/RPS/XPS files, OCI configs.

mod apply;
pub mod cgroup;
mod cpus;
mod devices;
pub mod doctor;
mod error;
pub mod facts;
pub mod foreign;
mod from_plan;
mod fsio;
pub mod image;
pub mod inplace;
pub mod irq;
mod journal;
mod launch;
mod node;
pub mod oci;
mod ops;
pub mod podman;
mod prepare;
mod record;
mod reset;
pub mod resctrl;
mod resctrl_files;
mod sched_debug;
pub mod rules;
pub mod sched;
mod setup;
mod status;
mod steering;
mod txn;
pub mod tune;

pub use apply::{apply_setup, Applied, ApplyOptions};
pub use facts::SCHED_FEATURES;
pub use cgroup::workload_pids;
pub use cpus::CpuList;
pub use doctor::{doctor, HostReport};
pub use error::{HostError, Result};
pub use from_plan::{apply, setup_from_plan, OciDefaults};
pub use inplace::InPlace;
pub use journal::{agent_dir, StateDir, DEFAULT_STATE_DIR, NODE_DESIRED_FILE};
pub use launch::AgentCommand;
pub use journal::{node_active, one_shot_applied};
pub use node::{applied_records, records_in as node_records_in, status, Node, NodeBase, NodeOptions, Opened, Removed};
pub use facts::HostFacts;
// The mechanism apply would choose for a setup on this host (tests and tools that build setups by hand).
pub use prepare::resolve_mechanism;
pub use record::{AppliedRecord, Mechanism, WorkloadRecord};
pub use reset::{reset, ResetOptions, ResetReport};
pub use rtslice_plan::Reservation;
pub use sched::SchedAttr;
pub use setup::{Cfs, DeviceSetup, IrqRule, Launch, NetRule, OciLaunch, PodmanLaunch, Setup, ThreadRule, WorkloadSetup};
pub use status::Status;
pub use txn::Fault;
