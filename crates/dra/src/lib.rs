//! rtslice-dra: the Dynamic Resource Allocation model of real-time CPU bandwidth (docs/dra.md).
//! Pure: no I/O. The node service uses it to publish its CPUs and to admit allocated claims; the
//! kubelet plugin (k8s/dra) only carries its JSON between the node service and Kubernetes.
//!
//! - [`devices`]: a node's plan as the devices of its ResourceSlice: one device per reservable CPU,
//!   with a consumable `bandwidth` capacity (what the node's cap leaves once the workloads the
//!   scheduler does not see — spec workloads, annotated pods, foreign real-time threads — are
//!   counted), so kube-scheduler's own allocator does per-CPU admission under the cap.
//! - [`claim`]: an allocated ResourceClaim as the spec demand it stands for — the bandwidth it
//!   consumes on each CPU becomes a reservation pinned to those CPUs (runtime = bandwidth × period),
//!   a claim of the dedicated class becomes dedicated CPUs.
//! - [`quantity`]: Kubernetes quantities as thousandths of a CPU.

pub mod claim;
pub mod devices;
pub mod quantity;

pub use claim::{claim, claim_workload_name, Claim, Parameters};
pub use devices::{cpu_of, device_name, devices, free_milli};

/// The driver's name: the ResourceSlices' driver, the domain of its attributes and capacities, the
/// DeviceClasses' selector, the opaque parameters' driver and the CDI vendor.
pub const DRIVER: &str = "rtslice.io";

/// The consumable capacity of each CPU device, in CPUs (`700m` = 70 % of one CPU).
pub const BANDWIDTH: &str = "bandwidth";

/// The environment variable (one per claim: the prefix, then the claim's UID with `-` as `_`) that
/// the claim's CDI device puts into the containers that use it, so the node service can tell at
/// CreateContainer which container holds which claim (NRI shows the environment, not the pod spec).
pub const ENV_PREFIX: &str = "RTSLICE_CLAIM_";

/// The CDI device kind of a prepared claim (`rtslice.io/claim=<uid>`).
pub const CDI_KIND: &str = "rtslice.io/claim";

/// The environment entry `KEY=VALUE` that marks a container as the holder of claim `uid`.
pub fn claim_env(uid: &str) -> String {
    format!("{ENV_PREFIX}{}={uid}", uid.replace('-', "_"))
}

/// The claim UIDs a container's environment names (see [`ENV_PREFIX`]).
pub fn claims_in_env<'a>(env: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = env
        .into_iter()
        .filter(|e| e.starts_with(ENV_PREFIX))
        .filter_map(|e| e.split_once('=').map(|(_, v)| v.to_string()))
        .filter(|v| !v.is_empty())
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_s_environment_entry_names_it_back() {
        let uid = "0c1e8a5e-7b1f-4c2a-9d1e-2f3a4b5c6d7e";
        let e = claim_env(uid);
        assert_eq!(e, "RTSLICE_CLAIM_0c1e8a5e_7b1f_4c2a_9d1e_2f3a4b5c6d7e=0c1e8a5e-7b1f-4c2a-9d1e-2f3a4b5c6d7e");
        assert_eq!(claims_in_env([e.as_str(), "PATH=/bin", "RTSLICE_CLAIM_x="]), vec![uid.to_string()]);
    }
}
