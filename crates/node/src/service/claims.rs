//! The service's side of DRA (`crate::claims` holds the records, `rtslice_dra` the model): the
//! devices this node publishes, preparation and unpreparation of claims, and the claim a container
//! takes at CreateContainer (`claimed_demand`, used by `container_create`).

use rtslice_dra::{claim_env, claim_workload_name};
use serde_json::json;

use super::*;
use crate::claims::ClaimEntry;
use crate::containers::CreateContainer;

impl Service {
    /// `GET /v1/dra/devices`: this node's CPUs as the devices of its ResourceSlice, with the
    /// bandwidth left once what kube-scheduler does not count (spec workloads, annotated pods,
    /// foreign real-time threads) is held.
    pub fn dra_devices(&self) -> serde_json::Value {
        let counted = self.claims.counted_by_the_scheduler(&self.containers);
        let except: Vec<&str> = counted.iter().map(String::as_str).collect();
        let plan = self.planner(&except).plan();
        let mechanism = serde_json::to_value(self.mechanism()).unwrap_or_default();
        json!({
            "driver": rtslice_dra::DRIVER,
            "devices": rtslice_dra::devices(&plan.node, mechanism.as_str().unwrap_or("none")),
        })
    }

    /// `POST /v1/dra/claims`: admits an allocated claim (NodePrepareResources). Idempotent: the same
    /// claim prepared again gets the same answer.
    pub fn claim_prepare(&mut self, pool: &str, raw: &serde_json::Value) -> Result<serde_json::Value> {
        let c = rtslice_dra::claim(raw, pool, self.node_section().default_period).map_err(NodeError::Unfit)?;
        let name = claim_workload_name(&c.namespace, &c.name);
        let answer = |e: &ClaimEntry| {
            json!({"uid": e.uid, "workload": e.workload.name, "cpus": CpuList::from_cpus(e.cpus.iter().copied()).to_string(), "env": [claim_env(&e.uid)]})
        };
        if let Some(e) = self.claims.entries.get(&c.uid) {
            if e.cpus == c.cpus && e.workload.demand.as_ref() == Some(&c.demand) {
                return Ok(answer(e));
            }
            return Err(NodeError::Unfit(format!(
                "claim {}/{} is prepared on CPUs [{}] with another allocation; unprepare it first",
                c.namespace,
                c.name,
                CpuList::from_cpus(e.cpus.iter().copied())
            )));
        }
        if let Some(old) = self.claims.entries.values().find(|e| e.workload.name == name) {
            return Err(NodeError::Unfit(format!(
                "claim {}/{} (UID {}) is still prepared on this node; a claim of the same name waits until kubelet unprepares it",
                old.namespace, old.name, old.uid
            )));
        }
        if matches!(c.demand, Demand::Reservation(_)) {
            if let Err(reason) = rtslice_host::inplace::reservations_supported(self.mechanism()) {
                let reason = format!("claim {}/{}: {reason}", c.namespace, c.name);
                self.event("refused", Some(&name), reason.clone());
                return Err(NodeError::Unfit(reason));
            }
        }
        let w = Workload { name: name.clone(), demand: Some(c.demand.clone()), ..Workload::default() };
        if let Err(reason) = self.access.check(&c.namespace, &w, self.held_by_namespace(&c.namespace)) {
            let reason = format!("claim {}/{}: {reason}", c.namespace, c.name);
            self.event("refused", Some(&name), reason.clone());
            return Err(NodeError::Forbidden(reason));
        }
        if let Err((reason, _)) = self.admit(&w, &[]) {
            let reason = format!("claim {}/{} on CPUs [{}]: {reason}", c.namespace, c.name, CpuList::from_cpus(c.cpus.iter().copied()));
            self.event("refused", Some(&name), reason.clone());
            return Err(NodeError::Unfit(reason));
        }
        let entry = ClaimEntry { uid: c.uid.clone(), namespace: c.namespace, name: c.name, pods: c.pods, workload: w, cpus: c.cpus, holder: None };
        let out = answer(&entry);
        self.event("prepared", Some(&name), format!("claim {} on CPUs [{}]: {}", entry.uid, CpuList::from_cpus(entry.cpus.iter().copied()), describe_demand(&entry.workload)));
        self.claims.entries.insert(c.uid, entry);
        self.claims.save()?;
        Ok(out)
    }

    /// `DELETE /v1/dra/claims/{uid}`: forgets a claim (NodeUnprepareResources), releasing the
    /// container still holding it if kubelet did not stop it first. Unknown claims are not an error
    /// (kubelet may ask again).
    pub fn claim_unprepare(&mut self, uid: &str) -> Result<serde_json::Value> {
        let Some(e) = self.claims.entries.remove(uid) else {
            return Ok(json!({"uid": uid, "prepared": false}));
        };
        self.claims.save()?;
        if let Some(id) = e.holder.as_deref().filter(|id| self.containers.entries.contains_key(*id)) {
            self.container_release(id)?;
        }
        self.event("unprepared", Some(&e.workload.name), format!("claim {} released CPUs [{}]", e.uid, CpuList::from_cpus(e.cpus.iter().copied())));
        self.retry_pending()?;
        Ok(json!({"uid": uid, "prepared": false, "released": true}))
    }

    pub fn claim_list(&self) -> Vec<&ClaimEntry> {
        self.claims.entries.values().collect()
    }

    /// The claim a container being created uses, if its environment names one, with the pod
    /// annotation that carries its demand into the container's workload; refused when it names
    /// more than one, an unprepared one, one another container holds, or the pod also asks for
    /// CPUs by annotation.
    pub(crate) fn claimed_demand(&self, req: &CreateContainer) -> Result<Option<(ClaimEntry, String, String)>> {
        let uids = rtslice_dra::claims_in_env(req.env.iter().map(String::as_str));
        let Some(uid) = uids.first() else { return Ok(None) };
        let who = format!("container {} of pod {}/{}", req.container, req.namespace, req.pod);
        if uids.len() > 1 {
            return Err(NodeError::Unfit(format!("{who} uses {} rtslice claims; one claim gives a container its CPUs and budget", uids.len())));
        }
        let c = self.claims.entries.get(uid).ok_or_else(|| {
            NodeError::Unfit(format!("{who}: claim {uid} is not prepared on this node (rtslice-dra prepares it before kubelet creates the container: is it running?)"))
        })?;
        if let Some(h) = c.holder.as_deref().filter(|h| *h != req.id) {
            return Err(NodeError::Unfit(format!("{who}: claim {}/{} is held by container {h}; one container per claim", c.namespace, c.name)));
        }
        for (k, _) in &req.annotations {
            let field = k.strip_prefix(rtslice_spec::annotations::PREFIX).unwrap_or("");
            let (f, ctr) = field.split_once('.').map(|(f, c)| (f, Some(c))).unwrap_or((field, None));
            if matches!(f, "reservation" | "dedicated") && ctr.is_none_or(|c| c == req.container) {
                return Err(NodeError::Unfit(format!("{who}: its CPUs and budget come from claim {}/{}; drop the annotation `{k}`", c.namespace, c.name)));
            }
        }
        let cpus = c.cpus.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
        let (key, value) = match &c.workload.demand {
            Some(Demand::Reservation(r)) => (
                "reservation",
                format!("{{runtime: {}us, period: {}us, cpus: [{cpus}]}}", r.runtime.as_micros(), r.period.unwrap_or(self.node_section().default_period).as_micros()),
            ),
            _ => ("dedicated", format!("{{cpus: [{cpus}]}}")),
        };
        Ok(Some((c.clone(), format!("{}{key}.{}", rtslice_spec::annotations::PREFIX, req.container), value)))
    }
}

fn describe_demand(w: &Workload) -> String {
    match &w.demand {
        Some(Demand::Reservation(r)) => format!("{:?} every {:?}", r.runtime, r.period.unwrap_or_default()),
        Some(Demand::Dedicated(_)) => "dedicated".into(),
        _ => "no demand".into(),
    }
}
