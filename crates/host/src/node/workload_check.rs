//! One workload's setup checked against the node before its transaction: one workload, the node's
//! mechanism, a runc bundle that exists, what it holds alone (IRQs, queues, PCI devices: `Claims`),
//! and prepared beside the workloads the node already holds.

use super::*;
use crate::steering::Target;
use rtslice_plan::kernel::admission;

impl Node {
    pub(super) fn single<'s>(&self, setup: &'s Setup) -> Result<&'s WorkloadSetup> {
        if setup.workloads.len() != 1 {
            return Err(rejected(format!("a node operation takes one workload, not {}", setup.workloads.len())));
        }
        let ws = &setup.workloads[0];
        // A shield is the workload's exclusive partition; on v1 the node also moves every other
        // process into `system` while any shielded workload is deployed (`sync_shield`).
        Ok(ws)
    }

    /// What a workload holds alone on the node, resolved on this host: the IRQ and queue files its
    /// rules write and its PCI devices (with the files of their IRQs), none held by another deployed
    /// workload. One holder per file and device: its removal puts back what the file had before it
    /// (two holders removed out of order would restore a stale value), and a device serves one
    /// workload (its IRQs on that workload's CPUs, its nodes in its container). Another workload
    /// holds what its rules and devices name now.
    pub(super) fn claims_of(&self, setup: &Setup, warnings: &mut Vec<String>) -> Result<Claims> {
        let ws = &setup.workloads[0];
        let targets = crate::steering::targets(setup, warnings)?;
        let (devices, device_warnings) = crate::devices::resolve(Path::new("/"), setup)?;
        warnings.extend(device_warnings);
        let claims = Claims { targets, devices };
        let files = claims.files(setup);
        if files.is_empty() && ws.devices.is_empty() {
            return Ok(claims);
        }
        for rec in self.records()? {
            let Some(holder) = rec.workloads.first().map(|w| &w.name).filter(|h| **h != ws.name) else { continue };
            if let Some(d) = rec.setup.workloads.iter().flat_map(|w| &w.devices).find(|d| ws.devices.iter().any(|x| x.pci == d.pci)) {
                return Err(rejected(format!(
                    "workload {}: PCI device {} serves workload {holder}; a device serves one workload: give this one \
                     another device, or remove {holder} first",
                    ws.name, d.pci
                )));
            }
            // The other's devices as they are now (one that vanished holds nothing).
            let theirs = Claims {
                targets: crate::steering::targets(&rec.setup, &mut Vec::new())?,
                devices: crate::devices::resolve(Path::new("/"), &rec.setup).map(|(r, _)| r).unwrap_or_default(),
            };
            if let Some(f) = theirs.files(&rec.setup).intersection(&files).next() {
                let what = claims.targets.iter().find(|t| t.file == *f).map_or_else(|| "an IRQ of its PCI device".to_string(), |t| t.what.clone());
                return Err(rejected(format!(
                    "workload {}: {what} ({}) is held by workload {holder}: on a node each IRQ and queue has one holder; \
                     give the workloads' rules disjoint IRQs and interfaces, or remove {holder} first",
                    ws.name,
                    f.display()
                )));
            }
        }
        Ok(claims)
    }

    pub(super) fn runc_for(&self, ws: &WorkloadSetup) -> Result<Option<PathBuf>> {
        crate::launch::check_launch(ws, self.opts.runc.as_deref())
    }

    /// Validates one workload against the host and against the workloads already deployed (except
    /// those named in `except`: a resize replaces its own old version).
    pub(super) fn prepare_one(&self, setup: &Setup, except: &[&str]) -> Result<Prepared> {
        let ws = &setup.workloads[0];
        // HCBS admission is node-wide, read from the kernel below: the root's groups as the node
        // opened are no longer what they are.
        let facts = HostFacts { hcbs_root: None, ..self.facts.clone() };
        let (mut prepared, _warnings) = prepare(setup, &facts, self.base.mechanism)?;
        let mut p = prepared.remove(0);
        let v2 = !self.facts.backend.is_v1();
        // SCHED_DEADLINE workloads on exactly the same CPUs share one partition (a root domain), each
        // in a group of its own inside it: several vBS on one CPU. Dedicated CPUs are no one else's:
        // on v1 the workload's own group is its partition; on v2 every partition is a directory at
        // the root (its parent must be a partition root: cgroup::V2_PARTITION_PREFIX) holding the
        // workload's group as a member, and a dedicated workload is alone in its own.
        // A shield is dedicated CPUs: a partition of its own. So is an OCI container's group on v1:
        // runc takes one cgroupsPath for every v1 hierarchy, and a group inside a shared partition
        // has its cpuset path there but its cpu path under the parent.
        let shares = |w: &WorkloadSetup| !w.partition && !w.shield && (v2 || !matches!(w.launch, Launch::Oci(_)));
        let shareable = p.partition && shares(&p.ws);
        let in_partition_dir = p.partition && self.base.partitions && (v2 || shareable);
        if in_partition_dir {
            let dir = shared_partition_dir(&self.facts.backend, &p.ws.cpus);
            p.group.cpuset = dir.join(&p.ws.name);
            if v2 {
                // One hierarchy: the cpu controller's group is the same directory.
                p.group.cpu = p.group.cpuset.clone();
            }
            p.partition = false;
        }
        let mine = if in_partition_dir { shared_partition_of(&p.group.cpuset) } else { p.partition.then(|| p.group.cpuset.clone()) };
        if p.partition && !self.base.partitions {
            return Err(rejected(format!(
                "workload {} needs an exclusive partition (dedicated CPUs or SCHED_DEADLINE), which this node cannot \
                 give: {}",
                ws.name,
                self.base.warnings.first().map_or("a node on one CPU has none to give", |w| w.as_str())
            )));
        }
        let others: Vec<AppliedRecord> =
            self.records()?.into_iter().filter(|r| !r.workloads.iter().any(|w| except.contains(&w.name.as_str()))).collect();
        let mut exclusive = if mine.is_some() { p.ws.cpus.clone() } else { CpuList::new() };
        // The sums below are the planner's (rtslice_plan::kernel::admission), part by part.
        let mut total: Vec<admission::Part> = p.rt_budget.iter().map(|r| (r.runtime, r.period)).collect();
        // SCHED_DEADLINE admits per root domain: the reservations sharing this partition, each its
        // runtime on every one of its CPUs.
        let reserved = |w: &WorkloadSetup| {
            w.reservation.map(|x| x.whole_micros()).map(|x| (x.runtime * w.cpus.len() as u32, x.period))
        };
        let mut in_partition: Vec<admission::Part> = if in_partition_dir { reserved(&p.ws).into_iter().collect() } else { Vec::new() };
        for r in &others {
            for w in &r.workloads {
                let theirs = partition_dir_of(&w.group.cpuset);
                let theirs_shareable = r.setup.workloads.iter().find(|x| x.name == w.name).is_some_and(shares);
                let same_shared = shareable && theirs_shareable && theirs.is_some() && theirs == mine;
                if (mine.is_some() || theirs.is_some()) && !same_shared && !w.cpus.intersection(&p.ws.cpus).is_empty() {
                    let why = if !theirs_shareable || !shareable {
                        " (dedicated CPUs are shared with no one)"
                    } else if theirs.as_ref().is_some_and(|t| shared_partition_of(&t.join(&w.name)).is_some()) {
                        " (SCHED_DEADLINE workloads share a partition only on exactly the same CPUs)"
                    } else {
                        ""
                    };
                    return Err(rejected(format!(
                        "workload {} [{}] overlaps workload {} [{}], which {} an exclusive partition{why}",
                        ws.name,
                        p.ws.cpus,
                        w.name,
                        w.cpus,
                        if theirs.is_some() { "is in" } else { "would need" }
                    )));
                }
                if theirs.is_some() {
                    exclusive = exclusive.union(&w.cpus);
                }
                if same_shared {
                    in_partition.extend(r.setup.workloads.iter().filter(|x| x.name == w.name).filter_map(reserved));
                }
            }
            total.extend(r.setup.workloads.iter().filter_map(|w| w.reservation.map(|x| x.whole_micros())).map(|x| (x.runtime, x.period)));
        }
        if self.base.mechanism == Mechanism::Deadline && in_partition_dir {
            // The kernel's cap less the deadline servers' share, on each CPU of the partition.
            let cap = (self.facts.rt_ratio - self.facts.dl_server).max(0.0);
            if let Err(x) = admission::fits(in_partition, cap, p.ws.cpus.len() as u32) {
                return Err(rejected(format!(
                    "workload {}: the SCHED_DEADLINE reservations on CPUs [{}] would sum to {:.1}% of a CPU, above the \
                     {:.1}% the kernel admits there (its cap {:.1}% less the deadline servers' {:.1}% per CPU); remove or \
                     shrink a workload on these CPUs, or place it on others",
                    ws.name,
                    p.ws.cpus,
                    x.need * 100.0,
                    x.offered * 100.0,
                    self.facts.rt_ratio * 100.0,
                    self.facts.dl_server * 100.0
                )));
            }
        }
        // As the planner (plan_for_kernel): CPUs isolated at boot are not left to the system (v2: a
        // 6.12 kernel oopses when partitions take every other CPU; the system would run on them only).
        let no_partition = self.facts.no_partition_cpus();
        let housekeeping = self.base.online.difference(&no_partition);
        if !exclusive.difference(&no_partition).is_empty() && housekeeping.difference(&exclusive).is_empty() {
            return Err(rejected(if no_partition.is_empty() {
                format!("exclusive partitions would take every online CPU [{}]; leave at least one CPU for the rest of the system", self.base.online)
            } else {
                format!(
                    "exclusive partitions would take every housekeeping CPU [{housekeeping}] and leave the rest of the system only the \
                     CPUs isolated at boot [{no_partition}] (isolcpus=domain: no load balancing there, and a 6.12 kernel oopses \
                     rebuilding its scheduling domains so); leave at least one housekeeping CPU"
                )
            }));
        }
        if let (Mechanism::Hcbs, Some(cap)) = (self.base.mechanism, self.facts.hcbs_cap()) {
            // Every budget the root group holds (the other workloads', other tools'), this one's
            // own as it is now replaced: HCBS reserves them all on every CPU.
            let cap = cap.min(self.opts.cap);
            let held: Vec<admission::Part> = crate::cgroup::hcbs_root_groups(&self.facts.backend.root().cpu)
                .into_iter()
                .filter(|(dir, _)| dir != &p.group.cpu)
                .map(|(_, b)| b.part())
                .collect();
            let mine = p.rt_budget.map(|r| (r.runtime, r.period));
            if let Err(x) = admission::fits(held.iter().copied().chain(mine), cap, 1) {
                let (total, held) = (x.need, admission::sum(held));
                return Err(rejected(format!(
                    "workload {}: HCBS reserves every group's budget on every CPU, whatever its cpuset (the root group's \
                     budget holds them all), and with it the budgets would sum to {:.1}% ({:.1}% held by the other groups), \
                     above the node's {:.1}% (the kernel admits its cap less the fair servers' share); remove or shrink a workload",
                    ws.name,
                    total * 100.0,
                    held * 100.0,
                    cap * 100.0
                )));
            }
        }
        if let (Mechanism::RtGroup | Mechanism::Hcbs, Some(budget)) = (self.base.mechanism, self.base.parent_budget_us) {
            let cap = budget as f64 / 1e6;
            if let Err(x) = admission::fits(total, cap, 1) {
                let total = x.need;
                return Err(rejected(format!(
                    "workload {}: RT group scheduling accounts every group's runtime/period against one ratio, and the \
                     reservations would sum to {:.1}%, above the node's {:.1}%; remove or shrink a workload",
                    ws.name,
                    total * 100.0,
                    cap * 100.0
                )));
            }
        }
        Ok(p)
    }
}

/// What one workload holds alone on the node (`Node::claims_of`).
pub(super) struct Claims {
    /// The IRQ affinity and queue mask files its rules write.
    pub targets: Vec<Target>,
    /// Its PCI devices as resolved on this host.
    pub devices: crate::devices::Resolved,
}

impl Claims {
    /// Every file it writes: its rules' and its devices' IRQs'.
    fn files(&self, setup: &Setup) -> std::collections::BTreeSet<PathBuf> {
        self.targets.iter().map(|t| t.file.clone()).chain(crate::devices::irq_files(setup, &self.devices)).collect()
    }

    /// The same files and devices as `other` (what a resize may not change).
    pub fn same_holdings(&self, setup: &Setup, other: &Claims, other_setup: &Setup) -> bool {
        let pcis = |s: &Setup| s.workloads.iter().flat_map(|w| w.devices.iter().map(|d| d.pci)).collect::<std::collections::BTreeSet<_>>();
        self.files(setup) == other.files(other_setup) && pcis(setup) == pcis(other_setup)
    }
}
