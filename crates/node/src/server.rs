//! `rtslice daemon`: the service on a unix socket (mode 0600: root only) and optionally on TCP
//! with a bearer token, over TLS when given a certificate; reaps the processes it launched and
//! notices when they exit.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::api::router;
use crate::http::App;
use crate::error::{NodeError, Result};
use crate::service::{Service, ServiceOptions};

pub const DEFAULT_SOCKET: &str = "/run/rtslice/api.sock";

#[derive(Clone, Debug)]
pub struct DaemonOptions {
    pub service: ServiceOptions,
    pub socket: PathBuf,
    /// TCP address; needs `token_file`.
    pub listen: Option<SocketAddr>,
    pub token_file: Option<PathBuf>,
    /// HTTPS on `listen` with this certificate and key; `None`: plain HTTP.
    pub tls: Option<crate::tls::TlsFiles>,
    /// Stop every workload and undo the node when the daemon exits (CI, tests); by default the
    /// workloads keep running and the next daemon re-adopts them.
    pub reset_on_exit: bool,
    /// Metrics on the API (`GET /metrics`), the report socket, the live dashboard's data; `None`:
    /// none of them.
    pub telemetry: Option<crate::telemetry::TelemetryOptions>,
}

/// Reads the bearer token: the file must be private (no group/other permissions) and non-empty.
pub fn read_token(path: &Path) -> Result<String> {
    let meta = std::fs::metadata(path).map_err(|e| NodeError::Invalid(format!("token file {}: {e}", path.display())))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(NodeError::Invalid(format!(
            "token file {} is readable by others (mode {:o}); chmod 600 it",
            path.display(),
            meta.permissions().mode() & 0o777
        )));
    }
    let token = std::fs::read_to_string(path).map_err(|e| NodeError::Invalid(format!("token file {}: {e}", path.display())))?;
    let token = token.trim().to_string();
    if token.len() < 16 {
        return Err(NodeError::Invalid(format!("token file {}: the token must be at least 16 characters", path.display())));
    }
    Ok(token)
}

/// Binds the unix socket: refuses when another daemon answers on it, replaces a stale one, 0600.
async fn bind_socket(path: &Path) -> Result<tokio::net::UnixListener> {
    if path.exists() {
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return Err(NodeError::Conflict(format!("another rtslice daemon listens on {}", path.display())));
        }
        std::fs::remove_file(path).map_err(|e| NodeError::State(format!("cannot remove the stale socket {}: {e}", path.display())))?;
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| NodeError::State(format!("cannot create {}: {e}", dir.display())))?;
    }
    // Bound under a temporary name, made 0600, then renamed into place: the socket appears at its
    // path only with its final mode (a client, or a test, that waits for the path never sees the
    // umask's mode — the kernel matrix caught 0755 in that window once).
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "api.sock".into());
    let tmp = path.with_file_name(format!(".{name}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let l = tokio::net::UnixListener::bind(&tmp).map_err(|e| NodeError::State(format!("cannot bind {}: {e}", tmp.display())))?;
    let placed = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot chmod {}: {e}", tmp.display()))
        .and_then(|()| std::fs::rename(&tmp, path).map_err(|e| format!("cannot move {} to {}: {e}", tmp.display(), path.display())));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(NodeError::State(e));
    }
    Ok(l)
}

/// Runs the daemon until SIGTERM or SIGINT.
pub async fn run(opts: DaemonOptions) -> Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| NodeError::State(format!("cannot watch SIGTERM: {e}")))?;
    run_until(opts, async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    })
    .await
}

/// Runs the daemon until `stop` completes (tests; `run` stops on signals).
pub async fn run_until(opts: DaemonOptions, stop: impl std::future::Future<Output = ()>) -> Result<()> {
    // The daemon is part of "the OS" the node's housekeeping CPUs are for, from before it answers
    // its first request: its API, telemetry and agent threads ran on the reserved CPUs too, where
    // (no kernel preemption) each system call holds the CPU under the workloads placed there.
    let housekeeping = &opts.service.node.housekeeping;
    if !housekeeping.is_empty() {
        let cpus = rtslice_host::CpuList::from_cpus(housekeeping.iter().copied());
        match rtslice_sys::sched::confine_process(housekeeping) {
            Ok(()) => tracing::info!(cpus = %cpus, "the daemon's threads run on the housekeeping CPUs"),
            Err(e) => tracing::warn!(cpus = %cpus, "cannot keep the daemon on the housekeeping CPUs: {e}; it runs wherever the kernel puts it"),
        }
    }
    let token = match (&opts.listen, &opts.token_file) {
        (Some(_), Some(f)) => Some(Arc::new(read_token(f)?)),
        (Some(addr), None) => {
            return Err(NodeError::Invalid(format!("--listen {addr} needs --token-file: TCP requests must carry a bearer token")))
        }
        (None, _) => None,
    };
    // Checked before anything is bound or opened: a bad certificate leaves the node untouched.
    let tls = match (&opts.listen, &opts.tls) {
        (Some(_), Some(files)) => Some(crate::tls::server_config(files)?),
        (None, Some(_)) => return Err(NodeError::Invalid("--tls-cert/--tls-key secure the TCP listener: give --listen ADDR too".into())),
        (_, None) => None,
    };
    let unix = bind_socket(&opts.socket).await?;
    let tcp = match opts.listen {
        Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.map_err(|e| NodeError::State(format!("cannot listen on {addr}: {e}")))?),
        None => None,
    };
    let mut so = opts.service.clone();
    let telemetry = match &opts.telemetry {
        Some(t) => {
            let t = Arc::new(crate::telemetry::Telemetry::start(t, &opts.socket)?);
            so.launch_env.push((rtslice_metrics::REPORT_SOCKET_ENV.into(), t.report_socket().display().to_string()));
            Some(t)
        }
        None => None,
    };
    let metrics_tcp = match opts.telemetry.as_ref().and_then(|t| t.metrics_listen) {
        Some(addr) => {
            Some(tokio::net::TcpListener::bind(addr).await.map_err(|e| NodeError::State(format!("cannot serve metrics on {addr}: {e}")))?)
        }
        None => None,
    };
    let mut service = tokio::task::spawn_blocking(move || Service::open(so)).await.map_err(|e| NodeError::State(e.to_string()))??;
    // The thread-rule agent, folded into the daemon: vBS stacks create and name their real-time
    // threads after start, and SCHED_DEADLINE demand pools follow demand (rtslice-agent).
    let agent_thread = crate::agent_thread::AgentThread::start(&mut service)?;
    tracing::info!(socket = %opts.socket.display(), mechanism = %service.mechanism(), "rtslice daemon ready");
    if let Some(t) = &telemetry {
        t.sync(&service);
    }
    let app = Arc::new(App { service: Mutex::new(Some(service)), telemetry: telemetry.clone() });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let shutdown = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let unix_srv = tokio::spawn(axum::serve(unix, router(app.clone(), None)).with_graceful_shutdown(shutdown(stop_rx.clone())).into_future());
    let tcp_srv = match (tcp, tls) {
        (Some(l), Some(config)) => {
            let l = crate::tls::TlsListener::new(l, config).map_err(|e| NodeError::State(format!("TLS listener: {e}")))?;
            let app = router(app.clone(), token.clone()).layer(axum::middleware::map_response(crate::tls::secure_cookies));
            Some(tokio::spawn(axum::serve(l, app).with_graceful_shutdown(shutdown(stop_rx.clone())).into_future()))
        }
        (Some(l), None) => {
            Some(tokio::spawn(axum::serve(l, router(app.clone(), token.clone())).with_graceful_shutdown(shutdown(stop_rx.clone())).into_future()))
        }
        (None, _) => None,
    };
    let metrics_srv = metrics_tcp.zip(telemetry.clone()).map(|(l, t)| {
        let app = rtslice_metrics::router(t.registry.clone());
        tokio::spawn(axum::serve(l, app).with_graceful_shutdown(shutdown(stop_rx.clone())).into_future())
    });
    // The live views' history: one reading every interval (reading BPF maps and /proc blocks).
    let sampler = telemetry.clone().map(|t| {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(t.sample_every());
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let t = t.clone();
                let _ = tokio::task::spawn_blocking(move || t.sample_now()).await;
            }
        })
    });
    let watcher = {
        let app = app.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let app = app.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    // Exited launched workloads are reaped by pid in check_exits, which keeps their
                    // statuses. Nothing here waits for any child: that took the exit of a child
                    // someone else in this process was waiting for (a `curl` run beside an
                    // in-process server failed with ECHILD), and the workloads' own statuses from
                    // check_exits.
                    let mut guard = app.service.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(s) = guard.as_mut() {
                        s.check_exits();
                        if let Some(t) = &app.telemetry {
                            t.sync(s);
                            // The closed loop acts on the sampler's readings (each at most once).
                            if let Some(reading) = t.latest() {
                                s.adapt(&reading);
                            }
                        }
                    }
                })
                .await;
            }
        })
    };
    // Threads a started container creates later get their rule within this interval.
    let rescan = {
        let app = app.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let app = app.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    if let Some(s) = app.service.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
                        s.containers.rescan();
                        s.retry_unreturned();
                    }
                })
                .await;
            }
        })
    };
    stop.await;
    tracing::info!("stopping");
    watcher.abort();
    if let Some(s) = sampler {
        s.abort();
    }
    rescan.abort();
    let _ = stop_tx.send(true);
    let _ = unix_srv.await;
    if let Some(m) = metrics_srv {
        let _ = m.await;
    }
    if let Some(t) = tcp_srv {
        let _ = t.await;
    }
    let _ = std::fs::remove_file(&opts.socket);
    // Stopping waits for the agent's current rescan.
    let _ = tokio::task::spawn_blocking(move || drop(agent_thread)).await;
    let svc = app.service.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let (true, Some(svc)) = (opts.reset_on_exit, svc) {
        tokio::task::spawn_blocking(move || svc.reset()).await.map_err(|e| NodeError::State(e.to_string()))??;
    }
    Ok(())
}

