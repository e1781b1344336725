//! Dead-lettering, in the words of the spec (RabbitMQ 4.0 "Dead Letter Exchanges",
//! https://www.rabbitmq.com/docs/dlx): what a message becomes when it is dead-lettered, how it is routed, and
//! which targets are dropped as cycles. The triggers (rejected, expired, maxlen, delivery_limit)
//! are decided by [`crate::queue::QueueState`]; carrying the result to the target queues is the
//! server's business. docs/dead-lettering.md maps every rule to its tests.
//!
//! - [`headers`]: `x-death`, `x-first-death-*`, `x-last-death-*`, `original-expiration`.
//! - [`cycles`]: dropping targets that close a cycle with no rejection in it.

mod cycles;
mod headers;
mod origin;
pub(crate) mod raw;

#[cfg(test)]
mod raw_tests;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use charon_protocol::{BasicProperties, RawProperties};

use crate::message::Message;
use crate::routing::header_strings;
pub use cycles::{is_cycle, is_cycle_raw};
pub use origin::original_target;

/// Why a message left its queue other than by acknowledgement (the `reason` of `x-death`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// basic.reject / basic.nack with requeue=false.
    Rejected,
    /// Its TTL passed.
    Expired,
    /// The queue exceeded max-length / max-length-bytes.
    Maxlen,
    /// It was returned more often than the delivery limit.
    DeliveryLimit,
}

impl Reason {
    /// The `x-death` reason text.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Rejected => "rejected",
            Reason::Expired => "expired",
            Reason::Maxlen => "maxlen",
            Reason::DeliveryLimit => "delivery_limit",
        }
    }
}

/// Where a queue dead-letters to: its dead-letter exchange and optional routing key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DlxSettings {
    /// `dead-letter-exchange`.
    pub exchange: Arc<str>,
    /// `dead-letter-routing-key`; `None` keeps the original routing keys.
    pub routing_key: Option<Arc<str>>,
}

/// The dead-lettered copy of a message and the routing keys to route it with.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetterCopy {
    /// The new message: exchange = the DLX, routing key = the dead-letter routing key or the
    /// original one, headers updated.
    pub message: Message,
    /// Its properties, decoded, when the copy was made by decoding; `None` when it was made on
    /// the encoded properties (the usual case: decode `message.properties` if needed).
    pub properties: Option<BasicProperties>,
    /// Routing keys: the dead-letter routing key alone, or the original routing key + CC + BCC.
    pub routing_keys: Vec<Arc<str>>,
}

/// The dead-lettered copy of `original`, dead-lettered out of `queue` for `reason` at `now_ms` (wall clock) towards
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
pub fn make_copy(
    original: &Message,
    queue: &str,
    reason: Reason,
    target: &DlxSettings,
    now_ms: u64,
) -> DeadLetterCopy {
    let routing_key = target
        .routing_key
        .clone()
        .unwrap_or_else(|| original.routing_key.clone());
    // On the encoded properties when it means the same (no CC/BCC headers, no expiration, ...).
    let death = headers::Death {
        queue,
        reason,
        exchange: &original.exchange,
        routing_keys: std::slice::from_ref(&original.routing_key),
        time_secs: now_ms / 1000,
    };
    if let Some(p) = raw::update(&original.properties, &death, target.routing_key.is_some()) {
        let routing_keys = match &target.routing_key {
            Some(k) => vec![k.clone()],
            None => std::iter::once(original.routing_key.clone())
                .chain(original.bcc.iter().cloned())
                .collect(),
        };
        return DeadLetterCopy {
            message: Message::new(
                target.exchange.clone(),
                routing_key,
                p,
                original.body.clone(),
            ),
            properties: None,
            routing_keys,
        };
    }
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
    DeadLetterCopy {
        message: Message::new(
            target.exchange.clone(),
            routing_key,
            RawProperties::encode(&new_props),
            original.body.clone(),
        ),
        properties: Some(new_props),
        routing_keys,
    }
}
