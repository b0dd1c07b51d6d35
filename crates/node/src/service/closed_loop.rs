//! The closed loop: the telemetry's readings turned into resizes of the adapting workloads
//! ([`crate::adapt::decide`] decides, admission and the host's transaction carry it out).

use super::*;

impl Service {
    /// The closed loop, given the telemetry's latest reading: every adapting workload whose interval
    /// has passed gets its decision ([`crate::adapt::decide`]) and, when it asks for another runtime,
    /// a resize through admission and the host's transaction. A grow that does not fit whole takes
    /// the largest runtime that does; a refused or failed change leaves the reservation as it was.
    pub fn adapt(&mut self, sample: &rtslice_metrics::NodeSample) {
        let names: Vec<String> = self
            .desired
            .workloads
            .iter()
            .filter(|e| e.phase == Phase::Running && e.workload.adapt.is_some())
            .map(|e| e.workload.name.clone())
            .collect();
        self.loops.retain(|n, _| names.contains(n));
        for name in names {
            let Some(ws) = sample.workloads.iter().find(|w| w.name == name) else {
                self.loops.entry(name.clone()).or_default().last = Some("no telemetry reading of it yet".into());
                continue;
            };
            let Some(used_s) = ws.used_s else {
                self.loops.entry(name.clone()).or_default().last =
                    Some("no CPU reading in the last interval (no cgroup CPU accounting, no tracer, no live threads)".into());
                continue;
            };
            let stolen_s = sample.cpus.iter().filter(|c| ws.cpus.contains(&c.cpu)).map(|c| c.stolen_s).sum();
            let now = Reading { time: sample.time, used_s, jobs: ws.sli.ttis, misses: ws.sli.deadline_misses, throttled: ws.throttled, stolen_s };
            let run = self.loops.entry(name.clone()).or_default();
            let Some(since) = run.since else {
                run.since = Some(now);
                continue;
            };
            let Some((bounds, runtime, interval)) = self.loop_bounds(&name) else { continue };
            if now.time - since.time < interval.as_secs_f64() - 0.05 {
                continue;
            }
            let d = |a: Option<u64>, b: Option<u64>| a.zip(b).and_then(|(a, b)| a.checked_sub(b));
            let obs = crate::adapt::Observation {
                dt_s: now.time - since.time,
                used_s: (now.used_s - since.used_s).max(0.0),
                jobs: d(now.jobs, since.jobs),
                misses: d(now.misses, since.misses),
                throttled: d(now.throttled, since.throttled),
                stolen_s: (now.stolen_s - since.stolen_s).max(0.0),
            };
            let run = self.loops.get_mut(&name).expect("inserted above");
            run.since = Some(now);
            let decision = crate::adapt::decide(runtime, &bounds, &obs, &mut run.state);
            run.last = Some(match decision.runtime() {
                None => format!("kept {} µs: {}", runtime.as_micros(), decision.why()),
                Some(to) => format!("{} µs → {} µs: {}", runtime.as_micros(), to.as_micros(), decision.why()),
            });
            let Some(to) = decision.runtime() else { continue };
            match self.adapt_to(&name, runtime, to) {
                Ok(Some(got)) => {
                    let how = if got > runtime { "grown" } else { "shrunk" };
                    let partly = if got != to { format!(" (asked {} µs; the rest does not fit)", to.as_micros()) } else { String::new() };
                    self.event("adapted", Some(&name), format!(
                        "{how} {} → {} µs every {} µs{partly}: {}",
                        runtime.as_micros(), got.as_micros(), bounds.period.as_micros(), decision.why()
                    ));
                }
                Ok(None) => self.event("adapted", Some(&name), format!(
                    "wanted {} µs, nothing more fits on its CPUs: kept {} µs ({})", to.as_micros(), runtime.as_micros(), decision.why()
                )),
                Err(e) => self.event("failed", Some(&name), format!("adapting to {} µs: {e}; kept {} µs", to.as_micros(), runtime.as_micros())),
            }
        }
    }

    /// An adapting workload's bounds, its runtime in force and its interval.
    pub(super) fn loop_bounds(&self, name: &str) -> Option<(crate::adapt::Bounds, Duration, Duration)> {
        let e = self.desired.workloads.iter().find(|e| e.workload.name == name)?;
        let a = e.workload.adapt?;
        let Some(Demand::Reservation(r)) = self.demand_in_force(e) else { return None };
        let period = r.period.unwrap_or(self.desired.node.default_period);
        let cap = self.cap();
        // The guaranteed minimum defaults to what the workload was admitted with.
        let min = a.min.or(e.admitted_runtime).unwrap_or(r.runtime);
        let max = a.max.unwrap_or(period.mul_f64(cap.clamp(0.0, 1.0))).max(min);
        let target = match e.workload.slo {
            Some(rtslice_spec::Slo::DeadlineMissRatio(t)) => Some(t),
            _ => None,
        };
        let bounds = crate::adapt::Bounds { min, max, period, cpus: e.cpus.len().max(1) as u32, target_miss_ratio: target };
        Some((bounds, r.runtime, a.interval))
    }

    /// Resizes an adapting workload's runtime in place to `to`, or (growing) to the largest runtime
    /// between `from` and `to` that admission takes. `Ok(None)`: nothing above `from` fits.
    pub(super) fn adapt_to(&mut self, name: &str, from: Duration, to: Duration) -> Result<Option<Duration>> {
        let e = self.desired.workloads.iter().find(|e| e.workload.name == name).ok_or_else(|| NodeError::NotFound(name.into()))?;
        let Some(Demand::Reservation(mut r)) = self.demand_in_force(e) else {
            return Err(NodeError::Invalid(format!("workload {name} has no reservation to adapt")));
        };
        r.cpus = Some(e.cpus.clone());
        r.count = None;
        // The loop decides from measurements, not from the profile: admission must not size or
        // check the runtime against the SLO's model again. Its reservation keeps reclaiming as sized.
        let mut w = e.workload.clone();
        w.slo = None;
        w.profile = None;
        w.flavor = None;
        w.hints = Default::default();
        // Its resctrl group keeps its ways: a resize changes budgets, not cache.
        w.cache = e.held_cache().or(w.cache);
        let with = |runtime: Duration| {
            let mut w = w.clone();
            w.demand = Some(Demand::Reservation(rtslice_spec::Reservation { runtime, ..r.clone() }));
            w
        };
        let mut got = to;
        let mut admitted = self.admit(&with(to), &[name]);
        if admitted.is_err() && to > from {
            // The largest runtime that fits, on the loop's grid.
            let (mut lo, mut hi) = (from, to);
            admitted = Err((String::new(), None));
            while hi > lo + crate::adapt::STEP {
                let mid = crate::adapt::ceil_step(lo + (hi - lo) / 2);
                let mid = if mid >= hi { hi - crate::adapt::STEP } else { mid };
                match self.admit(&with(mid), &[name]) {
                    Ok(a) => {
                        lo = mid;
                        got = mid;
                        admitted = Ok(a);
                    }
                    Err(_) => hi = mid,
                }
            }
            if admitted.is_err() {
                return Ok(None);
            }
        }
        let (plan, setup) = admitted.map_err(|(reason, _)| NodeError::Unfit(reason))?;
        let in_force = with(got).demand;
        self.commit_resize(name, &plan, setup, |e| e.in_force = in_force)?;
        if got < from {
            // Bandwidth freed: a pending workload may fit now.
            self.retry_pending()?;
        }
        Ok(Some(got))
    }
}
