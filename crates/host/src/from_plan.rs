//! Plan → Setup: the planner's resolved workloads become host-level cgroups, budgets, rules and
//! launches.

use std::path::PathBuf;

use rtslice_plan::{Allocation, Plan, ThreadCpus, ThreadSched};
use rtslice_spec::Launch as SpecLaunch;

use crate::apply::{apply_with_facts, Applied, ApplyOptions};
use crate::facts::HostFacts;
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
    // The planner computed the kernel parameters (`plan_for_kernel`, or the node's
    // `kernel_plan` for the workload it admits); the host writes them as they are.
    let kernel = plan.kernel.as_ref();
    if kernel.is_none() {
        if let Some(w) = plan.workloads.iter().find(|w| matches!(w.allocation, Allocation::Reservation { .. })) {
            return Err(HostError::Rejected(format!(
                "workload {}: the plan has a reservation but no kernel parameters (thread budgets, group budget); plan it for \
                 this kernel (rtslice_plan::plan_for_kernel, as `rtslice apply` does)",
                w.name
            )));
        }
    }
    let mut setup = Setup {
        name: plan.node.name.clone().unwrap_or_else(|| "rtslice".into()),
        housekeeping: cpus(&plan.node.housekeeping),
        mechanism: kernel.map(|k| k.mechanism),
        ..Default::default()
    };
    for w in &plan.workloads {
        let mut ws = WorkloadSetup { name: w.name.clone(), cpus: cpus(&w.cpus), ..Default::default() };
        let kw = kernel.and_then(|k| k.workloads.iter().find(|k| k.name == w.name));
        if kernel.is_some() && kw.is_none() {
            return Err(HostError::Rejected(format!("workload {}: the plan's kernel parameters leave it out (a bug of the planner)", w.name)));
        }
        match &w.allocation {
            // Every CPU of the allocation carries the same reservation; the cgroup interfaces take
            // whole microseconds.
            // A CFS pool's share of the reservation becomes the group's CFS quota (none under
            // mechanism none: nothing of the budget is enforced there); the real-time rules or the
            // group's RT budget hold the rest (`WorkloadPlan::realtime_reservation`).
            Allocation::Reservation { .. } => {
                ws.reservation = w.realtime_reservation();
                let kw = kw.expect("checked above: a reservation comes with kernel parameters");
                ws.cfs = kw.cfs_quota.map(|b| Cfs { quota_us: Some(b.runtime_us), period_us: Some(b.period_us), weight: None, idle: false });
                ws.group_budget = kw.group_budget.map(|b| rtslice_plan::Reservation::from_micros(b.runtime_us, b.period_us));
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
        ws.shield = w.isolation.shield;
        ws.partition |= w.isolation.shield;
        ws.wide_affinity = w.isolation.wide_affinity;
        ws.memory = w.memory;
        ws.cache = w.cache.clone();
        ws.devices = w.devices.iter().map(|d| DeviceSetup { pci: d.pci, irq_cpus: d.irq_cpus.as_deref().map(cpus) }).collect();
        // The kernel plan's rules match the plan's one for one (the planner's budget split over the
        // real-time rules, SCHED_FLAG_RECLAIM where the reservation reclaims).
        let policy = |i: usize, t: &rtslice_plan::ThreadPin| match kw.and_then(|k| k.threads.get(i)) {
            Some(k) => sched_attr_of(&k.sched, k.flags.iter().any(|f| f == "reclaim")),
            None => sched_attr_of(&t.sched, false),
        };
        ws.threads = w
            .threads
            .iter()
            .enumerate()
            .map(|(i, t)| ThreadRule {
                name: t.pattern.clone(),
                policy: Some(policy(i, t)),
                cpus: match &t.cpus {
                    ThreadCpus::Anywhere => None,
                    ThreadCpus::Cpus(c) => Some(cpus(c)),
                },
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
    let facts = HostFacts::detect()?;
    let mut opts = opts.clone();
    opts.cap = opts.cap.or(Some(plan.node.cap));
    let mut planned = plan.clone();
    match &plan.kernel {
        // A plan made for this kernel (`plan_for_kernel`) names the mechanism its parameters are for.
        Some(k) => opts.mechanism = opts.mechanism.or(Some(k.mechanism)),
        // A plan made without the kernel's facts (`rtslice_plan::plan`: the bench's layouts, which may
        // ask what `plan_for_kernel` would refuse, to measure it): the planner's parameters under the
        // mechanism apply takes here.
        None => {
            let reserved = rtslice_plan::kernel::reserved_of(plan);
            let mech = crate::prepare::choose_mechanism(&facts, opts.mechanism, &reserved)?;
            opts.mechanism = Some(mech);
            planned.kernel = Some(rtslice_plan::kernel::kernel_plan(plan, mech, &facts.kernel_facts()));
        }
    }
    let whole = setup_from_plan(&planned, oci)?;
    apply_with_facts(&whole, &opts, &facts)
}
