//! Sender-selected distribution at publish (`rabbit_basic:header_routes`): the `CC` and `BCC`
//! headers add routing keys; `BCC` is removed before the message reaches any queue.
//! Dead-lettering re-reads `CC`/`BCC` with [`header_strings`] (see [`crate::dead_letter`]).

use std::sync::Arc;

use charon_protocol::{AMQPValue, BasicProperties, FieldTable, RawProperties, ShortString};

/// The string values of header `key` (CC / BCC arrays).
pub(crate) fn header_strings(headers: Option<&FieldTable>, key: &str) -> Vec<Arc<str>> {
    let Some(AMQPValue::FieldArray(a)) =
        headers.and_then(|h| h.inner().get(&ShortString::from(key)))
    else {
        return Vec::new();
    };
    a.as_slice()
        .iter()
        .filter_map(|v| match v {
            AMQPValue::LongString(s) => {
                Some(Arc::from(String::from_utf8_lossy(s.as_bytes()).as_ref()))
            }
            AMQPValue::ShortString(s) => Some(Arc::from(s.as_str())),
            _ => None,
        })
        .collect()
}

/// `props` without the header `key`; `None` when it had no such header.
pub(crate) fn without_header(props: &BasicProperties, key: &str) -> Option<BasicProperties> {
    let h = props.headers().as_ref()?;
    let k = ShortString::from(key);
    if !h.inner().contains_key(&k) {
        return None;
    }
    let mut map = h.inner().clone();
    map.remove(&k);
    Some(props.clone().with_headers(FieldTable::from(map)))
}

/// The publish-time BCC rule: a message routed with `BCC` goes on without that header (BCC never
/// reaches any consumer). `None` when there is nothing to remove.
pub fn strip_bcc(props: &BasicProperties) -> Option<RawProperties> {
    without_header(props, "BCC").map(|p| RawProperties::encode(&p))
}

/// The extra routing keys a publish carries in its headers: the `CC` values and the `BCC` values
/// (`rabbit_basic:header_routes`).
pub fn header_routes(props: &BasicProperties) -> (Vec<Arc<str>>, Vec<Arc<str>>) {
    let headers = props.headers().as_ref();
    (
        header_strings(headers, "CC"),
        header_strings(headers, "BCC"),
    )
}

/// Whether the encoded properties' headers have a top-level `CC` or `BCC` key, read without
/// decoding them; `None` when they cannot be read that way (malformed, or odd flags). When
/// `Some(false)`, [`header_routes`] of the decoded properties is empty and [`strip_bcc`] is
/// `None` (the cheap check of a publish with headers but no sender-selected distribution).
pub fn has_header_routes(props: &RawProperties) -> Option<bool> {
    let Some(body) = props.split_headers()?.headers else {
        return Some(false);
    };
    let fields = charon_protocol::raw_table::fields(body)?;
    Some(fields.iter().any(|f| f.key == b"CC" || f.key == b"BCC"))
}

/// The routing keys of a publish: its routing key, then the `CC`, then the `BCC` values.
pub fn publish_routing_keys(routing_key: &str, props: Option<&BasicProperties>) -> Vec<Arc<str>> {
    let mut keys = vec![Arc::from(routing_key)];
    if let Some(p) = props {
        let (cc, bcc) = header_routes(p);
        keys.extend(cc);
        keys.extend(bcc);
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use charon_protocol::{FieldArray, LongString};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn key() -> impl Strategy<Value = String> {
        "[a-z]{1,3}|CC|BCC|cc|Bcc|x-delay|CCC"
    }

    fn value() -> impl Strategy<Value = AMQPValue> {
        let strings = prop::collection::vec(
            prop_oneof![
                "[a-z]{0,4}".prop_map(|s| AMQPValue::LongString(LongString::from(s))),
                "[a-z]{0,4}".prop_map(|s| AMQPValue::ShortString(ShortString::from(s))),
                any::<i32>().prop_map(AMQPValue::LongInt),
            ],
            0..3,
        );
        let leaf = prop_oneof![
            any::<i64>().prop_map(AMQPValue::LongLongInt),
            "[a-z]{0,6}".prop_map(|s| AMQPValue::LongString(LongString::from(s))),
            strings.prop_map(|v| AMQPValue::FieldArray(FieldArray::from(v))),
        ];
        // Nested tables, whose `CC`/`BCC` keys are not sender-selected distribution.
        leaf.prop_recursive(2, 8, 3, |inner| {
            prop::collection::btree_map(key(), inner, 0..3)
                .prop_map(|m| AMQPValue::FieldTable(table(m)))
        })
    }

    fn table(m: BTreeMap<String, AMQPValue>) -> FieldTable {
        let t: BTreeMap<ShortString, AMQPValue> = m
            .into_iter()
            .map(|(k, v)| (ShortString::from(k), v))
            .collect();
        FieldTable::from(t)
    }

    proptest! {
        #[test]
        fn raw_cc_bcc_check_agrees_with_the_decoded_routes(
            headers in prop::option::of(prop::collection::btree_map(key(), value(), 0..5)),
            content_type in prop::option::of("[a-z/]{1,8}"),
            expiration in prop::option::of("[0-9]{1,4}"),
        ) {
            let mut p = BasicProperties::default();
            if let Some(c) = content_type {
                p = p.with_content_type(ShortString::from(c));
            }
            if let Some(h) = headers {
                p = p.with_headers(table(h));
            }
            if let Some(e) = expiration {
                p = p.with_expiration(ShortString::from(e));
            }
            let raw = RawProperties::encode(&p);
            let found = has_header_routes(&raw);
            let keys = p.headers().as_ref().is_some_and(|h| {
                h.inner().contains_key(&ShortString::from("CC"))
                    || h.inner().contains_key(&ShortString::from("BCC"))
            });
            prop_assert_eq!(found, Some(keys));
            if found == Some(false) {
                let (cc, bcc) = header_routes(&p);
                prop_assert!(cc.is_empty() && bcc.is_empty());
                prop_assert!(strip_bcc(&p).is_none());
            }
        }
    }

    #[test]
    fn malformed_headers_are_not_read_raw() {
        // Flags: headers only; a table of 3 bytes holding a truncated key.
        let raw = RawProperties(bytes::Bytes::from_static(&[
            0x20, 0, 0, 0, 0, 3, 5, b'C', b'C',
        ]));
        assert_eq!(has_header_routes(&raw), None);
        assert!(raw.decode().is_err());
    }
}
