//! A plain dead-letter record for tests: record `i` of queue `dlq`, rejected from `q`, a 4-byte
//! body, created at a fixed time plus `i` ms. Tests override fields with struct update syntax.

use bytes::Bytes;
use charon_archive::NewRecord;
use serde_json::json;

pub(crate) fn record(i: usize) -> NewRecord {
    NewRecord {
        stable_key: format!("k{i}"),
        vhost: "/".into(),
        queue: "dlq".into(),
        original_queue: Some("q".into()),
        original_exchange: Some("x".into()),
        original_routing_keys: vec!["rk".into()],
        reason: Some("rejected".into()),
        death_count: 1,
        message_id: Some(format!("m{i}")),
        correlation_id: None,
        key: None,
        content_type: None,
        properties: json!({}).to_string(),
        headers: "{}".into(),
        amqp_properties: Bytes::new(),
        payload: Bytes::from_static(b"body"),
        error_message: None,
        error_stacktrace: None,
        error_fingerprint: None,
        created_at: 1_700_000_000_000 + i as i64,
    }
}
