//! How a strategy lays a block's workloads out on this host's CPUs.
//!
//! A strategy is not applied here: [`layout`] decides CPU sets, thread slots, IRQ targets and
//! reservations (pure), and `specgen` turns that into an rtslice spec which the planner admits and
//! the host backend applies, the same path a user takes with `rtslice apply`.

use rtslice_emu::{Class, Profile, ThreadRole, ThreadSpec};
use rtslice_spec::SchedPolicy;
use serde::{Deserialize, Serialize};

use crate::experiment::{ReservationPeriod, Role, SloSpec, ThreadSlot, WorkloadSpec};
use crate::strategy::Strategy;

/// What the host offers that changes layouts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostShape {
    /// Online CPUs, ascending.
    pub cpus: Vec<u32>,
    /// CPUs isolated at boot (`/sys/devices/system/cpu/isolated`).
    pub isolated: Vec<u32>,
}

/// One thread rule: regex on thread name → concrete CPU, optionally real-time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadPin {
    pub pattern: String,
    /// A CPU of the placement's `cpus`; for a placement the planner places
    /// ([`Placement::planner_placed`]) the slot in the CPUs it will be given.
    pub cpu: u32,
    pub policy: SchedPolicy,
}

/// Where one workload instance goes under a strategy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// Instance name (workload name, with `-N` for replicas beyond the first).
    pub name: String,
    pub workload: String,
    pub role: Role,
    /// CPU set; None = no affinity at all (the kernel's default).
    pub cpus: Option<Vec<u32>>,
    pub threads: Vec<ThreadPin>,
    /// CPU that the workload's IRQs and RPS/XPS go to.
    pub irq_cpu: Option<u32>,
    pub shield: bool,
    pub isolcpus: bool,
    pub dedicated: bool,
    /// Reserved share of each CPU in `cpus`.
    pub reservation: Option<f64>,
    /// The spec's `reclaim` for the reservation (unset: the spec's default).
    #[serde(default)]
    pub reclaim: Option<bool>,
    /// The reservation's period (unset: `specgen::RESERVATION_PERIOD`).
    #[serde(default)]
    pub period: Option<ReservationPeriod>,
    /// The planner sizes the reservation from this SLO and profile (`slo` strategy).
    #[serde(default)]
    pub slo: Option<SloSpec>,
}

impl Placement {
    /// The planner chooses this placement's CPU (a reservation or an SLO without a CPU set).
    pub fn planner_placed(&self) -> bool {
        self.cpus.is_none() && (self.reservation.is_some() || self.slo.is_some())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Layout {
    pub strategy: Strategy,
    pub housekeeping: Vec<u32>,
    pub placements: Vec<Placement>,
}

/// Why a strategy cannot run on this host (reported as "skipped" with this reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Skip {
    #[error("the host did not boot with isolcpus= (/sys/devices/system/cpu/isolated is empty); add e.g. isolcpus={0} to the kernel command line to measure this strategy")]
    NoIsolcpus(String),
    #[error("{0} needs at least 2 CPUs (one for housekeeping)")]
    TooFewCpus(&'static str),
    #[error("{strategy} sizes each vBS's reservation from its `slo` (deadline_miss_ratio and profile), and workload `{workload}` has none; add one (docs/bench.md)")]
    NoProfile { strategy: &'static str, workload: String },
}

/// Default reserved share of a CPU when a workload does not say (leaves room under the 0.95 cap
/// for the best-effort neighbour the frontier experiment measures).
pub const DEFAULT_RESERVATION: f64 = 0.6;

/// Thread slots of an emulator profile, mirroring study A's TA layout: τ1 alone, τ2 alone, τ3+τ4
/// together, non-RT threads together (where the NIC IRQs go under IA-TA). Names, classes and
/// priorities come from the emulator's [`Profile`] (the one thread model), so pinning a thread never
/// changes how it is scheduled, only where, and renaming a thread there moves its rule with it.
/// Unknown profile names give no slots (the experiment file's validation reports them).
pub fn profile_threads(profile: &str) -> Vec<ThreadSlot> {
    let Some(profile) = Profile::parse(profile) else {
        return vec![];
    };
    let threads = profile.threads(profile.defaults().workers);
    let mut slots: Vec<ThreadSlot> = Vec::new();
    let mut pool_done = false;
    for slot in 0..=NON_RT_SLOT {
        let in_slot: Vec<&ThreadSpec> = threads.iter().filter(|t| ta_slot(profile, t) == slot).collect();
        let mut names: Vec<&str> = Vec::new();
        for t in &in_slot {
            // Pool workers get the profile's pattern, which matches any pool size (`--workers`).
            if t.role == ThreadRole::Worker && profile.pool_thread_pattern().is_some() {
                if !pool_done {
                    pool_done = true;
                    slots.push(slot_for(profile.pool_thread_pattern().unwrap_or_default().to_string(), slot, t));
                }
            } else if !names.contains(&t.name.as_str()) {
                names.push(&t.name);
            }
        }
        if let Some(first) = in_slot.iter().find(|t| names.contains(&t.name.as_str())) {
            let pattern = if names.len() == 1 {
                format!("^{}$", names[0])
            } else {
                format!("^({})$", names.join("|"))
            };
            slots.push(slot_for(pattern, slot, first));
        }
    }
    slots
}

/// Slot of the non-real-time threads (the user plane and the control plane).
const NON_RT_SLOT: u32 = 3;

/// Study A's TA slot of a thread by what it does: 0 the TTI clock, 1 the main per-TTI processing,
/// 2 the real-time helpers and the stage after it, 3 everything that is not real-time. A stack's
/// workers are its main processing when it has no L1 thread (srsENB: whole-TTI workers) and helpers
/// otherwise (OAI NR: code-block decoding for L1_rx_thread).
fn ta_slot(profile: Profile, t: &ThreadSpec) -> u32 {
    if t.class == Class::Other {
        return NON_RT_SLOT;
    }
    let has_l1 = profile.threads(0).iter().any(|x| matches!(x.role, ThreadRole::L1 | ThreadRole::L1Tx));
    match t.role {
        ThreadRole::Clock => 0,
        ThreadRole::L1 | ThreadRole::L1Tx => 1,
        ThreadRole::Worker if !has_l1 => 1,
        ThreadRole::Worker | ThreadRole::FrontEnd | ThreadRole::DlBackEnd | ThreadRole::Stack => 2,
        ThreadRole::UserPlaneTx | ThreadRole::UserPlaneRx | ThreadRole::Control => NON_RT_SLOT,
    }
}

/// The rule of a slot; all threads of a slot share class and priority in every profile (the test
/// `slots_keep_the_profile_classes` holds this), so the first thread's are the slot's.
fn slot_for(pattern: String, slot: u32, t: &ThreadSpec) -> ThreadSlot {
    let priority = u32::try_from(t.priority).unwrap_or(0);
    let policy = match t.class {
        Class::Other => SchedPolicy::Other { nice: None, share: None, period: None },
        Class::Fifo => SchedPolicy::fifo(priority),
        Class::Rr => SchedPolicy::rr(priority),
    };
    ThreadSlot { pattern, slot, policy }
}

fn workload_threads(w: &WorkloadSpec) -> Vec<ThreadSlot> {
    if !w.threads.is_empty() {
        return w.threads.clone();
    }
    w.emulate.as_ref().map(|e| profile_threads(&e.profile)).unwrap_or_default()
}

/// Splits `region` among `shares` (in order, largest-first not assumed): each gets at least one
/// CPU, taken from the top of the region (study A puts the most critical vBBU on the highest CPUs);
/// when CPUs run out, later ones share the lowest CPU of the region.
pub fn partition(region: &[u32], shares: &[u32]) -> Vec<Vec<u32>> {
    if region.is_empty() {
        return shares.iter().map(|_| vec![]).collect();
    }
    let total: u32 = shares.iter().sum::<u32>().max(1);
    let m = region.len();
    let mut out = Vec::new();
    let mut top = m; // exclusive upper index of what is still free
    for (i, &sh) in shares.iter().enumerate() {
        let remaining_others = shares.len() - i - 1;
        let ideal = ((sh as f64 / total as f64) * m as f64).round() as usize;
        // Leave at least one CPU for each later workload when there are enough CPUs.
        let cap = top.saturating_sub(remaining_others.min(top.saturating_sub(1)));
        let k = ideal.clamp(1, cap.max(1));
        if top == 0 {
            out.push(vec![region[0]]);
            continue;
        }
        let k = k.min(top);
        out.push(region[top - k..top].to_vec());
        top -= k;
    }
    out
}

/// Lays out a block's workloads (with replica counts) under a strategy on this host.
pub fn layout(strategy: Strategy, workloads: &[(WorkloadSpec, u32)], host: &HostShape) -> Result<Layout, Skip> {
    let n = host.cpus.len();
    if strategy.needs_housekeeping() && n < 2 {
        return Err(Skip::TooFewCpus(strategy.name()));
    }
    if strategy.sizes_from_profile() {
        if let Some((w, _)) = workloads.iter().find(|(w, _)| w.role == Role::Measured && w.slo.is_none()) {
            return Err(Skip::NoProfile { strategy: strategy.name(), workload: w.name.clone() });
        }
    }
    if strategy == Strategy::Isolcpus && host.isolated.is_empty() {
        let last = host.cpus.last().copied().unwrap_or(1);
        return Err(Skip::NoIsolcpus(format!("{last}")));
    }
    // Study A keeps the vBBU on half of an 8-CPU server and the rest of the system on the other
    // half; below 4 CPUs that leaves too little to compare layouts, so sharing strategies use all.
    let housekeeping: Vec<u32> = if strategy.needs_housekeeping() || n >= 4 { host.cpus[..1].to_vec() } else { vec![] };
    let region: Vec<u32> = match strategy {
        Strategy::Isolcpus => host.isolated.clone(),
        _ if n >= 4 => host.cpus[n / 2..].to_vec(),
        _ => host.cpus.iter().copied().filter(|c| !housekeeping.contains(c)).collect(),
    };
    // Expand replicas into instances.
    let mut instances: Vec<(String, &WorkloadSpec)> = Vec::new();
    for (w, replicas) in workloads {
        for r in 0..*replicas {
            let name = if r == 0 { w.name.clone() } else { format!("{}-{}", w.name, r + 1) };
            instances.push((name, w));
        }
    }
    let measured: Vec<usize> = instances.iter().enumerate().filter(|(_, (_, w))| w.role == Role::Measured).map(|(i, _)| i).collect();
    let neighbour_in_region = matches!(strategy, Strategy::Wide | Strategy::Thread | Strategy::IrqWide | Strategy::IrqThread);
    // Which instances get a slice of the region: measured ones always; under orthogonal wide/thread
    // layouts neighbours too (study A's container A got its own CPU).
    let sliced: Vec<usize> = instances
        .iter()
        .enumerate()
        .filter(|(_, (_, w))| w.role == Role::Measured || neighbour_in_region)
        .map(|(i, _)| i)
        .collect();
    let shares: Vec<u32> = sliced.iter().map(|&i| instances[i].1.share).collect();
    let slices = partition(&region, &shares);
    let all_cpus = host.cpus.clone();
    let outside: Vec<u32> = {
        let taken: Vec<u32> = measured
            .iter()
            .filter_map(|i| sliced.iter().position(|s| s == i).map(|p| slices[p].clone()))
            .flatten()
            .collect();
        let rest: Vec<u32> = all_cpus.iter().copied().filter(|c| !taken.contains(c) && (n < 4 || !housekeeping.contains(c))).collect();
        if rest.is_empty() {
            housekeeping.clone()
        } else {
            rest
        }
    };
    let mut placements = Vec::new();
    for (i, (name, w)) in instances.iter().enumerate() {
        let slice = sliced.iter().position(|s| *s == i).map(|p| slices[p].clone());
        let mut p = Placement {
            name: name.clone(),
            workload: w.name.clone(),
            role: w.role,
            cpus: None,
            threads: vec![],
            irq_cpu: None,
            shield: false,
            isolcpus: false,
            dedicated: false,
            reservation: None,
            reclaim: None,
            period: None,
            slo: None,
        };
        if w.role == Role::Neighbour {
            p.cpus = match strategy {
                Strategy::None | Strategy::Irq | Strategy::Reservation | Strategy::Peak | Strategy::Slo | Strategy::ClosedLoop => None,
                Strategy::Shield | Strategy::Dedicated | Strategy::Isolcpus => Some(outside.clone()),
                _ => slice,
            };
            placements.push(p);
            continue;
        }
        let set = slice.unwrap_or_default();
        // Real-time threads run inside a reservation, and so does a pool given a share of it as CFS
        // bandwidth (an `other` rule with a `share`); the rest stays as the stack set it.
        let rt_pins = |set: &[u32]| -> Vec<ThreadPin> {
            workload_threads(w)
                .into_iter()
                .filter(|t| t.rt() || matches!(t.policy, SchedPolicy::Other { share: Some(_), .. }))
                .map(|t| ThreadPin { cpu: set[t.slot as usize % set.len()], pattern: t.pattern, policy: t.policy })
                .collect()
        };
        match strategy {
            Strategy::None => {}
            Strategy::Irq => p.irq_cpu = set.last().copied(),
            Strategy::Wide | Strategy::IrqWide => p.cpus = Some(set.clone()),
            Strategy::Thread | Strategy::IrqThread => {
                p.cpus = Some(set.clone());
                p.threads = workload_threads(w)
                    .into_iter()
                    .map(|t| ThreadPin { cpu: set[t.slot as usize % set.len()], pattern: t.pattern, policy: t.policy })
                    .collect();
            }
            Strategy::Shield => {
                p.cpus = Some(set.clone());
                p.shield = true;
            }
            Strategy::Isolcpus => {
                p.cpus = Some(set.clone());
                p.isolcpus = true;
            }
            Strategy::Dedicated => {
                p.cpus = Some(set.clone());
                p.dedicated = true;
            }
            Strategy::Reservation => {
                p.cpus = Some(set.clone());
                p.reservation = Some(w.reservation.unwrap_or(DEFAULT_RESERVATION));
                p.reclaim = w.reclaim;
                p.period = w.period;
                p.threads = rt_pins(&set);
            }
            // One reservation on one CPU per vBS, the CPU chosen by the planner (worst fit), so the
            // vBS spread over every CPU the cap leaves room on: that is the density question. The
            // threads share the reservation: every rule points at its only slot.
            Strategy::Peak | Strategy::Slo | Strategy::ClosedLoop => {
                let slo = w.slo.clone().expect("checked above: every measured workload has an slo");
                if strategy == Strategy::Peak {
                    p.reservation = Some(slo.profile.execution.max.as_nanos() as f64 / slo.profile.period.as_nanos() as f64);
                } else {
                    p.slo = Some(slo);
                }
                p.threads = rt_pins(&[0]);
            }
        }
        if strategy.steers_irqs() && strategy != Strategy::Irq {
            p.irq_cpu = set.last().copied();
        }
        placements.push(p);
    }
    Ok(Layout { strategy, housekeeping, placements })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::EmulateSpec;
    use crate::strategy::ALL;
    use proptest::prelude::{prop_assert, prop_assert_eq, proptest};

    fn vbs(name: &str, share: u32) -> WorkloadSpec {
        crate::experiment::test_vbs(name, share)
    }

    fn host(n: u32) -> HostShape {
        HostShape { cpus: (0..n).collect(), isolated: vec![] }
    }

    #[test]
    fn study_a_thread_affinity_on_eight_cpus() {
        let l = layout(Strategy::IrqThread, &[(vbs("vbbu", 1), 1)], &host(8)).unwrap();
        let p = &l.placements[0];
        assert_eq!(p.cpus, Some(vec![4, 5, 6, 7]));
        let cpu_of = |pat: &str| p.threads.iter().find(|t| t.pattern.contains(pat)).unwrap().cpu;
        assert_eq!(cpu_of("ru-thread"), 4);
        assert_eq!(cpu_of("lte-softmodem"), 5);
        assert_eq!(cpu_of("fep_processing"), 6);
        assert_eq!(cpu_of("TASK_"), 7);
        assert_eq!(p.irq_cpu, Some(7));
    }

    #[test]
    fn cloud_ran_orthogonal_on_eight_cpus() {
        let mut a = vbs("A", 1);
        a.role = Role::Neighbour;
        a.emulate = None;
        a.command = Some(vec!["stress-ng".into()]);
        let l = layout(Strategy::IrqWide, &[(vbs("vbbu1", 4), 1), (vbs("vbbu2", 2), 1), (a, 1)], &host(8)).unwrap();
        // Region {4..7} on 8 CPUs: vbbu1 gets the top, the others follow downwards.
        let cpus: Vec<_> = l.placements.iter().map(|p| p.cpus.clone().unwrap()).collect();
        assert_eq!(cpus[0], vec![6, 7]);
        assert_eq!(cpus[1], vec![5]);
        assert_eq!(cpus[2], vec![4]);
        assert_eq!(l.placements[0].irq_cpu, Some(7));
    }

    #[test]
    fn two_cpu_host_shield_keeps_housekeeping() {
        let l = layout(Strategy::Shield, &[(vbs("vbs", 1), 1)], &host(2)).unwrap();
        assert_eq!(l.housekeeping, vec![0]);
        assert_eq!(l.placements[0].cpus, Some(vec![1]));
        assert!(l.placements[0].shield);
        let l = layout(Strategy::Thread, &[(vbs("vbs", 1), 1)], &host(2)).unwrap();
        assert_eq!(l.placements[0].cpus, Some(vec![0, 1]));
    }

    #[test]
    fn isolcpus_is_skipped_without_boot_isolation() {
        let e = layout(Strategy::Isolcpus, &[(vbs("vbs", 1), 1)], &host(2)).unwrap_err();
        assert!(e.to_string().contains("isolcpus="));
        let h = HostShape { cpus: vec![0, 1], isolated: vec![1] };
        assert_eq!(layout(Strategy::Isolcpus, &[(vbs("vbs", 1), 1)], &h).unwrap().placements[0].cpus, Some(vec![1]));
    }

    #[test]
    fn dedicated_neighbour_goes_elsewhere() {
        let mut nb = vbs("nb", 1);
        nb.role = Role::Neighbour;
        let l = layout(Strategy::Dedicated, &[(vbs("vbs", 1), 1), (nb, 1)], &host(2)).unwrap();
        assert_eq!(l.placements[0].cpus, Some(vec![1]));
        assert!(l.placements[0].dedicated);
        assert_eq!(l.placements[1].cpus, Some(vec![0]));
    }

    fn emulated(profile: Profile) -> WorkloadSpec {
        let mut w = vbs("vbs", 1);
        w.emulate = Some(EmulateSpec { profile: profile.name().into(), args: vec![] });
        w
    }

    /// Thread-affinity strategies pin by name: a rule that matches no thread the emulator starts
    /// pins nothing, and every run still "works". So every rule of every strategy must match a
    /// thread of its profile, at the default pool size and at a larger one (`--workers`).
    #[test]
    fn every_thread_pattern_matches_a_thread_of_its_profile() {
        for profile in Profile::ALL {
            let default_pool = profile.defaults().workers;
            for workers in [default_pool, default_pool + 3] {
                let names: Vec<String> = profile.threads(workers).into_iter().map(|t| t.name).collect();
                for s in ALL {
                    let Ok(l) = layout(*s, &[(emulated(profile), 1)], &host(8)) else { continue };
                    for pin in &l.placements[0].threads {
                        let re = regex::Regex::new(&pin.pattern).unwrap();
                        assert!(
                            names.iter().any(|n| re.is_match(n)),
                            "{s} on {} ({workers} workers): `{}` matches none of {names:?}",
                            profile.name(),
                            pin.pattern
                        );
                    }
                }
            }
        }
    }

    /// The other direction: every real-time thread of a profile is under exactly one rule of the
    /// thread strategy, and that rule keeps the class and priority the stack gives the thread.
    #[test]
    fn slots_keep_the_profile_classes() {
        for profile in Profile::ALL {
            let slots = profile_threads(profile.name());
            let res: Vec<(regex::Regex, &ThreadSlot)> =
                slots.iter().map(|sl| (regex::Regex::new(&sl.pattern).unwrap(), sl)).collect();
            for t in profile.threads(profile.defaults().workers + 2) {
                let rules: Vec<&&ThreadSlot> = res.iter().filter(|(re, _)| re.is_match(&t.name)).map(|(_, sl)| sl).collect();
                if t.class == Class::Other {
                    assert!(rules.iter().all(|r| !r.rt()), "{}: {} is best effort", profile.name(), t.name);
                    continue;
                }
                assert_eq!(rules.len(), 1, "{}: {} under {} rules", profile.name(), t.name, rules.len());
                let want = match t.class {
                    Class::Fifo => SchedPolicy::fifo(t.priority as u32),
                    Class::Rr => SchedPolicy::rr(t.priority as u32),
                    Class::Other => unreachable!(),
                };
                assert_eq!(rules[0].policy, want, "{}: {}", profile.name(), t.name);
            }
        }
    }

    /// The shipped deadline-vs-dedicated experiment's `*-clock` blocks write their thread rules out
    /// to give the clock thread a period of its own: apart from that period they must be the
    /// profile's rules, or the cells would compare two different layouts.
    #[test]
    fn the_clock_period_blocks_differ_from_the_profile_only_by_the_clock_period() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/experiments/deadline-vs-dedicated.yaml");
        let exp = crate::experiment::Experiment::load(std::path::Path::new(path)).unwrap();
        let mut checked = 0;
        for b in exp.blocks.iter().filter(|b| b.name.ends_with("-clock")) {
            for w in &b.workloads {
                let profile = &w.emulate.as_ref().expect("an emulated vBS").profile;
                let mut want = profile_threads(profile);
                assert!(matches!(want[0].policy, SchedPolicy::Fifo { .. } | SchedPolicy::Rr { .. }), "{profile}: slot 0 is the clock");
                match &mut want[0].policy {
                    SchedPolicy::Fifo { period, .. } | SchedPolicy::Rr { period, .. } => *period = Some(std::time::Duration::from_micros(250)),
                    _ => unreachable!(),
                }
                assert_eq!(w.threads, want, "block {}", b.name);
                checked += 1;
            }
        }
        assert_eq!(checked, 2, "oai-lte and nr-gnb");
    }

    #[test]
    fn profile_aliases_give_the_same_slots() {
        assert_eq!(profile_threads("oai"), profile_threads("oai-lte"));
        assert_eq!(profile_threads("gnb"), profile_threads("nr-gnb"));
        assert!(profile_threads("no-such-stack").is_empty());
    }

    /// `peak` and `slo` give each vBS one reservation the planner places, its real-time threads on
    /// the reservation's only slot; `peak` at the profile's max per period, `slo` unsized.
    #[test]
    fn profile_sized_strategies_leave_the_cpu_to_the_planner() {
        let mut nb = vbs("nb", 1);
        nb.role = Role::Neighbour;
        for s in [Strategy::Peak, Strategy::Slo] {
            let l = layout(s, &[(vbs("vbs", 1), 3), (nb.clone(), 1)], &host(2)).unwrap();
            let v: Vec<&Placement> = l.placements.iter().filter(|p| p.role == Role::Measured).collect();
            assert_eq!(v.len(), 3);
            for p in v {
                assert!(p.planner_placed(), "{s}: {p:?}");
                assert!(!p.threads.is_empty() && p.threads.iter().all(|t| t.cpu == 0 && t.policy != SchedPolicy::Other { nice: None, share: None, period: None }));
                match s {
                    Strategy::Peak => assert_eq!((p.reservation, p.slo.is_some()), (Some(0.45), false)),
                    _ => assert_eq!((p.reservation, p.slo.is_some()), (None, true)),
                }
            }
            assert_eq!(l.placements[3].cpus, None, "the neighbour may use what the reservations leave");
        }
        let mut bare = vbs("vbs", 1);
        bare.slo = None;
        let e = layout(Strategy::Slo, &[(bare, 1)], &host(2)).unwrap_err();
        assert!(e.to_string().contains("`slo`") && e.to_string().contains("vbs"), "{e}");
    }

    /// Under `reservation`, a rule giving a pool a share of the reservation as CFS bandwidth is part
    /// of it (the pool's threads are forced to SCHED_OTHER and bounded by the quota); an `other` rule
    /// without a share is not (those threads keep what the stack set).
    #[test]
    fn a_reservation_keeps_its_pool_rule_and_drops_plain_other_rules() {
        let mut w = vbs("gnb", 1);
        w.threads = vec![
            ThreadSlot { pattern: "^ru$".into(), slot: 0, policy: SchedPolicy::fifo(97) },
            ThreadSlot { pattern: "^Tpool".into(), slot: 0, policy: SchedPolicy::Other { nice: None, share: Some(0.25), period: None } },
            ThreadSlot { pattern: "^TASK_".into(), slot: 0, policy: SchedPolicy::Other { nice: None, share: None, period: None } },
        ];
        let l = layout(Strategy::Reservation, &[(w, 1)], &host(2)).unwrap();
        let kept: Vec<&str> = l.placements[0].threads.iter().map(|t| t.pattern.as_str()).collect();
        assert_eq!(kept, ["^ru$", "^Tpool"]);
    }

    proptest! {
        #[test]
        fn partition_gives_everyone_cpus_inside_region(n in 1u32..16, shares in proptest::collection::vec(1u32..5, 1..6)) {
            let region: Vec<u32> = (0..n).collect();
            let parts = partition(&region, &shares);
            prop_assert_eq!(parts.len(), shares.len());
            for p in &parts {
                prop_assert!(!p.is_empty());
                prop_assert!(p.iter().all(|c| region.contains(c)));
            }
            // Orthogonal whenever there are enough CPUs for everyone.
            if shares.len() <= n as usize {
                let mut all: Vec<u32> = parts.iter().flatten().copied().collect();
                let len = all.len();
                all.sort();
                all.dedup();
                prop_assert_eq!(all.len(), len);
            }
        }

        #[test]
        fn every_strategy_lays_out_on_any_host(n in 2u32..16, idx in 0usize..ALL.len()) {
            let s = ALL[idx];
            match layout(s, &[(vbs("vbs", 1), 1)], &host(n)) {
                Ok(l) => {
                    for p in &l.placements {
                        if let Some(c) = &p.cpus {
                            prop_assert!(!c.is_empty());
                            prop_assert!(c.iter().all(|x| *x < n));
                            if s == Strategy::Shield || s == Strategy::Dedicated {
                                prop_assert!(!c.iter().any(|x| l.housekeeping.contains(x)));
                            }
                        }
                    }
                }
                Err(_) => prop_assert_eq!(s, Strategy::Isolcpus),
            }
        }
    }
}
