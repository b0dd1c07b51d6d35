//! HTTPS on the TCP listener (`--tls-cert`, `--tls-key`): rustls with the ring provider (no OpenSSL,
//! no C toolchain beyond ring's), HTTP/1.1 only (the API's axum has no HTTP/2). With
//! `--tls-client-ca` it is mutual TLS: a client must present a certificate that CA signed (and the
//! bearer token still), so a stolen token alone does not reach the node.
//!
//! Handshakes run in tasks of their own so one slow or silent client cannot hold up the accept loop;
//! [`TlsListener`] hands axum only connections whose handshake completed.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::error::{NodeError, Result};

/// A client that connected must finish its handshake within this time.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The certificate chain (PEM, the server's certificate first) and its private key (PEM: PKCS#8,
/// PKCS#1 or SEC1).
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// PEM certificates of the CAs whose client certificates are accepted (mutual TLS); `None`:
    /// clients are not asked for one.
    pub client_ca: Option<PathBuf>,
}

/// Reads and checks the certificate and key (the key must match the certificate) into a server
/// configuration; every failure names the file and what to do.
pub fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>> {
    let bad = |path: &Path, what: String| NodeError::Invalid(format!("--tls-cert/--tls-key: {}: {what}", path.display()));
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| bad(&files.cert, format!("cannot read a PEM certificate chain ({e})")))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad(&files.cert, format!("not a PEM certificate chain ({e})")))?;
    if certs.is_empty() {
        return Err(bad(&files.cert, "holds no certificate (expected -----BEGIN CERTIFICATE-----)".into()));
    }
    let key_meta = std::fs::metadata(&files.key).map_err(|e| bad(&files.key, e.to_string()))?;
    use std::os::unix::fs::PermissionsExt;
    if key_meta.permissions().mode() & 0o077 != 0 {
        return Err(bad(&files.key, format!("the private key is readable by others (mode {:o}); chmod 600 it", key_meta.permissions().mode() & 0o777)));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| bad(&files.key, format!("no PEM private key (PKCS#8, PKCS#1 or SEC1) in it ({e})")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| NodeError::Invalid(format!("TLS: {e}")))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let bad = |what: String| NodeError::Invalid(format!("--tls-client-ca: {}: {what}", ca.display()));
            let mut roots = rustls::RootCertStore::empty();
            let cas = CertificateDer::pem_file_iter(ca)
                .map_err(|e| bad(format!("cannot read PEM certificates ({e})")))?
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| bad(format!("not PEM certificates ({e})")))?;
            if cas.is_empty() {
                return Err(bad("holds no certificate (expected the CA's -----BEGIN CERTIFICATE-----)".into()));
            }
            for c in cas {
                roots.add(c).map_err(|e| bad(format!("not a usable CA certificate ({e})")))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| bad(format!("cannot verify clients with it ({e})")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| bad(&files.cert, format!("the certificate and the key do not go together ({e}); give the key the certificate was made for")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// TCP connections after a completed TLS handshake, for `axum::serve`.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    acceptor_task: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, config: Arc<rustls::ServerConfig>) -> std::io::Result<TlsListener> {
        let local = tcp.local_addr()?;
        let acceptor = TlsAcceptor::from(config);
        let (tx, ready) = mpsc::channel(64);
        let acceptor_task = tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        // Out of file descriptors and the like: wait rather than spin.
                        tracing::warn!("TCP accept: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        // Plain HTTP to the TLS port, a client that does not trust the
                        // certificate, a port scanner: the client sees the failure, the log a line.
                        Ok(Err(e)) => tracing::debug!(%peer, "TLS handshake failed: {e}"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(TlsListener { ready, local, acceptor_task })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor_task.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The acceptor task only ends when aborted, i.e. when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}

/// Over HTTPS the dashboard's token cookie is marked `Secure`: a browser never sends it in clear.
pub async fn secure_cookies(mut response: axum::response::Response) -> axum::response::Response {
    let headers = response.headers_mut();
    let cookies: Vec<_> = headers.get_all(axum::http::header::SET_COOKIE).iter().cloned().collect();
    if !cookies.is_empty() {
        headers.remove(axum::http::header::SET_COOKIE);
        for c in cookies {
            let secure = c.to_str().ok().and_then(|v| format!("{v}; Secure").parse().ok());
            headers.append(axum::http::header::SET_COOKIE, secure.unwrap_or(c));
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::process::Command;

    /// A self-signed certificate and its key made by openssl (a system package of `make deps`).
    fn openssl(dir: &Path, name: &str) -> TlsFiles {
        let (cert, key) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}-key.pem")));
        let out = Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=t"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .expect("openssl is installed (make deps)");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        TlsFiles { cert, key, client_ca: None }
    }

    fn refusal(files: &TlsFiles) -> String {
        match server_config(files) {
            Err(NodeError::Invalid(m)) => m,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_matching_private_key_is_required_and_every_refusal_says_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let a = openssl(dir.path(), "a");
        let b = openssl(dir.path(), "b");
        assert!(server_config(&a).is_ok());
        let mixed = TlsFiles { cert: a.cert.clone(), key: b.key.clone(), client_ca: None };
        assert!(refusal(&mixed).contains("do not go together"), "{}", refusal(&mixed));
        std::fs::set_permissions(&a.key, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(refusal(&a).contains("chmod 600"), "{}", refusal(&a));
        let swapped = TlsFiles { cert: b.key.clone(), key: b.key.clone(), client_ca: None };
        assert!(refusal(&swapped).contains("no certificate"), "{}", refusal(&swapped));
        let missing = TlsFiles { cert: dir.path().join("none.pem"), key: b.key.clone(), client_ca: None };
        assert!(refusal(&missing).contains("none.pem"), "{}", refusal(&missing));
        let not_a_key = TlsFiles { cert: b.cert.clone(), key: b.cert.clone(), client_ca: None };
        std::fs::set_permissions(&b.cert, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(refusal(&not_a_key).contains("no PEM private key"), "{}", refusal(&not_a_key));
    }
}
