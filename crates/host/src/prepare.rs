//! Pure validation and translation of a `Setup` for this host: which reservation mechanism enforces
//! it, and every check that can refuse it before anything is touched (`HostError::Rejected`).

use rtslice_plan::kernel::admission;
use rtslice_plan::Reservation;

use crate::cgroup::{Backend, GroupPaths};
use crate::cpus::CpuList;
use crate::error::{HostError, Result};
use crate::facts::HostFacts;
use crate::record::Mechanism;
use crate::sched::SchedAttr;
use crate::setup::{Launch, Setup, WorkloadSetup};

/// A workload after validation and mechanism translation.
#[derive(Clone, Debug, PartialEq)]
pub struct Prepared {
    pub ws: WorkloadSetup,
    pub group: GroupPaths,
    /// v1: a group in the cpu hierarchy (RT budget or CFS controls); v2: always one group.
    pub cpu_group: bool,
    pub partition: bool,
    /// RT budget written to the group (HCBS or RT groups), in whole microseconds.
    pub rt_budget: Option<Reservation>,
}

pub(crate) fn rejected(msg: impl Into<String>) -> HostError {
    HostError::Rejected(msg.into())
}

/// Picks the mechanism: the requested one if the host has it, else the best that fits — the rule
/// `rtslice plan` uses too (`rtslice_plan::kernel::choose_mechanism`).
pub fn resolve_mechanism(setup: &Setup, facts: &HostFacts, requested: Option<Mechanism>) -> Result<Mechanism> {
    let reserved: Vec<Vec<u32>> =
        setup.workloads.iter().filter(|w| w.reservation.is_some()).map(|w| w.cpus.iter().collect()).collect();
    let available = if facts.available.is_empty() { vec![Mechanism::None] } else { facts.available.clone() };
    rtslice_plan::kernel::choose_mechanism(&available, requested, &reserved).map_err(rejected)
}

/// Validates everything that can be checked without touching the host, and translates rules for the
/// mechanism. Errors are `Rejected`: nothing has been changed.
pub fn prepare(setup: &Setup, facts: &HostFacts, mech: Mechanism) -> Result<(Vec<Prepared>, Vec<String>)> {
    let mut warnings = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    let v1 = facts.backend.is_v1();
    for w in &setup.workloads {
        if !crate::setup::valid_name(&w.name) || w.name == "system" {
            return Err(rejected(format!(
                "workload name {:?} is not usable as a cgroup name (letters, digits, _ . -; not \"system\")",
                w.name
            )));
        }
        if !names.insert(&w.name) {
            return Err(rejected(format!("workload {} appears twice", w.name)));
        }
        if w.cpus.is_empty() || !w.cpus.is_subset(&facts.online) {
            return Err(rejected(format!(
                "workload {}: CPUs [{}] are not a non-empty subset of the online CPUs [{}]",
                w.name, w.cpus, facts.online
            )));
        }
        for r in &w.threads {
            crate::setup::pattern(&r.name).map_err(|e| rejected(format!("workload {}: {e}", w.name)))?;
            if let Some(p) = &r.policy {
                p.validate().map_err(|e| rejected(format!("workload {} rule {:?}: {e}", w.name, r.name)))?;
            }
            if let Some(c) = &r.cpus {
                if !c.is_subset(&w.cpus) {
                    return Err(rejected(format!(
                        "workload {} rule {:?}: CPUs [{c}] lie outside the workload's [{}]",
                        w.name, r.name, w.cpus
                    )));
                }
            }
        }
        if let Some(r) = &w.reservation {
            if r.runtime_us() == 0 || r.runtime > r.period {
                return Err(rejected(format!("workload {}: reservation needs 0 < runtime ≤ period", w.name)));
            }
        }
    }
    for rule in &setup.irqs {
        crate::setup::pattern(&rule.action).map_err(rejected)?;
        if rule.cpus.is_empty() || !rule.cpus.is_subset(&facts.online) {
            return Err(rejected(format!("IRQ rule {:?}: CPUs [{}] not online", rule.action, rule.cpus)));
        }
    }
    for rule in &setup.nets {
        crate::setup::pattern(&rule.iface).map_err(rejected)?;
    }

    // Admission, in the planner's arithmetic (rtslice_plan::kernel::admission): per CPU, reserved
    // bandwidth must fit the kernel's RT cap.
    let part = |r: Reservation| (r.runtime, r.period);
    for cpu in facts.online.iter() {
        let on_cpu = setup.workloads.iter().filter(|w| w.cpus.contains(cpu)).filter_map(|w| w.reservation.map(part));
        if let Err(x) = admission::fits(on_cpu, facts.rt_ratio, 1) {
            return Err(rejected(format!(
                "CPU {cpu} would carry {:.1}% of reserved real-time bandwidth, above the kernel's cap {:.1}% \
                 (sched_rt_runtime_us/sched_rt_period_us); shrink the reservations or spread them",
                x.need * 100.0,
                facts.rt_ratio * 100.0
            )));
        }
    }
    if let (Mechanism::Hcbs, Some(cap)) = (mech, facts.hcbs_cap()) {
        // One root budget holds every group's and is reserved on every CPU, whatever the groups'
        // cpusets (rtslice_plan::HcbsRoot): the budgets sum over the whole host.
        let ours = setup.workloads.iter().filter_map(|w| w.reservation.map(|r| part(r.whole_micros())));
        let others: Vec<admission::Part> = facts.hcbs_root.iter().flat_map(|r| &r.others).map(|b| b.part()).collect();
        if let Err(x) = admission::fits(others.iter().copied().chain(ours), cap, 1) {
            let (total, others) = (x.need, admission::sum(others));
            return Err(rejected(format!(
                "HCBS reserves each group's budget on every CPU, whatever its cpuset (the root group's budget holds them all, \
                 admitted as deadline bandwidth on each CPU): the reservations sum to {:.1}%{}, above the {:.1}% the kernel \
                 admits (sched_rt_runtime_us/sched_rt_period_us {:.1}% less the fair servers' {:.1}%); fewer or smaller \
                 reservations, or --mechanism deadline",
                total * 100.0,
                if others > 0.0 { format!(" with the {:.1}% other groups hold", others * 100.0) } else { String::new() },
                cap * 100.0,
                facts.rt_ratio * 100.0,
                facts.dl_server * 100.0
            )));
        }
    }
    if mech == Mechanism::RtGroup {
        // Whole microseconds: what the groups' cpu.rt_runtime_us get.
        let all = setup.workloads.iter().filter_map(|w| w.reservation.map(|r| part(r.whole_micros())));
        if let Err(x) = admission::fits(all, facts.rt_ratio, 1) {
            return Err(rejected(format!(
                "RT group scheduling (cgroup v1) accounts every group's runtime/period against one per-CPU ratio: \
                 the reservations sum to {:.1}%, above the cap {:.1}%; use --mechanism deadline or fewer reservations",
                x.need * 100.0,
                facts.rt_ratio * 100.0
            )));
        }
    }

    let mut out = Vec::new();
    for w in &setup.workloads {
        let mut ws = w.clone();
        if mech == Mechanism::None && ws.reservation.is_some() {
            // A reservation's CFS quota is its pool's part of the budget (from_plan): under
            // mechanism none nothing of the budget is enforced, as `rtslice plan` says.
            ws.cfs = None;
        }
        let has_deadline_rule = |ws: &WorkloadSetup| ws.threads.iter().any(|r| matches!(r.policy, Some(SchedAttr::Deadline { .. })));
        let rt_rules = ws.threads.iter().filter(|r| matches!(r.policy, Some(SchedAttr::Fifo { .. } | SchedAttr::Rr { .. }))).count();
        let mut rt_budget = None;
        if let Some(res) = ws.reservation {
            match mech {
                Mechanism::Deadline => {
                    // The workload's budget (runtime on each of its CPUs) is split over its RT rules, as
                    // `rtslice plan` prints it (the same function).
                    let res = res.whole_micros();
                    let period_ns = res.period.as_nanos() as u64;
                    let is_rt = |r: &crate::setup::ThreadRule| matches!(r.policy, Some(SchedAttr::Fifo { .. } | SchedAttr::Rr { .. }));
                    let shares: Vec<(Option<f64>, Option<std::time::Duration>)> = ws
                        .threads
                        .iter()
                        .filter(|r| is_rt(r))
                        .map(|r| (r.budget_share, r.period_ns.map(std::time::Duration::from_nanos)))
                        .collect();
                    let mut parts = rtslice_plan::kernel::deadline_budgets(res, ws.cpus.len() as u32, &shares).into_iter();
                    for r in ws.threads.iter_mut() {
                        if is_rt(r) {
                            let b = parts.next().unwrap_or(rtslice_plan::kernel::DeadlineBudget { runtime_ns: 0, period_ns, capped: false });
                            let (runtime_ns, period_ns) = (b.runtime_ns, b.period_ns);
                            if b.capped {
                                warnings.push(format!(
                                    "workload {} rule {:?}: its share exceeds one CPU per period; capped at the period ({} µs)",
                                    w.name,
                                    r.name,
                                    runtime_ns / 1000
                                ));
                            }
                            r.policy = Some(SchedAttr::Deadline { runtime_ns, deadline_ns: period_ns, period_ns, reclaim: ws.reclaim });
                        }
                    }
                    if rt_rules == 0 && !has_deadline_rule(&ws) {
                        warnings.push(format!(
                            "workload {}: a reservation under SCHED_DEADLINE applies to real-time thread rules, and it has none; \
                             add a rule (policy fifo/rr/deadline) naming its real-time threads",
                            w.name
                        ));
                    }
                    if v1 && facts.available.contains(&Mechanism::RtGroup) && ws.cfs.is_some() {
                        // The CFS pool's quota puts the workload in a cpu cgroup of its own, where RT
                        // group scheduling refuses FIFO/RR threads without RT runtime (a stack attached
                        // by pid, its own priorities before the rules, a FIFO priority given back on
                        // reset): the group gets the real-time part as RT runtime, as `rtslice plan`
                        // prints it (rtslice_plan::kernel::kernel_workload_on).
                        rt_budget = Some(res);
                    }
                    let dl = ws.threads.iter().filter_map(|r| match r.policy {
                        Some(SchedAttr::Deadline { runtime_ns, period_ns, .. }) => {
                            Some((std::time::Duration::from_nanos(runtime_ns), std::time::Duration::from_nanos(period_ns)))
                        }
                        _ => None,
                    });
                    // The deadline servers' share is accounted in the same admission as our threads.
                    let cap = (facts.rt_ratio - facts.dl_server).max(0.0);
                    if let Err(x) = admission::fits(dl, cap, ws.cpus.len() as u32) {
                        return Err(rejected(format!(
                            "workload {}: its SCHED_DEADLINE threads need {:.1}% of a CPU, its partition offers {:.1}% (the kernel's cap \
                             {:.1}% less the deadline servers' {:.1}%, on {} CPU(s))",
                            w.name,
                            x.need * 100.0,
                            x.offered * 100.0,
                            facts.rt_ratio * 100.0,
                            facts.dl_server * 100.0,
                            ws.cpus.len()
                        )));
                    }
                }
                Mechanism::RtGroup => rt_budget = Some(res.whole_micros()),
                Mechanism::Hcbs => {
                    // The group holds what the explicit SCHED_DEADLINE rules leave of the reservation
                    // (as `rtslice plan` prints it: the same function).
                    let dl: Vec<(u64, u64)> = ws
                        .threads
                        .iter()
                        .filter_map(|r| match r.policy {
                            Some(SchedAttr::Deadline { runtime_ns, period_ns, .. }) => Some((runtime_ns, period_ns)),
                            _ => None,
                        })
                        .collect();
                    rt_budget = rtslice_plan::kernel::hcbs_group_budget(res, ws.cpus.len() as u32, &dl)
                        .map(|b| Reservation::from_micros(b.runtime_us, b.period_us));
                }
                Mechanism::None => {}
            }
        }
        if ws.reclaim && ws.reservation.is_some() {
            // GRUB for every deadline thread of the reservation (as `rtslice plan` prints it).
            for r in ws.threads.iter_mut() {
                if let Some(SchedAttr::Deadline { reclaim, .. }) = r.policy.as_mut() {
                    *reclaim = true;
                }
            }
        }
        let spans_all = ws.cpus == facts.online;
        let partition = !spans_all && (ws.partition || ws.shield || has_deadline_rule(&ws));
        if mech == Mechanism::Hcbs && v1 {
            return Err(rejected("HCBS needs the cgroup v2 cpu.rt.max interface"));
        }
        let has_rt_rules = ws.threads.iter().any(|r| matches!(r.policy, Some(SchedAttr::Fifo { .. } | SchedAttr::Rr { .. })));
        let cfs = ws.cfs.is_some_and(|c| c.quota_us.is_some() || c.weight.is_some() || c.idle);
        let mut cpu_group = !v1 || rt_budget.is_some() || matches!(ws.launch, Launch::Oci(_));
        if v1 && cfs && rt_budget.is_none() {
            if has_rt_rules {
                warnings.push(format!(
                    "workload {}: CFS controls skipped — on cgroup v1 with RT group scheduling its FIFO/RR threads need \
                     the root cpu group (or a reservation)",
                    w.name
                ));
            } else {
                cpu_group = true;
            }
        }
        if v1 && cpu_group && rt_budget.is_none() && has_rt_rules {
            warnings.push(format!(
                "workload {}: its FIFO/RR threads sit in a cpu cgroup without RT budget (OCI launch); the kernel will refuse \
                 their policy unless the workload has a reservation",
                w.name
            ));
        }
        out.push(Prepared { group: facts.backend.group(&ws.name), ws, cpu_group, partition, rt_budget });
    }
    // Exclusive partitions cannot overlap anything else.
    for (i, a) in out.iter().enumerate() {
        for b in out.iter().skip(i + 1) {
            if (a.partition || b.partition) && !a.ws.cpus.intersection(&b.ws.cpus).is_empty() {
                return Err(rejected(format!(
                    "workloads {} [{}] and {} [{}] overlap, but {} needs an exclusive partition (SCHED_DEADLINE, dedicated or \
                     shielded CPUs); give them disjoint CPUs{}",
                    a.ws.name,
                    a.ws.cpus,
                    b.ws.name,
                    b.ws.cpus,
                    if a.partition { &a.ws.name } else { &b.ws.name },
                    if mech == Mechanism::Deadline { " or use --mechanism rt_group" } else { "" }
                )));
            }
        }
    }
    let exclusive: CpuList = out.iter().filter(|p| p.partition).fold(CpuList::new(), |acc, p| acc.union(&p.ws.cpus));
    if !exclusive.is_empty() && facts.online.difference(&exclusive).is_empty() {
        return Err(rejected(format!(
            "exclusive partitions would take every online CPU [{}]; leave at least one CPU for the rest of the system",
            facts.online
        )));
    }
    if let Backend::V2 { .. } = &facts.backend {
        for p in out.iter_mut().filter(|p| p.partition && !p.ws.cpus.intersection(&facts.boot_isolated).is_empty()) {
            boot_isolated_without_partition(p, &facts.boot_isolated, &mut warnings)?;
        }
    }
    let exclusive: CpuList = out.iter().filter(|p| p.partition).fold(CpuList::new(), |acc, p| acc.union(&p.ws.cpus));
    if let Backend::V2 { root } = &facts.backend {
        // Partitions next to a workload on boot-isolated CPUs are remote partitions (ops.rs).
        let all: CpuList = out.iter().fold(CpuList::new(), |acc, p| acc.union(&p.ws.cpus));
        if !exclusive.is_empty() && !all.intersection(&facts.boot_isolated).is_empty() && !root.join("cpuset.cpus.isolated").exists() {
            return Err(rejected(format!(
                "partitions [{exclusive}] next to workloads on CPUs isolated at boot [{}] need remote partitions \
                 (cpuset.cpus.exclusive, Linux 6.7+), which this kernel lacks; plan them on separate hosts or boot without \
                 isolcpus=domain",
                facts.boot_isolated
            )));
        }
    }
    // v2: a CPU another cgroup holds as a valid partition cannot join ours; the kernel would take the
    // write and leave both partitions invalid (6.12: the other one stays "root invalid" even after
    // our rollback), so refuse before touching anything.
    if let (Backend::V2 { root }, false) = (&facts.backend, exclusive.is_empty()) {
        for (dir, state, cpus) in crate::cgroup::foreign_partitions(root) {
            let taken = cpus.intersection(&exclusive);
            if !taken.is_empty() {
                return Err(rejected(format!(
                    "CPUs [{taken}] belong to the partition {} (cpuset.cpus.partition = {state}); free them there or plan with other CPUs",
                    dir.display()
                )));
            }
        }
    }
    Ok((out, warnings))
}

/// cgroup v2 with boot isolation (`isolcpus=domain`): 6.12 refuses any partition, `root` or
/// `isolated`, holding CPUs isolated at boot ("partition config conflicts with housekeeping setup";
/// found by the kernels matrix, guest rt-8cpu-iso). Those CPUs need none: they are already out of
/// load balancing and no task runs there unless placed, so a plain cpuset dedicates them. What a
/// partition gave beyond that, a root domain of the workload's own for SCHED_DEADLINE, they cannot
/// have: the boot-isolated CPUs share one root domain (def_root_domain), and the kernel admits a
/// deadline task only if its affinity spans its whole root domain (else EPERM).
fn boot_isolated_without_partition(p: &mut Prepared, isolated: &CpuList, warnings: &mut Vec<String>) -> Result<()> {
    let name = &p.ws.name;
    if !p.ws.cpus.is_subset(isolated) {
        return Err(rejected(format!(
            "workload {name}: CPUs [{}] mix CPUs isolated at boot [{isolated}] (isolcpus=domain) with housekeeping CPUs, but it \
             needs an exclusive partition (SCHED_DEADLINE, dedicated or shielded CPUs) and the kernel refuses a partition \
             holding boot-isolated CPUs; give it only isolated CPUs (no partition needed there) or only housekeeping CPUs",
            p.ws.cpus
        )));
    }
    for r in &p.ws.threads {
        if !matches!(r.policy, Some(SchedAttr::Deadline { .. })) {
            continue;
        }
        let affinity = r.cpus.as_ref().unwrap_or(&p.ws.cpus);
        if affinity != isolated {
            return Err(rejected(format!(
                "workload {name} rule {:?}: SCHED_DEADLINE on CPUs isolated at boot needs an affinity of all of them [{isolated}], \
                 not [{affinity}]: they form one root domain (isolcpus=domain) and the kernel admits a deadline task only if its \
                 affinity spans its root domain; give the workload all of [{isolated}] with no per-rule CPUs, use \
                 --mechanism rt_group or none (FIFO/RR stay), or boot without isolcpus=domain for these CPUs",
                r.name
            )));
        }
    }
    p.partition = false;
    warnings.push(format!(
        "workload {name}: CPUs [{}] are isolated at boot (isolcpus=domain), already outside load balancing: a plain cpuset \
         holds it there, without a partition (the kernel refuses partitions holding boot-isolated CPUs)",
        p.ws.cpus
    ));
    Ok(())
}

#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;
    use crate::setup::ThreadRule;

    pub(crate) fn facts(backend: Backend) -> HostFacts {
        HostFacts {
            online: CpuList::parse("0-3").unwrap(),
            mems: "0".into(),
            layout: crate::cgroup::CgroupLayout { mode: crate::cgroup::CgroupMode::V2, v1: Default::default(), v2: None, v2_controllers: vec![] },
            backend,
            available: vec![Mechanism::Hcbs, Mechanism::Deadline],
            rt_ratio: 0.95,
            rt_unlimited: false,
            hcbs_root: None,
            dl_server: 0.05,
            boot_isolated: CpuList::new(),
        }
    }

    pub(crate) fn wl(name: &str, cpus: &str, res: Option<(u64, u64)>) -> WorkloadSetup {
        WorkloadSetup {
            name: name.into(),
            cpus: CpuList::parse(cpus).unwrap(),
            reservation: res.map(|(r, p)| Reservation::from_micros(r, p)),
            threads: vec![ThreadRule { name: "^rt".into(), policy: Some(SchedAttr::Fifo { priority: 50 }), cpus: None, budget_share: None, period_ns: None }],
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{facts, wl};
    use super::*;
    use crate::setup::ThreadRule;

    #[test]
    fn over_budget_and_overlap_are_rejected() {
        let f = facts(Backend::V2 { root: "/cg".into() });
        let s = Setup { workloads: vec![wl("a", "1", Some((600, 1000))), wl("b", "1", Some((400, 1000)))], ..Default::default() };
        let e = prepare(&s, &f, Mechanism::Hcbs).unwrap_err().to_string();
        assert!(e.contains("CPU 1 would carry 100.0%"), "{e}");
        let s = Setup { workloads: vec![wl("a", "1", Some((300, 1000))), wl("b", "1-2", Some((300, 1000)))], ..Default::default() };
        assert_eq!(resolve_mechanism(&s, &f, None).unwrap(), Mechanism::Hcbs);
        let e = prepare(&s, &f, Mechanism::Deadline).unwrap_err().to_string();
        assert!(e.contains("overlap"), "{e}");
    }

    #[test]
    fn boot_isolated_cpus_get_a_plain_cpuset_and_deadline_there_spans_them_all() {
        let mut f = facts(Backend::V2 { root: "/cg".into() });
        f.boot_isolated = CpuList::parse("2-3").unwrap();
        // All of the isolated CPUs: no partition, the FIFO rule becomes SCHED_DEADLINE on 2-3.
        let s = Setup { workloads: vec![wl("du", "2-3", Some((300, 1000)))], ..Default::default() };
        let (p, warnings) = prepare(&s, &f, Mechanism::Deadline).unwrap();
        assert!(!p[0].partition);
        assert!(matches!(p[0].ws.threads[0].policy, Some(SchedAttr::Deadline { .. })));
        assert!(warnings.iter().any(|w| w.contains("isolated at boot") && w.contains("plain cpuset")), "{warnings:?}");
        // A deadline rule pinned to one of them cannot be admitted (one root domain for both).
        let mut w = wl("du", "2-3", Some((300, 1000)));
        w.threads[0].cpus = Some(CpuList::parse("3").unwrap());
        let e = prepare(&Setup { workloads: vec![w], ..Default::default() }, &f, Mechanism::Deadline).unwrap_err().to_string();
        assert!(e.contains("needs an affinity of all of them [2-3]") && e.contains("not [3]"), "{e}");
        // Isolated and housekeeping CPUs in one partition: refused before anything is touched.
        let e = prepare(&Setup { workloads: vec![wl("du", "1-2", Some((300, 1000)))], ..Default::default() }, &f, Mechanism::Deadline)
            .unwrap_err()
            .to_string();
        assert!(e.contains("mix CPUs isolated at boot [2-3]"), "{e}");
        // A dedicated workload without deadline rules: plain cpuset too; on cgroup v1 nothing changes.
        let mut w = wl("du", "2-3", None);
        w.partition = true;
        let s = Setup { workloads: vec![w], ..Default::default() };
        assert!(!prepare(&s, &f, Mechanism::None).unwrap().0[0].partition);
        let mut v1 = facts(Backend::V1 { cpuset: "/cs".into(), cpu: "/cpu".into() });
        v1.boot_isolated = CpuList::parse("2-3").unwrap();
        assert!(prepare(&s, &v1, Mechanism::None).unwrap().0[0].partition);
    }

    #[test]
    fn deadline_splits_the_budget_over_rt_rules() {
        let f = facts(Backend::V2 { root: "/cg".into() });
        let mut w = wl("du", "2-3", Some((300, 1000)));
        w.threads.push(ThreadRule { name: "^l1".into(), policy: Some(SchedAttr::Rr { priority: 9 }), cpus: None, budget_share: Some(0.25), period_ns: None });
        let s = Setup { workloads: vec![w], ..Default::default() };
        let (p, _) = prepare(&s, &f, Mechanism::Deadline).unwrap();
        assert!(p[0].partition);
        // total = 300 µs × 2 CPUs = 600 µs; rule 1 gets 1/2 (default), rule 2 a quarter.
        assert_eq!(p[0].ws.threads[0].policy, Some(SchedAttr::Deadline { runtime_ns: 300_000, deadline_ns: 1_000_000, period_ns: 1_000_000, reclaim: false }));
        assert_eq!(p[0].ws.threads[1].policy, Some(SchedAttr::Deadline { runtime_ns: 150_000, deadline_ns: 1_000_000, period_ns: 1_000_000, reclaim: false }));
    }
}

/// plan == apply, the pure part: whatever `rtslice plan` admits for a host (its kernel facts, the
/// mechanism apply would choose or one asked for) passes apply's own validation on that host, and the
/// kernel parameters the plan prints are exactly those apply computes.
#[cfg(test)]
mod plan_agrees_with_apply {
    use super::*;
    use crate::setup::ThreadRule;
    use proptest::prelude::*;
    use rtslice_plan::{KernelFacts, NodeFacts, ThreadSched};

    /// Workloads as (runtime ms, period ms, count, FIFO rules, an explicit deadline rule, the first
    /// FIFO rule at a quarter of the period under SCHED_DEADLINE).
    fn spec_text(cap: u32, housekeeping: bool, ws: &[(u32, u32, u32, u32, bool, bool)]) -> String {
        // Every third workload reclaims (GRUB).
        let mut s = format!("apiVersion: rtslice/v1\nnode:\n  cap: {cap}%\n");
        if housekeeping {
            s.push_str("  housekeeping: 0\n");
        }
        s.push_str("workloads:\n");
        for (i, &(runtime_ms, period_ms, count, rules, explicit_dl, fast)) in ws.iter().enumerate() {
            s.push_str(&format!(
                "  - name: w{i}\n    demand: {{ reservation: {{ runtime: {runtime_ms}ms, period: {period_ms}ms, count: {count}, reclaim: {} }} }}\n",
                i % 3 == 0
            ));
            if rules > 0 || explicit_dl {
                s.push_str("    threads:\n");
            }
            for r in 0..rules {
                let own = if fast && r == 0 { format!(", period: {}us", period_ms * 250) } else { String::new() };
                s.push_str(&format!("      - {{ match: \"^t{r}\", policy: fifo, priority: {}{own} }}\n", 10 + r));
            }
            if explicit_dl {
                s.push_str("      - { match: \"^dl\", policy: deadline, runtime: 1ms, period: 20ms }\n");
            }
            // Every other workload with real-time rules gives 30 % of its budget to a CFS pool.
            if rules > 0 && i % 2 == 1 {
                s.push_str("      - { match: \"^pool\", share: 30% }\n");
            }
        }
        s
    }

    fn host(available: Vec<Mechanism>) -> HostFacts {
        let mut f = fixtures::facts(Backend::V1 { cpuset: "/cg/cpuset".into(), cpu: "/cg/cpu".into() });
        f.available = available;
        f
    }

    fn sched_of(s: &ThreadSched, flags: &[String]) -> SchedAttr {
        crate::from_plan::sched_attr_of(s, flags.iter().any(|f| f == "reclaim"))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
        #[test]
        fn what_plan_admits_apply_accepts_with_the_same_parameters(
            cap in prop::sample::select(vec![50u32, 90, 95, 100]),
            housekeeping in any::<bool>(),
            ws in prop::collection::vec((1u32..=95, prop::sample::select(vec![1u32, 5, 10, 20, 100]), 1u32..=2, 0u32..=3, any::<bool>(), any::<bool>()), 1..=4),
            requested in prop::sample::select(vec![None, Some(Mechanism::Deadline), Some(Mechanism::RtGroup), Some(Mechanism::Hcbs)]),
        ) {
            let ws: Vec<_> = ws.into_iter().map(|(r, p, c, n, d, f)| (r.min(p * 95 / 100).max(1).min(p), p, c, n, d, f)).collect();
            let text = spec_text(cap, housekeeping, &ws);
            let spec = rtslice_spec::parse(&text, "gen.yaml").map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
            // HCBS lives on cgroup v2 (its root group's budget as a freshly booted kernel has it).
            let facts = if requested == Some(Mechanism::Hcbs) {
                fixtures::facts(Backend::V2 { root: "/cg".into() })
            } else {
                host(vec![Mechanism::Deadline, Mechanism::RtGroup])
            };
            let kernel = KernelFacts {
                available: facts.available.clone(),
                rt_cap: Some(facts.rt_ratio),
                dl_server: facts.dl_server,
                hz: Some(250),
                hrtick: false,
                no_partition_cpus: Vec::new(),
                partition_parent_holds_all: matches!(facts.backend, Backend::V2 { .. }),
                hcbs_root: facts.hcbs_root.clone(),
            };
            let mut plan = rtslice_plan::plan_for_kernel(&spec, &NodeFacts::with_cpus(4), &kernel, requested);
            let k = plan.kernel.clone().expect("plan_for_kernel carries the kernel plan");
            plan.rejected.clear();
            let setup = crate::from_plan::setup_from_plan(&plan, Default::default()).unwrap();
            // `apply` follows the mechanism a plan for this kernel names.
            let mech = resolve_mechanism(&setup, &facts, requested.or(Some(k.mechanism))).map_err(|e| TestCaseError::fail(e.to_string()))?;
            if plan.workloads.is_empty() {
                return Ok(());
            }
            prop_assert_eq!(mech, k.mechanism, "{}", text);
            let (prepared, _) = prepare(&setup, &facts, mech).map_err(|e| TestCaseError::fail(format!("apply refuses what plan admitted: {e}\n{text}")))?;
            if mech == Mechanism::Hcbs {
                // The root group's budget: written as the plan says, or left as it is.
                let root = crate::ops::hcbs_root_writes(&prepared, &facts);
                let planned: Vec<(std::path::PathBuf, String)> =
                    k.root_budget.iter().map(|b| ("/cg/cpu.rt.max".into(), format!("{} {}", b.runtime_us, b.period_us))).collect();
                prop_assert_eq!(root, planned, "{}", text);
            }
            for (p, kw) in prepared.iter().zip(&k.workloads) {
                prop_assert_eq!(&p.ws.name, &kw.name);
                prop_assert_eq!(p.partition, kw.partition, "{} partition\n{}", kw.name, text);
                prop_assert_eq!(p.rt_budget.map(|r| (r.runtime_us(), r.period_us())), kw.group_budget.map(|b| (b.runtime_us, b.period_us)));
                prop_assert_eq!(
                    p.ws.cfs.map(|c| (c.quota_us, c.period_us)),
                    kw.cfs_quota.map(|b| (Some(b.runtime_us), Some(b.period_us))),
                    "{} CFS quota\n{}",
                    kw.name,
                    text
                );
                let rules: Vec<&ThreadRule> = p.ws.threads.iter().collect();
                prop_assert_eq!(rules.len(), kw.threads.len());
                for (r, t) in rules.iter().zip(&kw.threads) {
                    prop_assert_eq!(r.policy, Some(sched_of(&t.sched, &t.flags)), "rule {}\n{}", t.pattern, text);
                }
            }
        }
    }
}
