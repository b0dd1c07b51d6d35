//! A client of the daemon's unix socket (the CLI's `deploy`, `remove`, `resize`, `list`, `get`).

use std::path::Path;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

use crate::error::{NodeError, Result};

/// An answer of the daemon: the HTTP status and the JSON body.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub body: serde_json::Value,
}

/// Sends one request to the daemon listening on `socket`.
pub async fn request(socket: &Path, method: &str, path: &str, body: Option<(&str, Vec<u8>)>) -> Result<Reply> {
    let stream = tokio::net::UnixStream::connect(socket).await.map_err(|e| {
        NodeError::Client(format!(
            "cannot reach the rtslice daemon at {} ({e}); start it with `rtslice daemon` (or `systemctl start rtslice`), \
             or point --socket / RTSLICE_SOCKET at its socket",
            socket.display()
        ))
    })?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| NodeError::Client(format!("HTTP handshake with {}: {e}", socket.display())))?;
    tokio::spawn(conn);
    let mut req = hyper::Request::builder().method(method).uri(path).header("host", "rtslice");
    let payload = match body {
        Some((ctype, bytes)) => {
            req = req.header("content-type", ctype);
            Bytes::from(bytes)
        }
        None => Bytes::new(),
    };
    let req = req.body(Full::new(payload)).map_err(|e| NodeError::Client(e.to_string()))?;
    let resp = sender.send_request(req).await.map_err(|e| NodeError::Client(format!("request {method} {path}: {e}")))?;
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.map_err(|e| NodeError::Client(format!("reading the answer: {e}")))?.to_bytes();
    let body = serde_json::from_slice(&bytes)
        .map_err(|e| NodeError::Client(format!("the daemon answered {status} with a body that is not JSON ({e})")))?;
    Ok(Reply { status, body })
}

/// [`request`] from synchronous code (the CLI).
pub fn request_blocking(socket: &Path, method: &str, path: &str, body: Option<(&str, Vec<u8>)>) -> Result<Reply> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| NodeError::Client(e.to_string()))?;
    rt.block_on(request(socket, method, path, body))
}
