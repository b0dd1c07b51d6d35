//! IRQ affinity and RPS/XPS rules as the kernel files they write: `targets` resolves a setup's rules
//! against this host (which IRQs and queues they name, now), `steer` writes them, journaled. One-shot
//! apply steers every workload's rules at once; the node steers one workload's, and a file one
//! deployed workload holds no other may take (`Node::claims_of`), so removing a workload restores
//! exactly the values it changed, in any order.

use std::path::{Path, PathBuf};

use crate::cpus::CpuList;
use crate::error::{HostError, Result};
use crate::fsio;
use crate::setup::Setup;
use crate::txn::{step, StepResult, Txn};

/// One kernel file a rule writes, and what.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Target {
    pub file: PathBuf,
    pub cpus: CpuList,
    /// `/proc/irq/N/smp_affinity_list` takes a CPU list; `rps_cpus`/`xps_cpus` take a hex mask.
    pub mask: bool,
    /// What it is, for a step's name and a refusal: "IRQ 42 (virtio0-input)", "rps_cpus of eth0 rx-0".
    pub what: String,
}

impl Target {
    fn value(&self) -> String {
        if self.mask {
            self.cpus.to_mask()
        } else {
            self.cpus.to_string()
        }
    }

    /// The file holds these CPUs already (read as the kernel prints it: a list, or a mask).
    fn in_force(&self) -> bool {
        let Ok(cur) = fsio::read_trim(&self.file) else { return false };
        let parsed = if self.mask { CpuList::parse_mask(&cur) } else { CpuList::parse(&cur) };
        parsed.is_ok_and(|c| c == self.cpus)
    }
}

/// The files `setup`'s IRQ and net rules write on this host now; rules that name nothing here (no
/// such IRQ, interface or queue files) and a running irqbalance are reported in `warnings`.
pub(crate) fn targets(setup: &Setup, warnings: &mut Vec<String>) -> Result<Vec<Target>> {
    let mut out = Vec::new();
    if !setup.irqs.is_empty() {
        let irqs = crate::irq::read_interrupts().map_err(|source| HostError::Read { path: "/proc/interrupts".into(), source })?;
        let balancers = crate::irq::pids_named("irqbalance");
        if !balancers.is_empty() {
            warnings.push(format!(
                "irqbalance is running (pid {balancers:?}) and may move the IRQs back: set IRQBALANCE_BANNED_CPULIST to the \
                 reserved CPUs in /etc/default/irqbalance and restart it"
            ));
        }
        for rule in &setup.irqs {
            let re = crate::setup::pattern(&rule.action).map_err(HostError::Invalid)?;
            let hits = crate::irq::matching(&irqs, &re);
            if hits.is_empty() {
                warnings.push(format!("IRQ rule {:?}: no IRQ action matches on this host", rule.action));
            }
            out.extend(hits.into_iter().map(|irq| Target {
                file: irq.affinity_file(),
                cpus: rule.cpus.clone(),
                mask: false,
                what: format!("IRQ {} ({})", irq.number, irq.actions.join(",")),
            }));
        }
    }
    let net = Path::new("/sys/class/net");
    for rule in &setup.nets {
        let re = crate::setup::pattern(&rule.iface).map_err(HostError::Invalid)?;
        let ifaces: Vec<String> = crate::irq::interfaces(net).into_iter().filter(|i| re.is_match(i)).collect();
        if ifaces.is_empty() {
            warnings.push(format!("net rule {:?}: no interface matches", rule.iface));
        }
        for iface in ifaces {
            let (rps, xps) = crate::irq::steering_files(net, &iface);
            for (want, files, what) in [(&rule.rps, rps, "rps_cpus"), (&rule.xps, xps, "xps_cpus")] {
                let Some(cpus) = want else { continue };
                if files.is_empty() {
                    warnings.push(format!("{iface}: no {what} files (single-queue or virtual device); skipped"));
                }
                out.extend(files.into_iter().map(|file| {
                    let queue = file.parent().and_then(|q| q.file_name()).map(|q| q.to_string_lossy().into_owned()).unwrap_or_default();
                    Target { what: format!("{what} of {iface} {queue}"), file, cpus: cpus.clone(), mask: true }
                }));
            }
        }
    }
    Ok(out)
}

/// Writes every target whose file does not hold its CPUs already, each journaled with the value it
/// had (what remove, rollback and reset put back).
pub(crate) fn steer(txn: &mut Txn, targets: &[Target]) -> StepResult<()> {
    for t in targets.iter().filter(|t| !t.in_force()) {
        step(format!("{} to [{}]: {}", t.what, t.cpus, t.file.display()), txn.write(&t.file, &t.value()))?;
    }
    Ok(())
}
