//! TLS for the AMQP (`amqps_listen`) and management (`https_listen`) listeners, with rustls.
//!
//! Owns turning the `[tls]` table into a rustls `ServerConfig` (PEM certificate chain and key;
//! with `verify_peer`, client certificates checked against `ca_file`, required when
//! `fail_if_no_peer_cert`) and reading the login name the `EXTERNAL` mechanism uses from a
//! verified client certificate: its subject's common name (CN), as RabbitMQ's
//! `ssl_cert_login_from = common_name`.

use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;

use crate::config::TlsConfig;

/// Why the TLS settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{what} {file}: {reason}")]
    Pem {
        /// Which setting.
        what: &'static str,
        /// The file.
        file: String,
        /// What went wrong.
        reason: String,
    },
    /// rustls refused the combination.
    #[error("TLS configuration: {0}")]
    Rustls(String),
}

fn pem_err(what: &'static str, file: &str, reason: impl ToString) -> TlsError {
    TlsError::Pem {
        what,
        file: file.to_string(),
        reason: reason.to_string(),
    }
}

fn certs(what: &'static str, file: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(file)
        .map_err(|e| pem_err(what, file, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| pem_err(what, file, e))?;
    if certs.is_empty() {
        return Err(pem_err(what, file, "no certificate in the file"));
    }
    Ok(certs)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The rustls server configuration for `tls`; `alpn` protocols offered (empty for AMQP).
pub fn server_config(tls: &TlsConfig, alpn: &[&[u8]]) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = certs("cert_file", &tls.cert_file)?;
    let key = PrivateKeyDer::from_pem_file(&tls.key_file)
        .map_err(|e| pem_err("key_file", &tls.key_file, e))?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let builder = if tls.verify_peer {
        let ca = tls.ca_file.as_deref().ok_or_else(|| {
            TlsError::Rustls(
                "verify_peer needs ca_file (the CA client certificates chain to)".into(),
            )
        })?;
        let mut roots = rustls::RootCertStore::empty();
        for c in certs("ca_file", ca)? {
            roots.add(c).map_err(|e| pem_err("ca_file", ca, e))?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
        let verifier = if tls.fail_if_no_peer_cert {
            verifier
        } else {
            verifier.allow_unauthenticated()
        };
        let verifier = verifier
            .build()
            .map_err(|e| TlsError::Rustls(e.to_string()))?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// The subject common name of a (verified) client certificate: the `EXTERNAL` login.
pub fn common_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let cn = parsed.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

/// The `EXTERNAL` login of a TLS connection: the CN of the first certificate the client
/// presented (rustls has verified it against `ca_file` by the time the handshake completes).
pub fn peer_login(conn: &rustls::ServerConnection) -> Option<String> {
    conn.peer_certificates()?.first().and_then(common_name)
}

pub use tokio_rustls::TlsAcceptor;
pub use tokio_rustls::server::TlsStream;

/// Most TLS handshakes in progress at once per listener (accepting waits beyond).
pub const MAX_PENDING_HANDSHAKES: usize = 1024;

/// Most time a client gets for the TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Accepts TCP connections on `listener` and completes their TLS handshakes concurrently;
/// established sessions come out of the returned channel (bounded). Failed handshakes are
/// logged at debug level and dropped. Stops when `shutdown` is cancelled.
pub fn accept_loop(
    listener: tokio::net::TcpListener,
    acceptor: TlsAcceptor,
    shutdown: tokio_util::sync::CancellationToken,
) -> tokio::sync::mpsc::Receiver<(TlsStream<tokio::net::TcpStream>, std::net::SocketAddr)> {
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    let handshakes = Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_HANDSHAKES));
    tokio::spawn(async move {
        loop {
            let Ok(permit) = handshakes.clone().acquire_owned().await else {
                return;
            };
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => return,
                a = listener.accept() => a,
            };
            let Ok((tcp, peer)) = accepted else {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send((stream, peer)).await;
                    }
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                }
                drop(permit);
            });
        }
    });
    rx
}
