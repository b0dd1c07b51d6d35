//! The one way a test skips: it names the capability the machine lacks.
//!
//! A skip prints `SKIPPED [<need>] <test>: <why>` on stderr (the kernel matrix's guest runner and
//! `make test` read that line), appends `<need>\t<test>\t<why>` to the ledger named by
//! [`LEDGER_ENV`] when it is set (`make test` counts skips per need from it), and — the reason this
//! module exists — fails the test instead when [`EXPECT_ENV`] lists that need: CI declares what its
//! machine has, so a skip there for something it has is a broken probe or a missing install, never
//! a pass.
//!
//! Needs are short, stable words, so counts per need stay comparable across runs:
//! [`ROOT`], [`CPUS_2`], [`CPUS_3`], [`CPUS_4`], [`RT_GROUPS`], [`DEADLINE`], [`CGROUP_V1`],
//! [`CGROUP_V2`], [`PCI`], [`CONTAINERD`], … or a tool's name ("runc", "podman", "chromium",
//! "rt-app").

use std::io::Write;

/// Space-separated needs the machine is declared to have: a test that skips for one of them fails.
pub const EXPECT_ENV: &str = "RTSLICE_TEST_EXPECT";
/// A file each skip appends one tab-separated line to: need, test, reason.
pub const LEDGER_ENV: &str = "RTSLICE_SKIP_LEDGER";

pub const ROOT: &str = "root";
pub const CPUS_2: &str = "cpus>=2";
pub const CPUS_3: &str = "cpus>=3";
pub const CPUS_4: &str = "cpus>=4";
/// RT group scheduling on cgroup v1 (`cpu.rt_runtime_us`).
pub const RT_GROUPS: &str = "rt-groups";
/// SCHED_DEADLINE with a partition rtslice may pin deadline threads in.
pub const DEADLINE: &str = "deadline";
/// HCBS group budgets on cgroup v2 (`cpu.rt.max`).
pub const HCBS: &str = "hcbs";
pub const CGROUP_V1: &str = "cgroup-v1";
pub const CGROUP_V2: &str = "cgroup-v2";
/// cgroup v2 cpuset partitions (`cpuset.cpus.partition`); on v1 the node's exclusive cpusets
/// (the root's load balancing off, `system` holding the rest).
pub const PARTITIONS: &str = "partitions";
/// An IRQ whose affinity can be written (managed IRQs refuse any write) or an interface with RPS files.
pub const IRQ_STEERING: &str = "irq-steering";
pub const PCI: &str = "pci";
/// A PCI device bound to a driver with an IRQ whose affinity can be written (not all managed).
pub const PCI_IRQ: &str = "pci-irq";
/// A PCI device bound to no driver.
pub const PCI_DRIVERLESS: &str = "pci-driverless";
/// A PCI device with a block device node (a guest whose root is on 9p has none).
pub const PCI_BLOCK: &str = "pci-block";
pub const BPF: &str = "bpf";
/// The cgroup `cpu.idle` file (kernel 5.15+).
pub const CPU_IDLE: &str = "cpu.idle";
/// cgroup v2 `cpuset.cpus.exclusive` (kernel 6.7+).
pub const CPUS_EXCLUSIVE: &str = "cpuset.cpus.exclusive";
/// The scheduler's fair servers in debugfs (`sched/fair_server/cpuN/runtime`, kernel 6.12+; not
/// under kernel lockdown).
pub const FAIR_SERVER: &str = "fair-server";
/// The netlink process connector (`CONFIG_PROC_EVENTS`).
pub const PROC_CONNECTOR: &str = "proc-connector";
/// A container runtime to drive through the CRI: containerd, its runc shim, ctr and crictl from the
/// cluster's binaries (k8s/build/build.sh, cached in /var/cache/rtslice/k8s) and the NRI plugin
/// (`make nri`, target/rtslice-nri); `make test` builds both first.
pub const CONTAINERD: &str = "containerd";

/// The test's name as libtest names its thread (`module::test`), else the thread's own name.
fn test_name() -> String {
    std::thread::current().name().unwrap_or("?").to_string()
}

/// True when `need` is among the needs this run declared its machine has ([`EXPECT_ENV`]).
pub fn expected(need: &str) -> bool {
    std::env::var(EXPECT_ENV).is_ok_and(|v| v.split_whitespace().any(|n| n == need))
}

/// The need a reservation mechanism is skipped for, by the name rtslice gives it (`Mechanism`'s
/// `Display`: `rt_group`, `deadline`, `hcbs`); testkit does not depend on the crate defining it.
pub fn mechanism_need(mechanism: &dyn std::fmt::Display) -> &'static str {
    match mechanism.to_string().as_str() {
        "rt_group" => RT_GROUPS,
        "deadline" => DEADLINE,
        "hcbs" => HCBS,
        other => panic!("no need word for the mechanism {other:?}: add one to rtslice_testkit::skip"),
    }
}

/// Records and prints a skip for `need`; panics instead when the run declared it has `need`.
/// Call it, then `return` (or use [`skip_unless!`](crate::skip_unless)).
pub fn skip(need: &str, why: impl std::fmt::Display) {
    skip_named(&test_name(), need, why);
}

/// [`skip`] for a program that is not a libtest test (a `harness = false` benchmark, whose thread
/// is `main`): `test` names it in the line and the ledger.
pub fn skip_named(test: &str, need: &str, why: impl std::fmt::Display) {
    if expected(need) {
        panic!("this machine is declared to have [{need}] ({EXPECT_ENV}), yet {test} would skip: {why}");
    }
    eprintln!("SKIPPED [{need}] {test}: {why}");
    if let Ok(path) = std::env::var(LEDGER_ENV) {
        // One short line per skip, appended whole: concurrent test binaries do not interleave it.
        let line = format!("{need}\t{test}\t{}\n", why.to_string().replace(['\t', '\n'], " "));
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(&path) {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

/// `skip_unless!(cond, need, "why {}", x)`: when `cond` is false, skips for `need` and returns from
/// the test (a `()` test function).
#[macro_export]
macro_rules! skip_unless {
    ($cond:expr, $need:expr, $($why:tt)+) => {
        if !$cond {
            $crate::skip::skip($need, format!($($why)+));
            return;
        }
    };
}

/// Returns early from a test that needs root, through [`skip`].
#[macro_export]
macro_rules! root_or_skip {
    () => {
        $crate::skip_unless!($crate::is_root(), $crate::skip::ROOT, "needs root (CI runs as root)");
    };
}

/// The need for `n` online CPUs: [`CPUS_2`], [`CPUS_3`] or [`CPUS_4`] (more than 4 counts as 4).
pub fn cpus_need(n: usize) -> &'static str {
    match n {
        0..=2 => CPUS_2,
        3 => CPUS_3,
        _ => CPUS_4,
    }
}

/// True when this host has at least `n` online CPUs; else skips for `cpus>=n` (n of 2, 3, 4).
pub fn cpus_or_skip(n: usize) -> bool {
    let online = rtslice_sys::procfs::online_cpus().map(|c| c.len()).unwrap_or(0);
    if online >= n {
        return true;
    }
    skip(cpus_need(n), format!("needs {n} online CPUs, this host has {online}"));
    false
}
