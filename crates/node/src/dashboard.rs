//! The daemon's observability routes: `GET /metrics` (OpenMetrics text) and `GET /v1/telemetry` on
//! the API listener, and the live dashboard at `/` — one self-contained HTML page (script and
//! style inline, no external scripts, fonts or CDNs) compiled into the binary, refreshing itself
//! from the JSON API.
//!
//! Access is the API's: on the unix socket whoever can open it (root); on TCP the bearer token. A
//! browser cannot send a bearer header when it loads a page, so on TCP `/?token=T` (checked like
//! the header) answers with a redirect to `/` and the token in an HttpOnly, SameSite=Strict cookie,
//! which then authorizes the page's own requests.

use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::http::App;
use crate::error::NodeError;
use crate::telemetry::ViewQuery;

type Shared = std::sync::Arc<App>;

/// The dashboard page.
pub const PAGE: &str = include_str!("dashboard.html");
/// The cookie carrying the bearer token for a browser on TCP.
pub const TOKEN_COOKIE: &str = "rtslice_token";

async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            // Nothing from elsewhere, even if the page were tampered with.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; connect-src 'self'",
            ),
            (header::CACHE_CONTROL, "no-store"),
        ],
        PAGE,
    )
        .into_response()
}

async fn metrics(State(app): State<Shared>) -> Response {
    let Some(t) = app.telemetry.clone() else {
        return NodeError::NotFound("metrics are off in this daemon".into()).into_response();
    };
    match tokio::task::spawn_blocking(move || rtslice_metrics::encode(&t.registry)).await {
        Ok(text) => ([(header::CONTENT_TYPE, rtslice_metrics::CONTENT_TYPE)], text).into_response(),
        Err(e) => NodeError::State(format!("collecting the metrics failed: {e}")).into_response(),
    }
}

async fn telemetry(State(app): State<Shared>, q: Result<Query<ViewQuery>, axum::extract::rejection::QueryRejection>) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return NodeError::Invalid(format!("query: {e}")).into_response(),
    };
    let Some(t) = app.telemetry.clone() else {
        return NodeError::NotFound("telemetry is off in this daemon".into()).into_response();
    };
    let window = q.window.unwrap_or(10.0);
    let minutes = q.minutes.unwrap_or(5.0);
    if !(window.is_finite() && window > 0.0 && minutes.is_finite() && minutes >= 0.0) {
        return NodeError::Invalid("window must be > 0 seconds and minutes ≥ 0".into()).into_response();
    }
    match t.view(q.at, window, minutes) {
        Ok(v) => ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The routes this module adds to the API router.
pub(crate) fn routes(r: Router<Shared>) -> Router<Shared> {
    r.route("/", get(page)).route("/metrics", get(metrics)).route("/v1/telemetry", get(telemetry))
}

/// Counts the changing requests (deploy, resize, remove) by their answer for `rtslice_operations_total`.
pub(crate) async fn count_operations(State(app): State<Shared>, req: Request, next: axum::middleware::Next) -> Response {
    let path = req.uri().path();
    let operation = match (req.method().as_str(), path.strip_prefix("/v1/workloads")) {
        ("POST", Some("")) => Some("deploy"),
        ("PUT", Some(rest)) if rest.len() > 1 => Some("resize"),
        ("DELETE", Some(rest)) if rest.len() > 1 => Some("remove"),
        _ => None,
    };
    let resp = next.run(req).await;
    if let (Some(op), Some(t)) = (operation, &app.telemetry) {
        t.count_operation(op, resp.status().as_u16());
    }
    resp
}

/// The token a browser presents: the cookie set by [`login`].
pub(crate) fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| c.trim().strip_prefix(TOKEN_COOKIE)?.strip_prefix('=').map(percent_decode))
}

/// `GET /?token=T`: the token offered in the address (only there), for [`login`].
pub(crate) fn query_token(req: &Request) -> Option<String> {
    if req.uri().path() != "/" {
        return None;
    }
    req.uri().query()?.split('&').find_map(|kv| kv.strip_prefix("token=")).map(percent_decode)
}

/// The answer to a `/?token=` that matched: the cookie, and a redirect that drops the token from
/// the address bar and the history.
pub(crate) fn login(token: &str) -> Response {
    // Percent-encoded: a token may hold characters a cookie value cannot (space, `;`, `,`).
    let value: String = token
        .bytes()
        .map(|b| if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect();
    let cookie = format!("{TOKEN_COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict");
    (StatusCode::SEE_OTHER, [(header::LOCATION, "/".to_string()), (header::SET_COOKIE, cookie)]).into_response()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                Ok(x) => {
                    out.push(x);
                    i += 3;
                    continue;
                }
                Err(_) => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_read_from_the_cookie_and_the_address() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, "a=1; rtslice_token=abc%2F; b=2".parse().unwrap());
        assert_eq!(cookie_token(&h).as_deref(), Some("abc/"));
        let set = login("a b;c/").headers()[header::SET_COOKIE].to_str().unwrap().to_string();
        assert!(set.starts_with("rtslice_token=a%20b%3Bc%2F;"), "{set}");
        let req = Request::builder().uri("/?x=1&token=t%2Bk+en%zz").body(axum::body::Body::empty()).unwrap();
        assert_eq!(query_token(&req).as_deref(), Some("t+k en%zz"));
        let req = Request::builder().uri("/v1/node?token=t").body(axum::body::Body::empty()).unwrap();
        assert_eq!(query_token(&req), None);
    }
}
