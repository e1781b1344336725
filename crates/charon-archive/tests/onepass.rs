//! The one-pass extraction (`extract`, `src/onepass.rs`) against the general path
//! (`extract_general`: decode the properties with `amq-protocol`, then the field table as JSON)
//! over arbitrary properties: the records must be equal, the headers' JSON text byte for byte.
//!
//! Two kinds of input: field tables built as values and encoded by `amq-protocol` (nested tables
//! and arrays, decimals, timestamps, byte arrays, non-UTF-8 long strings, NaN and infinite
//! floats), and octets encoded by hand, which no encoder produces: repeated and unsorted keys,
//! the `U` and `L` tags, keys and short strings that are not UTF-8, nesting past the limit,
//! x-death entries of every shape, and truncated, flipped or extended octets.

use bytes::Bytes;
use charon_archive::extract::{ExtractConfig, extract, extract_general, takes_one_pass};
use charon_protocol::{
    AMQPValue, BasicProperties, ByteArray, DecimalValue, FieldArray, FieldTable, LongString,
    RawProperties, ShortString,
};
use proptest::prelude::*;

/// Header names the extraction reads, and the x-death entries' keys.
const KEYS: &[&str] = &[
    "x-death",
    "x-first-death-queue",
    "x-first-death-reason",
    "x-first-death-exchange",
    "x-original-exchange",
    "x-original-routingKey",
    "x-exception-message",
    "x-exception-stacktrace",
    "tenant",
    "count",
    "queue",
    "reason",
    "routing-keys",
    "exchange",
    "time",
    "a",
    "b",
];

/// Texts that make the x-death matching hit.
const TEXTS: &[&str] = &["orders", "rejected", "expired", "Order 17 not found", ""];

fn configs() -> Vec<ExtractConfig> {
    vec![
        ExtractConfig::default(),
        ExtractConfig {
            key_header: Some("tenant".into()),
            error_message_headers: vec!["x-missing".into(), "x-exception-message".into()],
            error_stacktrace_headers: vec!["x-death".into()],
        },
        ExtractConfig {
            key_header: Some("x-death".into()),
            error_message_headers: vec!["count".into(), "a".into()],
            error_stacktrace_headers: vec!["b".into(), "x-exception-stacktrace".into()],
        },
    ]
}

fn check(raw: &RawProperties) -> Result<(), TestCaseError> {
    let body = Bytes::from_static(b"{\"order\":17}");
    for cfg in configs() {
        let fast = extract(&cfg, "k".into(), "/", "dlq", raw, body.clone(), 5);
        let general = extract_general(&cfg, "k".into(), "/", "dlq", raw, body.clone(), 5);
        prop_assert_eq!(fast, general, "properties {:?}", raw.0);
    }
    Ok(())
}

// ---- values encoded by amq-protocol ----

fn text_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => proptest::sample::select(TEXTS).prop_map(|s| s.as_bytes().to_vec()),
        3 => "[ -~é日\"\\\\\n\t]{0,12}".prop_map(String::into_bytes),
        2 => proptest::collection::vec(any::<u8>(), 0..12),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(KEYS).prop_map(str::to_string),
        1 => "[ -~é]{0,8}",
    ]
}

fn typed_leaf() -> impl Strategy<Value = AMQPValue> {
    prop_oneof![
        1 => any::<bool>().prop_map(AMQPValue::Boolean),
        1 => any::<i8>().prop_map(AMQPValue::ShortShortInt),
        1 => any::<u8>().prop_map(AMQPValue::ShortShortUInt),
        1 => any::<i16>().prop_map(AMQPValue::ShortInt),
        1 => any::<u16>().prop_map(AMQPValue::ShortUInt),
        1 => any::<i32>().prop_map(AMQPValue::LongInt),
        1 => any::<u32>().prop_map(AMQPValue::LongUInt),
        1 => any::<i64>().prop_map(AMQPValue::LongLongInt),
        1 => any::<f32>().prop_map(AMQPValue::Float),
        1 => any::<f64>().prop_map(AMQPValue::Double),
        1 => (any::<u8>(), any::<u32>())
            .prop_map(|(scale, value)| AMQPValue::DecimalValue(DecimalValue { scale, value })),
        1 => any::<u64>().prop_map(AMQPValue::Timestamp),
        3 => text_bytes().prop_map(|b| AMQPValue::LongString(LongString::from(b))),
        1 => text_bytes().prop_map(|b| AMQPValue::ByteArray(ByteArray::from(b))),
        1 => Just(AMQPValue::Void),
    ]
}

fn typed_value() -> impl Strategy<Value = AMQPValue> {
    typed_leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4)
                .prop_map(|v| AMQPValue::FieldArray(FieldArray::from(v))),
            proptest::collection::vec((key(), inner), 0..6).prop_map(|es| {
                let mut t = FieldTable::default();
                for (k, v) in es {
                    t.insert(ShortString::from(k), v);
                }
                AMQPValue::FieldTable(t)
            }),
        ]
    })
}

fn typed_death() -> impl Strategy<Value = AMQPValue> {
    let field = prop_oneof![
        (Just("count"), typed_leaf()),
        (
            proptest::sample::select(&["queue", "reason"][..]),
            proptest::sample::select(TEXTS)
                .prop_map(|s| AMQPValue::LongString(LongString::from(s)))
        ),
        (Just("routing-keys"), typed_value()),
        (proptest::sample::select(KEYS), typed_value()),
    ];
    proptest::collection::vec(field, 0..6).prop_map(|es| {
        let mut t = FieldTable::default();
        for (k, v) in es {
            t.insert(ShortString::from(k), v);
        }
        AMQPValue::FieldTable(t)
    })
}

fn typed_headers() -> impl Strategy<Value = FieldTable> {
    let deaths =
        proptest::collection::vec(prop_oneof![4 => typed_death(), 1 => typed_value()], 0..3);
    (
        proptest::collection::vec((key(), typed_value()), 0..8),
        proptest::option::of(deaths),
    )
        .prop_map(|(es, deaths)| {
            let mut t = FieldTable::default();
            for (k, v) in es {
                t.insert(ShortString::from(k), v);
            }
            if let Some(d) = deaths {
                t.insert("x-death".into(), AMQPValue::FieldArray(FieldArray::from(d)));
            }
            t
        })
}

fn short() -> impl Strategy<Value = Option<ShortString>> {
    proptest::option::of("[ -~é]{0,10}".prop_map(ShortString::from))
}

fn typed_properties() -> impl Strategy<Value = BasicProperties> {
    (
        (short(), short(), short(), short(), short()),
        (
            proptest::option::of(any::<u8>()),
            proptest::option::of(any::<u8>()),
            proptest::option::of(any::<u64>()),
        ),
        proptest::option::of(typed_headers()),
    )
        .prop_map(|((ct, mid, cid, ty, app), (dm, pr, ts), h)| {
            let mut p = BasicProperties::default();
            if let Some(v) = ct {
                p = p.with_content_type(v);
            }
            if let Some(v) = mid {
                p = p.with_message_id(v);
            }
            if let Some(v) = cid {
                p = p.with_correlation_id(v);
            }
            if let Some(v) = ty {
                p = p.with_type(v);
            }
            if let Some(v) = app {
                p = p.with_app_id(v);
            }
            if let Some(v) = dm {
                p = p.with_delivery_mode(v);
            }
            if let Some(v) = pr {
                p = p.with_priority(v);
            }
            if let Some(v) = ts {
                p = p.with_timestamp(v);
            }
            if let Some(h) = h {
                p = p.with_headers(h);
            }
            p
        })
}

// ---- octets encoded by hand ----

/// A field value as octets: what no encoder of the value types writes too.
#[derive(Debug, Clone)]
enum Raw {
    /// A fixed-width value: tag and its octets.
    Fixed(u8, Vec<u8>),
    /// `S` or `x` with its octets.
    Str(u8, Vec<u8>),
    Arr(Vec<Raw>),
    Table(Vec<(Vec<u8>, Raw)>),
}

fn put_long(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
    out.extend_from_slice(b);
}

fn enc_value(v: &Raw, out: &mut Vec<u8>) {
    match v {
        Raw::Fixed(tag, b) => {
            out.push(*tag);
            out.extend_from_slice(b);
        }
        Raw::Str(tag, b) => {
            out.push(*tag);
            put_long(out, b);
        }
        Raw::Arr(items) => {
            let mut body = Vec::new();
            items.iter().for_each(|i| enc_value(i, &mut body));
            out.push(b'A');
            put_long(out, &body);
        }
        Raw::Table(es) => {
            out.push(b'F');
            put_long(out, &enc_table(es));
        }
    }
}

fn enc_table(es: &[(Vec<u8>, Raw)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (k, v) in es {
        body.push(k.len() as u8);
        body.extend_from_slice(k);
        enc_value(v, &mut body);
    }
    body
}

fn raw_key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => proptest::sample::select(KEYS).prop_map(|s| s.as_bytes().to_vec()),
        2 => "[ -~é]{0,6}".prop_map(String::into_bytes),
        1 => proptest::collection::vec(any::<u8>(), 0..4),
    ]
}

fn raw_leaf() -> impl Strategy<Value = Raw> {
    let fixed = |tag: u8, n: usize| {
        proptest::collection::vec(any::<u8>(), n).prop_map(move |b| Raw::Fixed(tag, b))
    };
    prop_oneof![
        1 => fixed(b't', 1),
        1 => fixed(b'b', 1),
        1 => fixed(b'B', 1),
        1 => fixed(b's', 2),
        1 => fixed(b'U', 2),
        1 => fixed(b'u', 2),
        1 => fixed(b'I', 4),
        1 => fixed(b'i', 4),
        1 => fixed(b'f', 4),
        1 => fixed(b'l', 8),
        1 => fixed(b'L', 8),
        1 => fixed(b'd', 8),
        1 => fixed(b'T', 8),
        1 => fixed(b'D', 5),
        1 => Just(Raw::Fixed(b'V', vec![])),
        4 => text_bytes().prop_map(|b| Raw::Str(b'S', b)),
        1 => text_bytes().prop_map(|b| Raw::Str(b'x', b)),
    ]
}

fn raw_value() -> impl Strategy<Value = Raw> {
    raw_leaf().prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Raw::Arr),
            proptest::collection::vec((raw_key(), inner), 0..6).prop_map(Raw::Table),
        ]
    })
}

fn raw_death() -> impl Strategy<Value = Raw> {
    let field = prop_oneof![
        (Just(b"count".to_vec()), raw_leaf()),
        (
            proptest::sample::select(&["queue", "reason"][..]).prop_map(|s| s.as_bytes().to_vec()),
            proptest::sample::select(TEXTS).prop_map(|s| Raw::Str(b'S', s.as_bytes().to_vec()))
        ),
        (
            Just(b"routing-keys".to_vec()),
            proptest::collection::vec(raw_leaf(), 0..3).prop_map(Raw::Arr)
        ),
        (raw_key(), raw_value()),
    ];
    proptest::collection::vec(field, 0..7).prop_map(Raw::Table)
}

/// A headers table: arbitrary entries (repeated keys, any order), sometimes an x-death array,
/// sometimes the error and first-death headers as strings.
fn raw_headers() -> impl Strategy<Value = Vec<(Vec<u8>, Raw)>> {
    let named = (
        proptest::sample::select(KEYS).prop_map(|s| s.as_bytes().to_vec()),
        proptest::sample::select(TEXTS).prop_map(|s| Raw::Str(b'S', s.as_bytes().to_vec())),
    );
    let entry = prop_oneof![
        3 => (raw_key(), raw_value()),
        2 => named,
        2 => proptest::collection::vec(prop_oneof![4 => raw_death(), 1 => raw_value()], 0..3)
            .prop_map(|d| (b"x-death".to_vec(), Raw::Arr(d))),
    ];
    proptest::collection::vec(entry, 0..10)
}

/// Nested `depth` tables deep (the limit is 32 levels).
fn nested(depth: usize) -> Raw {
    let mut v = Raw::Str(b'S', b"deep".to_vec());
    for i in 0..depth {
        v = if i % 2 == 0 {
            Raw::Table(vec![(b"n".to_vec(), v)])
        } else {
            Raw::Arr(vec![v])
        };
    }
    v
}

#[derive(Debug, Clone)]
enum Mutation {
    None,
    Truncate(prop::sample::Index),
    Flip(prop::sample::Index, u8),
    Append(u8),
}

fn raw_properties() -> impl Strategy<Value = Vec<u8>> {
    let short = proptest::option::of(prop_oneof![
        4 => "[ -~]{0,8}".prop_map(String::into_bytes),
        1 => proptest::collection::vec(any::<u8>(), 0..6),
    ]);
    (
        proptest::collection::vec(short, 14),
        (
            proptest::option::of(any::<u8>()),
            proptest::option::of(any::<u8>()),
            proptest::option::of(any::<u64>()),
        ),
        proptest::option::of(raw_headers()),
        (0u16..4, proptest::option::of(20usize..40)),
        prop_oneof![
            8 => Just(Mutation::None),
            1 => any::<prop::sample::Index>().prop_map(Mutation::Truncate),
            1 => (any::<prop::sample::Index>(), 1u8..=255).prop_map(|(i, x)| Mutation::Flip(i, x)),
            1 => any::<u8>().prop_map(Mutation::Append),
        ],
    )
        .prop_map(|(shorts, (dm, pr, ts), headers, (low, deep), m)| {
            let mut flags = low;
            let mut out = Vec::new();
            for (n, s) in shorts.iter().enumerate() {
                let bit = 1u16 << (15 - n);
                match n {
                    2 => {
                        let mut es = headers.clone();
                        if let Some(d) = deep {
                            es.get_or_insert_with(Vec::new)
                                .push((b"deep".to_vec(), nested(d)));
                        }
                        if let Some(es) = es {
                            flags |= bit;
                            put_long(&mut out, &enc_table(&es));
                        }
                    }
                    3 | 4 => {
                        if let Some(v) = if n == 3 { dm } else { pr } {
                            flags |= bit;
                            out.push(v);
                        }
                    }
                    9 => {
                        if let Some(t) = ts {
                            flags |= bit;
                            out.extend_from_slice(&t.to_be_bytes());
                        }
                    }
                    _ => {
                        if let Some(s) = s {
                            flags |= bit;
                            out.push(s.len() as u8);
                            out.extend_from_slice(s);
                        }
                    }
                }
            }
            let mut bytes = flags.to_be_bytes().to_vec();
            bytes.extend_from_slice(&out);
            match m {
                Mutation::None => {}
                Mutation::Truncate(i) => bytes.truncate(i.index(bytes.len())),
                Mutation::Flip(i, x) => {
                    let i = i.index(bytes.len());
                    bytes[i] ^= x;
                }
                Mutation::Append(b) => bytes.push(b),
            }
            bytes
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    #[test]
    fn one_pass_equals_general_on_encoded_tables(p in typed_properties()) {
        let raw = RawProperties::encode(&p);
        // Well formed, UTF-8 keys, 4 levels at most: the walk must take it (not the fallback).
        prop_assert!(takes_one_pass(&raw), "fell back for {:?}", raw.0);
        check(&raw)?;
    }

    #[test]
    fn one_pass_equals_general_on_any_octets(bytes in raw_properties()) {
        check(&RawProperties(Bytes::from(bytes)))?;
    }
}

/// The bench's dead letter (what the figures in docs/archive.md are measured on), and the walk
/// really taken for it: equal records, and the same JSON as `table_to_json_text`.
#[test]
fn dead_letter_is_equal_and_walked() {
    let ls = |s: &str| AMQPValue::LongString(LongString::from(s));
    let mut death = FieldTable::default();
    death.insert("count".into(), AMQPValue::LongLongInt(2));
    death.insert("reason".into(), ls("rejected"));
    death.insert("queue".into(), ls("orders"));
    death.insert("time".into(), AMQPValue::Timestamp(1_764_000_000));
    death.insert(
        "routing-keys".into(),
        AMQPValue::FieldArray(FieldArray::from(vec![ls("orders"), AMQPValue::Void])),
    );
    let mut h = FieldTable::default();
    h.insert(
        "x-death".into(),
        AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(death)])),
    );
    h.insert("x-first-death-queue".into(), ls("orders"));
    h.insert("x-first-death-reason".into(), ls("rejected"));
    h.insert("x-exception-message".into(), ls("Order 17 not found"));
    h.insert(
        "bad".into(),
        AMQPValue::LongString(LongString::from(vec![b'a', 0xff])),
    );
    let p = BasicProperties::default()
        .with_message_id("m-1".into())
        .with_content_type("application/json".into())
        .with_delivery_mode(2)
        .with_headers(h.clone());
    let raw = RawProperties::encode(&p);
    check(&raw).expect("equal");
    assert!(takes_one_pass(&raw));
    let r = extract(
        &ExtractConfig::default(),
        "k".into(),
        "/",
        "q",
        &raw,
        Bytes::new(),
        1,
    );
    assert_eq!(r.headers, charon_archive::json::table_to_json_text(&h));
    assert_eq!(r.death_count, 2);
    assert_eq!(r.original_routing_keys, vec!["orders".to_string()]);
    assert!(r.headers.contains("\"bad\":\"a\u{fffd}\""), "{}", r.headers);
}

/// Properties with only a headers table, encoded by hand: `(key, long string)` entries, so that
/// keys and values may be any octets.
fn headers_only(entries: &[(&[u8], &[u8])]) -> RawProperties {
    let mut table = Vec::new();
    for (k, v) in entries {
        table.push(u8::try_from(k.len()).expect("short key"));
        table.extend_from_slice(k);
        table.push(b'S');
        put_long(&mut table, v);
    }
    let mut out = 0x2000u16.to_be_bytes().to_vec();
    put_long(&mut out, &table);
    RawProperties(Bytes::from(out))
}

/// The headers the record reads are taken from the headers' JSON text where their string was
/// written without an escape (its UTF-8 checked once, as the whole text): a text with escapes is
/// read as the text, not as its JSON; a value not UTF-8 makes the table written again with each
/// string read as lossy UTF-8 (a cut-short four-octet sequence keeps its length when replaced);
/// a key not UTF-8 sends the message to the general path.
#[test]
fn header_texts_are_the_texts_not_their_json() {
    let escaped = "Order \"17\" not found\n\tat é";
    let cut = b"rej\xf0\x9f\x98";
    let cfg = ExtractConfig::default();
    let read = |raw: &RawProperties| {
        check(raw).expect("equal to the general path");
        extract(&cfg, "k".into(), "/", "q", raw, Bytes::new(), 1)
    };
    let raw = headers_only(&[
        (b"x-exception-message", escaped.as_bytes()),
        (b"x-exception-stacktrace", b"at a.B.c(B.java:1)"),
        (b"x-first-death-queue", b"orders"),
    ]);
    assert!(takes_one_pass(&raw));
    let r = read(&raw);
    assert_eq!(r.error_message.as_deref(), Some(escaped));
    assert_eq!(r.error_stacktrace.as_deref(), Some("at a.B.c(B.java:1)"));
    assert_eq!(r.original_queue.as_deref(), Some("orders"));

    let raw = headers_only(&[
        (b"x-exception-message", escaped.as_bytes()),
        (b"x-first-death-queue", b"orders"),
        (b"x-first-death-reason", cut),
    ]);
    assert!(takes_one_pass(&raw));
    let r = read(&raw);
    assert_eq!(r.error_message.as_deref(), Some(escaped));
    assert_eq!(r.original_queue.as_deref(), Some("orders"));
    assert_eq!(r.reason.as_deref(), Some("rej\u{fffd}"));
    assert!(r.headers.contains("\"rej\u{fffd}\""), "{}", r.headers);

    let raw = headers_only(&[(b"x-first-death-queue", b"orders"), (b"k\xff", b"v")]);
    assert!(!takes_one_pass(&raw));
    let r = read(&raw);
    assert_eq!(r.original_queue, None);
    assert_eq!(r.headers, "{}");
}
