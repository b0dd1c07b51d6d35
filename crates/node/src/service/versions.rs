//! How two versions of a workload compare, for the declarative apply's difference: each in the form
//! the node keeps (flavor resolved), the fields in which they differ, and whether one demand can
//! become the other in place.

use rtslice_spec::{Demand, Spec, Workload};

/// A workload as the node keeps it: its flavor resolved into its demand and memory, so comparing
/// two versions compares what they ask for, whatever flavors the specs define.
pub(super) fn normalized(spec: &Spec, w: &Workload) -> Workload {
    let mut n = w.clone();
    if n.flavor.is_some() {
        n.demand = spec.effective_demand(w);
        n.memory = spec.effective_memory(w);
        n.flavor = None;
        n.hints = Default::default();
    }
    n
}

/// The fields in which two versions of a workload differ.
pub(super) fn differing_fields(a: &Workload, b: &Workload) -> Vec<&'static str> {
    let mut v = Vec::new();
    let mut check = |name: &'static str, same: bool| {
        if !same {
            v.push(name);
        }
    };
    check("launch", a.launch == b.launch);
    check("demand", a.demand == b.demand);
    check("memory", a.memory == b.memory);
    check("isolation", a.isolation == b.isolation);
    check("threads", a.threads == b.threads);
    check("irqs", a.irqs == b.irqs);
    check("net", a.net == b.net);
    check("devices", a.devices == b.devices);
    check("cache", a.cache == b.cache && a.memory_bandwidth == b.memory_bandwidth);
    check("restart", a.restart == b.restart);
    v
}

/// Whether a demand can change into the other in place (a reservation stays one, dedicated CPUs stay
/// dedicated: the host's resize keeps a group's kind).
pub(super) fn same_kind(a: &Option<Demand>, b: &Option<Demand>) -> bool {
    matches!(
        (a, b),
        (Some(Demand::Reservation(_)), Some(Demand::Reservation(_))) | (Some(Demand::Dedicated(_)), Some(Demand::Dedicated(_)))
    )
}
