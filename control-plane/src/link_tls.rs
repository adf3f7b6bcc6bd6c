//! TLS on the worker link: the listener workers dial (gRPC and the model relay)
//! accepts only TLS when certificates are configured, and, with a client CA, only
//! workers presenting a certificate that CA signed (mutual TLS).
//!
//! Handshakes run in their own tasks, bounded in time, so a slow or silent client
//! never holds up the next connection; what completes is handed to the server.
//!
//! rustls, ALPN h2 and http/1.1. Each handshake has 10 s and feeds the server through a
//! channel; at most 256 run at once (past that a connection is closed at once), so a
//! flood costs bounded work. The worker uses the same CA and identity for the gRPC
//! channel (trace export included) and for its relay client, which trusts only that CA.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::server::TlsStream;

/// How long a client has to finish its handshake.
const HANDSHAKE_TIME: Duration = Duration::from_secs(10);

/// Handshakes in progress at most: past this, a new connection is closed at once,
/// so a flood of silent connections costs at most this many tasks for 10 s each.
const MAX_HANDSHAKES: usize = 256;

/// The certificate files of the worker link (`[workers] tls_*`, `CHORUS_TLS_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkTlsFiles {
    /// The control plane's certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// `Some`: workers must present a certificate this CA (PEM) signed.
    pub client_ca: Option<PathBuf>,
}

/// Builds the acceptor from the files; the error names the file and what is wrong.
pub fn acceptor(files: &LinkTlsFiles) -> Result<TlsAcceptor, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = certificates(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("{}: no private key in PEM form ({e})", files.key.display()))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match &files.client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certificates(ca)? {
                roots
                    .add(cert)
                    .map_err(|e| format!("{}: not a usable CA certificate ({e})", ca.display()))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| format!("{}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| {
        format!(
            "{} and {}: the certificate and key do not make a usable pair ({e})",
            files.cert.display(),
            files.key.display()
        )
    })?;
    // gRPC needs HTTP/2; the model relay also takes HTTP/1.1.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{}: cannot read ({e})", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: not PEM certificates ({e})", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: holds no certificate", path.display()));
    }
    Ok(certs)
}

/// A listener whose connections have finished their TLS handshake.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Accepts on `tcp` from a task of its own until the listener is dropped.
    pub fn new(tcp: TcpListener, acceptor: TlsAcceptor) -> std::io::Result<Self> {
        let local = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        let handshakes = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
        tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors and the like: wait, go on.
                        tracing::warn!(error = %e, "cannot accept a worker connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if tx.is_closed() {
                    return;
                }
                let Ok(permit) = handshakes.clone().try_acquire_owned() else {
                    tracing::warn!(%peer, "worker link: too many TLS handshakes at once; connection closed");
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let _permit = permit;
                    match tokio::time::timeout(HANDSHAKE_TIME, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => {
                            tracing::warn!(%peer, error = %e, "worker link: TLS handshake refused")
                        }
                        Err(_) => {
                            tracing::warn!(%peer, "worker link: TLS handshake not finished in time")
                        }
                    }
                });
            }
        });
        Ok(TlsListener { ready, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(ready) => ready,
            // The accepting task only ends when we are dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::serve::Listener;
    use tokio::io::AsyncReadExt;

    /// A self-signed certificate for 127.0.0.1, made with the openssl command line.
    fn certificate(dir: &Path) -> LinkTlsFiles {
        let status = std::process::Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=127.0.0.1",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
                "-keyout",
                "key.pem",
                "-out",
                "cert.pem",
            ])
            .current_dir(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .expect("openssl");
        assert!(status.success());
        LinkTlsFiles {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
            client_ca: None,
        }
    }

    #[tokio::test]
    async fn silent_connections_beyond_the_handshake_bound_are_closed_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let acceptor = acceptor(&certificate(dir.path())).unwrap();
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let listener = TlsListener::new(tcp, acceptor).unwrap();
        let addr = listener.local_addr().unwrap();
        // Silent clients: each holds a handshake open.
        let mut silent = Vec::new();
        for _ in 0..MAX_HANDSHAKES {
            silent.push(TcpStream::connect(addr).await.unwrap());
        }
        // The next is closed without waiting for its handshake...
        let mut over = TcpStream::connect(addr).await.unwrap();
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), over.read(&mut byte))
            .await
            .expect("closed at once, not after the handshake time");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        // ...while the ones within the bound still wait for theirs.
        let waiting =
            tokio::time::timeout(Duration::from_millis(200), silent[0].read(&mut byte)).await;
        assert!(
            waiting.is_err(),
            "a handshake within the bound was not cut short"
        );
        drop(listener);
    }

    #[test]
    fn a_key_that_is_not_a_key_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = certificate(dir.path());
        std::fs::write(dir.path().join("bad.pem"), "not a key").unwrap();
        files.key = dir.path().join("bad.pem");
        let error = acceptor(&files).err().unwrap();
        assert!(
            error.contains("bad.pem") && error.contains("no private key"),
            "{error}"
        );
    }
}
