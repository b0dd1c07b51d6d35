//! HCBS's root group budget, which follows the workloads: raised before a group budget needs it,
//! lowered after one goes, never below its value before the node (the base journals that one).

use super::*;

impl Node {
    /// HCBS: the root group's `cpu.rt.max`, when the node reserves with HCBS.
    pub(super) fn hcbs_root_file(&self) -> Option<PathBuf> {
        (self.base.mechanism == Mechanism::Hcbs).then(|| self.facts.backend.root().cpu.join("cpu.rt.max"))
    }

    /// HCBS: before `p`'s group gets its budget (a deploy, a resize), the root group's budget is
    /// raised to hold it with every other group's it holds, if it does not already.
    pub(super) fn hcbs_raise_root(&self, p: &Prepared) -> Result<()> {
        let Some(r) = p.rt_budget else { return Ok(()) };
        self.hcbs_hold(Some(&p.group.cpu), r.into(), &format!("workload {}", p.ws.name))
    }

    /// HCBS: raises the root group's budget, if it must, so that it holds `budget` for one more
    /// group besides every group it holds now (`group`, when it already has a budget — a resize —
    /// is counted as `budget` alone). For the node's workloads and for the groups others own that
    /// the node budgets in place (a Kubernetes container's, `rtslice_host::InPlace`): the node is
    /// the one writer of the root's budget, so its journal stays what status compares and what
    /// reset gives back. Nothing to do when the node does not reserve with HCBS.
    pub fn hcbs_hold(&self, group: Option<&Path>, budget: rtslice_plan::kernel::GroupBudget, whose: &str) -> Result<()> {
        let Some(file) = self.hcbs_root_file() else { return Ok(()) };
        let root_dir = self.facts.backend.root().cpu;
        let Some((runtime, period_us)) = fsio::read_opt(&file)?.as_deref().and_then(crate::cgroup::parse_rt_max) else {
            return Ok(());
        };
        let others = crate::cgroup::hcbs_root_groups(&root_dir).into_iter().filter(|(d, _)| Some(d.as_path()) != group).map(|(_, b)| b).collect();
        let root = rtslice_plan::HcbsRoot { runtime_us: runtime.unwrap_or(0), period_us, others };
        match root.raised_for(&[budget]) {
            Some(b) => self.set_hcbs_root(&file, b).map_err(|e| HostError::StepFailed {
                step: format!("raise the root group's HCBS budget to \"{} {}\" for {whose}", b.runtime_us, b.period_us),
                source: Box::new(e),
                rollback_errors: Vec::new(),
            }),
            None => Ok(()),
        }
    }

    /// HCBS, after an operation (and at open, and after a container budgeted in place is released):
    /// the root group's budget back down to what its groups need, never below its value before the
    /// node (the base journal's). A refusal (a removed group the kernel has not freed yet, beyond
    /// the retries) leaves the root holding more until the next operation: nothing is
    /// over-admitted by that.
    pub fn hcbs_settle_root(&self) {
        let Some(file) = self.hcbs_root_file() else { return };
        let Some(before) = self.hcbs_root_before(&file) else { return };
        let Some((runtime, period_us)) = fsio::read_opt(&file).ok().flatten().as_deref().and_then(crate::cgroup::parse_rt_max) else { return };
        let groups: Vec<rtslice_plan::kernel::GroupBudget> =
            crate::cgroup::hcbs_root_groups(&self.facts.backend.root().cpu).into_iter().map(|(_, b)| b).collect();
        let need = rtslice_plan::kernel::GroupBudget { runtime_us: rtslice_plan::kernel::hcbs_root_runtime_us(&groups, period_us), period_us };
        let bw = rtslice_plan::kernel::hcbs_bw;
        let target = if bw(need) > bw(before) { need } else { before };
        if bw(target) != bw(rtslice_plan::kernel::GroupBudget { runtime_us: runtime.unwrap_or(0), period_us }) || target.period_us != period_us {
            let _ = self.set_hcbs_root(&file, target);
        }
    }

    /// The root's budget before the node started (the base journal's entry for it).
    pub(super) fn hcbs_root_before(&self, file: &Path) -> Option<rtslice_plan::kernel::GroupBudget> {
        crate::cgroup::parse_rt_max(&self.base_old(file)?)
            .map(|(r, period_us)| rtslice_plan::kernel::GroupBudget { runtime_us: r.unwrap_or(0), period_us })
    }

    /// Writes the root's budget, the base journal's entry saying so first (its `old` stays what
    /// reset restores; `new` is what status compares): a crash in between leaves the entry ahead of
    /// the kernel, which the next open settles.
    pub(super) fn set_hcbs_root(&self, file: &Path, b: rtslice_plan::kernel::GroupBudget) -> Result<()> {
        let value = format!("{} {}", b.runtime_us, b.period_us);
        self.set_base_new(file, &value)?;
        let r = crate::txn::write_rt_aware(file, &value);
        if r.is_err() {
            if let Ok(now) = fsio::read_trim(file) {
                let _ = self.set_base_new(file, &now);
            }
        }
        r
    }
}
