//! rtslice-host: makes plans real on a Linux host — cgroup v1/v2, sched_setattr, IRQ/RPS/XPS,
//! runc launch — transactionally (every change journaled with the value it replaced), and reports
//! what the host offers (`doctor`), what drifted (`status`) and undoes everything (`reset`).

pub mod cgroup;
pub mod cpus;
pub mod error;
pub mod fsio;
pub mod sched;

pub use cpus::CpuList;
pub use error::{HostError, Result};
pub use sched::Policy;
