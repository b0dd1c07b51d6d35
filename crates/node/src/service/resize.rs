//! Resizes: a running workload's reservation or CPUs changed in place, through admission and the
//! host's transaction, its processes kept.

use super::*;

impl Service {
    /// Resizes a running workload in place, through admission against the others.
    pub fn resize(&mut self, name: &str, req: &Resize) -> Result<Outcome> {
        let Some(e) = self.desired.workloads.iter().find(|e| e.workload.name == name) else {
            return Err(NodeError::NotFound(format!("no workload named {name}")));
        };
        if e.generation != req.generation {
            return Err(NodeError::Stale(format!(
                "workload {name} is at generation {}, the request was made from {}: read it again and retry",
                e.generation, req.generation
            )));
        }
        if e.phase != Phase::Running {
            return Err(NodeError::Conflict(format!("workload {name} is {}, not running: remove it and deploy it anew", phase_word(e.phase))));
        }
        let mut w = e.workload.clone();
        // An SLO workload's or an adapting one's reservation is the one in force.
        let demand = self
            .demand_in_force(e)
            .ok_or_else(|| NodeError::Invalid(format!("workload {name} names a flavor the node does not define")))?;
        w.demand = Some(resized(demand, req)?);
        w.flavor = None;
        w.hints = Default::default();
        self.resize_to(name, w)?;
        self.retry_pending()?;
        Ok(self.outcome(name))
    }

    /// Changes a running workload in place to `w` (the same launch): admission against the others,
    /// then the host's resize transaction (rolled back whole on failure).
    pub(super) fn resize_to(&mut self, name: &str, w: Workload) -> Result<()> {
        // In place means on the CPUs it holds when they still fit (a new runtime, other rules); the
        // planner places it anew only when they do not, or when the demand names other CPUs or
        // another count.
        let held = self.entry_mut(name).cpus.clone();
        let same_count = match &w.demand {
            Some(Demand::Reservation(r)) => r.cpus.is_none() && r.count.unwrap_or(1) as usize == held.len(),
            Some(Demand::Dedicated(d)) => d.cpus.is_none() && d.count.is_some_and(|c| c as usize == held.len()),
            _ => false,
        };
        let same_cache = self.entry_mut(name).workload.cache == w.cache;
        let held_cache = self.entry_mut(name).held_cache().filter(|_| same_cache);
        let pinned = same_count.then(|| {
            let mut p = w.clone();
            p.demand = p.demand.take().map(|d| d.pinned_to(&held));
            // Its resctrl group keeps its ways on the CPUs it holds.
            p.cache = held_cache.or(p.cache);
            p
        });
        let admitted = match pinned.map(|p| self.admit(&p, &[name])) {
            Some(Ok(a)) => Ok(a),
            _ => self.admit(&w, &[name]),
        };
        let (plan, setup) = admitted.map_err(|(reason, _)| NodeError::Unfit(reason))?;
        let (in_force, admitted_runtime) = (in_force_of(&w, &plan), runtime_of(&plan));
        self.commit_resize(name, &plan, setup, |e| {
            e.in_force = in_force;
            e.admitted_runtime = admitted_runtime;
            e.workload = w;
        })?;
        self.loops.remove(name);
        self.event("resized", Some(name), format!("now on CPUs [{}], {}", CpuList::from_cpus(plan.cpus.iter().copied()), describe(&plan)));
        Ok(())
    }

    /// The host's resize of an admitted change (rolled back whole there on failure), then the entry:
    /// a new generation, the CPUs and setup it now holds, and what `update` changes; saved.
    pub(super) fn commit_resize(&mut self, name: &str, plan: &WorkloadPlan, setup: Setup, update: impl FnOnce(&mut Entry)) -> Result<()> {
        match self.host_resize(&setup) {
            Ok(_) => {}
            Err(rtslice_host::HostError::Rejected(r)) => return Err(NodeError::Unfit(r)),
            Err(e) => return Err(e.into()),
        }
        let generation = self.desired.next_generation;
        self.desired.next_generation += 1;
        let e = self.entry_mut(name);
        e.generation = generation;
        e.cpus = plan.cpus.clone();
        e.setup = Some(setup);
        update(e);
        self.save()
    }
}

fn resized(d: Demand, req: &Resize) -> Result<Demand> {
    let dur = |s: &Option<String>, what: &str| -> Result<Option<Duration>> {
        s.as_deref()
            .map(|t| rtslice_spec::units::parse_duration(t).map_err(|e| NodeError::Invalid(format!("{what}: {e}"))))
            .transpose()
    };
    let cpus = req
        .cpus
        .as_deref()
        .map(|c| CpuList::parse(c).map(|l| l.iter().collect::<Vec<u32>>()).map_err(|e| NodeError::Invalid(format!("cpus: {e}"))))
        .transpose()?;
    match d {
        Demand::Reservation(mut r) => {
            if let Some(x) = dur(&req.runtime, "runtime")? {
                r.runtime = x;
            }
            if let Some(x) = dur(&req.period, "period")? {
                r.period = Some(x);
            }
            if let Some(c) = cpus {
                r.count = None;
                r.cpus = Some(c);
            } else if let Some(n) = req.count {
                r.count = Some(n);
                r.cpus = None;
            }
            Ok(Demand::Reservation(r))
        }
        Demand::Dedicated(mut x) => {
            if req.runtime.is_some() || req.period.is_some() {
                return Err(NodeError::Invalid("a dedicated workload has no runtime or period; give count or cpus".into()));
            }
            if let Some(c) = cpus {
                x.count = None;
                x.cpus = Some(c);
            } else if let Some(n) = req.count {
                x.count = Some(n);
                x.cpus = None;
            }
            Ok(Demand::Dedicated(x))
        }
        Demand::BestEffort(_) => Err(NodeError::Invalid("a best-effort workload has no reservation to resize".into())),
    }
}
