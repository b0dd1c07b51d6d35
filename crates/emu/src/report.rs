//! The emulator's side of the workload report channel (docs/metrics.md): when the node gives it a
//! socket in `RTSLICE_REPORT_SOCKET`, the emulator sends its cumulative SLI counters there once a
//! second and once at the end. Sending never blocks or fails the run: a node that is gone or busy
//! only misses a report (the next one carries the totals again).

use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;

use serde::Serialize;

/// The environment variable naming the node's report socket.
pub const REPORT_SOCKET_ENV: &str = "RTSLICE_REPORT_SOCKET";

/// Version 1 of the report: counters since this process started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SliCounters {
    pub deadline_misses: u64,
    pub ttis: u64,
    pub throughput_bits: u64,
    pub nacks: u64,
}

pub struct Reporter {
    socket: UnixDatagram,
    path: PathBuf,
}

impl Reporter {
    /// A reporter when `RTSLICE_REPORT_SOCKET` is set (and not empty); a warning text when it is
    /// set but unusable.
    pub fn from_env() -> Result<Option<Reporter>, String> {
        let Some(path) = std::env::var_os(REPORT_SOCKET_ENV).filter(|p| !p.is_empty()) else { return Ok(None) };
        let socket = UnixDatagram::unbound().map_err(|e| format!("report channel: cannot create a unix datagram socket: {e}"))?;
        // Never let the TTI pipeline's collector wait on a slow node.
        socket.set_nonblocking(true).map_err(|e| format!("report channel: {e}"))?;
        Ok(Some(Reporter { socket, path: PathBuf::from(path) }))
    }

    /// Sends one report; false when it could not be delivered (no one listening, buffer full).
    pub fn send(&self, c: &SliCounters) -> bool {
        #[derive(Serialize)]
        struct Wire<'a> {
            v: u32,
            #[serde(flatten)]
            c: &'a SliCounters,
        }
        let Ok(bytes) = serde_json::to_vec(&Wire { v: 1, c }) else { return false };
        self.socket.send_to(&bytes, &self.path).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_version_1_json_to_the_socket() {
        let path = std::env::temp_dir().join(format!("rtslice-emu-report-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let rx = UnixDatagram::bind(&path).unwrap();
        let r = Reporter { socket: UnixDatagram::unbound().unwrap(), path: path.clone() };
        assert!(r.send(&SliCounters { deadline_misses: 2, ttis: 10, throughput_bits: 99, nacks: 1 }));
        let mut buf = [0u8; 512];
        let n = rx.recv(&mut buf).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&buf[..n]).unwrap();
        assert_eq!(v, serde_json::json!({"v": 1, "deadline_misses": 2, "ttis": 10, "throughput_bits": 99, "nacks": 1}));
        drop(rx);
        let _ = std::fs::remove_file(&path);
        assert!(!r.send(&SliCounters::default()), "nobody listening: not delivered, and no error");
    }
}
