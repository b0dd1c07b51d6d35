//! What the node's HTTP handlers share, apart from the domain: the service behind its lock, JSON
//! responses and errors, the body limit, and running a handler's work on the service off the
//! async threads.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::error::NodeError;
use crate::service::Service;

/// Largest request body accepted (a spec of many workloads is a few KiB); larger gets 413.
pub const BODY_LIMIT: usize = 256 * 1024;

/// What every handler shares: the one writer behind a lock (requests are serialized).
pub struct App {
    pub service: Mutex<Option<Service>>,
    /// Metrics, the report socket and the live views' history (`None`: the daemon observes nothing).
    pub telemetry: Option<Arc<crate::telemetry::Telemetry>>,
}

pub(crate) type Shared = Arc<App>;

pub(crate) fn json_response(status: u16, body: Value) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn error_response(e: &NodeError) -> Response {
    let mut body = json!({ "error": e.to_string(), "status": e.status() });
    if let NodeError::Spec(list) = e {
        body["errors"] = json!(list);
    }
    json_response(e.status(), body)
}

impl IntoResponse for NodeError {
    fn into_response(self) -> Response {
        error_response(&self)
    }
}

/// Runs `f` on the service in a blocking thread (host operations sleep and wait for processes).
pub(crate) async fn with_service<T: Send + 'static>(
    app: Shared,
    f: impl FnOnce(&mut Service) -> Result<T, NodeError> + Send + 'static,
) -> Result<T, NodeError> {
    tokio::task::spawn_blocking(move || {
        let mut guard = app.service.lock().unwrap_or_else(|p| p.into_inner());
        let svc = guard.as_mut().ok_or_else(|| NodeError::State("the service is shutting down".into()))?;
        let out = f(svc);
        // The collector follows every change at once (not a second later, with the watcher).
        if let Some(t) = &app.telemetry {
            t.sync(svc);
        }
        out
    })
    .await
    .map_err(|e| NodeError::State(format!("request handler failed: {e}")))?
}

/// Reads the body, refusing more than [`BODY_LIMIT`] bytes (413) and non-UTF-8 text (400).
pub(crate) async fn body_text(body: Body) -> Result<String, Response> {
    let bytes = axum::body::to_bytes(body, BODY_LIMIT).await.map_err(|_| {
        json_response(413, json!({ "error": format!("the request body is larger than {BODY_LIMIT} bytes"), "status": 413 }))
    })?;
    rtslice_spec::utf8_text(&bytes, "request body")
        .map(str::to_string)
        .map_err(|e| error_response(&NodeError::Spec(e.iter().map(|x| x.to_string()).collect())))
}
