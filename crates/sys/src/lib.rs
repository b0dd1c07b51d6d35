//! rtslice's one OS boundary. Every syscall, every /proc and /sys reader, every network-namespace
//! operation and the CPU-list format live here, so the rest of the workspace is plain Rust and each
//! kernel quirk is handled once. Well-kept crates (`rustix`, `nix`, `procfs`) are used where they
//! offer the call; raw `unsafe` is kept only where none does, each block with a SAFETY comment.
//!
//! Table of contents:
//! - [`cpulist`]: the kernel's CPU-list and CPU-mask text formats (pure).
//! - [`time`]: monotonic and per-thread CPU clocks, absolute sleeps.
//! - [`thread`]: thread ids, CPU affinity, memory locking.
//! - [`process`]: signals to processes and process groups, waiting, session/group set-up for children.
//! - [`procfs`]: /proc/PID/{stat,status,task,comm}, /proc/stat, /proc/interrupts, /proc/softirqs.
//! - [`netns`]: network namespaces and veth pairs.
//! - [`perf`]: perf_event_open counters.
//! - [`sched`]: scheduling policies and parameters (sched_setattr/sched_getattr, SCHED_DEADLINE).
//! - [`proc_ref`]: a process identity that survives pid reuse (pid + start time).
//! - [`proc_connector`]: the netlink process connector (fork/exec/comm events).
//! - [`signal`]: process-wide signal dispositions (SIGPIPE's default for a command-line tool).

pub mod cpulist;
pub mod netns;
pub mod perf;
pub mod proc_connector;
pub mod proc_ref;
pub mod process;
pub mod procfs;
pub mod sched;
pub mod signal;
pub mod thread;
pub mod time;
