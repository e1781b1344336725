//! What the broker keeps in `charon-store` and how it comes back at start.
//!
//! Definitions: each vhost's *durable topology* (durable exchanges, durable queues, bindings whose
//! ends are both durable) is one definition record, rewritten after every topology change in that
//! vhost; its policies are another. Messages: a persistent message (delivery_mode 2) enqueued in a
//! durable queue is a `Publish` record (its queue key is `vhost NUL name`); its removal a `Settle`;
//! deliveries are marked lazily (`Delivered`) so that recovered messages come back redelivered.

use std::path::Path;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes};
use charon_core::{Destination, ExchangeDeclare, Message, QueueDeclare, VHost};
use charon_protocol::{BasicProperties, FieldTable, RawProperties};
use charon_store::{Fs, RealFs, Record, Recovered, Store, StoreConfig, StoreError, StoredMessage};

use crate::queue::QueueHandle;

const KIND_TOPOLOGY: &str = "topology";
const KIND_POLICIES: &str = "policies";

/// The broker's handle on its store.
#[derive(Debug)]
pub struct Persistence {
    store: Store,
}

/// The store key of queue `name` in `vhost`.
pub fn queue_key(vhost: &str, name: &str) -> Arc<str> {
    Arc::from(format!("{vhost}\u{0}{name}"))
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
pub(crate) fn encode_topology<Q: Clone>(v: &VHost<Q>) -> Bytes {
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

/// Declares the recovered durable topology into `v`; `spawn` makes each queue's actor.
pub(crate) fn restore_topology(
    v: &mut VHost<QueueHandle>,
    data: Bytes,
    mut spawn: impl FnMut(&charon_core::QueueMeta) -> QueueHandle,
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
        if let Err(e) = v.declare_queue(&d, 0, &mut spawn) {
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

/// The store's form of `message` entering queue `key` under `id`.
fn stored(
    key: &Arc<str>,
    id: u64,
    message: &Message,
    enqueued_at_ms: u64,
    expires_at_ms: Option<u64>,
) -> StoredMessage {
    StoredMessage {
        message_id: 0,
        enqueued_at_ms,
        expires_at_ms,
        exchange: message.exchange.clone(),
        routing_key: message.routing_key.clone(),
        properties: message.properties.0.clone(),
        body: message.body.clone(),
        queues: vec![(key.clone(), id)],
    }
}

impl Persistence {
    /// Opens the store under `data_dir` (`<data_dir>/store`) and recovers it.
    pub fn open(data_dir: &Path) -> Result<(Arc<Persistence>, Recovered), StoreError> {
        let fs: Arc<dyn Fs> = Arc::new(RealFs);
        let (store, rec) = Store::open(fs, &StoreConfig::new(data_dir.join("store")))?;
        if rec.truncated_bytes > 0 {
            tracing::warn!(
                bytes = rec.truncated_bytes,
                "dropped a torn or corrupt log tail at recovery"
            );
        }
        Ok((Arc::new(Persistence { store }), rec))
    }

    /// Saves a vhost's durable topology, as [`encode_topology`] made it; the ticket completes
    /// when it is on disk (declare-ok waits for it).
    pub fn save_topology(&self, vhost: &str, encoded: Bytes) -> charon_store::Ticket {
        self.store.append(Record::PutDefinition {
            kind: Arc::from(KIND_TOPOLOGY),
            key: Arc::from(vhost),
            value: encoded,
        })
    }

    /// Saves a vhost's policies.
    pub fn save_policies(&self, vhost: &str, data: Bytes) {
        self.put(KIND_POLICIES, vhost, data);
    }

    fn put(&self, kind: &str, key: &str, value: Bytes) {
        let r = Record::PutDefinition {
            kind: Arc::from(kind),
            key: Arc::from(key),
            value,
        };
        if let Err(e) = self.store.append_nowait(r) {
            tracing::error!(error = %e, "could not save definitions");
        }
    }

    /// Writes a persistent message enqueued in durable queue `key` under `id`; the ticket
    /// completes once it is on disk.
    pub fn publish(
        &self,
        key: &Arc<str>,
        id: u64,
        message: &Message,
        enqueued_at_ms: u64,
        expires_at_ms: Option<u64>,
    ) -> charon_store::Ticket {
        self.store.append(Record::Publish(stored(
            key,
            id,
            message,
            enqueued_at_ms,
            expires_at_ms,
        )))
    }

    /// Writes, as one record, that the message `from_id` left `from_key` and its dead-lettered
    /// copy entered durable queue `key` under `id`.
    pub fn dead_letter_move(
        &self,
        from: (&Arc<str>, u64),
        key: &Arc<str>,
        id: u64,
        message: &Message,
        enqueued_at_ms: u64,
        expires_at_ms: Option<u64>,
    ) -> charon_store::Ticket {
        self.store.append(Record::DeadLetterMove {
            from_queue: from.0.clone(),
            from_id: from.1,
            message: stored(key, id, message, enqueued_at_ms, expires_at_ms),
        })
    }

    /// Records that messages left durable queue `key` (goes with the next group commit).
    pub fn settle(&self, key: &Arc<str>, ids: Vec<u64>) {
        if let Err(e) = self.store.append_nowait(Record::Settle {
            queue: key.clone(),
            ids,
        }) {
            tracing::error!(error = %e, "could not record settled messages");
        }
    }

    /// Records that messages of durable queue `key` were delivered.
    pub fn delivered(&self, key: &Arc<str>, ids: Vec<u64>) {
        let _ = self.store.append_nowait(Record::Delivered {
            queue: key.clone(),
            ids,
        });
    }

    /// Free bytes on the data directory's file system.
    pub fn free_bytes(&self) -> Option<u64> {
        self.store.free_bytes().ok()
    }
}

/// Kinds of the definition records (for the broker's restore).
pub(crate) fn topology_of(rec: &Recovered, vhost: &str) -> Option<Bytes> {
    rec.definitions
        .get(&(Arc::from(KIND_TOPOLOGY), Arc::from(vhost)))
        .cloned()
}

/// The policies record of a vhost.
pub(crate) fn policies_of(rec: &Recovered, vhost: &str) -> Option<Bytes> {
    rec.definitions
        .get(&(Arc::from(KIND_POLICIES), Arc::from(vhost)))
        .cloned()
}
