//! rtslice's one OS boundary. Every syscall, every /proc and /sys reader, every network-namespace
//! operation and the CPU-list format live here, so the rest of the workspace is plain Rust and each
//! kernel quirk is handled once. Well-kept crates (`rustix`, `nix`, `procfs`) are used where they
//! offer the call; raw `unsafe` is kept only where none does, each block with a SAFETY comment.
//!
//! Table of contents:
//! - [`cpulist`]: the kernel's CPU-list and CPU-mask text formats (pure).
//! - [`time`]: monotonic and per-thread CPU clocks, absolute sleeps.
//! - [`thread`]: the calling thread's id, name and timer slack.
//! - [`process`]: root check, signals to process groups.
//! - [`lock`]: advisory file locks (flock): host-wide waits and fail-fast tries.
//! - [`pi_lock`]: a priority-inheriting lock (PI futex) for threads of one process.
//! - [`procfs`]: the files of /proc/PID/task/TID/{stat,status,schedstat,sched,comm,children},
//!   /proc/PID/{stat,comm,cgroup}, /proc/stat, /proc/softirqs, /proc/interrupts,
//!   /proc/PID/net/{dev,snmp}, the online and isolated CPUs.
//! - [`netns`]: network namespaces and veth pairs.
//! - [`net`]: batched datagram sending (sendmmsg).
//! - [`perf`]: perf_event_open counters, and whether the machine has any.
//! - [`bpf`]: bpf(2) run-time statistics and program run counters (the tracer's glue beyond libbpf-rs).
//! - [`sched`]: scheduling policies, parameters and CPU affinity of any thread (sched_setattr,
//!   sched_getattr, SCHED_DEADLINE, sched_setaffinity), the kernel's SCHED_* numbers.
//! - [`proc_ref`]: a process identity that survives pid reuse (pid + start time), sessions,
//!   graceful stops.
//! - [`proc_connector`]: the netlink process connector (fork/exec/comm events).
//! - [`fs`]: mounting and lazily unmounting pseudo file systems.
//! - [`SysError`]: the one error type, naming the call or path, the errno and what to do.
//! - [`signal`]: process-wide signal dispositions (SIGPIPE's default for a command-line tool).
//! - [`topology`]: SMT siblings, last-level-cache groups, NUMA nodes of CPUs and of network devices.
//! - [`pci`]: PCI addresses (pure), and a PCI device's driver, IOMMU group, NUMA node, IRQs and device nodes.

pub mod bpf;
pub mod cpulist;
mod error;
pub mod fs;
pub mod lock;
pub mod net;
pub mod netns;
pub mod pci;
pub mod perf;
pub mod pi_lock;
pub mod proc_connector;
pub mod proc_ref;
pub mod process;
pub mod procfs;
pub mod resctrl;
pub mod sched;
pub mod signal;
pub mod thread;
pub mod time;
pub mod topology;

pub use error::{Result, SysError};
