//! Reads the broker-side release lateness (`release_lateness_ms`, measured by Charon where it
//! releases a parked or delayed message) from the management API after a retry/delayed run
//! (`--api http://host:port`). A minimal HTTP/1.0 GET with basic auth: the bench needs one
//! request per run, not an HTTP client dependency.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::BenchError;
use crate::uri::AmqpUri;

/// Broker-side lateness: (count, p50, p99, max) in ms.
pub(crate) type Broker = (u64, f64, f64, f64);

fn base64(input: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(A[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn encode_segment(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// GET `{api}/api/{kind}/{vhost}/{name}` and return its `release_lateness_ms`.
pub(crate) async fn fetch(
    api: &str,
    uri: &AmqpUri,
    kind: &str,
    name: &str,
) -> Result<Option<Broker>, BenchError> {
    let host = api
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let path = format!(
        "/api/{kind}/{}/{}",
        encode_segment(&uri.vhost),
        encode_segment(name)
    );
    let auth = base64(format!("{}:{}", uri.user, uri.password).as_bytes());
    let mut s = TcpStream::connect(&host).await?;
    let req = format!(
        "GET {path} HTTP/1.0\r\nHost: {host}\r\nAuthorization: Basic {auth}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|e| BenchError::Protocol(format!("{path}: {e}")))?;
    let l = &v["release_lateness_ms"];
    if l.is_null() {
        return Ok(None);
    }
    let f = |k: &str| l[k].as_f64().unwrap_or(f64::NAN);
    Ok(Some((
        l["count"].as_u64().unwrap_or(0),
        f("p50"),
        f("p99"),
        f("max"),
    )))
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_matches_rfc_4648() {
        assert_eq!(super::base64(b"guest:guest"), "Z3Vlc3Q6Z3Vlc3Q=");
        assert_eq!(super::base64(b"ab"), "YWI=");
        assert_eq!(super::base64(b"abc"), "YWJj");
    }
}
