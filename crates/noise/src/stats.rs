//! Per-CPU busy and softirq shares from /proc/stat, NET_RX softirq counts from /proc/softirqs.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CpuShare {
    pub cpu: usize,
    /// Non-idle share of the interval, percent.
    pub busy_percent: f64,
    /// Share spent in softirq context, percent.
    pub softirq_percent: f64,
    /// NET_RX softirqs raised per second.
    pub net_rx_per_s: f64,
}

#[derive(Debug, Clone, Default)]
pub struct CpuSnapshot {
    /// per CPU: (total jiffies, idle+iowait, softirq, NET_RX count)
    cpus: Vec<(usize, u64, u64, u64, u64)>,
    at: Option<std::time::Instant>,
}

pub fn online_cpus() -> Vec<usize> {
    let v: Vec<usize> = rtslice_sys::procfs::online_cpus().unwrap_or_default().into_iter().map(|c| c as usize).collect();
    if v.is_empty() {
        vec![0]
    } else {
        v
    }
}

impl CpuSnapshot {
    pub fn take() -> CpuSnapshot {
        let stat = rtslice_sys::procfs::cpu_stat().unwrap_or_default();
        let net_rx = rtslice_sys::procfs::softirq_row("NET_RX");
        let cpus = stat
            .cpus
            .iter()
            .map(|&(cpu, t)| {
                // /proc/softirqs lists possible CPUs in order; index by position of the online CPU id.
                let rx = net_rx.get(cpu as usize).copied().unwrap_or(0);
                (cpu as usize, t.total, t.idle, t.softirq, rx)
            })
            .collect();
        CpuSnapshot { cpus, at: Some(std::time::Instant::now()) }
    }

    pub fn shares_since(&self, before: &CpuSnapshot) -> Vec<CpuShare> {
        let secs = match (self.at, before.at) {
            (Some(a), Some(b)) => a.duration_since(b).as_secs_f64().max(1e-6),
            _ => 1.0,
        };
        self.cpus
            .iter()
            .filter_map(|&(cpu, total, idle, softirq, rx)| {
                let &(_, t0, i0, s0, r0) = before.cpus.iter().find(|c| c.0 == cpu)?;
                let dt = total.saturating_sub(t0).max(1) as f64;
                Some(CpuShare {
                    cpu,
                    busy_percent: 100.0 * (dt - idle.saturating_sub(i0) as f64).max(0.0) / dt,
                    softirq_percent: 100.0 * softirq.saturating_sub(s0) as f64 / dt,
                    net_rx_per_s: rx.saturating_sub(r0) as f64 / secs,
                })
            })
            .collect()
    }
}
