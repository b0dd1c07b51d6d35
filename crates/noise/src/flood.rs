//! The `kernel` noise: a UDP flood of small datagrams from one network namespace to another over
//! a veth pair. Receive processing (NET_RX softirq: IP, UDP, socket enqueue) is steered to the
//! chosen CPUs with RPS on the receiving veth; veth has no hardware IRQ to pin, so RPS is the
//! mechanism (on a real NIC the queue IRQs would be pinned as well). The consumer is socat
//! writing to /dev/null, pinned to the same CPUs, as study A's netcat.

use std::net::UdpSocket;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rtslice_sys::netns::{self, Netns};
use rtslice_sys::SysError;
use serde::{Deserialize, Serialize};

use crate::proc::{next_seq, Managed};
use crate::{FloodSpec, NoiseError};

const PREFIX: &str = "rtsn";
const TX_ADDR: &str = "10.213.0.1";
const RX_ADDR: &str = "10.213.0.2";
const PORT: u16 = 5001;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FloodStats {
    /// Datagrams handed to the kernel by the sender, per second.
    pub sent_pps: f64,
    /// Packets received on the receiving veth, per second.
    pub rx_pps: f64,
    /// Datagrams delivered to the consumer's socket, per second.
    pub delivered_pps: f64,
    /// Datagrams dropped because the consumer's socket buffer was full, per second.
    pub dropped_pps: f64,
    pub payload_bytes: usize,
    pub namespaces: Vec<String>,
    /// RPS mask written on the receiving veth ("" when RPS was not requested).
    pub rps_cpus: String,
    pub sender_cpus: Vec<usize>,
}

pub struct Flood {
    namespaces: Vec<Netns>,
    veth_rx: String,
    receiver: Option<Managed>,
    sender: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    sender_error: Arc<std::sync::Mutex<Option<String>>>,
    last: (u64, u64, u64, u64),
    first: (u64, u64, u64, u64),
    payload: usize,
    rps_mask: String,
    sender_cpus: Vec<usize>,
}

/// A failed namespace step as the noise reports it (the step, then why and what to do).
fn step_failed(e: SysError) -> NoiseError {
    match e {
        SysError::Command { command, stderr, .. } => {
            NoiseError::Command { what: command, detail: format!("{stderr} (needs root / CAP_NET_ADMIN)") }
        }
        e => NoiseError::Command { what: "setting up the flood's network namespaces".into(), detail: e.to_string() },
    }
}

/// Hex CPU mask as sysfs writes it: 32-bit groups separated by commas, most significant first.
pub fn cpu_mask(cpus: &[usize]) -> String {
    rtslice_sys::cpulist::format_cpu_mask(&cpus.iter().map(|&c| c as u32).collect::<Vec<_>>())
}

/// Deletes flood namespaces left behind by processes that no longer exist (SIGKILL, crash).
/// Returns the names deleted.
pub fn cleanup_stale() -> Vec<String> {
    let mut deleted = Vec::new();
    for name in netns::list() {
        let Some(rest) = name.strip_prefix(PREFIX) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if !rtslice_sys::procfs::process_exists(pid) && netns::delete(&name).is_ok() {
            deleted.push(name);
        }
    }
    deleted
}

fn sender_loop(ns: String, cpus: Vec<usize>, spec: FloodSpec, stop: Arc<AtomicBool>, sent: Arc<AtomicU64>) -> Result<(), String> {
    let _ = rtslice_sys::thread::set_name("rtsn-flood");
    // Best effort, as before: an offline CPU leaves the sender where it was.
    let _ = rtslice_sys::sched::set_affinity(0, cpus.iter().map(|&c| c as u32));
    netns::enter(&ns).map_err(|e| e.to_string())?;
    let sock = UdpSocket::bind((TX_ADDR, 0)).map_err(|e| format!("bind {TX_ADDR}: {e}"))?;
    sock.connect((RX_ADDR, PORT)).map_err(|e| format!("connect {RX_ADDR}:{PORT}: {e}"))?;
    let payload = vec![0x5au8; spec.payload.max(1)];
    const BATCH: usize = 32;
    let start = Instant::now();
    let mut total = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let want = match spec.pps {
            // Paced: send what the elapsed time allows, in batches, sleeping 1 ms between.
            Some(pps) => {
                let due = (start.elapsed().as_secs_f64() * pps as f64) as u64;
                if due <= total {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                ((due - total) as usize).min(BATCH)
            }
            None => BATCH,
        };
        let n = rtslice_sys::net::send_copies(&sock, &payload, want).unwrap_or(0);
        if n > 0 {
            total += n as u64;
            sent.fetch_add(n as u64, Ordering::Relaxed);
        } else {
            // ECONNREFUSED (consumer not yet bound) or ENOBUFS: back off briefly.
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    Ok(())
}

impl Flood {
    pub fn start(spec: &FloodSpec, cpus: &[usize], online: &[usize], workdir: &Path) -> Result<Flood, NoiseError> {
        if spec.payload == 0 || spec.payload > 1472 {
            return Err(NoiseError::Invalid(format!("payload {} bytes: use 1..=1472", spec.payload)));
        }
        cleanup_stale();
        let id = format!("{}-{}", std::process::id(), next_seq());
        let ns_tx = format!("{PREFIX}{id}-tx");
        let ns_rx = format!("{PREFIX}{id}-rx");
        let short = format!("rsn{}", id.replace('-', ""));
        let veth_tx = format!("{}t", &short[..short.len().min(14)]);
        let veth_rx = format!("{}r", &short[..short.len().min(14)]);
        let sender_cpus = match &spec.sender_cpus {
            Some(c) => c.clone(),
            None => {
                let others: Vec<usize> = online.iter().copied().filter(|c| !cpus.contains(c)).collect();
                if others.is_empty() { online.to_vec() } else { others }
            }
        };
        let mut f = Flood {
            namespaces: Vec::new(),
            veth_rx: veth_rx.clone(),
            receiver: None,
            sender: None,
            stop: Arc::new(AtomicBool::new(false)),
            sent: Arc::new(AtomicU64::new(0)),
            sender_error: Arc::new(std::sync::Mutex::new(None)),
            last: (0, 0, 0, 0),
            first: (0, 0, 0, 0),
            payload: spec.payload,
            rps_mask: String::new(),
            sender_cpus: sender_cpus.clone(),
        };
        // On any error `f` is dropped, which deletes whatever was created.
        for ns in [&ns_tx, &ns_rx] {
            f.namespaces.push(Netns::create(ns).map_err(step_failed)?);
        }
        let (tx, rx) = (&f.namespaces[0], &f.namespaces[1]);
        netns::veth_pair(&veth_tx, Some(tx), &veth_rx, Some(rx)).map_err(step_failed)?;
        tx.address(&veth_tx, &format!("{TX_ADDR}/30")).map_err(step_failed)?;
        rx.address(&veth_rx, &format!("{RX_ADDR}/30")).map_err(step_failed)?;
        if spec.rps {
            // sysfs shows the devices of the mounting namespace: write from inside the receiver's.
            let mask = cpu_mask(cpus);
            let cmd = format!("echo {mask} > /sys/class/net/{veth_rx}/queues/rx-0/rps_cpus");
            rx.exec("sh", &["-c", &cmd]).map_err(step_failed)?;
            f.rps_mask = mask;
        }
        let list = cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",");
        let recv = format!("UDP4-RECV:{PORT},bind={RX_ADDR},rcvbuf=4194304");
        f.receiver = Some(Managed::spawn(
            "socat consumer",
            "ip",
            &["netns", "exec", &ns_rx, "taskset", "-c", &list, "socat", "-u", &recv, "/dev/null"],
            workdir,
            None,
        )?);
        // Let socat bind before the flood starts, so the first packets are not refused.
        std::thread::sleep(Duration::from_millis(150));
        let (stop, sent, err) = (f.stop.clone(), f.sent.clone(), f.sender_error.clone());
        let spec2 = spec.clone();
        let ns = ns_tx.clone();
        f.sender = Some(
            std::thread::Builder::new()
                .name("rtsn-flood".into())
                .spawn(move || {
                    if let Err(e) = sender_loop(ns, sender_cpus, spec2, stop, sent) {
                        *err.lock().expect("sender error") = Some(e);
                    }
                })
                .map_err(|e| NoiseError::Io(format!("cannot start the flood sender thread: {e}")))?,
        );
        Ok(f)
    }

    pub fn pids(&self) -> Vec<u32> {
        self.receiver.iter().map(|r| r.pid()).collect()
    }

    pub fn running(&mut self) -> usize {
        self.receiver.as_mut().map(|r| r.running() as usize).unwrap_or(0)
    }

    pub fn check(&mut self) -> Result<(), NoiseError> {
        if let Some(e) = self.sender_error.lock().expect("sender error").clone() {
            return Err(NoiseError::Command { what: "the flood sender".into(), detail: e });
        }
        if let Some(r) = &mut self.receiver {
            r.check()?;
        }
        Ok(())
    }

    /// (sent, veth rx packets, UDP InDatagrams, UDP RcvbufErrors) as counted now.
    fn counters(&self) -> (u64, u64, u64, u64) {
        let sent = self.sent.load(Ordering::Relaxed);
        let Some(pid) = self.receiver.as_ref().map(|r| r.pid()) else { return (sent, 0, 0, 0) };
        // /proc/<pid>/net/* show the network namespace of that process: the receiver's.
        let rx = rtslice_sys::procfs::rx_packets_of(pid, &self.veth_rx).unwrap_or(0);
        let indg = rtslice_sys::procfs::snmp_of(pid, "Udp", "InDatagrams").unwrap_or(0);
        let drops = rtslice_sys::procfs::snmp_of(pid, "Udp", "RcvbufErrors").unwrap_or(0);
        (sent, rx, indg, drops)
    }

    pub fn reset_rates(&mut self) {
        self.last = self.counters();
        self.first = self.last;
    }

    /// Rates over the whole run.
    pub fn totals(&mut self, elapsed_s: f64) -> FloodStats {
        let keep = self.last;
        self.last = self.first;
        let s = self.stats(elapsed_s);
        self.last = keep;
        s
    }

    pub fn stats(&mut self, interval_s: f64) -> FloodStats {
        let now = self.counters();
        let d = |a: u64, b: u64| a.saturating_sub(b) as f64 / interval_s.max(1e-6);
        let s = FloodStats {
            sent_pps: d(now.0, self.last.0),
            rx_pps: d(now.1, self.last.1),
            delivered_pps: d(now.2, self.last.2),
            dropped_pps: d(now.3, self.last.3),
            payload_bytes: self.payload,
            namespaces: self.namespaces.iter().map(|n| n.name().to_string()).collect(),
            rps_cpus: self.rps_mask.clone(),
            sender_cpus: self.sender_cpus.clone(),
        };
        self.last = now;
        s
    }

    pub fn teardown(&mut self) -> Result<(), NoiseError> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.sender.take() {
            let _ = h.join();
        }
        if let Some(mut r) = self.receiver.take() {
            r.kill();
        }
        let mut first = None;
        // Deleting a namespace destroys its end of the veth pair, and with it the peer.
        for ns in self.namespaces.drain(..) {
            if let Err(e) = ns.delete() {
                first.get_or_insert(step_failed(e));
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

#[cfg(test)]
mod tests {
    use super::cpu_mask;

    #[test]
    fn masks_are_written_as_sysfs_reads_them() {
        assert_eq!(cpu_mask(&[1]), "00000002");
        assert_eq!(cpu_mask(&[0, 3]), "00000009");
        assert_eq!(cpu_mask(&[33]), "00000002,00000000");
    }
}
