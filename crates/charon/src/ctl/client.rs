//! The management API client `ctl` uses (ureq, basic auth). API errors come back as one line:
//! the API's `reason` and the HTTP status.

use anyhow::Context;
use base64::Engine;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

/// A failed API call: the message to print and the exit code (rabbitmqctl's: 69 unreachable,
/// 65 data error, 64 usage).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct CtlError {
    pub(crate) message: String,
    pub(crate) code: i32,
}

pub(crate) struct Client {
    agent: ureq::Agent,
    base: String,
    auth: String,
}

/// Percent-encodes a path segment.
pub(crate) fn enc(s: &str) -> String {
    utf8_percent_encode(s, NON_ALPHANUMERIC).to_string()
}

impl Client {
    pub(crate) fn new(url: &str, user: &str, password: &str) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        Self {
            agent,
            base: url.trim_end_matches('/').to_string(),
            auth: format!("Basic {token}"),
        }
    }

    /// Sends a request; returns the JSON body (Null when empty) or the API's reason.
    pub(crate) fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<Value> {
        let url = format!("{}{}", self.base, path);
        let result = match method {
            "PUT" | "POST" => {
                let mut r = if method == "PUT" {
                    self.agent.put(&url)
                } else {
                    self.agent.post(&url)
                }
                .header("Authorization", &self.auth);
                for (k, v) in headers {
                    r = r.header(*k, *v);
                }
                r.send_json(body.cloned().unwrap_or(Value::Object(Default::default())))
            }
            "DELETE" => {
                let mut r = self.agent.delete(&url).header("Authorization", &self.auth);
                for (k, v) in headers {
                    r = r.header(*k, *v);
                }
                r.call()
            }
            _ => self
                .agent
                .get(&url)
                .header("Authorization", &self.auth)
                .call(),
        };
        let mut resp = match result {
            Ok(r) => r,
            Err(e) => {
                return Err(CtlError {
                    message: format!("cannot reach the management API at {url}: {e}"),
                    code: 69,
                }
                .into());
            }
        };
        let status = resp.status();
        let text = resp
            .body_mut()
            .read_to_string()
            .context("reading the answer")?;
        let value: Value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        if !status.is_success() {
            let reason = value
                .get("reason")
                .map(|r| r.as_str().map(str::to_string).unwrap_or(r.to_string()))
                .unwrap_or_else(|| value.to_string());
            let code = match status.as_u16() {
                404 => 65,
                401 => 77,
                _ => 65,
            };
            return Err(CtlError {
                message: format!("{reason} (HTTP {})", status.as_u16()),
                code,
            }
            .into());
        }
        Ok(value)
    }

    pub(crate) fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.call("GET", path, None, &[])
    }
}
