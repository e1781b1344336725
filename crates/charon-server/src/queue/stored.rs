//! A queue's side of the store: which of its messages the store holds (and under which store
//! message id), settling them as they leave, and keeping message bodies within the broker's
//! memory budget: once held bodies exceed it, bodies are paged out (the queue keeps the message
//! without its body) and read back from the store when the message is delivered.
//!
//! Persistent messages of a durable queue are stored under the queue's store id by whoever
//! publishes them. Other messages (transient ones, and every message of a non-durable queue) are
//! held in memory and, only when the budget is exceeded, written by the queue itself to its
//! *page-out area*: a store queue id of its own that no durable definition names, so recovery
//! purges it at start (docs/storage-format.md, "Transient bodies paged out").
//!
//! Who writes what: the publishing channel writes a persistent message once for all its durable
//! queues (`Publish`); the dead-lettering queue writes the move (`DeadLetter`); the queue itself
//! writes removals (`Settle`, `Purge`), first deliveries (its delivered mark, `queue::marks`;
//! `DeliveryCounts` for what the mark does not cover) and its page-outs.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use charon_core::{Body, Delivery, Message, MsgId, QueueState};
use charon_protocol::RawProperties;

use super::held_runs::HeldRuns;
use super::idmap::IdMap;
use super::idset::IdSet;
use super::marks::DeliveryMarks;
use super::pending_bodies::Pending;
use crate::persist::Persistence;

/// A message whose body the queue holds in memory, counted against the budget (only these
/// have a record of their own here: a paged-out backlog costs nothing per message on this
/// side, the store finds a paged message's body by its member, docs/performance.md).
#[derive(Debug, Clone, Copy)]
struct Held {
    /// The store's message id (0: a transient body not written to the page-out area yet).
    msg: u64,
    /// Body bytes counted against the budget.
    bytes: u32,
    /// Not a stored message: held for paging only.
    transient: bool,
}

/// Paged-out messages that look alike (same exchange, routing key, properties and body size:
/// the common case of a steady publisher) share one `Arc<Message>`; a queue of ten million
/// paged-out messages then holds ten million pointers, not ten million message records. The
/// body is found through the queue's own id for the message, never through the `Arc`.
#[derive(Debug, Default)]
pub(crate) struct PagedShapes {
    last: Option<Arc<Message>>,
}

impl PagedShapes {
    /// A paged-out message with these fields (shared with the previous one when equal).
    pub(crate) fn get(
        &mut self,
        exchange: &[u8],
        routing_key: &[u8],
        props: &[u8],
        len: u64,
    ) -> Arc<Message> {
        if let Some(m) = &self.last
            && m.body == (Body::Paged { len })
            && m.bcc.is_empty()
            && m.exchange.as_bytes() == exchange
            && m.routing_key.as_bytes() == routing_key
            && &m.properties.0[..] == props
        {
            return m.clone();
        }
        let m = Arc::new(Message::new(
            Arc::from(String::from_utf8_lossy(exchange).as_ref()),
            Arc::from(String::from_utf8_lossy(routing_key).as_ref()),
            RawProperties(Bytes::copy_from_slice(props)),
            Body::Paged { len },
        ));
        self.last = Some(m.clone());
        m
    }
}

/// Ready body bytes of a queue from which its transient messages are tracked for paging.
pub(super) const TRACK_BACKLOG: u64 = 4 << 20;
/// Stale ids `trim_held` may drop per call beyond twice those pushed since the last.
const TRIM_HELD_MIN: usize = 4096;
/// Body size from which a transient message is always tracked for paging.
pub(super) const TRACK_BYTES: usize = 64 << 10;
/// Transient bodies smaller than this are held and counted but never paged out: paging one
/// adds an entry to the store's index (counted against the same budget, [`Persistence::body_budget`])
/// larger than the body it frees, so each one paged raised the excess instead of lowering it —
/// scenario e at 10M (16-byte bodies) paged every message, not the excess, and cost 3.8× as
/// much CPU per expired message as at 1M (docs/performance.md, "Expiry at 10M").
pub(super) const PAGE_MIN_BYTES: u32 = charon_store::INDEX_BYTES_PER_MESSAGE as u32;

/// The store side of one queue actor.
#[derive(Debug)]
pub(crate) struct StoreSide {
    pub(super) p: Arc<Persistence>,
    /// The queue's store id (durable queues; for others the same as `shadow`, never used).
    sid: u64,
    /// The page-out area's store id (purged at every start).
    shadow: u64,
    /// Something was written to the page-out area.
    shadow_used: bool,
    /// Messages the store holds for this queue (under the queue's ids; the store may know a
    /// retried one under its first id, `alias`).
    stored: IdSet,
    /// Transient messages paged out to the page-out area.
    paged_out: IdSet,
    /// Bodies held in memory and counted against the budget.
    bodies: IdMap<Held>,
    /// Messages whose bodies are held, oldest first (candidates for paging out).
    held: VecDeque<MsgId>,
    /// Small transient bodies held and counted, not in `bodies` (runs of ids: nothing a
    /// message); they move to `bodies` once the budget is exceeded (`page_out`).
    small: HeldRuns,
    /// Transient bodies under [`PAGE_MIN_BYTES`] held and counted, never paged out (as `small`).
    tiny: HeldRuns,
    /// Shapes of paged-out messages (no paged-out message keeps a connection's read buffer
    /// alive: its properties are copied).
    shapes: PagedShapes,
    /// Messages retried to the tail under a new id (`queue::retry`): new id → id in the store,
    /// and back. Ids are never reused in a queue, so both directions are unambiguous.
    alias: IdMap<MsgId>,
    alias_back: IdMap<MsgId>,
    /// After the last page-out pass: page-out's lag (`PageLag`).
    lag: PageLag,
    /// When the last page-out pass ran (the test knob `page_out_test_delay_ms` spaces them).
    last_pass: Option<std::time::Instant>,
    /// Ids pushed to `held` since the last `trim_held`.
    held_pushed: usize,
    /// Stored messages put into the queue already paged out (over budget, [`Self::admit`]),
    /// their bodies kept here until their records are durable.
    pending: Pending,
    /// The last message [`Self::admit`] let in paged out.
    last_admitted_paged: Option<MsgId>,
    /// First deliveries as one delivered mark (`queue::marks`).
    marks: DeliveryMarks,
}

/// How far a queue's page-out lags behind, after a pass.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PageLag {
    /// Bytes of ready transient bodies written to the page-out area and still in memory
    /// (the store has not made them durable yet): publishers are throttled past
    /// `page_out_flow_bytes`.
    pub(crate) bytes: u64,
    /// The store index the pass stopped at (the next pass can go on once it is durable).
    pub(crate) waiting_for: Option<u64>,
    /// The test knob held the pass back: the next may run after this.
    pub(crate) next_pass: Option<std::time::Instant>,
}

impl StoreSide {
    /// The store side of queue `sid` with page-out area `shadow`, with the messages recovered
    /// for it.
    pub(crate) fn new(
        p: Arc<Persistence>,
        sid: u64,
        shadow: u64,
        stored: IdSet,
        shapes: PagedShapes,
        marks: DeliveryMarks,
    ) -> Self {
        StoreSide {
            marks,
            p,
            sid,
            shadow,
            shadow_used: false,
            stored,
            paged_out: IdSet::default(),
            bodies: IdMap::default(),
            held: VecDeque::new(),
            small: HeldRuns::default(),
            tiny: HeldRuns::default(),
            shapes,
            alias: IdMap::default(),
            alias_back: IdMap::default(),
            lag: PageLag::default(),
            last_pass: None,
            held_pushed: 0,
            pending: Pending::default(),
            last_admitted_paged: None,
        }
    }

    /// Small transient body `id` of `bytes` bytes is held (already counted): in the runs that
    /// may be paged out, or, under [`PAGE_MIN_BYTES`], in those never paged.
    fn hold_small(&mut self, id: MsgId, bytes: u32) {
        if bytes < PAGE_MIN_BYTES {
            self.tiny.insert(id, bytes);
        } else {
            self.small.insert(id, bytes);
        }
    }

    /// Small transient body `id` is no longer held here: its size, if it was.
    fn drop_small(&mut self, id: MsgId) -> Option<u32> {
        self.small.remove(id).or_else(|| self.tiny.remove(id))
    }

    /// `id`'s body is held: a candidate for paging out, after those already held.
    fn push_held(&mut self, id: MsgId) {
        self.held.push_back(id);
        self.held_pushed += 1;
    }

    /// Drops ids of bodies no longer held from the front of `held` (those that left, or were
    /// renamed, first): without it a queue that never pages out would keep every id it ever
    /// tracked. At most a bounded number per call, proportional to what was pushed since the
    /// last, so no turn of the actor pays for a whole backlog at once.
    fn trim_held(&mut self) {
        let mut budget = TRIM_HELD_MIN + 2 * std::mem::take(&mut self.held_pushed);
        while budget > 0
            && let Some(&id) = self.held.front()
            && !self.bodies.contains_key(id)
        {
            self.held.pop_front();
            budget -= 1;
        }
        self.shrink();
    }

    /// Page-out's lag after the last pass.
    pub(crate) fn page_lag(&self) -> PageLag {
        self.lag
    }

    /// Whether a page-out pass may run now (always, unless the test knob spaces them).
    fn pass_allowed(&mut self) -> bool {
        let delay = self.p.paging().test_delay_ms;
        if delay == 0 {
            return true;
        }
        let now = std::time::Instant::now();
        let every = std::time::Duration::from_millis(delay);
        match self.last_pass {
            Some(t) if now < t + every => {
                self.lag.next_pass = Some(t + every);
                false
            }
            _ => {
                self.last_pass = Some(now);
                true
            }
        }
    }

    /// The id under which the store knows the queue's message `id`.
    fn store_qid(&self, id: MsgId) -> MsgId {
        self.alias.get(id).copied().unwrap_or(id)
    }

    /// Stored message `id` was parked until `due` for retry `attempt` (one `Park` record, no
    /// body copy).
    pub(crate) fn park(&self, id: MsgId, due: u64, attempt: u32) {
        if self.stored.contains(id) {
            self.p.park(self.sid, self.store_qid(id), due, attempt);
        }
    }

    /// Message `old` came back to the queue (a retry) under id `new`; the store keeps it under
    /// its first id.
    pub(crate) fn renamed(&mut self, old: MsgId, new: MsgId) {
        let stored = self.stored.remove(old);
        let paged = self.paged_out.remove(old);
        let body = self.bodies.remove(old).or_else(|| {
            self.drop_small(old).map(|bytes| Held {
                msg: 0,
                bytes,
                transient: true,
            })
        });
        if !stored && !paged && body.is_none() {
            return;
        }
        if stored {
            self.stored.insert(new);
        }
        if paged {
            self.paged_out.insert(new);
        }
        match body {
            // A small transient body not written anywhere stays in the runs (a mass release
            // is one run of new ids), as when it was accepted: no per-message entry in
            // `bodies` and `held` for each released message (their growth cost turns).
            Some(b) if b.transient && b.msg == 0 && (b.bytes as usize) < TRACK_BYTES => {
                self.hold_small(new, b.bytes);
            }
            Some(b) => {
                self.bodies.insert(new, b);
                self.push_held(new);
            }
            None => {}
        }
        if !stored && !paged && body.is_none_or(|b| b.msg == 0) {
            // A transient body the store never saw: nothing to find under the old id.
            return;
        }
        let first = self.alias.remove(old).unwrap_or(old);
        self.alias_back.insert(first, new);
        self.alias.insert(new, first);
    }

    fn forget_alias(&mut self, id: MsgId) -> MsgId {
        if self.alias.is_empty() {
            return id;
        }
        match self.alias.remove(id) {
            Some(first) => {
                self.alias_back.remove(first);
                first
            }
            None => id,
        }
    }

    /// Message `id` entered the queue; `stored` is its store id when the sender stored it
    /// for this queue; `backlog` is the queue's ready bytes. A transient message is tracked
    /// for paging only when it is large or the queue holds a backlog of bodies: a queue its
    /// consumers keep short pays nothing for paging it will never need (at most
    /// [`TRACK_BACKLOG`] bytes of small bodies per queue go untracked and uncounted).
    pub(crate) fn accept(
        &mut self,
        id: MsgId,
        stored: Option<u64>,
        message: &Message,
        backlog: u64,
    ) {
        let held = match &message.body {
            Body::Paged { .. } => 0,
            Body::Resident(_) | Body::Inline(_) => {
                u32::try_from(message.body.len()).unwrap_or(u32::MAX)
            }
        };
        if stored.is_none() && backlog < TRACK_BACKLOG && (held as usize) < TRACK_BYTES {
            return;
        }
        if let Some(msg) = stored {
            self.stored.insert(id);
            self.marks.arrived(id, msg);
        }
        // Not stored: tracked only so that its body can be paged out under pressure.
        if held > 0 && stored.is_none() && (held as usize) < TRACK_BYTES {
            self.hold_small(id, held);
            self.p.hold(u64::from(held));
        } else if held > 0 {
            self.bodies.insert(
                id,
                Held {
                    msg: stored.unwrap_or(0),
                    bytes: held,
                    transient: stored.is_none(),
                },
            );
            self.p.hold(u64::from(held));
            self.push_held(id);
        }
    }

    /// What the queue keeps of `message` (its `id`, to be stored under store id `stored`):
    /// while bodies are over the budget, a stored message goes into the queue already paged
    /// out (its body is in the store's record; alike messages share one `Arc`), and the body
    /// comes back to be kept aside only until that record is durable
    /// ([`Self::keep_until_durable`]). Before, it entered with its body and a later pass
    /// swapped it out of the ready ring once durable. A queue whose last such message is still
    /// ready goes on admitting paged out while held bodies stay above half the budget, so a
    /// backlog does not alternate between the two ways as group commits free kept bodies.
    pub(crate) fn admit(
        &mut self,
        state: &QueueState,
        id: MsgId,
        stored: Option<u64>,
        message: Arc<Message>,
    ) -> (Arc<Message>, Option<Bytes>) {
        // An inline body is paged like a resident one (counted alike in `accept`).
        let body = match (&message.body, stored) {
            (b @ (Body::Resident(_) | Body::Inline(_)), Some(_))
                if !b.is_empty() && message.bcc.is_empty() =>
            {
                b
            }
            _ => return (message, None),
        };
        let paging = self.p.over_budget()
            || (self
                .last_admitted_paged
                .is_some_and(|l| state.ready_message(l).is_some())
                && self.p.held_bytes() > self.p.body_budget() / 2);
        if !paging {
            return (message, None);
        }
        let Some(body) = body.to_bytes() else {
            return (message, None);
        };
        let paged = self.shapes.get(
            message.exchange.as_bytes(),
            message.routing_key.as_bytes(),
            &message.properties.0,
            message.body_size(),
        );
        self.last_admitted_paged = Some(id);
        (paged, Some(body))
    }

    /// Keeps the body of stored message `msg`, admitted paged out as the queue's `id`, in
    /// memory until its record is durable: reads find it here meanwhile (never the store,
    /// which would wait for the writer), and a store that fails keeps it readable.
    pub(crate) fn keep_until_durable(&mut self, id: MsgId, msg: u64, body: Bytes) {
        self.p.hold(body.len() as u64);
        self.pending.push(id, msg, body);
    }

    /// Drops kept bodies whose records are durable now (they are read from the store from
    /// now on); the actor wakes for the oldest still waiting.
    fn release_pending(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let freed = self.pending.drop_durable(self.p.durable_index());
        if freed > 0 {
            self.p.release(freed);
        }
        if let Some(msg) = self.pending.first_msg() {
            self.lag.waiting_for = Some(self.lag.waiting_for.map_or(msg, |w| w.min(msg)));
        }
    }

    /// Direct messages durable in the archive (`queue/direct.rs`): they leave the store. The
    /// queue never tracked them (no marks, no body held), so only the settle is written.
    pub(crate) fn settle_direct(&self, ids: Vec<MsgId>) {
        if !ids.is_empty() {
            self.p.settle(self.sid, ids);
        }
    }

    /// A stored message the queue did not take (refused at publish): it leaves the store.
    pub(crate) fn refused(&mut self, id: MsgId) {
        self.marks.left(id);
        self.p.settle(self.sid, vec![id]);
    }

    /// Where message `id` sits in the store as a dead-lettering source: (queue, id).
    pub(crate) fn source_of(&self, id: Option<MsgId>) -> Option<(u64, u64)> {
        let id = id?;
        self.stored
            .contains(id)
            .then(|| (self.sid, self.store_qid(id)))
    }

    /// Message `id` left through a record that already removed it (a dead-letter move).
    pub(crate) fn moved(&mut self, id: MsgId) {
        let id = self.alias_back.get(id).copied().unwrap_or(id);
        let qid = self.forget_alias(id);
        self.marks.left(qid);
        if let Some(bytes) = self
            .bodies
            .remove(id)
            .map(|b| b.bytes)
            .or_else(|| self.drop_small(id))
        {
            self.p.release(u64::from(bytes));
        }
        self.stored.remove(id);
        self.paged_out.remove(id);
        self.shrink();
    }

    /// Messages left the queue (acked, expired, dropped, purged, ...): settle the stored ones.
    pub(crate) fn gone(&mut self, ids: Vec<MsgId>) {
        if self.stored.is_empty()
            && self.paged_out.is_empty()
            && self.bodies.is_empty()
            && self.small.is_empty()
            && self.tiny.is_empty()
        {
            return;
        }
        // The stored ones are settled under their store ids, written over `ids` in place (no
        // second list grown a message at a time).
        let mut settled = ids;
        let mut paged = Vec::new();
        // The held bytes freed, given back to the budget once for the list (one atomic update,
        // not one a message).
        let mut freed = 0u64;
        settled.retain_mut(|slot| {
            let id = *slot;
            let body = self.bodies.remove(id).or_else(|| {
                self.drop_small(id).map(|bytes| Held {
                    msg: 0,
                    bytes,
                    transient: true,
                })
            });
            if let Some(b) = body {
                freed += u64::from(b.bytes);
            }
            if self.stored.remove(id) {
                let qid = self.forget_alias(id);
                self.marks.left(qid);
                *slot = qid;
                return true;
            }
            if self.paged_out.remove(id) || body.is_some_and(|b| b.msg != 0) {
                // A transient body written to the page-out area.
                paged.push(self.forget_alias(id));
            } else if body.is_some() {
                self.forget_alias(id);
            }
            false
        });
        if freed > 0 {
            self.p.release(freed);
        }
        self.shrink();
        if !settled.is_empty() {
            self.p.settle(self.sid, settled);
        }
        if !paged.is_empty() {
            self.p.settle(self.shadow, paged);
        }
    }

    /// Gives the tables' memory back once they are mostly empty (a drained backlog would keep
    /// them at their largest). Amortised O(1), as `charon_store`'s index.
    fn shrink(&mut self) {
        let cap = self.held.capacity();
        if cap > 1024 && self.held.len() * 4 < cap {
            self.held.shrink_to(self.held.len() * 2);
        }
    }

    /// The queue is deleted: all its stored messages go.
    pub(crate) fn purge(&mut self) {
        let held: u64 = self.bodies.values().map(|b| u64::from(b.bytes)).sum();
        self.p
            .release(held + self.small.bytes() + self.tiny.bytes() + self.pending.bytes());
        self.pending = Pending::default();
        self.small = HeldRuns::default();
        self.tiny = HeldRuns::default();
        self.bodies = IdMap::default();
        self.stored = IdSet::default();
        self.paged_out = IdSet::default();
        self.held = VecDeque::new();
        self.alias = IdMap::default();
        self.alias_back = IdMap::default();
        self.p.purge(self.sid);
        if self.marks.any() {
            self.p.forget_mark(self.sid);
        }
        self.marks = DeliveryMarks::default();
        if self.shadow_used && self.shadow != self.sid {
            self.p.purge(self.shadow);
        }
    }

    /// Delivery counters of messages `ids` (failed deliveries + 1, written at the first
    /// delivery and at every failed one): recovered after a crash, they come back
    /// redelivered, with their failed-delivery counts (`x-delivery-count`, delivery limits).
    /// First deliveries in id order (`fifo`: the queue delivers so) advance the queue's
    /// delivered mark (one small record for the batch, `queue::marks`); the rest are written
    /// one by one in one `DeliveryCounts` record.
    pub(crate) fn delivered(&mut self, ids: &mut Vec<(MsgId, u32)>, fifo: bool) {
        if self.stored.is_empty() {
            ids.clear();
            return;
        }
        ids.retain(|(id, _)| self.stored.contains(*id));
        for (id, _) in ids.iter_mut() {
            *id = self.store_qid(*id);
        }
        if let Some(mark) = self.marks.take(ids, fifo) {
            self.p.put_mark(self.sid, mark.encode());
        }
        if !ids.is_empty() {
            self.p.delivered(self.sid, ids);
        }
        ids.clear();
    }

    /// `message` (id `id`) with its body, read back from the store if it was paged out.
    pub(crate) fn load(&self, id: MsgId, message: &Arc<Message>) -> Arc<Message> {
        self.load_stored(id, message).0
    }

    /// [`StoreSide::load`], and the store's message id when the store holds it for this queue
    /// (the message's identity in the store, `Delivery::stored`).
    pub(crate) fn load_stored(
        &self,
        id: MsgId,
        message: &Arc<Message>,
    ) -> (Arc<Message>, Option<u64>) {
        let stored = self.stored.contains(id);
        if !message.is_paged() {
            let msg = match self.bodies.get(id) {
                Some(b) if stored => Some(b.msg),
                // Stored without a counted body (an empty one): asked of the store.
                _ if stored => self.p.message_of(self.sid, self.store_qid(id)),
                _ => None,
            };
            return (message.clone(), msg);
        }
        if stored && let Some((msg, body)) = self.pending.get(id) {
            return (Arc::new(message.with_body(body.clone())), Some(msg));
        }
        let area = if stored {
            self.sid
        } else if self.paged_out.contains(id) {
            self.shadow
        } else {
            tracing::error!(id, "a paged-out message is not in the store");
            return (message.clone(), None);
        };
        match self.p.read_member_body(area, self.store_qid(id)) {
            Some((msg, body)) => (Arc::new(message.with_body(body)), stored.then_some(msg)),
            None => {
                tracing::error!(id, "a paged-out message body could not be read back");
                (message.clone(), None)
            }
        }
    }

    /// Gives every paged-out message among `deliveries` its body, read back in one go: the
    /// store finds them all under one lock and reads runs of neighbouring records with one
    /// positioned read each (a backlog delivered in order lies mostly in consecutive records)
    /// instead of one read and one allocation per message. What it cannot read stays paged
    /// ([`Self::load`] then tries again, alone). A stored message it gives its body gets its
    /// store id too (`Delivery::stored`: [`Self::load_stored`] need not ask the store again).
    pub(crate) fn load_many(&self, deliveries: &mut [Delivery]) {
        // (delivery, whether stored); the members asked, in the same order.
        let mut paged: Vec<(usize, bool)> = Vec::new();
        let mut members: Vec<(u64, u64)> = Vec::new();
        for (i, d) in deliveries.iter_mut().enumerate() {
            if !d.message.is_paged() {
                continue;
            }
            let stored = self.stored.contains(d.id);
            if stored && let Some((msg, body)) = self.pending.get(d.id) {
                d.message = Arc::new(d.message.with_body(body.clone()));
                d.stored = Some(msg);
                continue;
            }
            let area = if stored {
                self.sid
            } else if self.paged_out.contains(d.id) {
                self.shadow
            } else {
                continue;
            };
            paged.push((i, stored));
            members.push((area, self.store_qid(d.id)));
        }
        if paged.len() < 2 {
            return;
        }
        let read = self.p.read_member_bodies(&members);
        for ((i, stored), got) in paged.into_iter().zip(read) {
            if let (Some(d), Some((msg, body))) = (deliveries.get_mut(i), got) {
                d.message = Arc::new(d.message.with_body(body));
                if stored {
                    d.stored = Some(msg);
                }
            }
        }
    }

    /// Pages bodies out, oldest first, while held bodies exceed the budget. A body must be
    /// durable before it leaves memory (it is read back from disk): stored messages are once
    /// their publish is committed; transient ones are first written to the page-out area (as
    /// many as the excess needs) and paged out on a later pass, once that write is committed.
    ///
    /// Leaves [`Self::page_lag`]: the written bodies still waiting, and what the next pass
    /// waits for (the actor wakes for it; its publishers wait while the lag is large).
    pub(crate) fn page_out(&mut self, state: &mut QueueState) {
        self.trim_held();
        crate::turn_cpu::mark("trim_held");
        self.lag = PageLag::default();
        self.page_out_held(state);
        self.release_pending();
    }

    /// [`Self::page_out`]'s pass over the held bodies.
    fn page_out_held(&mut self, state: &mut QueueState) {
        if !self.p.over_budget() {
            return;
        }
        // Over budget: small bodies become candidates too (after those tracked already); tiny
        // ones never do (`PAGE_MIN_BYTES`).
        for (id, bytes) in self.small.take_all() {
            self.bodies.insert(
                id,
                Held {
                    msg: 0,
                    bytes,
                    transient: true,
                },
            );
            self.push_held(id);
        }
        crate::turn_cpu::mark("small_take_all");
        self.lag.bytes = self.write_transient(state);
        crate::turn_cpu::mark("write_transient");
        if !self.pass_allowed() {
            return;
        }
        let durable = self.p.durable_index();
        while let Some(&id) = self.held.front() {
            let Some(e) = self.bodies.get(id).copied() else {
                self.held.pop_front();
                continue;
            };
            if e.transient && e.msg == 0 {
                // A transient body not written yet: wait for it, unless it is not ready
                // (delivered: it is about to leave).
                if state.ready_message(id).is_some() {
                    return;
                }
                self.held.pop_front();
                continue;
            }
            if e.msg > durable {
                self.lag.waiting_for = Some(e.msg);
                return;
            }
            self.held.pop_front();
            // Only ready messages: an unacked one is about to leave anyway.
            let Some(m) = state.ready_message(id) else {
                continue;
            };
            let paged = if m.bcc.is_empty() {
                self.shapes.get(
                    m.exchange.as_bytes(),
                    m.routing_key.as_bytes(),
                    &m.properties.0,
                    m.body_size(),
                )
            } else {
                let mut p = m.paged_out();
                p.properties = RawProperties(Bytes::copy_from_slice(&p.properties.0));
                Arc::new(p)
            };
            state.swap_message(id, paged);
            self.p.release(u64::from(e.bytes));
            self.bodies.remove(id);
            if e.transient {
                self.paged_out.insert(id);
                self.lag.bytes = self.lag.bytes.saturating_sub(u64::from(e.bytes));
            }
            if !self.p.over_budget() {
                // Within the budget again: what is written may stay in memory.
                self.lag.bytes = 0;
                return;
            }
        }
    }

    /// Writes held transient bodies, oldest first, to the page-out area until what is being
    /// written covers the bytes over budget (or there is nothing more to write). Returns the
    /// bytes of ready transient bodies written (now or before) and still held.
    fn write_transient(&mut self, state: &QueueState) -> u64 {
        let mut excess = self.p.excess();
        let mut written = 0u64;
        let now = super::now_ms();
        for &id in &self.held {
            if excess == 0 {
                return written;
            }
            let Some(e) = self.bodies.get_mut(id) else {
                continue;
            };
            excess = excess.saturating_sub(u64::from(e.bytes));
            if !e.transient {
                continue;
            }
            let Some(m) = state.ready_message(id) else {
                continue;
            };
            if e.msg != 0 {
                written += u64::from(e.bytes);
                continue;
            }
            if let Some(msg) = self.p.publish_nowait(
                m,
                &[(self.shadow, self.alias.get(id).copied().unwrap_or(id))],
                now,
            ) {
                e.msg = msg;
                self.shadow_used = true;
                written += u64::from(e.bytes);
            }
        }
        written
    }
}
