//! Pure validation of a `Setup` for this host: which reservation mechanism enforces it (the one its
//! plan was made for), where its groups go (partitions, the cpu hierarchy), and every check of the
//! host's state that can refuse it before anything is touched (`HostError::Rejected`). The kernel
//! parameters themselves are the planner's (`from_plan`); nothing here computes or sums budgets.

use rtslice_plan::kernel::Reserved;
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
    // A planned setup's parameters are for its plan's mechanism.
    let requested = match (requested, planned_for(setup)) {
        (Some(asked), Some(planned)) if asked != planned => return Err(mismatch(planned, asked, "asked for")),
        (asked, planned) => asked.or(planned),
    };
    let reserved: Vec<Reserved> = setup
        .workloads
        .iter()
        .filter_map(|w| Some(Reserved { cpus: w.cpus.iter().collect(), reservation: w.reservation? }))
        .collect();
    choose_mechanism(facts, requested, &reserved)
}

/// The planner's choice (`rtslice_plan::kernel::choose_mechanism`) among this host's mechanisms, for
/// the reservations `reserved`.
pub(crate) fn choose_mechanism(facts: &HostFacts, requested: Option<Mechanism>, reserved: &[Reserved]) -> Result<Mechanism> {
    let mut kernel = facts.kernel_facts();
    if kernel.available.is_empty() {
        kernel.available = vec![Mechanism::None];
    }
    rtslice_plan::kernel::choose_mechanism(&kernel, requested, reserved).map_err(rejected)
}

/// The mechanism a setup's reservations were planned for (`None`: no reservation, or a setup built
/// by hand that states its parameters for whatever mechanism applies them).
fn planned_for(setup: &Setup) -> Option<Mechanism> {
    setup.mechanism.filter(|_| setup.workloads.iter().any(|w| w.reservation.is_some()))
}

fn mismatch(planned: Mechanism, other: Mechanism, how: &str) -> HostError {
    rejected(format!(
        "the plan's kernel parameters (thread budgets, group budgets) are for {planned}, but {how} {other}; plan again for \
         {other} (`rtslice plan --mechanism {other}`, or let the plan take this host's mechanism)"
    ))
}

/// Validates everything that can be checked without touching the host: that it can hold the setup's
/// kernel parameters, which the planner computed (`from_plan`). Errors are `Rejected`: nothing has
/// been changed.
pub fn prepare(setup: &Setup, facts: &HostFacts, mech: Mechanism) -> Result<(Vec<Prepared>, Vec<String>)> {
    if let Some(planned) = planned_for(setup).filter(|m| *m != mech) {
        return Err(mismatch(planned, mech, "this host or node enforces reservations with"));
    }
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

    // No bandwidth is summed here: the planner admitted the plan (`plan_for_kernel`, or a node's
    // planner against what it holds) in its own arithmetic, and the kernel admits each write again.
    // A setup that bypassed the planner and asks too much is refused by the kernel's admission and
    // rolled back.
    let mut out = Vec::new();
    for w in &setup.workloads {
        let ws = w.clone();
        // The thread policies and the group budget are the planner's (`from_plan`); what is checked
        // here is that the host can hold them.
        let has_deadline_rule = |ws: &WorkloadSetup| ws.threads.iter().any(|r| matches!(r.policy, Some(SchedAttr::Deadline { .. })));
        let rt_budget = ws.group_budget.map(|r| r.whole_micros());
        if ws.reservation.is_some() && mech == Mechanism::Deadline && !has_deadline_rule(&ws) {
            warnings.push(format!(
                "workload {}: a reservation under SCHED_DEADLINE applies to real-time thread rules, and it has none; \
                 add a rule (policy fifo/rr/deadline) naming its real-time threads",
                w.name
            ));
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
    // our rollback). One another cgroup reserves for a partition (cpuset.cpus.exclusive) leaves ours
    // invalid (6.12) or valid without it (7.2). Refused before anything is touched.
    if let (Backend::V2 { root }, false) = (&facts.backend, exclusive.is_empty()) {
        for (dir, state, cpus) in crate::cgroup::foreign_partitions(root) {
            let taken = cpus.intersection(&exclusive);
            if taken.is_empty() {
                continue;
            }
            return Err(rejected(if state == "root" || state == "isolated" {
                format!(
                    "CPUs [{taken}] belong to the partition {} (cpuset.cpus.partition = {state}); free them there or plan with other CPUs",
                    dir.display()
                )
            } else {
                format!(
                    "CPUs [{taken}] are reserved for a partition by {} (its cpuset.cpus.exclusive), which keeps them from every \
                     other partition: the workload's exclusive partition would be invalid or lack them; free them there \
                     (echo > {}/cpuset.cpus.exclusive) or plan with other CPUs",
                    dir.display(),
                    dir.display()
                )
            }));
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
            // As the planner gives it under RT groups and HCBS (no SCHED_DEADLINE rule).
            group_budget: res.map(|(r, p)| Reservation::from_micros(r, p)),
            threads: vec![ThreadRule { name: "^rt".into(), policy: Some(SchedAttr::Fifo { priority: 50 }), cpus: None, period_ns: None }],
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{facts, wl};
    use super::*;

    /// A reservation whose rule the planner made SCHED_DEADLINE (300 µs of each of its CPUs).
    fn dl(name: &str, cpus: &str) -> WorkloadSetup {
        let mut w = wl(name, cpus, Some((300, 1000)));
        w.group_budget = None;
        let runtime_ns = 300_000 * w.cpus.len() as u64;
        w.threads[0].policy = Some(SchedAttr::Deadline { runtime_ns, deadline_ns: 1_000_000, period_ns: 1_000_000, reclaim: false });
        w
    }

    #[test]
    fn overlapping_partitions_are_rejected() {
        let f = facts(Backend::V2 { root: "/cg".into() });
        let s = Setup { workloads: vec![wl("a", "1", Some((300, 1000))), wl("b", "1-2", Some((300, 1000)))], ..Default::default() };
        assert_eq!(resolve_mechanism(&s, &f, None).unwrap(), Mechanism::Hcbs);
        // SCHED_DEADLINE threads need an exclusive partition.
        let s = Setup { workloads: vec![dl("a", "1"), dl("b", "1-2")], ..Default::default() };
        let e = prepare(&s, &f, Mechanism::Deadline).unwrap_err().to_string();
        assert!(e.contains("overlap"), "{e}");
    }

    #[test]
    fn boot_isolated_cpus_get_a_plain_cpuset_and_deadline_there_spans_them_all() {
        let mut f = facts(Backend::V2 { root: "/cg".into() });
        f.boot_isolated = CpuList::parse("2-3").unwrap();
        // All of the isolated CPUs: no partition, the SCHED_DEADLINE rule runs on 2-3.
        let s = Setup { workloads: vec![dl("du", "2-3")], ..Default::default() };
        let (p, warnings) = prepare(&s, &f, Mechanism::Deadline).unwrap();
        assert!(!p[0].partition);
        assert!(warnings.iter().any(|w| w.contains("isolated at boot") && w.contains("plain cpuset")), "{warnings:?}");
        // A deadline rule pinned to one of them cannot be admitted (one root domain for both).
        let mut w = dl("du", "2-3");
        w.threads[0].cpus = Some(CpuList::parse("3").unwrap());
        let e = prepare(&Setup { workloads: vec![w], ..Default::default() }, &f, Mechanism::Deadline).unwrap_err().to_string();
        assert!(e.contains("needs an affinity of all of them [2-3]") && e.contains("not [3]"), "{e}");
        // Isolated and housekeeping CPUs in one partition: refused before anything is touched.
        let e = prepare(&Setup { workloads: vec![dl("du", "1-2")], ..Default::default() }, &f, Mechanism::Deadline)
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
    fn a_setup_planned_for_one_mechanism_is_refused_under_another() {
        let f = facts(Backend::V2 { root: "/cg".into() });
        let s = Setup { workloads: vec![wl("du", "2-3", Some((300, 1000)))], mechanism: Some(Mechanism::Hcbs), ..Default::default() };
        let e = prepare(&s, &f, Mechanism::Deadline).unwrap_err().to_string();
        assert!(e.contains("are for hcbs") && e.contains("enforces reservations with deadline"), "{e}");
        let e = resolve_mechanism(&s, &f, Some(Mechanism::Deadline)).unwrap_err().to_string();
        assert!(e.contains("asked for deadline"), "{e}");
        assert_eq!(resolve_mechanism(&s, &f, None).unwrap(), Mechanism::Hcbs);
        // Without a reservation the plan's mechanism binds nothing.
        let s = Setup { workloads: vec![wl("be", "2-3", None)], mechanism: Some(Mechanism::Hcbs), ..Default::default() };
        assert!(prepare(&s, &f, Mechanism::Deadline).is_ok());
    }

    #[test]
    fn the_host_writes_the_planned_parameters_and_computes_none() {
        // A hand-built setup under SCHED_DEADLINE: its FIFO rule stays FIFO (no budget split here),
        // and the group gets only the budget the setup names.
        let f = facts(Backend::V2 { root: "/cg".into() });
        let mut w = wl("du", "2-3", Some((300, 1000)));
        w.group_budget = None;
        let (p, warnings) = prepare(&Setup { workloads: vec![w.clone()], ..Default::default() }, &f, Mechanism::Deadline).unwrap();
        assert_eq!(p[0].ws.threads[0].policy, Some(SchedAttr::Fifo { priority: 50 }));
        assert_eq!(p[0].rt_budget, None);
        assert!(warnings.iter().any(|w| w.contains("applies to real-time thread rules")), "{warnings:?}");
        w.group_budget = Some(Reservation::from_micros(250, 1000));
        let (p, _) = prepare(&Setup { workloads: vec![w], ..Default::default() }, &f, Mechanism::Hcbs).unwrap();
        assert_eq!(p[0].rt_budget, Some(Reservation::from_micros(250, 1000)));
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
                // The root group's budget as the node raises it, one workload at a time
                // (`Node::hcbs_hold`): where the plan says, or left as it is.
                let before = facts.hcbs_root.clone().unwrap_or_else(rtslice_plan::HcbsRoot::boot_default);
                let mut root = before.clone();
                for b in prepared.iter().filter_map(|p| p.rt_budget.map(rtslice_plan::kernel::GroupBudget::from)) {
                    if let Some(r) = root.raised_for(&[b]) {
                        (root.runtime_us, root.period_us) = (r.runtime_us, r.period_us);
                    }
                    root.others.push(b);
                }
                let raised = (root.runtime_us, root.period_us) != (before.runtime_us, before.period_us);
                prop_assert_eq!(raised.then_some((root.runtime_us, root.period_us)), k.root_budget.map(|b| (b.runtime_us, b.period_us)), "{}", text);
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
