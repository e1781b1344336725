//! The headers dead-lettering writes (`rabbit_dead_letter:update_x_death_header` in RabbitMQ
//! 4.0): `x-death` (an array of tables, most recent first, one per {queue, reason}),
//! `x-first-death-queue/-reason/-exchange` (set once), `x-last-death-queue/-reason/-exchange`
//! (set every time), `original-expiration` (the removed `expiration`), and the removal of `CC`
//! (with a dead-letter routing key) and `BCC` (always).

use std::collections::BTreeMap;
use std::sync::Arc;

use charon_protocol::{
    AMQPValue, BasicProperties, FieldArray, FieldTable, LongString, ShortString,
};

use super::Reason;

/// One dead-lettering event.
pub(super) struct Death<'a> {
    pub(super) queue: &'a str,
    pub(super) reason: Reason,
    pub(super) exchange: &'a str,
    pub(super) routing_keys: &'a [Arc<str>],
    pub(super) time_secs: u64,
}

fn s(v: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(v))
}

fn key(k: &str) -> ShortString {
    ShortString::from(k)
}

fn str_of(v: Option<&AMQPValue>) -> Option<String> {
    match v? {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_string()),
        _ => None,
    }
}

fn count_of(v: Option<&AMQPValue>) -> i64 {
    match v {
        Some(AMQPValue::LongLongInt(c)) => *c,
        Some(AMQPValue::LongInt(c)) => i64::from(*c),
        Some(AMQPValue::LongUInt(c)) => i64::from(*c),
        Some(AMQPValue::ShortInt(c)) => i64::from(*c),
        _ => 0,
    }
}

/// `props` with the death recorded. `drop_cc`: a dead-letter routing key was used.
pub(super) fn update(props: &BasicProperties, d: &Death<'_>, drop_cc: bool) -> BasicProperties {
    let mut headers: BTreeMap<ShortString, AMQPValue> = props
        .headers()
        .as_ref()
        .map(|h| h.inner().clone())
        .unwrap_or_default();
    headers.remove(&key("BCC"));
    if drop_cc {
        headers.remove(&key("CC"));
    }
    // The TTL as RabbitMQ parsed it, printed back ("0100" -> "100").
    let expiration = props.expiration().as_ref().map(|e| {
        let raw = e.as_str();
        raw.trim()
            .parse::<u64>()
            .map(|v| v.to_string())
            .unwrap_or_else(|_| raw.to_string())
    });

    let old: Vec<AMQPValue> = match headers.get(&key("x-death")) {
        Some(AMQPValue::FieldArray(a)) => a.as_slice().to_vec(),
        _ => Vec::new(),
    };
    let is_same = |t: &FieldTable| {
        str_of(t.inner().get(&key("queue"))).as_deref() == Some(d.queue)
            && str_of(t.inner().get(&key("reason"))).as_deref() == Some(d.reason.as_str())
    };
    // A repeated {queue, reason} keeps its entry (time, exchange, routing-keys and
    // original-expiration of its first death, as RabbitMQ 4.0 `mc:record_death`), with `count`
    // incremented, and moves it to the front.
    let mut previous: Option<BTreeMap<ShortString, AMQPValue>> = None;
    let mut rest = Vec::with_capacity(old.len());
    for v in old {
        match &v {
            AMQPValue::FieldTable(t) if previous.is_none() && is_same(t) => {
                previous = Some(t.inner().clone());
            }
            _ => rest.push(v),
        }
    }
    let entry = match previous {
        Some(mut e) => {
            let count = count_of(e.get(&key("count"))).saturating_add(1);
            e.insert(key("count"), AMQPValue::LongLongInt(count));
            e
        }
        None => {
            let mut e = BTreeMap::new();
            e.insert(key("count"), AMQPValue::LongLongInt(1));
            e.insert(key("reason"), s(d.reason.as_str()));
            e.insert(key("queue"), s(d.queue));
            e.insert(key("time"), AMQPValue::Timestamp(d.time_secs));
            e.insert(key("exchange"), s(d.exchange));
            e.insert(
                key("routing-keys"),
                AMQPValue::FieldArray(FieldArray::from(
                    d.routing_keys.iter().map(|k| s(k)).collect::<Vec<_>>(),
                )),
            );
            if let Some(e2) = &expiration {
                e.insert(key("original-expiration"), s(e2));
            }
            e
        }
    };
    let mut deaths = vec![AMQPValue::FieldTable(FieldTable::from(entry))];
    deaths.extend(rest);
    headers.insert(
        key("x-death"),
        AMQPValue::FieldArray(FieldArray::from(deaths)),
    );

    for (suffix, value) in [
        ("queue", d.queue),
        ("reason", d.reason.as_str()),
        ("exchange", d.exchange),
    ] {
        headers
            .entry(key(&format!("x-first-death-{suffix}")))
            .or_insert_with(|| s(value));
        headers.insert(key(&format!("x-last-death-{suffix}")), s(value));
    }
    rebuild(props, FieldTable::from(headers), expiration.is_none())
}

/// A copy of `props` with `headers`, and without `expiration` unless `keep_expiration`
/// (`AMQPProperties` has setters only, so unsetting means rebuilding).
fn rebuild(props: &BasicProperties, headers: FieldTable, keep_expiration: bool) -> BasicProperties {
    let mut p = BasicProperties::default().with_headers(headers);
    if let Some(v) = props.content_type() {
        p = p.with_content_type(v.clone());
    }
    if let Some(v) = props.content_encoding() {
        p = p.with_content_encoding(v.clone());
    }
    if let Some(v) = props.delivery_mode() {
        p = p.with_delivery_mode(*v);
    }
    if let Some(v) = props.priority() {
        p = p.with_priority(*v);
    }
    if let Some(v) = props.correlation_id() {
        p = p.with_correlation_id(v.clone());
    }
    if let Some(v) = props.reply_to() {
        p = p.with_reply_to(v.clone());
    }
    if keep_expiration && let Some(v) = props.expiration() {
        p = p.with_expiration(v.clone());
    }
    if let Some(v) = props.message_id() {
        p = p.with_message_id(v.clone());
    }
    if let Some(v) = props.timestamp() {
        p = p.with_timestamp(*v);
    }
    if let Some(v) = props.kind() {
        p = p.with_type(v.clone());
    }
    if let Some(v) = props.user_id() {
        p = p.with_user_id(v.clone());
    }
    if let Some(v) = props.app_id() {
        p = p.with_app_id(v.clone());
    }
    if let Some(v) = props.cluster_id() {
        p = p.with_cluster_id(v.clone());
    }
    p
}
