//! Minimal `amqp://user:pass@host:port/vhost` parser.

use crate::BenchError;

/// Connection parameters extracted from an AMQP URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpUri {
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// SASL PLAIN user.
    pub user: String,
    /// SASL PLAIN password.
    pub password: String,
    /// Virtual host (decoded).
    pub vhost: String,
}

fn percent_decode(s: &str) -> Result<String, BenchError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .ok_or_else(|| BenchError::Uri(format!("bad escape in {s:?}")))?;
            let v = u8::from_str_radix(hex, 16)
                .map_err(|_| BenchError::Uri(format!("bad escape in {s:?}")))?;
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| BenchError::Uri(format!("non UTF-8 in {s:?}")))
}

impl AmqpUri {
    /// Parses an `amqp://` URI (TLS is not supported).
    pub fn parse(uri: &str) -> Result<Self, BenchError> {
        let rest = uri
            .strip_prefix("amqp://")
            .ok_or_else(|| BenchError::Uri(format!("{uri:?}: only amqp:// is supported")))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        let (userinfo, hostport) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(ui) => match ui.find(':') {
                Some(i) => (percent_decode(&ui[..i])?, percent_decode(&ui[i + 1..])?),
                None => (percent_decode(ui)?, String::new()),
            },
            None => ("guest".into(), "guest".into()),
        };
        let (host, port) = match hostport.rfind(':') {
            Some(i) if !hostport[i..].contains(']') => {
                let port = hostport[i + 1..]
                    .parse()
                    .map_err(|_| BenchError::Uri(format!("{uri:?}: bad port")))?;
                (hostport[..i].to_string(), port)
            }
            _ => (hostport.to_string(), 5672),
        };
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let host = if host.is_empty() {
            "127.0.0.1".into()
        } else {
            host
        };
        let vhost = match path {
            None => "/".into(),
            Some(p) => {
                let p = p.split('?').next().unwrap_or("");
                if p.is_empty() {
                    "/".into()
                } else {
                    percent_decode(p)?
                }
            }
        };
        Ok(Self {
            host,
            port,
            user,
            password,
            vhost,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_default() -> Result<(), BenchError> {
        let u = AmqpUri::parse("amqp://guest:guest@127.0.0.1:5673/%2f")?;
        assert_eq!(u.host, "127.0.0.1");
        assert_eq!(u.port, 5673);
        assert_eq!(u.user, "guest");
        assert_eq!(u.vhost, "/");
        let u = AmqpUri::parse("amqp://localhost")?;
        assert_eq!((u.port, u.vhost.as_str()), (5672, "/"));
        let u = AmqpUri::parse("amqp://a%40b:p@h:1/vh")?;
        assert_eq!((u.user.as_str(), u.vhost.as_str()), ("a@b", "vh"));
        Ok(())
    }
}
