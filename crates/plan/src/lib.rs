//! rtslice-plan: pure, deterministic admission control and placement.
//!
//! [`plan`] takes a validated [`Spec`] and the [`NodeFacts`] only the host knows, and returns a
//! [`Plan`]: per-CPU real-time bandwidth accounting under the node's cap, worst/best/first-fit
//! placement of multi-CPU reservations (study B), whole dedicated CPUs, best-effort on what is
//! shared, thread/IRQ/RPS/XPS rules resolved to CPU ids, and for each refused workload the exact
//! reason and, when only fragmentation blocks it, the smallest defragmentation found.
//! No I/O, no clocks, no hash-order: the same input always gives the same plan. docs/plan.md
//! explains the algorithms and the JSON schema.

mod cache;
mod defrag;
mod foreign;
pub mod kernel;
mod place;
pub mod shares;
mod topo;
mod sizing;
mod types;

use std::time::Duration;

use rtslice_spec::{format_cpu_list, Demand, NodeCpus, SchedPolicy, Slots, Spec, Workload};

use crate::place::{
    best_effort_conflict, blocked, describe_free, hold_siblings, locality_warning, occupancy_note, place_in, placement_failure, sharers,
    smt_conflict, smt_note, tiers, topology_problems, why_not,
};
use crate::topo::Topo;

pub use cache::{contiguous, CacheDomainPlan, CachePlan, CacheShare, DomainMask, WorkloadCache};
pub use foreign::{foreign_on, ForeignBasis, ForeignRt};
pub use kernel::{plan_for_kernel, HcbsRoot, KernelFacts, KernelPlan, Mechanism};
pub use sizing::{model_profile, Sizing, SizingBasis, SizingFacts, SloTarget};
pub use types::*;

/// Bandwidth in fixed point (parts per billion of one CPU): exact sums, exact comparisons, and so
/// determinism and the "never above the cap" property hold without float tolerance games.
pub(crate) type Bw = u64;
pub(crate) const ONE: Bw = 1_000_000_000;

pub(crate) fn bw_of(runtime: Duration, period: Duration) -> Bw {
    // Round up: the accounting must never under-count what the kernel will enforce.
    let num = runtime.as_nanos() * ONE as u128;
    let den = period.as_nanos().max(1);
    num.div_ceil(den).min(u64::MAX as u128) as Bw
}

pub(crate) fn bw_f64(b: Bw) -> f64 {
    b as f64 / ONE as f64
}

/// Inverse of `bw_f64` (exact for every value `bw_f64` produces).
pub(crate) fn bw_from_f64(f: f64) -> Bw {
    (f * ONE as f64).round() as Bw
}

pub(crate) fn pct(b: Bw) -> String {
    let p = b as f64 * 100.0 / ONE as f64;
    if (p - p.round()).abs() < 0.05 {
        format!("{:.0}%", p)
    } else {
        format!("{:.1}%", p)
    }
}

/// Accounting state of one CPU while planning.
#[derive(Debug, Clone)]
pub(crate) struct CpuState {
    pub id: u32,
    pub housekeeping: bool,
    pub isolated: bool,
    pub exclusive: Option<usize>,
    /// (workload index, bandwidth), in admission order.
    pub shares: Vec<(usize, Bw)>,
    pub reserved: Bw,
    /// Real-time bandwidth of threads and groups rtslice did not place (see `foreign`).
    pub foreign: Bw,
    /// Kept idle for this workload, the SMT sibling of one of its `whole-core` CPUs.
    pub held: Option<usize>,
    /// Best-effort workloads whose cpuset includes this CPU (they hold no bandwidth, but
    /// `no-best-effort-sibling` and `whole-core` must see them).
    pub best_effort: Vec<usize>,
}

#[derive(Clone)]
pub(crate) struct State {
    pub cap: Bw,
    pub policy: FitPolicy,
    pub cpus: Vec<CpuState>,
    pub names: Vec<String>,
    /// Per workload index: may a defragmentation move its shares? Only free-choice reservations on
    /// shared CPUs: they may go to any shared CPU, which is exactly the set defrag considers.
    pub movable: Vec<bool>,
    /// Per workload index: refused only for lack of bandwidth on shared CPUs (a defrag may help).
    pub wants_defrag: Vec<bool>,
    /// Per workload index: its `isolation.smt` (best-effort admissions must respect it).
    pub smt: Vec<SmtIsolation>,
    pub topo: Topo,
}

impl State {
    pub fn free(&self, c: &CpuState) -> Bw {
        if blocked(c) {
            0
        } else {
            self.cap.saturating_sub(c.reserved).saturating_sub(c.foreign)
        }
    }
    fn idx(&self, cpu: u32) -> Option<usize> {
        self.cpus.binary_search_by_key(&cpu, |c| c.id).ok()
    }
}

/// What a workload asks for, normalized.
#[derive(Clone)]
enum Want {
    Reservation { runtime: Duration, period: Duration, k: usize, fixed: Option<Vec<u32>> },
    Dedicated { k: usize, fixed: Option<Vec<u32>> },
    BestEffort { weight: u32, cap: Option<f64>, fixed: Option<Vec<u32>> },
}

/// Plans `spec` on a node described by `facts`. Never fails: what cannot be admitted is in
/// `Plan::rejected` with the reason.
pub fn plan(spec: &Spec, facts: &NodeFacts) -> Plan {
    Planner::new(spec, facts).plan()
}

/// [`plan`] with SLO reservations sized under `sizing` (tick enforcement, for the model's comparisons;
/// [`plan`], [`plan_for_kernel`] and the node size for exact enforcement, the default).
pub fn plan_sized(spec: &Spec, facts: &NodeFacts, sizing: &SizingFacts) -> Plan {
    Planner::with_sizing(spec, facts, sizing).plan()
}

/// A plan that can keep taking workloads one at a time (an orchestrator's arrivals, study B's
/// RTShareFilter), without re-planning the ones already placed.
#[derive(Clone)]
pub struct Planner {
    spec: Spec,
    st: State,
    wants: Vec<Option<Want>>,
    /// Per workload, in spec order.
    results: Vec<Result<WorkloadPlan, Rejection>>,
    warnings: Vec<String>,
    node_cpus: Vec<u32>,
    housekeeping: Vec<u32>,
    isolcpus: Vec<u32>,
    sizing: SizingFacts,
    /// L3 ways per domain (`None`: the node has no cache allocation).
    cache: Option<cache::CacheState>,
}

/// A workload's demand as the planner places it: its `Want` (`None`: an unknown flavor), the SLO
/// sizing behind it, or why its SLO refuses it before placement.
fn demand_of(spec: &Spec, w: &Workload, cap: Bw, facts: &SizingFacts) -> (Option<Want>, Option<Sizing>, Option<String>) {
    let given = match &w.demand {
        Some(Demand::Reservation(r)) => Some(Reservation::new(r.runtime, r.period.unwrap_or(spec.node.default_period))),
        _ => None,
    };
    match sizing::size(w, given, cap, facts) {
        Ok(Some((r, s))) => (Some(want_of(&sizing::sized_demand(w, &r), spec)), Some(s), None),
        Ok(None) => (spec.effective_demand(w).map(|d| want_of(&d, spec)), None, None),
        Err(why) => (Some(want_of(&Demand::reservation(Duration::ZERO, spec.node.default_period, 1), spec)), None, Some(why)),
    }
}

impl Planner {
    /// Plans every workload of `spec` (see [`plan`]).
    pub fn new(spec: &Spec, facts: &NodeFacts) -> Planner {
        Planner::with_sizing(spec, facts, &SizingFacts::default())
    }

    /// [`Planner::new`], sizing SLO reservations for a kernel that enforces budgets as `sizing` says.
    pub fn with_sizing(spec: &Spec, facts: &NodeFacts, sizing: &SizingFacts) -> Planner {
        let mut warnings = Vec::new();
        let node_cpus: Vec<u32> = match &spec.node.cpus {
            NodeCpus::Discovered => sorted(facts.online.clone()),
            NodeCpus::List(l) => {
                let l = sorted(l.clone());
                if !facts.online.is_empty() {
                    let offline: Vec<u32> = l.iter().copied().filter(|c| !facts.online.contains(c)).collect();
                    if !offline.is_empty() {
                        warnings.push(format!(
                            "spec CPUs {} are not online on this host (online: {}); applying this plan here will fail",
                            format_cpu_list(&offline),
                            format_cpu_list(&facts.online)
                        ));
                    }
                }
                l
            }
        };
        let housekeeping: Vec<u32> = spec.node.housekeeping.iter().copied().filter(|c| node_cpus.contains(c)).collect();
        let isolcpus = sorted(facts.isolcpus.clone());
        let cap = (spec.node.cap.clamp(0.0, 1.0) * ONE as f64).round() as Bw;
        let wants_locality = spec.workloads.iter().any(|w| !w.isolation.locality.is_any());
        let topo = Topo::new(&node_cpus, spec.node.topology.as_ref(), facts.topology.as_ref(), wants_locality, &mut warnings);
        let mut st = State {
            cap,
            policy: spec.node.policy,
            cpus: node_cpus
                .iter()
                .map(|&id| CpuState {
                    id,
                    housekeeping: housekeeping.contains(&id),
                    isolated: isolcpus.contains(&id),
                    exclusive: None,
                    shares: Vec::new(),
                    reserved: 0,
                    foreign: bw_from_f64(foreign::foreign_on(&facts.foreign_rt, id)),
                    held: None,
                    best_effort: Vec::new(),
                })
                .collect(),
            names: spec.workloads.iter().map(|w| w.name.clone()).collect(),
            movable: vec![false; spec.workloads.len()],
            wants_defrag: vec![false; spec.workloads.len()],
            smt: spec.workloads.iter().map(|w| w.isolation.smt).collect(),
            topo,
        };
        for f in facts.foreign_rt.iter().filter(|f| f.per_cpu > 0.0) {
            let on: Vec<u32> = f.cpus.iter().copied().filter(|c| node_cpus.contains(c)).collect();
            if !on.is_empty() {
                warnings.push(format!(
                    "{} holds {} of CPU(s) {} ({}); planned as taken",
                    f.source,
                    pct(bw_from_f64(f.per_cpu)),
                    format_cpu_list(&on),
                    match f.basis {
                        ForeignBasis::Declared => "its declared budget",
                        ForeignBasis::Measured => "measured CPU time",
                    }
                ));
            }
        }

        let n = spec.workloads.len();
        let mut outcome: Vec<Option<Result<Vec<u32>, Rejection>>> = vec![None; n];
        let mut wants: Vec<Option<Want>> = Vec::with_capacity(n);
        let mut sizings: Vec<Option<Sizing>> = Vec::with_capacity(n);
        for (i, w) in spec.workloads.iter().enumerate() {
            let (want, sized, refused) = demand_of(spec, w, cap, sizing);
            if let Some(r) = precheck(spec, &node_cpus, w, want.is_some()) {
                outcome[i] = Some(Err(r));
            } else if let Some(why) = device_taken(spec.workloads[..i].iter(), w) {
                outcome[i] = Some(Err(reject(w, why)));
            } else if let Some(why) = refused {
                outcome[i] = Some(Err(reject(w, why)));
            }
            warnings.extend(locality_warning(&st, w));
            wants.push(want);
            sizings.push(sized);
        }

        // Order of admission (see docs/plan.md): requests naming their CPUs first, because they cannot go
        // elsewhere; then dedicated counts (whole empty CPUs); then free reservations in spec order
        // (study B's arrival order); best-effort last, on whatever stays shared.
        let phase = |want: &Want| match want {
            Want::Dedicated { fixed: Some(_), .. } => 0,
            Want::Reservation { fixed: Some(_), .. } => 1,
            Want::Dedicated { fixed: None, .. } => 2,
            Want::Reservation { fixed: None, .. } => 3,
            Want::BestEffort { .. } => 4,
        };
        // A dedicated count should not grab a CPU that a fixed request named (it came first there).
        let named: Vec<u32> = wants
            .iter()
            .flatten()
            .filter_map(|w| match w {
                Want::Reservation { fixed: Some(f), .. } | Want::Dedicated { fixed: Some(f), .. } => Some(f.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        for p in 0..=4 {
            for i in 0..n {
                if outcome[i].is_some() {
                    continue;
                }
                let Some(want) = &wants[i] else { continue };
                if phase(want) != p {
                    continue;
                }
                outcome[i] = Some(admit(&mut st, i, &spec.workloads[i], want, &named));
            }
        }

        // Defragmentation proposals against the final state: what the user would apply them to.
        for i in 0..n {
            if let (true, Some(Err(rej)), Some(want)) = (st.wants_defrag[i], &mut outcome[i], &wants[i]) {
                rej.defrag = propose_for(&st, want, &spec.workloads[i]);
            }
        }

        let mut cache = spec.node.cache.clone().or_else(|| facts.cache.clone()).map(|c| cache::CacheState::new(c, &node_cpus));
        let mut results = Vec::with_capacity(n);
        for (i, w) in spec.workloads.iter().enumerate() {
            results.push(match outcome[i].take().expect("every workload was decided") {
                Err(r) => Err(r),
                Ok(cpus) => {
                    let want = wants[i].as_ref().expect("admitted workloads have a demand");
                    resolve(spec, w, want, &cpus, &st, &mut warnings)
                        .map(|wp| WorkloadPlan { sizing: sizings[i].take(), ..wp })
                        .and_then(|wp| admit_cache(&mut cache, i, w, wp))
                        .map_err(|reason| {
                            // Rules that cannot be resolved on the CPUs it got, or no cache left:
                            // give the CPUs back.
                            release(&mut st, i);
                            reject(w, reason)
                        })
                }
            });
        }
        Planner { spec: spec.clone(), st, wants, results, warnings, node_cpus, housekeeping, isolcpus, sizing: *sizing, cache }
    }

    /// A live node's placed workloads come pinned where they run (`Demand::pinned_to`), which keeps
    /// them out of defragmentation proposals. Those named here may be proposed for a move — an
    /// operator re-deploys them elsewhere; nothing moves by itself — when a share of theirs could
    /// have gone to any shared CPU in the first place: a reservation, not shielded or in isolcpus,
    /// SMT shared, any locality (as a freshly placed one, `admit`).
    pub fn movable_in_proposals(&mut self, names: &[&str]) {
        for (i, w) in self.spec.workloads.iter().enumerate() {
            let iso = &w.isolation;
            if names.contains(&w.name.as_str())
                && matches!(self.wants.get(i), Some(Some(Want::Reservation { .. })))
                && !iso.shield
                && !iso.isolcpus
                && iso.smt.is_shared()
                && iso.locality == Locality::Any
            {
                self.st.movable[i] = true;
            }
        }
    }

    /// Decides one more workload on top of what is placed (nothing already placed moves). A refused
    /// workload is kept in the plan's `rejected` list like any other.
    pub fn admit(&mut self, w: &Workload) -> Result<&WorkloadPlan, &Rejection> {
        let i = self.spec.workloads.len();
        let (want, mut sized, refused) = demand_of(&self.spec, w, self.st.cap, &self.sizing);
        self.spec.workloads.push(w.clone());
        self.st.names.push(w.name.clone());
        self.st.movable.push(false);
        self.st.wants_defrag.push(false);
        self.st.smt.push(w.isolation.smt);
        self.warnings.extend(locality_warning(&self.st, w));
        let mut result = match precheck(&self.spec, &self.node_cpus, w, want.is_some()) {
            Some(r) => Err(r),
            None if refused.is_some() => Err(reject(w, refused.unwrap_or_default())),
            None if self.spec.workloads[..i].iter().any(|x| x.name == w.name) => {
                Err(reject(w, format!("a workload named `{}` is already on the node", w.name)))
            }
            None if device_taken(self.admitted(), w).is_some() => Err(reject(w, device_taken(self.admitted(), w).unwrap_or_default())),
            None => admit(&mut self.st, i, w, want.as_ref().expect("prechecked"), &[]),
        };
        if let (true, Err(rej), Some(want)) = (self.st.wants_defrag[i], &mut result, &want) {
            rej.defrag = propose_for(&self.st, want, w);
        }
        let resolved = match result {
            Err(r) => Err(r),
            Ok(cpus) => resolve(&self.spec, w, want.as_ref().expect("admitted"), &cpus, &self.st, &mut self.warnings)
                .map(|wp| WorkloadPlan { sizing: sized.take(), ..wp })
                .and_then(|wp| admit_cache(&mut self.cache, i, w, wp))
                .map_err(|reason| {
                    release(&mut self.st, i);
                    reject(w, reason)
                }),
        };
        self.wants.push(want);
        self.results.push(resolved);
        self.results[i].as_ref()
    }

    /// The workloads admitted so far.
    fn admitted(&self) -> impl Iterator<Item = &Workload> {
        self.spec.workloads.iter().zip(&self.results).filter(|(_, r)| r.is_ok()).map(|(w, _)| w)
    }

    /// The plan as it stands.
    pub fn plan(&self) -> Plan {
        let st = &self.st;
        let per_cpu = st
            .cpus
            .iter()
            .map(|c| CpuUse {
                cpu: c.id,
                housekeeping: c.housekeeping,
                exclusive_to: c.exclusive.map(|i| st.names[i].clone()),
                held_for: c.held.map(|i| st.names[i].clone()),
                reserved: bw_f64(c.reserved),
                foreign: bw_f64(c.foreign),
                by: c.shares.iter().map(|&(i, b)| CpuShare { workload: st.names[i].clone(), bandwidth: bw_f64(b) }).collect(),
                free: bw_f64(st.free(c)),
            })
            .collect();
        Plan {
            api_version: rtslice_spec::API_VERSION.into(),
            node: NodePlan {
                name: self.spec.node.name.clone(),
                cpus: self.node_cpus.clone(),
                housekeeping: self.housekeeping.clone(),
                isolcpus: self.isolcpus.clone(),
                cap: bw_f64(st.cap),
                policy: self.spec.node.policy,
                per_cpu,
                topology: st.topo.used.clone(),
            },
            // A group with only a bandwidth ceiling uses the default group's ways, which shrink as
            // later workloads take theirs: its mask is read from the final state.
            workloads: self
                .results
                .iter()
                .enumerate()
                .filter_map(|(i, r)| {
                    let mut wp = r.as_ref().ok().cloned()?;
                    if wp.cache.is_some() {
                        wp.cache = self.cache.as_ref().and_then(|c| c.workload(i));
                    }
                    Some(wp)
                })
                .collect(),
            rejected: self.results.iter().filter_map(|r| r.as_ref().err().cloned()).collect(),
            warnings: self.warnings.clone(),
            kernel: None,
            cache: self.cache.as_ref().map(|c| c.plan()),
        }
    }
}

/// Grants the workload its L3 ways and bandwidth ceiling after its CPUs are known (the ways of the
/// L3 domains those CPUs belong to). A workload asking for cache on a node without cache
/// allocation is refused with the reason.
fn admit_cache(cache: &mut Option<cache::CacheState>, i: usize, w: &Workload, mut wp: WorkloadPlan) -> Result<WorkloadPlan, String> {
    if w.cache.is_none() && w.memory_bandwidth.is_none() {
        return Ok(wp);
    }
    let Some(c) = cache.as_mut() else {
        return Err("asks for cache allocation (`cache`/`memoryBandwidth`) but the node has none: no resctrl on this host \
                    (`mount -t resctrl resctrl /sys/fs/resctrl`; the CPU needs CAT/MBA — `rtslice doctor`), and the spec \
                    declares no node.cache; declare node.cache to plan for another machine, or drop the request"
            .into());
    };
    c.admit(i, w, &wp.cpus)?;
    wp.cache = c.workload(i);
    Ok(wp)
}

/// A device serves one workload: why `w` cannot have one of its devices, when an earlier workload
/// (in spec order, or already admitted) has it.
fn device_taken<'w>(mut before: impl Iterator<Item = &'w Workload>, w: &Workload) -> Option<String> {
    before.find_map(|x| {
        let d = w.devices.iter().find(|d| x.devices.iter().any(|o| o.pci == d.pci))?;
        Some(format!("PCI device {} is already passed to workload `{}`; a device serves one workload (remove it from one of them)", d.pci, x.name))
    })
}

/// Refusals that do not depend on the other workloads.
fn precheck(spec: &Spec, node_cpus: &[u32], w: &Workload, has_demand: bool) -> Option<Rejection> {
    if !has_demand {
        return Some(reject(w, format!("flavor `{}` is not defined", w.flavor.as_deref().unwrap_or(""))));
    }
    if node_cpus.is_empty() {
        let why = match spec.node.cpus {
            NodeCpus::Discovered => "the node has no CPUs: the spec says `cpus: discovered` and no online CPUs were given",
            NodeCpus::List(_) => "the node has no CPUs",
        };
        return Some(reject(w, why.into()));
    }
    None
}

/// The smallest defragmentation that makes room for `want` where its topology constraints allow:
/// targets only on CPUs its `isolation.smt` accepts, all k within one of its locality groups (tried
/// in preference order, fewest moves first within a tier). Shares move to any shared CPU.
fn propose_for(st: &State, want: &Want, w: &Workload) -> Option<Defrag> {
    let Want::Reservation { runtime, period, k, .. } = want else { return None };
    let eligible: Vec<usize> = (0..st.cpus.len()).filter(|&ci| !blocked(&st.cpus[ci])).collect();
    let allowed: Vec<bool> = (0..st.cpus.len()).map(|ci| smt_conflict(st, ci, w.isolation.smt).is_none()).collect();
    for tier in tiers(st, w) {
        let best = tier
            .iter()
            .filter_map(|g| {
                let within: Vec<usize> = g.iter().copied().filter(|&ci| allowed[ci] && !blocked(&st.cpus[ci])).collect();
                defrag::propose(st, &eligible, &within, bw_of(*runtime, *period), *k)
            })
            .min_by_key(|d| d.moves.len());
        if best.is_some() {
            return best;
        }
    }
    None
}

fn sorted(mut v: Vec<u32>) -> Vec<u32> {
    v.sort_unstable();
    v.dedup();
    v
}

fn reject(w: &Workload, reason: String) -> Rejection {
    Rejection { name: w.name.clone(), reason, defrag: None }
}

fn want_of(d: &Demand, spec: &Spec) -> Want {
    match d {
        Demand::Reservation(r) => {
            let fixed = r.cpus.clone().map(sorted);
            let k = fixed.as_ref().map(Vec::len).or(r.count.map(|c| c as usize)).unwrap_or(1);
            Want::Reservation { runtime: r.runtime, period: r.period.unwrap_or(spec.node.default_period), k, fixed }
        }
        Demand::Dedicated(dd) => {
            let fixed = dd.cpus.clone().map(sorted);
            let k = fixed.as_ref().map(Vec::len).or(dd.count.map(|c| c as usize)).unwrap_or(1);
            Want::Dedicated { k, fixed }
        }
        Demand::BestEffort(b) => Want::BestEffort { weight: b.weight.unwrap_or(100), cap: b.cap, fixed: b.cpus.clone().map(sorted) },
    }
}

fn admit(st: &mut State, i: usize, w: &Workload, want: &Want, named: &[u32]) -> Result<Vec<u32>, Rejection> {
    let needs_isolated = w.isolation.isolcpus;
    let exclusive = w.isolation.shield || matches!(want, Want::Dedicated { .. });
    let smt = w.isolation.smt;
    let per_core = smt == SmtIsolation::WholeCore;
    if needs_isolated && !st.cpus.iter().any(|c| c.isolated) {
        return Err(reject(
            w,
            "requires isolcpus CPUs but none are isolated on the node planned; boot with isolcpus=<cpus> (e.g. isolcpus=4-7) or drop isolation.isolcpus".into(),
        ));
    }
    let k = match want {
        Want::Reservation { k, .. } | Want::Dedicated { k, .. } => *k,
        Want::BestEffort { .. } => 1,
    };
    if k == 0 {
        return Err(reject(w, "asks for 0 CPUs; give a count of at least 1".into()));
    }
    let tiers = tiers(st, w);
    match want {
        Want::Dedicated { k, fixed: Some(f) } | Want::Reservation { k, fixed: Some(f), .. } => {
            let _ = k;
            let b = match want {
                Want::Reservation { runtime, period, .. } => bw_of(*runtime, *period),
                _ => ONE,
            };
            let mut problems = Vec::new();
            let mut idxs = Vec::new();
            for &cpu in f {
                let Some(ci) = st.idx(cpu) else {
                    problems.push(format!("CPU {cpu} is not on the node"));
                    continue;
                };
                let c = &st.cpus[ci];
                if let Some(why) = why_not(st, c) {
                    problems.push(why);
                } else if needs_isolated && !c.isolated {
                    problems.push(format!("CPU {cpu} is not in isolcpus"));
                } else if exclusive && !c.shares.is_empty() {
                    problems.push(format!("CPU {cpu} already carries {} for {}", pct(c.reserved), sharers(st, c)));
                } else if !exclusive && st.free(c) < b {
                    let held = if c.foreign > 0 {
                        format!(" ({} held by real-time threads rtslice did not place)", pct(c.foreign))
                    } else {
                        String::new()
                    };
                    problems.push(format!("CPU {cpu} has {} free{held}, needs {}", pct(st.free(c)), pct(b)));
                }
                idxs.push(ci);
            }
            problems.extend(topology_problems(st, w, &idxs));
            if !problems.is_empty() {
                let what = if matches!(want, Want::Dedicated { .. }) {
                    format!("dedicated CPUs {}", format_cpu_list(f))
                } else {
                    format!("{} on CPUs {} (cap {})", pct(b), format_cpu_list(f), pct(st.cap))
                };
                return Err(reject(w, format!("asks for {what}: {}", problems.join("; "))));
            }
            take(st, i, &idxs, b, exclusive);
            if per_core {
                hold_siblings(st, i, &idxs);
            }
            Ok(f.clone())
        }
        Want::Dedicated { k, fixed: None } => {
            // Whole CPUs nobody uses; avoid CPUs fixed requests named, then lowest ids first.
            let empty: Vec<usize> = (0..st.cpus.len())
                .filter(|&ci| {
                    let c = &st.cpus[ci];
                    !blocked(c) && c.shares.is_empty() && (!needs_isolated || c.isolated)
                })
                .collect();
            let cands: Vec<usize> = empty.iter().copied().filter(|&ci| smt_conflict(st, ci, smt).is_none()).collect();
            if cands.len() < *k {
                let ids = cands.iter().map(|&ci| st.cpus[ci].id).collect::<Vec<_>>();
                return Err(reject(
                    w,
                    format!(
                        "asks for {k} dedicated CPU(s){}; only {} CPU(s) are whole and free{} ({}){}{}",
                        if needs_isolated { " in isolcpus" } else { "" },
                        ids.len(),
                        if smt.is_shared() { String::new() } else { format!(" with siblings isolation.smt: {} accepts", smt.name()) },
                        if ids.is_empty() { "none".into() } else { format_cpu_list(&ids) },
                        occupancy_note(st),
                        smt_note(st, &empty, smt)
                    ),
                ));
            }
            let key = |ci: usize| (named.contains(&st.cpus[ci].id) as u64, st.cpus[ci].id);
            let Some(chosen) = place_in(st, &tiers, &cands, *k, per_core, &key) else {
                return Err(reject(w, format!("asks for {k} dedicated CPU(s): {}", placement_failure(st, w, &cands, *k))));
            };
            take(st, i, &chosen, ONE, true);
            if per_core {
                hold_siblings(st, i, &chosen);
            }
            Ok(sorted(chosen.iter().map(|&ci| st.cpus[ci].id).collect()))
        }
        Want::Reservation { runtime, period, k, fixed: None } => {
            let b = bw_of(*runtime, *period);
            let eligible: Vec<usize> = (0..st.cpus.len())
                .filter(|&ci| {
                    let c = &st.cpus[ci];
                    !blocked(c) && (!needs_isolated || c.isolated) && (!exclusive || c.shares.is_empty())
                })
                .collect();
            let roomy: Vec<usize> = eligible.iter().copied().filter(|&ci| st.free(&st.cpus[ci]) >= b).collect();
            let fits: Vec<usize> = roomy.iter().copied().filter(|&ci| smt_conflict(st, ci, smt).is_none()).collect();
            let what = format!(
                "asks for {} on each of {k} CPU(s) (runtime {} every {})",
                pct(b),
                rtslice_spec::units::format_duration(*runtime),
                rtslice_spec::units::format_duration(*period)
            );
            if fits.len() < *k && roomy.len() >= *k {
                // Bandwidth is there; the SMT constraint is what fails.
                return Err(reject(
                    w,
                    format!(
                        "{what}; {} CPU(s) have that much free, but only {} of them satisfy isolation.smt: {}{}; use smt: shared, or free the siblings",
                        roomy.len(),
                        fits.len(),
                        smt.name(),
                        smt_note(st, &roomy, smt)
                    ),
                ));
            }
            if fits.len() < *k {
                let mut by_free = eligible.clone();
                by_free.sort_by_key(|&ci| (std::cmp::Reverse(st.free(&st.cpus[ci])), st.cpus[ci].id));
                let scope = if needs_isolated {
                    " isolated"
                } else if exclusive {
                    " empty (shield needs CPUs of its own)"
                } else {
                    " eligible"
                };
                let reason = format!(
                    "{what}; only {} of {}{scope} CPU(s) have that much free under the cap of {} ({})",
                    fits.len(),
                    eligible.len(),
                    pct(st.cap),
                    if by_free.is_empty() { "no eligible CPU".to_string() } else { describe_free(st, &by_free) }
                );
                // The proposal is made once every workload is placed (later admissions may take the
                // room a proposal computed now would promise); see `plan`. Moves cannot idle a core,
                // so whole-core gets none.
                st.wants_defrag[i] = !exclusive && !needs_isolated && !per_core;
                return Err(reject(w, reason));
            }
            let key = |ci: usize| {
                let (free, id) = (st.free(&st.cpus[ci]), st.cpus[ci].id);
                match st.policy {
                    FitPolicy::WorstFit => (ONE - free.min(ONE), id),
                    FitPolicy::BestFit => (free, id),
                    FitPolicy::FirstFit => (0, id),
                }
            };
            let Some(chosen) = place_in(st, &tiers, &fits, *k, per_core, &key) else {
                let reason = format!("{what}: {}", placement_failure(st, w, &fits, *k));
                // Bandwidth may be short only in every group: moves could make room in one.
                st.wants_defrag[i] = !exclusive && !needs_isolated && !per_core;
                return Err(reject(w, reason));
            };
            // Remember the order chosen (study B lists "CPUs 3, 2, 0"); the cpuset itself is sorted.
            take(st, i, &chosen, b, exclusive);
            if per_core {
                hold_siblings(st, i, &chosen);
            }
            // Only a share free to go to any shared CPU may move in a defragmentation.
            if !exclusive && !needs_isolated && smt.is_shared() && w.isolation.locality == Locality::Any {
                st.movable[i] = true;
            }
            Ok(chosen.iter().map(|&ci| st.cpus[ci].id).collect())
        }
        Want::BestEffort { fixed, .. } => {
            let usable: Vec<usize> = (0..st.cpus.len())
                .filter(|&ci| {
                    let c = &st.cpus[ci];
                    !blocked(c) && (!needs_isolated || c.isolated) && best_effort_conflict(st, ci).is_none()
                })
                .collect();
            let idxs: Vec<usize> = match fixed {
                Some(f) => {
                    let unavailable: Vec<String> = f
                        .iter()
                        .filter_map(|&c| match st.idx(c) {
                            None => Some(format!("CPU {c} is not on the node")),
                            Some(ci) if usable.contains(&ci) => None,
                            Some(ci) => Some(
                                why_not(st, &st.cpus[ci])
                                    .or_else(|| best_effort_conflict(st, ci))
                                    .unwrap_or(format!("CPU {c} is not in isolcpus")),
                            ),
                        })
                        .collect();
                    let idxs: Vec<usize> = f.iter().filter_map(|&c| st.idx(c)).collect();
                    let mut problems = unavailable;
                    problems.extend(topology_problems(st, w, &idxs));
                    if !problems.is_empty() {
                        return Err(reject(w, format!("best-effort on CPUs {}: {}", format_cpu_list(f), problems.join("; "))));
                    }
                    idxs
                }
                // Without a locality, every shared CPU; with one, the group (in tier order) with the
                // most shared CPUs.
                None if w.isolation.locality == Locality::Any => usable.clone(),
                None => {
                    let mut mask = vec![false; st.cpus.len()];
                    for &ci in &usable {
                        mask[ci] = true;
                    }
                    tiers
                        .iter()
                        .find_map(|tier| {
                            tier.iter()
                                .map(|g| g.iter().copied().filter(|&ci| mask[ci]).collect::<Vec<usize>>())
                                .filter(|g| !g.is_empty())
                                .max_by_key(|g| (g.len(), std::cmp::Reverse(g[0])))
                        })
                        .unwrap_or_default()
                }
            };
            if idxs.is_empty() {
                let kept_off = (0..st.cpus.len()).filter(|&ci| !blocked(&st.cpus[ci]) && best_effort_conflict(st, ci).is_some()).count();
                let smt_part = if kept_off > 0 {
                    format!("; {kept_off} CPU(s) are kept free of best effort by their SMT siblings' isolation.smt")
                } else {
                    String::new()
                };
                return Err(reject(w, format!("best-effort needs a shared CPU, but none is left{}{smt_part}", occupancy_note(st))));
            }
            for &ci in &idxs {
                st.cpus[ci].best_effort.push(i);
            }
            Ok(sorted(idxs.iter().map(|&ci| st.cpus[ci].id).collect()))
        }
    }
}

fn take(st: &mut State, i: usize, idxs: &[usize], b: Bw, exclusive: bool) {
    for &ci in idxs {
        let c = &mut st.cpus[ci];
        c.shares.push((i, b));
        c.reserved += b;
        if exclusive {
            c.exclusive = Some(i);
        }
    }
}

fn release(st: &mut State, i: usize) {
    for c in &mut st.cpus {
        let before = c.shares.len();
        c.shares.retain(|&(w, _)| w != i);
        if c.shares.len() != before {
            c.reserved = c.shares.iter().map(|&(_, b)| b).sum();
        }
        if c.exclusive == Some(i) {
            c.exclusive = None;
        }
        if c.held == Some(i) {
            c.held = None;
        }
        c.best_effort.retain(|&w| w != i);
    }
}

/// Turns an admitted workload into its WorkloadPlan: allocation, thread/IRQ/net rules on concrete CPUs.
fn resolve(
    spec: &Spec,
    w: &Workload,
    want: &Want,
    chosen: &[u32],
    st: &State,
    warnings: &mut Vec<String>,
) -> Result<WorkloadPlan, String> {
    let cpus = sorted(chosen.to_vec());
    let (allocation, budget) = match want {
        Want::Reservation { runtime, period, .. } => (
            Allocation::Reservation {
                reservation: Reservation::new(*runtime, *period),
                per_cpu: chosen.iter().map(|&cpu| CpuReservation { cpu }).collect(),
            },
            Some((*runtime, *period)),
        ),
        Want::Dedicated { .. } => {
            // SCHED_DEADLINE on a dedicated CPU can use up to the cap (the kernel's RT/DL limit).
            let period = spec.node.default_period;
            let runtime = Duration::from_nanos((period.as_nanos() * st.cap as u128 / ONE as u128) as u64);
            (Allocation::Dedicated { cpus: cpus.clone() }, Some((runtime, period)))
        }
        Want::BestEffort { weight, cap, .. } => (Allocation::BestEffort { weight: *weight, cap: *cap }, None),
    };
    let slot_cpus = |slots: &Slots, what: &str| -> Result<Option<Vec<u32>>, String> {
        match slots {
            Slots::Any => Ok(None),
            Slots::List(l) => {
                let mut out = Vec::new();
                for &s in l {
                    match cpus.get(s as usize) {
                        Some(&c) => out.push(c),
                        None => {
                            return Err(format!(
                                "{what} asks for slot {s}, but the workload got {} CPU(s) ({})",
                                cpus.len(),
                                format_cpu_list(&cpus)
                            ))
                        }
                    }
                }
                Ok(Some(sorted(out)))
            }
        }
    };

    // Deadline budget split: explicit runtimes stand; shares take their part of the workload's
    // per-CPU budget; the remaining rules split what is left equally.
    let share_total: f64 = w
        .threads
        .iter()
        .filter_map(|r| match r.policy {
            SchedPolicy::Deadline { runtime: None, share, .. } => share,
            _ => None,
        })
        .sum();
    // `other` rules with a share take theirs as CFS bandwidth (one pool for them all).
    let pool_share = rtslice_spec::pool_share(&w.threads);
    let share_total = share_total + pool_share.unwrap_or(0.0);
    let unsplit = w
        .threads
        .iter()
        .filter(|r| matches!(r.policy, SchedPolicy::Deadline { runtime: None, share: None, .. }))
        .count();
    let pool = match (pool_share, &allocation) {
        (None, _) => None,
        (Some(share), Allocation::Reservation { reservation, .. }) => {
            let period = w.threads.iter().find_map(|r| match r.policy {
                SchedPolicy::Other { share: Some(_), period, .. } => period,
                _ => None,
            });
            Some(CfsPool::of(*reservation, cpus.len() as u32, share, period)?)
        }
        (Some(_), _) => {
            return Err(
                "its `other` rules give a share of a reservation as CFS bandwidth, but it has no reservation; give it one, or drop the shares"
                    .into(),
            )
        }
    };
    let mut threads = Vec::new();
    let mut dl_parts: Vec<kernel::admission::Part> = Vec::new();
    for (ri, r) in w.threads.iter().enumerate() {
        let what = format!("thread rule {ri} (`{}`)", r.pattern);
        let sched = match &r.policy {
            SchedPolicy::Other { nice, .. } => ThreadSched::Other { nice: nice.unwrap_or(0) },
            SchedPolicy::Batch { nice } => ThreadSched::Batch { nice: nice.unwrap_or(0) },
            SchedPolicy::Idle => ThreadSched::Idle,
            SchedPolicy::Fifo { priority, period } => ThreadSched::Fifo { priority: *priority, period: *period },
            SchedPolicy::Rr { priority, period } => ThreadSched::Rr { priority: *priority, period: *period },
            SchedPolicy::Deadline { runtime, deadline, period, share } => {
                let (rt, per) = match (runtime, budget) {
                    (Some(rt), _) => (*rt, period.or(budget.map(|b| b.1)).unwrap_or(spec.node.default_period)),
                    (None, None) => {
                        return Err(format!(
                            "{what} is SCHED_DEADLINE without a runtime, but a best-effort workload has no budget to split; give `runtime`"
                        ))
                    }
                    (None, Some((wrt, wper))) => {
                        let part = match share {
                            Some(s) => *s,
                            None => (1.0 - share_total).max(0.0) / unsplit.max(1) as f64,
                        };
                        let per = period.unwrap_or(wper);
                        // A share of one CPU's budget (every matched thread gets its own).
                        (Reservation::new(wrt, wper).split(1, &[part], per)[0], per)
                    }
                };
                if rt < Duration::from_nanos(1024) {
                    return Err(format!("{what} resolves to a SCHED_DEADLINE runtime of {}ns, below the kernel's 1024ns minimum", rt.as_nanos()));
                }
                let dl = deadline.unwrap_or(per);
                if rt > dl || dl > per {
                    return Err(format!(
                        "{what}: runtime {} ≤ deadline {} ≤ period {} does not hold",
                        rtslice_spec::units::format_duration(rt),
                        rtslice_spec::units::format_duration(dl),
                        rtslice_spec::units::format_duration(per)
                    ));
                }
                dl_parts.push((rt, per));
                ThreadSched::Deadline { runtime: rt, deadline: dl, period: per }
            }
        };
        let tc = match slot_cpus(&r.slots, &what)? {
            None => ThreadCpus::Anywhere,
            Some(c) => ThreadCpus::Cpus(c),
        };
        threads.push(ThreadPin { pattern: r.pattern.clone(), sched, cpus: tc });
    }
    if let Some((rt, per)) = budget {
        if let Err(x) = kernel::admission::fits(dl_parts, bw_f64(bw_of(rt, per)), cpus.len() as u32) {
            warnings.push(format!(
                "`{}`: its SCHED_DEADLINE rules ask for {:.1}% of a CPU per matched thread, more than its budget of {:.1}%; the kernel will refuse some threads",
                w.name,
                x.need * 100.0,
                x.offered * 100.0
            ));
        }
    }
    let mut irqs = Vec::new();
    for (ri, r) in w.irqs.iter().enumerate() {
        let c = slot_cpus(&r.slots, &format!("IRQ rule {ri} (`{}`)", r.pattern))?.unwrap_or_else(|| cpus.clone());
        irqs.push(IrqPin { pattern: r.pattern.clone(), cpus: c });
    }
    let mut net = Vec::new();
    for (ri, r) in w.net.iter().enumerate() {
        let what = format!("net rule {ri} (`{}`)", r.interface);
        let rps = match &r.rps {
            Some(s) => Some(slot_cpus(s, &what)?.unwrap_or_else(|| cpus.clone())),
            None => None,
        };
        let xps = match &r.xps {
            Some(s) => Some(slot_cpus(s, &what)?.unwrap_or_else(|| cpus.clone())),
            None => None,
        };
        net.push(NetPin { interface: r.interface.clone(), rps_cpus: rps, xps_cpus: xps });
    }
    let mut devices = Vec::new();
    for d in &w.devices {
        let irq_cpus = match &d.irqs {
            rtslice_spec::DeviceIrqs::Keep => None,
            rtslice_spec::DeviceIrqs::Slots(s) => Some(slot_cpus(s, &format!("device {}'s irqs", d.pci))?.unwrap_or_else(|| cpus.clone())),
        };
        devices.push(DevicePin { pci: d.pci, irq_cpus });
    }
    Ok(WorkloadPlan {
        name: w.name.clone(),
        cpus,
        allocation,
        isolation: w.isolation.clone(),
        launch: w.launch.clone(),
        memory: spec.effective_memory(w),
        threads,
        irqs,
        net,
        devices,
        // A reservation reclaims unless told not to: under SCHED_DEADLINE (a budget per thread) a
        // static equal split starves a stack whose work moves between its threads — a real eNB
        // under the natural spec lost half its downlink, the emulated oai-lte 99.9 % of it
        // (docs/results.md) — and one pool that follows the threads' measured demand, with GRUB
        // for the rest, is the nearest the kernel comes to the one budget RT groups and HCBS give.
        // Not when a CFS pool shares the reservation: reclaiming threads would take its part. A
        // reservation sized for an SLO reclaims as the model assumes (docs/plan.md "SLO sizing").
        reclaim: match &w.demand {
            Some(Demand::Reservation(r)) => r.reclaim.unwrap_or(pool.is_none()),
            None => w.slo.is_some(),
            Some(_) => false,
        },
        sizing: None,
        cache: None,
        pool,
    })
}
