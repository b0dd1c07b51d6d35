//! rtslice-host: makes plans real on a Linux host — cgroup v1/v2, sched_setattr, IRQ/RPS/XPS,
//! runc launch — transactionally (every change journaled with the value it replaced), and reports
//! what the host offers (`doctor`), what drifted (`status`) and undoes everything (`reset`).

pub mod apply;
pub mod cgroup;
pub mod cpus;
pub mod doctor;
pub mod error;
pub mod from_plan;
pub mod fsio;
pub mod irq;
pub mod journal;
pub mod oci;
pub mod record;
pub mod reset;
pub mod rules;
pub mod sched;
pub mod setup;
pub mod status;
pub mod txn;

pub use cpus::CpuList;
pub use error::{HostError, Result};
pub use journal::{StateDir, DEFAULT_STATE_DIR};
pub use record::Mechanism;
pub use sched::Policy;
pub use setup::{Cfs, IrqRule, Launch, NetRule, OciLaunch, Reservation, Setup, ThreadRule, WorkloadSetup};
pub use doctor::{doctor, HostReport};
pub use apply::{apply_setup, AgentCommand, Applied, ApplyOptions, HostFacts};
pub use reset::{reset, ResetOptions, ResetReport};
pub use status::{status, Status};
pub use from_plan::{apply, setup_from_plan, OciDefaults};
