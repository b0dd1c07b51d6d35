//! The HTTP API under `/v1` (axum): resources, body limits, errors as JSON, and the bearer token
//! required on TCP.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};

use crate::error::NodeError;
use crate::service::{Resize, Service};

/// Largest request body accepted (a spec of many workloads is a few KiB); larger gets 413.
pub const BODY_LIMIT: usize = 256 * 1024;

/// What every handler shares: the one writer behind a lock (requests are serialized).
pub struct App {
    pub service: Mutex<Option<Service>>,
}

type Shared = Arc<App>;

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
        f(svc)
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

/// A request body that must be a spec: the size limit and UTF-8 (`body_text`), then the spec's located
/// errors — as the response to send when it is not one.
async fn spec_body(body: Body) -> Result<rtslice_spec::Spec, Response> {
    let text = body_text(body).await?;
    rtslice_spec::parse(&text, "request body")
        .map_err(|e| NodeError::Spec(e.iter().map(|x| x.to_string()).collect()).into_response())
}

async fn node(State(app): State<Shared>) -> Response {
    match with_service(app, |s| Ok(s.inventory())).await {
        Ok(v) => json_response(200, v),
        Err(e) => e.into_response(),
    }
}

async fn list(State(app): State<Shared>) -> Response {
    match with_service(app, |s| Ok(s.list())).await {
        Ok(v) => json_response(200, json!({ "workloads": v })),
        Err(e) => e.into_response(),
    }
}

async fn deploy(State(app): State<Shared>, body: Body) -> Response {
    let spec = match spec_body(body).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    if spec.workloads.is_empty() {
        return NodeError::Invalid("the spec has no workloads to deploy".into()).into_response();
    }
    let mut warnings = Vec::new();
    if spec.node != rtslice_spec::Node::default() {
        warnings.push("the spec's node section is ignored: the daemon's node applies (rtslice daemon --node FILE)");
    }
    match with_service(app, move |s| s.deploy(&spec)).await {
        Ok(outcomes) => {
            let pending = outcomes.iter().any(|o| o.phase == crate::service::Phase::Pending);
            json_response(if pending { 202 } else { 201 }, json!({ "workloads": outcomes, "warnings": warnings }))
        }
        Err(e) => e.into_response(),
    }
}

async fn get_one(State(app): State<Shared>, Path(name): Path<String>) -> Response {
    match with_service(app, move |s| s.get(&name)).await {
        Ok(v) => json_response(200, v),
        Err(e) => e.into_response(),
    }
}

async fn remove(State(app): State<Shared>, Path(name): Path<String>) -> Response {
    match with_service(app, move |s| s.remove(&name)).await {
        Ok(v) => json_response(200, v),
        Err(e) => e.into_response(),
    }
}

async fn resize(State(app): State<Shared>, Path(name): Path<String>, body: Body) -> Response {
    let text = match body_text(body).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let req: Resize = match serde_json::from_str(&text) {
        Ok(r) => r,
        Err(e) => return NodeError::Invalid(format!("the resize body: {e}")).into_response(),
    };
    match with_service(app, move |s| s.resize(&name, &req)).await {
        Ok(v) => json_response(200, serde_json::to_value(v).unwrap_or_default()),
        Err(e) => e.into_response(),
    }
}

async fn plan(State(app): State<Shared>, body: Body) -> Response {
    let spec = match spec_body(body).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    match with_service(app, move |s| Ok(s.dry_run(&spec))).await {
        Ok(v) => json_response(200, json!({ "workloads": v })),
        Err(e) => e.into_response(),
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Since {
    #[serde(default)]
    since: u64,
}

async fn events(State(app): State<Shared>, q: Result<Query<Since>, axum::extract::rejection::QueryRejection>) -> Response {
    let since = match q {
        Ok(Query(s)) => s.since,
        Err(e) => return NodeError::Invalid(format!("query: {e}")).into_response(),
    };
    match with_service(app, move |s| Ok(s.events(since))).await {
        Ok(v) => json_response(200, json!({ "events": v })),
        Err(e) => e.into_response(),
    }
}

async fn openapi() -> Response {
    json_response(200, crate::openapi::document())
}

async fn not_found() -> Response {
    NodeError::NotFound("no such resource; see GET /v1/openapi.json".into()).into_response()
}

/// The API's routes. `token`: required as `Authorization: Bearer <token>` on every request (TCP).
pub fn router(app: Shared, token: Option<Arc<String>>) -> Router {
    let r = crate::containers::routes(Router::new())
        .route("/v1/node", get(node))
        .route("/v1/workloads", get(list).post(deploy))
        .route("/v1/workloads/{name}", get(get_one).put(resize).delete(remove))
        .route("/v1/plan", post(plan))
        .route("/v1/events", get(events))
        .route("/v1/openapi.json", get(openapi))
        .fallback(not_found)
        .with_state(app);
    match token {
        Some(t) => r.layer(middleware::from_fn_with_state(t, bearer)),
        None => r,
    }
}

async fn bearer(State(token): State<Arc<String>>, headers: HeaderMap, req: Request, next: Next) -> Response {
    let given = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    // Compared in constant time: the token is the only secret on TCP.
    let ok = given.is_some_and(|g| g.len() == token.len() && g.bytes().zip(token.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0);
    if !ok {
        let mut r = json_response(401, json!({ "error": "a bearer token is required on TCP (Authorization: Bearer <token from --token-file>)", "status": 401 }));
        r.headers_mut().insert(header::WWW_AUTHENTICATE, "Bearer".parse().expect("static header"));
        return r;
    }
    next.run(req).await
}
