//! `encode_delivery` against the two encoders it stands for (`encode_delivery_apart`:
//! `encode_basic_deliver` followed by `encode_content`, class basic): the very same octets for
//! any names (including ones longer than a short string), tags, properties, body sizes and
//! frame_max (bodies split over several frames included).
#![allow(clippy::unwrap_used)]

use bytes::BytesMut;
use charon_protocol::*;
use proptest::prelude::*;

fn both(d: &DeliveryFrames<'_>, frame_max: u32, prefix: &[u8]) -> (BytesMut, BytesMut) {
    let mut fused = BytesMut::from(prefix);
    encode_delivery(&mut fused, d, frame_max);
    let mut apart = BytesMut::from(prefix);
    encode_delivery_apart(&mut apart, d, frame_max);
    (fused, apart)
}

#[test]
fn a_usual_delivery_is_the_same_octets() {
    let props = RawProperties::encode(&BasicProperties::default().with_delivery_mode(1));
    for body in [&b""[..], b"0123456789abcdef"] {
        for frame_max in [0, 4096, 9, 8] {
            let d = DeliveryFrames {
                channel: 1,
                consumer_tag: "ctag-1",
                delivery_tag: 42,
                redelivered: true,
                exchange: "",
                routing_key: "q",
                properties: &props,
                body,
            };
            let (fused, apart) = both(&d, frame_max, b"xy");
            assert_eq!(fused.len() - 2, delivery_len(&d, frame_max));
            assert_eq!(fused, apart);
        }
    }
    // No properties at all: flags 0x0000 on the wire.
    let empty = RawProperties(bytes::Bytes::new());
    let d = DeliveryFrames {
        channel: 7,
        consumer_tag: "",
        delivery_tag: 1,
        redelivered: false,
        exchange: "x",
        routing_key: "",
        properties: &empty,
        body: b"b",
    };
    let (fused, apart) = both(&d, 0, b"");
    assert_eq!(fused, apart);
}

proptest! {
    #[test]
    fn encode_delivery_writes_what_the_two_encoders_write(
        channel in any::<u16>(),
        consumer_tag in "[a-zé0-9.-]{0,300}",
        delivery_tag in any::<u64>(),
        redelivered in any::<bool>(),
        exchange in "[a-z.]{0,20}",
        routing_key in prop_oneof!["[a-z.]{0,20}", "é{120,140}"],
        props in proptest::collection::vec(any::<u8>(), 0..40),
        body in proptest::collection::vec(any::<u8>(), 0..300),
        frame_max in prop_oneof![Just(0u32), Just(131_072), 0u32..120],
        prefix in proptest::collection::vec(any::<u8>(), 0..4),
    ) {
        let props = RawProperties(bytes::Bytes::from(props));
        let d = DeliveryFrames {
            channel,
            consumer_tag: &consumer_tag,
            delivery_tag,
            redelivered,
            exchange: &exchange,
            routing_key: &routing_key,
            properties: &props,
            body: &body,
        };
        let (fused, apart) = both(&d, frame_max, &prefix);
        prop_assert_eq!(fused.len() - prefix.len(), delivery_len(&d, frame_max));
        prop_assert_eq!(fused, apart);
    }
}
