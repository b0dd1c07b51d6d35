//! IRQs by action name (/proc/interrupts), their affinity files, RPS/XPS masks, and irqbalance.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Irq {
    pub number: u32,
    /// The device/action names (the last column; several when the line is shared).
    pub actions: Vec<String>,
}

impl Irq {
    pub fn affinity_file(&self) -> PathBuf {
        affinity_file(self.number)
    }
}

/// The file that sets IRQ `number`'s affinity (a CPU list).
pub fn affinity_file(number: u32) -> PathBuf {
    PathBuf::from(format!("/proc/irq/{number}/smp_affinity_list"))
}

/// Numbered IRQs in /proc/interrupts text. The action column starts after the per-CPU counts and the
/// chip/hwirq/trigger columns; we take the last whitespace-separated field group after the trigger type,
/// i.e. the text after the CPU counts minus the first two tokens (chip name, hwirq+type), which matches
/// both "IO-APIC 4-edge ttyS0" and "PCI-MSIX-0000:00:04.0 1-edge virtio3-rx".
pub fn parse_interrupts(text: &str) -> Vec<Irq> {
    let mut lines = text.lines();
    let ncpus = lines.next().map(|h| h.split_whitespace().count()).unwrap_or(0);
    let mut out = Vec::new();
    for line in lines {
        let Some((num, rest)) = line.trim_start().split_once(':') else { continue };
        let Ok(number) = num.trim().parse::<u32>() else { continue };
        let tokens: Vec<&str> = rest.split_whitespace().collect();
        if tokens.len() <= ncpus + 2 {
            continue;
        }
        let after_counts = &tokens[ncpus..];
        // Find the trigger token ("4-edge", "fasteoi", "edge"): the actions follow it.
        let idx = after_counts
            .iter()
            .position(|t| t.ends_with("-edge") || t.ends_with("-level") || *t == "edge" || *t == "level" || t.ends_with("-fasteoi") || *t == "fasteoi")
            .map(|i| i + 1)
            .unwrap_or(2.min(after_counts.len()));
        let actions: Vec<String> = after_counts[idx..]
            .join(" ")
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if !actions.is_empty() {
            out.push(Irq { number, actions });
        }
    }
    out
}

pub fn read_interrupts() -> std::io::Result<Vec<Irq>> {
    Ok(parse_interrupts(&std::fs::read_to_string("/proc/interrupts")?))
}

/// IRQs with an action whose whole name matches `pattern`.
pub fn matching(irqs: &[Irq], pattern: &regex::Regex) -> Vec<Irq> {
    irqs.iter().filter(|i| i.actions.iter().any(|a| pattern.is_match(a))).cloned().collect()
}

/// rps_cpus files of an interface's RX queues and xps_cpus files of its TX queues (those that exist:
/// xps_cpus is absent on single-queue virtual devices).
pub fn steering_files(sys_class_net: &Path, iface: &str) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut rps = Vec::new();
    let mut xps = Vec::new();
    if let Ok(rd) = std::fs::read_dir(sys_class_net.join(iface).join("queues")) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with("rx-") && e.path().join("rps_cpus").exists() {
                rps.push(e.path().join("rps_cpus"));
            } else if name.starts_with("tx-") && e.path().join("xps_cpus").exists() {
                xps.push(e.path().join("xps_cpus"));
            }
        }
    }
    rps.sort();
    xps.sort();
    (rps, xps)
}

pub fn interfaces(sys_class_net: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(sys_class_net)
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().to_string()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// PIDs of running processes whose comm is `name`.
pub fn pids_named(name: &str) -> Vec<i32> {
    rtslice_sys::procfs::pids_named(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "           CPU0       CPU1       
 24:          1          0  IO-APIC   5-edge      ACPI:Ged
 26:          0         15  IO-APIC   4-edge      ttyS0
 41:       2010          0 PCI-MSIX-0000:00:04.0   1-edge      virtio3-rx
 11:          0          0   IO-APIC  11-fasteoi   uhci_hcd:usb1, eth1
NMI:          0          0   Non-maskable interrupts
";

    #[test]
    fn parses_action_names() {
        let irqs = parse_interrupts(TEXT);
        assert_eq!(irqs.len(), 4);
        assert_eq!(irqs[1], Irq { number: 26, actions: vec!["ttyS0".into()] });
        assert_eq!(irqs[2].actions, vec!["virtio3-rx".to_string()]);
        assert_eq!(irqs[3].actions, vec!["uhci_hcd:usb1".to_string(), "eth1".to_string()]);
        let re = crate::setup::pattern("^virtio3-").unwrap();
        assert_eq!(matching(&irqs, &re).iter().map(|i| i.number).collect::<Vec<_>>(), vec![41]);
        assert_eq!(irqs[2].affinity_file(), PathBuf::from("/proc/irq/41/smp_affinity_list"));
    }

    #[test]
    fn reads_the_real_table() {
        // Every Linux host has at least one numbered IRQ with a name.
        let irqs = read_interrupts().unwrap();
        assert!(!irqs.is_empty());
    }
}
