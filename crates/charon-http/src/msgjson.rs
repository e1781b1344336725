//! Messages as the management API shows and takes them: properties as RabbitMQ's JSON
//! (headers decoded, so `x-death` is an array of objects with `count`, `reason`, `queue`,
//! `exchange`, `routing-keys`, `time`), payloads as UTF-8 text or base64.

use base64::Engine;
use charon_protocol::{BasicProperties, ShortString};
use charon_server::admin::json::{json_to_table, table_to_json};
use serde_json::{Map, Value, json};

use crate::error::ApiError;

/// A message's properties as JSON (only those set).
pub fn properties_json(p: &BasicProperties) -> Value {
    let mut m = Map::new();
    let s = |v: &Option<ShortString>| v.as_ref().map(|s| Value::from(s.as_str()));
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            m.insert(k.to_string(), v);
        }
    };
    put("content_type", s(p.content_type()));
    put("content_encoding", s(p.content_encoding()));
    put("headers", p.headers().as_ref().map(table_to_json));
    put("delivery_mode", p.delivery_mode().map(Value::from));
    put("priority", p.priority().map(Value::from));
    put("correlation_id", s(p.correlation_id()));
    put("reply_to", s(p.reply_to()));
    put("expiration", s(p.expiration()));
    put("message_id", s(p.message_id()));
    put("timestamp", p.timestamp().map(Value::from));
    put("type", s(p.kind()));
    put("user_id", s(p.user_id()));
    put("app_id", s(p.app_id()));
    put("cluster_id", s(p.cluster_id()));
    Value::Object(m)
}

/// Properties from the API's JSON (`POST .../publish`).
pub fn properties_from_json(v: Option<&Value>) -> Result<BasicProperties, ApiError> {
    let mut p = BasicProperties::default();
    let Some(v) = v else { return Ok(p) };
    let Some(o) = v.as_object() else {
        if v.is_null() {
            return Ok(p);
        }
        return Err(ApiError::BadRequest("properties must be an object".into()));
    };
    let text = |k: &str| -> Result<Option<ShortString>, ApiError> {
        match o.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(ShortString::from(s.as_str()))),
            Some(Value::Number(n)) => Ok(Some(ShortString::from(n.to_string()))),
            Some(other) => Err(ApiError::BadRequest(format!("{k}: bad value {other}"))),
        }
    };
    let int = |k: &str| -> Result<Option<u64>, ApiError> {
        match o.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n
                .as_u64()
                .map(Some)
                .ok_or_else(|| ApiError::BadRequest(format!("{k}: not an integer"))),
            Some(Value::String(s)) => s
                .parse()
                .map(Some)
                .map_err(|_| ApiError::BadRequest(format!("{k}: not an integer"))),
            Some(other) => Err(ApiError::BadRequest(format!("{k}: bad value {other}"))),
        }
    };
    if let Some(x) = text("content_type")? {
        p = p.with_content_type(x);
    }
    if let Some(x) = text("content_encoding")? {
        p = p.with_content_encoding(x);
    }
    match o.get("headers") {
        Some(Value::Object(h)) => p = p.with_headers(json_to_table(h)),
        None | Some(Value::Null) => {}
        Some(_) => return Err(ApiError::BadRequest("headers must be an object".into())),
    }
    if let Some(x) = int("delivery_mode")? {
        p = p.with_delivery_mode(u8::try_from(x).unwrap_or(1));
    }
    if let Some(x) = int("priority")? {
        p = p.with_priority(u8::try_from(x).unwrap_or(u8::MAX));
    }
    if let Some(x) = text("correlation_id")? {
        p = p.with_correlation_id(x);
    }
    if let Some(x) = text("reply_to")? {
        p = p.with_reply_to(x);
    }
    if let Some(x) = text("expiration")? {
        p = p.with_expiration(x);
    }
    if let Some(x) = text("message_id")? {
        p = p.with_message_id(x);
    }
    if let Some(x) = int("timestamp")? {
        p = p.with_timestamp(x);
    }
    if let Some(x) = text("type")? {
        p = p.with_type(x);
    }
    if let Some(x) = text("user_id")? {
        p = p.with_user_id(x);
    }
    if let Some(x) = text("app_id")? {
        p = p.with_app_id(x);
    }
    if let Some(x) = text("cluster_id")? {
        p = p.with_cluster_id(x);
    }
    Ok(p)
}

/// A payload as (text, encoding): `auto` gives UTF-8 text when the body is valid UTF-8, else
/// base64; `base64` always base64. `truncate` cuts the body first.
pub fn payload(body: &[u8], encoding: &str, truncate: Option<usize>) -> (String, &'static str) {
    let body = match truncate {
        Some(n) if n < body.len() => &body[..n],
        _ => body,
    };
    if encoding != "base64"
        && let Ok(s) = std::str::from_utf8(body)
    {
        return (s.to_string(), "string");
    }
    (
        base64::engine::general_purpose::STANDARD.encode(body),
        "base64",
    )
}

/// One message in the shape of RabbitMQ's `POST .../get` answer.
pub fn message_json(
    m: &charon_core::Message,
    redelivered: bool,
    message_count: u32,
    encoding: &str,
    truncate: Option<usize>,
) -> Value {
    let props = m
        .properties
        .decode()
        .map(|p| properties_json(&p))
        .unwrap_or_else(|_| json!({}));
    let (payload, enc) = payload(m.body.wire_bytes(), encoding, truncate);
    json!({
        "payload_bytes": m.body.len(),
        "redelivered": redelivered,
        "exchange": &*m.exchange,
        "routing_key": &*m.routing_key,
        "message_count": message_count,
        "properties": props,
        "payload": payload,
        "payload_encoding": enc,
    })
}
