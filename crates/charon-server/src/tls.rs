//! TLS for the AMQP (`amqps_listen`) and management (`https_listen`) listeners, with rustls.
//!
//! Owns turning the `[tls]` table into a rustls `ServerConfig` (PEM certificate chain and key;
//! with `verify_peer`, client certificates checked against `ca_file`, required when
//! `fail_if_no_peer_cert`) and reading the login name the `EXTERNAL` mechanism uses from a
//! verified client certificate: its subject's common name (CN, Charon's default), or its whole
//! subject distinguished name formatted as RabbitMQ does (RFC 4514, `ssl_cert_login_from =
//! distinguished_name`, RabbitMQ's default).

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

/// Where the `EXTERNAL` login name comes from (RabbitMQ's `ssl_cert_login_from`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CertLoginFrom {
    /// The subject's common name (`CN`): Charon's default.
    #[default]
    CommonName,
    /// The whole subject distinguished name, RFC 4514 as RabbitMQ formats it (most
    /// significant RDN last: `CN=alice,O=example,C=DE`): RabbitMQ's default.
    DistinguishedName,
}

/// The subject common name of a (verified) client certificate.
pub fn common_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let cn = parsed.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

/// The subject distinguished name of a certificate as RabbitMQ's `rabbit_cert_info` formats
/// it: RDNs in reverse order joined by `,`, multi-valued RDNs by `+`, RabbitMQ's short names
/// for known attribute types (dotted OID otherwise), values escaped per RFC 4514.
pub fn distinguished_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let rdns: Vec<String> = parsed
        .subject()
        .iter()
        .map(|rdn| {
            rdn.iter()
                .map(|atv| {
                    let value = match atv.as_str() {
                        Ok(s) => s.to_string(),
                        Err(_) => String::from_utf8_lossy(atv.attr_value().data).into_owned(),
                    };
                    format!(
                        "{}={}",
                        attribute_name(atv.attr_type()),
                        escape_rdn_value(&value)
                    )
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    Some(rdns.into_iter().rev().collect::<Vec<_>>().join(","))
}

/// RabbitMQ's names for attribute types (`rabbit_cert_info:format_rdn/1`).
fn attribute_name(oid: &x509_parser::der_parser::oid::Oid<'_>) -> String {
    let dotted = oid.to_id_string();
    let short = match dotted.as_str() {
        "2.5.4.4" => "SN",
        "2.5.4.42" => "GIVENNAME",
        "2.5.4.43" => "INITIALS",
        "2.5.4.44" => "GENERATIONQUALIFIER",
        "2.5.4.3" => "CN",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.12" => "TITLE",
        "2.5.4.6" => "C",
        "2.5.4.5" => "SERIALNUMBER",
        "2.5.4.65" => "PSEUDONYM",
        "0.9.2342.19200300.100.1.25" => "DC",
        "1.2.840.113549.1.9.1" => "EMAILADDRESS",
        "2.5.4.9" => "STREET",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return dotted,
    };
    short.to_string()
}

/// RFC 4514 escaping as RabbitMQ does it: a leading space or `#`, a trailing space and
/// `" + , ; < > \` get a backslash; bytes below 32 or from 126 up (UTF-8 included) become
/// `\XX`.
fn escape_rdn_value(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = String::with_capacity(v.len());
    for (i, &c) in bytes.iter().enumerate() {
        let first = i == 0;
        let last = i + 1 == bytes.len();
        match c {
            b' ' | b'#' if first => {
                out.push('\\');
                out.push(c as char);
            }
            b' ' if last => out.push_str("\\ "),
            b'"' | b'+' | b',' | b';' | b'<' | b'>' | b'\\' => {
                out.push('\\');
                out.push(c as char);
            }
            c if !(32..126).contains(&c) => out.push_str(&format!("\\{c:02X}")),
            c => out.push(c as char),
        }
    }
    out
}

/// The `EXTERNAL` login of a TLS connection: from the first certificate the client presented
/// (rustls has verified it against `ca_file` by the time the handshake completes).
pub fn peer_login(conn: &rustls::ServerConnection, from: CertLoginFrom) -> Option<String> {
    let cert = conn.peer_certificates()?.first()?;
    match from {
        CertLoginFrom::CommonName => common_name(cert),
        CertLoginFrom::DistinguishedName => distinguished_name(cert),
    }
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

#[cfg(test)]
mod tests {
    use super::escape_rdn_value;

    #[test]
    fn rdn_values_escape_as_rabbitmq() {
        assert_eq!(escape_rdn_value("team, one"), "team\\, one");
        assert_eq!(escape_rdn_value("#lead"), "\\#lead");
        assert_eq!(escape_rdn_value(" pad "), "\\ pad\\ ");
        assert_eq!(escape_rdn_value("a+b\"c;<>\\"), "a\\+b\\\"c\\;\\<\\>\\\\");
        assert_eq!(escape_rdn_value("Zoë~"), "Zo\\C3\\AB\\7E");
        assert_eq!(escape_rdn_value("in#side"), "in#side");
    }
}
