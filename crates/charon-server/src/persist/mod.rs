//! What the broker keeps in `charon-store` and how it comes back at start
//! (format: docs/storage-format.md; this module owns what the server puts in it).
//!
//! Definitions: each vhost's *durable topology* (durable exchanges, durable queues with their
//! store ids, bindings whose ends are both durable) is one definition record, rewritten after
//! every topology change in that vhost; its policies are another. Messages: a persistent message
//! (delivery_mode 2) routed to durable queues is one `Publish` record naming its place in each
//! of them (the body is stored once); removal from a queue is a `Settle`; dead-lettering is one
//! `DeadLetter` record (source out, copy into every durable target, atomically); the first
//! deliveries of a queue's batch are one `DeliveryCounts` record (recovered messages come back
//! redelivered).
//!
//! Memory: the bodies of stored messages count against a broker-wide budget
//! (`message_memory_budget`, less the store's in-memory index, at least an eighth of it); past
//! it, queues keep newly stored bodies on disk only and read them back when they deliver them
//! (see [`Persistence::over_budget`]).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use std::sync::OnceLock;

use bytes::Bytes;
use charon_core::Message;
use charon_store::{
    AppendError, Command, Commit, DurableWatch, MessageRef, NewMessage, OpenError, Recovered,
    Store, StoreConfig,
};

mod definitions;
mod recovered_floor;

pub(crate) use definitions::{decode_policies, encode_policies, encode_topology, restore_topology};

/// The broker's store, set once when it is opened (inside the runtime, after the broker is
/// built); the broker and each of its vhosts share this one slot.
pub(crate) type StoreSlot = Arc<OnceLock<Arc<Persistence>>>;

/// A write the store has taken (or refused): [`Durable::wait`] tells once it is on disk.
#[derive(Debug)]
pub(crate) struct Durable(Result<Pending, AppendError>);

/// How a taken write is waited for.
#[derive(Debug)]
enum Pending {
    /// Its own completion.
    Commit(Commit),
    /// Its log index on the store's durable watch (a persistent publish: no completion per
    /// message, docs/performance.md).
    At(u64, DurableWatch),
}

impl Durable {
    fn commit(commit: Commit) -> Self {
        Durable(Ok(Pending::Commit(commit)))
    }

    /// The outcome if it is known without waiting: on disk (`true`), refused (`false`).
    pub(crate) fn ready(&self) -> Option<bool> {
        match &self.0 {
            Ok(Pending::At(index, watch)) => watch.is_durable(*index).then_some(true),
            Ok(Pending::Commit(_)) => None,
            Err(_) => Some(false),
        }
    }

    /// A persistent publish's log index (`None` for a write with its own completion, or one
    /// the store refused): it is on disk once a [`CommitWatch`] has seen that index.
    pub(crate) fn index(&self) -> Option<u64> {
        match &self.0 {
            Ok(Pending::At(index, _)) => Some(*index),
            _ => None,
        }
    }

    /// A watch of the store's durable index, for writes with an [`Durable::index`].
    pub(crate) fn watch(&self) -> Option<CommitWatch> {
        match &self.0 {
            Ok(Pending::At(_, watch)) => Some(CommitWatch(watch.clone())),
            _ => None,
        }
    }

    /// Whether the write is on disk (false: the store refused it or failed writing).
    pub(crate) async fn wait(self) -> bool {
        match self.0 {
            Ok(Pending::Commit(commit)) => commit.await.is_ok(),
            Ok(Pending::At(index, mut watch)) => {
                watch.is_durable(index) || watch.reached(index).await.is_ok()
            }
            Err(_) => false,
        }
    }
}

/// The store's durable index, followed by a connection's commit waiter: one watch per
/// connection, woken once per group commit, instead of a wait per publish.
#[derive(Debug, Clone)]
pub(crate) struct CommitWatch(DurableWatch);

impl CommitWatch {
    /// The durable index now, and whether nothing later will become durable (the store was
    /// poisoned or closed); marks it seen for [`CommitWatch::changed`].
    pub(crate) fn seen(&mut self) -> (u64, bool) {
        self.0.seen()
    }

    /// Completes after the next group commit not seen yet; `false` once the store is gone.
    pub(crate) async fn changed(&mut self) -> bool {
        self.0.changed().await
    }
}

const KIND_TOPOLOGY: u8 = 1;
const KIND_POLICIES: u8 = 2;
/// Users, vhosts and permissions (JSON, see `admin::store`), key "".
const KIND_ACCESS: u8 = 3;
/// A vhost's operator policies (same body as [`KIND_POLICIES`]).
const KIND_OPERATOR_POLICIES: u8 = 4;
/// A durable queue's delivered mark (`queue::marks`), key: the queue's store id (`u64` LE).
const KIND_DELIVERED_MARK: u8 = 5;

/// The broker's handle on its store.
#[derive(Debug)]
pub(crate) struct Persistence {
    store: Store,
    /// Body bytes of stored messages that queues hold in memory.
    resident: AtomicU64,
    /// Above this many resident bytes, queues page newly stored bodies out.
    budget: u64,
    /// Page-out backpressure and its test knob (`Paging`).
    paging: Paging,
    /// Next queue store id (ids never repeat, even across restarts).
    next_queue: AtomicU64,
    /// The store's durable index, for publishes' confirms.
    durable: DurableWatch,
    /// The last log index recovery found — or, while the archive has not decided the replays
    /// of an earlier stop, the one the first run after it found (`recovered_floor`). Every index
    /// above it may be new in this run, even one a record lost in the crash had been given: the
    /// store hands such indices out again.
    recovered_index: u64,
    /// Where `recovered_floor` keeps its file.
    data_dir: std::path::PathBuf,
}

/// Held bodies keep at least `budget / BODY_BUDGET_FLOOR_DIV`, however large the index.
const BODY_BUDGET_FLOOR_DIV: u64 = 8;

/// Memory budget for held bodies and page-out backpressure (`Config`'s
/// `message_memory_budget`, `page_out_flow_bytes`, `page_out_test_delay_ms`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Paging {
    /// Body bytes held in memory across all queues before queues page out.
    pub(crate) budget: u64,
    /// A queue with more bytes than this written for page-out but not yet durable throttles
    /// its publishers.
    pub(crate) flow_bytes: u64,
    /// Tests only: at most one page-out pass per queue per this many ms.
    pub(crate) test_delay_ms: u64,
}

/// The absolute expiry a message carries itself (its `expiration` property), from `now`.
fn own_expiry(message: &Message, now: u64) -> Option<u64> {
    let raw = message.properties.expiration()?;
    let ttl: u64 = std::str::from_utf8(raw).ok()?.trim().parse().ok()?;
    Some(now.saturating_add(ttl))
}

/// A name and its `Bytes` form.
type NameBytes = Option<(Arc<str>, Bytes)>;

thread_local! {
    /// The last exchange and routing key stored from this thread, as `Bytes`: consecutive
    /// publishes share their names' `Arc<str>` (`connection/shapes.rs`), so a steady publisher
    /// costs no allocation and copy per message for them.
    static NAMES: std::cell::RefCell<[NameBytes; 2]> =
        const { std::cell::RefCell::new([None, None]) };
}

/// `name` as `Bytes`, shared with the last one of slot `slot` when it is the same `Arc`.
fn name_bytes(slot: usize, name: &Arc<str>) -> Bytes {
    if name.is_empty() {
        return Bytes::new();
    }
    NAMES.with(|n| {
        let mut n = n.borrow_mut();
        let Some(entry) = n.get_mut(slot) else {
            return Bytes::copy_from_slice(name.as_bytes());
        };
        match entry {
            Some((a, b)) if Arc::ptr_eq(a, name) => b.clone(),
            _ => {
                let b = Bytes::copy_from_slice(name.as_bytes());
                *entry = Some((name.clone(), b.clone()));
                b
            }
        }
    })
}

/// `message` borrowed for the store, enqueued at `now` (copied once into its batch: no
/// `Bytes` clones, no promotion allocation of the body).
fn message_ref(message: &Message, now: u64) -> MessageRef<'_> {
    MessageRef {
        exchange: message.exchange.as_bytes(),
        routing_key: message.routing_key.as_bytes(),
        properties: &message.properties.0,
        // A published message is always resident when it is stored.
        body: message.body.resident().unwrap_or(&[]),
        enqueue_ms: now,
        expiry_ms: own_expiry(message, now),
    }
}

/// The store's form of `message`, enqueued at `now`.
fn new_message(message: &Message, now: u64) -> NewMessage {
    NewMessage {
        exchange: name_bytes(0, &message.exchange),
        routing_key: name_bytes(1, &message.routing_key),
        properties: message.properties.0.clone(),
        // A published or dead-lettered message is always resident when it is stored.
        body: message.body.to_bytes().unwrap_or_default(),
        enqueue_ms: now,
        expiry_ms: own_expiry(message, now),
    }
}

impl Persistence {
    /// Opens the store under `data_dir` (`<data_dir>/store`) and recovers it; `paging` holds
    /// the in-memory budget for bodies (bytes) and page-out backpressure.
    pub(crate) fn open(
        data_dir: &Path,
        paging: Paging,
    ) -> Result<(Arc<Persistence>, Recovered), OpenError> {
        let (store, rec) = Store::open_dir(data_dir.join("store"), StoreConfig::default())?;
        if rec.truncated_bytes > 0 {
            tracing::warn!(
                bytes = rec.truncated_bytes,
                "dropped a torn log tail at recovery"
            );
        }
        let p = Persistence {
            durable: store.durable_watch(),
            store,
            resident: AtomicU64::new(0),
            budget: paging.budget,
            paging,
            next_queue: AtomicU64::new(1),
            recovered_index: recovered_floor::open(data_dir, rec.last_index).unwrap_or_else(|e| {
                tracing::error!(error = %e, "could not keep the recovered index for the archive's replays");
                rec.last_index
            }),
            data_dir: data_dir.to_path_buf(),
        };
        for q in rec.queues.keys() {
            p.note_queue_id(*q);
        }
        Ok((Arc::new(p), rec))
    }

    /// A reader of stored messages' metadata (recovery keeps none in memory).
    pub(crate) fn meta_reader(&self) -> charon_store::MetaReader {
        self.store.meta_reader()
    }

    /// A store id for a new durable queue: above every id in use and every id handed out
    /// before (the clock's microseconds), so a deleted queue's id never comes back.
    pub(crate) fn new_queue_id(&self) -> u64 {
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
    pub(crate) fn note_queue_id(&self, id: u64) {
        self.next_queue
            .fetch_max(id.saturating_add(1), Ordering::Relaxed);
    }

    fn put(&self, kind: u8, vhost: &str, value: Bytes) -> Option<Durable> {
        let cmd = Command::PutDefinition {
            kind,
            key: Bytes::copy_from_slice(vhost.as_bytes()),
            value,
        };
        match self.store.append(cmd) {
            Ok((_, commit)) => Some(Durable::commit(commit)),
            Err(e) => {
                tracing::error!(error = %e, "could not save definitions");
                None
            }
        }
    }

    /// Saves a vhost's durable topology, as [`encode_topology`] made it; the commit completes
    /// when it is on disk (declare-ok waits for it).
    pub(crate) fn save_topology(&self, vhost: &str, encoded: Bytes) -> Option<Durable> {
        self.put(KIND_TOPOLOGY, vhost, encoded)
    }

    /// Saves users, vhosts and permissions (JSON made by `admin::store`); the commit completes
    /// when they are on disk.
    pub(crate) fn save_access(&self, data: Bytes) -> Option<Durable> {
        self.put(KIND_ACCESS, "", data)
    }

    /// Forgets a deleted vhost's topology, policies and operator policies.
    pub(crate) fn forget_vhost(&self, vhost: &str) -> Option<Durable> {
        let mut last = None;
        for kind in [KIND_TOPOLOGY, KIND_POLICIES, KIND_OPERATOR_POLICIES] {
            let cmd = Command::DeleteDefinition {
                kind,
                key: Bytes::copy_from_slice(vhost.as_bytes()),
            };
            match self.store.append(cmd) {
                Ok((_, commit)) => last = Some(Durable::commit(commit)),
                Err(e) => tracing::error!(error = %e, "could not delete definitions"),
            }
        }
        last
    }

    /// Saves a vhost's policies; the commit completes when they are on disk.
    pub(crate) fn save_policies(&self, vhost: &str, data: Bytes) -> Option<Durable> {
        self.put(KIND_POLICIES, vhost, data)
    }

    /// Saves a vhost's operator policies; the commit completes when they are on disk.
    pub(crate) fn save_operator_policies(&self, vhost: &str, data: Bytes) -> Option<Durable> {
        self.put(KIND_OPERATOR_POLICIES, vhost, data)
    }

    /// Stores a persistent message once for its places `members` (queue store id, id there);
    /// returns its store id (none: the store refused it) and the write to confirm on.
    pub(crate) fn publish(
        &self,
        message: &Message,
        members: &[(u64, u64)],
        now: u64,
    ) -> (Option<u64>, Durable) {
        match self
            .store
            .publish_nowait(message_ref(message, now), members)
        {
            Ok(appended) => (
                Some(appended.index),
                Durable(Ok(Pending::At(appended.index, self.durable.clone()))),
            ),
            Err(e) => {
                tracing::warn!(error = %e, "a persistent message could not be stored");
                (None, Durable(Err(e)))
            }
        }
    }

    /// Like [`Self::publish`], durable with the next group commit (nobody waits for it).
    pub(crate) fn publish_nowait(
        &self,
        message: &Message,
        members: &[(u64, u64)],
        now: u64,
    ) -> Option<u64> {
        match self
            .store
            .publish_nowait(message_ref(message, now), members)
        {
            Ok(a) => Some(a.index),
            Err(e) => {
                tracing::error!(error = %e, "could not store a message");
                None
            }
        }
    }

    /// Dead-letters, as one record, message `source` (queue store id, id there) into its copy
    /// `message` at `targets` (none: it is only removed). Returns the copy's store id.
    pub(crate) fn dead_letter(
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
    pub(crate) fn settle(&self, queue: u64, ids: Vec<u64>) {
        if let Err(e) = self.store.append_nowait(Command::Settle { queue, ids }) {
            tracing::error!(error = %e, "could not record settled messages");
        }
    }

    /// Records deliveries of messages of queue `queue`: (id, deliveries so far), as one
    /// `DeliveryCounts` record for the whole batch (goes with the next group commit).
    pub(crate) fn delivered(&self, queue: u64, ids: &[(u64, u32)]) {
        if ids.is_empty() {
            return;
        }
        let cmd = Command::DeliveryCounts {
            queue,
            counts: ids.to_vec(),
        };
        if let Err(e) = self.store.append_nowait(cmd) {
            tracing::error!(error = %e, "could not record deliveries");
        }
    }

    /// Moves, as one record, the message of member `source` to `targets` (none: it is only
    /// removed): a delayed message routed when due.
    pub(crate) fn route(&self, source: (u64, u64), targets: Vec<(u64, u64)>) {
        if let Err(e) = self.store.append_nowait(Command::Route { source, targets }) {
            tracing::error!(error = %e, "could not record a routed delayed message");
        }
    }

    /// Records that member `(queue, id)` is parked until `due_ms` for retry `attempt`.
    pub(crate) fn park(&self, queue: u64, id: u64, due_ms: u64, attempt: u32) {
        let cmd = Command::Park {
            member: (queue, id),
            due_ms,
            attempt,
        };
        if let Err(e) = self.store.append_nowait(cmd) {
            tracing::error!(error = %e, "could not record a parked message");
        }
    }

    /// Writes queue `queue`'s delivered mark (`queue::marks`; goes with the next group
    /// commit, replacing the one before).
    pub(crate) fn put_mark(&self, queue: u64, mark: Vec<u8>) {
        let cmd = Command::PutDefinition {
            kind: KIND_DELIVERED_MARK,
            key: Bytes::copy_from_slice(&queue.to_le_bytes()),
            value: Bytes::from(mark),
        };
        if let Err(e) = self.store.append_nowait(cmd) {
            tracing::error!(error = %e, "could not record deliveries");
        }
    }

    /// Forgets queue `queue`'s delivered mark (the queue is deleted).
    pub(crate) fn forget_mark(&self, queue: u64) {
        let cmd = Command::DeleteDefinition {
            kind: KIND_DELIVERED_MARK,
            key: Bytes::copy_from_slice(&queue.to_le_bytes()),
        };
        if let Err(e) = self.store.append_nowait(cmd) {
            tracing::error!(error = %e, "could not forget a queue's delivered mark");
        }
    }

    /// Removes every message of queue `queue` (deleted, or unknown at recovery).
    pub(crate) fn purge(&self, queue: u64) {
        if let Err(e) = self.store.append_nowait(Command::Purge { queue }) {
            tracing::error!(error = %e, "could not record a queue's removal");
        }
    }

    /// A barrier: completes once everything appended before it is durable.
    pub(crate) fn barrier(&self) -> Durable {
        Durable(self.store.sync().map(Pending::Commit))
    }

    /// Reads stored message `msg`'s body back.
    pub(crate) fn read_body(&self, msg: u64) -> Option<Bytes> {
        let at = self.store.current_body(msg)?;
        match self.store.read_body(&at) {
            Ok(b) => Some(b),
            Err(e) => {
                tracing::error!(error = %e, "could not read a message body back");
                None
            }
        }
    }

    /// The body of the message at member `(queue, qid)`, read back, and the message's id.
    pub(crate) fn read_member_body(&self, queue: u64, qid: u64) -> Option<(u64, Bytes)> {
        let Some(at) = self.store.member_body((queue, qid)) else {
            tracing::error!(queue, qid, "a stored member is not in the store");
            return None;
        };
        match self.store.read_body(&at) {
            Ok(b) => Some((at.msg, b)),
            Err(e) => {
                tracing::error!(error = %e, "could not read a message body back");
                None
            }
        }
    }

    /// The id of the message at member `(queue, qid)`, if the store holds it.
    pub(crate) fn message_of(&self, queue: u64, qid: u64) -> Option<u64> {
        self.store.member_body((queue, qid)).map(|b| b.msg)
    }

    /// Page-out backpressure settings.
    pub(crate) fn paging(&self) -> Paging {
        self.paging
    }

    /// A watch on the durable log index (a queue waiting to page bodies out wakes on it).
    pub(crate) fn durable_watch(&self) -> DurableWatch {
        self.durable.clone()
    }

    /// Reads the messages at members `(queue, qid)` back at once: their store ids and bodies
    /// (in the same order; `None`: not held or not readable).
    pub(crate) fn read_member_bodies(&self, members: &[(u64, u64)]) -> Vec<Option<(u64, Bytes)>> {
        self.store.read_member_bodies(members)
    }

    /// Last durable log index (bodies stored at or below it can be read back).
    /// The last log index recovery found at open, before this run wrote anything: a record
    /// index at or below it is one that survived the last stop; one above it may have been given
    /// to a record the crash lost *and* to a record this run wrote since (the topology's
    /// rewrite at start, new publishes), so [`Self::durable_index`] cannot decide that.
    pub(crate) fn recovered_index(&self) -> u64 {
        self.recovered_index
    }

    /// The archive decided every replay an earlier stop interrupted: the next start keeps its own
    /// recovered index (`recovered_floor`).
    pub(crate) fn clear_recovered_floor(&self) {
        if let Err(e) = recovered_floor::clear(&self.data_dir) {
            tracing::error!(error = %e, "could not remove the recovered floor");
        }
    }

    pub(crate) fn durable_index(&self) -> u64 {
        self.store.durable_index()
    }

    /// `n` body bytes of stored messages are now held in memory.
    pub(crate) fn hold(&self, n: u64) {
        self.resident.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` body bytes of stored messages are no longer held in memory.
    pub(crate) fn release(&self, n: u64) {
        let _ = self
            .resident
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(n))
            });
    }

    /// Body bytes held in memory now (counted against the budget).
    pub(crate) fn held_bytes(&self) -> u64 {
        self.resident.load(Ordering::Relaxed)
    }

    /// What held bodies may take now: the budget less the store's index (which a backlog of
    /// millions needs in memory anyway: 41 bytes a message), but never under an eighth of it,
    /// so a 10M backlog keeps within the memory a 1M one needs (docs/performance.md).
    pub(crate) fn body_budget(&self) -> u64 {
        self.budget
            .saturating_sub(self.store.index_bytes())
            .max(self.budget / BODY_BUDGET_FLOOR_DIV)
    }

    /// Bytes held over the budget (0 when within it).
    pub(crate) fn excess(&self) -> u64 {
        self.resident
            .load(Ordering::Relaxed)
            .saturating_sub(self.body_budget())
    }

    /// Whether held bodies exceed the budget (queues then page newly stored bodies out).
    pub(crate) fn over_budget(&self) -> bool {
        self.resident.load(Ordering::Relaxed) > self.body_budget()
    }

    /// Free bytes on the data directory's file system.
    pub(crate) fn free_bytes(&self) -> Option<u64> {
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

/// The recovered delivered marks, by queue store id (their stored form, `queue::marks`).
pub(crate) fn marks_of(rec: &Recovered) -> std::collections::HashMap<u64, Bytes> {
    rec.definitions
        .iter()
        .filter(|((kind, _), _)| *kind == KIND_DELIVERED_MARK)
        .filter_map(|((_, key), v)| {
            let q = u64::from_le_bytes(key.as_ref().try_into().ok()?);
            Some((q, v.clone()))
        })
        .collect()
}

/// A vhost's operator policies record.
pub(crate) fn operator_policies_of(rec: &Recovered, vhost: &str) -> Option<Bytes> {
    rec.definitions
        .get(&(
            KIND_OPERATOR_POLICIES,
            Bytes::copy_from_slice(vhost.as_bytes()),
        ))
        .cloned()
}
