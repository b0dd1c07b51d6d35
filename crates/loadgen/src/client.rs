//! The open-loop client: sends requests at the times its inter-arrival distribution draws, whatever
//! the replies do (a closed loop would hide the queue), and records every round trip.
//!
//! Two threads: the sender sleeps to absolute deadlines (timer slack 1 ns, so `hrtimer` wakes it on
//! time) and stamps each request; the receiver matches replies by the stamp echoed in them.

use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::{rngs::StdRng, SeedableRng};
use rtslice_sys::sched::SchedClass;
use rtslice_sys::time::{monotonic_ns, sleep_until_ns};
use serde::Serialize;

use crate::dist::Dist;
use crate::proto::{Kind, Message, MAX_MESSAGE};
use crate::{io_err, netns, LoadgenError, Protocol, Result};

#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub server: SocketAddr,
    pub protocol: Protocol,
    pub interarrival: Dist,
    pub compute: Dist,
    pub request_bytes: u32,
    pub reply_bytes: u32,
    pub count: usize,
    pub seed: u64,
    /// How long to wait for the last replies after the last send.
    pub drain: Duration,
    /// Run sender and receiver as SCHED_FIFO at this priority (the study's SIPp client ran FIFO), so
    /// the measuring side is not what the measurement shows.
    pub fifo_priority: Option<i32>,
    /// Run in this network namespace (a name under /run/netns).
    pub netns: Option<String>,
    /// Keep the client's threads on these CPUs (off the CPU under test).
    pub cpus: Option<Vec<u32>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sample {
    pub id: u64,
    /// Send time, seconds since the first send was due.
    pub send_s: f64,
    pub rtt_s: f64,
    pub compute_s: f64,
    /// Server thread CPU time (total, and in requested work) when it answered, ns.
    pub server_cpu_ns: u64,
    pub server_work_ns: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClientRun {
    /// Answered requests, in id order.
    pub samples: Vec<Sample>,
    pub sent: usize,
    /// Requests without a reply within the drain time.
    pub lost: usize,
    /// How late the sender was against its schedule at worst (host jitter shows here first).
    pub max_send_lag_s: f64,
    pub elapsed_s: f64,
}

impl ClientRun {
    pub fn rtts_s(&self) -> Vec<f64> {
        self.samples.iter().map(|s| s.rtt_s).collect()
    }

    /// The server's CPU time per request beyond the requested work (receive, reply, bookkeeping),
    /// from the counters in the first and last replies; None with fewer than two replies.
    pub fn server_overhead_s(&self) -> Option<f64> {
        let (first, last) = (self.samples.first()?, self.samples.last()?);
        let n = last.id.checked_sub(first.id).filter(|&n| n > 0)?;
        let cpu = last.server_cpu_ns.checked_sub(first.server_cpu_ns)?;
        let work = last.server_work_ns.checked_sub(first.server_work_ns)?;
        Some(cpu.saturating_sub(work) as f64 * 1e-9 / n as f64)
    }
}

/// Makes the calling thread SCHED_FIFO at `prio`.
pub fn set_fifo(prio: i32) -> Result<()> {
    rtslice_sys::sched::set_sched_class(SchedClass::Fifo, prio)
        .map_err(|e| LoadgenError::Invalid(format!("cannot make the client SCHED_FIFO {prio} (needs root or CAP_SYS_NICE): {e}")))
}

/// Restricts the calling thread (and threads it spawns later) to `cpus`.
pub fn set_affinity(cpus: &[u32]) -> Result<()> {
    rtslice_sys::sched::set_affinity(0, cpus.iter().copied())
        .map_err(|e| LoadgenError::Invalid(format!("cannot move the client to CPUs {cpus:?}: {e}")))
}

enum Conn {
    Udp(UdpSocket),
    Tcp(TcpStream),
}

/// Runs the client to completion (in its own threads, so the caller's namespace is untouched).
pub fn run(cfg: &ClientConfig) -> Result<ClientRun> {
    if cfg.count == 0 {
        return Err(LoadgenError::Invalid("the client needs at least one request (count > 0)".into()));
    }
    let cfg = cfg.clone();
    std::thread::Builder::new()
        .name("lg-client".into())
        .spawn(move || run_here(&cfg))
        .map_err(io_err("spawn client thread"))?
        .join()
        .map_err(|_| LoadgenError::Invalid("the client thread panicked".into()))?
}

fn connect(cfg: &ClientConfig) -> Result<Conn> {
    let what = format!("cannot reach the loadgen server at {} {}", cfg.protocol, cfg.server);
    Ok(match cfg.protocol {
        Protocol::Udp => {
            let bind: SocketAddr = if cfg.server.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().unwrap();
            let s = UdpSocket::bind(bind).map_err(io_err("udp bind"))?;
            s.connect(cfg.server).map_err(io_err(what))?;
            s.set_read_timeout(Some(Duration::from_millis(20))).map_err(io_err("set_read_timeout"))?;
            Conn::Udp(s)
        }
        Protocol::Tcp => {
            let s = TcpStream::connect_timeout(&cfg.server, Duration::from_secs(3)).map_err(io_err(what))?;
            s.set_nodelay(true).map_err(io_err("set_nodelay"))?;
            s.set_read_timeout(Some(Duration::from_millis(20))).map_err(io_err("set_read_timeout"))?;
            Conn::Tcp(s)
        }
    })
}

fn run_here(cfg: &ClientConfig) -> Result<ClientRun> {
    if let Some(ns) = &cfg.netns {
        netns::enter(ns)?;
    }
    if let Some(cpus) = &cfg.cpus {
        set_affinity(cpus)?;
    }
    if let Some(p) = cfg.fifo_priority {
        set_fifo(p)?;
    }
    // 1 ns timer slack: hrtimers wake the sender on time (the 50 µs default would be jitter).
    let _ = rtslice_sys::thread::set_timer_slack_ns(1);
    let conn = connect(cfg)?;

    // The whole schedule is drawn up front: no RNG work between a deadline and its send.
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut offset = 0u64;
    let schedule: Vec<(u64, u64)> = (0..cfg.count)
        .map(|_| {
            offset += cfg.interarrival.sample(&mut rng).as_nanos() as u64;
            (offset, cfg.compute.sample(&mut rng).as_nanos() as u64)
        })
        .collect();

    let sender_done_at = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    let base = monotonic_ns() + 1_000_000;

    let receiver = {
        let (count, drain, prio) = (cfg.count, cfg.drain, cfg.fifo_priority);
        let done_at = sender_done_at.clone();
        let failed = failed.clone();
        let mut rconn = match &conn {
            Conn::Udp(s) => Conn::Udp(s.try_clone().map_err(io_err("clone socket"))?),
            Conn::Tcp(s) => Conn::Tcp(s.try_clone().map_err(io_err("clone socket"))?),
        };
        std::thread::Builder::new()
            .name("lg-recv".into())
            .spawn(move || -> Result<Vec<Option<Sample>>> {
                if let Some(p) = prio {
                    set_fifo(p)?;
                }
                let mut got: Vec<Option<Sample>> = vec![None; count];
                let mut received = 0usize;
                let mut buf = vec![0u8; MAX_MESSAGE + 1];
                let never = AtomicBool::new(false);
                while received < count {
                    let d = done_at.load(Ordering::Acquire);
                    if (d != 0 && monotonic_ns() > d + drain.as_nanos() as u64) || failed.load(Ordering::Relaxed) {
                        break;
                    }
                    let msg = match &mut rconn {
                        Conn::Udp(s) => match s.recv(&mut buf) {
                            Ok(n) => Message::decode(&buf[..n]).ok(),
                            Err(_) => None, // timeout: re-check the drain deadline
                        },
                        Conn::Tcp(s) => {
                            let mut v = Vec::new();
                            // None on an idle timeout (re-check the drain deadline); errors end the run.
                            crate::server::read_message_timeout(s, &mut v, &never)?
                        }
                    };
                    let now = monotonic_ns();
                    let Some(m) = msg else { continue };
                    if m.kind != Kind::Reply || m.id as usize >= count || got[m.id as usize].is_some() {
                        continue;
                    }
                    got[m.id as usize] = Some(Sample {
                        id: m.id,
                        send_s: m.send_ns.saturating_sub(base) as f64 * 1e-9,
                        rtt_s: now.saturating_sub(m.send_ns) as f64 * 1e-9,
                        compute_s: m.compute_ns as f64 * 1e-9,
                        server_cpu_ns: m.server_cpu_ns,
                        server_work_ns: m.server_work_ns,
                    });
                    received += 1;
                }
                Ok(got)
            })
            .map_err(io_err("spawn receiver thread"))?
    };

    let mut out = Vec::with_capacity(MAX_MESSAGE);
    let mut max_lag = 0u64;
    let mut send_result = Ok(());
    for (id, &(at, compute_ns)) in schedule.iter().enumerate() {
        let due = base + at;
        if monotonic_ns() < due {
            sleep_until_ns(due);
        }
        let now = monotonic_ns();
        max_lag = max_lag.max(now.saturating_sub(due));
        let m = Message {
            kind: Kind::Request,
            len: cfg.request_bytes,
            reply_len: cfg.reply_bytes,
            id: id as u64,
            compute_ns,
            send_ns: now,
            server_cpu_ns: 0,
            server_work_ns: 0,
        };
        m.encode(&mut out);
        let r = match &conn {
            Conn::Udp(s) => s.send(&out).map(|_| ()),
            Conn::Tcp(s) => {
                use std::io::Write;
                (&*s).write_all(&out)
            }
        };
        // UDP: a refused or full send is a lost request, like the network dropping it.
        if let Err(e) = r {
            if cfg.protocol == Protocol::Tcp {
                send_result = Err(io_err("tcp send")(e));
                failed.store(true, Ordering::Relaxed);
                break;
            }
        }
    }
    sender_done_at.store(monotonic_ns(), Ordering::Release);
    let got = receiver.join().map_err(|_| LoadgenError::Invalid("the receiver thread panicked".into()))??;
    send_result?;
    if let Conn::Tcp(s) = &conn {
        let _ = s.shutdown(std::net::Shutdown::Both);
    }
    let samples: Vec<Sample> = got.into_iter().flatten().collect();
    Ok(ClientRun {
        lost: cfg.count - samples.len(),
        samples,
        sent: cfg.count,
        max_send_lag_s: max_lag as f64 * 1e-9,
        elapsed_s: monotonic_ns().saturating_sub(base) as f64 * 1e-9,
    })
}

/// Sends a stop message to a server (both protocols).
pub fn stop_server(server: SocketAddr, protocol: Protocol, netns_name: Option<&str>) -> Result<()> {
    let cfg = ClientConfig {
        server,
        protocol,
        interarrival: Dist::Constant(Duration::ZERO),
        compute: Dist::Constant(Duration::ZERO),
        request_bytes: 0,
        reply_bytes: 0,
        count: 1,
        seed: 0,
        drain: Duration::ZERO,
        fifo_priority: None,
        netns: netns_name.map(str::to_string),
        cpus: None,
    };
    std::thread::spawn(move || -> Result<()> {
        if let Some(ns) = &cfg.netns {
            netns::enter(ns)?;
        }
        let mut out = Vec::new();
        Message { kind: Kind::Stop, len: 0, reply_len: 0, id: 0, compute_ns: 0, send_ns: 0, server_cpu_ns: 0, server_work_ns: 0 }.encode(&mut out);
        match connect(&cfg)? {
            Conn::Udp(s) => s.send(&out).map(|_| ()).map_err(io_err("udp send stop")),
            Conn::Tcp(s) => {
                use std::io::Write;
                (&s).write_all(&out).map_err(io_err("tcp send stop"))
            }
        }
    })
    .join()
    .map_err(|_| LoadgenError::Invalid("stop thread panicked".into()))?
}
