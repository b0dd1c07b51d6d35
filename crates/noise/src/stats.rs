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
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut v = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let mut it = part.split('-');
        let a: usize = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
        let b: usize = it.next().and_then(|x| x.parse().ok()).unwrap_or(a);
        v.extend(a..=b);
    }
    if v.is_empty() {
        v.push(0);
    }
    v
}

impl CpuSnapshot {
    pub fn take() -> CpuSnapshot {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let net_rx: Vec<u64> = std::fs::read_to_string("/proc/softirqs")
            .unwrap_or_default()
            .lines()
            .find(|l| l.trim_start().starts_with("NET_RX:"))
            .map(|l| l.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect())
            .unwrap_or_default();
        let mut cpus = Vec::new();
        for line in stat.lines() {
            let Some(rest) = line.strip_prefix("cpu") else { continue };
            let mut f = rest.split_whitespace();
            let Some(Ok(cpu)) = f.next().map(str::parse::<usize>) else { continue };
            let v: Vec<u64> = f.filter_map(|x| x.parse().ok()).collect();
            if v.len() < 7 {
                continue;
            }
            // user nice system idle iowait irq softirq steal (guest is inside user)
            let total: u64 = v.iter().take(8).sum();
            let idle = v[3] + v[4];
            let softirq = v[6];
            // /proc/softirqs lists possible CPUs in order; index by position of the online CPU id.
            let rx = net_rx.get(cpu).copied().unwrap_or(0);
            cpus.push((cpu, total, idle, softirq, rx));
        }
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
