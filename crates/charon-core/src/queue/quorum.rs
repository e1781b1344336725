//! What quorum queues add to a delivery: the `x-delivery-count` header (AMQP `l`), the number of
//! failed deliveries before this one (basic.reject / basic.nack with requeue=true; returns by a
//! closed channel or basic.recover do not count). As RabbitMQ 4.x, it is present only once it is
//! above 0, for basic.consume and basic.get alike (3.10.8 sent 0 with basic.get). The stored
//! message is not changed, so dead-lettered copies do not carry it.

use charon_protocol::{AMQPValue, RawProperties, ShortString};

/// The properties a quorum queue delivers the message with: `props` plus `x-delivery-count`
/// once `returns` is above 0; `None` (send `props` as they are) before.
pub fn delivery_properties(props: &RawProperties, returns: u32) -> Option<RawProperties> {
    (returns > 0).then(|| with_delivery_count(props, returns))
}

/// `props` with `x-delivery-count` = `returns`.
pub fn with_delivery_count(props: &RawProperties, returns: u32) -> RawProperties {
    let decoded = props.decode().unwrap_or_default();
    let mut headers = decoded.headers().clone().unwrap_or_default();
    headers.insert(
        ShortString::from("x-delivery-count"),
        AMQPValue::LongLongInt(i64::from(returns)),
    );
    RawProperties::encode(&decoded.with_headers(headers))
}

#[cfg(test)]
mod tests {
    use charon_protocol::{BasicProperties, FieldTable, LongString};

    use super::*;

    #[test]
    fn first_delivery_has_no_x_delivery_count() {
        let p = RawProperties::encode(&BasicProperties::default().with_delivery_mode(2));
        assert!(delivery_properties(&p, 0).is_none());
        assert!(delivery_properties(&p, 1).is_some());
    }

    #[test]
    fn quorum_delivery_carries_x_delivery_count_as_signed_64_bit() {
        let mut h = FieldTable::default();
        h.insert(
            ShortString::from("app"),
            AMQPValue::LongString(LongString::from("v")),
        );
        let p = RawProperties::encode(
            &BasicProperties::default()
                .with_headers(h)
                .with_delivery_mode(2),
        );
        let out = with_delivery_count(&p, 3).decode().unwrap_or_default();
        let headers = out.headers().clone().unwrap_or_default();
        assert_eq!(
            headers.inner().get(&ShortString::from("x-delivery-count")),
            Some(&AMQPValue::LongLongInt(3))
        );
        assert!(headers.inner().contains_key(&ShortString::from("app")));
        assert_eq!(out.delivery_mode(), &Some(2));
    }
}
