//! The service's side of Kubernetes containers (`crate::containers` holds their records): admission
//! at CreateContainer, in-place application at start, release, and the cluster inventory.

use rtslice_host::InPlace;
use serde_json::json;

use super::*;
use crate::containers::{refuse_unsupported, ContainerEntry, CreateContainer};

impl Service {
    /// CreateContainer: `None` when no rtslice annotation applies to it.
    pub fn container_create(&mut self, req: &CreateContainer) -> Result<Option<&ContainerEntry>> {
        if self.containers.entries.contains_key(&req.id) {
            return Ok(self.containers.entries.get(&req.id));
        }
        let name = rtslice_spec::annotations::workload_name(&req.namespace, &req.pod, &req.container);
        // A container that uses a DRA claim gets the claim's CPUs and budget, written as the
        // annotation a pod would carry, so thread rules and SLOs decode exactly as on that path.
        let claimed = match self.claimed_demand(req) {
            Ok(c) => c,
            Err(e) => {
                self.event("refused", Some(&name), e.to_string());
                return Err(e);
            }
        };
        let mut annotations = req.annotations.clone();
        if let Some((_, key, value)) = &claimed {
            annotations.insert(key.clone(), value.clone());
        }
        let w = rtslice_spec::annotations::container_workload(&annotations, None, &req.container, &name, self.node_section())
            .map_err(|e| NodeError::Spec(e.iter().map(|x| x.to_string()).collect()))?;
        let Some(w) = w else { return Ok(None) };
        if let Err(reason) = refuse_unsupported(&w, self.mechanism()) {
            self.event("refused", Some(&name), reason.clone());
            return Err(NodeError::Unfit(reason));
        }
        // Who may ask: the namespace's allowance, with what it holds here besides this container's
        // own claim (which the container takes over).
        let claim_bw = claimed.as_ref().map(|(c, _, _)| rtslice_spec::access::demand_bandwidth(&c.workload)).unwrap_or(0.0);
        let held = self.held_by_namespace(&req.namespace) - claim_bw;
        if let Err(reason) = self.access.check(&req.namespace, &w, held) {
            let reason = format!("container {} of pod {}/{}: {reason}", req.container, req.namespace, req.pod);
            self.event("refused", Some(&name), reason.clone());
            return Err(NodeError::Forbidden(reason));
        }
        // In its claim's place: the claim's own bandwidth is not counted against it.
        let claim_name = claimed.as_ref().map(|(c, _, _)| c.workload.name.clone());
        let except: Vec<&str> = claim_name.iter().map(String::as_str).collect();
        let (plan, setup) = match self.admit(&w, &except) {
            Ok(x) => x,
            Err((reason, _)) => {
                self.event("refused", Some(&name), format!("container {} of pod {}/{}: {reason}", req.container, req.namespace, req.pod));
                return Err(NodeError::Unfit(reason));
            }
        };
        let mut pinned = w.clone();
        pinned.demand = pinned.demand.take().map(|d| match d {
            Demand::Reservation(mut r) => {
                r.cpus = Some(plan.cpus.clone());
                r.count = None;
                Demand::Reservation(r)
            }
            Demand::Dedicated(mut x) => {
                x.cpus = Some(plan.cpus.clone());
                x.count = None;
                Demand::Dedicated(x)
            }
            other => other,
        });
        let ws = setup.workloads.into_iter().next().ok_or_else(|| NodeError::State("the plan gave no workload setup".into()))?;
        let entry = ContainerEntry {
            id: req.id.clone(),
            namespace: req.namespace.clone(),
            pod: req.pod.clone(),
            pod_uid: req.pod_uid.clone(),
            container: req.container.clone(),
            workload: pinned,
            cpus: plan.cpus.clone(),
            setup: ws,
            irqs: setup.irqs,
            applied: None,
            claim: claimed.as_ref().map(|(c, _, _)| c.uid.clone()),
        };
        self.containers.entries.insert(req.id.clone(), entry);
        self.containers.save()?;
        if let Some((c, _, _)) = &claimed {
            if let Some(e) = self.claims.entries.get_mut(&c.uid) {
                e.holder = Some(req.id.clone());
            }
            self.claims.save()?;
        }
        self.event("admitted", Some(&name), format!("container {} on CPUs [{}]", req.id, CpuList::from_cpus(plan.cpus.iter().copied())));
        Ok(self.containers.entries.get(&req.id))
    }

    /// StartContainer: applies the reservation, thread and IRQ rules to the cgroup of `pid`, in place.
    pub fn container_start(&mut self, id: &str, pid: i32) -> Result<serde_json::Value> {
        let e = self.containers.entries.get(id).ok_or_else(|| NodeError::NotFound(format!("no rtslice container {id}")))?;
        if e.applied.is_some() {
            return Ok(json!({"id": id, "started": true}));
        }
        let name = e.workload.name.clone();
        // HCBS: the root group holds the container's budget first (the node writes the root's;
        // a node that does not reserve with HCBS does nothing here).
        let held = e.setup.group_budget.map_or(Ok(()), |r| self.host.hcbs_hold(None, r.into(), &format!("container {id}")));
        let applied = match held.and_then(|()| InPlace::apply(&e.setup, &e.irqs, pid)) {
            Ok(a) => a,
            Err(err) => {
                self.host.hcbs_settle_root();
                self.event("failed", Some(&name), format!("start of container {id}: {err}"));
                return Err(err.into());
            }
        };
        let view = json!({"id": id, "started": true, "cgroup": applied.cpu_dir, "threads": applied.threads.len()});
        self.containers.entries.get_mut(id).expect("present").applied = Some(applied);
        self.containers.save()?;
        self.event("started", Some(&name), format!("container {id} (pid {pid}): reservation and rules applied in place"));
        Ok(view)
    }

    /// Stop/RemoveContainer: undoes the start and returns the CPUs and bandwidth.
    pub fn container_release(&mut self, id: &str) -> Result<serde_json::Value> {
        let mut e = self.containers.entries.remove(id).ok_or_else(|| NodeError::NotFound(format!("no rtslice container {id}")))?;
        let problems = e.applied.as_mut().map(|a| a.release()).unwrap_or_default();
        // HCBS: the root group's budget back down to what the groups left need.
        self.host.hcbs_settle_root();
        if let Some(a) = e.applied.take().filter(|a| !a.unreturned.is_empty()) {
            self.unreturned.push((id.to_string(), a));
        }
        self.containers.save()?;
        // Its claim, still prepared, holds the bandwidth again until kubelet unprepares it.
        if let Some(c) = e.claim.as_ref().and_then(|uid| self.claims.entries.get_mut(uid)) {
            c.holder = None;
            self.claims.save()?;
        }
        self.event(
            "removed",
            Some(&e.workload.name),
            if problems.is_empty() { format!("container {id} released") } else { format!("container {id} released; {}", problems.join("; ")) },
        );
        self.retry_pending()?;
        Ok(json!({"id": id, "released": true, "problems": problems}))
    }

    /// Tries again the RT budget changes released containers could not give back (the rescan tick):
    /// until then the kernel holds budget for a container that is gone, and the next container may
    /// find none.
    pub fn retry_unreturned(&mut self) {
        let before = self.unreturned.len();
        self.unreturned.retain_mut(|(_, a)| !a.retry_release());
        for _ in self.unreturned.len()..before {
            self.event("removed", None, "an RT budget a released container held is given back".into());
        }
    }

    /// The real-time bandwidth namespace `ns` holds on this node (CPUs): its containers' and its
    /// claims no container holds yet (a held claim counts once, through its container).
    pub(crate) fn held_by_namespace(&self, ns: &str) -> f64 {
        let bw = rtslice_spec::access::demand_bandwidth;
        self.containers.entries.values().filter(|e| e.namespace == ns).map(|e| bw(&e.workload)).sum::<f64>()
            + self.claims.entries.values().filter(|c| c.namespace == ns && c.holder.is_none()).map(|c| bw(&c.workload)).sum::<f64>()
    }

    pub fn container_list(&self) -> Vec<&ContainerEntry> {
        self.containers.entries.values().collect()
    }

    /// `GET /v1/inventory`: what the node publishes for the scheduler extender (rtslice-cluster's
    /// `Inventory`, docs/kubernetes.md).
    pub fn cluster_inventory(&self) -> serde_json::Value {
        let plan = self.planner(&[]).plan();
        let mut pods: Vec<&str> = self.containers.entries.values().map(|e| e.pod_uid.as_str()).filter(|u| !u.is_empty()).collect();
        pods.sort();
        pods.dedup();
        let node = rtslice_spec::Node {
            name: plan.node.name.clone(),
            cpus: rtslice_spec::NodeCpus::List(plan.node.cpus.clone()),
            housekeeping: plan.node.housekeeping.clone(),
            cap: plan.node.cap,
            default_period: self.node_section().default_period,
            policy: plan.node.policy,
            topology: plan.node.topology.as_ref().map(|t| t.to_topology()),
            // Pod annotations carry no cache request, so the inventory need not carry the L3.
            ..Default::default()
        };
        json!({
            "version": 1,
            "node": node,
            "isolated": plan.node.isolcpus,
            "mechanism": self.mechanism(),
            "inventoryOnly": false,
            "perCpu": plan.node.per_cpu,
            "pods": pods,
            // Every claim, held by a container or not: the extender counts them in their namespace's sums.
            "claims": self.claims.entries.values().map(|c| json!({"namespace": c.namespace, "bandwidth": rtslice_spec::access::demand_bandwidth(&c.workload)})).collect::<Vec<_>>(),
        })
    }
}
