//! The kernel parameters of an admitted plan under a mechanism: per workload its partition, group
//! budget or CFS quota, and each ruled thread's policy (a shared DEADLINE runtime split over the
//! threads its rule matches) — what `rtslice plan` prints and apply writes.

use super::*;

pub(super) fn deadline_part(s: &ThreadSched) -> Option<super::admission::Part> {
    match s {
        ThreadSched::Deadline { runtime, period, .. } => Some((*runtime, *period)),
        _ => None,
    }
}

pub(super) fn is_rt(s: &ThreadSched) -> bool {
    matches!(s, ThreadSched::Fifo { .. } | ThreadSched::Rr { .. })
}

/// [`kernel_workload`] on a host whose kernel has RT group scheduling (`rt_groups`: cgroup v1 with
/// RT_GROUP_SCHED, where RT groups are among the available mechanisms). There a workload with a CFS
/// pool sits in a cpu cgroup of its own (for the quota) under SCHED_DEADLINE too, and the kernel
/// refuses SCHED_FIFO/RR threads in a cpu cgroup without RT runtime: a stack attached by pid, or
/// setting its own priorities before the rules convert them, could not enter it, nor a thread be
/// given back its FIFO priority on reset. So the group also gets the real-time part as RT runtime
/// (what host `prepare` does); the SCHED_DEADLINE budgets still bound the ruled threads.
pub fn kernel_workload_on(w: &crate::WorkloadPlan, mech: Mechanism, rt_groups: bool) -> Option<KernelWorkload> {
    let mut k = kernel_workload(w, mech)?;
    if mech == Mechanism::Deadline && rt_groups && k.cfs_quota.is_some() {
        if let Some(r) = w.realtime_reservation() {
            k.group_budget = Some(GroupBudget::from(r));
            k.budget.push_str(&format!(
                "; its cpu cgroup (for the CFS quota) also gets RT runtime {} every {}, so that FIFO/RR threads may enter it \
                 before the rules make them SCHED_DEADLINE (RT group scheduling refuses them in a group without runtime)",
                rtslice_spec::units::format_duration(r.runtime),
                rtslice_spec::units::format_duration(r.period)
            ));
        }
    }
    Some(k)
}

/// The kernel parameters of one admitted workload under `mech` (what host `prepare` computes).
pub fn kernel_workload(w: &crate::WorkloadPlan, mech: Mechanism) -> Option<KernelWorkload> {
    // Always Some today; an Option keeps room for workloads apply would not touch. A CFS pool's
    // share is not the real-time rules' to split.
    let reservation = w.realtime_reservation();
    let mut threads: Vec<KernelThread> = w
        .threads
        .iter()
        .map(|t| KernelThread {
            pattern: t.pattern.clone(),
            sched: t.sched.clone(),
            flags: Vec::new(),
            shared: matches!(t.sched, ThreadSched::Deadline { .. }),
        })
        .collect();
    let mut group_budget = None;
    let mut budget: String;
    match (reservation, mech) {
        (Some(r), Mechanism::Deadline) => {
            let shares: Vec<(Option<f64>, Option<Duration>)> =
                threads.iter().filter(|t| is_rt(&t.sched)).map(|t| (None, t.sched.rt_period())).collect();
            let mut parts = deadline_budgets(r, w.cpus.len() as u32, &shares).into_iter();
            let mut capped = Vec::new();
            for t in threads.iter_mut().filter(|t| is_rt(&t.sched)) {
                let b = parts.next().unwrap_or(DeadlineBudget { runtime_ns: 0, period_ns: r.period.as_nanos() as u64, capped: false });
                if b.capped {
                    capped.push(format!("`{}`", t.pattern));
                }
                let period = Duration::from_nanos(b.period_ns);
                t.sched = ThreadSched::Deadline { runtime: Duration::from_nanos(b.runtime_ns), deadline: period, period };
                t.shared = true;
            }
            let explicit = threads.iter().filter(|t| matches!(t.sched, ThreadSched::Deadline { .. })).count() - shares.len();
            budget = if shares.is_empty() && explicit == 0 {
                "SCHED_DEADLINE, but no real-time rule names its threads: nothing enforces the reservation".to_string()
            } else if shares.is_empty() {
                format!(
                    "SCHED_DEADLINE: its {explicit} deadline rule(s) take their parts of {} × {} CPU(s) every {}; each rule's runtime is shared by the threads it matches (re-split by the agent as they come and go)",
                    rtslice_spec::units::format_duration(r.runtime),
                    w.cpus.len(),
                    rtslice_spec::units::format_duration(r.period)
                )
            } else {
                let own: Vec<String> = threads
                    .iter()
                    .zip(&w.threads)
                    .filter_map(|(k, t)| {
                        let p = t.sched.rt_period().filter(|p| *p != r.period)?;
                        Some(format!("`{}` every {}", k.pattern, rtslice_spec::units::format_duration(p)))
                    })
                    .collect();
                format!(
                    "SCHED_DEADLINE: {} × {} CPU(s) every {} split over its {} real-time rule(s){}; each rule's runtime is shared by the threads it matches (re-split by the agent as they come and go)",
                    rtslice_spec::units::format_duration(r.runtime),
                    w.cpus.len(),
                    rtslice_spec::units::format_duration(r.period),
                    shares.len(),
                    if own.is_empty() { String::new() } else { format!(" (at a period of their own with the same bandwidth: {})", own.join(", ")) }
                )
            };
            if !capped.is_empty() {
                // A thread runs on one CPU at a time: a part above its period cannot be used.
                budget.push_str(&format!(
                    "; the part of {} exceeds one CPU per period and is capped at the period (give the workload more real-time rules, or fewer CPUs)",
                    capped.join(", ")
                ));
            }
        }
        (Some(r), Mechanism::Hcbs) => {
            let dl: Vec<(u64, u64)> = threads
                .iter()
                .filter_map(|t| match t.sched {
                    ThreadSched::Deadline { runtime, period, .. } => Some((runtime.as_nanos() as u64, period.as_nanos() as u64)),
                    _ => None,
                })
                .collect();
            group_budget = hcbs_group_budget(r, w.cpus.len() as u32, &dl);
            let fmt = rtslice_spec::units::format_duration;
            budget = match (group_budget, dl.is_empty()) {
                (Some(b), true) => format!(
                    "the group's budget {} every {} on each of its CPUs bounds all its real-time threads together",
                    fmt(Duration::from_micros(b.runtime_us)),
                    fmt(Duration::from_micros(b.period_us))
                ),
                (Some(b), false) => format!(
                    "its SCHED_DEADLINE rules hold their parts of {} every {} as budgets of their own; the group's budget, the \
                     rest ({} every {} on each of its CPUs), bounds its FIFO/RR threads together",
                    fmt(r.runtime),
                    fmt(r.period),
                    fmt(Duration::from_micros(b.runtime_us)),
                    fmt(Duration::from_micros(b.period_us))
                ),
                (None, _) => format!(
                    "its SCHED_DEADLINE rules hold all of {} every {} as budgets of their own; the group gets no budget (it stays \
                     `max`)",
                    fmt(r.runtime),
                    fmt(r.period)
                ),
            };
        }
        (Some(r), Mechanism::RtGroup) => {
            group_budget = Some(GroupBudget::from(r));
            budget = format!(
                "the group's budget {} every {} on each of its CPUs bounds all its real-time threads together",
                rtslice_spec::units::format_duration(r.runtime),
                rtslice_spec::units::format_duration(r.period)
            );
        }
        (Some(_), Mechanism::None) => budget = "not enforced (mechanism none)".into(),
        (None, _) => budget = String::new(),
    }
    let mut budget = budget;
    // Under mechanism none nothing of the budget is enforced, the pool included (as apply).
    let cfs_quota = w.pool.filter(|_| reservation.is_some() && mech != Mechanism::None).map(|p| {
        let rules: Vec<String> = w
            .threads
            .iter()
            .filter(|t| matches!(t.sched, ThreadSched::Other { .. }))
            .map(|t| format!("`{}`", t.pattern))
            .collect();
        budget.push_str(&format!(
            "{}its SCHED_OTHER threads ({}, and any no rule names) share a CFS bound of {} every {} over its CPUs ({:.0}% of its budget)",
            if budget.is_empty() { "" } else { "; " },
            if rules.is_empty() { "none named".to_string() } else { rules.join(", ") },
            rtslice_spec::units::format_duration(p.quota),
            rtslice_spec::units::format_duration(p.period),
            p.share * 100.0
        ));
        GroupBudget { runtime_us: p.quota_us(), period_us: p.period_us() }
    });
    if w.reclaim && mech == Mechanism::Deadline && reservation.is_some() {
        budget.push_str(
            "; reclaim: SCHED_FLAG_RECLAIM (GRUB: a thread may run on bandwidth its partition leaves unused, up to the kernel's cap) \
             and one pool of bandwidth: the agent re-splits the rules' budgets together over their threads by each one's measured \
             CPU use every 200 ms (a quarter of the pool in equal parts; each thread's part at its rule's period), never more than the pool in total \
             (the default; `reclaim: false` in the reservation keeps the split fixed and each thread to its part)",
        );
    }
    for t in threads.iter_mut() {
        if matches!(t.sched, ThreadSched::Deadline { .. }) {
            t.flags = vec!["reset_on_fork".into()];
            if w.reclaim && reservation.is_some() {
                t.flags.push("reclaim".into());
            }
            t.shared = true;
        }
    }
    // As apply: dedicated and shielded workloads, and any with SCHED_DEADLINE threads (their affinity
    // must span a root domain), get an exclusive partition — unless they span every CPU (kernel_plan).
    let has_dl = threads.iter().any(|t| matches!(t.sched, ThreadSched::Deadline { .. }));
    let partition = matches!(w.allocation, Allocation::Dedicated { .. }) || w.isolation.shield || has_dl;
    Some(KernelWorkload { name: w.name.clone(), partition, group_budget, cfs_quota, threads, budget })
}

/// The RT budget of rtslice's parent group, `runtime_us` every second, as the node's base writes
/// it: on a kernel with RT group scheduling, under every mechanism but HCBS (whose parent stays
/// `max`), the node's cap (`cap`, at most the kernel's `rt_cap`) — the most its workloads' groups
/// may hold together, so a group's budget is refused by the kernel, not by rtslice's arithmetic,
/// when the cap is full. `None` without RT groups.
pub fn parent_runtime_us(mech: Mechanism, rt_groups: bool, cap: f64, rt_cap: f64) -> Option<u64> {
    (rt_groups && mech != Mechanism::Hcbs).then(|| (cap.min(rt_cap).clamp(0.0, 1.0) * 1e6).floor() as u64)
}

/// The parameters apply writes for `plan` under `mech` on a kernel described by `kernel` (RT group
/// scheduling there: [`kernel_workload_on`]; HCBS: the root group's budget).
pub fn kernel_plan(plan: &Plan, mech: Mechanism, kernel: &KernelFacts) -> KernelPlan {
    let rt_cap = kernel.rt_cap.unwrap_or(1.0);
    let rt_groups = kernel.available.contains(&Mechanism::RtGroup);
    let mut workloads: Vec<KernelWorkload> = plan.workloads.iter().filter_map(|w| kernel_workload_on(w, mech, rt_groups)).collect();
    for k in workloads.iter_mut() {
        // A workload spanning every CPU of the node needs no partition (apply leaves it balanced).
        if plan.workloads.iter().any(|w| w.name == k.name && w.cpus == plan.node.cpus) {
            k.partition = false;
        }
    }
    if mech == Mechanism::Hcbs {
        // The parent stays `max` (a new group's value: the kernel needs nothing there); the root
        // holds the budgets (the host node raises it before a workload's group needs it).
        let root = kernel.hcbs_root.clone().unwrap_or_else(HcbsRoot::boot_default);
        let ours: Vec<GroupBudget> = workloads.iter().filter_map(|k| k.group_budget).collect();
        let root_budget = if ours.is_empty() { None } else { root.raised_for(&ours) };
        return KernelPlan { mechanism: mech, parent_runtime_us: None, root_before: Some(root.budget()), root_budget, workloads };
    }
    let parent_runtime_us = parent_runtime_us(mech, rt_groups, plan.node.cap, rt_cap);
    KernelPlan { mechanism: mech, parent_runtime_us, root_before: None, root_budget: None, workloads }
}
