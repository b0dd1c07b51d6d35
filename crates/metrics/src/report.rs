//! The workload report channel: a unix datagram socket the node owns, whose path the workload finds
//! in `RTSLICE_REPORT_SOCKET`. Each datagram is one JSON object of cumulative counters (format in
//! docs/metrics.md). The sender is identified by the kernel (SO_PASSCRED), not by anything in the
//! message, and attributed to the workload whose cgroup holds it: a process cannot report for
//! another workload.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::collect::NodeMetrics;
use crate::sli::MAX_REPORT_BYTES;
use crate::MetricsError;

/// The environment variable that gives a workload the report socket's path.
pub const REPORT_SOCKET_ENV: &str = "RTSLICE_REPORT_SOCKET";

/// The bound socket and the thread that receives on it. Dropping it stops the thread and removes
/// the socket file.
pub struct ReportChannel {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ReportChannel {
    /// Binds `path` (a stale socket file left there is replaced) and feeds what arrives into
    /// `metrics`. The socket is writable by every user: attribution is by the sender's cgroup, so a
    /// process outside every workload is counted as unknown and ignored.
    pub fn bind(path: &Path, metrics: NodeMetrics) -> Result<ReportChannel, MetricsError> {
        let err = |source: std::io::Error| MetricsError::Socket { path: path.to_path_buf(), source };
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            use std::os::unix::fs::FileTypeExt;
            if !meta.file_type().is_socket() {
                return Err(err(std::io::Error::new(std::io::ErrorKind::AlreadyExists, "exists and is not a socket; not replacing it")));
            }
            std::fs::remove_file(path).map_err(err)?;
        }
        let socket = UnixDatagram::bind(path).map_err(err)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).map_err(err)?;
        rtslice_sys::net::pass_credentials(&socket).map_err(|e| err(e.into()))?;
        // Wake up now and then to notice `stop`.
        socket.set_read_timeout(Some(Duration::from_millis(200))).map_err(err)?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("rtslice-reports".into())
                .spawn(move || receive_loop(socket, metrics, stop))
                .map_err(err)?
        };
        Ok(ReportChannel { path: path.to_path_buf(), stop, thread: Some(thread) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn receive_loop(socket: UnixDatagram, metrics: NodeMetrics, stop: Arc<AtomicBool>) {
    let mut buf = vec![0u8; MAX_REPORT_BYTES];
    while !stop.load(Ordering::Relaxed) {
        match rtslice_sys::net::recv_with_sender(&socket, &mut buf) {
            Ok((n, pid)) => metrics.record_report(pid, &buf[..n]),
            // Timeouts (EAGAIN) and interrupted calls: look at `stop` and go on.
            Err(_) => continue,
        }
    }
}

impl Drop for ReportChannel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}
