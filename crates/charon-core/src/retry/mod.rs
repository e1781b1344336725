//! Retries with backoff inside a queue (a Charon extension, `docs/retries.md`).
//!
//! A queue with retry settings does not dead-letter a message a consumer rejects (or nacks with
//! `requeue=false`, or with `requeue=true` under `retry-on-requeue`): it *parks* it until the
//! delay for its attempt has passed, then puts it at the tail of the same queue with the header
//! `x-retry-count` = attempt (1, 2, ...). Once `x-retry-count` has reached `retry-limit`, the next
//! rejection dead-letters it as usual (reason `rejected`). With `retry-order-key`, later messages
//! with the same key are held back while one of that key is retrying.
//!
//! - [`settings`]: argument/policy keys, validation, effective settings.
//! - [`parking`]: [`Retrier`], the parked messages by due time and the held keys of one queue;
//!   `due`: the compact due-time index of the parked messages.
//! - this module: the settings' types, the delay for an attempt, the header helpers.
//!
//! Pure: the time (`now_ms`) and the randomness for jitter (`entropy`) are passed in.

mod due;
mod lane;
pub mod parking;
pub mod settings;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use charon_protocol::raw_table as rt;
use charon_protocol::{AMQPValue, RawProperties, ShortString};

use crate::dead_letter::raw::editable;

use crate::message::Message;

pub use parking::{Retrier, RetryStats};
pub use settings::RetryKeys;

/// The header carrying the attempt number of a retried message.
pub const RETRY_COUNT_HEADER: &str = "x-retry-count";

/// How long each attempt waits.
#[derive(Debug, Clone, PartialEq)]
pub enum Schedule {
    /// Attempt n waits `delays[n-1]` (the last entry for attempts beyond the list).
    Delays(Vec<u64>),
    /// Attempt n waits `initial × multiplier^(n-1)`, capped at `max`, then spread by `jitter`:
    /// uniformly within `[d × (1 - jitter), d × (1 + jitter)]`, capped at `max` again.
    Backoff {
        /// First delay (ms).
        initial: u64,
        /// Growth per attempt (≥ 1).
        multiplier: f64,
        /// Cap (ms).
        max: Option<u64>,
        /// Spread (0..=1).
        jitter: f64,
    },
}

/// Where a message's ordering key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrderKey {
    /// A basic property: `message_id`, `correlation_id`, `type`, `app_id`, `user_id`, `reply_to`.
    Property(Prop),
    /// A header of that name.
    Header(String),
}

/// The properties a key can come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prop {
    /// `message_id`.
    MessageId,
    /// `correlation_id`.
    CorrelationId,
    /// `type`.
    Type,
    /// `app_id`.
    AppId,
    /// `user_id`.
    UserId,
    /// `reply_to`.
    ReplyTo,
}

impl OrderKey {
    /// A property name (`message_id`, `message-id`, `correlation_id`, `type`, `app_id`,
    /// `user_id`, `reply_to`) names the property; anything else a header.
    pub fn parse(s: &str) -> OrderKey {
        let prop = match s.replace('-', "_").as_str() {
            "message_id" => Some(Prop::MessageId),
            "correlation_id" => Some(Prop::CorrelationId),
            "type" => Some(Prop::Type),
            "app_id" => Some(Prop::AppId),
            "user_id" => Some(Prop::UserId),
            "reply_to" => Some(Prop::ReplyTo),
            _ => None,
        };
        prop.map_or_else(|| OrderKey::Header(s.to_string()), OrderKey::Property)
    }

    /// The key of `message`, if it has one (a header value is keyed by its type and value).
    pub fn of(&self, message: &Message) -> Option<Arc<[u8]>> {
        let props = message.properties.decode().ok()?;
        let short = |s: &Option<ShortString>| s.as_ref().map(|s| Arc::from(s.as_str().as_bytes()));
        match self {
            OrderKey::Property(p) => match p {
                Prop::MessageId => short(props.message_id()),
                Prop::CorrelationId => short(props.correlation_id()),
                Prop::Type => short(props.kind()),
                Prop::AppId => short(props.app_id()),
                Prop::UserId => short(props.user_id()),
                Prop::ReplyTo => short(props.reply_to()),
            },
            OrderKey::Header(h) => {
                let v = crate::value::lookup(props.headers().as_ref()?, h)?;
                let text = match crate::value::as_longstr(v) {
                    Some(b) => [b"s:".as_slice(), b].concat(),
                    None => format!("v:{v:?}").into_bytes(),
                };
                Some(Arc::from(text))
            }
        }
    }
}

/// A queue's retry settings in force.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrySettings {
    /// Retries before dead-lettering (a message is delivered at most `limit + 1` times).
    pub limit: u32,
    /// Delays.
    pub schedule: Schedule,
    /// Also retry `requeue=true` (basic.nack/basic.reject) with the same backoff.
    pub on_requeue: bool,
    /// Hold later messages of the same key while one is retrying.
    pub order_key: Option<OrderKey>,
}

impl RetrySettings {
    /// The delay (ms) before retry `attempt` (1-based). `entropy` is any random `u64`; it is
    /// used only with jitter.
    pub fn delay(&self, attempt: u32, entropy: u64) -> u64 {
        match &self.schedule {
            Schedule::Delays(d) => {
                let i = (attempt.max(1) as usize - 1).min(d.len().saturating_sub(1));
                d.get(i).copied().unwrap_or(0)
            }
            Schedule::Backoff {
                initial,
                multiplier,
                max,
                jitter,
            } => {
                let cap = max.map_or(settings::MAX_DELAY, |m| m.min(settings::MAX_DELAY)) as f64;
                let exp = i32::try_from(attempt.max(1) - 1).unwrap_or(i32::MAX);
                let base = (*initial as f64 * multiplier.powi(exp)).min(cap);
                let u = (entropy >> 11) as f64 / (1u64 << 53) as f64;
                let d = base * (1.0 - jitter + 2.0 * jitter * u);
                d.clamp(0.0, cap).round() as u64
            }
        }
    }
}

/// The message's `x-retry-count` (0 when absent or not an integer). Read from the encoded
/// headers when they are editable in place (no decode), else decoded.
pub fn retry_count(message: &Message) -> u32 {
    if let Some((_, fields)) = editable(&message.properties) {
        return rt::last(&fields, RETRY_COUNT_HEADER)
            .and_then(|f| f.value.int())
            .and_then(|i| u32::try_from(i).ok())
            .unwrap_or(0);
    }
    let Ok(props) = message.properties.decode() else {
        return 0;
    };
    props
        .headers()
        .as_ref()
        .and_then(|h| crate::value::lookup(h, RETRY_COUNT_HEADER))
        .and_then(crate::value::as_int_arg)
        .and_then(|i| u32::try_from(i).ok())
        .unwrap_or(0)
}

/// `message` with `x-retry-count` = `count` (body shared, paged bodies stay paged). The
/// encoded headers are edited in place when they can be (the other entries copied byte for
/// byte), else decoded and encoded again: the same meaning either way.
pub fn with_retry_count(message: &Message, count: u32) -> Message {
    let mut m = message.clone();
    if let Some((split, fields)) = editable(&message.properties) {
        let body = split.headers.unwrap_or_default();
        let mut out = Vec::with_capacity(body.len() + 24);
        for f in fields
            .iter()
            .filter(|f| f.key != RETRY_COUNT_HEADER.as_bytes())
        {
            out.extend_from_slice(f.bytes);
        }
        rt::put_key(&mut out, RETRY_COUNT_HEADER);
        rt::put_i64(&mut out, i64::from(count));
        m.properties = RawProperties::with_headers_body(&split, &out);
        return m;
    }
    m.properties = with_retry_count_decoded(&message.properties, count);
    m
}

/// [`with_retry_count`]'s decoding path.
fn with_retry_count_decoded(raw: &RawProperties, count: u32) -> RawProperties {
    let props = raw.decode().unwrap_or_default();
    let mut headers = props.headers().clone().unwrap_or_default();
    headers.insert(
        ShortString::from(RETRY_COUNT_HEADER),
        AMQPValue::LongLongInt(i64::from(count)),
    );
    RawProperties::encode(&props.with_headers(headers))
}

#[cfg(test)]
mod raw_count_tests {
    use charon_protocol::{AMQPValue, BasicProperties, FieldTable, RawProperties, ShortString};
    use proptest::prelude::*;

    use super::{with_retry_count, with_retry_count_decoded};
    use crate::message::Message;

    proptest! {
        #[test]
        fn edited_in_place_means_what_the_decoding_path_makes(
            keys in prop::collection::vec("[a-z]{1,3}|x-retry-count", 0..4),
            ints in prop::collection::vec(any::<i32>(), 4),
            count in 0u32..10,
            with_id in any::<bool>(),
        ) {
            let mut t = FieldTable::default();
            for (k, v) in keys.iter().zip(&ints) {
                t.insert(ShortString::from(k.as_str()), AMQPValue::LongInt(*v));
            }
            let mut p = BasicProperties::default().with_headers(t);
            if with_id {
                p = p.with_message_id(ShortString::from("id"));
            }
            let raw = RawProperties::encode(&p);
            let m = Message::new("x", "k", raw.clone(), bytes::Bytes::new());
            let fast = with_retry_count(&m, count);
            prop_assert_eq!(fast.properties.decode().ok(), with_retry_count_decoded(&raw, count).decode().ok());
            prop_assert_eq!(super::retry_count(&fast), count);
        }
    }
}
