//! RawProperties: encode/decode round trips and fast readers vs full decode.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use bytes::Bytes;
use charon_protocol::*;
use common::*;
use proptest::prelude::*;

#[test]
fn every_value_type_roundtrips() {
    let mut inner = FieldTable::default();
    inner.insert(
        "deep".into(),
        AMQPValue::FieldArray(FieldArray::from(vec![
            AMQPValue::Void,
            AMQPValue::LongString(LongString::from("x")),
        ])),
    );
    let mut h = FieldTable::default();
    h.insert("bool".into(), AMQPValue::Boolean(true));
    h.insert("i8".into(), AMQPValue::ShortShortInt(-5));
    h.insert("u8".into(), AMQPValue::ShortShortUInt(250));
    h.insert("i16".into(), AMQPValue::ShortInt(-300));
    h.insert("u16".into(), AMQPValue::ShortUInt(60_000));
    h.insert("i32".into(), AMQPValue::LongInt(-70_000));
    h.insert("u32".into(), AMQPValue::LongUInt(4_000_000_000));
    h.insert("i64".into(), AMQPValue::LongLongInt(i64::MIN));
    h.insert("f32".into(), AMQPValue::Float(1.5));
    h.insert("f64".into(), AMQPValue::Double(-2.25));
    h.insert(
        "dec".into(),
        AMQPValue::DecimalValue(DecimalValue {
            scale: 2,
            value: 12345,
        }),
    );
    h.insert(
        "str".into(),
        AMQPValue::LongString(LongString::from(vec![0u8, 0xFF, 1])),
    );
    h.insert(
        "arr".into(),
        AMQPValue::FieldArray(FieldArray::from(vec![
            AMQPValue::LongInt(1),
            AMQPValue::FieldTable(inner.clone()),
        ])),
    );
    h.insert("ts".into(), AMQPValue::Timestamp(1_700_000_000));
    h.insert("tbl".into(), AMQPValue::FieldTable(inner));
    h.insert(
        "bytes".into(),
        AMQPValue::ByteArray(ByteArray::from(vec![1u8, 2, 3])),
    );
    h.insert("void".into(), AMQPValue::Void);
    let p = BasicProperties::default()
        .with_headers(h)
        .with_delivery_mode(2)
        .with_priority(9)
        .with_timestamp(42)
        .with_expiration("1000".into())
        .with_content_type("application/json".into());
    let raw = RawProperties::encode(&p);
    raw.validate().unwrap();
    assert_eq!(raw.decode().unwrap(), p);
    assert_eq!(raw.delivery_mode(), Some(2));
    assert_eq!(raw.expiration(), Some(&b"1000"[..]));
}

#[test]
fn rabbitmq_type_aliases_decode() {
    // 'L' (RabbitMQ: signed 64) and 'U' decode through amq-protocol too.
    let table = [
        0u8, 0, 0, 15, 1, b'a', b'L', 0, 0, 0, 0, 0, 0, 0, 7, 1, b'b', b'U', 0, 3,
    ];
    let mut raw = vec![0x20, 0x00];
    raw.extend_from_slice(&table);
    // fix table length: entries are 11 + 5 = 16 bytes
    raw[5] = 16;
    let raw = RawProperties(Bytes::from(raw));
    raw.validate().unwrap();
    let p = raw.decode().unwrap();
    let h = p.headers().as_ref().unwrap();
    assert_eq!(h.inner().get("a"), Some(&AMQPValue::LongLongInt(7)));
    assert_eq!(h.inner().get("b"), Some(&AMQPValue::ShortInt(3)));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn encode_decode_roundtrip(p in properties()) {
        let raw = RawProperties::encode(&p);
        prop_assert!(raw.validate().is_ok());
        prop_assert_eq!(raw.decode().unwrap(), p.clone());
        prop_assert_eq!(raw.delivery_mode(), *p.delivery_mode());
        prop_assert_eq!(raw.expiration(), p.expiration().as_ref().map(|s| s.as_str().as_bytes()));
        prop_assert_eq!(RawProperties::encode(&raw.decode().unwrap()), raw);
    }

    /// On arbitrary bytes: no panics, validate agrees with decode about
    /// structure, and the fast readers agree with a successful decode.
    #[test]
    fn fast_readers_agree_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..200), flags in any::<u16>()) {
        let mut v = flags.to_be_bytes().to_vec();
        v.extend_from_slice(&bytes);
        for raw in [RawProperties(Bytes::from(v)), RawProperties(Bytes::from(bytes))] {
            let full = raw.decode();
            if let Ok(p) = &full {
                prop_assert!(raw.validate().is_ok());
                prop_assert_eq!(raw.delivery_mode(), *p.delivery_mode());
                prop_assert_eq!(raw.expiration(), p.expiration().as_ref().map(|s| s.as_str().as_bytes()));
            }
            if raw.validate().is_err() {
                prop_assert!(full.is_err());
            }
        }
    }
}
