//! The byte format of the definition records the broker keeps in the store: a vhost's durable
//! topology and its policies (docs/storage-format.md, "Definition records"). Pure encoding: it
//! knows the domain's `VHost`, not the queues' handles (the caller says which store id a queue
//! has, and makes the queue when one is restored).
//!
//! Every record starts with [`MARKER`] and a version byte ([`VERSION`]). Records written before
//! the version existed start directly with their first count; the marker, an impossible count,
//! tells them apart, and they are read as version 1 bodies.

use bytes::{Buf, BufMut, Bytes};
use charon_core::{Destination, ExchangeDeclare, QueueDeclare, QueueMeta, VHost};
use charon_protocol::{BasicProperties, FieldTable, RawProperties};

/// Starts every versioned definition record (as a first count, it would be absurd).
const MARKER: u32 = u32::MAX;
/// The definition format written now.
const VERSION: u8 = 1;

/// A new record: marker and version.
fn header() -> Vec<u8> {
    let mut out = Vec::new();
    out.put_u32_le(MARKER);
    out.put_u8(VERSION);
    out
}

/// The body of a record, after its header; `None` for a version this build does not know.
fn body(mut data: Bytes) -> Option<Bytes> {
    if data.len() >= 5 && data.get(..4) == Some(&MARKER.to_le_bytes()[..]) {
        data.advance(4);
        (data.get_u8() == VERSION).then_some(data)
    } else {
        // Written before the header existed: a version 1 body.
        Some(data)
    }
}

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    out.put_u32_le(u32::try_from(s.len()).unwrap_or(u32::MAX));
    out.extend_from_slice(s);
}

fn table_bytes(t: &FieldTable) -> Bytes {
    RawProperties::encode(&BasicProperties::default().with_headers(t.clone())).0
}

fn table_of(b: Bytes) -> FieldTable {
    RawProperties(b)
        .decode()
        .ok()
        .and_then(|p| p.headers().clone())
        .unwrap_or_default()
}

struct Reader(Bytes);

impl Reader {
    fn u32(&mut self) -> Option<u32> {
        (self.0.remaining() >= 4).then(|| self.0.get_u32_le())
    }
    fn u64(&mut self) -> Option<u64> {
        (self.0.remaining() >= 8).then(|| self.0.get_u64_le())
    }
    fn u8(&mut self) -> Option<u8> {
        (self.0.remaining() >= 1).then(|| self.0.get_u8())
    }
    fn bytes(&mut self) -> Option<Bytes> {
        let n = self.u32()? as usize;
        (self.0.remaining() >= n).then(|| self.0.split_to(n))
    }
    fn string(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?.to_vec()).ok()
    }
}

/// Encodes the durable part of a vhost's topology.
pub(crate) fn encode_topology<Q: Clone>(
    v: &VHost<Q>,
    store_id: impl Fn(&Q) -> Option<u64>,
) -> Bytes {
    let mut out = header();
    let exchanges: Vec<_> = v
        .exchanges()
        .filter(|x| x.durable && !x.name.is_empty() && !x.name.starts_with("amq."))
        .collect();
    out.put_u32_le(exchanges.len() as u32);
    for x in &exchanges {
        put_str(&mut out, x.name.as_bytes());
        put_str(&mut out, x.type_name().as_bytes());
        out.put_u8(u8::from(x.auto_delete) | (u8::from(x.internal) << 1));
        put_str(&mut out, &table_bytes(&x.arguments));
    }
    let queues: Vec<_> = v.queues().filter(|q| q.meta.durable).collect();
    out.put_u32_le(queues.len() as u32);
    for q in &queues {
        put_str(&mut out, q.meta.name.as_bytes());
        out.put_u64_le(store_id(&q.handle).unwrap_or(0));
        out.put_u8(u8::from(q.meta.auto_delete));
        put_str(&mut out, &table_bytes(&q.meta.arguments));
    }
    let durable_exchange = |n: &str| n.is_empty() || v.exchange(n).is_some_and(|x| x.durable);
    let bindings: Vec<_> = v
        .bindings()
        .filter(|(x, b)| {
            x.durable
                && match &b.destination {
                    Destination::Queue(q) => v.queue(q).is_some_and(|e| e.meta.durable),
                    Destination::Exchange(e) => durable_exchange(e),
                }
        })
        .collect();
    out.put_u32_le(bindings.len() as u32);
    for (x, b) in bindings {
        put_str(&mut out, x.name.as_bytes());
        let (kind, dest) = match &b.destination {
            Destination::Queue(q) => (0u8, q),
            Destination::Exchange(e) => (1u8, e),
        };
        out.put_u8(kind);
        put_str(&mut out, dest.as_bytes());
        put_str(&mut out, b.routing_key.as_bytes());
        put_str(&mut out, &table_bytes(&b.arguments));
    }
    Bytes::from(out)
}

/// Declares the recovered durable topology into `v`; `spawn` makes each queue's actor from its
/// definition and store id. `None`: the record is damaged or of an unknown version (what could
/// be read is declared).
pub(crate) fn restore_topology<Q: Clone>(
    v: &mut VHost<Q>,
    data: Bytes,
    mut spawn: impl FnMut(&QueueMeta, u64) -> Q,
) -> Option<()> {
    let mut r = Reader(body(data)?);
    for _ in 0..r.u32()? {
        let name = r.string()?;
        let kind = r.string()?;
        let flags = r.u8()?;
        let arguments = table_of(r.bytes()?);
        let d = ExchangeDeclare {
            name,
            kind,
            passive: false,
            durable: true,
            auto_delete: flags & 1 != 0,
            internal: flags & 2 != 0,
            arguments,
        };
        if let Err(e) = v.declare_exchange(&d) {
            tracing::warn!(exchange = %d.name, error = %e, "could not restore an exchange");
        }
    }
    for _ in 0..r.u32()? {
        let name = r.string()?;
        let store_id = r.u64()?;
        let flags = r.u8()?;
        let arguments = table_of(r.bytes()?);
        let d = QueueDeclare {
            name,
            passive: false,
            durable: true,
            exclusive: false,
            auto_delete: flags & 1 != 0,
            arguments,
        };
        if let Err(e) = v.declare_queue(&d, 0, &mut |meta: &QueueMeta| spawn(meta, store_id)) {
            tracing::warn!(queue = %d.name, error = %e, "could not restore a queue");
        }
    }
    for _ in 0..r.u32()? {
        let source = r.string()?;
        let kind = r.u8()?;
        let dest = r.string()?;
        let key = r.string()?;
        let args = table_of(r.bytes()?);
        let res = if kind == 0 {
            v.bind_queue(&dest, &source, &key, &args)
        } else {
            v.bind_exchange(&dest, &source, &key, &args)
        };
        if let Err(e) = res {
            tracing::warn!(source = %source, destination = %dest, error = %e, "could not restore a binding");
        }
    }
    Some(())
}

/// The policies of a vhost as `(name, pattern, apply_to, priority, definition JSON)` rows.
pub(crate) fn encode_policies(rows: &[(String, String, String, i64, String)]) -> Bytes {
    let mut out = header();
    out.put_u32_le(rows.len() as u32);
    for (name, pattern, apply_to, priority, def) in rows {
        put_str(&mut out, name.as_bytes());
        put_str(&mut out, pattern.as_bytes());
        put_str(&mut out, apply_to.as_bytes());
        out.put_i64_le(*priority);
        put_str(&mut out, def.as_bytes());
    }
    Bytes::from(out)
}

/// Decodes what [`encode_policies`] wrote.
pub(crate) fn decode_policies(data: Bytes) -> Vec<(String, String, String, i64, String)> {
    let mut out = Vec::new();
    let Some(data) = body(data) else {
        tracing::warn!("policies record of an unknown version: not restored");
        return out;
    };
    let mut r = Reader(data);
    let Some(n) = r.u32() else {
        return out;
    };
    for _ in 0..n {
        let row = (|| {
            let name = r.string()?;
            let pattern = r.string()?;
            let apply_to = r.string()?;
            let priority = (r.0.remaining() >= 8).then(|| r.0.get_i64_le())?;
            let def = r.string()?;
            Some((name, pattern, apply_to, priority, def))
        })();
        match row {
            Some(row) => out.push(row),
            None => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    //! Format fixtures: the records below are what version 1 writes for a small topology and
    //! policy set. A change to these bytes means a new format version
    //! (docs/storage-format.md, "Definition records").

    use bytes::Bytes;
    use charon_core::{ExchangeDeclare, QueueDeclare, VHost};
    use charon_protocol::{AMQPValue, FieldTable, ShortString};

    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .filter_map(|i| s.get(i..i + 2))
            .filter_map(|h| u8::from_str_radix(h, 16).ok())
            .collect()
    }

    /// A vhost with a durable and a transient exchange, a durable queue (store id 7) with an
    /// argument, a transient queue, and bindings between them.
    fn sample() -> VHost<u64> {
        let mut v: VHost<u64> = VHost::new("/");
        for (name, durable) in [("dx", true), ("tx", false)] {
            let d = ExchangeDeclare {
                name: name.into(),
                kind: "topic".into(),
                passive: false,
                durable,
                auto_delete: false,
                internal: false,
                arguments: FieldTable::default(),
            };
            assert!(v.declare_exchange(&d).is_ok());
        }
        let mut args = FieldTable::default();
        args.insert(ShortString::from("x-max-length"), AMQPValue::LongInt(10));
        for (name, durable, id, arguments) in [
            ("dq", true, 7u64, args),
            ("tq", false, 8, FieldTable::default()),
        ] {
            let d = QueueDeclare {
                name: name.into(),
                passive: false,
                durable,
                exclusive: false,
                auto_delete: false,
                arguments,
            };
            assert!(v.declare_queue(&d, 0, |_| id).is_ok());
        }
        let none = FieldTable::default();
        assert!(v.bind_queue("dq", "dx", "a.#", &none).is_ok());
        assert!(v.bind_queue("tq", "dx", "b", &none).is_ok());
        assert!(v.bind_queue("dq", "tx", "c", &none).is_ok());
        v
    }

    /// Marker and version; one exchange (`dx`, topic); one queue (`dq`, store id 7,
    /// `x-max-length` 10); one binding (`dx` → `dq`, `a.#`). Transient ends are left out.
    const TOPOLOGY_V1: &[&str] = &[
        "ffffffff010100000002000000647805000000746f70696300060000002000000000000100000002",
        "0000006471070000000000000000180000002000000000120c782d6d61782d6c656e677468490000",
        "000a010000000200000064780002000000647103000000612e2306000000200000000000",
    ];

    /// Marker and version; one policy (`p1`, `^orders`, queues, priority 5, its definition).
    const POLICIES_V1: &[&str] = &[
        "ffffffff0101000000020000007031070000005e6f72646572730600000071756575657305000000",
        "00000000140000007b226d6178696d756d2d6c656e677468223a317d",
    ];

    fn pinned(parts: &[&str]) -> Vec<u8> {
        unhex(&parts.concat())
    }

    #[test]
    fn topology_record_v1_is_pinned_and_round_trips() {
        let encoded = encode_topology(&sample(), |id| Some(*id));
        if std::env::var_os("PRINT_FIXTURES").is_some() {
            println!("topology {}", hex(&encoded));
        }
        assert_eq!(hex(&encoded), hex(&pinned(TOPOLOGY_V1)));
        let mut restored: VHost<u64> = VHost::new("/");
        let mut ids = Vec::new();
        let ok = restore_topology(&mut restored, encoded.clone(), |_, id| {
            ids.push(id);
            id
        });
        assert_eq!((ok, ids), (Some(()), vec![7]));
        assert_eq!(encode_topology(&restored, |id| Some(*id)), encoded);
    }

    #[test]
    fn unversioned_topology_records_read_as_version_1() {
        let encoded = encode_topology(&sample(), |id| Some(*id));
        let legacy = encoded.slice(5..);
        let mut restored: VHost<u64> = VHost::new("/");
        assert_eq!(
            restore_topology(&mut restored, legacy, |_, id| id),
            Some(())
        );
        assert_eq!(encode_topology(&restored, |id| Some(*id)), encoded);
    }

    #[test]
    fn an_unknown_version_restores_nothing() {
        let mut data = encode_topology(&sample(), |id| Some(*id)).to_vec();
        if let Some(v) = data.get_mut(4) {
            *v = 2;
        }
        let mut restored: VHost<u64> = VHost::new("/");
        let ok = restore_topology(&mut restored, Bytes::from(data), |_, id| id);
        assert_eq!(ok, None);
        assert!(restored.queue("dq").is_none());
    }

    #[test]
    fn policies_record_v1_is_pinned_and_round_trips() {
        let rows = vec![(
            "p1".to_string(),
            "^orders".to_string(),
            "queues".to_string(),
            5i64,
            "{\"maximum-length\":1}".to_string(),
        )];
        let encoded = encode_policies(&rows);
        if std::env::var_os("PRINT_FIXTURES").is_some() {
            println!("policies {}", hex(&encoded));
        }
        assert_eq!(hex(&encoded), hex(&pinned(POLICIES_V1)));
        assert_eq!(decode_policies(encoded.clone()), rows);
        assert_eq!(decode_policies(encoded.slice(5..)), rows);
    }

    /// Operator policies (kind 4) use the policies body: one operator policy (`cap`, `.*`,
    /// queues, priority 0, `{"max-length":2}`).
    const OPERATOR_POLICIES_V1: &[&str] = &[
        "ffffffff010100000003000000636170020000002e2a060000007175657565730000000000000000",
        "100000007b226d61782d6c656e677468223a327d",
    ];

    #[test]
    fn operator_policies_record_v1_is_pinned_and_round_trips() {
        let rows = vec![(
            "cap".to_string(),
            ".*".to_string(),
            "queues".to_string(),
            0i64,
            "{\"max-length\":2}".to_string(),
        )];
        let encoded = encode_policies(&rows);
        if std::env::var_os("PRINT_FIXTURES").is_some() {
            println!("operator policies {}", hex(&encoded));
        }
        assert_eq!(hex(&encoded), hex(&pinned(OPERATOR_POLICIES_V1)));
        assert_eq!(decode_policies(encoded), rows);
    }
}
