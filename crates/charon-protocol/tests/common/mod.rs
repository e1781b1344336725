//! Shared proptest strategies for the integration tests.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::indexing_slicing
)]

use charon_protocol::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// A short string of 0..=max bytes (ASCII + some multibyte chars, always ≤ 255 bytes).
pub fn short_str(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            any::<char>().prop_filter("bmp", |c| c.len_utf8() <= 2),
            Just('a')
        ],
        0..=max / 2,
    )
    .prop_map(move |cs| {
        let mut s: String = cs.into_iter().collect();
        while s.len() > max {
            s.pop();
        }
        s
    })
}

pub fn ss(max: usize) -> impl Strategy<Value = ShortString> {
    short_str(max).prop_map(ShortString::from)
}

/// Leaf field values of every type that round-trips through amq-protocol.
pub fn leaf_value() -> impl Strategy<Value = AMQPValue> {
    prop_oneof![
        any::<bool>().prop_map(AMQPValue::Boolean),
        any::<i8>().prop_map(AMQPValue::ShortShortInt),
        any::<u8>().prop_map(AMQPValue::ShortShortUInt),
        any::<i16>().prop_map(AMQPValue::ShortInt),
        any::<u16>().prop_map(AMQPValue::ShortUInt),
        any::<i32>().prop_map(AMQPValue::LongInt),
        any::<u32>().prop_map(AMQPValue::LongUInt),
        any::<i64>().prop_map(AMQPValue::LongLongInt),
        (-1.0e6f32..1.0e6).prop_map(AMQPValue::Float),
        (-1.0e12f64..1.0e12).prop_map(AMQPValue::Double),
        (any::<u8>(), any::<u32>())
            .prop_map(|(scale, value)| AMQPValue::DecimalValue(DecimalValue { scale, value })),
        proptest::collection::vec(any::<u8>(), 0..40)
            .prop_map(|v| AMQPValue::LongString(LongString::from(v))),
        any::<u64>().prop_map(AMQPValue::Timestamp),
        proptest::collection::vec(any::<u8>(), 0..40)
            .prop_map(|v| AMQPValue::ByteArray(ByteArray::from(v))),
        Just(AMQPValue::Void),
    ]
}

pub fn value() -> impl Strategy<Value = AMQPValue> {
    leaf_value().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6)
                .prop_map(|v| AMQPValue::FieldArray(FieldArray::from(v))),
            proptest::collection::btree_map(short_str(20), inner, 0..6)
                .prop_map(|m| AMQPValue::FieldTable(to_table(m))),
        ]
    })
}

pub fn to_table(m: BTreeMap<String, AMQPValue>) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in m {
        t.insert(ShortString::from(k), v);
    }
    t
}

pub fn table() -> impl Strategy<Value = FieldTable> {
    proptest::collection::btree_map(short_str(30), value(), 0..8).prop_map(to_table)
}

pub fn properties() -> impl Strategy<Value = BasicProperties> {
    (
        (
            proptest::option::of(ss(40)),
            proptest::option::of(ss(40)),
            proptest::option::of(table()),
            proptest::option::of(any::<u8>()),
            proptest::option::of(any::<u8>()),
        ),
        (
            proptest::option::of(ss(40)),
            proptest::option::of(ss(40)),
            proptest::option::of(ss(20)),
            proptest::option::of(ss(40)),
        ),
        (
            proptest::option::of(any::<u64>()),
            proptest::option::of(ss(40)),
            proptest::option::of(ss(40)),
            proptest::option::of(ss(40)),
            proptest::option::of(ss(40)),
        ),
    )
        .prop_map(
            |((ct, ce, h, dm, pr), (cid, rt, exp, mid), (ts, ty, uid, app, cl))| {
                let mut p = BasicProperties::default();
                if let Some(v) = ct {
                    p = p.with_content_type(v);
                }
                if let Some(v) = ce {
                    p = p.with_content_encoding(v);
                }
                if let Some(v) = h {
                    p = p.with_headers(v);
                }
                if let Some(v) = dm {
                    p = p.with_delivery_mode(v);
                }
                if let Some(v) = pr {
                    p = p.with_priority(v);
                }
                if let Some(v) = cid {
                    p = p.with_correlation_id(v);
                }
                if let Some(v) = rt {
                    p = p.with_reply_to(v);
                }
                if let Some(v) = exp {
                    p = p.with_expiration(v);
                }
                if let Some(v) = mid {
                    p = p.with_message_id(v);
                }
                if let Some(v) = ts {
                    p = p.with_timestamp(v);
                }
                if let Some(v) = ty {
                    p = p.with_type(v);
                }
                if let Some(v) = uid {
                    p = p.with_user_id(v);
                }
                if let Some(v) = app {
                    p = p.with_app_id(v);
                }
                if let Some(v) = cl {
                    p = p.with_cluster_id(v);
                }
                p
            },
        )
}

/// Decode every frame in `bytes` (must be complete and valid).
pub fn decode_all(bytes: &[u8], frame_max: u32) -> Vec<Frame> {
    let mut buf = bytes::BytesMut::from(bytes);
    let mut out = Vec::new();
    while let Some(f) = decode_frame(&mut buf, frame_max).unwrap() {
        out.push(f);
    }
    assert!(buf.is_empty(), "leftover bytes");
    out
}
