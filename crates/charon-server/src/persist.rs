//! What the broker keeps in `charon-store` and how it comes back at start
//! (format: docs/storage-format.md; this module owns what the server puts in it).
//!
//! Definitions: each vhost's *durable topology* (durable exchanges, durable queues with their
//! store ids, bindings whose ends are both durable) is one definition record, rewritten after
//! every topology change in that vhost; its policies are another. Messages: a persistent message
//! (delivery_mode 2) routed to durable queues is one `Publish` record naming its place in each
//! of them (the body is stored once); removal from a queue is a `Settle`; dead-lettering is one
//! `DeadLetter` record (source out, copy into every durable target, atomically); the first
//! delivery of a message is a `DeliveryCount` (recovered messages come back redelivered).
//!
//! Memory: the bodies of stored messages count against a broker-wide budget
//! (`message_memory_budget`); past it, queues keep newly stored bodies on disk only and read
//! them back when they deliver them (see [`Persistence::over_budget`]).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Buf, BufMut, Bytes};
use charon_core::{Destination, ExchangeDeclare, Message, QueueDeclare, VHost};
use charon_protocol::{BasicProperties, FieldTable, RawProperties};
use charon_store::{
    AppendError, Command, Commit, NewMessage, OpenError, Recovered, Store, StoreConfig,
};

use crate::queue::QueueHandle;

const KIND_TOPOLOGY: u8 = 1;
const KIND_POLICIES: u8 = 2;
/// Users, vhosts and permissions (JSON, see `admin::store`), key "".
const KIND_ACCESS: u8 = 3;

/// The broker's handle on its store.
#[derive(Debug)]
pub struct Persistence {
    store: Store,
    /// Body bytes of stored messages that queues hold in memory.
    resident: AtomicU64,
    /// Above this many resident bytes, queues page newly stored bodies out.
    budget: u64,
    /// Next queue store id (ids never repeat, even across restarts).
    next_queue: AtomicU64,
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
pub(crate) fn encode_topology(v: &VHost<QueueHandle>) -> Bytes {
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
        out.put_u64_le(q.handle.store_id().unwrap_or(0));
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
pub(crate) fn restore_topology(
    v: &mut VHost<QueueHandle>,
    data: Bytes,
    mut spawn: impl FnMut(&charon_core::QueueMeta, u64) -> QueueHandle,
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
        if let Err(e) = v.declare_queue(&d, 0, &mut |meta: &charon_core::QueueMeta| {
            spawn(meta, store_id)
        }) {
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

/// The absolute expiry a message carries itself (its `expiration` property), from `now`.
fn own_expiry(message: &Message, now: u64) -> Option<u64> {
    let raw = message.properties.expiration()?;
    let ttl: u64 = std::str::from_utf8(raw).ok()?.trim().parse().ok()?;
    Some(now.saturating_add(ttl))
}

/// The store's form of `message`, enqueued at `now`.
fn new_message(message: &Message, now: u64) -> NewMessage {
    NewMessage {
        exchange: Bytes::copy_from_slice(message.exchange.as_bytes()),
        routing_key: Bytes::copy_from_slice(message.routing_key.as_bytes()),
        properties: message.properties.0.clone(),
        body: message.body.clone(),
        enqueue_ms: now,
        expiry_ms: own_expiry(message, now),
    }
}

impl Persistence {
    /// Opens the store under `data_dir` (`<data_dir>/store`) and recovers it; `budget` is the
    /// in-memory budget for stored bodies (bytes).
    pub fn open(data_dir: &Path, budget: u64) -> Result<(Arc<Persistence>, Recovered), OpenError> {
        let (store, rec) = Store::open_dir(data_dir.join("store"), StoreConfig::default())?;
        if rec.truncated_bytes > 0 {
            tracing::warn!(
                bytes = rec.truncated_bytes,
                "dropped a torn log tail at recovery"
            );
        }
        let p = Persistence {
            store,
            resident: AtomicU64::new(0),
            budget,
            next_queue: AtomicU64::new(1),
        };
        for q in rec.queues.keys() {
            p.note_queue_id(*q);
        }
        Ok((Arc::new(p), rec))
    }

    /// A store id for a new durable queue: above every id in use and every id handed out
    /// before (the clock's microseconds), so a deleted queue's id never comes back.
    pub fn new_queue_id(&self) -> u64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        let mut cur = self.next_queue.load(Ordering::Relaxed);
        loop {
            let id = cur.max(now);
            match self.next_queue.compare_exchange_weak(
                cur,
                id + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return id,
                Err(c) => cur = c,
            }
        }
    }

    /// A recovered queue id: new ids go above it.
    pub fn note_queue_id(&self, id: u64) {
        self.next_queue
            .fetch_max(id.saturating_add(1), Ordering::Relaxed);
    }

    fn put(&self, kind: u8, vhost: &str, value: Bytes) -> Option<Commit> {
        let cmd = Command::PutDefinition {
            kind,
            key: Bytes::copy_from_slice(vhost.as_bytes()),
            value,
        };
        match self.store.append(cmd) {
            Ok((_, commit)) => Some(commit),
            Err(e) => {
                tracing::error!(error = %e, "could not save definitions");
                None
            }
        }
    }

    /// Saves a vhost's durable topology, as [`encode_topology`] made it; the commit completes
    /// when it is on disk (declare-ok waits for it).
    pub fn save_topology(&self, vhost: &str, encoded: Bytes) -> Option<Commit> {
        self.put(KIND_TOPOLOGY, vhost, encoded)
    }

    /// Saves users, vhosts and permissions (JSON made by `admin::store`); the commit completes
    /// when they are on disk.
    pub fn save_access(&self, data: Bytes) -> Option<Commit> {
        self.put(KIND_ACCESS, "", data)
    }

    /// Forgets a deleted vhost's topology and policies.
    pub fn forget_vhost(&self, vhost: &str) -> Option<Commit> {
        let mut last = None;
        for kind in [KIND_TOPOLOGY, KIND_POLICIES] {
            let cmd = Command::DeleteDefinition {
                kind,
                key: Bytes::copy_from_slice(vhost.as_bytes()),
            };
            match self.store.append(cmd) {
                Ok((_, commit)) => last = Some(commit),
                Err(e) => tracing::error!(error = %e, "could not delete definitions"),
            }
        }
        last
    }

    /// Saves a vhost's policies; the commit completes when they are on disk.
    pub fn save_policies(&self, vhost: &str, data: Bytes) -> Option<Commit> {
        self.put(KIND_POLICIES, vhost, data)
    }

    /// Stores a persistent message once for its places `members` (queue store id, id there);
    /// returns its store id and the commit to confirm on.
    pub fn publish(
        &self,
        message: &Message,
        members: Vec<(u64, u64)>,
        now: u64,
    ) -> Result<(u64, Commit), AppendError> {
        let (appended, commit) = self.store.append(Command::Publish {
            message: new_message(message, now),
            members,
        })?;
        Ok((appended.index, commit))
    }

    /// Like [`Self::publish`], durable with the next group commit (nobody waits for it).
    pub fn publish_nowait(
        &self,
        message: &Message,
        members: Vec<(u64, u64)>,
        now: u64,
    ) -> Option<u64> {
        match self.store.append_nowait(Command::Publish {
            message: new_message(message, now),
            members,
        }) {
            Ok(a) => Some(a.index),
            Err(e) => {
                tracing::error!(error = %e, "could not store a message");
                None
            }
        }
    }

    /// Dead-letters, as one record, message `source` (queue store id, id there) into its copy
    /// `message` at `targets` (none: it is only removed). Returns the copy's store id.
    pub fn dead_letter(
        &self,
        source: (u64, u64),
        message: &Message,
        targets: Vec<(u64, u64)>,
        now: u64,
    ) -> Option<u64> {
        let stores = !targets.is_empty();
        match self.store.append_nowait(Command::DeadLetter {
            source,
            message: new_message(message, now),
            targets,
        }) {
            Ok(a) => stores.then_some(a.index),
            Err(e) => {
                tracing::error!(error = %e, "could not record a dead letter");
                None
            }
        }
    }

    /// Records that messages left queue `queue` (goes with the next group commit).
    pub fn settle(&self, queue: u64, ids: Vec<u64>) {
        if let Err(e) = self.store.append_nowait(Command::Settle { queue, ids }) {
            tracing::error!(error = %e, "could not record settled messages");
        }
    }

    /// Records the first delivery of messages of queue `queue`.
    pub fn delivered(&self, queue: u64, ids: &[u64]) {
        for &id in ids {
            let cmd = Command::DeliveryCount {
                member: (queue, id),
                count: 1,
            };
            if self.store.append_nowait(cmd).is_err() {
                return;
            }
        }
    }

    /// Removes every message of queue `queue` (deleted, or unknown at recovery).
    pub fn purge(&self, queue: u64) {
        if let Err(e) = self.store.append_nowait(Command::Purge { queue }) {
            tracing::error!(error = %e, "could not record a queue's removal");
        }
    }

    /// A barrier: completes once everything appended before it is durable.
    pub fn barrier(&self) -> Option<Commit> {
        self.store.sync().ok()
    }

    /// Reads stored message `msg`'s body back.
    pub fn read_body(&self, msg: u64) -> Option<Bytes> {
        let at = self.store.current_body(msg)?;
        match self.store.read_body(&at) {
            Ok(b) => Some(b),
            Err(e) => {
                tracing::error!(error = %e, "could not read a message body back");
                None
            }
        }
    }

    /// Last durable log index (bodies stored at or below it can be read back).
    pub fn durable_index(&self) -> u64 {
        self.store.durable_index()
    }

    /// `n` body bytes of stored messages are now held in memory.
    pub fn hold(&self, n: u64) {
        self.resident.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` body bytes of stored messages are no longer held in memory.
    pub fn release(&self, n: u64) {
        let _ = self
            .resident
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(n))
            });
    }

    /// Whether held bodies exceed the budget (queues then page newly stored bodies out).
    pub fn over_budget(&self) -> bool {
        self.resident.load(Ordering::Relaxed) > self.budget
    }

    /// Free bytes on the data directory's file system.
    pub fn free_bytes(&self) -> Option<u64> {
        self.store.free_bytes().ok()
    }
}

/// A vhost's topology record.
pub(crate) fn topology_of(rec: &Recovered, vhost: &str) -> Option<Bytes> {
    rec.definitions
        .get(&(KIND_TOPOLOGY, Bytes::copy_from_slice(vhost.as_bytes())))
        .cloned()
}

/// The saved users, vhosts and permissions, if any.
pub(crate) fn access_of(rec: &Recovered) -> Option<Bytes> {
    rec.definitions.get(&(KIND_ACCESS, Bytes::new())).cloned()
}

/// A vhost's policies record.
pub(crate) fn policies_of(rec: &Recovered, vhost: &str) -> Option<Bytes> {
    rec.definitions
        .get(&(KIND_POLICIES, Bytes::copy_from_slice(vhost.as_bytes())))
        .cloned()
}
