//! What the API shows of the node: workloads listed and one in detail, the inventory.

use super::*;

impl Service {
    /// `GET /v1/workloads`.
    pub fn list(&self) -> Vec<serde_json::Value> {
        self.desired.workloads.iter().map(|e| self.view(e, false)).collect()
    }

    /// `GET /v1/workloads/{name}`.
    pub fn get(&self, name: &str) -> Result<serde_json::Value> {
        let e = self
            .desired
            .workloads
            .iter()
            .find(|e| e.workload.name == name)
            .ok_or_else(|| NodeError::NotFound(format!("no workload named {name}")))?;
        Ok(self.view(e, true))
    }

    pub(super) fn view(&self, e: &Entry, detail: bool) -> serde_json::Value {
        let mut v = serde_json::json!({
            "name": e.workload.name,
            "phase": e.phase,
            "generation": e.generation,
            "cpus": CpuList::from_cpus(e.cpus.iter().copied()).to_string(),
            "demand": e.workload.demand,
        });
        if let Some(c) = e.setup.as_ref().and_then(|s| s.workloads.first()).and_then(|w| w.cache.as_ref()) {
            // Its resctrl group's ways and ceiling as granted (masks as resctrl's schemata writes them).
            v["cache"] = serde_json::to_value(c).unwrap_or_default();
        }
        if let Some(d) = &e.in_force {
            // Sized for its SLO, or set by the closed loop: what the host holds for it now.
            v["inForce"] = serde_json::to_value(d).unwrap_or_default();
        }
        if let Some(a) = &e.workload.adapt {
            v["adapt"] = serde_json::to_value(a).unwrap_or_default();
            if let Some(last) = self.loops.get(&e.workload.name).and_then(|l| l.last.clone()) {
                v["adaptLast"] = last.into();
            }
        }
        if let Some(r) = &e.reason {
            v["reason"] = r.clone().into();
            v["defrag"] = serde_json::to_value(&e.defrag).unwrap_or_default();
        }
        if let Some(x) = &e.exit {
            v["exit"] = x.clone().into();
        }
        if e.restarts > 0 {
            v["restarts"] = e.restarts.into();
        }
        if let Some(at) = e.restart_at {
            v["restartAt"] = at.into();
        }
        if !e.workload.restart.is_default() {
            v["restart"] = serde_json::to_value(e.workload.restart).unwrap_or_default();
        }
        if e.phase.holds() {
            if let Ok(st) = self.host.status(&e.workload.name) {
                let w = st.workloads.first();
                v["pids"] = serde_json::to_value(w.map(|w| w.pids.clone()).unwrap_or_default()).unwrap_or_default();
                v["drift"] = serde_json::to_value(&st.drift).unwrap_or_default();
                if detail {
                    v["threads"] = serde_json::to_value(w.map(|w| w.threads.clone()).unwrap_or_default()).unwrap_or_default();
                    v["cgroup"] = serde_json::to_value(w.map(|w| w.cgroup.clone())).unwrap_or_default();
                    v["workload"] = serde_json::to_value(&e.workload).unwrap_or_default();
                }
            }
        }
        v
    }

    /// `GET /v1/node`: the O2ims-style inventory.
    pub fn inventory(&self) -> serde_json::Value {
        let plan = self.planner(&[]).plan();
        let report = rtslice_host::doctor();
        let base = self.host.base();
        serde_json::json!({
            "name": self.desired.node.name,
            "cpus": base.online.to_string(),
            "isolated": report.isolated.to_string(),
            "housekeeping": CpuList::from_cpus(self.desired.node.housekeeping.iter().copied()).to_string(),
            "cap": plan.node.cap,
            "mechanism": base.mechanism,
            "partitions": base.partitions,
            "hrtick": base.hrtick,
            "fairServerOff": base.fair_server_off,
            "perCpu": plan.node.per_cpu,
            "workloads": { "running": self.desired.workloads.iter().filter(|e| e.phase == Phase::Running).count(),
                           "pending": self.desired.workloads.iter().filter(|e| e.phase == Phase::Pending).count(),
                           "exited": self.desired.workloads.iter().filter(|e| e.phase == Phase::Exited).count() },
            "warnings": base.warnings,
            "kernel": report.kernel,
            "preemption": report.preemption,
            "topology": report.topology,
            "findings": report.findings,
            // What admission plans from: `rtslice plan --json` gives the same as this_host.facts.
            "planningFacts": self.facts,
        })
    }
}

pub(super) fn phase_word(p: Phase) -> &'static str {
    match p {
        Phase::Running => "running",
        Phase::Pending => "pending",
        Phase::Exited => "exited",
    }
}
