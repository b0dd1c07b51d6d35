//! Periods shorter than the tick on a kernel without HRTICK (HZ=250 here): every mechanism charges a
//! budget when a thread blocks, is preempted or at the tick and repays an overrun from the next
//! periods (SCHED_DEADLINE's negative runtime, an RT group's rt_time), so `plan` admits them with a
//! warning under each, as apply and the node apply them. Measured at 1 ms with vBS stacks whose
//! budget fits, RT groups and SCHED_DEADLINE held them alike (docs/results.md, "a period under the
//! tick").

use rtslice_plan::{plan_for_kernel, KernelFacts, Mechanism, NodeFacts};

fn spec() -> rtslice_spec::Spec {
    let text = "apiVersion: rtslice/v1\nnode:\n  cpus: 0-1\nworkloads:\n  - name: vbs\n    demand:\n      reservation: { runtime: 900us, period: 1ms, cpus: 1 }\n    threads:\n      - match: ^ru-thread$\n        policy: fifo\n        priority: 97\n";
    rtslice_spec::parse(text, "vbs.yaml").unwrap()
}

fn kernel() -> KernelFacts {
    KernelFacts {
        available: vec![Mechanism::Deadline, Mechanism::RtGroup],
        rt_cap: Some(0.95),
        dl_server: 0.05,
        hz: Some(250),
        hrtick: false,
        no_partition_cpus: vec![],
        hcbs_root: None,
    }
}

#[test]
fn a_tti_period_under_the_tick_is_admitted_with_a_warning_under_every_mechanism() {
    let facts = NodeFacts { online: vec![0, 1], isolcpus: vec![], ..Default::default() };
    let hcbs = KernelFacts { available: vec![Mechanism::Hcbs, Mechanism::Deadline], ..kernel() };
    for (mech, k, who) in [
        (Mechanism::Deadline, kernel(), "SCHED_DEADLINE notices"),
        (Mechanism::RtGroup, kernel(), "the RT group notices"),
        (Mechanism::Hcbs, hcbs, "the group's budget notices"),
    ] {
        let p = plan_for_kernel(&spec(), &facts, &k, Some(mech));
        assert!(p.all_admitted(), "{mech}: {:?}", p.rejected);
        assert_eq!(p.kernel.as_ref().map(|k| k.mechanism), Some(mech));
        assert!(
            p.warnings.iter().any(|w| w.contains("shorter than the kernel's tick") && w.contains(who) && w.contains("repays")),
            "{mech}: {:?}",
            p.warnings
        );
        // With HRTICK nothing is said.
        let hr = plan_for_kernel(&spec(), &facts, &KernelFacts { hrtick: true, ..k }, Some(mech));
        assert!(hr.all_admitted() && !hr.warnings.iter().any(|w| w.contains("tick")), "{mech}: {:?} {:?}", hr.rejected, hr.warnings);
    }
}

/// SLO sizing on a kernel that throttles only at ticks sizes for exact enforcement: the tick model's
/// credit under-predicted a real periodic job's misses 8-60x on a quiet host (docs/model.md), so a
/// budget sized on it was too small. The plan for this kernel equals the one sized with exact
/// enforcement (`plan_sized` with the default facts) and says no tick.
#[test]
fn slo_sizing_on_a_tick_enforced_kernel_assumes_exact_enforcement() {
    use rtslice_plan::{plan_sized, Allocation, SizingFacts};
    let text = "apiVersion: rtslice/v1\nnode:\n  cpus: 0-1\n  housekeeping: 0\nworkloads:\n  - name: vbs\n    slo: { deadlineMissRatio: 1e-3 }\n    profile: { period: 1ms, deadline: 3ms, execution: { p50: 300us, p99: 450us, max: 700us } }\n    threads:\n      - match: ^ru-thread$\n        policy: fifo\n        priority: 97\n";
    let spec = rtslice_spec::parse(text, "vbs.yaml").unwrap();
    let facts = NodeFacts { online: vec![0, 1], isolcpus: vec![], ..Default::default() };
    let reservation = |p: &rtslice_plan::Plan| match &p.workloads[0].allocation {
        Allocation::Reservation { reservation, .. } => (reservation.runtime, reservation.period),
        other => panic!("expected a reservation, got {other:?}"),
    };
    let exact = plan_sized(&spec, &facts, &SizingFacts::default());
    assert!(exact.all_admitted(), "{:?}", exact.rejected);
    for mech in [None, Some(Mechanism::Deadline), Some(Mechanism::RtGroup)] {
        let p = plan_for_kernel(&spec, &facts, &kernel(), mech);
        assert!(p.all_admitted(), "{mech:?}: {:?}", p.rejected);
        let s = p.workloads[0].sizing.as_ref().expect("an SLO workload carries its sizing");
        assert_eq!(s.tick_ns, None, "{mech:?}: sized for tick enforcement");
        assert_eq!(reservation(&p), reservation(&exact), "{mech:?}");
    }
}

/// A reservation reclaims unless told not to (issue 39): under SCHED_DEADLINE its thread rules carry
/// the `reclaim` flag (GRUB, and one pool the agent splits by demand) with `reclaim` unset;
/// `reclaim: false` keeps the fixed split; a rule that gives a `share` of the reservation to a CFS
/// pool turns the default off (reclaiming threads would take that pool's bandwidth), and an explicit
/// `reclaim: true` still turns it on there.
#[test]
fn a_reservation_reclaims_by_default_unless_told_not_to_or_a_cfs_pool_shares_it() {
    let facts = NodeFacts { online: vec![0, 1], isolcpus: vec![], ..Default::default() };
    let plan = |reclaim: &str, pool: bool| {
        let text = format!(
            "apiVersion: rtslice/v1\nnode:\n  cpus: 0-1\n  housekeeping: 0\nworkloads:\n  - name: vbs\n    demand:\n      reservation: {{ runtime: 7ms, period: 10ms, cpus: 1{reclaim} }}\n    threads:\n      - {{ match: \"^TXRX$\", policy: fifo, priority: 97 }}\n      - {{ match: \"^WORKER[0-9]+$\", policy: fifo, priority: 96 }}\n{}",
            if pool { "      - { match: \"^STACK$\", share: 20% }\n" } else { "" }
        );
        let spec = rtslice_spec::parse(&text, "vbs.yaml").unwrap_or_else(|e| panic!("{e}\n{text}"));
        let p = plan_for_kernel(&spec, &facts, &kernel(), Some(Mechanism::Deadline));
        assert!(p.all_admitted(), "{:?}", p.rejected);
        let k = p.kernel.clone().unwrap();
        let flags: Vec<bool> = k.workloads[0]
            .threads
            .iter()
            .filter(|t| matches!(t.sched, rtslice_plan::ThreadSched::Deadline { .. }))
            .map(|t| t.flags.iter().any(|f| f == "reclaim"))
            .collect();
        assert_eq!(flags.len(), 2, "both real-time rules become SCHED_DEADLINE: {:?}", k.workloads[0].threads);
        assert!(flags.iter().all(|f| *f == flags[0]), "{flags:?}");
        assert_eq!(p.workloads[0].reclaim, flags[0], "the plan and its kernel parameters agree");
        (flags[0], k.workloads[0].budget.clone())
    };
    let (on, budget) = plan("", false);
    assert!(on, "the natural spec reclaims");
    assert!(budget.contains("the default") && budget.contains("reclaim: false"), "plan says it is the default and how to opt out: {budget}");
    assert!(!plan(", reclaim: false", false).0, "reclaim: false opts out");
    assert!(!plan("", true).0, "a CFS pool turns the default off");
    assert!(plan(", reclaim: true", true).0, "an explicit reclaim: true beside a pool");
}

/// The default mechanism prefers one group budget for a stack (issue 39: its threads keep their
/// priorities under one budget) where the kernel can hold the reservations with it: RT groups when
/// their runtimes fit the one global ratio (at any period: under the tick as SCHED_DEADLINE does),
/// else SCHED_DEADLINE for disjoint CPU sets, else RT groups.
#[test]
fn the_default_mechanism_is_a_group_budget_where_the_reservations_fit_one() {
    use rtslice_plan::kernel::{choose_mechanism, Reserved};
    use rtslice_plan::Reservation;
    use std::time::Duration;
    let on = |cpus: &[u32], runtime_us: u64, period_us: u64| Reserved {
        cpus: cpus.to_vec(),
        reservation: Reservation::new(Duration::from_micros(runtime_us), Duration::from_micros(period_us)),
    };
    let k = kernel();
    let pick = |k: &KernelFacts, r: &[Reserved]| choose_mechanism(k, None, r).unwrap();
    // One stack at 0.9 of a CPU every 10 ms: RT groups hold it.
    assert_eq!(pick(&k, &[on(&[1], 9_000, 10_000)]), Mechanism::RtGroup);
    // The same every 1 ms, under HZ=250's 4 ms tick, as with HRTICK: one group budget.
    assert_eq!(pick(&k, &[on(&[1], 900, 1_000)]), Mechanism::RtGroup);
    assert_eq!(pick(&KernelFacts { hrtick: true, ..kernel() }, &[on(&[1], 900, 1_000)]), Mechanism::RtGroup);
    // Two on disjoint CPUs summing above the 95 % ratio: SCHED_DEADLINE holds them, RT groups cannot.
    assert_eq!(pick(&k, &[on(&[0], 6_000, 10_000), on(&[1], 6_000, 10_000)]), Mechanism::Deadline);
    // Where the ratio is unlimited (-1) or unknown there is no global account to exceed, as the
    // planner admits them there.
    assert_eq!(pick(&KernelFacts { rt_cap: None, ..kernel() }, &[on(&[0], 6_000, 10_000), on(&[1], 6_000, 10_000)]), Mechanism::RtGroup);
    // At the ratio exactly they fit.
    assert_eq!(pick(&k, &[on(&[0], 5_000, 10_000), on(&[1], 4_500, 10_000)]), Mechanism::RtGroup);
    // Overlapping sets cannot be partitions: RT groups (the planner then refuses what does not fit).
    assert_eq!(pick(&k, &[on(&[0, 1], 6_000, 10_000), on(&[1], 6_000, 10_000)]), Mechanism::RtGroup);
    // HCBS first wherever the kernel has it; a requested mechanism wins.
    let hcbs = KernelFacts { available: vec![Mechanism::Hcbs, Mechanism::Deadline], ..kernel() };
    assert_eq!(pick(&hcbs, &[on(&[1], 900, 1_000)]), Mechanism::Hcbs);
    assert_eq!(choose_mechanism(&k, Some(Mechanism::Deadline), &[on(&[1], 9_000, 10_000)]), Ok(Mechanism::Deadline));
    // Nothing reserved: nothing to enforce.
    assert_eq!(pick(&k, &[]), Mechanism::None);
}

/// The plan for this kernel takes that default: the natural spec every 10 ms and every 1 ms is
/// planned under RT groups and admitted; two that sum above RT groups' ratio on disjoint CPUs go
/// to SCHED_DEADLINE.
#[test]
fn plan_for_kernel_takes_a_group_budget_where_it_admits_the_spec() {
    let facts = NodeFacts { online: vec![0, 1], isolcpus: vec![], ..Default::default() };
    let ten = rtslice_spec::parse(&spec_text(9, 10), "vbs.yaml").unwrap();
    let p = plan_for_kernel(&ten, &facts, &kernel(), None);
    assert!(p.all_admitted(), "{:?}", p.rejected);
    assert_eq!(p.kernel.as_ref().map(|k| k.mechanism), Some(Mechanism::RtGroup));
    let p = plan_for_kernel(&spec(), &facts, &kernel(), None);
    assert!(p.all_admitted(), "{:?}", p.rejected);
    assert_eq!(p.kernel.as_ref().map(|k| k.mechanism), Some(Mechanism::RtGroup));
    let two = ten.workloads[0].clone();
    let mut both = rtslice_spec::parse(&spec_text(6, 10), "vbs.yaml").unwrap();
    both.workloads.push(rtslice_spec::Workload { name: "vbs2".into(), demand: Some(rtslice_spec::Demand::reservation_on(std::time::Duration::from_millis(6), std::time::Duration::from_millis(10), vec![2])), ..two });
    // On four CPUs, so that two partitions leave the system one.
    both.node.cpus = rtslice_spec::NodeCpus::List(vec![0, 1, 2, 3]);
    let facts = NodeFacts { online: vec![0, 1, 2, 3], isolcpus: vec![], ..Default::default() };
    let p = plan_for_kernel(&both, &facts, &kernel(), None);
    assert!(p.all_admitted(), "{:?}", p.rejected);
    assert_eq!(p.kernel.as_ref().map(|k| k.mechanism), Some(Mechanism::Deadline), "{:?}", p.workloads.iter().map(|w| &w.cpus).collect::<Vec<_>>());
}

fn spec_text(runtime_ms: u64, period_ms: u64) -> String {
    format!("apiVersion: rtslice/v1\nnode:\n  cpus: 0-1\nworkloads:\n  - name: vbs\n    demand:\n      reservation: {{ runtime: {runtime_ms}ms, period: {period_ms}ms, cpus: 1 }}\n    threads:\n      - match: ^ru-thread$\n        policy: fifo\n        priority: 97\n")
}
