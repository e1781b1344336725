//! The header rewrite on encoded properties ([`super::raw`]) means exactly what the decoding
//! rewrite ([`super::headers`]) produces, over random header sets and random death histories;
//! [`super::is_cycle_raw`] answers as [`super::is_cycle`].

use std::sync::Arc;

use charon_protocol::{
    AMQPValue, BasicProperties, FieldArray, FieldTable, LongString, RawProperties, ShortString,
};
use proptest::prelude::*;

use super::headers::{self, Death};
use super::{Reason, is_cycle, is_cycle_raw, raw};

fn reason() -> impl Strategy<Value = Reason> {
    prop_oneof![
        Just(Reason::Rejected),
        Just(Reason::Expired),
        Just(Reason::Maxlen),
        Just(Reason::DeliveryLimit),
    ]
}

fn value() -> impl Strategy<Value = AMQPValue> {
    prop_oneof![
        any::<i64>().prop_map(AMQPValue::LongLongInt),
        any::<i32>().prop_map(AMQPValue::LongInt),
        any::<bool>().prop_map(AMQPValue::Boolean),
        "[a-z]{0,6}".prop_map(|s| AMQPValue::LongString(LongString::from(s))),
        any::<u64>().prop_map(AMQPValue::Timestamp),
        prop::collection::vec(any::<i16>().prop_map(AMQPValue::ShortInt), 0..3)
            .prop_map(|v| AMQPValue::FieldArray(FieldArray::from(v))),
    ]
}

fn props() -> impl Strategy<Value = BasicProperties> {
    (
        prop::collection::btree_map("[a-z]{1,4}|x-first-death-queue|x-death", value(), 0..4),
        any::<bool>(),
        prop::option::of(1u8..3),
        prop::option::of("[a-z]{1,5}"),
    )
        .prop_map(|(h, with_headers, mode, id)| {
            let mut p = BasicProperties::default();
            if with_headers {
                let t: std::collections::BTreeMap<ShortString, AMQPValue> = h
                    .into_iter()
                    .map(|(k, v)| (ShortString::from(k), v))
                    .collect();
                p = p.with_headers(FieldTable::from(t));
            }
            if let Some(m) = mode {
                p = p.with_delivery_mode(m);
            }
            if let Some(i) = id {
                p = p.with_message_id(ShortString::from(i));
            }
            p
        })
}

proptest! {
    #[test]
    fn raw_rewrite_means_what_the_decoding_rewrite_produces(
        start in props(),
        steps in prop::collection::vec(
            (prop_oneof![Just("a"), Just("b"), Just("c")], reason(), any::<bool>(), 0u64..5),
            1..8,
        ),
    ) {
        let mut decoded = start;
        let mut encoded = RawProperties::encode(&decoded);
        for (queue, reason, drop_cc, t) in steps {
            let keys: Vec<Arc<str>> = vec![Arc::from("rk")];
            let d = Death {
                queue,
                reason,
                exchange: "x",
                routing_keys: &keys,
                time_secs: t,
            };
            let slow = headers::update(&decoded, &d, drop_cc);
            let fast = raw::update(&encoded, &d, drop_cc);
            prop_assert!(fast.is_some(), "the raw path declined");
            let fast = fast.unwrap_or_default();
            prop_assert_eq!(fast.decode().ok(), Some(slow.clone()));
            for q in ["a", "b", "c", "z"] {
                prop_assert_eq!(
                    is_cycle_raw(reason, &fast, q),
                    is_cycle(reason, &slow, q)
                );
            }
            decoded = slow;
            encoded = fast;
        }
    }
}

#[test]
fn raw_rewrite_declines_what_it_does_not_handle() {
    let keys: Vec<Arc<str>> = vec![Arc::from("rk")];
    let d = Death {
        queue: "q",
        reason: Reason::Expired,
        exchange: "",
        routing_keys: &keys,
        time_secs: 1,
    };
    let with = |k: &str, v: AMQPValue| {
        let mut t = FieldTable::default();
        t.insert(ShortString::from(k), v);
        RawProperties::encode(&BasicProperties::default().with_headers(t))
    };
    let cc = AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::LongString(
        LongString::from("k"),
    )]));
    assert!(raw::update(&with("CC", cc.clone()), &d, false).is_none());
    assert!(raw::update(&with("BCC", cc), &d, false).is_none());
    let exp = BasicProperties::default().with_expiration(ShortString::from("100"));
    assert!(raw::update(&RawProperties::encode(&exp), &d, false).is_none());
    // 'U' decodes as 's': not copied byte for byte.
    let raw_u = RawProperties(bytes::Bytes::from_static(&[
        0x20, 0, 0, 0, 0, 5, 1, b'a', b'U', 0, 1,
    ]));
    assert!(raw::update(&raw_u, &d, false).is_none());
    assert!(raw::update(&RawProperties::empty(), &d, false).is_some());
}
