//! The scheduling classes the emulated stacks request, and reading them back from /proc. The calls
//! themselves (names, affinity, clocks, scheduling classes) are rtslice-sys's.

use rtslice_sys::sched::SchedClass;
use serde::{Deserialize, Serialize};

/// Linux scheduling class of a thread, as the real stacks request them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    Other,
    Fifo,
    Rr,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Other => "SCHED_OTHER",
            Class::Fifo => "SCHED_FIFO",
            Class::Rr => "SCHED_RR",
        }
    }
    pub(crate) fn sched_class(self) -> SchedClass {
        match self {
            Class::Other => SchedClass::Other,
            Class::Fifo => SchedClass::Fifo,
            Class::Rr => SchedClass::Rr,
        }
    }
    /// The class from the kernel's numeric policy (`/proc/<tid>/stat` field 41).
    pub fn from_raw(policy: i32) -> Option<Class> {
        match SchedClass::from_raw(u32::try_from(policy).ok()?)? {
            SchedClass::Other => Some(Class::Other),
            SchedClass::Fifo => Some(Class::Fifo),
            SchedClass::Rr => Some(Class::Rr),
        }
    }
}

/// (policy, rt_priority) of a task from `/proc/<pid>/task/<tid>/stat`.
pub fn task_policy(pid: u32, tid: i32) -> Option<(Class, i32)> {
    let t = rtslice_sys::procfs::task_sched(pid, u32::try_from(tid).ok()?)?;
    Some((Class::from_raw(t.policy as i32)?, t.rt_priority as i32))
}
