//! Queue x-arguments: parsing into [`QueueArgs`] and validation with
//! RabbitMQ 3.10.8's exact errors (`rabbit_amqqueue:declare_args/0`,
//! `rabbit_quorum_queue` restrictions). Unknown arguments are accepted.

use charon_protocol::{AMQPValue, FieldTable};

use crate::error::CoreError;
use crate::value::{as_int_arg, as_longstr, lookup, type_name};

/// Upper bound of x-expires / x-message-ttl (ten years in ms; verified
/// against RabbitMQ 3.10.8: 315360000001 is `value_too_large`).
pub const MAX_EXPIRY: i64 = 315_360_000_000;
/// RabbitMQ's `?MAX_SUPPORTED_PRIORITY`.
pub const MAX_PRIORITY: i64 = 255;

/// What a full queue does with new messages (`x-overflow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overflow {
    /// Drop (or dead-letter) the oldest messages.
    #[default]
    DropHead,
    /// Refuse the publish (nack to confirming publishers).
    RejectPublish,
    /// Refuse the publish and dead-letter it.
    RejectPublishDlx,
}

/// `x-queue-type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueType {
    /// Classic queue (default).
    #[default]
    Classic,
    /// Quorum queue.
    Quorum,
    /// Stream (accepted by validation; the server may refuse it).
    Stream,
}

/// Parsed and validated queue arguments.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueueArgs {
    /// `x-message-ttl` in ms.
    pub message_ttl: Option<u64>,
    /// `x-expires` in ms.
    pub expires: Option<u64>,
    /// `x-max-length`.
    pub max_length: Option<u64>,
    /// `x-max-length-bytes`.
    pub max_length_bytes: Option<u64>,
    /// `x-overflow`.
    pub overflow: Overflow,
    /// `x-dead-letter-exchange`.
    pub dead_letter_exchange: Option<String>,
    /// `x-dead-letter-routing-key`.
    pub dead_letter_routing_key: Option<String>,
    /// `x-delivery-limit` (quorum queues; negative = unlimited, absent = 20 as in 4.x).
    pub delivery_limit: Option<i64>,
    /// `x-queue-type`.
    pub queue_type: QueueType,
    /// `x-max-priority`.
    pub max_priority: Option<u8>,
    /// `x-single-active-consumer`.
    pub single_active_consumer: bool,
    /// The `x-retry-*` arguments as declared (combined with a policy's `retry-*` keys into
    /// [`Self::retry`]).
    pub retry_declared: crate::retry::RetryKeys,
    /// Retry settings in force (`crate::retry`), `None`: rejected messages are dead-lettered.
    pub retry: Option<crate::retry::RetrySettings>,
    /// `x-consumer-timeout` in ms (RabbitMQ 3.12+): overrides the broker's `consumer_timeout`
    /// for deliveries from this queue. Not validated at declare, as RabbitMQ: a value that is
    /// not a non-negative integer is ignored.
    pub consumer_timeout: Option<u64>,
}

/// The arguments RabbitMQ validates (and compares on redeclare), in its order.
pub const DECLARE_ARGS: &[&str] = &[
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-single-active-consumer",
    "x-queue-type",
    "x-quorum-initial-group-size",
    "x-max-age",
    "x-stream-max-segment-size-bytes",
    "x-initial-cluster-size",
    "x-queue-leader-locator",
];

/// Arguments each queue type supports (`capabilities/0` in 3.10.8);
/// an argument listed for some type but not for the declared one is
/// refused with `... of queue type rabbit_<type>_queue`.
const CLASSIC_ARGS: &[&str] = &[
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-single-active-consumer",
    "x-queue-type",
    "x-queue-master-locator",
];
const QUORUM_ARGS: &[&str] = &[
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-dead-letter-strategy",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
    "x-overflow",
    "x-single-active-consumer",
    "x-queue-type",
    "x-quorum-initial-group-size",
    "x-delivery-limit",
];
const STREAM_ARGS: &[&str] = &[
    "x-max-length-bytes",
    "x-queue-type",
    "x-max-age",
    "x-stream-max-segment-size-bytes",
    "x-initial-cluster-size",
    "x-queue-leader-locator",
];

impl QueueType {
    /// RabbitMQ's module name for the type (used in error texts).
    pub fn module(self) -> &'static str {
        match self {
            QueueType::Classic => "rabbit_classic_queue",
            QueueType::Quorum => "rabbit_quorum_queue",
            QueueType::Stream => "rabbit_stream_queue",
        }
    }

    fn supported_args(self) -> &'static [&'static str] {
        match self {
            QueueType::Classic => CLASSIC_ARGS,
            QueueType::Quorum => QUORUM_ARGS,
            QueueType::Stream => STREAM_ARGS,
        }
    }

    /// The first argument in `args` that some queue type knows but this
    /// one does not support.
    pub fn unsupported_arg(self, args: &FieldTable) -> Option<&str> {
        let own = self.supported_args();
        args.inner().keys().map(|k| k.as_str()).find(|k| {
            !own.contains(k)
                && [CLASSIC_ARGS, QUORUM_ARGS, STREAM_ARGS]
                    .iter()
                    .any(|l| l.contains(k))
        })
    }

    /// The type named by `x-queue-type` (classic when absent or unknown).
    pub fn from_args(args: &FieldTable) -> QueueType {
        match lookup(args, "x-queue-type").and_then(as_longstr) {
            Some(b"quorum") => QueueType::Quorum,
            Some(b"stream") => QueueType::Stream,
            _ => QueueType::Classic,
        }
    }
}

/// Validation failure as RabbitMQ's Erlang term (`{value_negative,-1}`).
type Check = Result<(), String>;

/// RabbitMQ 3.10's `check_int_arg` reports a wrong type as a formatted string, so the
/// reason is printed quoted: `"expected integer, got longstr"`.
fn int_arg(v: &AMQPValue) -> Result<i64, String> {
    as_int_arg(v).ok_or_else(|| format!("\"expected integer, got {}\"", type_name(v)))
}

fn non_neg(v: &AMQPValue) -> Result<i64, String> {
    let i = int_arg(v)?;
    if i < 0 {
        return Err(format!("{{value_negative,{i}}}"));
    }
    Ok(i)
}

fn expiry(i: i64) -> Check {
    if i < 0 {
        Err(format!("{{value_negative,{i}}}"))
    } else if i > MAX_EXPIRY {
        Err(format!("{{value_too_large,{i}}}"))
    } else {
        Ok(())
    }
}

fn longstr_in(v: &AMQPValue, allowed: &[&str], err: &str) -> Check {
    match as_longstr(v) {
        Some(s) if allowed.iter().any(|a| a.as_bytes() == s) => Ok(()),
        Some(_) => Err(err.to_string()),
        None => Err(format!("{{unacceptable_type,{}}}", type_name(v))),
    }
}

fn check_one(key: &str, v: &AMQPValue, args: &FieldTable) -> Check {
    match key {
        "x-expires" => {
            let i = int_arg(v)?;
            if i == 0 {
                return Err("{value_zero,0}".to_string());
            }
            expiry(i)
        }
        "x-message-ttl" => expiry(int_arg(v)?),
        "x-dead-letter-exchange" => as_longstr(v)
            .map(|_| ())
            .ok_or_else(|| format!("{{unacceptable_type,{}}}", type_name(v))),
        "x-dead-letter-routing-key" => match as_longstr(v) {
            Some(_) if lookup(args, "x-dead-letter-exchange").is_none() => {
                Err("routing_key_but_no_dlx_defined".to_string())
            }
            Some(_) => Ok(()),
            None => Err(format!("{{unacceptable_type,{}}}", type_name(v))),
        },
        "x-max-length"
        | "x-max-length-bytes"
        | "x-max-in-memory-length"
        | "x-max-in-memory-bytes"
        | "x-stream-max-segment-size-bytes" => non_neg(v).map(|_| ()),
        "x-max-priority" => {
            let i = non_neg(v)?;
            if i > MAX_PRIORITY {
                return Err(format!("{{max_value_exceeded,{i}}}"));
            }
            Ok(())
        }
        "x-overflow" => longstr_in(
            v,
            &["drop-head", "reject-publish", "reject-publish-dlx"],
            "invalid_overflow",
        ),
        "x-queue-mode" => longstr_in(v, &["default", "lazy"], "invalid_queue_mode"),
        "x-single-active-consumer" => match v {
            AMQPValue::Boolean(_) => Ok(()),
            other => Err(format!("{{unacceptable_type,{}}}", type_name(other))),
        },
        "x-queue-type" => match as_longstr(v) {
            Some(b"classic" | b"quorum" | b"stream") => Ok(()),
            Some(other) => Err(format!(
                "\"unsupported queue type '{}'\"",
                String::from_utf8_lossy(other)
            )),
            None => Err(format!("{{unacceptable_type,{}}}", type_name(v))),
        },
        "x-quorum-initial-group-size" | "x-initial-cluster-size" => {
            if non_neg(v)? == 0 {
                return Err("{value_zero,0}".to_string());
            }
            Ok(())
        }
        "x-max-age" => match as_longstr(v) {
            Some(_) => Ok(()),
            None => Err(format!("{{unacceptable_type,{}}}", type_name(v))),
        },
        "x-queue-leader-locator" => longstr_in(
            v,
            &["client-local", "random", "least-leaders", "balanced"],
            "invalid_queue_locator_arg",
        ),
        _ => Ok(()),
    }
}

fn string_arg(args: &FieldTable, key: &str) -> Option<String> {
    lookup(args, key)
        .and_then(as_longstr)
        .map(|b| String::from_utf8_lossy(b).into_owned())
}

fn u64_arg(args: &FieldTable, key: &str) -> Option<u64> {
    lookup(args, key)
        .and_then(as_int_arg)
        .and_then(|i| u64::try_from(i).ok())
}

impl QueueArgs {
    /// Validate `args` for queue `queue` in `vhost` and parse them.
    /// Errors are RabbitMQ's `invalid arg '...' for queue ...: Reason`.
    pub fn parse(args: &FieldTable, queue: &str, vhost: &str) -> Result<Self, CoreError> {
        if let Some(v) = lookup(args, "x-queue-type")
            && let Err(reason) = check_one("x-queue-type", v, args)
        {
            return Err(CoreError::InvalidQueueArg {
                arg: "x-queue-type".to_string(),
                queue: queue.to_string(),
                vhost: vhost.to_string(),
                reason,
            });
        }
        let queue_type = QueueType::from_args(args);
        if let Some(arg) = queue_type.unsupported_arg(args) {
            return Err(CoreError::UnsupportedQueueArg {
                arg: arg.to_string(),
                queue: queue.to_string(),
                vhost: vhost.to_string(),
                queue_type: queue_type.module(),
            });
        }
        for key in DECLARE_ARGS {
            if let Some(v) = lookup(args, key)
                && let Err(reason) = check_one(key, v, args)
            {
                return Err(CoreError::InvalidQueueArg {
                    arg: (*key).to_string(),
                    queue: queue.to_string(),
                    vhost: vhost.to_string(),
                    reason,
                });
            }
        }
        let retry_declared =
            crate::retry::RetryKeys::from_args(args).map_err(|(arg, reason)| {
                CoreError::InvalidQueueArg {
                    arg,
                    queue: queue.to_string(),
                    vhost: vhost.to_string(),
                    reason,
                }
            })?;
        let overflow = match string_arg(args, "x-overflow").as_deref() {
            Some("reject-publish") => Overflow::RejectPublish,
            Some("reject-publish-dlx") => Overflow::RejectPublishDlx,
            _ => Overflow::DropHead,
        };
        Ok(QueueArgs {
            message_ttl: u64_arg(args, "x-message-ttl"),
            expires: u64_arg(args, "x-expires"),
            max_length: u64_arg(args, "x-max-length"),
            max_length_bytes: u64_arg(args, "x-max-length-bytes"),
            overflow,
            dead_letter_exchange: string_arg(args, "x-dead-letter-exchange"),
            dead_letter_routing_key: string_arg(args, "x-dead-letter-routing-key"),
            delivery_limit: lookup(args, "x-delivery-limit").and_then(as_int_arg),
            queue_type,
            max_priority: u64_arg(args, "x-max-priority").and_then(|p| u8::try_from(p).ok()),
            single_active_consumer: matches!(
                lookup(args, "x-single-active-consumer"),
                Some(AMQPValue::Boolean(true))
            ),
            retry: retry_declared.resolve(None),
            retry_declared,
            consumer_timeout: u64_arg(args, "x-consumer-timeout"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use charon_protocol::{LongString, ShortString};

    fn table(entries: &[(&str, AMQPValue)]) -> FieldTable {
        let mut t = FieldTable::default();
        for (k, v) in entries {
            t.insert(ShortString::from(*k), v.clone());
        }
        t
    }

    fn err(entries: &[(&str, AMQPValue)]) -> String {
        match QueueArgs::parse(&table(entries), "q", "/") {
            Err(e) => e.reply_text(),
            Ok(a) => panic!("expected error, got {a:?}"),
        }
    }

    #[test]
    fn negative_message_ttl_is_value_negative() {
        assert_eq!(
            err(&[("x-message-ttl", AMQPValue::LongInt(-1))]),
            "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'q' in vhost '/': {value_negative,-1}"
        );
    }

    #[test]
    fn string_ttl_is_expected_integer() {
        assert_eq!(
            err(&[(
                "x-message-ttl",
                AMQPValue::LongString(LongString::from("1"))
            )]),
            "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'q' in vhost '/': \"expected integer, got longstr\""
        );
    }

    #[test]
    fn zero_expires_is_value_zero() {
        assert!(err(&[("x-expires", AMQPValue::LongInt(0))]).ends_with("{value_zero,0}"));
    }

    #[test]
    fn unknown_overflow_is_invalid_overflow() {
        assert!(
            err(&[("x-overflow", AMQPValue::LongString(LongString::from("x")))])
                .ends_with(": invalid_overflow")
        );
    }

    #[test]
    fn dlx_routing_key_requires_dlx() {
        assert!(
            err(&[(
                "x-dead-letter-routing-key",
                AMQPValue::LongString(LongString::from("k"))
            )])
            .ends_with(": routing_key_but_no_dlx_defined")
        );
    }

    #[test]
    fn max_priority_above_255_is_rejected() {
        assert!(
            err(&[("x-max-priority", AMQPValue::LongInt(256))])
                .ends_with("{max_value_exceeded,256}")
        );
    }

    #[test]
    fn unknown_x_args_are_accepted_and_known_ones_parsed() {
        let a = QueueArgs::parse(
            &table(&[
                ("x-whatever", AMQPValue::LongInt(-5)),
                ("x-message-ttl", AMQPValue::ShortShortUInt(10)),
                (
                    "x-overflow",
                    AMQPValue::LongString(LongString::from("reject-publish")),
                ),
                ("x-single-active-consumer", AMQPValue::Boolean(true)),
                ("x-max-priority", AMQPValue::LongInt(10)),
            ]),
            "q",
            "/",
        );
        let a = a.ok();
        assert_eq!(a.as_ref().and_then(|a| a.message_ttl), Some(10));
        assert_eq!(
            a.as_ref().map(|a| a.overflow),
            Some(Overflow::RejectPublish)
        );
        assert_eq!(a.as_ref().map(|a| a.single_active_consumer), Some(true));
        assert_eq!(a.as_ref().and_then(|a| a.max_priority), Some(10));
    }
}
