//! The exposition: the OpenMetrics text of a registry, and a tiny axum router serving it.

use std::sync::Arc;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::registry::Registry;

/// The content type of [`encode`]'s output (OpenMetrics text 1.0, which Prometheus negotiates).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The registry's metrics in OpenMetrics text format (collectors read their sources now).
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail; a collector's fmt::Error would leave a partial text,
    // which Prometheus refuses as a whole (no EOF marker) rather than storing half a scrape.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

/// `GET /metrics` over `registry`, for the node service to nest or merge into its API router, or
/// to serve alone. Encoding reads /proc, cgroup files and BPF maps: it runs on a blocking thread so
/// it never stalls the async runtime.
pub fn router(registry: Arc<Registry>) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let registry = registry.clone();
            async move {
                match tokio::task::spawn_blocking(move || encode(&registry)).await {
                    Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
                    Err(e) => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, format!("collecting the metrics failed: {e}\n")).into_response(),
                }
            }
        }),
    )
}

/// Serves [`router`] on `listen` (plain HTTP) until `stop` is set; blocks the calling thread. For
/// `rtslice metrics serve`; the node service mounts [`router`] on its own listener instead.
pub fn serve(listen: std::net::SocketAddr, registry: Arc<Registry>, stop: Arc<std::sync::atomic::AtomicBool>) -> Result<(), crate::MetricsError> {
    let err = |source: std::io::Error| crate::MetricsError::Listen { addr: listen, source };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(err)?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen).await.map_err(err)?;
        let shutdown = async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        };
        axum::serve(listener, router(registry)).with_graceful_shutdown(shutdown).await.map_err(err)
    })
}
