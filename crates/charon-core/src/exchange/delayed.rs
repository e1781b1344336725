//! The delayed message exchange, compatible with RabbitMQ's `rabbitmq_delayed_message_exchange`
//! plugin: an exchange of type `x-delayed-message` routes like its `x-delayed-type` (direct,
//! fanout, topic, headers) — its bindings live in that type's table — but a message published
//! to it with an integer header `x-delay` in `1..=4294967295` (ms) is routed only when its delay
//! has passed (by the server, `exchange_delay`). A missing, non-integer, zero or negative
//! `x-delay` routes at once, as the plugin does.

use charon_protocol::{AMQPValue, FieldTable};

use super::ExchangeKind;
use crate::error::CoreError;
use crate::value::{as_int_arg, as_longstr, lookup};

/// The exchange type name.
pub const DELAYED_TYPE: &str = "x-delayed-message";
/// The declare argument naming the routing type.
pub const DELAYED_TYPE_ARG: &str = "x-delayed-type";
/// The message header carrying the delay (ms).
pub const DELAY_HEADER: &str = "x-delay";
/// Largest delay the plugin honours (Erlang's maximum timer).
pub const MAX_DELAY: u64 = 4_294_967_295;

/// The routing kind of a delayed exchange declared with `arguments`, with the plugin's errors.
pub fn routing_kind(arguments: &FieldTable) -> Result<ExchangeKind, CoreError> {
    match lookup(arguments, DELAYED_TYPE_ARG).and_then(as_longstr) {
        Some(t) if t == DELAYED_TYPE.as_bytes() => Err(CoreError::Precondition(
            "Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'".into(),
        )),
        Some(t) => String::from_utf8_lossy(t).parse(),
        None => Err(CoreError::Precondition(
            "Invalid argument, 'x-delayed-type' must be an existing exchange type".into(),
        )),
    }
}

/// The delay of a message with `headers` (ms), when it is to be delayed.
pub fn delay_of(headers: Option<&FieldTable>) -> Option<u64> {
    let v = lookup(headers?, DELAY_HEADER)?;
    let d = match v {
        AMQPValue::Float(_) | AMQPValue::Double(_) | AMQPValue::DecimalValue(_) => None,
        other => as_int_arg(other),
    }?;
    u64::try_from(d)
        .ok()
        .filter(|d| (1..=MAX_DELAY).contains(d))
}

#[cfg(test)]
mod tests {
    use super::*;
    use charon_protocol::{LongString, ShortString};

    fn t(k: &str, v: AMQPValue) -> FieldTable {
        let mut t = FieldTable::default();
        t.insert(ShortString::from(k), v);
        t
    }

    #[test]
    fn routing_kind_follows_the_plugin() {
        let s = |v: &str| AMQPValue::LongString(LongString::from(v));
        assert_eq!(
            routing_kind(&t(DELAYED_TYPE_ARG, s("topic"))).ok(),
            Some(ExchangeKind::Topic)
        );
        assert_eq!(
            routing_kind(&FieldTable::default()).err().map(|e| e.reply_text()),
            Some("PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing exchange type".into())
        );
        assert!(routing_kind(&t(DELAYED_TYPE_ARG, s(DELAYED_TYPE))).is_err());
        assert_eq!(
            routing_kind(&t(DELAYED_TYPE_ARG, s("zqxwv123")))
                .err()
                .map(|e| e.reply_text()),
            Some("PRECONDITION_FAILED - unknown exchange type 'zqxwv123'".into())
        );
    }

    #[test]
    fn only_positive_integer_delays_delay() {
        assert_eq!(
            delay_of(Some(&t(DELAY_HEADER, AMQPValue::LongInt(5000)))),
            Some(5000)
        );
        assert_eq!(
            delay_of(Some(&t(DELAY_HEADER, AMQPValue::LongInt(-5)))),
            None
        );
        assert_eq!(
            delay_of(Some(&t(DELAY_HEADER, AMQPValue::LongInt(0)))),
            None
        );
        assert_eq!(
            delay_of(Some(&t(DELAY_HEADER, AMQPValue::LongLongInt(1 << 40)))),
            None
        );
        assert_eq!(delay_of(Some(&t("other", AMQPValue::LongInt(5)))), None);
        assert_eq!(delay_of(None), None);
    }
}
