//! One error type for the whole apply stage. Every variant names what failed and, through `hint`,
//! what the user can do about it.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("writing {value:?} to {path}: {source}{}", hint_for_write(source))]
    Write { path: PathBuf, value: String, source: std::io::Error },
    #[error("creating {path}: {source}")]
    Create { path: PathBuf, source: std::io::Error },
    #[error("removing {path}: {source} (is a task still inside? `cat {path}/tasks`)")]
    Remove { path: PathBuf, source: std::io::Error },
    #[error("{call} for thread {tid}: {source}{}", hint_for_sched(source))]
    Sched { call: &'static str, tid: i32, source: std::io::Error },
    #[error("unsupported on this host: {what}; {fix}")]
    Unsupported { what: String, fix: String },
    #[error("rejected before touching anything: {0}")]
    Rejected(String),
    #[error("state directory {path}: {reason}")]
    State { path: PathBuf, reason: String },
    #[error("launching {what}: {reason}")]
    Launch { what: String, reason: String },
    #[error("step {step} failed: {source}; everything this run changed was rolled back{}", rollback_note(.rollback_errors))]
    StepFailed { step: String, source: Box<HostError>, rollback_errors: Vec<String> },
    #[error("{path} reads back {state:?} after rtslice wrote {wanted:?}: {explanation}")]
    InvalidPartition { path: PathBuf, wanted: String, state: String, explanation: String },
    /// resctrl refused a write; the kernel's own reason is in `info/last_cmd_status`.
    #[error("writing {value:?} to {path}: {source}; resctrl says: {status:?} (a cache mask must be one run of set bits inside info/L3/cbm_mask, at least min_cbm_bits wide, and not overlap an exclusive group's; an MB value lies between info/MB/min_bandwidth and 100)")]
    Resctrl { path: PathBuf, value: String, source: std::io::Error, status: String },
    #[error("invalid input: {0}")]
    Invalid(String),
    #[error("{0}")]
    Other(String),
}

fn rollback_note(errors: &[String]) -> String {
    if errors.is_empty() {
        String::new()
    } else {
        format!(" (except: {}; run `rtslice reset` to retry)", errors.join("; "))
    }
}

fn hint_for_write(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => " (run as root)",
        Some(libc::EINVAL) => {
            " (the kernel refused the value: for RT budgets, the parent cgroup needs budget first and the \
             children's sum must fit; for cpusets, CPUs must lie inside the parent's and exclusive siblings must not overlap)"
        }
        Some(libc::EBUSY) => " (the resource is in use: a budget cannot shrink below what children hold, or tasks are still inside)",
        Some(libc::ENOSPC) => " (no CPUs/memory nodes in the cpuset: set cpuset.cpus and cpuset.mems first)",
        _ => "",
    }
}

fn hint_for_sched(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EBUSY) => {
            " (SCHED_DEADLINE admission failed: the root domain lacks bandwidth (sched_rt_runtime_us), or the \
             thread's affinity does not span its root domain — pin deadline threads through an exclusive partition; \
             if the reservations that hold it do not add up, another program switched sleeping deadline threads to \
             another class, which the kernel keeps counting until its root domains are rebuilt — a cpuset partition \
             change or CPU hotplug does that)"
        }
        Some(libc::EPERM) => {
            " (not permitted: run as root with CAP_SYS_NICE; on cgroup v1 with RT_GROUP_SCHED, a FIFO/RR thread needs \
             its cpu cgroup to have cpu.rt_runtime_us > 0)"
        }
        Some(libc::ESRCH) => " (the thread exited)",
        Some(libc::EINVAL) => " (invalid parameters for this policy: check priority 1..99, runtime <= deadline <= period, CPUs online)",
        _ => "",
    }
}

impl HostError {
    pub fn other(msg: impl Into<String>) -> HostError {
        HostError::Other(msg.into())
    }
}

pub type Result<T> = std::result::Result<T, HostError>;
