//! Dead-lettering, in the words of the spec (RabbitMQ 4.0 "Dead Letter Exchanges",
//! `shared/seeds/004_*`): what a message becomes when it is dead-lettered, how it is routed, and
//! which targets are dropped as cycles. The triggers (rejected, expired, maxlen, delivery_limit)
//! are decided by [`crate::queue::QueueState`]; carrying the result to the target queues is the
//! server's business. docs/dead-lettering.md maps every rule to its tests.
//!
//! - [`headers`]: `x-death`, `x-first-death-*`, `x-last-death-*`, `original-expiration`.
//! - [`cycles`]: dropping targets that close a cycle with no rejection in it.

mod cycles;
mod headers;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use charon_protocol::{AMQPValue, BasicProperties, FieldTable, RawProperties, ShortString};

use crate::message::Message;
pub use crate::queue::DeadReason as Reason;
pub use cycles::is_cycle;

/// Where a queue dead-letters to: its dead-letter exchange and optional routing key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterTarget {
    /// `dead-letter-exchange`.
    pub exchange: Arc<str>,
    /// `dead-letter-routing-key`; `None` keeps the original routing keys.
    pub routing_key: Option<Arc<str>>,
}

/// A dead-lettered message and the routing keys to route it with.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLettered {
    /// The new message: exchange = the DLX, routing key = the dead-letter routing key or the
    /// original one, headers updated.
    pub message: Message,
    /// Routing keys: the dead-letter routing key alone, or the original routing key + CC + BCC.
    pub routing_keys: Vec<Arc<str>>,
}

/// The string values of header `key` (CC / BCC arrays).
pub(crate) fn header_strings(headers: Option<&FieldTable>, key: &str) -> Vec<Arc<str>> {
    let Some(AMQPValue::FieldArray(a)) =
        headers.and_then(|h| h.inner().get(&ShortString::from(key)))
    else {
        return Vec::new();
    };
    a.as_slice()
        .iter()
        .filter_map(|v| match v {
            AMQPValue::LongString(s) => {
                Some(Arc::from(String::from_utf8_lossy(s.as_bytes()).as_ref()))
            }
            AMQPValue::ShortString(s) => Some(Arc::from(s.as_str())),
            _ => None,
        })
        .collect()
}

/// `props` without the header `key`; `None` when it had no such header.
pub(crate) fn without_header(props: &BasicProperties, key: &str) -> Option<BasicProperties> {
    let h = props.headers().as_ref()?;
    let k = ShortString::from(key);
    if !h.inner().contains_key(&k) {
        return None;
    }
    let mut map = h.inner().clone();
    map.remove(&k);
    Some(props.clone().with_headers(FieldTable::from(map)))
}

/// The publish-time BCC rule: a message routed with `BCC` goes on without that header (BCC never
/// reaches any consumer). `None` when there is nothing to remove.
pub fn strip_bcc(props: &BasicProperties) -> Option<RawProperties> {
    without_header(props, "BCC").map(|p| RawProperties::encode(&p))
}

/// The extra routing keys a publish carries in its headers: the `CC` values and the `BCC` values
/// (`rabbit_basic:header_routes`).
pub fn header_routes(props: &BasicProperties) -> (Vec<Arc<str>>, Vec<Arc<str>>) {
    let headers = props.headers().as_ref();
    (
        header_strings(headers, "CC"),
        header_strings(headers, "BCC"),
    )
}

/// The routing keys of a publish: its routing key, then the `CC`, then the `BCC` values.
pub fn publish_routing_keys(routing_key: &str, props: Option<&BasicProperties>) -> Vec<Arc<str>> {
    let mut keys = vec![Arc::from(routing_key)];
    if let Some(p) = props {
        let (cc, bcc) = header_routes(p);
        keys.extend(cc);
        keys.extend(bcc);
    }
    keys
}

/// Dead-letters `original` out of `queue` for `reason` at `now_ms` (wall clock) towards
/// `target`.
///
/// - With a dead-letter routing key the message is routed by it alone and its `CC` header is
///   removed; without one it is routed by all its original routing keys: the routing key, `CC`
///   and `BCC` (its BCC keys as published).
/// - `BCC` is always removed.
/// - `x-death` gains (or updates) the entry for {queue, reason}, most recent first;
///   `x-first-death-*` are set once, `x-last-death-*` every time.
/// - An `expiration` moves to `original-expiration` in the x-death entry and is removed.
/// - The new message's exchange is the DLX and its routing key the dead-letter routing key, or
///   the original routing key.
pub fn dead_letter(
    original: &Message,
    queue: &str,
    reason: Reason,
    target: &DeadLetterTarget,
    now_ms: u64,
) -> DeadLettered {
    let props = original.properties.decode().unwrap_or_default();
    let old_headers = props.headers().as_ref();
    let cc = header_strings(old_headers, "CC");
    let mut death_keys: Vec<Arc<str>> = vec![original.routing_key.clone()];
    death_keys.extend(cc.iter().cloned());
    let routing_keys = match &target.routing_key {
        Some(k) => vec![k.clone()],
        None => {
            let mut keys = death_keys.clone();
            keys.extend(header_strings(old_headers, "BCC"));
            keys.extend(original.bcc.iter().cloned());
            keys
        }
    };
    let new_props = headers::update(
        &props,
        &headers::Death {
            queue,
            reason,
            exchange: &original.exchange,
            routing_keys: &death_keys,
            time_secs: now_ms / 1000,
        },
        target.routing_key.is_some(),
    );
    let routing_key = target
        .routing_key
        .clone()
        .unwrap_or_else(|| original.routing_key.clone());
    DeadLettered {
        message: Message::new(
            target.exchange.clone(),
            routing_key,
            RawProperties::encode(&new_props),
            original.body.clone(),
        ),
        routing_keys,
    }
}
