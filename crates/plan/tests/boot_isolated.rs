//! plan == apply on a cgroup v2 host booted with `isolcpus=domain,4-7` (the kernel matrix's 8-vCPU
//! guest): the planner refuses, with apply's reason, what apply refuses there — SCHED_DEADLINE
//! threads pinned to some of the boot-isolated CPUs (study A's TA layouts) — and admits the rest.

use std::path::PathBuf;

use rtslice_plan::{plan_for_kernel, KernelFacts, Mechanism, NodeFacts};

fn example(name: &str) -> rtslice_spec::Spec {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name);
    rtslice_spec::parse(&std::fs::read_to_string(&path).unwrap(), name).unwrap()
}

fn guest() -> (NodeFacts, KernelFacts) {
    let facts = NodeFacts { online: (0..8).collect(), isolcpus: (4..8).collect(), ..Default::default() };
    let kernel = KernelFacts {
        available: vec![Mechanism::Deadline],
        rt_cap: Some(0.95),
        dl_server: 0.05,
        hz: Some(1000),
        hrtick: false,
        no_partition_cpus: (4..8).collect(),
        hcbs_root: None,
    };
    (facts, kernel)
}

#[test]
fn deadline_threads_pinned_to_some_boot_isolated_cpus_are_refused_with_the_kernels_reason() {
    let (facts, kernel) = guest();
    for name in ["study-a-ta.yaml", "study-a-ia-ta.yaml"] {
        let plan = plan_for_kernel(&example(name), &facts, &kernel, None);
        assert_eq!(plan.rejected.len(), 1, "{name}: {:?}", plan.rejected);
        let why = &plan.rejected[0].reason;
        assert!(why.contains("SCHED_DEADLINE on CPUs isolated at boot needs an affinity of all of them [4-7]"), "{name}: {why}");
        assert!(why.contains("/^ru-thread$/") && why.contains("--mechanism none"), "{name}: names the rule and a way out: {why}");
        // Without enforcement the threads stay FIFO, pinned as asked: admitted.
        let none = plan_for_kernel(&example(name), &facts, &kernel, Some(Mechanism::None));
        assert!(none.all_admitted(), "{name} under none: {:?}", none.rejected);
    }
    // Layouts whose deadline threads span all of 4-7 (wide affinity, IRQ steering) are admitted with a
    // plain cpuset (no partition), as apply gives them.
    for name in ["study-a-wa.yaml", "study-a-ia-wa.yaml", "study-a-ia.yaml"] {
        let plan = plan_for_kernel(&example(name), &facts, &kernel, None);
        assert!(plan.all_admitted(), "{name}: {:?}", plan.rejected);
        let k = plan.kernel.unwrap();
        assert_eq!(k.mechanism, Mechanism::Deadline, "{name}");
        assert!(!k.workloads[0].partition, "{name}: no partition on boot-isolated CPUs");
    }
}

#[test]
fn a_deadline_workload_on_part_of_the_isolated_cpus_or_mixing_them_is_refused() {
    let (facts, kernel) = guest();
    let spec = |cpus: &str| {
        let text = format!(
            "apiVersion: rtslice/v1\nnode:\n  cpus: 0-7\n  housekeeping: 0\nworkloads:\n  - name: du\n    demand:\n      reservation: {{ runtime: 5ms, period: 10ms, cpus: {cpus} }}\n    threads:\n      - match: ^l1$\n        policy: fifo\n        priority: 50\n"
        );
        rtslice_spec::parse(&text, "du.yaml").unwrap()
    };
    let part = plan_for_kernel(&spec("5-7"), &facts, &kernel, None);
    assert!(part.rejected[0].reason.contains("needs an affinity of all of them [4-7]"), "{:?}", part.rejected);
    let mixed = plan_for_kernel(&spec("3-4"), &facts, &kernel, None);
    assert!(mixed.rejected[0].reason.contains("mix CPUs isolated at boot [4-7]"), "{:?}", mixed.rejected);
    let all = plan_for_kernel(&spec("4-7"), &facts, &kernel, None);
    assert!(all.all_admitted(), "{:?}", all.rejected);
    // Without boot isolation (cgroup v1, or no isolcpus) nothing changes: a partition on 5-7.
    let plain = plan_for_kernel(&spec("5-7"), &facts, &KernelFacts { no_partition_cpus: vec![], ..kernel.clone() }, None);
    assert!(plain.all_admitted() && plain.kernel.unwrap().workloads[0].partition, "{:?}", plain.rejected);
}

/// Workloads that do not ask for isolcpus go to the housekeeping CPUs first: on the guest, a vBS
/// reservation placed by worst fit on an empty isolated CPU could not even be admitted under
/// SCHED_DEADLINE (the isolated CPUs share one root domain). Only when the housekeeping CPUs are
/// full does a reservation land on an isolated CPU; one that asks for isolcpus goes there at once.
#[test]
fn the_housekeeping_cpus_are_filled_before_the_boot_isolated_ones() {
    let (facts, _) = guest();
    let text = "apiVersion: rtslice/v1\nnode: { cpus: 0-7, housekeeping: 0 }\nworkloads:\n\
                - { name: a, demand: { reservation: { runtime: 80ms, period: 100ms, count: 1 } } }\n\
                - { name: b, demand: { reservation: { runtime: 80ms, period: 100ms, count: 1 } } }\n\
                - { name: c, demand: { reservation: { runtime: 80ms, period: 100ms, count: 1 } } }\n\
                - { name: d, demand: { reservation: { runtime: 80ms, period: 100ms, count: 1 } } }\n\
                - { name: iso, isolation: { isolcpus: true }, demand: { reservation: { runtime: 10ms, period: 100ms, count: 1 } } }\n";
    let spec = rtslice_spec::parse(text, "t.yaml").unwrap();
    let p = rtslice_plan::plan(&spec, &facts);
    let cpus = |n: &str| p.workload(n).unwrap_or_else(|| panic!("{n}: {:?}", p.rejected)).cpus.clone();
    let housekeeping = [1, 2, 3];
    for n in ["a", "b", "c"] {
        assert!(housekeeping.contains(&cpus(n)[0]), "{n} on a housekeeping CPU: {:?}", cpus(n));
    }
    assert!(cpus("d")[0] >= 4, "d: 1-3 are full (80 % each), so an isolated CPU: {:?}", cpus("d"));
    assert!(cpus("iso")[0] >= 4, "iso asks for isolcpus: {:?}", cpus("iso"));
}

/// Partitions that take every housekeeping CPU leave the system only the boot-isolated CPUs: refused
/// (the kernel matrix's 8-vCPU guest, Debian 6.12.117-rt, oopsed when one `root` partition took 0-3
/// there). Two 2-CPU SCHED_DEADLINE workloads fill 0-3 by worst fit: the second is refused with the
/// reason. Without boot isolation the same two partitions leave 4-7 to the system.
#[test]
fn partitions_that_take_every_housekeeping_cpu_are_refused() {
    let (facts, kernel) = guest();
    let text = |housekeeping: &str| {
        format!(
            "apiVersion: rtslice/v1\nnode: {{ cap: 50%{housekeeping} }}\nworkloads:\n\
             - {{ name: a, demand: {{ reservation: {{ runtime: 5800us, period: 20ms, count: 2 }} }}, threads: [{{ match: ^w$, policy: fifo, priority: 10 }}] }}\n\
             - {{ name: b, demand: {{ reservation: {{ runtime: 7200us, period: 20ms, count: 2 }} }}, threads: [{{ match: ^w$, policy: deadline }}] }}\n"
        )
    };
    let full = plan_for_kernel(&rtslice_spec::parse(&text(""), "full.yaml").unwrap(), &facts, &kernel, None);
    assert_eq!(full.rejected.len(), 1, "{:?}", full.workloads.iter().map(|w| (&w.name, &w.cpus)).collect::<Vec<_>>());
    let why = &full.rejected[0].reason;
    assert!(why.contains("every housekeeping CPU") && why.contains("isolated at boot 4-7") && why.contains("node.housekeeping"), "{why}");
    // Without boot isolation the same two partitions leave 4-7 to the system: admitted.
    let plain = plan_for_kernel(
        &rtslice_spec::parse(&text(""), "full.yaml").unwrap(),
        &NodeFacts { isolcpus: vec![], ..facts.clone() },
        &KernelFacts { no_partition_cpus: vec![], ..kernel.clone() },
        None,
    );
    assert!(plain.all_admitted(), "{:?}", plain.rejected);
    // A workload wholly on the isolated CPUs has no partition there: it takes no housekeeping CPU.
    let iso = "apiVersion: rtslice/v1\nnode: { cap: 50% }\nworkloads:\n\
               - { name: a, demand: { reservation: { runtime: 5ms, period: 10ms, cpus: 0-3 } }, threads: [{ match: ^w$, policy: fifo, priority: 10 }] }\n\
               - { name: b, demand: { reservation: { runtime: 5ms, period: 10ms, cpus: 4-7 } }, threads: [{ match: ^w$, policy: fifo, priority: 10 }] }\n";
    let p = plan_for_kernel(&rtslice_spec::parse(iso, "iso.yaml").unwrap(), &facts, &kernel, None);
    assert!(p.rejected.len() == 1 && p.rejected[0].name == "a", "0-3 partitioned leaves only 4-7: {:?}", p.rejected);
}

/// One 2-CPU SCHED_DEADLINE workload on 0-1 next to a plain reservation on 2-3, CPUs 4-7 isolated
/// at boot: only the partition (0-1) leaves the system, which keeps 2-3 — admitted. (When rtslice's
/// slice was the partitions' parent holding every workload's CPUs, this made it a `root` partition
/// of 0-3, the layout the 6.12 guest's kernel oopsed on, and the planner refused it.) With a third
/// workload on the isolated CPUs the same layout holds.
#[test]
fn a_partition_beside_a_reservation_on_the_other_housekeeping_cpus_fits() {
    let (facts, kernel) = guest();
    let two = "apiVersion: rtslice/v1\nnode: { cap: 95% }\nworkloads:\n\
               - { name: a, demand: { reservation: { runtime: 57ms, period: 100ms, count: 2 } }, threads: [{ match: ^w$, policy: rr, priority: 20 }] }\n\
               - { name: b, demand: { reservation: { runtime: 1800us, period: 10ms, count: 2 } } }\n";
    let p = plan_for_kernel(&rtslice_spec::parse(two, "two.yaml").unwrap(), &facts, &kernel, None);
    assert!(p.all_admitted(), "{:?}", p.rejected);
    assert_eq!(p.workloads.iter().map(|w| w.cpus.clone()).collect::<Vec<_>>(), vec![vec![0, 1], vec![2, 3]]);
    let three = format!("{two}- {{ name: c, demand: {{ reservation: {{ runtime: 5ms, period: 10ms, cpus: 4-7 }} }} }}\n");
    let p = plan_for_kernel(&rtslice_spec::parse(&three, "three.yaml").unwrap(), &facts, &kernel, None);
    assert!(p.all_admitted(), "{:?}", p.rejected);
    assert_eq!(p.workloads.iter().map(|w| w.cpus.clone()).collect::<Vec<_>>(), vec![vec![0, 1], vec![2, 3], vec![4, 5, 6, 7]]);
}

/// A dedicated workload beside a best-effort one that covers the other CPUs: the node makes its
/// partitions at the root (v2) or beside `system` (v1), and only the partitions' CPUs leave the rest
/// of the system, so both fit on either cgroup version. (When rtslice's slice was the partitions'
/// `root` parent holding every workload's CPUs, v2 refused it: "Parent unable to distribute cpu
/// downstream", found by host/examples' plan == apply property test in the 6.12 guest.) Dedicated
/// CPUs that take every CPU are refused, with the reason.
#[test]
fn a_partition_beside_a_best_effort_workload_on_every_other_cpu_fits() {
    let facts = NodeFacts::with_cpus(4);
    let text = "apiVersion: rtslice/v1\nnode: { cap: 50% }\nworkloads:\n\
        \x20 - { name: gen0, demand: { dedicated: { count: 1 } }, threads: [{ match: ^sleep$, policy: fifo, priority: 10 }] }\n\
        \x20 - { name: gen1, demand: { bestEffort: { weight: 50 } }, threads: [{ match: ^sleep$, policy: rr, priority: 20 }] }\n";
    let spec = rtslice_spec::parse(text, "gen.yaml").unwrap();
    let kernel = KernelFacts { available: vec![Mechanism::Deadline], rt_cap: Some(0.95), dl_server: 0.05, ..Default::default() };
    let plan = plan_for_kernel(&spec, &facts, &kernel, None);
    assert!(plan.rejected.is_empty(), "{:?}", plan.rejected);
    // Partitions on every CPU (two dedicated workloads, 1 + 3 CPUs) leave the system none.
    let all = format!("{text}  - {{ name: gen2, demand: {{ dedicated: {{ count: 3 }} }} }}\n");
    let plan = plan_for_kernel(&rtslice_spec::parse(&all, "gen.yaml").unwrap(), &facts, &kernel, None);
    assert!(plan.rejected.iter().any(|r| r.name == "gen2"), "{:?}", plan.rejected);
}
