//! Pure validation and translation of a `Setup` for this host: which reservation mechanism enforces
//! it, and every check that can refuse it before anything is touched (`HostError::Rejected`).

use rtslice_plan::Reservation;

use crate::cgroup::{Backend, CgroupLayout, GroupPaths};
use crate::cpus::CpuList;
use crate::error::{HostError, Result};
use crate::fsio;
use crate::record::Mechanism;
use crate::sched::SchedAttr;
use crate::setup::{Launch, Setup, WorkloadSetup};

/// What apply needs to know about the host.
#[derive(Clone, Debug)]
pub struct HostFacts {
    pub online: CpuList,
    pub mems: String,
    pub layout: CgroupLayout,
    pub backend: Backend,
    pub available: Vec<Mechanism>,
    /// Global RT ratio (sched_rt_runtime_us / sched_rt_period_us), the kernel's admission cap.
    pub rt_ratio: f64,
    /// CPUs isolated from the scheduler domains at boot (`isolcpus=domain`,
    /// /sys/devices/system/cpu/isolated): outside load balancing, all in one root domain.
    pub boot_isolated: CpuList,
}

impl HostFacts {
    pub fn detect() -> Result<HostFacts> {
        let layout = CgroupLayout::detect().map_err(|e| HostError::Unsupported {
            what: format!("cannot read /proc/self/mountinfo: {e}"),
            fix: "run on Linux with /proc mounted".into(),
        })?;
        let backend = layout
            .backend()
            .map_err(|fix| HostError::Unsupported { what: "no usable cpuset+cpu cgroup controllers".into(), fix })?;
        let mems = fsio::read_trim(backend.root().cpuset.join("cpuset.mems"))
            .or_else(|_| fsio::read_trim(backend.root().cpuset.join("cpuset.mems.effective")))
            .unwrap_or_else(|_| "0".into());
        let runtime: i64 = fsio::read_trim("/proc/sys/kernel/sched_rt_runtime_us")?.parse().unwrap_or(950000);
        let period: f64 = fsio::read_trim("/proc/sys/kernel/sched_rt_period_us")?.parse().unwrap_or(1e6);
        Ok(HostFacts {
            online: crate::doctor::online_cpus(),
            mems: if mems.is_empty() { "0".into() } else { mems },
            available: crate::doctor::mechanisms(&layout),
            layout,
            backend,
            rt_ratio: if runtime < 0 { 1.0 } else { runtime as f64 / period },
            boot_isolated: fsio::read_trim("/sys/devices/system/cpu/isolated")
                .ok()
                .and_then(|s| CpuList::parse(&s).ok())
                .unwrap_or_default(),
        })
    }
}

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

/// Picks the mechanism: the requested one if the host has it, else the best that fits.
pub fn resolve_mechanism(setup: &Setup, facts: &HostFacts, requested: Option<Mechanism>) -> Result<Mechanism> {
    let reserved: Vec<&WorkloadSetup> = setup.workloads.iter().filter(|w| w.reservation.is_some()).collect();
    if let Some(m) = requested {
        if m != Mechanism::None && !facts.available.contains(&m) {
            return Err(rejected(format!(
                "reservation mechanism {m} is not available on this host (available: [{}]); see `rtslice doctor`",
                facts.available.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", ")
            )));
        }
        return Ok(if reserved.is_empty() { Mechanism::None } else { m });
    }
    if reserved.is_empty() {
        return Ok(Mechanism::None);
    }
    let disjoint = reserved.iter().enumerate().all(|(i, a)| {
        reserved[i + 1..].iter().all(|b| a.cpus.intersection(&b.cpus).is_empty())
    });
    let has = |m| facts.available.contains(&m);
    if has(Mechanism::Hcbs) {
        Ok(Mechanism::Hcbs)
    } else if has(Mechanism::Deadline) && disjoint {
        Ok(Mechanism::Deadline)
    } else if has(Mechanism::RtGroup) {
        Ok(Mechanism::RtGroup)
    } else if has(Mechanism::Deadline) {
        Ok(Mechanism::Deadline)
    } else {
        Err(rejected("this host has no reservation mechanism (no HCBS, no cpuset partitions, no RT groups); see `rtslice doctor`"))
    }
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

    // Admission: per CPU, reserved bandwidth must fit the kernel's RT cap.
    for cpu in facts.online.iter() {
        let sum: f64 = setup
            .workloads
            .iter()
            .filter(|w| w.cpus.contains(cpu))
            .filter_map(|w| w.reservation.map(|r| r.bandwidth()))
            .sum();
        if sum > facts.rt_ratio + 1e-9 {
            return Err(rejected(format!(
                "CPU {cpu} would carry {:.1}% of reserved real-time bandwidth, above the kernel's cap {:.1}% \
                 (sched_rt_runtime_us/sched_rt_period_us); shrink the reservations or spread them",
                sum * 100.0,
                facts.rt_ratio * 100.0
            )));
        }
    }
    if mech == Mechanism::RtGroup {
        let total: f64 = setup.workloads.iter().filter_map(|w| w.reservation.map(|r| r.bandwidth())).sum();
        if total > facts.rt_ratio + 1e-9 {
            return Err(rejected(format!(
                "RT group scheduling (cgroup v1) accounts every group's runtime/period against one per-CPU ratio: \
                 the reservations sum to {:.1}%, above the cap {:.1}%; use --mechanism deadline or fewer reservations",
                total * 100.0,
                facts.rt_ratio * 100.0
            )));
        }
    }

    let mut out = Vec::new();
    for w in &setup.workloads {
        let mut ws = w.clone();
        let has_deadline_rule = |ws: &WorkloadSetup| ws.threads.iter().any(|r| matches!(r.policy, Some(SchedAttr::Deadline { .. })));
        let rt_rules = ws.threads.iter().filter(|r| matches!(r.policy, Some(SchedAttr::Fifo { .. } | SchedAttr::Rr { .. }))).count();
        let mut rt_budget = None;
        if let Some(res) = ws.reservation {
            match mech {
                Mechanism::Deadline => {
                    // The workload's budget (runtime on each of its CPUs) is split over its RT rules.
                    let res = res.whole_micros();
                    let period_ns = res.period.as_nanos() as u64;
                    let n = rt_rules.max(1) as f64;
                    let is_rt = |r: &crate::setup::ThreadRule| matches!(r.policy, Some(SchedAttr::Fifo { .. } | SchedAttr::Rr { .. }));
                    let shares: Vec<f64> =
                        ws.threads.iter().filter(|r| is_rt(r)).map(|r| r.budget_share.unwrap_or(1.0 / n)).collect();
                    let mut parts = res.split(ws.cpus.len() as u32, &shares, res.period).into_iter();
                    for r in ws.threads.iter_mut() {
                        if is_rt(r) {
                            let mut runtime_ns = parts.next().map_or(0, |d| d.as_nanos() as u64);
                            if runtime_ns > period_ns {
                                warnings.push(format!(
                                    "workload {} rule {:?}: its share ({:.0} µs) exceeds one CPU per period; capped at the period",
                                    w.name,
                                    r.name,
                                    runtime_ns as f64 / 1000.0
                                ));
                                runtime_ns = period_ns;
                            }
                            r.policy = Some(SchedAttr::Deadline { runtime_ns, deadline_ns: period_ns, period_ns });
                        }
                    }
                    if rt_rules == 0 && !has_deadline_rule(&ws) {
                        warnings.push(format!(
                            "workload {}: a reservation under SCHED_DEADLINE applies to real-time thread rules, and it has none; \
                             add a rule (policy fifo/rr/deadline) naming its real-time threads",
                            w.name
                        ));
                    }
                    let dl: f64 = ws
                        .threads
                        .iter()
                        .filter_map(|r| match r.policy {
                            Some(SchedAttr::Deadline { runtime_ns, period_ns, .. }) => Some(runtime_ns as f64 / period_ns as f64),
                            _ => None,
                        })
                        .sum();
                    if dl > facts.rt_ratio * ws.cpus.len() as f64 + 1e-9 {
                        return Err(rejected(format!(
                            "workload {}: its SCHED_DEADLINE threads need {:.1}% of a CPU, its partition offers {:.1}%",
                            w.name,
                            dl * 100.0,
                            facts.rt_ratio * 100.0 * ws.cpus.len() as f64
                        )));
                    }
                }
                Mechanism::RtGroup | Mechanism::Hcbs => rt_budget = Some(res.whole_micros()),
                Mechanism::None => {}
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
            layout: CgroupLayout { mode: crate::cgroup::CgroupMode::V2, v1: Default::default(), v2: None, v2_controllers: vec![] },
            backend,
            available: vec![Mechanism::Hcbs, Mechanism::Deadline],
            rt_ratio: 0.95,
            boot_isolated: CpuList::new(),
        }
    }

    pub(crate) fn wl(name: &str, cpus: &str, res: Option<(u64, u64)>) -> WorkloadSetup {
        WorkloadSetup {
            name: name.into(),
            cpus: CpuList::parse(cpus).unwrap(),
            reservation: res.map(|(r, p)| Reservation::from_micros(r, p)),
            threads: vec![ThreadRule { name: "^rt".into(), policy: Some(SchedAttr::Fifo { priority: 50 }), cpus: None, budget_share: None }],
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
        w.threads.push(ThreadRule { name: "^l1".into(), policy: Some(SchedAttr::Rr { priority: 9 }), cpus: None, budget_share: Some(0.25) });
        let s = Setup { workloads: vec![w], ..Default::default() };
        let (p, _) = prepare(&s, &f, Mechanism::Deadline).unwrap();
        assert!(p[0].partition);
        // total = 300 µs × 2 CPUs = 600 µs; rule 1 gets 1/2 (default), rule 2 a quarter.
        assert_eq!(p[0].ws.threads[0].policy, Some(SchedAttr::Deadline { runtime_ns: 300_000, deadline_ns: 1_000_000, period_ns: 1_000_000 }));
        assert_eq!(p[0].ws.threads[1].policy, Some(SchedAttr::Deadline { runtime_ns: 150_000, deadline_ns: 1_000_000, period_ns: 1_000_000 }));
    }
}
