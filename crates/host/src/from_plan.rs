//! Plan → Setup: the planner's resolved workloads become host-level cgroups, budgets, rules and
//! launches.

use std::path::PathBuf;

use rtslice_plan::{Allocation, Plan, ThreadCpus, ThreadSched};
use rtslice_spec::Launch as SpecLaunch;

use crate::apply::{apply_setup, Applied, ApplyOptions};
use crate::cpus::CpuList;
use crate::error::{HostError, Result};
use crate::sched::SchedAttr;
use crate::setup::{Cfs, DeviceSetup, IrqRule, Launch, NetRule, OciLaunch, PodmanLaunch, Setup, ThreadRule, WorkloadSetup};

/// OCI choices the spec does not carry (per apply run).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OciDefaults {
    pub netns: bool,
    pub seccomp: bool,
}

fn cpus(v: &[u32]) -> CpuList {
    CpuList::from_cpus(v.iter().copied())
}

/// The kernel attributes of a planned thread schedule; `reclaim` sets SCHED_FLAG_RECLAIM on a
/// deadline schedule (apply decides it per workload).
pub(crate) fn sched_attr_of(s: &ThreadSched, reclaim: bool) -> SchedAttr {
    match *s {
        ThreadSched::Other { nice } => SchedAttr::Other { nice },
        ThreadSched::Batch { nice } => SchedAttr::Batch { nice },
        ThreadSched::Idle => SchedAttr::Idle,
        ThreadSched::Fifo { priority, .. } => SchedAttr::Fifo { priority },
        ThreadSched::Rr { priority, .. } => SchedAttr::Rr { priority },
        ThreadSched::Deadline { runtime, deadline, period } => SchedAttr::Deadline {
            runtime_ns: runtime.as_nanos() as u64,
            deadline_ns: deadline.as_nanos() as u64,
            period_ns: period.as_nanos() as u64,
            reclaim,
        },
    }
}

/// Translates a plan. Refuses a plan with rejected workloads (apply all or nothing).
pub fn setup_from_plan(plan: &Plan, oci: OciDefaults) -> Result<Setup> {
    if !plan.rejected.is_empty() {
        return Err(HostError::Rejected(format!(
            "the plan rejected {}: {}; nothing applied (fix the spec, or remove them)",
            plan.rejected.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(", "),
            plan.rejected.iter().map(|r| format!("{}: {}", r.name, r.reason)).collect::<Vec<_>>().join("; ")
        )));
    }
    let mut setup = Setup {
        name: plan.node.name.clone().unwrap_or_else(|| "rtslice".into()),
        housekeeping: cpus(&plan.node.housekeeping),
        ..Default::default()
    };
    for w in &plan.workloads {
        let mut ws = WorkloadSetup { name: w.name.clone(), cpus: cpus(&w.cpus), ..Default::default() };
        match &w.allocation {
            // Every CPU of the allocation carries the same reservation; the cgroup interfaces take
            // whole microseconds.
            // A CFS pool's share of the reservation becomes the group's CFS quota; the real-time
            // rules (or the RT group) hold the rest (`WorkloadPlan::realtime_reservation`).
            Allocation::Reservation { .. } => {
                ws.reservation = w.realtime_reservation();
                ws.cfs = w.pool.map(|p| Cfs { quota_us: Some(p.quota_us()), period_us: Some(p.period_us()), weight: None, idle: false });
            }
            Allocation::Dedicated { .. } => ws.partition = true,
            Allocation::BestEffort { weight, cap } => {
                let period = 100_000u64;
                ws.cfs = Some(Cfs {
                    quota_us: cap.map(|c| (c * period as f64).round() as u64),
                    period_us: Some(period),
                    weight: if *weight == 100 { None } else { Some(*weight as u64) },
                    idle: false,
                });
            }
        }
        ws.reclaim = w.reclaim;
        // Explicit SCHED_DEADLINE rules of a reclaiming reservation reclaim too (set in prepare for
        // the FIFO/RR rules it translates).
        ws.shield = w.isolation.shield;
        ws.partition |= w.isolation.shield;
        ws.wide_affinity = w.isolation.wide_affinity;
        ws.memory = w.memory;
        ws.cache = w.cache.clone();
        ws.devices = w.devices.iter().map(|d| DeviceSetup { pci: d.pci, irq_cpus: d.irq_cpus.as_deref().map(cpus) }).collect();
        ws.threads = w
            .threads
            .iter()
            .map(|t| ThreadRule {
                name: t.pattern.clone(),
                policy: Some(sched_attr_of(&t.sched, false)),
                cpus: match &t.cpus {
                    ThreadCpus::Anywhere => None,
                    ThreadCpus::Cpus(c) => Some(cpus(c)),
                },
                budget_share: None,
                period_ns: t.sched.rt_period().map(|p| p.as_nanos() as u64),
            })
            .collect();
        ws.launch = match &w.launch {
            None => Launch::None,
            Some(SpecLaunch::Command { command, env, cwd }) => Launch::Command {
                argv: command.clone(),
                env: env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                cwd: cwd.as_ref().map(PathBuf::from),
            },
            Some(SpecLaunch::Oci { bundle }) => Launch::Oci(OciLaunch {
                bundle: PathBuf::from(bundle),
                args: Vec::new(),
                netns: oci.netns,
                seccomp: oci.seccomp,
                id: None,
            }),
            Some(SpecLaunch::Podman { image, args, options }) => {
                Launch::Podman(PodmanLaunch { image: image.clone(), args: args.clone(), options: options.clone(), name: None })
            }
            Some(SpecLaunch::Pid { pid }) => Launch::Attach { pids: vec![*pid as i32] },
            Some(SpecLaunch::Cgroup { path }) => Launch::Attach { pids: pids_of_cgroup(path)? },
        };
        for irq in &w.irqs {
            setup.irqs.push(IrqRule { action: irq.pattern.clone(), cpus: cpus(&irq.cpus) });
        }
        for n in &w.net {
            setup.nets.push(NetRule {
                iface: n.interface.clone(),
                rps: n.rps_cpus.as_deref().map(cpus),
                xps: n.xps_cpus.as_deref().map(cpus),
            });
        }
        setup.workloads.push(ws);
    }
    if setup.workloads.iter().any(|w| w.cache.is_some()) {
        setup.cache = plan.cache.clone();
    }
    Ok(setup)
}

/// Processes of an existing cgroup, given absolute or relative to a cgroup mount.
fn pids_of_cgroup(path: &str) -> Result<Vec<i32>> {
    let candidates: Vec<PathBuf> = if path.starts_with("/sys/") {
        vec![PathBuf::from(path)]
    } else {
        let rel = path.trim_start_matches('/');
        ["/sys/fs/cgroup", "/sys/fs/cgroup/cpuset", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified"]
            .iter()
            .map(|m| PathBuf::from(m).join(rel))
            .collect()
    };
    for c in &candidates {
        if c.join("cgroup.procs").exists() {
            return Ok(crate::cgroup::read_pids(&c.join("cgroup.procs")));
        }
    }
    Err(HostError::Rejected(format!("cgroup {path:?} not found (tried {candidates:?})")))
}

/// Applies a plan: the library entry point (`rtslice apply` calls this). `oci` gives OCI launches the
/// choices a spec does not carry.
pub fn apply(plan: &Plan, oci: OciDefaults, opts: &ApplyOptions) -> Result<Applied> {
    // A plan made for this kernel (`plan_for_kernel`) names the mechanism its parameters are for.
    let mut opts = opts.clone();
    if opts.mechanism.is_none() {
        opts.mechanism = plan.kernel.as_ref().map(|k| k.mechanism);
    }
    apply_setup(&setup_from_plan(plan, oci)?, &opts)
}
