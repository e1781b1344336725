//! The byte format of the definition records the broker keeps in the store: a vhost's durable
//! topology and its policies (docs/storage-format.md, "Definition records"). Pure encoding: it
//! knows the domain's `VHost`, not the queues' handles (the caller says which store id a queue
//! has, and makes the queue when one is restored).

use bytes::{Buf, BufMut, Bytes};
use charon_core::{Destination, ExchangeDeclare, QueueDeclare, QueueMeta, VHost};
use charon_protocol::{BasicProperties, FieldTable, RawProperties};

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
    let mut out = Vec::new();
    let exchanges: Vec<_> = v
        .exchanges()
        .filter(|x| x.durable && !x.name.is_empty() && !x.name.starts_with("amq."))
        .collect();
    out.put_u32_le(exchanges.len() as u32);
    for x in &exchanges {
        put_str(&mut out, x.name.as_bytes());
        put_str(&mut out, x.kind.as_str().as_bytes());
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
/// definition and store id.
pub(crate) fn restore_topology<Q: Clone>(
    v: &mut VHost<Q>,
    data: Bytes,
    mut spawn: impl FnMut(&QueueMeta, u64) -> Q,
) -> Option<()> {
    let mut r = Reader(data);
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
    let mut out = Vec::new();
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
    let mut r = Reader(data);
    let mut out = Vec::new();
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
