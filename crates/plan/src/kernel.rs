//! What the kernel will be asked to do: the reservation mechanism, the host's kernel limits, and the
//! exact parameters `apply` writes (per thread rule: the policy with its SCHED_DEADLINE runtime,
//! deadline, period and flags; per group: budgets). Pure: the host's facts come in as
//! [`KernelFacts`], so `rtslice plan` shows, and refuses, what `apply` would on that host — and the
//! host crate computes the same numbers with the same functions ([`deadline_budgets`],
//! [`choose_mechanism`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{Allocation, Plan, Rejection, Reservation, ThreadSched};
use rtslice_spec::Spec;

pub mod admission;
mod params;

use params::deadline_part;
pub use params::{kernel_plan, kernel_workload, kernel_workload_on, parent_runtime_us};

/// How real-time reservations are enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// Hierarchical CBS through cgroup v2 `cpu.rt.max` (patched kernels).
    Hcbs,
    /// SCHED_DEADLINE for the real-time threads, inside an exclusive partition.
    Deadline,
    /// Legacy RT group throttling (cgroup v1 cpu.rt_runtime_us/cpu.rt_period_us).
    RtGroup,
    /// No enforcement (no reservation requested).
    None,
}

impl Mechanism {
    pub fn describe(&self) -> &'static str {
        match self {
            Mechanism::Hcbs => "HCBS cgroup reservations (cpu.rt.max)",
            Mechanism::Deadline => "SCHED_DEADLINE per real-time thread in an exclusive partition",
            Mechanism::RtGroup => "RT group runtime/period (cgroup v1 cpu.rt_runtime_us)",
            Mechanism::None => "none (no reservation enforced)",
        }
    }
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mechanism::Hcbs => "hcbs",
            Mechanism::Deadline => "deadline",
            Mechanism::RtGroup => "rt_group",
            Mechanism::None => "none",
        })
    }
}

impl std::str::FromStr for Mechanism {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "hcbs" => Ok(Mechanism::Hcbs),
            "deadline" => Ok(Mechanism::Deadline),
            "rt_group" | "rt-group" | "rtgroup" => Ok(Mechanism::RtGroup),
            "none" => Ok(Mechanism::None),
            _ => Err(format!("unknown mechanism {s:?}; use hcbs, deadline, rt_group or none")),
        }
    }
}

/// What the kernel of the target host allows (the CLI reads it from /proc and /sys; tests make it up).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelFacts {
    /// Reservation mechanisms the host offers, best first. Empty: any mechanism may be requested.
    pub available: Vec<Mechanism>,
    /// The kernel's RT/DEADLINE cap per CPU, `sched_rt_runtime_us / sched_rt_period_us` (0.95 by
    /// default); `None` when unlimited (-1) or unknown.
    pub rt_cap: Option<f64>,
    /// Bandwidth per CPU the kernel's deadline servers (6.12+ fair_server, 50 ms / 1 s by default)
    /// hold in SCHED_DEADLINE admission: deadline threads get `rt_cap − dl_server` of each CPU.
    pub dl_server: f64,
    /// The tick rate (CONFIG_HZ), when known.
    pub hz: Option<u32>,
    /// Budgets are enforced by a high-resolution timer (sched feature HRTICK/HRTICK_DL), not at ticks.
    pub hrtick: bool,
    /// CPUs no cpuset partition may hold: cgroup v2 with boot isolation (`isolcpus=domain`), where the
    /// kernel refuses such a partition; apply gives a workload there a plain cpuset. Empty elsewhere.
    #[serde(default)]
    pub no_partition_cpus: Vec<u32>,
    /// HCBS: the root group's budget now and the budgets it holds for groups that are not
    /// rtslice's (read on this host); `None` plans for a freshly booted HCBS kernel
    /// ([`HcbsRoot::boot_default`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hcbs_root: Option<HcbsRoot>,
}

impl KernelFacts {
    /// The tick, where budgets are enforced only at ticks (no HRTICK); `None` with HRTICK or an
    /// unknown HZ.
    pub fn enforcement_tick(&self) -> Option<Duration> {
        self.hz.filter(|_| !self.hrtick).map(|hz| Duration::from_nanos(1_000_000_000 / u64::from(hz.max(1))))
    }
}

/// HCBS (cgroup v2 `cpu.rt.max`): the root group's budget reserves that bandwidth on every CPU, in
/// the kernel's SCHED_DEADLINE admission beside the deadline threads and the fair servers, and
/// every group whose ancestors below the root are all `max` draws its budget from it (the kernel
/// refuses a group's budget that would take the root's groups above the root's: EINVAL). A new
/// group reads `max 0`, and the root boots at `0 1000000`: no group can have a budget until the
/// root has one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HcbsRoot {
    /// The root's `cpu.rt.max`.
    pub runtime_us: u64,
    pub period_us: u64,
    /// The budgets of the other groups the root's budget holds now (not rtslice's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub others: Vec<GroupBudget>,
}

impl HcbsRoot {
    /// A freshly booted HCBS kernel: the root at `0 1000000`, no group with a budget.
    pub fn boot_default() -> HcbsRoot {
        HcbsRoot { runtime_us: 0, period_us: 1_000_000, others: Vec::new() }
    }

    /// The root's budget as a group budget.
    pub fn budget(&self) -> GroupBudget {
        GroupBudget { runtime_us: self.runtime_us, period_us: self.period_us }
    }

    /// What the root's `cpu.rt.max` must become to also hold `ours` (with the other groups'):
    /// `None` when it holds them already (the kernel asks for no more), else the least runtime at
    /// the root's own period that the kernel's check admits ([`hcbs_root_runtime_us`]).
    pub fn raised_for(&self, ours: &[GroupBudget]) -> Option<GroupBudget> {
        let all: Vec<GroupBudget> = self.others.iter().chain(ours).copied().collect();
        let period_us = if self.period_us == 0 { 1_000_000 } else { self.period_us };
        let need = hcbs_root_runtime_us(&all, period_us);
        (hcbs_bw(GroupBudget { runtime_us: need, period_us }) > hcbs_bw(self.budget())).then_some(GroupBudget { runtime_us: need, period_us })
    }
}

/// HCBS: a reserved workload's group budget — its reservation less what its explicit
/// SCHED_DEADLINE rules take of it (`(runtime_ns, period_ns)` of each rule, shared by the threads it
/// matches). Those threads hold budgets of their own, admitted by the kernel beside the group
/// servers; the group's budget holding them too would reserve that bandwidth twice (and a deadline
/// thread gains nothing from a group server). `None` when they take all of it: the group then stays
/// `max`. What the rules take is counted at the reservation's period per CPU, rounded up to whole
/// µs, so rules and group never hold more than the reservation together.
pub fn hcbs_group_budget(reservation: Reservation, cpus: u32, deadline_rules: &[(u64, u64)]) -> Option<GroupBudget> {
    let r = reservation.whole_micros();
    let period_ns = r.period.as_nanos();
    let taken_ns: u128 = deadline_rules
        .iter()
        .map(|&(runtime_ns, rule_period_ns)| (runtime_ns as u128 * period_ns).div_ceil(rule_period_ns.max(1) as u128))
        .sum();
    let per_cpu_us = taken_ns.div_ceil(cpus.max(1) as u128 * 1000);
    let left = (r.runtime_us() as u128).saturating_sub(per_cpu_us) as u64;
    (left > 0).then_some(GroupBudget { runtime_us: left, period_us: r.period_us() })
}

/// A budget as the kernel compares budgets: `to_ratio(period, runtime)`, runtime/period in units
/// of 2^-20 rounded down (kernel/sched/core.c, BW_SHIFT 20; the HCBS checks sum these).
pub fn hcbs_bw(b: GroupBudget) -> u64 {
    if b.period_us == 0 {
        return 0;
    }
    (((b.runtime_us as u128 * 1000) << 20) / (b.period_us as u128 * 1000)) as u64
}

/// The least runtime (µs) every `period_us` whose bandwidth, as the kernel rounds it
/// ([`hcbs_bw`]), covers the sum of `groups`' (each rounded as the kernel does): what a parent
/// (the root) needs under HCBS for its children to be admitted. 20 ms / 100 ms needs 200000 µs
/// every 1 s; two of them 400000.
pub fn hcbs_root_runtime_us(groups: &[GroupBudget], period_us: u64) -> u64 {
    let sum: u128 = groups.iter().map(|g| hcbs_bw(*g) as u128).sum();
    // The least R with floor((R * 1000 << 20) / (P * 1000)) >= sum: R = ceil(sum * P / 2^20).
    let mut r = ((sum * period_us as u128) + (1 << 20) - 1) >> 20;
    while hcbs_bw(GroupBudget { runtime_us: r as u64, period_us }) < sum as u64 {
        r += 1;
    }
    r as u64
}

/// The kernel parameters `apply` writes for a plan under one mechanism.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelPlan {
    pub mechanism: Mechanism,
    /// RT groups: the budget of rtslice's parent group, `runtime_us` every 1 s. (HCBS: none, the
    /// parent stays `max` and the workloads' budgets come from the root's.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_runtime_us: Option<u64>,
    /// HCBS: the root group's `cpu.rt.max` before apply (what reset restores) …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_before: Option<GroupBudget>,
    /// … and what apply writes there before any group's budget, when it must hold more (the
    /// workloads' budgets with the other groups'); `None`: the root's budget holds them already.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_budget: Option<GroupBudget>,
    pub workloads: Vec<KernelWorkload>,
}

impl KernelPlan {
    /// The lines `rtslice plan` prints about the groups above the workloads' (rtslice's parent;
    /// under HCBS the root group), each a value apply writes or keeps.
    pub fn parent_lines(&self) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(us) = self.parent_runtime_us {
            v.push(format!("rtslice parent group: RT budget {us} µs every 1000000 µs"));
        }
        if self.mechanism == Mechanism::Hcbs {
            let was = self.root_before.map(|b| format!("\"{} {}\"", b.runtime_us, b.period_us)).unwrap_or_default();
            match self.root_budget {
                Some(b) => v.push(format!(
                    "root group: cpu.rt.max \"{} {}\" (it reads {was}; the root's budget must hold every group's; reset restores it)",
                    b.runtime_us, b.period_us
                )),
                None if self.workloads.iter().any(|w| w.group_budget.is_some()) => {
                    v.push(format!("root group: cpu.rt.max stays {was} (it holds the groups' budgets already)"))
                }
                None => {}
            }
            v.push("rtslice parent group: cpu.rt.max stays \"max\" (its groups' budgets come from the root's)".to_string());
        }
        v
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelWorkload {
    pub name: String,
    /// An exclusive cpuset partition (its own root domain).
    pub partition: bool,
    /// The group's budget (RT group `cpu.rt_runtime_us`/`cpu.rt_period_us`, HCBS `cpu.rt.max`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_budget: Option<GroupBudget>,
    /// The group's CFS bandwidth (`cpu.max` / `cpu.cfs_quota_us` and `cpu.cfs_period_us`): its
    /// reservation's CFS pool, bounding its SCHED_OTHER threads together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cfs_quota: Option<GroupBudget>,
    /// The thread rules as `sched_setattr` gets them, first match wins.
    pub threads: Vec<KernelThread>,
    /// How the workload's one budget is enforced, in words.
    pub budget: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupBudget {
    pub runtime_us: u64,
    pub period_us: u64,
}

impl GroupBudget {
    /// The budget as an admission part (runtime, period).
    pub fn part(&self) -> admission::Part {
        (Duration::from_micros(self.runtime_us), Duration::from_micros(self.period_us))
    }
}

impl From<Reservation> for GroupBudget {
    /// The reservation as one group's budget, in the whole microseconds the cgroup files take.
    fn from(r: Reservation) -> GroupBudget {
        GroupBudget { runtime_us: r.runtime_us(), period_us: r.period_us() }
    }
}

impl KernelWorkload {
    /// The group budget as the files apply writes under `mech`: HCBS `cpu.rt.max "runtime period"`,
    /// RT groups `cpu.rt_runtime_us` and `cpu.rt_period_us`.
    pub fn group_line(&self, mech: Mechanism) -> Option<String> {
        let b = self.group_budget?;
        Some(match mech {
            Mechanism::Hcbs => format!("cpu.rt.max=\"{} {}\"", b.runtime_us, b.period_us),
            _ => format!("cpu.rt_runtime_us={} cpu.rt_period_us={}", b.runtime_us, b.period_us),
        })
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelThread {
    pub pattern: String,
    pub sched: ThreadSched,
    /// `sched_flags` (SCHED_DEADLINE: `reset_on_fork`, so children start in SCHED_OTHER and get
    /// their share from the agent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
    /// SCHED_DEADLINE: the runtime is the budget of every thread the rule matches together; each
    /// gets `runtime / n` for the n threads it matches at the time.
    pub shared: bool,
}

/// One real-time rule's SCHED_DEADLINE parameters under a reservation: `runtime_ns` every
/// `period_ns` (the deadline is the period), for all the threads the rule matches together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeadlineBudget {
    pub runtime_ns: u64,
    pub period_ns: u64,
    /// The part was more than one period's worth and was cut to the period (the kernel refuses
    /// runtime > period).
    pub capped: bool,
}

/// The SCHED_DEADLINE budgets of a workload's real-time rules: the budget of `cpus` CPUs split by
/// each rule's share (`None` = an equal part, 1 / the number of rules) at the reservation's period,
/// then each part moved to the rule's own period if it has one (`runtime × period / reservation
/// period`, rounded down in integers: the same bandwidth, never more), and capped at one period (a
/// rule's threads may run on one CPU at a time each). The one split both `plan` and `apply` use.
pub fn deadline_budgets(reservation: Reservation, cpus: u32, rules: &[(Option<f64>, Option<Duration>)]) -> Vec<DeadlineBudget> {
    let n = rules.len().max(1) as f64;
    let shares: Vec<f64> = rules.iter().map(|(s, _)| s.unwrap_or(1.0 / n)).collect();
    let base_ns = reservation.period.as_nanos().max(1);
    reservation
        .split(cpus, &shares, reservation.period)
        .into_iter()
        .zip(rules)
        .map(|(d, (_, own))| {
            let period_ns = own.unwrap_or(reservation.period).as_nanos();
            let ns = d.as_nanos() * period_ns / base_ns;
            let (ns, period_ns) = (u64::try_from(ns).unwrap_or(u64::MAX), u64::try_from(period_ns).unwrap_or(u64::MAX));
            DeadlineBudget { runtime_ns: ns.min(period_ns), period_ns, capped: ns > period_ns }
        })
        .collect()
}

/// A reserved workload as the choice of mechanism sees it: its CPUs and its reservation (runtime
/// every period on each of them).
#[derive(Clone, Debug, PartialEq)]
pub struct Reserved {
    pub cpus: Vec<u32>,
    pub reservation: Reservation,
}

/// Picks the mechanism like `apply` does, among `kernel.available`: the requested one if the host
/// has it; else a group budget where the kernel can hold these reservations with one — HCBS, else
/// RT groups when their runtimes fit the kernel's one global ratio (cgroup v1 accounts every group
/// against it, whatever its CPUs), at any period; else SCHED_DEADLINE
/// when the reserved CPU sets are pairwise disjoint (partitions cannot overlap), else RT groups,
/// else SCHED_DEADLINE.
///
/// A group budget first because a real stack is several threads that hand work to each other: under
/// one budget they keep their own priorities and whichever is busy may use all of it, where
/// per-thread SCHED_DEADLINE budgets reorder them by deadline and charge each wake-up the kernel's
/// CBS bookkeeping (an oai-lte stack's workers woke 2.5–14× later than on a dedicated CPU, under
/// RT groups 1.0–1.2× its p99s: docs/results.md, issue 39).
pub fn choose_mechanism(kernel: &KernelFacts, requested: Option<Mechanism>, reserved: &[Reserved]) -> Result<Mechanism, String> {
    let available = &kernel.available;
    if let Some(m) = requested {
        if m != Mechanism::None && !available.is_empty() && !available.contains(&m) {
            return Err(format!(
                "reservation mechanism {m} is not available on this host (available: [{}]); see `rtslice doctor`",
                available.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", ")
            ));
        }
        return Ok(if reserved.is_empty() { Mechanism::None } else { m });
    }
    if reserved.is_empty() {
        return Ok(Mechanism::None);
    }
    let disjoint = reserved.iter().enumerate().all(|(i, a)| reserved[i + 1..].iter().all(|b| !a.cpus.iter().any(|c| b.cpus.contains(c))));
    // As the planner admits them under RT groups (no global account where the ratio is unlimited).
    let rt_groups_fit = kernel.rt_cap.is_none_or(|cap| rt_groups_exceeding(reserved.iter().map(|r| &r.reservation), cap).is_none());
    let has = |m| available.contains(&m);
    if has(Mechanism::Hcbs) {
        Ok(Mechanism::Hcbs)
    } else if has(Mechanism::RtGroup) && rt_groups_fit {
        Ok(Mechanism::RtGroup)
    } else if has(Mechanism::Deadline) && disjoint {
        Ok(Mechanism::Deadline)
    } else if has(Mechanism::RtGroup) {
        Ok(Mechanism::RtGroup)
    } else if has(Mechanism::Deadline) {
        Ok(Mechanism::Deadline)
    } else {
        Err("this host has no reservation mechanism (no HCBS, no cpuset partitions, no RT groups); see `rtslice doctor`".into())
    }
}

/// The mechanism the node service (`rtslice daemon`) picks when it is not told: HCBS, else RT
/// groups, else SCHED_DEADLINE. It chooses once, when the node is created, for workloads that come
/// one at a time and may overlap, so it cannot use [`choose_mechanism`]'s look at all the
/// reservations together; of these mechanisms only SCHED_DEADLINE needs disjoint sets.
pub fn node_default_mechanism(available: &[Mechanism]) -> Mechanism {
    [Mechanism::Hcbs, Mechanism::RtGroup, Mechanism::Deadline].into_iter().find(|m| available.contains(m)).unwrap_or(Mechanism::None)
}

/// The first of `reservations` with which RT groups' one global account (cgroup v1: every group's
/// runtime/period against the kernel's ratio `cap`, whatever its CPUs) no longer fits, counted in
/// whole microseconds as the cgroup files hold them.
fn rt_groups_exceeding<'a>(reservations: impl IntoIterator<Item = &'a Reservation>, cap: f64) -> Option<(usize, admission::Exceeded)> {
    admission::first_exceeding(
        [],
        reservations.into_iter().map(|r| {
            let w = r.whole_micros();
            (w.runtime, w.period)
        }),
        cap,
    )
}

/// A plan's reserved workloads, for [`choose_mechanism`].
pub fn reserved_of(plan: &Plan) -> Vec<Reserved> {
    plan.workloads
        .iter()
        .filter_map(|w| match &w.allocation {
            Allocation::Reservation { reservation, .. } => Some(Reserved { cpus: w.cpus.clone(), reservation: *reservation }),
            _ => None,
        })
        .collect()
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// The kernel's cap per CPU for the mechanism (deadline threads also leave the deadline servers' share).
fn kernel_cap(kernel: &KernelFacts, mech: Mechanism) -> Option<f64> {
    let cap = kernel.rt_cap?;
    // HCBS: the root's budget is admitted as deadline bandwidth on every CPU, beside the servers.
    Some(if matches!(mech, Mechanism::Deadline | Mechanism::Hcbs) { (cap - kernel.dl_server).max(0.0) } else { cap })
}

/// Plans `spec` for a host whose kernel is described by `kernel`, under `requested` (or the
/// mechanism `apply` would choose there), and refuses what that kernel would refuse: reservations
/// above its RT/DEADLINE cap (less the deadline servers' share under SCHED_DEADLINE), RT groups
/// summing above the cap (v1 accounts them globally), SCHED_DEADLINE partitions that leave no CPU
/// for the rest of the system, and budgets whose SCHED_DEADLINE threads need more than their
/// partition; a period shorter than a tick where budgets are enforced at ticks (no HRTICK) gets a
/// warning under every mechanism. The result carries [`Plan::kernel`]: the exact parameters apply
/// writes.
pub fn plan_for_kernel(spec: &Spec, facts: &crate::NodeFacts, kernel: &KernelFacts, requested: Option<Mechanism>) -> Plan {
    // Mechanism first on a plan under the spec's cap (placement decides whether partitions are disjoint).
    let first = crate::plan(spec, facts);
    let mech = match choose_mechanism(kernel, requested, &reserved_of(&first)) {
        Ok(m) => m,
        Err(reason) => {
            let mut p = first;
            p.warnings.push(reason.clone());
            for w in std::mem::take(&mut p.workloads) {
                if matches!(w.allocation, Allocation::Reservation { .. }) {
                    p.rejected.push(Rejection { name: w.name, reason: reason.clone(), defrag: None });
                } else {
                    p.workloads.push(w);
                }
            }
            return p;
        }
    };
    let mut p = plan_under(spec, facts, kernel, mech);
    if requested.is_some() {
        return p;
    }
    // The default is the mechanism apply would choose for the admitted workloads (refusals and the
    // kernel's cap can change whether the reserved CPU sets are disjoint). Should the choice go round
    // in circles, the plan admitting most wins; apply follows the plan's mechanism either way.
    let mut tried = vec![mech];
    let mut candidates: Vec<Plan> = Vec::new();
    loop {
        let reserved = reserved_of(&p);
        if reserved.is_empty() {
            // Nothing reserved is admitted: no mechanism has anything to enforce.
            return p;
        }
        let again = choose_mechanism(kernel, None, &reserved).unwrap_or(mech);
        if again == p.kernel.as_ref().map_or(mech, |k| k.mechanism) {
            return p;
        }
        candidates.push(p);
        if tried.contains(&again) {
            let mut best = candidates.remove(0);
            for c in candidates {
                if c.workloads.len() > best.workloads.len() {
                    best = c;
                }
            }
            return best;
        }
        tried.push(again);
        p = plan_under(spec, facts, kernel, again);
    }
}

/// [`plan_for_kernel`] under one mechanism.
fn plan_under(spec: &Spec, facts: &crate::NodeFacts, kernel: &KernelFacts, mech: Mechanism) -> Plan {
    let mut spec = spec.clone();
    let mut refused: Vec<Rejection> = Vec::new();
    let mut warnings = Vec::new();
    if let Some(cap) = kernel_cap(kernel, mech) {
        // The default cap is lowered silently (the node line shows the cap planned with); a cap the
        // spec asks for explicitly gets a warning.
        if spec.node.cap > cap + 1e-12 && spec.node.cap != rtslice_spec::DEFAULT_CAP {
            warnings.push(format!(
                "the spec's cap {} is above what the kernel admits under {mech} ({}: sched_rt_runtime_us/sched_rt_period_us{}); planned with {}",
                pct(spec.node.cap),
                pct(cap),
                if matches!(mech, Mechanism::Deadline | Mechanism::Hcbs) && kernel.dl_server > 0.0 {
                    format!(" less the deadline servers' {}", pct(kernel.dl_server))
                } else {
                    String::new()
                },
                pct(cap)
            ));
        }
        spec.node.cap = spec.node.cap.min(cap);
    }
    // Refusals that need the placement are found on a plan and the workload is taken out of the spec;
    // re-planning without it keeps the others' accounting exact. Each round removes one workload.
    let plan = loop {
        let p = crate::plan(&spec, facts);
        let mut refuse: Option<(String, String)> = None;
        // On this host, apply can only use online CPUs (plan alone merely warns about them).
        if !facts.online.is_empty() {
            if let Some(w) = p.workloads.iter().find(|w| w.cpus.iter().any(|c| !facts.online.contains(c))) {
                let missing: Vec<u32> = w.cpus.iter().copied().filter(|c| !facts.online.contains(c)).collect();
                refuse = Some((
                    w.name.clone(),
                    format!(
                        "it would get CPUs {}, but CPU(s) {} are not online on this host (online: {}); list online CPUs in the spec",
                        rtslice_spec::format_cpu_list(&w.cpus),
                        rtslice_spec::format_cpu_list(&missing),
                        rtslice_spec::format_cpu_list(&facts.online)
                    ),
                ));
            }
        }
        let reserved = p.workloads.iter().filter(|w| matches!(w.allocation, Allocation::Reservation { .. }));
        for w in reserved.filter(|_| refuse.is_none() && mech == Mechanism::Deadline) {
            if let (Some(cap), Some(k)) = (kernel_cap(kernel, mech), kernel_workload(w, mech)) {
                let parts = k.threads.iter().filter_map(|t| deadline_part(&t.sched));
                if let Err(x) = admission::fits(parts, cap, w.cpus.len() as u32) {
                    refuse = Some((
                        w.name.clone(),
                        format!(
                            "its SCHED_DEADLINE rules need {} of a CPU, its partition offers {} (the kernel's cap {} on {} CPU(s)); \
                             lower the explicit runtimes or give it more CPUs",
                            pct(x.need),
                            pct(x.offered),
                            pct(cap),
                            w.cpus.len()
                        ),
                    ));
                    break;
                }
            }
        }
        if refuse.is_none() && mech == Mechanism::Hcbs {
            // One root budget holds every group's, and it is reserved on every CPU whatever the
            // groups' cpusets: the budgets sum, over all CPUs, with the other groups' the root holds.
            let root = kernel.hcbs_root.clone().unwrap_or_else(HcbsRoot::boot_default);
            let others: Vec<admission::Part> = root.others.iter().map(|b| b.part()).collect();
            let held: Vec<(&crate::WorkloadPlan, Reservation)> =
                p.workloads.iter().filter_map(|w| Some((w, w.realtime_reservation()?.whole_micros()))).collect();
            let crossing = admission::first_exceeding(others.iter().copied(), held.iter().map(|(_, r)| (r.runtime, r.period)), spec.node.cap);
            if let Some((i, x)) = crossing {
                let others = admission::sum(others);
                refuse = Some((
                    held[i].0.name.clone(),
                    format!(
                        "HCBS reserves each group's budget on every CPU, whatever its cpuset (the root group's budget holds them \
                         all and the kernel admits it as deadline bandwidth on each CPU): with it the budgets sum to {}{}, above \
                         the {} the kernel admits there (sched_rt_runtime_us/sched_rt_period_us{}, or the spec's cap); fewer or \
                         smaller reservations, or --mechanism deadline",
                        pct(x.need),
                        if others > 0.0 { format!(" with the other groups' {}", pct(others)) } else { String::new() },
                        pct(spec.node.cap),
                        if kernel.dl_server > 0.0 { format!(" less the fair servers' {}", pct(kernel.dl_server)) } else { String::new() },
                    ),
                ));
            }
        }
        if refuse.is_none() && mech == Mechanism::RtGroup {
            if let Some(cap) = kernel.rt_cap {
                let held: Vec<(&crate::WorkloadPlan, &Reservation)> = p
                    .workloads
                    .iter()
                    .filter_map(|w| match &w.allocation {
                        Allocation::Reservation { reservation, .. } => Some((w, reservation)),
                        _ => None,
                    })
                    .collect();
                if let Some((i, x)) = rt_groups_exceeding(held.iter().map(|(_, r)| *r), cap) {
                    refuse = Some((
                        held[i].0.name.clone(),
                        format!(
                            "RT groups (cgroup v1) account every group's runtime/period against one ratio: with it the \
                             reservations sum to {}, above the kernel's cap {}; use --mechanism deadline or fewer reservations",
                            pct(x.need),
                            pct(cap)
                        ),
                    ));
                }
            }
        }
        if refuse.is_none() {
            // Exclusive partitions (reserved workloads with SCHED_DEADLINE threads, dedicated,
            // shielded) cannot overlap any other workload, as apply checks.
            let ks: Vec<(&crate::WorkloadPlan, bool)> = p
                .workloads
                .iter()
                .map(|w| (w, w.cpus != p.node.cpus && kernel_workload(w, mech).is_some_and(|k| k.partition)))
                .collect();
            'outer: for (i, (b, pb)) in ks.iter().enumerate() {
                for (a, pa) in &ks[..i] {
                    if (*pa || *pb) && a.cpus.iter().any(|c| b.cpus.contains(c)) {
                        refuse = Some((
                            b.name.clone(),
                            format!(
                                "its CPUs {} overlap `{}`'s {}, but {} needs an exclusive cpuset partition (SCHED_DEADLINE threads, \
                                 dedicated or shielded CPUs); give them disjoint CPUs{}",
                                rtslice_spec::format_cpu_list(&b.cpus),
                                a.name,
                                rtslice_spec::format_cpu_list(&a.cpus),
                                if *pb { "it" } else { "that workload" },
                                if mech == Mechanism::Deadline { " or use --mechanism rt_group" } else { "" }
                            ),
                        ));
                        break 'outer;
                    }
                }
            }
        }
        if refuse.is_none() {
            // Explicit SCHED_DEADLINE rules outside reservations (a dedicated workload's deadline rules
            // take their part of the node's cap) meet the same admission whatever the mechanism:
            // sched_rt_runtime_us/period less the deadline servers' share of each CPU.
            if let Some(cap) = kernel_cap(kernel, Mechanism::Deadline) {
                for w in p.workloads.iter().filter(|w| !matches!(w.allocation, Allocation::Reservation { .. })) {
                    let parts = w.threads.iter().filter_map(|t| deadline_part(&t.sched));
                    if let Err(x) = admission::fits(parts, cap, w.cpus.len() as u32) {
                        refuse = Some((
                            w.name.clone(),
                            format!(
                                "its SCHED_DEADLINE rules need {} of a CPU, but the kernel admits {} on its {} CPU(s) ({} of each: \
                                 sched_rt_runtime_us/sched_rt_period_us{}); give the rules explicit runtimes or lower node.cap to {}",
                                pct(x.need),
                                pct(x.offered),
                                w.cpus.len(),
                                pct(cap),
                                if kernel.dl_server > 0.0 { format!(" less the deadline servers' {}", pct(kernel.dl_server)) } else { String::new() },
                                pct(cap)
                            ),
                        ));
                        break;
                    }
                }
            }
        }
        if refuse.is_none() && !kernel.no_partition_cpus.is_empty() {
            refuse = boot_isolated_refusal(&p, mech, &kernel.no_partition_cpus);
        }
        if refuse.is_none() {
            // Partitions must leave the system a CPU, whatever the mechanism: apply makes one for every
            // dedicated or shielded workload and every workload with SCHED_DEADLINE threads (explicit
            // deadline rules too, under RT groups). A CPU isolated at boot does not count as left
            // (cgroup v2): no partition may hold it, and when partitions took every other CPU the root
            // cgroup — the whole system — would run on isolated CPUs only, outside load balancing; and
            // 6.12 (Debian's 6.12.117-rt, kernel matrix: one `root` partition of CPUs 0-3 with
            // isolcpus=domain,4-7) oopses rebuilding the scheduling domains then (WARN in
            // build_sched_domains, NULL dereference in partition_sched_domains_locked, the writer hung).
            let left: Vec<u32> = p.node.cpus.iter().copied().filter(|c| !kernel.no_partition_cpus.contains(c)).collect();
            let mut taken: Vec<u32> = Vec::new();
            for w in &p.workloads {
                let partitioned = w.cpus != p.node.cpus && kernel_workload(w, mech).is_some_and(|k| k.partition);
                if partitioned {
                    taken.extend(w.cpus.iter().filter(|c| !kernel.no_partition_cpus.contains(c)));
                    taken.sort_unstable();
                    taken.dedup();
                    if !taken.is_empty() && left.iter().all(|c| taken.contains(c)) {
                        let isolated = !kernel.no_partition_cpus.is_empty();
                        refuse = Some((
                            w.name.clone(),
                            format!(
                                "with it, exclusive partitions (one per dedicated or shielded workload and per workload with \
                                 SCHED_DEADLINE threads) would take every {}CPU and leave none for the rest of the system{}; keep a \
                                 housekeeping CPU (node.housekeeping){}",
                                if isolated { "housekeeping " } else { "" },
                                if isolated {
                                    format!(
                                        " but the CPUs isolated at boot {} (isolcpus=domain: no load balancing there, and a 6.12 kernel \
                                         oopses rebuilding its scheduling domains so)",
                                        rtslice_spec::format_cpu_list(&kernel.no_partition_cpus)
                                    )
                                } else {
                                    String::new()
                                },
                                if mech == Mechanism::Deadline { " or use --mechanism rt_group" } else { "" }
                            ),
                        ));
                        break;
                    }
                }
            }
        }
        match refuse {
            None => break p,
            Some((name, reason)) => {
                let i = spec.workloads.iter().position(|w| w.name == name).expect("planned from this spec");
                refused.push(Rejection { name, reason, defrag: None });
                spec.workloads.remove(i);
            }
        }
    };
    let mut plan = plan;
    plan.rejected.extend(refused);
    if let Some(t) = kernel.enforcement_tick().filter(|_| mech != Mechanism::None) {
        for w in &plan.workloads {
            if let Allocation::Reservation { reservation, .. } = &w.allocation {
                // Under SCHED_DEADLINE a real-time rule may run at a period of its own.
                let shortest = match mech {
                    Mechanism::Deadline => w.threads.iter().filter_map(|t| t.sched.rt_period()).fold(reservation.period, Duration::min),
                    _ => reservation.period,
                };
                if shortest < t {
                    // Every mechanism charges a budget when a thread blocks, is preempted or at the
                    // tick, and carries an overrun into the next periods (SCHED_DEADLINE and HCBS's
                    // servers a negative runtime, RT groups the group's rt_time, which the period
                    // timer lowers by one runtime per period). Measured at 1 ms under HZ=250 with
                    // vBS stacks whose budget fits: RT groups and SCHED_DEADLINE held them alike
                    // (docs/results.md, "a period under the tick").
                    let (who, what) = match mech {
                        Mechanism::Deadline => ("SCHED_DEADLINE", "the thread"),
                        Mechanism::RtGroup => ("the RT group", "a thread of the group"),
                        _ => ("the group's budget", "a thread of the group"),
                    };
                    warnings.push(format!(
                        "`{}`: its period {} is shorter than the kernel's tick ({} at HZ={}, no HRTICK): {who} notices an \
                         overrun when {what} blocks, is preempted or at the tick, and repays it from the next periods, so the \
                         bandwidth holds over time and threads that block every period are held to it, but a thread running \
                         without blocking may overrun one period by up to a tick",
                        w.name,
                        rtslice_spec::units::format_duration(shortest),
                        rtslice_spec::units::format_duration(t),
                        kernel.hz.unwrap_or(0)
                    ));
                } else if reservation.period < t * 5 {
                    warnings.push(format!(
                        "`{}`: budgets are enforced at ticks ({} at HZ={}, no HRTICK): each period of {} may overrun its runtime by up to a tick",
                        w.name,
                        rtslice_spec::units::format_duration(t),
                        kernel.hz.unwrap_or(0),
                        rtslice_spec::units::format_duration(reservation.period)
                    ));
                }
            }
        }
    }
    plan.warnings.extend(warnings);
    let mut k = kernel_plan(&plan, mech, kernel);
    for kw in k.workloads.iter_mut() {
        // As apply: a workload on CPUs no partition may hold gets a plain cpuset.
        if plan.workloads.iter().any(|w| w.name == kw.name && w.cpus.iter().any(|c| kernel.no_partition_cpus.contains(c))) {
            kw.partition = false;
        }
    }
    plan.kernel = Some(k);
    plan
}

/// cgroup v2 with boot isolation: no partition may hold the CPUs isolated at boot (6.12: "partition
/// config conflicts with housekeeping setup"), so a workload that needs one gets a plain cpuset there
/// (as apply does). That works only if the workload lies wholly on isolated CPUs, and, with
/// SCHED_DEADLINE threads, spans all of them: the isolated CPUs share one root domain and the kernel
/// admits a deadline thread only if its affinity spans its root domain (EPERM otherwise), so neither
/// a part of them nor a rule pinning its threads to some of them can hold a deadline thread. The
/// refusals and reasons are apply's own (host `prepare`).
fn boot_isolated_refusal(p: &Plan, mech: Mechanism, isolated: &[u32]) -> Option<(String, String)> {
    let mut iso: Vec<u32> = isolated.to_vec();
    iso.sort_unstable();
    iso.dedup();
    let list = |c: &[u32]| format!("[{}]", rtslice_spec::format_cpu_list(c));
    for w in &p.workloads {
        let Some(k) = kernel_workload(w, mech) else { continue };
        if !k.partition || w.cpus == p.node.cpus || !w.cpus.iter().any(|c| iso.contains(c)) {
            continue;
        }
        if !w.cpus.iter().all(|c| iso.contains(c)) {
            return Some((
                w.name.clone(),
                format!(
                    "its CPUs {} mix CPUs isolated at boot {} (isolcpus=domain) with housekeeping CPUs, but it needs an exclusive \
                     partition (SCHED_DEADLINE, dedicated or shielded CPUs) and the kernel refuses a partition holding boot-isolated \
                     CPUs; give it only isolated CPUs (no partition needed there) or only housekeeping CPUs",
                    list(&w.cpus),
                    list(&iso)
                ),
            ));
        }
        for (t, kt) in w.threads.iter().zip(&k.threads) {
            if !matches!(kt.sched, ThreadSched::Deadline { .. }) {
                continue;
            }
            let mut affinity = match &t.cpus {
                crate::ThreadCpus::Cpus(c) => c.clone(),
                _ => w.cpus.clone(),
            };
            affinity.sort_unstable();
            affinity.dedup();
            if affinity != iso {
                return Some((
                    w.name.clone(),
                    format!(
                        "its rule /{}/ would be SCHED_DEADLINE on CPUs {} isolated at boot, but SCHED_DEADLINE on CPUs isolated at \
                         boot needs an affinity of all of them {}: they form one root domain (isolcpus=domain) and the kernel admits \
                         a deadline task only if its affinity spans its root domain; give the workload all of {} with no per-rule \
                         CPUs, use --mechanism none (FIFO/RR threads pinned as asked, no budget enforced), or boot without \
                         isolcpus=domain for these CPUs",
                        t.pattern,
                        list(&affinity),
                        list(&iso),
                        list(&iso)
                    ),
                ));
            }
        }
    }
    None
}

#[cfg(test)]
mod hcbs_tests {
    use super::*;

    fn b(runtime_us: u64, period_us: u64) -> GroupBudget {
        GroupBudget { runtime_us, period_us }
    }

    #[test]
    fn the_root_gets_the_least_budget_the_kernels_check_admits() {
        // 20 ms / 100 ms is 209715 in 2^-20 units (rounded down), and so is 200000 / 1000000.
        assert_eq!(hcbs_bw(b(20_000, 100_000)), 209_715);
        assert_eq!(hcbs_root_runtime_us(&[b(20_000, 100_000)], 1_000_000), 200_000);
        assert_eq!(hcbs_root_runtime_us(&[b(20_000, 100_000), b(20_000, 100_000)], 1_000_000), 400_000);
        assert_eq!(hcbs_root_runtime_us(&[], 1_000_000), 0);
        // Thirds: each rounded down by the kernel, the sum covered by the least runtime.
        let third = b(33_333, 100_000);
        let r = hcbs_root_runtime_us(&[third, third, third], 1_000_000);
        assert!(hcbs_bw(b(r, 1_000_000)) >= 3 * hcbs_bw(third) && hcbs_bw(b(r - 1, 1_000_000)) < 3 * hcbs_bw(third), "{r}");
        // A root that holds them already is left alone; one that does not is raised, other groups included.
        let root = HcbsRoot { runtime_us: 800_000, period_us: 1_000_000, others: vec![] };
        assert_eq!(root.raised_for(&[b(20_000, 100_000)]), None);
        let root = HcbsRoot { runtime_us: 250_000, period_us: 1_000_000, others: vec![b(100_000, 1_000_000)] };
        assert_eq!(root.raised_for(&[b(20_000, 100_000)]), Some(b(300_000, 1_000_000)));
        assert_eq!(HcbsRoot::boot_default().raised_for(&[b(20_000, 100_000)]), Some(b(200_000, 1_000_000)));
    }

    #[test]
    fn deadline_rules_take_their_part_of_the_reservation_before_the_group() {
        let r = Reservation::from_micros(20_000, 100_000);
        assert_eq!(hcbs_group_budget(r, 1, &[]), Some(b(20_000, 100_000)));
        // 1 ms every 20 ms is 5 ms every 100 ms: the group keeps 15 ms.
        assert_eq!(hcbs_group_budget(r, 1, &[(1_000_000, 20_000_000)]), Some(b(15_000, 100_000)));
        // On two CPUs the rules' 5 ms is 2.5 ms of each CPU's 20.
        assert_eq!(hcbs_group_budget(r, 2, &[(1_000_000, 20_000_000)]), Some(b(17_500, 100_000)));
        // Rules sharing the whole reservation leave the group nothing: it stays `max`.
        assert_eq!(hcbs_group_budget(r, 1, &[(11_000_000, 100_000_000), (9_000_000, 100_000_000)]), None);
        // A third of a µs is rounded against the group.
        assert_eq!(hcbs_group_budget(r, 3, &[(1_000_000, 100_000_000)]), Some(b(19_666, 100_000)));
    }
}
