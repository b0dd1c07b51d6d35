//! The server: one thread that takes requests in arrival order, does each one's compute amount of real
//! CPU work and answers. One thread on purpose: the socket's receive queue is then exactly the FIFO
//! queue of study B's M/M/1 server, and the reservation applies to the one thread that does the work.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::proto::{Kind, Message, HEADER, MAX_MESSAGE};
use crate::work::Spinner;
use crate::{io_err, LoadgenError, Protocol, Result};

/// The name the serving thread carries (`comm`), so a spec's thread rule can match it.
pub const THREAD_NAME: &str = "lg-server";

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub bind: SocketAddr,
    pub protocol: Protocol,
    pub spinner: Spinner,
    /// Stop after this many requests (None: until a stop message or the stop flag).
    pub max_requests: Option<u64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ServerStats {
    pub requests: u64,
    /// Work asked for by the requests.
    pub work_ns: u64,
    /// CPU time the serving thread used for it (CLOCK_THREAD_CPUTIME_ID around each spin): the
    /// calibration is right when this matches `work_ns`.
    pub cpu_ns: u64,
}

use crate::work::thread_cpu_ns;

/// Does the request's work and books it.
fn work(c: &ServerConfig, req: &Message, stats: &mut ServerStats) {
    let t = thread_cpu_ns();
    c.spinner.spin(Duration::from_nanos(req.compute_ns));
    stats.cpu_ns += thread_cpu_ns() - t;
    stats.work_ns += req.compute_ns;
}

const POLL: Duration = Duration::from_millis(100);

/// Names the calling thread [`THREAD_NAME`] (thread rules match on it).
pub fn name_this_thread() {
    // THREAD_NAME is a short constant without NUL: this cannot fail in a way worth reporting.
    let _ = rtslice_sys::thread::set_name(THREAD_NAME);
}

/// A bound server, ready to [`Server::serve`]. Binding first lets the caller learn the port.
pub enum Server {
    Udp(UdpSocket, ServerConfig),
    Tcp(TcpListener, ServerConfig),
}

impl Server {
    pub fn bind(config: ServerConfig) -> Result<Server> {
        let what = format!("cannot bind {} {}", config.protocol, config.bind);
        Ok(match config.protocol {
            Protocol::Udp => {
                let s = UdpSocket::bind(config.bind).map_err(io_err(what))?;
                s.set_read_timeout(Some(POLL)).map_err(io_err("set_read_timeout"))?;
                Server::Udp(s, config)
            }
            Protocol::Tcp => {
                let l = TcpListener::bind(config.bind).map_err(io_err(what))?;
                l.set_nonblocking(true).map_err(io_err("set_nonblocking"))?;
                Server::Tcp(l, config)
            }
        })
    }

    pub fn local_addr(&self) -> Result<SocketAddr> {
        match self {
            Server::Udp(s, _) => s.local_addr(),
            Server::Tcp(l, _) => l.local_addr(),
        }
        .map_err(io_err("local_addr"))
    }

    /// Serves on the calling thread until a stop message, `stop`, or `max_requests`.
    pub fn serve(self, stop: &AtomicBool) -> Result<ServerStats> {
        match self {
            Server::Udp(s, c) => serve_udp(s, &c, stop),
            Server::Tcp(l, c) => serve_tcp(l, &c, stop),
        }
    }
}

fn reply_for(req: &Message, stats: &ServerStats) -> Message {
    Message {
        kind: Kind::Reply,
        len: req.reply_len.max(HEADER as u32),
        server_cpu_ns: thread_cpu_ns(),
        server_work_ns: stats.cpu_ns,
        ..*req
    }
}

fn done(stats: &ServerStats, c: &ServerConfig, stop: &AtomicBool) -> bool {
    stop.load(Ordering::Relaxed) || c.max_requests.is_some_and(|m| stats.requests >= m)
}

fn serve_udp(sock: UdpSocket, c: &ServerConfig, stop: &AtomicBool) -> Result<ServerStats> {
    let mut stats = ServerStats::default();
    let mut buf = vec![0u8; MAX_MESSAGE + 1];
    let mut out = Vec::with_capacity(MAX_MESSAGE);
    while !done(&stats, c, stop) {
        let (n, peer) = match sock.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted) => continue,
            Err(e) => return Err(io_err("udp recv")(e)),
        };
        // A stray datagram must not stop the server: skip what does not parse.
        let Ok(req) = Message::decode(&buf[..n]) else { continue };
        match req.kind {
            Kind::Stop => break,
            Kind::Reply => continue,
            Kind::Request => {}
        }
        work(c, &req, &mut stats);
        reply_for(&req, &stats).encode(&mut out);
        // A full socket buffer loses the reply like a network would; the client counts it lost.
        let _ = sock.send_to(&out, peer);
        stats.requests += 1;
    }
    Ok(stats)
}

/// Fills `buf` completely; Ok(false) on a clean EOF before the first byte or when stopped.
fn read_full(s: &mut TcpStream, buf: &mut [u8], stop: &AtomicBool, idle_returns: bool) -> Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(LoadgenError::Protocol("connection closed inside a message".into())),
            Ok(n) => got += n,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted) => {
                if stop.load(Ordering::Relaxed) || (idle_returns && got == 0) {
                    return Ok(false);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(false),
            Err(e) => return Err(io_err("tcp read")(e)),
        }
    }
    Ok(true)
}

/// Reads one framed message into `buf`; None at EOF or stop.
pub(crate) fn read_message(s: &mut TcpStream, buf: &mut Vec<u8>, stop: &AtomicBool) -> Result<Option<Message>> {
    read_framed(s, buf, stop, false)
}

/// As [`read_message`], but also None when the read timeout passes with nothing received (the client's
/// receiver uses it to notice its drain deadline).
pub(crate) fn read_message_timeout(s: &mut TcpStream, buf: &mut Vec<u8>, stop: &AtomicBool) -> Result<Option<Message>> {
    read_framed(s, buf, stop, true)
}

fn read_framed(s: &mut TcpStream, buf: &mut Vec<u8>, stop: &AtomicBool, idle_returns: bool) -> Result<Option<Message>> {
    buf.resize(HEADER, 0);
    if !read_full(s, &mut buf[..HEADER], stop, idle_returns)? {
        return Ok(None);
    }
    let m = Message::decode(&buf[..HEADER])?;
    let len = m.len as usize;
    buf.resize(len, 0);
    if len > HEADER && !read_full(s, &mut buf[HEADER..len], stop, false)? {
        return Ok(None);
    }
    Ok(Some(m))
}

fn serve_tcp(listener: TcpListener, c: &ServerConfig, stop: &AtomicBool) -> Result<ServerStats> {
    let mut stats = ServerStats::default();
    let mut buf = Vec::with_capacity(MAX_MESSAGE);
    let mut out = Vec::with_capacity(MAX_MESSAGE);
    'accept: while !done(&stats, c, stop) {
        let mut stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(e) => return Err(io_err("tcp accept")(e)),
        };
        stream.set_nonblocking(false).map_err(io_err("set_nonblocking"))?;
        stream.set_nodelay(true).map_err(io_err("set_nodelay"))?;
        stream.set_read_timeout(Some(POLL)).map_err(io_err("set_read_timeout"))?;
        // One client at a time, like one DistWalk connection: requests queue in the socket.
        while !done(&stats, c, stop) {
            let Some(req) = read_message(&mut stream, &mut buf, stop)? else { continue 'accept };
            match req.kind {
                Kind::Stop => break 'accept,
                Kind::Reply => continue,
                Kind::Request => {}
            }
            work(c, &req, &mut stats);
            reply_for(&req, &stats).encode(&mut out);
            if stream.write_all(&out).is_err() {
                continue 'accept;
            }
            stats.requests += 1;
        }
    }
    Ok(stats)
}

/// What `rtslice loadgen server` does: enter the namespace, name the thread, calibrate, serve.
#[derive(Debug, Clone)]
pub struct ServerMain {
    pub bind: SocketAddr,
    pub protocol: Protocol,
    pub netns: Option<String>,
    pub max_requests: Option<u64>,
}

/// Runs a server on the calling thread (the process's main thread in `rtslice loadgen server`, so the
/// thread a reservation is given to is the one doing the work). Logs its calibration to stderr.
pub fn server_main(m: &ServerMain, stop: &AtomicBool) -> Result<ServerStats> {
    if let Some(ns) = &m.netns {
        crate::netns::enter(ns)?;
    }
    name_this_thread();
    let spinner = Spinner::calibrate(Duration::from_millis(100));
    let server = Server::bind(ServerConfig { bind: m.bind, protocol: m.protocol, spinner, max_requests: m.max_requests })?;
    eprintln!(
        "rtslice loadgen server: {} {} (pid {}), loop calibrated at {:.3} iterations/ns",
        m.protocol,
        server.local_addr()?,
        std::process::id(),
        spinner.iters_per_ns
    );
    server.serve(stop)
}

/// Parses the server's arguments (`--bind ADDR --protocol udp|tcp --netns NAME --max-requests N`),
/// shared by the `rtslice loadgen server` command and the crate's own test binary.
pub fn parse_server_args(args: &[String]) -> Result<ServerMain> {
    let mut m = ServerMain { bind: "127.0.0.1:7013".parse().unwrap(), protocol: Protocol::Udp, netns: None, max_requests: None };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next().cloned().ok_or_else(|| LoadgenError::Invalid(format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--bind" => {
                let v = value()?;
                m.bind = v.parse().map_err(|_| LoadgenError::Invalid(format!("--bind `{v}` is not an address:port")))?;
            }
            "--protocol" => m.protocol = value()?.parse()?,
            "--netns" => m.netns = Some(value()?),
            "--max-requests" => {
                let v = value()?;
                m.max_requests = Some(v.parse().map_err(|_| LoadgenError::Invalid(format!("--max-requests `{v}` is not a count")))?);
            }
            other => return Err(LoadgenError::Invalid(format!("unknown server argument `{other}`"))),
        }
    }
    Ok(m)
}
