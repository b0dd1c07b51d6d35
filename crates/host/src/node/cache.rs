//! Cache allocation (resctrl) on a node. Each workload's control group is its own: created, given its
//! schemata and its threads inside its segment, so removing it undoes exactly that. The default
//! group's `schemata` is the node's: after every operation it is derived from the deployed set — the
//! ways it had before the node, less every way a deployed workload holds — the same rule `system`'s
//! CPUs follow, so workloads removed in any order leave it right. The base journals its value before
//! the node (once, at the first workload that asks for cache), which reset restores; the entry's
//! `new` is what it holds now, which status compares. Groups with only a bandwidth ceiling use the
//! default group's ways, so their L3 line follows it too (their segment journals only the MB line).

use std::collections::BTreeMap;

use rtslice_plan::WorkloadCache;

use super::*;
use crate::resctrl::{Resctrl, SCHEMATA};

impl Node {
    /// The resctrl the node allocates cache from (`NodeOptions::resctrl`).
    pub fn resctrl(&self) -> Resctrl {
        self.opts.resctrl.clone().map(Resctrl::new).unwrap_or_default()
    }

    /// Before a deploy that asks for cache: the plan fits this host's resctrl, and the default
    /// group's schemata before the node is in the base journal.
    pub(super) fn cache_check(&self, setup: &Setup) -> Result<()> {
        if setup.workloads[0].cache.is_none() {
            return Ok(());
        }
        let Some(plan) = &setup.cache else {
            return Err(rejected(format!(
                "workload {} has a resctrl group but the setup has no cache plan (a bug of its producer)",
                setup.workloads[0].name
            )));
        };
        let rc = self.resctrl();
        rc.check(plan)?;
        self.base_journal_once(&rc.root.join(SCHEMATA))
    }

    /// The deploy's cache steps before its launch: the group with its schemata (exclusive ways and
    /// ceiling; a ceiling alone journals its MB line, the L3 line follows the default group's), then
    /// the default group and the shared groups settled with this workload counted.
    pub(super) fn cache_group(&self, txn: &mut Txn, name: &str, cache: &WorkloadCache) -> Result<PathBuf> {
        let rc = self.resctrl();
        let dir = if cache.shared {
            let dir = rc.group(name);
            txn.mkdir_resctrl(&dir)?;
            let schemata = cache.schemata();
            let mb = schemata.lines().filter(|l| l.starts_with("MB:")).collect::<Vec<_>>().join("\n");
            if !mb.is_empty() {
                txn.write_resctrl(&dir.join(SCHEMATA), &mb)?;
            }
            dir
        } else {
            rc.create_group(txn, name, cache)?
        };
        self.cache_settle().map_err(HostError::other)?;
        Ok(dir)
    }

    /// The default group's schemata and the shared groups' L3 lines, derived from the deployed
    /// workloads (see the module comment). Nothing when the node never held cache. An error says
    /// which write resctrl refused; what was written before it stays (the next operation, or the
    /// next open, derives and writes it again).
    pub(super) fn cache_settle(&self) -> std::result::Result<(), String> {
        let rc = self.resctrl();
        let file = rc.root.join(SCHEMATA);
        let Some(before) = self.base_old(&file) else { return Ok(()) };
        let held: Vec<(String, WorkloadCache)> = self
            .records()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|r| r.setup.workloads.into_iter().next())
            .filter_map(|w| Some((w.name, w.cache?)))
            .collect();
        let default = default_masks(&crate::resctrl_files::l3_masks(&before), &held);
        let value = l3_line(&default);
        self.set_base_new(&file, &value).map_err(|e| e.to_string())?;
        let now = fsio::read(&file).unwrap_or_default();
        if !crate::resctrl_files::schemata_holds(&now, &value) {
            crate::resctrl_files::write(&file, &value).map_err(|e| format!("narrowing the default resctrl group: {e}"))?;
        }
        for (name, cache) in held.iter().filter(|(_, c)| c.shared) {
            let mine: BTreeMap<u32, u64> = cache.l3.iter().filter_map(|d| Some((d.id, *default.get(&d.id)?))).collect();
            let group = rc.group(name).join(SCHEMATA);
            let line = l3_line(&mine);
            if group.exists() && !crate::resctrl_files::schemata_holds(&fsio::read(&group).unwrap_or_default(), &line) {
                crate::resctrl_files::write(&group, &line).map_err(|e| format!("the L3 line of {name}'s resctrl group: {e}"))?;
            }
        }
        Ok(())
    }
}

/// Whether two grants hold the same: the same exclusive ways and ceiling; for a group with only a
/// ceiling, the same ceiling on the same L3s (its L3 line is the default group's, which moves as
/// other workloads come and go, so the masks a plan wrote for it are not what it holds).
pub(super) fn same_holding(a: Option<&WorkloadCache>, b: Option<&WorkloadCache>) -> bool {
    let ids = |c: &WorkloadCache| c.l3.iter().map(|d| d.id).collect::<Vec<_>>();
    match (a, b) {
        (Some(x), Some(y)) if x.shared && y.shared => x.memory_bandwidth_percent == y.memory_bandwidth_percent && ids(x) == ids(y),
        _ => a == b,
    }
}

/// The default group's ways per L3: what it had before the node, less every exclusive way held —
/// its longest run of them (the higher on a tie), because a capacity bitmask is one run. Ways freed
/// between two held runs (a workload removed from the middle of the stack) stay unused until the
/// planner grants them again; the planner places new grants so the default keeps one run.
fn default_masks(before: &BTreeMap<u32, u64>, held: &[(String, WorkloadCache)]) -> BTreeMap<u32, u64> {
    let mut out = before.clone();
    for (_, c) in held.iter().filter(|(_, c)| !c.shared) {
        for d in &c.l3 {
            if let Some(m) = out.get_mut(&d.id) {
                *m &= !d.mask;
            }
        }
    }
    out.values_mut().for_each(|m| *m = rtslice_spec::longest_run(*m));
    out
}

/// `L3:0=7f0;1=7ff`.
fn l3_line(masks: &BTreeMap<u32, u64>) -> String {
    let parts: Vec<String> = masks.iter().map(|(id, m)| format!("{id}={m:x}")).collect();
    format!("L3:{}", parts.join(";"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtslice_plan::DomainMask;

    fn cache(ways: u32, l3: &[(u32, u64)]) -> WorkloadCache {
        WorkloadCache {
            ways,
            shared: ways == 0,
            l3: l3.iter().map(|&(id, mask)| DomainMask { id, mask }).collect(),
            memory_bandwidth_percent: None,
        }
    }

    #[test]
    fn the_default_keeps_what_it_had_less_the_exclusive_ways_held() {
        let before: BTreeMap<u32, u64> = [(0, 0x7ff), (1, 0x3ff)].into();
        let held = vec![
            ("a".to_string(), cache(4, &[(0, 0x780)])),
            ("b".to_string(), cache(2, &[(0, 0x060), (1, 0x300)])),
            // A ceiling alone takes no ways.
            ("c".to_string(), cache(0, &[(0, 0x7ff)])),
        ];
        let d = default_masks(&before, &held);
        assert_eq!(l3_line(&d), "L3:0=1f;1=ff");
        assert_eq!(default_masks(&before, &[]), before, "nothing held: the value before the node");
        // The middle of a stack freed: the default keeps its run at the top, the hole waits.
        let held = vec![("c".to_string(), cache(2, &[(0, 0x030)]))];
        assert_eq!(l3_line(&default_masks(&[(0, 0x7ff)].into(), &held)), "L3:0=7c0");
    }

    #[test]
    fn a_ceiling_alone_is_the_same_holding_whatever_the_default_s_ways_were() {
        let mb = |l3: &[(u32, u64)], pct| WorkloadCache { memory_bandwidth_percent: Some(pct), ..cache(0, l3) };
        assert!(same_holding(Some(&mb(&[(0, 0x7f0)], 30)), Some(&mb(&[(0, 0x7c0)], 30))));
        assert!(!same_holding(Some(&mb(&[(0, 0x7f0)], 30)), Some(&mb(&[(0, 0x7f0)], 40))));
        assert!(!same_holding(Some(&mb(&[(0, 0x7f0)], 30)), Some(&mb(&[(1, 0x7f0)], 30))));
        assert!(!same_holding(Some(&cache(2, &[(0, 0x30)])), Some(&cache(2, &[(0, 0xc)]))));
        assert!(same_holding(Some(&cache(2, &[(0, 0x30)])), Some(&cache(2, &[(0, 0x30)]))));
        assert!(same_holding(None, None) && !same_holding(None, Some(&cache(2, &[(0, 0x30)]))));
    }

    #[test]
    fn longest_run_prefers_the_longer_then_the_higher() {
        use rtslice_spec::longest_run;
        assert_eq!(longest_run(0x7cf), 0x7c0);
        assert_eq!(longest_run(0x70f), 0xf);
        assert_eq!(longest_run(0), 0);
        assert_eq!(longest_run(u64::MAX), u64::MAX);
    }
}
