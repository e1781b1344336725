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

/// Record `i` spread over groups and seconds (migrations 20 and 21): two queues, NULL key columns
/// for some, several records of a group in one second, seconds apart and out of order within a
/// group, a few before 1970 (floored, not truncated). `prefix` makes the stable keys.
#[allow(dead_code)]
pub(crate) fn spread(prefix: &str, i: usize) -> NewRecord {
    NewRecord {
        stable_key: format!("{prefix}:{i}"),
        queue: format!("dlq-{}", i % 2),
        original_queue: (!i.is_multiple_of(3)).then(|| format!("q{}", i % 4)),
        reason: (!i.is_multiple_of(5)).then(|| "rejected".to_string()),
        content_type: i.is_multiple_of(4).then(|| "a/b".to_string()),
        created_at: if i.is_multiple_of(11) {
            -1500 - i as i64 * 7
        } else if i.is_multiple_of(2) {
            1_700_000_000_000 + i as i64 * 137
        } else {
            1_700_000_090_000 - i as i64 * 3
        },
        ..record(i)
    }
}

/// Record `i`'s time among records three a ms-step apart (ties), a little out of id order, as
/// batches of several connections are, and a few 100 s early (`i % 37 == 36`) or late
/// (`i % 41 == 3`), as a user's SQL or a moved clock leaves them: time pages' proofs meet strays,
/// and a window's first or last record by time can lie far from the others in id
/// (`driving_set.rs`, `window_walk.rs`).
#[allow(dead_code)]
pub(crate) fn strayed_time(i: usize) -> i64 {
    1_700_000_000_000 + (i / 3) as i64 * 4
        - (i % 5) as i64 * 3
        - if i % 37 == 36 { 100_000 } else { 0 }
        + if i % 41 == 3 { 100_000 } else { 0 }
}
