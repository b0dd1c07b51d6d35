//! The kernel's process connector (CONFIG_PROC_EVENTS): a netlink socket that reports fork, exec and
//! comm changes of every task. Layouts follow <linux/netlink.h>, <linux/connector.h> and
//! <linux/cn_proc.h>; needs CAP_NET_ADMIN. The socket calls go through rustix; parsing is pure.

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::net::netlink::SocketAddrNetlink;
use rustix::net::{socket_with, AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

const CN_IDX_PROC: u32 = 1;
const CN_VAL_PROC: u32 = 1;
const PROC_CN_MCAST_LISTEN: u32 = 1;
const NLMSG_DONE: u16 = 3;

const PROC_EVENT_FORK: u32 = 0x0000_0001;
const PROC_EVENT_EXEC: u32 = 0x0000_0002;
const PROC_EVENT_COMM: u32 = 0x0000_0200;

const NLMSG_HDR: usize = 16;
const CN_MSG_HDR: usize = 20;
/// what(4) + cpu(4) + timestamp_ns(8)
const EVENT_HDR: usize = 16;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A new task: `child_pid` is its tid; a thread when `child_pid != child_tgid`.
    Fork { parent_tgid: i32, child_pid: i32, child_tgid: i32, ts_ns: u64 },
    Exec { pid: i32, tgid: i32, ts_ns: u64 },
    Comm { pid: i32, tgid: i32, comm: String, ts_ns: u64 },
}

pub struct ProcConnector {
    fd: OwnedFd,
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    let s: [u8; 4] = b.get(off..off + 4)?.try_into().ok()?;
    Some(u32::from_ne_bytes(s))
}

fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    let s: [u8; 8] = b.get(off..off + 8)?.try_into().ok()?;
    Some(u64::from_ne_bytes(s))
}

impl ProcConnector {
    /// Opens the socket, joins the proc multicast group and asks the kernel to start reporting.
    pub fn subscribe() -> io::Result<ProcConnector> {
        let fd = socket_with(
            AddressFamily::NETLINK,
            SocketType::DGRAM,
            SocketFlags::CLOEXEC,
            Some(rustix::net::netlink::CONNECTOR),
        )?;
        // Port id 0: the kernel assigns a unique one.
        rustix::net::bind(&fd, &SocketAddrNetlink::new(0, CN_IDX_PROC))?;
        // A large receive buffer: thread storms at start-up must not overflow it. Best effort: without
        // CAP_NET_ADMIN the default size stays and overruns are caught by the agent's rescans.
        let _ = rustix::net::sockopt::set_socket_recv_buffer_size_force(&fd, 4 << 20);
        let c = ProcConnector { fd };
        c.send_op(PROC_CN_MCAST_LISTEN)?;
        Ok(c)
    }

    fn send_op(&self, op: u32) -> io::Result<()> {
        let total = NLMSG_HDR + CN_MSG_HDR + 4;
        let mut buf = vec![0u8; total];
        buf[0..4].copy_from_slice(&(total as u32).to_ne_bytes());
        buf[4..6].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
        // nlmsg_flags 0, seq 0, pid 0 (kernel fills the sender)
        let cn = NLMSG_HDR;
        buf[cn..cn + 4].copy_from_slice(&CN_IDX_PROC.to_ne_bytes());
        buf[cn + 4..cn + 8].copy_from_slice(&CN_VAL_PROC.to_ne_bytes());
        buf[cn + 16..cn + 18].copy_from_slice(&4u16.to_ne_bytes());
        buf[cn + CN_MSG_HDR..].copy_from_slice(&op.to_ne_bytes());
        rustix::net::send(&self.fd, &buf, SendFlags::empty())?;
        Ok(())
    }

    /// Waits up to `timeout` for events; returns those that interest the caller (maybe none).
    /// ENOBUFS means the kernel dropped events (the socket overran): rescan what you watch.
    pub fn recv(&self, timeout: Duration) -> io::Result<Vec<Event>> {
        let mut pfd = [PollFd::new(&self.fd, PollFlags::IN)];
        let ts = Timespec { tv_sec: timeout.as_secs() as _, tv_nsec: timeout.subsec_nanos() as _ };
        if rustix::event::poll(&mut pfd, Some(&ts))? == 0 {
            return Ok(Vec::new());
        }
        let mut events = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // MSG_DONTWAIT drains what is queued.
            match rustix::net::recv(&self.fd, &mut buf[..], RecvFlags::DONTWAIT) {
                Ok((_, n)) => parse(&buf[..n.min(buf.len())], &mut events),
                Err(e) if e == rustix::io::Errno::AGAIN => break,
                Err(e) if events.is_empty() => return Err(e.into()),
                Err(_) => break,
            }
        }
        Ok(events)
    }
}

/// Now on the clock of the events' `ts_ns` (CLOCK_MONOTONIC, the kernel's ktime), for measuring how
/// long after an event something happened.
pub fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Parses one datagram (possibly several netlink messages).
pub fn parse(mut b: &[u8], out: &mut Vec<Event>) {
    while b.len() >= NLMSG_HDR {
        let len = u32_at(b, 0).unwrap_or(0) as usize;
        if len < NLMSG_HDR || len > b.len() {
            return;
        }
        let msg = &b[NLMSG_HDR..len];
        if let Some(ev) = parse_event(msg) {
            out.push(ev);
        }
        let aligned = (len + 3) & !3;
        b = &b[aligned.min(b.len())..];
    }
}

fn parse_event(cn: &[u8]) -> Option<Event> {
    if u32_at(cn, 0)? != CN_IDX_PROC || u32_at(cn, 4)? != CN_VAL_PROC {
        return None;
    }
    let ev = cn.get(CN_MSG_HDR..)?;
    let what = u32_at(ev, 0)?;
    let ts_ns = u64_at(ev, 8)?;
    let d = EVENT_HDR;
    match what {
        PROC_EVENT_FORK => Some(Event::Fork {
            parent_tgid: u32_at(ev, d + 4)? as i32,
            child_pid: u32_at(ev, d + 8)? as i32,
            child_tgid: u32_at(ev, d + 12)? as i32,
            ts_ns,
        }),
        PROC_EVENT_EXEC => Some(Event::Exec { pid: u32_at(ev, d)? as i32, tgid: u32_at(ev, d + 4)? as i32, ts_ns }),
        PROC_EVENT_COMM => {
            let raw = ev.get(d + 8..d + 24)?;
            let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
            Some(Event::Comm {
                pid: u32_at(ev, d)? as i32,
                tgid: u32_at(ev, d + 4)? as i32,
                comm: String::from_utf8_lossy(&raw[..end]).into_owned(),
                ts_ns,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datagram(what: u32, data: &[u32], comm: Option<&str>) -> Vec<u8> {
        let mut ev = Vec::new();
        ev.extend(what.to_ne_bytes());
        ev.extend(0u32.to_ne_bytes());
        ev.extend(123u64.to_ne_bytes());
        for d in data {
            ev.extend(d.to_ne_bytes());
        }
        if let Some(c) = comm {
            let mut b = [0u8; 16];
            b[..c.len()].copy_from_slice(c.as_bytes());
            ev.extend(b);
        }
        let mut cn = Vec::new();
        cn.extend(CN_IDX_PROC.to_ne_bytes());
        cn.extend(CN_VAL_PROC.to_ne_bytes());
        cn.extend([0u8; 8]);
        cn.extend((ev.len() as u16).to_ne_bytes());
        cn.extend(0u16.to_ne_bytes());
        cn.extend(ev);
        let mut nl = Vec::new();
        nl.extend(((NLMSG_HDR + cn.len()) as u32).to_ne_bytes());
        nl.extend(NLMSG_DONE.to_ne_bytes());
        nl.extend([0u8; 10]);
        nl.extend(cn);
        nl
    }

    #[test]
    fn parses_fork_exec_comm() {
        let mut out = Vec::new();
        parse(&datagram(PROC_EVENT_FORK, &[10, 10, 11, 10], None), &mut out);
        parse(&datagram(PROC_EVENT_EXEC, &[12, 12], None), &mut out);
        parse(&datagram(PROC_EVENT_COMM, &[11, 10], Some("ru-thread")), &mut out);
        parse(&datagram(0x8000_0000, &[1, 1, 0], None), &mut out); // exit: ignored
        assert_eq!(
            out,
            vec![
                Event::Fork { parent_tgid: 10, child_pid: 11, child_tgid: 10, ts_ns: 123 },
                Event::Exec { pid: 12, tgid: 12, ts_ns: 123 },
                Event::Comm { pid: 11, tgid: 10, comm: "ru-thread".into(), ts_ns: 123 },
            ]
        );
    }

    #[test]
    fn the_kernel_reports_a_new_thread() {
        rtslice_testkit::root_or_skip!();
        let c = match ProcConnector::subscribe() {
            Ok(c) => c,
            Err(e) => {
                rtslice_testkit::skip::skip(rtslice_testkit::skip::PROC_CONNECTOR, format!("no process connector here ({e})"));
                return;
            }
        };
        let me = std::process::id() as i32;
        let t = std::thread::Builder::new().name("cn-probe".into()).spawn(crate::thread::gettid).unwrap();
        let tid = t.join().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        let (mut fork, mut comm) = (false, false);
        while std::time::Instant::now() < deadline && !(fork && comm) {
            for e in c.recv(Duration::from_millis(100)).unwrap() {
                match e {
                    Event::Fork { child_pid, child_tgid, .. } if child_pid == tid && child_tgid == me => fork = true,
                    Event::Comm { pid, comm: name, .. } if pid == tid && name == "cn-probe" => comm = true,
                    _ => {}
                }
            }
        }
        assert!(fork && comm, "fork {fork}, comm {comm}");
    }
}
