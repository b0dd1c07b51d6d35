//! Cache allocation (Intel CAT / AMD L3 QoS) and memory-bandwidth allocation (MBA) through Linux
//! resctrl: what a workload asks for and what the node's last-level cache offers. Field names follow
//! resctrl's `info/L3/` files so a user can copy them: `cbm_mask` → `ways` (its set bits),
//! `min_cbm_bits` → `minWays`, `num_closids` → `closids`, `shareable_bits` → `shareableMask`.

use serde::{Deserialize, Serialize};

use crate::cpulist::serde_cpus;

/// Class-of-service ids the spec assumes when `node.cache` omits `closids`: 16 is what Intel
/// Xeon parts since Broadwell offer for L3 CAT (resctrl's `info/L3/num_closids`).
pub const DEFAULT_CLOSIDS: u32 = 16;
/// resctrl's `info/MB/min_bandwidth` and `bandwidth_gran` on Intel MBA when the spec omits them.
pub const DEFAULT_MBA_MIN: u32 = 10;
pub const DEFAULT_MBA_GRANULARITY: u32 = 10;

/// How much of the last-level cache a workload asks for, in each cache domain its CPUs touch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum CacheRequest {
    /// This many ways (bits of the capacity bitmask).
    Ways(u32),
    /// This fraction of the node's ways (`25%`), rounded up to whole ways and at least `minWays`.
    Share(f64),
    /// Exactly these ways: one capacity bitmask per L3 id (`masks: {0: f0, 1: f0}`), as resctrl's
    /// `schemata` lists them; every L3 the workload's CPUs touch needs one. The node service pins a
    /// running workload's ways this way, so admitting another never moves them.
    Masks(std::collections::BTreeMap<u32, u64>),
}

/// True when `m`'s set bits form one run (Intel CAT's rule for a capacity bitmask); the empty mask
/// is not a valid one.
pub fn contiguous(m: u64) -> bool {
    m != 0 && {
        let shifted = m >> m.trailing_zeros();
        shifted & (shifted.wrapping_add(1)) == 0
    }
}

/// The longest run of set bits of `m` (the higher one on a tie); 0 for 0.
pub fn longest_run(m: u64) -> u64 {
    let (mut best, mut best_len) = (0u64, 0u32);
    let mut rest = m;
    while rest != 0 {
        let lo = rest.trailing_zeros();
        let len = (rest >> lo).trailing_ones();
        let run = if len >= 64 { u64::MAX } else { ((1u64 << len) - 1) << lo };
        if len >= best_len {
            (best, best_len) = (run, len);
        }
        rest &= !run;
    }
    best
}

/// The node's L3 cache as resctrl exposes it. Absent from a spec: discovered from
/// `/sys/fs/resctrl/info/L3` on the host (rtslice-host fills `NodeFacts::cache`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeCache {
    /// Ways of each L3 (the set bits of `info/L3/cbm_mask`, which are contiguous from bit 0).
    pub ways: u32,
    /// The fewest ways a group may hold (`info/L3/min_cbm_bits`).
    #[serde(default = "one")]
    pub min_ways: u32,
    /// Classes of service (`info/L3/num_closids`); the default group holds one of them.
    #[serde(default = "default_closids")]
    pub closids: u32,
    /// Ways the hardware shares with other agents (I/O, GPU: `info/L3/shareable_bits`); never
    /// given to a workload exclusively.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub shareable_mask: u64,
    /// The L3 instances (resctrl's domain ids, the `0` of `L3:0=fff`) and their CPUs. Empty: one
    /// domain, id 0, holding every CPU of the node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub domains: Vec<CacheDomain>,
    /// Memory-bandwidth allocation (`info/MB`), when the node has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mba: Option<Mba>,
}

impl NodeCache {
    /// `info/L3/cbm_mask`: every way.
    pub fn full_mask(&self) -> u64 {
        if self.ways >= 64 {
            u64::MAX
        } else {
            (1u64 << self.ways) - 1
        }
    }
}

/// One L3 instance: its resctrl id and the CPUs sharing it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CacheDomain {
    pub id: u32,
    #[serde(with = "serde_cpus")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::schema::CpuListText"))]
    pub cpus: Vec<u32>,
}

/// Memory-bandwidth allocation steps (`info/MB/min_bandwidth`, `info/MB/bandwidth_gran`), percent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Mba {
    #[serde(default = "default_mba_min")]
    pub min: u32,
    #[serde(default = "default_mba_granularity")]
    pub granularity: u32,
}

impl Default for Mba {
    fn default() -> Mba {
        Mba { min: DEFAULT_MBA_MIN, granularity: DEFAULT_MBA_GRANULARITY }
    }
}

fn one() -> u32 {
    1
}
fn default_closids() -> u32 {
    DEFAULT_CLOSIDS
}
fn default_mba_min() -> u32 {
    DEFAULT_MBA_MIN
}
fn default_mba_granularity() -> u32 {
    DEFAULT_MBA_GRANULARITY
}
fn is_zero(x: &u64) -> bool {
    *x == 0
}
