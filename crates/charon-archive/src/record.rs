//! A stored record and its JSON (the API's shape, docs/archive.md).

use base64::Engine;
use serde_json::Value;

use crate::sql::Cell;
use crate::time::format_ms;

/// The columns a record is read with, in [`Record::from_row`]'s order.
pub const RECORD_COLUMNS: &str = "id, vhost, queue, original_queue, original_exchange, \
    original_routing_keys, reason, death_count, message_id, correlation_id, message_key, \
    content_type, properties, headers, amqp_properties, payload, error_message, error_stacktrace, \
    error_fingerprint, status, replay_count, last_replayed_at, resolved_by, resolution_note, \
    created_at, updated_at";

/// Record statuses.
pub mod status {
    /// Archived, nothing done yet.
    pub const PENDING: &str = "PENDING";
    /// Being replayed.
    pub const PROCESSING: &str = "PROCESSING";
    /// Replayed: routed and, if persistent, stored.
    pub const REPLAYED: &str = "REPLAYED";
    /// A replay failed.
    pub const FAILED: &str = "FAILED";
    /// Skipped by an operator.
    pub const SKIPPED: &str = "SKIPPED";
    /// All of them.
    pub const ALL: [&str; 5] = [PENDING, PROCESSING, REPLAYED, FAILED, SKIPPED];
}

/// One archived dead letter.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub struct Record {
    pub id: i64,
    pub vhost: String,
    pub queue: String,
    pub original_queue: Option<String>,
    pub original_exchange: Option<String>,
    pub original_routing_keys: Vec<String>,
    pub reason: Option<String>,
    pub death_count: i64,
    pub message_id: Option<String>,
    pub correlation_id: Option<String>,
    pub key: Option<String>,
    pub content_type: Option<String>,
    pub properties: Value,
    pub headers: Value,
    pub amqp_properties: Vec<u8>,
    pub payload: Vec<u8>,
    pub error_message: Option<String>,
    pub error_stacktrace: Option<String>,
    pub error_fingerprint: Option<String>,
    pub status: String,
    pub replay_count: i64,
    pub last_replayed_at: Option<i64>,
    pub resolved_by: Option<String>,
    pub resolution_note: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

fn parse_json(c: &Cell) -> Value {
    serde_json::from_str(&c.text()).unwrap_or(Value::Null)
}

impl Record {
    /// A row selected with [`RECORD_COLUMNS`].
    pub fn from_row(r: &[Cell]) -> Option<Record> {
        if r.len() < 26 {
            return None;
        }
        Some(Record {
            id: r[0].int(),
            vhost: r[1].text(),
            queue: r[2].text(),
            original_queue: r[3].opt_text(),
            original_exchange: r[4].opt_text(),
            original_routing_keys: serde_json::from_str(&r[5].text()).unwrap_or_default(),
            reason: r[6].opt_text(),
            death_count: r[7].int(),
            message_id: r[8].opt_text(),
            correlation_id: r[9].opt_text(),
            key: r[10].opt_text(),
            content_type: r[11].opt_text(),
            properties: parse_json(&r[12]),
            headers: parse_json(&r[13]),
            amqp_properties: r[14].bytes(),
            payload: r[15].bytes(),
            error_message: r[16].opt_text(),
            error_stacktrace: r[17].opt_text(),
            error_fingerprint: r[18].opt_text(),
            status: r[19].text(),
            replay_count: r[20].int(),
            last_replayed_at: r[21].opt_int(),
            resolved_by: r[22].opt_text(),
            resolution_note: r[23].opt_text(),
            created_at: r[24].int(),
            updated_at: r[25].int(),
        })
    }

    /// The API's JSON.
    pub fn to_json(&self) -> Value {
        self.clone().into_json()
    }

    /// The API's JSON, taking the record apart (a list page moves its records' headers and
    /// properties into the answer instead of copying them).
    pub fn into_json(self) -> Value {
        let (payload, encoding) = payload_json(&self.payload);
        let opt = |s: Option<String>| s.map_or(Value::Null, Value::String);
        let mut m = serde_json::Map::with_capacity(27);
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_string(), v);
        };
        put("id", self.id.into());
        put("vhost", self.vhost.into());
        put("queue", self.queue.into());
        put("original_queue", opt(self.original_queue));
        put("original_exchange", opt(self.original_exchange));
        put("original_routing_keys", self.original_routing_keys.into());
        put("reason", opt(self.reason));
        put("death_count", self.death_count.into());
        put("message_id", opt(self.message_id));
        put("correlation_id", opt(self.correlation_id));
        put("key", opt(self.key));
        put("content_type", opt(self.content_type));
        put("properties", self.properties);
        put("headers", self.headers);
        put("payload", payload.into());
        put("payload_encoding", encoding.into());
        put("payload_bytes", self.payload.len().into());
        put("error_message", opt(self.error_message));
        put("error_stacktrace", opt(self.error_stacktrace));
        put("error_fingerprint", opt(self.error_fingerprint));
        put("status", self.status.into());
        put("replay_count", self.replay_count.into());
        put(
            "last_replayed_at",
            self.last_replayed_at.map(format_ms).into(),
        );
        put("resolved_by", opt(self.resolved_by));
        put("resolution_note", opt(self.resolution_note));
        put("created_at", format_ms(self.created_at).into());
        put("updated_at", format_ms(self.updated_at).into());
        Value::Object(m)
    }
}

/// A body as the API shows it: text when UTF-8, else base64 (RabbitMQ's `/get`).
pub fn payload_json(b: &[u8]) -> (String, &'static str) {
    match std::str::from_utf8(b) {
        Ok(s) => (s.to_string(), "string"),
        Err(_) => (
            base64::engine::general_purpose::STANDARD.encode(b),
            "base64",
        ),
    }
}
