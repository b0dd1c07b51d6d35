//! The HTTP API under `/v1` (axum): resources, body limits, errors as JSON, and the bearer token
//! required on TCP.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::json;

use crate::containers::CreateContainer;
use crate::error::NodeError;
use crate::http::{body_text, json_response, with_service, Shared};
use crate::service::Resize;

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

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ApplyQuery {
    #[serde(default)]
    dry_run: bool,
}

/// `PUT /v1/workloads`: declarative apply of a whole spec (the difference only; `?dryRun=true`
/// computes it and the admission each change would get, changing nothing).
async fn apply(
    State(app): State<Shared>,
    q: Result<Query<ApplyQuery>, axum::extract::rejection::QueryRejection>,
    body: Body,
) -> Response {
    let dry_run = match q {
        Ok(Query(q)) => q.dry_run,
        Err(e) => return NodeError::Invalid(format!("query: {e}")).into_response(),
    };
    let spec = match spec_body(body).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let mut warnings = Vec::new();
    if spec.node != rtslice_spec::Node::default() {
        warnings.push("the spec's node section is ignored: the daemon's node applies (rtslice daemon --node FILE)");
    }
    let result = with_service(app, move |s| if dry_run { s.diff(&spec, true) } else { s.apply(&spec) }).await;
    match result {
        Ok(changes) => {
            let pending = changes.iter().any(|c| c.phase == Some(crate::service::Phase::Pending));
            json_response(200, json!({ "dryRun": dry_run, "changes": changes, "pending": pending, "warnings": warnings }))
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
    let r = container_routes(crate::dashboard::routes(Router::new()))
        .route("/v1/node", get(node))
        .route("/v1/workloads", get(list).post(deploy).put(apply))
        .route("/v1/workloads/{name}", get(get_one).put(resize).delete(remove))
        .route("/v1/plan", post(plan))
        .route("/v1/events", get(events))
        .route("/v1/openapi.json", get(openapi))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(app.clone(), crate::dashboard::count_operations))
        .with_state(app);
    match token {
        Some(t) => r.layer(middleware::from_fn_with_state(t, bearer)),
        None => r,
    }
}

async fn bearer(State(token): State<Arc<String>>, headers: HeaderMap, req: Request, next: Next) -> Response {
    let given = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    // Compared in constant time: the token is the only secret on TCP.
    let matches = |g: &str| g.len() == token.len() && g.bytes().zip(token.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
    // A browser (the dashboard) has no header: the cookie, set after `/?token=` matched.
    let ok = given.is_some_and(matches) || crate::dashboard::cookie_token(&headers).is_some_and(|g| matches(&g));
    if !ok && crate::dashboard::query_token(&req).is_some_and(|g| matches(&g)) {
        return crate::dashboard::login(&token);
    }
    if !ok {
        let mut r = json_response(401, json!({ "error": "a bearer token is required on TCP (Authorization: Bearer <token from --token-file>)", "status": 401 }));
        r.headers_mut().insert(header::WWW_AUTHENTICATE, "Bearer".parse().expect("static header"));
        return r;
    }
    next.run(req).await
}

// ---- Kubernetes containers (the NRI plugin's calls) ----

async fn container_create(State(app): State<Shared>, body: Body) -> Response {
    let text = match body_text(body).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let req: CreateContainer = match serde_json::from_str(&text) {
        Ok(r) => r,
        Err(e) => return NodeError::Invalid(format!("the container body: {e}")).into_response(),
    };
    match with_service(app, move |s| Ok(s.container_create(&req)?.map(|e| json!({"workload": e.workload.name, "cpus": rtslice_host::CpuList::from_cpus(e.cpus.iter().copied()).to_string(), "mems": e.setup.mems.clone().unwrap_or_default()})))).await {
        Ok(Some(v)) => json_response(201, v),
        Ok(None) => (axum::http::StatusCode::NO_CONTENT, "").into_response(),
        Err(e) => e.into_response(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Start {
    pid: i32,
}

async fn container_start(State(app): State<Shared>, Path(id): Path<String>, body: Body) -> Response {
    let text = match body_text(body).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let req: Start = match serde_json::from_str(&text) {
        Ok(r) => r,
        Err(e) => return NodeError::Invalid(format!("the start body: {e}")).into_response(),
    };
    match with_service(app, move |s| s.container_start(&id, req.pid)).await {
        Ok(v) => json_response(200, v),
        Err(e) => e.into_response(),
    }
}

async fn container_release(State(app): State<Shared>, Path(id): Path<String>) -> Response {
    match with_service(app, move |s| s.container_release(&id)).await {
        Ok(v) => json_response(200, v),
        Err(e) => e.into_response(),
    }
}

async fn container_list(State(app): State<Shared>) -> Response {
    match with_service(app, |s| Ok(serde_json::to_value(s.container_list()).unwrap_or_default())).await {
        Ok(v) => json_response(200, json!({"containers": v})),
        Err(e) => e.into_response(),
    }
}

async fn container_inventory(State(app): State<Shared>) -> Response {
    match with_service(app, |s| Ok(s.cluster_inventory())).await {
        Ok(v) => json_response(200, v),
        Err(e) => e.into_response(),
    }
}

// ---- DRA (the kubelet plugin's calls, docs/dra.md) ----

async fn dra_devices(State(app): State<Shared>) -> Response {
    match with_service(app, |s| Ok(s.dra_devices())).await {
        Ok(v) => json_response(200, v),
        Err(e) => e.into_response(),
    }
}

/// NodePrepareResources of one claim: the plugin's pool (its node's name) and the ResourceClaim.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Prepare {
    pool: String,
    claim: serde_json::Value,
}

async fn claim_prepare(State(app): State<Shared>, body: Body) -> Response {
    let text = match body_text(body).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let req: Prepare = match serde_json::from_str(&text) {
        Ok(r) => r,
        Err(e) => return NodeError::Invalid(format!("the prepare body: {e} (give {{\"pool\": <node>, \"claim\": <ResourceClaim>}})")).into_response(),
    };
    match with_service(app, move |s| s.claim_prepare(&req.pool, &req.claim)).await {
        Ok(v) => json_response(201, v),
        Err(e) => e.into_response(),
    }
}

async fn claim_unprepare(State(app): State<Shared>, Path(uid): Path<String>) -> Response {
    match with_service(app, move |s| s.claim_unprepare(&uid)).await {
        Ok(v) => json_response(200, v),
        Err(e) => e.into_response(),
    }
}

async fn claim_list(State(app): State<Shared>) -> Response {
    match with_service(app, |s| Ok(serde_json::to_value(s.claim_list()).unwrap_or_default())).await {
        Ok(v) => json_response(200, json!({"claims": v})),
        Err(e) => e.into_response(),
    }
}

/// The container, inventory and DRA routes (the NRI and kubelet plugins'), added to the API's
/// router.
fn container_routes(r: Router<Shared>) -> Router<Shared> {
    r.route("/v1/dra/devices", get(dra_devices))
        .route("/v1/dra/claims", get(claim_list).post(claim_prepare))
        .route("/v1/dra/claims/{uid}", axum::routing::delete(claim_unprepare))
        .route("/v1/containers", get(container_list).post(container_create))
        .route("/v1/containers/{id}", axum::routing::delete(container_release))
        .route("/v1/containers/{id}/start", post(container_start))
        .route("/v1/inventory", get(container_inventory))
}
