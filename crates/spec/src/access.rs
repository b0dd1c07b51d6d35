//! Who may ask (docs/kubernetes.md, "Who may ask"): the cluster admin's access policy over what Kubernetes
//! namespaces may get from rtslice — real-time threads, whole CPUs and host-wide IRQ changes are a
//! way to starve a node, so nothing is allowed until a namespace is named.
//!
//! ```yaml
//! apiVersion: rtslice/v1
//! access:
//!   namespaces:
//!     ran:                   # may ask; what follows are its limits (defaults shown)
//!       reservation: true    # real-time bandwidth (annotations or DRA claims)
//!       dedicated: false     # whole CPUs
//!       maxPriority: 49      # highest SCHED_FIFO/RR priority of a thread rule (the kernel's IRQ threads run at 50)
//!       deadline: false      # SCHED_DEADLINE thread rules
//!       irqs: false          # IRQ and RPS/XPS rules (host-wide files)
//!       isolcpus: false      # placement on the kernel's isolated CPUs
//!       bandwidth: 2         # CPUs of real-time bandwidth the namespace may hold on one node (default: no limit)
//!       clusterBandwidth: 6  # … in the whole cluster, summed over its nodes (default: no limit)
//! ```
//!
//! Pure: the node service checks a container or a claim at admission (with what the namespace
//! already holds on the node), the scheduler extender at filtering (with what the namespace's
//! annotated pods hold on each node and in the cluster); the reason is the pod's event.

use std::collections::BTreeMap;

use rtslice_yaml::{self as yaml, DocKind, Errors, Reader};

use crate::types::{Demand, SchedPolicy, Workload};

/// The admin's access policy: the namespaces that may ask, each with its limits.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Access {
    pub namespaces: BTreeMap<String, Allowance>,
}

/// What one namespace may ask for.
#[derive(Clone, Debug, PartialEq)]
pub struct Allowance {
    pub reservation: bool,
    pub dedicated: bool,
    pub max_priority: u32,
    pub deadline: bool,
    pub irqs: bool,
    pub isolcpus: bool,
    /// CPUs of real-time bandwidth (reservations' runtime/period times their CPUs, a dedicated CPU
    /// as 1) the namespace may hold on one node.
    pub bandwidth: Option<f64>,
    /// The same, summed over every node of the cluster (the extender's check: only it sees them all).
    pub cluster_bandwidth: Option<f64>,
}

/// Where a bandwidth limit applies: one node, or the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Node,
    Cluster,
}

/// The SCHED_FIFO/RR ceiling of a named namespace unless the policy says otherwise: below the
/// kernel's threaded IRQ handlers (FIFO 50), so a pod cannot starve the node's interrupts.
pub const DEFAULT_MAX_PRIORITY: u32 = 49;

impl Default for Allowance {
    fn default() -> Self {
        Allowance {
            reservation: true,
            dedicated: false,
            max_priority: DEFAULT_MAX_PRIORITY,
            deadline: false,
            irqs: false,
            isolcpus: false,
            bandwidth: None,
            cluster_bandwidth: None,
        }
    }
}

/// The real-time bandwidth a workload's demand holds, in CPUs (a dedicated CPU counts 1).
pub fn demand_bandwidth(w: &Workload) -> f64 {
    match &w.demand {
        Some(Demand::Reservation(r)) => {
            let period = r.period.map(|p| p.as_secs_f64()).unwrap_or(0.0);
            let n = r.cpus.as_ref().map(|c| c.len() as u32).or(r.count).unwrap_or(1);
            if period > 0.0 {
                r.runtime.as_secs_f64() / period * n as f64
            } else {
                0.0
            }
        }
        Some(Demand::Dedicated(d)) => d.cpus.as_ref().map(|c| c.len() as u32).or(d.count).unwrap_or(1) as f64,
        _ => 0.0,
    }
}

const FIX: &str = "a cluster admin changes it in the access policy (`access.namespaces`, docs/kubernetes.md \"Who may ask\")";

impl Access {
    /// Whether namespace `ns` may have `w`, given the bandwidth its workloads already hold on this
    /// node (`held`, CPUs; pass 0 where only the kind of request is judged). The reason names the
    /// limit and who can change it.
    pub fn check(&self, ns: &str, w: &Workload, held: f64) -> Result<(), String> {
        self.check_kind(ns, w)?;
        self.check_bandwidth(ns, Scope::Node, held, demand_bandwidth(w))
    }

    /// Whether namespace `ns` may ask for what `w` asks at all (the policy's flags and ceilings),
    /// whatever it holds.
    pub fn check_kind(&self, ns: &str, w: &Workload) -> Result<(), String> {
        let Some(a) = self.namespaces.get(ns) else {
            let named: Vec<&str> = self.namespaces.keys().map(String::as_str).collect();
            let which = if named.is_empty() { "no namespace".to_string() } else { format!("only {}", named.join(", ")) };
            return Err(format!("namespace `{ns}` may not ask for real-time CPUs: the access policy allows {which}; {FIX}"));
        };
        match &w.demand {
            Some(Demand::Reservation(_)) if !a.reservation => return Err(format!("namespace `{ns}` may not ask for reservations; {FIX}")),
            Some(Demand::Dedicated(_)) if !a.dedicated => return Err(format!("namespace `{ns}` may not ask for dedicated CPUs; {FIX}")),
            _ => {}
        }
        for r in &w.threads {
            match r.policy {
                SchedPolicy::Fifo { priority, .. } | SchedPolicy::Rr { priority, .. } if priority > a.max_priority => {
                    return Err(format!(
                        "thread rule `{}`: priority {priority} is above namespace `{ns}`'s ceiling of {}; {FIX}",
                        r.pattern, a.max_priority
                    ))
                }
                SchedPolicy::Deadline { .. } if !a.deadline => {
                    return Err(format!("thread rule `{}`: namespace `{ns}` may not use SCHED_DEADLINE rules; {FIX}", r.pattern))
                }
                _ => {}
            }
        }
        if !a.irqs && (!w.irqs.is_empty() || !w.net.is_empty()) {
            return Err(format!("namespace `{ns}` may not change IRQ affinity or RPS/XPS masks (host-wide); {FIX}"));
        }
        if !a.isolcpus && w.isolation.isolcpus {
            return Err(format!("namespace `{ns}` may not ask for the kernel's isolated CPUs; {FIX}"));
        }
        Ok(())
    }

    /// Whether namespace `ns`, holding `held` CPUs of real-time bandwidth in `scope`, may take
    /// `asks` more there. A namespace the policy does not name holds no allowance (`check_kind`
    /// refuses it first).
    pub fn check_bandwidth(&self, ns: &str, scope: Scope, held: f64, asks: f64) -> Result<(), String> {
        let Some(a) = self.namespaces.get(ns) else { return Ok(()) };
        let (limit, where_) = match scope {
            Scope::Node => (a.bandwidth, "on this node"),
            Scope::Cluster => (a.cluster_bandwidth, "in the cluster"),
        };
        match limit {
            // A millionth of slack: sums of runtime/period ratios are floats.
            Some(limit) if held + asks > limit + 1e-6 => Err(format!(
                "namespace `{ns}` may hold {limit} CPU(s) of real-time bandwidth {where_}; it holds {held:.3} and this asks {asks:.3}; {FIX}"
            )),
            _ => Ok(()),
        }
    }
}

const NAMESPACE_FIELDS: &[&str] = &["reservation", "dedicated", "maxPriority", "deadline", "irqs", "isolcpus", "bandwidth", "clusterBandwidth"];

/// Reads an access policy file (`apiVersion: rtslice/v1`, `access: {namespaces: …}`), every error located.
pub fn parse_access(text: &str, file: &str) -> Result<Access, Errors> {
    let root = yaml::load(text, file, DocKind { noun: "access policy", empty_hint: "an access policy starts with `apiVersion: rtslice/v1` and `access: {namespaces: …}`" })?;
    let mut r = Reader::new(file, "access policy");
    let mut access = Access::default();
    if let Some(top) = r.fields(&root, "", &["apiVersion", "access"]) {
        match top.get("apiVersion").and_then(|v| v.as_str()) {
            Some("rtslice/v1") => {}
            _ => r.err(top.node(), "apiVersion", "missing or not `rtslice/v1`; an access policy starts with `apiVersion: rtslice/v1`"),
        }
        let body = top.get("access").and_then(|p| r.fields(p, "access", &["namespaces"]));
        if body.is_none() && !top.has("access") {
            r.err(top.node(), "access", "missing; give `access: {namespaces: {<namespace>: {}}}`");
        }
        let spaces = body.and_then(|b| b.optional(&mut r, "namespaces", |r, n, p| r.map(n, p)));
        for (ns, _, v) in spaces.iter().flat_map(|m| m.entries()) {
            let path = format!("access.namespaces.{ns}");
            let mut a = Allowance::default();
            if !v.is_null() {
                let Some(m) = r.fields(v, &path, NAMESPACE_FIELDS) else { continue };
                let flag = |r: &mut Reader<'_>, key: &str, into: &mut bool| {
                    if let Some(b) = m.optional(r, key, |r, n, p| r.boolean(n, p)) {
                        *into = b;
                    }
                };
                flag(&mut r, "reservation", &mut a.reservation);
                flag(&mut r, "dedicated", &mut a.dedicated);
                flag(&mut r, "deadline", &mut a.deadline);
                flag(&mut r, "irqs", &mut a.irqs);
                flag(&mut r, "isolcpus", &mut a.isolcpus);
                if let Some(p) = m.optional(&mut r, "maxPriority", |r, n, p| r.int(n, p, 0, 99)) {
                    a.max_priority = p as u32;
                }
                for (key, into) in [("bandwidth", &mut a.bandwidth), ("clusterBandwidth", &mut a.cluster_bandwidth)] {
                    if let Some(b) = m.optional(&mut r, key, |r, n, p| r.float(n, p)) {
                        if b >= 0.0 && b.is_finite() {
                            *into = Some(b);
                        } else {
                            r.err(m.get(key).unwrap_or(v), &format!("{path}.{key}"), "must be a number of CPUs, 0 or more");
                        }
                    }
                }
            }
            access.namespaces.insert(ns.to_string(), a);
        }
    }
    r.finish(Some(access))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Dedicated, Reservation, ThreadRule};
    use std::time::Duration;

    fn reserved(pct: u64, cpus: u32) -> Workload {
        Workload {
            name: "w".into(),
            demand: Some(Demand::Reservation(Reservation {
                runtime: Duration::from_millis(pct),
                period: Some(Duration::from_millis(100)),
                count: Some(cpus),
                cpus: None,
                reclaim: None,
            })),
            ..Workload::default()
        }
    }

    fn rule(policy: SchedPolicy) -> ThreadRule {
        ThreadRule { pattern: "^phy".into(), policy, ..ThreadRule::default() }
    }

    #[test]
    fn nothing_is_allowed_until_a_namespace_is_named() {
        let e = Access::default().check("ran", &reserved(10, 1), 0.0).unwrap_err();
        assert!(e.contains("namespace `ran` may not ask") && e.contains("no namespace"), "{e}");
        let p = parse_access("apiVersion: rtslice/v1\naccess:\n  namespaces:\n    ran:\n", "p.yaml").unwrap();
        assert_eq!(p.namespaces["ran"], Allowance::default());
        assert!(p.check("ran", &reserved(10, 1), 0.0).is_ok());
        assert!(p.check("default", &reserved(10, 1), 0.0).unwrap_err().contains("only ran"));
        // What deploy/k8s ships: the file, no namespace.
        let none = parse_access("apiVersion: rtslice/v1\naccess:\n  namespaces: {}\n", "a.yaml").unwrap();
        assert_eq!(none, Access::default());
    }

    #[test]
    fn each_limit_refuses_with_its_reason() {
        let p = parse_access(
            "apiVersion: rtslice/v1\naccess:\n  namespaces:\n    ran: {maxPriority: 80, bandwidth: 1.5}\n    lab: {dedicated: true, deadline: true, irqs: true, isolcpus: true, reservation: false}\n",
            "p.yaml",
        )
        .unwrap();
        let mut w = reserved(40, 2);
        assert!(p.check("ran", &w, 0.6).is_ok(), "0.6 + 0.8 ≤ 1.5");
        assert!(p.check("ran", &w, 0.8).unwrap_err().contains("may hold 1.5 CPU(s)"));
        w.threads = vec![rule(SchedPolicy::Fifo { priority: 81, period: None })];
        assert!(p.check("ran", &w, 0.0).unwrap_err().contains("priority 81 is above namespace `ran`'s ceiling of 80"));
        w.threads = vec![rule(SchedPolicy::Rr { priority: 80, period: None })];
        assert!(p.check("ran", &w, 0.0).is_ok());
        w.isolation.isolcpus = true;
        assert!(p.check("ran", &w, 0.0).unwrap_err().contains("isolated CPUs"));
        assert!(p.check("lab", &w, 0.0).unwrap_err().contains("may not ask for reservations"));
        let d = Workload { demand: Some(Demand::Dedicated(Dedicated { count: Some(2), cpus: None })), ..Workload::default() };
        assert!(p.check("ran", &d, 0.0).unwrap_err().contains("dedicated CPUs"));
        assert!(p.check("lab", &d, 0.0).is_ok());
        assert_eq!(demand_bandwidth(&d), 2.0);
    }

    #[test]
    fn the_cluster_limit_is_its_own() {
        let p = parse_access("apiVersion: rtslice/v1\naccess:\n  namespaces:\n    ran: {bandwidth: 1, clusterBandwidth: 2.5}\n    lab:\n", "p.yaml").unwrap();
        assert_eq!(p.namespaces["ran"].cluster_bandwidth, Some(2.5));
        assert!(p.check_bandwidth("ran", Scope::Cluster, 2.0, 0.5).is_ok(), "2.0 + 0.5 ≤ 2.5");
        let e = p.check_bandwidth("ran", Scope::Cluster, 2.2, 0.5).unwrap_err();
        assert!(e.contains("may hold 2.5 CPU(s) of real-time bandwidth in the cluster; it holds 2.200 and this asks 0.500"), "{e}");
        // Each scope its own limit: 1.2 in the cluster is fine, on one node it is not.
        assert!(p.check_bandwidth("ran", Scope::Node, 0.7, 0.5).unwrap_err().contains("on this node"));
        // No limit given, none applied; an unnamed namespace is check_kind's to refuse.
        assert!(p.check_bandwidth("lab", Scope::Cluster, 100.0, 1.0).is_ok());
        assert!(p.check_bandwidth("guests", Scope::Cluster, 100.0, 1.0).is_ok());
        let e = parse_access("apiVersion: rtslice/v1\naccess:\n  namespaces:\n    ran: {clusterBandwidth: -2}\n", "p.yaml").unwrap_err();
        assert!(e.iter().any(|m| m.to_string().contains("access.namespaces.ran.clusterBandwidth")), "{e:?}");
    }

    #[test]
    fn a_bad_access_file_says_where() {
        let e = parse_access("apiVersion: rtslice/v1\naccess:\n  namespaces:\n    ran: {maxPriorty: 80, bandwidth: -1}\n", "p.yaml").unwrap_err();
        let all: Vec<String> = e.iter().map(|x| x.to_string()).collect();
        assert!(all.iter().any(|m| m.starts_with("p.yaml:4:") && m.contains("did you mean `maxPriority`")), "{all:?}");
        assert!(all.iter().any(|m| m.contains("access.namespaces.ran.bandwidth") && m.contains("0 or more")), "{all:?}");
        assert!(parse_access("apiVersion: rtslice/v2\naccess: {}\n", "p.yaml").is_err());
        assert!(parse_access("", "p.yaml").is_err());
    }
}
