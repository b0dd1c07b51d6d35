//! Topology-aware placement (`isolation.smt`, `isolation.locality`, NIC locality) on generated
//! machines — 1 or 2 sockets, SMT or not, Linux's two CPU numberings, one or two LLCs per socket —
//! with generated mixes of workloads: the constraints are never violated (batch and one-at-a-time),
//! the bandwidth accounting is that of a topology-blind plan, nothing goes above the cap, the plan
//! is deterministic, and a defragmentation proposal keeps a workload within its group.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use proptest::prelude::*;
use rtslice_plan::{plan, Allocation, NodeFacts, Plan, Planner, TopologySource};
use rtslice_spec::{
    BestEffort, Dedicated, Demand, FitPolicy, IrqRule, Isolation, Locality, Node, NodeCpus, Reservation, Slots, Smt,
    SmtIsolation, Spec, Topology, Workload,
};

/// A generated machine: its CPUs and topology.
#[derive(Clone, Debug)]
struct Machine {
    cpus: Vec<u32>,
    topology: Topology,
}

fn machine() -> impl Strategy<Value = Machine> {
    (1u32..=2, 1u32..=6, any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
        |(sockets, cores_per_socket, smt, offset_numbering, two_llcs, list_form)| {
            let cores = sockets * cores_per_socket;
            let threads = if smt { 2 } else { 1 };
            // Linux numbers a server's first threads 0..cores, second threads cores..2·cores
            // ("+cores"); some firmware interleaves them (2c, 2c+1: "+1").
            let cpu_of = |core: u32, t: u32| if offset_numbering { core + t * cores } else { core * threads + t };
            let mut core_lists = Vec::new();
            for c in 0..cores {
                core_lists.push((0..threads).map(|t| cpu_of(c, t)).collect::<Vec<u32>>());
            }
            let socket_of_core = |c: u32| c / cores_per_socket;
            let mut numa = vec![Vec::new(); sockets as usize];
            let mut llc: Vec<Vec<u32>> = Vec::new();
            let llcs_per_socket = if two_llcs && cores_per_socket >= 2 { 2 } else { 1 };
            llc.resize((sockets * llcs_per_socket) as usize, Vec::new());
            for c in 0..cores {
                let s = socket_of_core(c);
                let half = if llcs_per_socket == 2 && c % cores_per_socket >= cores_per_socket / 2 { 1 } else { 0 };
                for &cpu in &core_lists[c as usize] {
                    numa[s as usize].push(cpu);
                    llc[(s * llcs_per_socket + half) as usize].push(cpu);
                }
            }
            for g in numa.iter_mut().chain(llc.iter_mut()) {
                g.sort_unstable();
            }
            let smt = match (smt, list_form, offset_numbering) {
                (false, _, _) => Smt::None,
                (true, true, _) => Smt::Cores(core_lists),
                (true, false, true) => Smt::Offset(cores),
                (true, false, false) => Smt::Offset(1),
            };
            let mut nics = BTreeMap::new();
            nics.insert("ens1f0".to_string(), sockets - 1);
            let mut cpus: Vec<u32> = (0..cores * threads).collect();
            cpus.sort_unstable();
            Machine { cpus, topology: Topology { smt, llc, numa, nics, devices: BTreeMap::new() } }
        },
    )
}

fn smt_option() -> impl Strategy<Value = SmtIsolation> {
    prop::sample::select(SmtIsolation::ALL.to_vec())
}

fn locality() -> impl Strategy<Value = Locality> {
    prop::sample::select(Locality::ALL.to_vec())
}

/// One generated workload: (kind, permille, count, smt, locality, names the NIC, fixed CPU pick).
type Item = (u8, u64, u32, SmtIsolation, Locality, bool, prop::sample::Index);

fn workload(i: usize, m: &Machine, hk: u32, (kind, permille, count, smt, loc, nic, at): Item) -> Workload {
    let name = format!("w{i}");
    let usable = m.cpus.len() as u32 - hk;
    let count = count.min(usable).max(1);
    let reservation = |count: Option<u32>, cpus: Option<Vec<u32>>| {
        Demand::Reservation(Reservation {
            runtime: Duration::from_micros(permille * 100),
            period: Some(Duration::from_millis(100)),
            count,
            cpus,
            reclaim: None,
        })
    };
    let (demand, smt) = match kind {
        0..=2 => (reservation(Some(count), None), smt),
        3 => {
            let cpu = m.cpus[hk as usize + at.index(usable as usize)];
            (reservation(None, Some(vec![cpu])), smt)
        }
        4 => (Demand::Dedicated(Dedicated { count: Some(count.min(2)), cpus: None }), smt),
        _ => (Demand::BestEffort(BestEffort::default()), SmtIsolation::Shared),
    };
    let mut w = Workload {
        name,
        demand: Some(demand),
        isolation: Isolation { smt, locality: loc, ..Isolation::default() },
        ..Workload::default()
    };
    if nic {
        w.irqs.push(IrqRule { pattern: "^ens1f0-TxRx-".into(), slots: Slots::Any });
    }
    w
}

fn spec_on(m: &Machine, hk: u32, cap_pct: u32, policy: FitPolicy, items: Vec<Item>, declared: bool) -> Spec {
    // A 1-CPU machine keeps its CPU for workloads.
    let hk = hk.min(m.cpus.len() as u32 - 1);
    let workloads = items.into_iter().enumerate().map(|(i, it)| workload(i, m, hk, it)).collect();
    Spec {
        node: Node {
            cpus: NodeCpus::List(m.cpus.clone()),
            housekeeping: m.cpus[..hk as usize].to_vec(),
            cap: cap_pct as f64 / 100.0,
            policy,
            topology: declared.then(|| m.topology.clone()),
            ..Node::default()
        },
        workloads,
        ..Spec::default()
    }
}

/// (machine, spec, facts): the topology declared in the spec or discovered (given as facts).
fn case() -> impl Strategy<Value = (Machine, Spec, NodeFacts)> {
    (
        machine(),
        0u32..2,
        50u32..=100,
        prop::sample::select(FitPolicy::ALL.to_vec()),
        prop::collection::vec((0u8..6, 1u64..=1000, 1u32..4, smt_option(), locality(), any::<bool>(), any::<prop::sample::Index>()), 0..12),
        any::<bool>(),
    )
        .prop_map(|(m, hk, cap, pol, items, declared)| {
            let spec = spec_on(&m, hk, cap, pol, items, declared);
            let facts = NodeFacts { topology: (!declared).then(|| m.topology.clone()), ..NodeFacts::default() };
            (m, spec, facts)
        })
}

fn group_of(groups: &[Vec<u32>], cpu: u32) -> Option<usize> {
    groups.iter().position(|g| g.contains(&cpu))
}

/// Every constraint of every admitted workload holds in `p`, judged from the machine's topology
/// alone (not from the planner's view of it).
fn check_constraints(m: &Machine, spec: &Spec, p: &Plan) -> Result<(), TestCaseError> {
    let cores = m.topology.cores(&m.cpus);
    let core_of = |cpu: u32| cores.iter().position(|c| c.contains(&cpu)).unwrap();
    let siblings = |cpu: u32| -> Vec<u32> { cores[core_of(cpu)].iter().copied().filter(|&c| c != cpu).collect() };
    let cpu_use = |cpu: u32| p.node.per_cpu.iter().find(|c| c.cpu == cpu).unwrap();
    let best_effort: BTreeSet<u32> = p
        .workloads
        .iter()
        .filter(|w| matches!(w.allocation, Allocation::BestEffort { .. }))
        .flat_map(|w| w.cpus.iter().copied())
        .collect();
    for w in &p.workloads {
        let iso = &spec.workloads.iter().find(|x| x.name == w.name).unwrap().isolation;
        match iso.smt {
            SmtIsolation::Shared => {}
            SmtIsolation::NoBestEffortSibling => {
                for &c in &w.cpus {
                    for s in siblings(c) {
                        prop_assert!(!best_effort.contains(&s), "{} on CPU {}: sibling {} runs best effort", w.name, c, s);
                    }
                }
            }
            SmtIsolation::WholeCore => {
                let mut seen = BTreeSet::new();
                for &c in &w.cpus {
                    prop_assert!(seen.insert(core_of(c)), "{}: two CPUs on the core of {}", w.name, c);
                    for s in siblings(c) {
                        let u = cpu_use(s);
                        prop_assert_eq!(u.held_for.as_deref(), Some(w.name.as_str()), "{} on CPU {}: sibling {} not held", w.name, c, s);
                        prop_assert!(u.by.is_empty() && u.exclusive_to.is_none() && !u.housekeeping, "held CPU {} used: {:?}", s, u);
                        prop_assert!(!best_effort.contains(&s), "held CPU {} runs best effort", s);
                        prop_assert!(p.workloads.iter().all(|x| !x.cpus.contains(&s)), "held CPU {} in a cpuset", s);
                    }
                }
            }
        }
        let groups = match iso.locality {
            Locality::Any => None,
            Locality::Llc => Some(&m.topology.llc),
            Locality::Numa => Some(&m.topology.numa),
        };
        if let Some(groups) = groups {
            let of: BTreeSet<Option<usize>> = w.cpus.iter().map(|&c| group_of(groups, c)).collect();
            prop_assert!(of.len() == 1 && !of.contains(&None), "{} ({:?}) spans groups: {:?}", w.name, iso.locality, w.cpus);
        }
    }
    Ok(())
}

/// The accounting a topology-blind planner keeps: shares add up, the cap holds, exclusive and held
/// CPUs carry nobody else, every workload is decided once.
fn check_accounting(spec: &Spec, p: &Plan) -> Result<(), TestCaseError> {
    for c in &p.node.per_cpu {
        let sum: f64 = c.by.iter().map(|s| s.bandwidth).sum();
        prop_assert!((sum - c.reserved).abs() < 1e-9, "CPU {}: shares {} != reserved {}", c.cpu, sum, c.reserved);
        match (&c.exclusive_to, &c.held_for) {
            (None, None) => prop_assert!(c.reserved <= spec.node.cap + 1e-9, "CPU {} above the cap: {}", c.cpu, c.reserved),
            (Some(owner), None) => prop_assert!(c.by.iter().all(|s| &s.workload == owner)),
            (None, Some(_)) => prop_assert!(c.by.is_empty() && c.free == 0.0, "held CPU {} carries {:?}", c.cpu, c.by),
            (Some(_), Some(_)) => prop_assert!(false, "CPU {} both exclusive and held", c.cpu),
        }
    }
    prop_assert_eq!(p.workloads.len() + p.rejected.len(), spec.workloads.len());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn constraints_hold_and_accounting_is_kept((m, spec, facts) in case()) {
        let p = plan(&spec, &facts);
        check_accounting(&spec, &p)?;
        check_constraints(&m, &spec, &p)?;
        let source = p.node.topology.as_ref().map(|t| t.source);
        let expected = if spec.node.topology.is_some() { TopologySource::Declared } else { TopologySource::Discovered };
        prop_assert_eq!(source, Some(expected));
    }

    #[test]
    fn same_input_same_plan((_m, spec, facts) in case()) {
        let a = serde_json::to_string(&plan(&spec, &facts)).unwrap();
        let b = serde_json::to_string(&plan(&spec.clone(), &facts.clone())).unwrap();
        prop_assert_eq!(a, b);
    }

    /// One at a time (the node service, the scheduler extender): every arrival is decided under the
    /// same constraints, whatever was admitted before it — best effort included.
    #[test]
    fn one_at_a_time_admission_keeps_the_constraints((m, spec, facts) in case(), split in any::<prop::sample::Index>()) {
        let at = split.index(spec.workloads.len() + 1);
        let head = Spec { workloads: spec.workloads[..at].to_vec(), ..spec.clone() };
        let mut planner = Planner::new(&head, &facts);
        for w in &spec.workloads[at..] {
            let _ = planner.admit(w);
        }
        let p = planner.plan();
        check_accounting(&spec, &p)?;
        check_constraints(&m, &spec, &p)?;
    }

    /// Workloads that ask for no topology constraint and name no NIC are placed exactly as on a
    /// node whose topology is unknown.
    #[test]
    fn without_options_the_topology_changes_nothing((_m, spec, facts) in case()) {
        let mut blind = spec.clone();
        for w in &mut blind.workloads {
            w.isolation = Isolation::default();
            w.irqs.clear();
        }
        let with = plan(&blind, &facts);
        let without = plan(&Spec { node: Node { topology: None, ..blind.node.clone() }, ..blind.clone() }, &NodeFacts::default());
        prop_assert_eq!(&with.workloads, &without.workloads);
        prop_assert_eq!(&with.rejected, &without.rejected);
        prop_assert_eq!(&with.node.per_cpu, &without.node.per_cpu);
    }

    /// A proposed defragmentation puts a locality-bound workload within one group, on CPUs its SMT
    /// option accepts, and really makes room there.
    #[test]
    fn defragmentation_respects_locality((m, spec, facts) in case()) {
        let p = plan(&spec, &facts);
        for r in &p.rejected {
            let Some(d) = &r.defrag else { continue };
            let w = spec.workloads.iter().find(|w| w.name == r.name).unwrap();
            prop_assert!(w.isolation.smt != SmtIsolation::WholeCore, "whole-core got a proposal: {:?}", d);
            let groups = match w.isolation.locality {
                Locality::Any => None,
                Locality::Llc => Some(&m.topology.llc),
                Locality::Numa => Some(&m.topology.numa),
            };
            if let Some(groups) = groups {
                let of: BTreeSet<Option<usize>> = d.then_cpus.iter().map(|&c| group_of(groups, c)).collect();
                prop_assert!(of.len() == 1 && !of.contains(&None), "{}: proposal spans groups {:?}", w.name, d.then_cpus);
            }
            let mut free: BTreeMap<u32, f64> = p.node.per_cpu.iter().map(|c| (c.cpu, c.free)).collect();
            for mv in &d.moves {
                *free.get_mut(&mv.from_cpu).unwrap() += mv.bandwidth;
                *free.get_mut(&mv.to_cpu).unwrap() -= mv.bandwidth;
                prop_assert!(free[&mv.to_cpu] >= -1e-9, "move {:?} overfills", mv);
            }
            let Some(Demand::Reservation(res)) = &w.demand else { unreachable!() };
            let b = res.runtime.as_secs_f64() / res.period.unwrap().as_secs_f64();
            for c in &d.then_cpus {
                prop_assert!(free[c] + 1e-9 >= b, "after the moves CPU {} has {} free, needs {}", c, free[c], b);
            }
        }
    }
}

/// The 2-socket server of examples/two-socket-smt.yaml, in Rust: 2 × 16 cores × 2 threads.
fn server() -> Machine {
    Machine {
        cpus: (0..64).collect(),
        topology: Topology {
            smt: Smt::Offset(32),
            llc: vec![(0..16).chain(32..48).collect(), (16..32).chain(48..64).collect()],
            numa: vec![(0..16).chain(32..48).collect(), (16..32).chain(48..64).collect()],
            nics: [("ens1f0".to_string(), 1)].into(),
            devices: [("0000:3b:02.1".to_string(), 0), ("0000:d8:00.0".to_string(), 1)].into(),
        },
    }
}

fn res(name: &str, permille: u64, count: u32, smt: SmtIsolation, locality: Locality) -> Workload {
    Workload {
        name: name.into(),
        demand: Some(Demand::reservation(Duration::from_micros(permille * 100), Duration::from_millis(100), count)),
        isolation: Isolation { smt, locality, ..Isolation::default() },
        ..Workload::default()
    }
}

fn server_spec(workloads: Vec<Workload>) -> Spec {
    let m = server();
    Spec {
        node: Node { cpus: NodeCpus::List(m.cpus.clone()), housekeeping: vec![0, 32], topology: Some(m.topology), ..Node::default() },
        workloads,
        ..Spec::default()
    }
}

#[test]
fn whole_core_holds_the_sibling_and_best_effort_avoids_guarded_cores() {
    let spec = server_spec(vec![
        res("du", 600, 2, SmtIsolation::WholeCore, Locality::Any),
        res("cu", 300, 1, SmtIsolation::NoBestEffortSibling, Locality::Any),
        Workload::new("batch"),
    ]);
    let p = plan(&spec, &NodeFacts::default());
    assert!(p.all_admitted(), "{:?}", p.rejected);
    let du = &p.workload("du").unwrap().cpus;
    for &c in du {
        let sib = if c < 32 { c + 32 } else { c - 32 };
        assert_eq!(p.node.per_cpu[sib as usize].held_for.as_deref(), Some("du"), "{p:#?}");
    }
    let cu = p.workload("cu").unwrap().cpus[0];
    let cu_sib = if cu < 32 { cu + 32 } else { cu - 32 };
    let batch = &p.workload("batch").unwrap().cpus;
    assert!(!batch.contains(&cu_sib), "best effort on {cu_sib}, the sibling of cu's CPU {cu}");
    assert!(batch.contains(&cu), "best effort may share cu's own CPU (time-shared, not SMT)");
    assert_eq!(p.node.topology.as_ref().unwrap().source, TopologySource::Declared);
}

#[test]
fn the_nic_node_is_preferred_and_locality_keeps_one_group() {
    let mut du = res("du", 500, 4, SmtIsolation::Shared, Locality::Numa);
    du.irqs.push(IrqRule { pattern: "^ens1f0-TxRx-".into(), slots: Slots::Any });
    let p = plan(&server_spec(vec![du]), &NodeFacts::default());
    let cpus = &p.workload("du").unwrap().cpus;
    assert!(cpus.iter().all(|&c| (16..32).contains(&c) || (48..64).contains(&c)), "not on the NIC's node 1: {cpus:?}");
    // Without the NIC, both LLC groups offer equally roomy CPUs: the tie goes to the lowest ids.
    let p = plan(&server_spec(vec![res("du", 500, 4, SmtIsolation::Shared, Locality::Llc)]), &NodeFacts::default());
    let cpus = &p.workload("du").unwrap().cpus;
    assert!(cpus.iter().all(|&c| (0..16).contains(&c) || (32..48).contains(&c)), "{cpus:?}");
}

#[test]
fn refusals_name_the_constraint() {
    // 31 whole cores per socket pair are fewer than 40 asked for.
    let p = plan(&server_spec(vec![res("big", 100, 40, SmtIsolation::WholeCore, Locality::Any)]), &NodeFacts::default());
    let r = &p.rejection("big").unwrap().reason;
    assert!(r.contains("isolation.smt: whole-core"), "{r}");
    let p = plan(&server_spec(vec![res("wide", 100, 40, SmtIsolation::Shared, Locality::Numa)]), &NodeFacts::default());
    let r = &p.rejection("wide").unwrap().reason;
    assert!(r.contains("isolation.locality: numa") && r.contains("NUMA node 1: 32"), "{r}");
    // Online: best effort everywhere first, then a no-best-effort-sibling reservation.
    let mut planner = Planner::new(&server_spec(vec![Workload::new("batch")]), &NodeFacts::default());
    let r = planner.admit(&res("late", 300, 1, SmtIsolation::NoBestEffortSibling, Locality::Any)).unwrap_err();
    assert!(r.reason.contains("no-best-effort-sibling") && r.reason.contains("best-effort `batch`"), "{}", r.reason);
}

fn device(pci: &str) -> rtslice_spec::Device {
    rtslice_spec::Device::new(pci.parse().unwrap())
}

#[test]
fn a_workloads_device_node_is_preferred_over_its_nic_and_its_irqs_follow_its_cpus() {
    // The accelerator on node 1 wins over nothing; a VF on node 0 wins over the NIC on node 1 (the
    // device is the workload's own, the NIC only carries its traffic).
    let mut acc = res("acc", 500, 2, SmtIsolation::Shared, Locality::Numa);
    acc.devices.push(device("d8:00.0"));
    let mut du = res("du", 500, 4, SmtIsolation::Shared, Locality::Numa);
    du.irqs.push(IrqRule { pattern: "^ens1f0-TxRx-".into(), slots: Slots::Any });
    du.devices.push(rtslice_spec::Device { pci: "0000:3b:02.1".parse().unwrap(), irqs: rtslice_spec::DeviceIrqs::Slots(Slots::List(vec![1])) });
    du.devices.push(rtslice_spec::Device { pci: "0000:3b:02.2".parse().unwrap(), irqs: rtslice_spec::DeviceIrqs::Keep });
    let p = plan(&server_spec(vec![acc, du]), &NodeFacts::default());
    assert!(p.all_admitted(), "{:?}", p.rejected);
    let node1 = |c: &u32| (16..32).contains(c) || (48..64).contains(c);
    let acc = p.workload("acc").unwrap();
    assert!(acc.cpus.iter().all(node1), "the accelerator is on node 1: {:?}", acc.cpus);
    assert_eq!(acc.devices[0].irq_cpus.as_ref(), Some(&acc.cpus), "by default a device's IRQs go to all the workload's CPUs");
    let du = p.workload("du").unwrap();
    assert!(du.cpus.iter().all(|c| !node1(c)), "the VF is on node 0: {:?}", du.cpus);
    assert_eq!(du.devices[0].irq_cpus, Some(vec![du.cpus[1]]), "slot 1");
    assert_eq!(du.devices[1].irq_cpus, None, "keep");
    // A device whose node nobody knows changes nothing: the NIC decides again.
    let mut du2 = res("du2", 500, 4, SmtIsolation::Shared, Locality::Numa);
    du2.irqs.push(IrqRule { pattern: "^ens1f0-TxRx-".into(), slots: Slots::Any });
    du2.devices.push(device("0000:00:04.0"));
    let p = plan(&server_spec(vec![du2]), &NodeFacts::default());
    assert!(p.workload("du2").unwrap().cpus.iter().all(node1));
}

#[test]
fn a_device_serves_one_workload() {
    let mut a = res("a", 100, 1, SmtIsolation::Shared, Locality::Any);
    a.devices.push(device("0000:3b:02.1"));
    let mut b = res("b", 100, 1, SmtIsolation::Shared, Locality::Any);
    b.devices.push(device("3b:02.1"));
    let p = plan(&server_spec(vec![a.clone(), b.clone()]), &NodeFacts::default());
    assert!(p.workload("a").is_some());
    let r = &p.rejection("b").unwrap().reason;
    assert!(r.contains("0000:3b:02.1 is already passed to workload `a`"), "{r}");
    // One at a time (the node service): refused while `a` holds it, admitted once `a` is refused.
    let mut planner = Planner::new(&server_spec(vec![a]), &NodeFacts::default());
    assert!(planner.admit(&b).unwrap_err().reason.contains("already passed to workload `a`"));
    let mut huge = res("a", 100, 64, SmtIsolation::Shared, Locality::Any);
    huge.devices.push(device("0000:3b:02.1"));
    let mut planner = Planner::new(&server_spec(vec![huge]), &NodeFacts::default());
    let b = Workload { name: "b2".into(), ..b };
    assert!(planner.admit(&b).is_ok(), "a refused workload holds no device");
}
