//! Cache allocation (resctrl CAT) and memory-bandwidth ceilings (MBA), accounted like CPU bandwidth:
//! per L3 domain, the ways each workload holds exclusively. Intel requires every capacity bitmask
//! to be one contiguous run of set bits, the default group's included, so a grant is placed where
//! the ways left to the default group stay contiguous and at least `minWays`. Ways the hardware
//! shares with other agents (`shareableMask`) are never granted: they would not be exclusive.
//! Each group with a grant or a ceiling holds one class of service (CLOSID); the default group holds
//! CLOSID 0. docs/plan.md explains the output.

pub use rtslice_spec::{contiguous, longest_run};
use rtslice_spec::{format_cpu_list, CacheRequest, NodeCache, Workload};
use serde::{Deserialize, Serialize};

/// The node's cache as planned. JSON masks are hex strings as resctrl writes them (`ff0`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CachePlan {
    /// Ways of each L3.
    pub ways: u32,
    #[serde(with = "hex")]
    pub cbm_mask: u64,
    pub min_ways: u32,
    #[serde(with = "hex")]
    pub shareable_mask: u64,
    /// Classes of service of the hardware, and how many this plan uses (the default group's included).
    pub closids: u32,
    pub closids_used: u32,
    pub domains: Vec<CacheDomainPlan>,
    /// Memory-bandwidth allocation steps, when the node has MBA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mba: Option<rtslice_spec::Mba>,
}

/// One L3 after planning.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CacheDomainPlan {
    pub id: u32,
    pub cpus: Vec<u32>,
    /// The default (root) group's mask: every way no workload holds. Apply narrows the root
    /// `schemata` to it while any way is reserved, so best-effort work cannot evict reserved lines.
    #[serde(with = "hex")]
    pub default_mask: u64,
    /// Ways reserved here.
    pub reserved_ways: u32,
    /// Ways still grantable (contiguity aside): not reserved, not shareable, above the default's minimum.
    pub free_ways: u32,
    pub by: Vec<CacheShare>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CacheShare {
    pub workload: String,
    #[serde(with = "hex")]
    pub mask: u64,
}

/// What one workload got: its resctrl group's schemata.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct WorkloadCache {
    /// Ways per domain (0 when the group has only a bandwidth ceiling and shares the default's ways).
    pub ways: u32,
    /// Exclusive ways, or the default group's ways when `ways` is 0.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
    /// The L3 line: one mask per domain the workload's CPUs touch.
    pub l3: Vec<DomainMask>,
    /// The MB line: percent of memory bandwidth per domain (MBA), rounded up to the granularity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bandwidth_percent: Option<u32>,
}

impl WorkloadCache {
    /// The group's `schemata` text (`L3:0=f00;1=f00` and `MB:0=50;1=50`), as resctrl takes it.
    pub fn schemata(&self) -> String {
        let l3: Vec<String> = self.l3.iter().map(|d| format!("{}={:x}", d.id, d.mask)).collect();
        let mut s = format!("L3:{}", l3.join(";"));
        if let Some(p) = self.memory_bandwidth_percent {
            let mb: Vec<String> = self.l3.iter().map(|d| format!("{}={p}", d.id)).collect();
            s.push_str(&format!("\nMB:{}", mb.join(";")));
        }
        s
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DomainMask {
    pub id: u32,
    #[serde(with = "hex")]
    pub mask: u64,
}

impl CachePlan {
    /// The default group's L3 line (`L3:0=fff;1=fff` narrowed), as apply writes it to the root schemata.
    pub fn default_schemata(&self) -> String {
        let l3: Vec<String> = self.domains.iter().map(|d| format!("{}={:x}", d.id, d.default_mask)).collect();
        format!("L3:{}", l3.join(";"))
    }
    /// Whether any way is reserved (so the root group must be narrowed).
    pub fn narrows_default(&self) -> bool {
        self.domains.iter().any(|d| d.reserved_ways > 0)
    }
}

/// Accounting state: per domain, which ways each workload holds.
#[derive(Debug, Clone)]
pub(crate) struct CacheState {
    node: NodeCache,
    /// Per domain: (workload index, mask).
    held: Vec<Vec<(usize, u64)>>,
    /// Workloads holding a CLOSID (a grant or a bandwidth ceiling), with what they got.
    grants: Vec<(usize, Grant)>,
}

#[derive(Debug, Clone)]
struct Grant {
    name: String,
    ways: u32,
    domains: Vec<usize>,
    mba: Option<u32>,
}

fn popcount(m: u64) -> u32 {
    m.count_ones()
}

/// How many runs of set bits `m` has.
fn runs(m: u64) -> u32 {
    popcount(m & !(m << 1))
}

/// A run of `n` set bits starting at bit `lo`.
fn run(lo: u32, n: u32) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        ((1u64 << n) - 1) << lo
    }
}


impl CacheState {
    /// The node's cache with its domains resolved: none declared means one L3 (id 0) for every CPU.
    pub fn new(mut node: NodeCache, node_cpus: &[u32]) -> CacheState {
        if node.domains.is_empty() {
            node.domains.push(rtslice_spec::CacheDomain { id: 0, cpus: node_cpus.to_vec() });
        }
        node.domains.sort_by_key(|d| d.id);
        let held = vec![Vec::new(); node.domains.len()];
        CacheState { node, held, grants: Vec::new() }
    }

    fn used(&self, d: usize) -> u64 {
        self.held[d].iter().fold(0, |a, &(_, m)| a | m)
    }

    /// The default group's ways: the longest run of the ways no group holds (a capacity bitmask is
    /// one run). Ways freed between two held runs — a node's workload removed from the middle —
    /// are not the default's; a grant may take them.
    fn default_mask(&self, d: usize) -> u64 {
        longest_run(self.node.full_mask() & !self.used(d))
    }

    /// Grants `w` (index `i`, on `cpus`) its ways and ceiling, or says why not and what to do.
    pub fn admit(&mut self, i: usize, w: &Workload, cpus: &[u32]) -> Result<(), String> {
        if w.cache.is_none() && w.memory_bandwidth.is_none() {
            return Ok(());
        }
        let node = &self.node;
        if self.grants.len() as u32 + 1 >= node.closids {
            let holders: Vec<&str> = self.grants.iter().map(|g| g.1.name.as_str()).collect();
            return Err(format!(
                "asks for a resctrl group but all {} classes of service (CLOSIDs) are taken (the default group and {}); \
                 drop `cache`/`memoryBandwidth` from a workload that can share the default group",
                node.closids,
                holders.join(", ")
            ));
        }
        let mba = match (w.memory_bandwidth, node.mba) {
            (None, _) => None,
            (Some(_), None) => {
                return Err("asks for a memory-bandwidth ceiling but the node has no MBA (no /sys/fs/resctrl/info/MB, \
                            and node.cache.mba is not declared); drop `memoryBandwidth`"
                    .into())
            }
            (Some(f), Some(m)) => {
                let pct = (f * 100.0).ceil().clamp(0.0, 100.0) as u32;
                let g = m.granularity.max(1);
                Some(pct.div_ceil(g).saturating_mul(g).clamp(m.min, 100))
            }
        };
        let domains: Vec<usize> =
            (0..node.domains.len()).filter(|&d| node.domains[d].cpus.iter().any(|c| cpus.contains(c))).collect();
        if domains.is_empty() {
            return Err(format!(
                "its CPUs {} lie in no L3 domain of node.cache.domains; list every node CPU there",
                format_cpu_list(cpus)
            ));
        }
        let ways = match &w.cache {
            None => 0,
            Some(CacheRequest::Ways(n)) => *n,
            Some(CacheRequest::Share(s)) => ((s * node.ways as f64 - 1e-9).ceil().max(0.0) as u32).max(node.min_ways),
            Some(CacheRequest::Masks(given)) => {
                let masks = self.given_masks(given, &domains)?;
                let ways = masks.iter().map(|&(_, m)| popcount(m)).max().unwrap_or(0);
                for (d, m) in masks {
                    self.held[d].push((i, m));
                }
                self.grants.push((i, Grant { name: w.name.clone(), ways, domains, mba }));
                return Ok(());
            }
        };
        let mut masks = Vec::new();
        if ways > 0 {
            if ways < node.min_ways {
                return Err(format!(
                    "asks for {ways} way(s); the L3 grants at least {0} per group (min_cbm_bits): ask for {0} or more",
                    node.min_ways
                ));
            }
            for &d in &domains {
                match self.place(d, ways) {
                    Some(m) => masks.push((d, m)),
                    None => {
                        let dom = &node.domains[d];
                        let used = self.used(d);
                        let grantable = popcount(node.full_mask() & !used & !node.shareable_mask);
                        return Err(format!(
                            "asks for {ways} way(s) of L3 {} (CPUs {}); {} of its {} ways are reserved{}, {} must stay with the default group \
                             (min_cbm_bits){}, so at most {} contiguous way(s) can be granted; ask for fewer ways, or place the workload on \
                             CPUs of another L3",
                            dom.id,
                            format_cpu_list(&dom.cpus),
                            popcount(used),
                            node.ways,
                            self.holders(d),
                            node.min_ways,
                            if node.shareable_mask != 0 {
                                format!(", shareable ways {:#x} are never granted", node.shareable_mask)
                            } else {
                                String::new()
                            },
                            self.largest_grant(d).min(grantable)
                        ));
                    }
                }
            }
        }
        for (d, m) in masks {
            self.held[d].push((i, m));
        }
        self.grants.push((i, Grant { name: w.name.clone(), ways, domains, mba }));
        Ok(())
    }

    /// Exact masks (`CacheRequest::Masks`) checked against what is held: one per L3 the CPUs touch,
    /// inside the ways, none shareable or held, the default group left one run of `min_ways` or more.
    fn given_masks(&self, given: &std::collections::BTreeMap<u32, u64>, domains: &[usize]) -> Result<Vec<(usize, u64)>, String> {
        let node = &self.node;
        let ids: Vec<u32> = domains.iter().map(|&d| node.domains[d].id).collect();
        if let Some(id) = given.keys().find(|id| !ids.contains(id)) {
            return Err(format!("gives a cache mask for L3 {id}, which its CPUs do not use (their L3s: {ids:?}); give one mask per L3 of its CPUs"));
        }
        let mut out = Vec::new();
        for &d in domains {
            let id = node.domains[d].id;
            let Some(&m) = given.get(&id) else {
                return Err(format!("gives no cache mask for L3 {id}, which its CPUs use; add `{id}: <mask>` to cache.masks"));
            };
            // The default keeps its longest run: exact ways (a running workload's, pinned) may
            // leave other free ways beside it, but never fewer than min_ways to it.
            let rest = longest_run(node.full_mask() & !self.used(d) & !m);
            let problem = if !contiguous(m) || m & !node.full_mask() != 0 {
                Some(format!("is not one run of set bits inside the {} ways ({:x})", node.ways, node.full_mask()))
            } else if popcount(m) < node.min_ways {
                Some(format!("holds fewer than the {} ways a group needs (min_cbm_bits)", node.min_ways))
            } else if m & node.shareable_mask != 0 {
                Some(format!("takes shareable ways {:x}, which are never granted exclusively", m & node.shareable_mask))
            } else if m & self.used(d) != 0 {
                Some(format!("overlaps ways reserved already{}", self.holders(d)))
            } else if popcount(rest) < node.min_ways {
                Some(format!("would leave the default group {rest:x}, fewer than {} way(s) in one run", node.min_ways))
            } else {
                None
            };
            if let Some(p) = problem {
                return Err(format!("asks for ways {m:x} of L3 {id}, which {p}; ask for other ways, or for `ways: N` and let the planner place them"));
            }
            out.push((d, m));
        }
        Ok(out)
    }

    fn holders(&self, d: usize) -> String {
        if self.held[d].is_empty() {
            return String::new();
        }
        let list: Vec<String> = self.held[d].iter().map(|(w, m)| format!("{} holds {m:x}", self.name(*w))).collect();
        format!(" ({})", list.join(", "))
    }

    fn name(&self, i: usize) -> &str {
        self.grants.iter().find(|g| g.0 == i).map(|g| g.1.name.as_str()).unwrap_or("?")
    }

    /// The highest-placed run of `n` free, non-shareable ways that splits no run of unheld ways in
    /// two (it takes an end of one, or fills one) and leaves the default group — the longest run
    /// of unheld ways — at least `min_ways`. With nothing freed between held runs (one-shot plans)
    /// the unheld ways are one run, and this leaves the default that one run.
    fn place(&self, d: usize, n: u32) -> Option<u64> {
        let node = &self.node;
        if n == 0 || n > node.ways {
            return None;
        }
        let unheld = node.full_mask() & !self.used(d);
        let free = unheld & !node.shareable_mask;
        (0..=node.ways - n).rev().map(|lo| run(lo, n)).find(|&m| {
            let rest = unheld & !m;
            m & free == m && runs(rest) <= runs(unheld).max(1) && popcount(longest_run(rest)) >= node.min_ways
        })
    }

    fn largest_grant(&self, d: usize) -> u32 {
        (1..=self.node.ways).rev().find(|&n| self.place(d, n).is_some()).unwrap_or(0)
    }

    /// What workload `i` holds, if anything.
    pub fn workload(&self, i: usize) -> Option<WorkloadCache> {
        let (_, g) = self.grants.iter().find(|g| g.0 == i)?;
        let l3 = g
            .domains
            .iter()
            .map(|&d| DomainMask {
                id: self.node.domains[d].id,
                mask: self.held[d].iter().find(|h| h.0 == i).map(|h| h.1).unwrap_or_else(|| self.default_mask(d)),
            })
            .collect();
        Some(WorkloadCache { ways: g.ways, shared: g.ways == 0, l3, memory_bandwidth_percent: g.mba })
    }

    pub fn plan(&self) -> CachePlan {
        let node = &self.node;
        CachePlan {
            ways: node.ways,
            cbm_mask: node.full_mask(),
            min_ways: node.min_ways,
            shareable_mask: node.shareable_mask,
            closids: node.closids,
            closids_used: 1 + self.grants.len() as u32,
            domains: (0..node.domains.len())
                .map(|d| {
                    let reserved = popcount(self.used(d));
                    let grantable = popcount(node.full_mask() & !self.used(d) & !node.shareable_mask);
                    let keep = node.min_ways.saturating_sub(popcount(node.shareable_mask & !self.used(d)));
                    CacheDomainPlan {
                        id: node.domains[d].id,
                        cpus: node.domains[d].cpus.clone(),
                        default_mask: self.default_mask(d),
                        reserved_ways: reserved,
                        free_ways: grantable.saturating_sub(keep),
                        by: self.held[d]
                            .iter()
                            .map(|&(w, mask)| CacheShare { workload: self.name(w).to_string(), mask })
                            .collect(),
                    }
                })
                .collect(),
            mba: node.mba,
        }
    }
}

/// Masks as resctrl prints them: lower-case hex without `0x`.
mod hex {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(m: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{m:x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let s = String::deserialize(d)?;
        u64::from_str_radix(s.trim_start_matches("0x"), 16).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(ways: u32, min: u32, shareable: u64) -> NodeCache {
        NodeCache { ways, min_ways: min, closids: 16, shareable_mask: shareable, domains: Vec::new(), mba: None }
    }

    fn asks(name: &str, ways: u32) -> Workload {
        Workload { name: name.into(), cache: Some(CacheRequest::Ways(ways)), ..Workload::default() }
    }

    #[test]
    fn grants_stack_from_the_top_and_the_default_keeps_the_rest() {
        let mut st = CacheState::new(node(12, 1, 0), &[0, 1]);
        st.admit(0, &asks("a", 4), &[0]).unwrap();
        st.admit(1, &asks("b", 2), &[1]).unwrap();
        let p = st.plan();
        assert_eq!(p.domains[0].by[0].mask, 0xf00);
        assert_eq!(p.domains[0].by[1].mask, 0x0c0);
        assert_eq!(p.domains[0].default_mask, 0x03f);
        assert_eq!(p.default_schemata(), "L3:0=3f");
        assert_eq!(st.workload(0).unwrap().schemata(), "L3:0=f00");
        let e = st.admit(2, &asks("c", 6), &[0]).unwrap_err();
        assert!(e.contains("at most 5 contiguous"), "{e}");
    }

    #[test]
    fn shareable_ways_at_the_top_push_grants_to_the_bottom() {
        // Skylake-SP style: shareable_bits c0000 of an 11-way... here the top two of 12 ways.
        let mut st = CacheState::new(node(12, 1, 0xc00), &[0]);
        st.admit(0, &asks("a", 3), &[0]).unwrap();
        let p = st.plan();
        assert_eq!(p.domains[0].by[0].mask, 0x007);
        assert_eq!(p.domains[0].default_mask, 0xff8);
    }

    #[test]
    fn closids_run_out_with_the_default_group_counted() {
        let mut n = node(20, 1, 0);
        n.closids = 3;
        let mut st = CacheState::new(n, &[0]);
        st.admit(0, &asks("a", 1), &[0]).unwrap();
        st.admit(1, &asks("b", 1), &[0]).unwrap();
        let e = st.admit(2, &asks("c", 1), &[0]).unwrap_err();
        assert!(e.contains("CLOSIDs"), "{e}");
    }

    #[test]
    fn bandwidth_rounds_up_to_the_granularity_and_needs_mba() {
        let w = Workload { name: "m".into(), memory_bandwidth: Some(0.33), ..Workload::default() };
        let mut st = CacheState::new(node(12, 1, 0), &[0]);
        assert!(st.admit(0, &w, &[0]).unwrap_err().contains("no MBA"));
        let mut n = node(12, 1, 0);
        n.mba = Some(rtslice_spec::Mba::default());
        let mut st = CacheState::new(n, &[0]);
        st.admit(0, &w, &[0]).unwrap();
        let got = st.workload(0).unwrap();
        assert_eq!(got.memory_bandwidth_percent, Some(40));
        assert!(got.shared);
        assert_eq!(got.schemata(), "L3:0=fff\nMB:0=40");
    }

    #[test]
    fn exact_masks_are_held_as_given_or_refused_with_the_reason() {
        let mut st = CacheState::new(node(11, 1, 0x600), &[0, 1]);
        st.admit(0, &asks("a", 4), &[0]).unwrap();
        assert_eq!(st.workload(0).unwrap().l3[0].mask, 0xf, "below the shareable ways, a's 4 go to the bottom");
        let masks = |m: u64| Workload { name: "b".into(), cache: Some(CacheRequest::Masks([(0, m)].into())), ..Workload::default() };
        let e = st.admit(1, &masks(0x3c), &[0]).unwrap_err();
        assert!(e.contains("overlaps ways reserved already (a holds f)"), "{e}");
        let e = st.admit(1, &masks(0x5), &[0]).unwrap_err();
        assert!(e.contains("not one run"), "{e}");
        let e = st.admit(1, &masks(0x600), &[0]).unwrap_err();
        assert!(e.contains("shareable ways 600"), "{e}");
        // Exact ways may leave free ways apart from the default's run (here 0x30), never fewer than
        // min_ways to it.
        let mut tight = CacheState::new(node(4, 2, 0), &[0]);
        let e = tight.admit(0, &Workload { name: "t".into(), cache: Some(CacheRequest::Masks([(0, 0x6)].into())), ..Workload::default() }, &[0]).unwrap_err();
        assert!(e.contains("would leave the default group 8, fewer than 2 way(s) in one run"), "{e}");
        let b = Workload { name: "b".into(), cache: Some(CacheRequest::Masks([(0, 0x30), (1, 0x30)].into())), ..Workload::default() };
        assert!(st.admit(1, &b, &[0]).unwrap_err().contains("L3 1, which its CPUs do not use"));
        st.admit(1, &masks(0x30), &[0]).unwrap();
        assert_eq!((st.workload(1).unwrap().l3[0].mask, st.workload(1).unwrap().ways), (0x30, 2));
        assert_eq!(st.plan().domains[0].default_mask, 0x7c0);
        // Pinned in another order than they were granted (a node re-planning after a removal from
        // the bottom): b's ways first leave a hole below them, which a later grant fills.
        let mut st = CacheState::new(node(11, 1, 0x600), &[0, 1]);
        st.admit(0, &masks(0x30), &[0]).unwrap();
        assert_eq!(st.plan().domains[0].default_mask, 0x7c0, "the longest run of the free ways");
        st.admit(1, &asks("d", 4), &[0]).unwrap();
        assert_eq!(st.workload(1).unwrap().l3[0].mask, 0xf, "the hole, not the default's ways");
    }

    #[test]
    fn contiguity() {
        assert!(contiguous(0b0111_0000));
        assert!(!contiguous(0b0101));
        assert!(!contiguous(0));
        assert!(contiguous(u64::MAX));
    }
}
