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
