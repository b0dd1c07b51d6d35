//! An allocated ResourceClaim (resource.k8s.io/v1, as the kubelet plugin receives it) as the spec
//! demand it stands for.
//!
//! - The CPUs are the devices kube-scheduler allocated from this node's pool; they must be
//!   distinct (a claim asks for that with one request per CPU under `constraints:
//!   [{distinctAttribute: rtslice.io/cpu}]`; KEP-5075 would otherwise allow one CPU twice).
//! - Bandwidth: what the allocation consumed on each CPU (`consumedCapacity.bandwidth`), the same on
//!   every CPU (a spec reservation is one runtime per CPU). The reservation is that bandwidth ×
//!   the period, the period from the claim's or its class's opaque parameters, else the node's.
//! - Dedicated: the `dedicated` parameter (set by the rtslice-dedicated DeviceClass): the CPUs,
//!   whole.
//!
//! Only the budget comes from the claim: it is the resource, visible to quota and to `kubectl
//! describe`. Thread rules and SLOs describe the program in the container and stay in the pod's
//! annotations, where the annotation path has them too.

use std::collections::BTreeMap;
use std::time::Duration;

use rtslice_spec::{Dedicated, Demand, Reservation};
use serde::Deserialize;
use serde_json::Value;

use crate::devices::cpu_of;
use crate::quantity::parse_milli;
use crate::{BANDWIDTH, DRIVER};

/// The driver's opaque parameters (`spec.devices.config[].opaque.parameters` of a claim, or of a
/// DeviceClass; the claim's win field by field).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Parameters {
    /// The reservation's period (`10ms`, `1ms`): latency is bounded by it, overhead grows as it
    /// shrinks. Default: the node's `defaultPeriod`.
    #[serde(default)]
    pub period: Option<String>,
    /// Whole CPUs rather than bandwidth (the rtslice-dedicated class sets it).
    #[serde(default)]
    pub dedicated: Option<bool>,
}

impl Parameters {
    fn over(self, base: Parameters) -> Parameters {
        Parameters { period: self.period.or(base.period), dedicated: self.dedicated.or(base.dedicated) }
    }
}

/// What an allocated claim asks of this node.
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// The pods it is reserved for (`status.reservedFor`), by UID.
    pub pods: Vec<String>,
    /// The CPUs allocated, ascending.
    pub cpus: Vec<u32>,
    /// The demand, pinned to `cpus`.
    pub demand: Demand,
}

/// The workload name a claim's reservation holds on the node: `claim.<namespace>.<name>`.
pub fn claim_workload_name(namespace: &str, name: &str) -> String {
    rtslice_spec::annotations::workload_name("claim", namespace, name)
}

#[derive(Deserialize)]
struct Raw {
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    status: Status,
}

#[derive(Default, Deserialize)]
struct Meta {
    #[serde(default)]
    uid: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    #[serde(default)]
    allocation: Option<Allocation>,
    #[serde(default)]
    reserved_for: Vec<Consumer>,
}

#[derive(Deserialize)]
struct Allocation {
    #[serde(default)]
    devices: DeviceAllocation,
}

#[derive(Default, Deserialize)]
struct DeviceAllocation {
    #[serde(default)]
    results: Vec<AllocResult>,
    #[serde(default)]
    config: Vec<AllocConfig>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AllocResult {
    #[serde(default)]
    request: String,
    driver: String,
    pool: String,
    device: String,
    #[serde(default)]
    consumed_capacity: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct AllocConfig {
    #[serde(default)]
    source: String,
    #[serde(default)]
    opaque: Option<Opaque>,
}

#[derive(Deserialize)]
struct Opaque {
    driver: String,
    #[serde(default)]
    parameters: Value,
}

#[derive(Deserialize)]
struct Consumer {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    uid: String,
}

/// The demand of an allocated claim on the node whose pool is `pool`, or why it cannot be one.
pub fn claim(json: &Value, pool: &str, default_period: Duration) -> Result<Claim, String> {
    let raw: Raw = serde_json::from_value(json.clone()).map_err(|e| format!("not a ResourceClaim: {e}"))?;
    let Meta { uid, namespace, name } = raw.metadata;
    if uid.is_empty() || name.is_empty() {
        return Err("the ResourceClaim has no metadata.uid or metadata.name".into());
    }
    let what = format!("claim {namespace}/{name}");
    let alloc = raw.status.allocation.ok_or_else(|| format!("{what} is not allocated yet"))?;
    let mine: Vec<&AllocResult> = alloc.devices.results.iter().filter(|r| r.driver == DRIVER).collect();
    if mine.is_empty() {
        return Err(format!("{what} holds no {DRIVER} device"));
    }
    let mut params = Parameters::default();
    // Class configs first, then the claim's: the claim's override the class's defaults.
    for from_claim in [false, true] {
        for c in alloc.devices.config.iter().filter(|c| (c.source == "FromClaim") == from_claim) {
            let Some(o) = c.opaque.as_ref().filter(|o| o.driver == DRIVER) else { continue };
            let p: Parameters = serde_json::from_value(o.parameters.clone())
                .map_err(|e| format!("{what}: {DRIVER} parameters: {e} (rtslice reads `period` and `dedicated`)"))?;
            params = p.over(params);
        }
    }
    let mut cpus = Vec::new();
    for r in &mine {
        if r.pool != pool {
            return Err(format!("{what}: device {} of request `{}` is in pool `{}`, and this node's pool is `{pool}`", r.device, r.request, r.pool));
        }
        let cpu = cpu_of(&r.device).ok_or_else(|| format!("{what}: `{}` is not a device rtslice publishes (cpu-<n>)", r.device))?;
        if cpus.contains(&cpu) {
            return Err(format!(
                "{what}: CPU {cpu} is allocated twice; one reservation holds each CPU once: ask one request per CPU, all under \
                 `constraints: [{{requests: [...], distinctAttribute: {DRIVER}/cpu}}]` (before Kubernetes 1.37 the allocator \
                 keeps a `count: N` request's CPUs distinct only for N <= 2; docs/dra.md)"
            ));
        }
        cpus.push(cpu);
    }
    cpus.sort_unstable();
    let pods = raw.status.reserved_for.into_iter().filter(|c| c.resource == "pods" && !c.uid.is_empty()).map(|c| c.uid).collect();
    let demand = if params.dedicated == Some(true) {
        Demand::Dedicated(Dedicated { count: None, cpus: Some(cpus.clone()) })
    } else {
        let mut per_cpu = None;
        for r in &mine {
            let q = r.consumed_capacity.get(BANDWIDTH).ok_or_else(|| {
                format!("{what}: the allocation of {} records no consumed {BANDWIDTH} (is the DRAConsumableCapacity feature gate on for kube-apiserver and kube-scheduler?)", r.device)
            })?;
            let m = parse_milli(q).map_err(|e| format!("{what}: {}: {e}", r.device))?;
            match per_cpu {
                None => per_cpu = Some((m, &r.device)),
                Some((m0, d0)) if m0 != m => {
                    return Err(format!(
                        "{what} consumes {m0}m of {d0} and {m}m of {}: a reservation is one runtime on each of its CPUs; ask the same bandwidth in every request, or use one claim per bandwidth",
                        r.device
                    ))
                }
                Some(_) => {}
            }
        }
        let (m, _) = per_cpu.expect("at least one result");
        if m == 0 {
            return Err(format!("{what} consumes no bandwidth"));
        }
        let period = match &params.period {
            Some(p) => rtslice_spec::units::parse_duration(p).map_err(|e| format!("{what}: period `{p}`: {e}"))?,
            None => default_period,
        };
        if period.is_zero() {
            return Err(format!("{what}: the period is zero"));
        }
        // Runtime rounded down to the microsecond: the node admits exactly what kube-scheduler
        // allocated, and rounding up would put a CPU filled to the cap over it (500m of 33.333 ms
        // is 16,666.5 µs; tests/props.rs found it). The cost is under 1 µs per period.
        let runtime_us = period.as_nanos() * m as u128 / (1000 * 1000);
        if runtime_us == 0 {
            return Err(format!("{what}: {m}m of a {period:?} period is less than the 1 µs the kernel can enforce; ask more bandwidth or a longer period"));
        }
        Demand::Reservation(Reservation {
            runtime: Duration::from_micros(runtime_us as u64),
            period: Some(period),
            count: None,
            cpus: Some(cpus.clone()),
            reclaim: None,
        })
    };
    Ok(Claim { uid, namespace, name, pods, cpus, demand })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn allocated(results: Value, config: Value) -> Value {
        json!({
            "metadata": {"uid": "u-1", "namespace": "ran", "name": "du"},
            "status": {
                "allocation": {"devices": {"results": results, "config": config}},
                "reservedFor": [{"resource": "pods", "name": "du-0", "uid": "pod-1"}]
            }
        })
    }

    fn result(dev: &str, bw: &str) -> Value {
        json!({"request": "cpus", "driver": DRIVER, "pool": "n1", "device": dev, "consumedCapacity": {"bandwidth": bw}})
    }

    #[test]
    fn bandwidth_on_distinct_cpus_is_a_pinned_reservation() {
        let c = claim(&allocated(json!([result("cpu-3", "300m"), result("cpu-2", "300m")]), json!([])), "n1", Duration::from_millis(10)).unwrap();
        assert_eq!(c.cpus, vec![2, 3]);
        assert_eq!(c.pods, vec!["pod-1".to_string()]);
        let Demand::Reservation(r) = c.demand else { panic!("{:?}", c.demand) };
        assert_eq!((r.runtime, r.period, r.cpus), (Duration::from_millis(3), Some(Duration::from_millis(10)), Some(vec![2, 3])));
    }

    #[test]
    fn the_claim_s_period_overrides_the_class_s_and_dedicated_comes_from_the_class() {
        let cfg = json!([
            {"source": "FromClass", "opaque": {"driver": DRIVER, "parameters": {"period": "1ms"}}},
            {"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {"period": "5ms"}}},
            {"source": "FromClaim", "opaque": {"driver": "other.io", "parameters": {"anything": 1}}}
        ]);
        let c = claim(&allocated(json!([result("cpu-1", "333m")]), cfg), "n1", Duration::from_millis(10)).unwrap();
        let Demand::Reservation(r) = c.demand else { panic!() };
        assert_eq!((r.runtime, r.period), (Duration::from_micros(1665), Some(Duration::from_millis(5))));
        let cfg = json!([{"source": "FromClass", "opaque": {"driver": DRIVER, "parameters": {"dedicated": true}}}]);
        let c = claim(&allocated(json!([{"request": "cpus", "driver": DRIVER, "pool": "n1", "device": "cpu-1"}]), cfg), "n1", Duration::from_millis(10)).unwrap();
        assert_eq!(c.demand, Demand::Dedicated(Dedicated { count: None, cpus: Some(vec![1]) }));
    }

    #[test]
    fn what_cannot_be_a_reservation_is_refused_with_the_fix() {
        let p = Duration::from_millis(10);
        let err = |results: Value, cfg: Value| claim(&allocated(results, cfg), "n1", p).unwrap_err();
        assert!(err(json!([result("cpu-1", "300m"), result("cpu-1", "300m")]), json!([])).contains("distinctAttribute"));
        assert!(err(json!([result("cpu-1", "300m"), result("cpu-2", "200m")]), json!([])).contains("one claim per bandwidth"));
        assert!(err(json!([{"request": "c", "driver": DRIVER, "pool": "n1", "device": "cpu-1"}]), json!([])).contains("DRAConsumableCapacity"));
        assert!(err(json!([{"request": "c", "driver": DRIVER, "pool": "n2", "device": "cpu-1", "consumedCapacity": {"bandwidth": "1m"}}]), json!([])).contains("pool"));
        assert!(err(json!([result("gpu-0", "300m")]), json!([])).contains("not a device"));
        assert!(err(json!([{"request": "c", "driver": "gpu.io", "pool": "n1", "device": "g"}]), json!([])).contains("no rtslice.io device"));
        let bad = json!([{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {"perod": "1ms"}}}]);
        assert!(err(json!([result("cpu-1", "300m")]), bad).contains("unknown field"));
        let unallocated = json!({"metadata": {"uid": "u", "namespace": "a", "name": "b"}});
        assert!(claim(&unallocated, "n1", p).unwrap_err().contains("not allocated"));
        assert!(claim(&json!([1, 2]), "n1", p).unwrap_err().contains("not a ResourceClaim"));
    }
}
