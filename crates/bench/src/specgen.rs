//! Turns a strategy's [`Layout`] into an rtslice spec (the same format users write), adopting the
//! already started workload processes by PID. The runner plans it (admission control) and applies
//! it with the host backend; nothing here touches the host.

use std::time::Duration;

use rtslice_spec::{
    BestEffort, Dedicated, Demand, Isolation, IrqRule, Launch, NetRule, Node, NodeCpus, Reservation, Slo, Slots, Spec,
    ThreadRule, Workload,
};
use serde::{Deserialize, Serialize};

use crate::experiment::ReservationPeriod;
use crate::layout::{Layout, Placement};
use crate::strategy::Strategy;

/// Which IRQs and interfaces the IRQ-steering strategies move to the workload's last CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Steering {
    /// Regexes on IRQ action names (/proc/interrupts), e.g. a NIC's queue IRQs.
    #[serde(default = "default_irqs")]
    pub irqs: Vec<String>,
    /// Regexes on interface names whose RPS/XPS masks are set (virtual NICs have no IRQs of their
    /// own: their receive work runs in softirq where RPS puts it).
    #[serde(default = "default_interfaces")]
    pub interfaces: Vec<String>,
}

/// virtio-net queue IRQs are named `virtioN-input.Q` / `virtioN-output.Q`; physical NICs
/// commonly `ethX-TxRx-Q` or `<driver>-<if>-TxRx-Q`.
pub fn default_irqs() -> Vec<String> {
    vec![r"^virtio[0-9]+-(input|output)\.[0-9]+$".into(), r"-TxRx-[0-9]+$".into()]
}

/// The veth pairs of `rtslice noise kernel` and of the bench's own ping target.
pub fn default_interfaces() -> Vec<String> {
    vec![r"^rts".into()]
}

impl Default for Steering {
    fn default() -> Self {
        Steering { irqs: default_irqs(), interfaces: default_interfaces() }
    }
}

/// Period of reservations the bench creates: one LTE TTI, so a throttled vBS loses at most one
/// subframe's worth of time before its budget is replenished.
pub const RESERVATION_PERIOD: Duration = Duration::from_millis(1);

fn slot_of(set: &[u32], cpu: u32) -> u32 {
    set.iter().position(|c| *c == cpu).unwrap_or(0) as u32
}


/// Builds the spec for `layout`, with each placement's process given by `pid_of(instance name)`.
/// Returns None for the `none` strategy: the stock host is the baseline and nothing is applied.
pub fn spec_for(layout: &Layout, host_cpus: &[u32], steering: &Steering, pid_of: &dyn Fn(&str) -> Option<u32>) -> Option<Spec> {
    if layout.strategy == Strategy::None {
        return None;
    }
    // On small hosts the layout's housekeeping CPU is where best-effort neighbours must be able to
    // go; declaring it housekeeping would leave them no CPU at all.
    let housekeeping = if host_cpus.len() >= 4 { layout.housekeeping.clone() } else { vec![] };
    let shared: Vec<u32> = host_cpus.iter().copied().filter(|c| !housekeeping.contains(c)).collect();
    let node = Node { name: Some("rtslice-bench".into()), cpus: NodeCpus::List(host_cpus.to_vec()), housekeeping, ..Node::default() };
    let mut spec = Spec { node, ..Spec::default() };
    let default_period = spec.node.default_period;
    for p in &layout.placements {
        spec.workloads.push(workload(layout.strategy, p, &shared, steering, pid_of(&p.name), default_period));
    }
    Some(spec)
}

fn workload(strategy: Strategy, p: &Placement, shared: &[u32], steering: &Steering, pid: Option<u32>, default_period: Duration) -> Workload {
    let set: Vec<u32> = p.cpus.clone().unwrap_or_else(|| shared.to_vec());
    let mut w = Workload { name: p.name.clone(), launch: pid.map(|pid| Launch::Pid { pid }), ..Workload::default() };
    if let Some(slo) = &p.slo {
        // No demand: the planner sizes the reservation from the SLO and the profile.
        w.slo = Some(Slo::DeadlineMissRatio(slo.deadline_miss_ratio));
        w.profile = Some(slo.profile.clone());
    }
    // A shield or isolated CPUs belong to the workload alone: the planner takes them whole.
    w.demand = if p.slo.is_some() {
        None
    } else { Some(if p.dedicated || p.shield || p.isolcpus {
        Demand::Dedicated(Dedicated { count: None, cpus: Some(set.clone()) })
    } else if let Some(share) = p.reservation {
        // `period: default` writes none: the node's default period applies, as in a user's spec
        // that gives only the runtime.
        let (period, written) = match p.period {
            None => (RESERVATION_PERIOD, true),
            Some(ReservationPeriod::Written(d)) => (d, true),
            Some(ReservationPeriod::NodeDefault) => (default_period, false),
        };
        Demand::Reservation(Reservation {
            runtime: Duration::from_nanos((period.as_nanos() as f64 * share).round() as u64),
            period: written.then_some(period),
            // Planner-placed: one CPU of its choice.
            count: p.cpus.is_none().then_some(1),
            cpus: p.cpus.clone(),
            reclaim: p.reclaim,
        })
    } else {
        Demand::BestEffort(BestEffort { weight: None, cap: None, cpus: p.cpus.clone() })
    }) };
    w.isolation = Isolation {
        shield: p.shield,
        isolcpus: p.isolcpus,
        wide_affinity: matches!(strategy, Strategy::Wide | Strategy::IrqWide) && p.cpus.is_some(),
        ..Isolation::default()
    };
    w.threads = p
        .threads
        .iter()
        .map(|t| {
            let slot = if p.planner_placed() { t.cpu } else { slot_of(&set, t.cpu) };
            ThreadRule { pattern: t.pattern.clone(), policy: t.policy.clone(), slots: Slots::List(vec![slot]) }
        })
        .collect();
    if let Some(cpu) = p.irq_cpu {
        let slots = Slots::List(vec![slot_of(&set, cpu)]);
        w.irqs = steering.irqs.iter().map(|r| IrqRule { pattern: r.clone(), slots: slots.clone() }).collect();
        w.net = steering
            .interfaces
            .iter()
            .map(|i| NetRule { interface: i.clone(), rps: Some(slots.clone()), xps: Some(slots.clone()) })
            .collect();
    }
    w
}

/// The closed-loop strategy's spec from the `slo` one and its plan: each SLO workload starts from the
/// reservation the planner sized (its runtime, period and CPU, reclaiming as sized) which is also its
/// guaranteed minimum, keeps its SLO as the loop's miss target (no profile: nothing is sized again),
/// and adapts up to the profile's peak every `interval` (the node service's `adapt:`).
pub fn adapting(spec: &Spec, plan: &rtslice_plan::Plan, interval: Duration) -> Result<Spec, String> {
    let mut out = spec.clone();
    for w in out.workloads.iter_mut().filter(|w| w.slo.is_some() && w.demand.is_none()) {
        let wp = plan.workloads.iter().find(|p| p.name == w.name).ok_or_else(|| format!("{}: not in the plan", w.name))?;
        let rtslice_plan::Allocation::Reservation { reservation, .. } = &wp.allocation else {
            return Err(format!("{}: the planner gave it no reservation to start the loop from", w.name));
        };
        let peak = w.profile.as_ref().map(|p| p.execution.max).unwrap_or(reservation.runtime);
        // The loop's ceiling: the profile's peak, within the period under the node's cap.
        let ceiling = reservation.period.mul_f64(spec.node.cap.clamp(0.0, 1.0));
        let max = peak.min(ceiling).max(reservation.runtime);
        w.demand = Some(Demand::Reservation(Reservation {
            runtime: reservation.runtime,
            period: Some(reservation.period),
            count: None,
            cpus: Some(wp.cpus.clone()),
            reclaim: Some(wp.reclaim),
        }));
        w.profile = None;
        w.adapt = Some(rtslice_spec::Adapt { min: Some(reservation.runtime), max: Some(max), interval });
    }
    Ok(out)
}

/// The spec as YAML text in the documented format (what `rtslice apply` reads).
pub fn to_yaml(spec: &Spec) -> Result<String, String> {
    // The spec crate's own writer: one YAML stack for reading and writing specs.
    Ok(rtslice_spec::to_yaml(spec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::{Role, WorkloadSpec};
    use crate::layout::{layout, HostShape};
    use crate::strategy::ALL;
    use rtslice_spec::SchedPolicy;

    fn vbs() -> WorkloadSpec {
        crate::experiment::test_vbs("vbs", 1)
    }

    fn neighbour() -> WorkloadSpec {
        WorkloadSpec { name: "nb".into(), emulate: None, command: Some(vec!["stress-ng".into()]), role: Role::Neighbour, ..vbs() }
    }

    /// Every strategy's spec must survive the spec crate's own parser and the planner must admit it
    /// on the host size it was made for — on 2 CPUs (this machine) and on study A's 8.
    #[test]
    fn generated_specs_parse_and_are_admitted() {
        for n in [2u32, 4, 8] {
            let host = HostShape { cpus: (0..n).collect(), isolated: vec![n - 1] };
            for s in ALL {
                let l = layout(*s, &[(vbs(), 1), (neighbour(), 1)], &host).unwrap();
                let Some(spec) = spec_for(&l, &host.cpus, &Steering::default(), &|_| Some(4242)) else {
                    assert_eq!(*s, Strategy::None);
                    continue;
                };
                let yaml = to_yaml(&spec).unwrap();
                let parsed = rtslice_spec::parse(&yaml, "generated.yaml").unwrap_or_else(|e| panic!("{s} on {n} CPUs:\n{yaml}\n{e}"));
                assert_eq!(parsed.workloads.len(), 2);
                let facts = rtslice_plan::NodeFacts { online: host.cpus.clone(), isolcpus: host.isolated.clone(), ..Default::default() };
                let plan = rtslice_plan::plan(&parsed, &facts);
                assert!(plan.all_admitted(), "{s} on {n} CPUs: {:?}\n{yaml}", plan.rejected);
                let vb = plan.workload("vbs").unwrap();
                if let Some(cpus) = &l.placements[0].cpus {
                    assert_eq!(&vb.cpus, cpus, "{s} on {n} CPUs");
                }
            }
        }
    }

    /// A workload's `period` is its reservation's (issue 39's eNB wrote 10 ms); without one the
    /// reservation runs every TTI. The period reaches the spec, and through it the mechanism apply picks.
    #[test]
    fn a_workload_period_is_its_reservations_and_the_tti_is_the_default() {
        let host = HostShape { cpus: vec![0, 1], isolated: vec![] };
        let period_of = |w: WorkloadSpec| {
            let l = layout(Strategy::Reservation, &[(w, 1)], &host).unwrap();
            let spec = spec_for(&l, &host.cpus, &Steering::default(), &|_| Some(4242)).unwrap();
            match &spec.workloads[0].demand {
                Some(rtslice_spec::Demand::Reservation(r)) => (r.runtime, r.period),
                other => panic!("expected a reservation, got {other:?}"),
            }
        };
        let ms = std::time::Duration::from_millis;
        let us = std::time::Duration::from_micros;
        assert_eq!(period_of(WorkloadSpec { reservation: Some(0.9), ..vbs() }), (us(900), Some(ms(1))));
        let written = |d| Some(ReservationPeriod::Written(d));
        assert_eq!(period_of(WorkloadSpec { reservation: Some(0.9), period: written(ms(10)), ..vbs() }), (ms(9), Some(ms(10))));
        // `period: default`: the spec writes only the runtime, 0.9 of the node's default period, and
        // the planner gives it that period.
        let natural = WorkloadSpec { reservation: Some(0.9), period: Some(ReservationPeriod::NodeDefault), ..vbs() };
        assert_eq!(period_of(natural.clone()), (rtslice_spec::DEFAULT_PERIOD.mul_f64(0.9), None));
        let l = layout(Strategy::Reservation, &[(natural, 1)], &host).unwrap();
        let spec = spec_for(&l, &host.cpus, &Steering::default(), &|_| Some(4242)).unwrap();
        let plan = rtslice_plan::plan(&spec, &rtslice_plan::NodeFacts::with_cpus(2));
        match &plan.workloads[0].allocation {
            rtslice_plan::Allocation::Reservation { reservation, .. } => {
                assert_eq!((reservation.runtime, reservation.period), (ms(90), rtslice_spec::DEFAULT_PERIOD))
            }
            other => panic!("expected a reservation, got {other:?}"),
        }
    }

    /// The `slo` strategy's spec states the SLO and the profile and no demand: the planner sizes
    /// each vBS's reservation and places it, one CPU each, spread by worst fit.
    #[test]
    fn slo_spec_is_sized_and_placed_by_the_planner() {
        let host = HostShape { cpus: vec![0, 1], isolated: vec![] };
        let l = layout(Strategy::Slo, &[(vbs(), 2), (neighbour(), 1)], &host).unwrap();
        let spec = spec_for(&l, &host.cpus, &Steering::default(), &|_| Some(7)).unwrap();
        let w = &spec.workloads[0];
        assert_eq!((w.demand.as_ref(), w.slo), (None, Some(Slo::DeadlineMissRatio(1e-3))));
        assert!(w.profile.is_some());
        assert!(w.threads.iter().all(|t| t.slots == Slots::List(vec![0])));
        let parsed = rtslice_spec::parse(&to_yaml(&spec).unwrap(), "generated.yaml").unwrap();
        let facts = rtslice_plan::NodeFacts { online: host.cpus.clone(), ..Default::default() };
        let plan = rtslice_plan::plan(&parsed, &facts);
        assert!(plan.all_admitted(), "{:?}", plan.rejected);
        let (a, b) = (plan.workload("vbs").unwrap(), plan.workload("vbs-2").unwrap());
        assert!(a.sizing.is_some() && b.sizing.is_some());
        assert_ne!(a.cpus, b.cpus, "worst fit spreads the two reservations");
    }

    #[test]
    fn thread_strategy_keeps_rt_classes() {
        let host = HostShape { cpus: vec![0, 1], isolated: vec![] };
        let l = layout(Strategy::IrqThread, &[(vbs(), 1)], &host).unwrap();
        let spec = spec_for(&l, &host.cpus, &Steering::default(), &|_| Some(1)).unwrap();
        let w = &spec.workloads[0];
        assert_eq!(w.threads[0].policy, SchedPolicy::fifo(97));
        assert_eq!(w.threads[0].slots, Slots::List(vec![0]));
        assert_eq!(w.threads[1].slots, Slots::List(vec![1]));
        assert!(!w.irqs.is_empty() && !w.net.is_empty());
        assert_eq!(w.launch, Some(Launch::Pid { pid: 1 }));
    }

    #[test]
    fn the_closed_loop_starts_from_the_sized_reservation_and_adapts_up_to_the_peak() {
        let host = HostShape { cpus: vec![0, 1], isolated: vec![] };
        let l = layout(Strategy::ClosedLoop, &[(vbs(), 2), (neighbour(), 1)], &host).unwrap();
        let spec = spec_for(&l, &[0, 1], &Steering::default(), &|_| Some(1)).unwrap();
        let plan = rtslice_plan::plan(&spec, &rtslice_plan::NodeFacts { online: vec![0, 1], ..Default::default() });
        assert!(plan.all_admitted(), "{:?}", plan.rejected);
        let a = adapting(&spec, &plan, Duration::from_secs(1)).unwrap();
        let parsed = rtslice_spec::parse(&to_yaml(&a).unwrap(), "closed-loop.yaml").unwrap_or_else(|e| panic!("{e}"));
        for w in parsed.workloads.iter().filter(|w| w.slo.is_some()) {
            let sized = plan.workloads.iter().find(|p| p.name == w.name).unwrap();
            let rtslice_plan::Allocation::Reservation { reservation, .. } = &sized.allocation else { panic!() };
            let Some(Demand::Reservation(r)) = &w.demand else { panic!("{w:?}") };
            let ad = w.adapt.unwrap();
            assert_eq!((r.runtime, r.cpus.clone()), (reservation.runtime, Some(sized.cpus.clone())));
            assert_eq!(ad.min, Some(reservation.runtime));
            assert!(ad.max.unwrap() >= reservation.runtime && w.profile.is_none());
        }
    }
}
