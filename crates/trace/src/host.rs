//! Host signals: per-CPU IRQ and softirq counts (/proc/interrupts, /proc/softirqs), per-CPU busy/idle
//! (/proc/stat), package energy (powercap RAPL) and LLC occupancy / memory bandwidth (resctrl).
//! Each is sampled at the start and at every snapshot; reports carry deltas and rates.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

// The /proc tables are read and parsed by rtslice-sys; this module keeps the deltas and rates.
pub(crate) use rtslice_sys::procfs::IrqLine;
#[cfg(test)]
use rtslice_sys::procfs::{parse_interrupts, parse_softirqs};

/// /proc/stat per-CPU jiffies: (cpu, busy, idle); idle includes iowait, busy everything else but guest
/// time (already inside user/nice).
#[cfg(test)]
fn parse_stat(text: &str) -> Vec<(usize, u64, u64)> {
    stat_rows(&rtslice_sys::procfs::parse_cpu_stat(text))
}

fn stat_rows(stat: &rtslice_sys::procfs::CpuStat) -> Vec<(usize, u64, u64)> {
    stat.cpus.iter().map(|&(cpu, t)| (cpu as usize, t.busy(), t.idle)).collect()
}

#[derive(Clone, Debug, Default)]
pub(crate) struct HostSample {
    pub irqs: Vec<IrqLine>,
    pub softirqs: Vec<(String, Vec<u64>)>,
    pub stat: Vec<(usize, u64, u64)>,
    pub rapl: Vec<(String, u64, u64)>, // (domain, energy_uj, max_energy_range_uj)
    pub resctrl: Option<(u64, u64)>,  // (llc_occupancy bytes, mbm_total_bytes)
    /// The resctrl group `resctrl` was read from.
    pub resctrl_group: PathBuf,
}

impl HostSample {
    /// `resctrl_group`: the target's own resctrl group, or the root (the default group).
    pub fn take(resctrl_group: &Path) -> HostSample {
        HostSample {
            irqs: rtslice_sys::procfs::interrupts(),
            softirqs: rtslice_sys::procfs::softirqs(),
            stat: rtslice_sys::procfs::cpu_stat().map(|s| stat_rows(&s)).unwrap_or_default(),
            rapl: read_rapl(),
            resctrl: rtslice_sys::resctrl::monitor(resctrl_group),
            resctrl_group: resctrl_group.to_path_buf(),
        }
    }
}

fn read_u64(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

const POWERCAP: &str = "/sys/class/powercap";
const RESCTRL: &str = "/sys/fs/resctrl";

fn read_rapl() -> Vec<(String, u64, u64)> {
    let Ok(dir) = fs::read_dir(POWERCAP) else { return Vec::new() };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let p = entry.path();
        let fname = entry.file_name().to_string_lossy().to_string();
        // Package domains only ("intel-rapl:0"), not their sub-zones ("intel-rapl:0:0").
        if !(fname.starts_with("intel-rapl:") || fname.starts_with("amd-rapl:")) || fname.matches(':').count() != 1 {
            continue;
        }
        let name = fs::read_to_string(p.join("name")).map(|s| s.trim().to_string()).unwrap_or(fname);
        if let (Some(e), Some(max)) = (read_u64(&p.join("energy_uj")), read_u64(&p.join("max_energy_range_uj"))) {
            out.push((name, e, max));
        }
    }
    out.sort();
    out
}

/// Why RAPL or resctrl data is missing, for the report.
pub(crate) fn rapl_unavailable_reason() -> String {
    if !Path::new(POWERCAP).exists() {
        "unavailable: no /sys/class/powercap (kernel without CONFIG_POWERCAP or a VM without RAPL)".into()
    } else {
        "unavailable: no readable intel-rapl/amd-rapl package zone in /sys/class/powercap (no RAPL MSRs \
         exposed, or energy_uj is root-only)"
            .into()
    }
}

pub(crate) fn resctrl_unavailable_reason() -> String {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags = cpuinfo.lines().find(|l| l.starts_with("flags")).unwrap_or("");
    let has = |f: &str| flags.split_whitespace().any(|w| w == f);
    if !Path::new(RESCTRL).join("info").exists() {
        if has("cqm_occup_llc") || has("cqm_mbm_total") {
            "unavailable: the CPU has CMT/MBM but resctrl is not mounted (mount -t resctrl resctrl /sys/fs/resctrl)".into()
        } else {
            "unavailable: no resctrl (the CPU or VM exposes no CMT/MBM monitoring)".into()
        }
    } else {
        "unavailable: resctrl is mounted but offers no llc_occupancy/mbm_total_bytes monitors".into()
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct CpuReport {
    pub cpu: usize,
    pub busy_pct: f64,
    pub idle_pct: f64,
    pub irqs: u64,
    pub irqs_per_s: f64,
    pub softirqs: u64,
    pub softirqs_per_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct IrqReport {
    /// The /proc/interrupts row ("24", "LOC", "NMI", …).
    pub irq: String,
    pub desc: String,
    /// Matches one of the IRQ names the caller asked about (e.g. the spec's IRQ rules).
    pub named: bool,
    pub per_cpu: Vec<u64>,
    pub total: u64,
    pub per_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SoftirqReport {
    pub name: String,
    pub per_cpu: Vec<u64>,
    pub total: u64,
    pub per_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct HostReport {
    pub cpus: Vec<CpuReport>,
    /// IRQs whose description matches a requested name, then the busiest others (at most 10).
    pub irqs: Vec<IrqReport>,
    pub softirqs: Vec<SoftirqReport>,
    /// Package power in W per RAPL domain, or "unavailable: <reason>".
    pub rapl: Measurement<Vec<(String, f64)>>,
    /// LLC occupancy (bytes, at the end) and memory bandwidth (bytes/s), or "unavailable: <reason>".
    pub resctrl: Measurement<ResctrlReport>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ResctrlReport {
    /// The resctrl group measured: the workload's own, or the root (the default group: every task
    /// in no other group).
    pub group: String,
    pub llc_occupancy_bytes: u64,
    pub mbm_total_bytes_per_s: f64,
}

/// A value, or why there is none. Serialized as the value, or as the string "unavailable: …" /
/// "unsupported: …".
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum Measurement<T> {
    Value(T),
    Missing(String),
}

impl<T> Measurement<T> {
    pub fn value(&self) -> Option<&T> {
        match self {
            Measurement::Value(v) => Some(v),
            Measurement::Missing(_) => None,
        }
    }
}

fn sub(a: &[u64], b: &[u64]) -> Vec<u64> {
    a.iter().enumerate().map(|(i, v)| v.saturating_sub(b.get(i).copied().unwrap_or(0))).collect()
}

pub(crate) fn host_report(start: &HostSample, end: &HostSample, secs: f64, irq_names: &[String]) -> HostReport {
    let secs = secs.max(1e-9);
    // The spec's IRQ rules are unanchored regexes over the action names; a pattern that is not a valid
    // regex is matched literally.
    let patterns: Vec<regex::Regex> = irq_names
        .iter()
        .filter(|n| !n.is_empty())
        .filter_map(|n| regex::Regex::new(n).or_else(|_| regex::Regex::new(&regex::escape(n))).ok())
        .collect();
    let mut irqs: Vec<IrqReport> = end
        .irqs
        .iter()
        .map(|l| {
            let before = start.irqs.iter().find(|s| s.id == l.id).map(|s| s.per_cpu.as_slice()).unwrap_or(&[]);
            let per_cpu = sub(&l.per_cpu, before);
            let total = per_cpu.iter().sum();
            let named = patterns.iter().any(|p| p.is_match(&l.desc)) || irq_names.iter().any(|n| *n == l.id);
            IrqReport { irq: l.id.clone(), desc: l.desc.clone(), named, per_cpu, total, per_s: total as f64 / secs }
        })
        .collect();
    irqs.sort_by(|a, b| b.named.cmp(&a.named).then(b.total.cmp(&a.total)));
    let named = irqs.iter().filter(|i| i.named).count();
    irqs.truncate(named + 10);
    irqs.retain(|i| i.named || i.total > 0);

    let softirqs: Vec<SoftirqReport> = end
        .softirqs
        .iter()
        .map(|(name, counts)| {
            let before = start.softirqs.iter().find(|s| &s.0 == name).map(|s| s.1.as_slice()).unwrap_or(&[]);
            let per_cpu = sub(counts, before);
            let total = per_cpu.iter().sum();
            SoftirqReport { name: name.clone(), per_cpu, total, per_s: total as f64 / secs }
        })
        .collect();

    let cpus = end
        .stat
        .iter()
        .map(|&(cpu, busy, idle)| {
            let (b0, i0) = start.stat.iter().find(|s| s.0 == cpu).map(|s| (s.1, s.2)).unwrap_or((busy, idle));
            let (db, di) = (busy.saturating_sub(b0), idle.saturating_sub(i0));
            let all = (db + di).max(1) as f64;
            let irq_n: u64 = irqs_on_cpu(&start.irqs, &end.irqs, cpu);
            let soft_n: u64 = softirqs.iter().map(|s| s.per_cpu.get(cpu).copied().unwrap_or(0)).sum();
            CpuReport {
                cpu,
                busy_pct: 100.0 * db as f64 / all,
                idle_pct: 100.0 * di as f64 / all,
                irqs: irq_n,
                irqs_per_s: irq_n as f64 / secs,
                softirqs: soft_n,
                softirqs_per_s: soft_n as f64 / secs,
            }
        })
        .collect();

    let rapl = if end.rapl.is_empty() {
        Measurement::Missing(rapl_unavailable_reason())
    } else {
        Measurement::Value(
            end.rapl
                .iter()
                .map(|(name, e, max)| {
                    let e0 = start.rapl.iter().find(|s| &s.0 == name).map(|s| s.1).unwrap_or(*e);
                    // The counter wraps at max_energy_range_uj.
                    let de = if *e >= e0 { e - e0 } else { e + max - e0 };
                    (name.clone(), de as f64 / 1e6 / secs)
                })
                .collect(),
        )
    };
    let resctrl = match (start.resctrl, end.resctrl) {
        (Some((_, m0)), Some((occ, m1))) => Measurement::Value(ResctrlReport {
            group: end.resctrl_group.display().to_string(),
            llc_occupancy_bytes: occ,
            mbm_total_bytes_per_s: m1.saturating_sub(m0) as f64 / secs,
        }),
        _ => Measurement::Missing(resctrl_unavailable_reason()),
    };
    HostReport { cpus, irqs, softirqs, rapl, resctrl }
}

fn irqs_on_cpu(start: &[IrqLine], end: &[IrqLine], cpu: usize) -> u64 {
    end.iter()
        .map(|l| {
            let before = start.iter().find(|s| s.id == l.id).and_then(|s| s.per_cpu.get(cpu).copied()).unwrap_or(0);
            l.per_cpu.get(cpu).copied().unwrap_or(0).saturating_sub(before)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERRUPTS: &str = "           CPU0       CPU1       \n\
  0:         45          0   IO-APIC   2-edge      timer\n\
  4:          0        372   IO-APIC   4-edge      ttyS0\n\
 24:       1000         20   PCI-MSI 49152-edge      virtio0-input.0\n\
NMI:          0          0   Non-maskable interrupts\n\
LOC:      51337      49981   Local timer interrupts\n\
ERR:          0\n";

    #[test]
    fn parses_interrupts_with_names_and_short_rows() {
        let l = parse_interrupts(INTERRUPTS);
        assert_eq!(l.len(), 6);
        assert_eq!(l[2].id, "24");
        assert_eq!(l[2].per_cpu, vec![1000, 20]);
        assert!(l[2].desc.ends_with("virtio0-input.0"));
        assert_eq!(l[5].per_cpu, vec![0, 0]);
        assert_eq!(l[4].desc, "Local timer interrupts");
    }

    #[test]
    fn reports_named_irqs_first_with_rates() {
        let a = HostSample { irqs: parse_interrupts(INTERRUPTS), ..Default::default() };
        let mut b = a.clone();
        b.irqs[2].per_cpu = vec![1500, 20];
        b.irqs[4].per_cpu = vec![52337, 50981];
        let r = host_report(&a, &b, 2.0, &["virtio0-input".to_string()]);
        assert_eq!(r.irqs[0].irq, "24");
        assert!(r.irqs[0].named);
        assert_eq!(r.irqs[0].total, 500);
        assert_eq!(r.irqs[0].per_s, 250.0);
        assert_eq!(r.irqs[1].irq, "LOC");
        assert_eq!(r.irqs.len(), 2, "idle IRQs are left out");
    }

    #[test]
    fn parses_stat_and_softirqs_from_this_host() {
        let stat = parse_stat(&fs::read_to_string("/proc/stat").unwrap());
        assert!(!stat.is_empty() && stat[0].0 == 0);
        let soft = parse_softirqs(&fs::read_to_string("/proc/softirqs").unwrap());
        assert!(soft.iter().any(|(n, c)| n == "TIMER" && !c.is_empty()));
    }
}
