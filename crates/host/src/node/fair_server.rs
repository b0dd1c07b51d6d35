//! The fair servers on a node created with `fair_server_off`. A CPU's fair server guarantees CFS
//! tasks a share of it even under real-time load; on a CPU that holds only reserved real-time work
//! (a workload's partition with real-time rules) that share is taken from the reservation, so its
//! runtime goes to 0 while such a workload is deployed there. Derived after every operation from the
//! deployed workloads — the rule `system`'s CPUs and the default resctrl group follow — because
//! SCHED_DEADLINE workloads on the same CPUs share one partition and leave in any order: a journal
//! entry per workload would give a CPU its runtime back while another still holds it. The base
//! journals each CPU's runtime before the node changes it (what reset restores); its `new` is what
//! the node wrote last, which status compares.

use super::*;
use crate::sched_debug;

impl Node {
    /// The CPUs whose fair server should be off now: those of deployed workloads in a partition with
    /// a real-time rule in force.
    fn fair_server_cpus(&self) -> CpuList {
        self.records()
            .unwrap_or_default()
            .iter()
            .flat_map(|r| r.workloads.iter())
            .filter(|w| partitions::partition_dir_of(&w.group.cpuset).is_some())
            .filter(|w| w.rules.iter().any(|r| r.policy.is_some_and(|p| p.is_realtime())))
            .fold(CpuList::new(), |a, w| a.union(&w.cpus))
    }

    /// Writes each CPU's fair server runtime as the deployed set asks: 0 where a reserved real-time
    /// partition holds the CPU, the value before the node elsewhere. Returns what it could not do, as
    /// warnings (the workloads' budgets do not depend on it; the next operation tries again).
    pub(super) fn fair_server_settle(&self) -> Vec<String> {
        if !self.base.fair_server_off {
            return Vec::new(); // fixed for the node's life: it never changed a fair server
        }
        let off = self.fair_server_cpus();
        let mut warnings = Vec::new();
        for cpu in self.facts.online.iter() {
            let file = sched_debug::fair_server_runtime(cpu);
            let want = if off.contains(cpu) {
                if let Err(why) = sched_debug::fair_server_usable(cpu) {
                    warnings.push(format!("{why}; CPU {cpu}'s fair server left as it is"));
                    continue;
                }
                if let Err(e) = self.base_journal_once(&file) {
                    warnings.push(format!("fair_server: journaling {}: {e}; left as it is", file.display()));
                    continue;
                }
                "0".to_string()
            } else {
                match self.base_old(&file) {
                    Some(old) => old.trim().to_string(),
                    None => continue, // never changed by the node
                }
            };
            let now = fsio::read_trim(&file).unwrap_or_default();
            if now != want {
                if let Err(e) = fsio::write(&file, &want) {
                    warnings.push(format!("fair_server: writing {want} to {}: {e}", file.display()));
                    continue;
                }
            }
            if let Err(e) = self.set_base_new(&file, &want) {
                warnings.push(format!("fair_server: recording {}: {e}", file.display()));
            }
        }
        warnings
    }
}
