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
    let expiration = props.expiration().as_ref().map(|e| e.as_str().to_string());

    let old: Vec<AMQPValue> = match headers.get(&key("x-death")) {
        Some(AMQPValue::FieldArray(a)) => a.as_slice().to_vec(),
        _ => Vec::new(),
    };
    let is_same = |t: &FieldTable| {
        str_of(t.inner().get(&key("queue"))).as_deref() == Some(d.queue)
            && str_of(t.inner().get(&key("reason"))).as_deref() == Some(d.reason.as_str())
    };
    let mut count = 1;
    let mut rest = Vec::with_capacity(old.len());
    let mut matched = false;
    for v in old {
        match &v {
            AMQPValue::FieldTable(t) if !matched && is_same(t) => {
                count = count_of(t.inner().get(&key("count"))).saturating_add(1);
                matched = true;
            }
            _ => rest.push(v),
        }
    }
    let mut entry = BTreeMap::new();
    entry.insert(key("count"), AMQPValue::LongLongInt(count));
    entry.insert(key("reason"), s(d.reason.as_str()));
    entry.insert(key("queue"), s(d.queue));
    entry.insert(key("time"), AMQPValue::Timestamp(d.time_secs));
    entry.insert(key("exchange"), s(d.exchange));
    entry.insert(
        key("routing-keys"),
        AMQPValue::FieldArray(FieldArray::from(
            d.routing_keys.iter().map(|k| s(k)).collect::<Vec<_>>(),
        )),
    );
    if let Some(e) = &expiration {
        entry.insert(key("original-expiration"), s(e));
    }
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
