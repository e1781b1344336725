//! The ready messages of a queue in id order: a ring of compact slots (in chunks of at most
//! 256, [`Chunked`]: no growth or shrink copies the backlog at once), sorted by id, with tombstones for messages taken out of the middle (expiry anywhere in the queue,
//! removal by id, retries). Publishes append at the back, deliveries pop the front and a
//! requeued message goes back to its id's place (near the front: the ring shifts the shorter
//! side), so the common operations cost O(1) and about 32 bytes a message, against ~1.7 k
//! instructions and ~100 bytes for the B-tree map plus expiry set this replaces
//! (docs/performance.md).
//!
//! Runs: consecutive ids that share one `Arc<Message>` (paged-out and recovered messages that
//! look alike share their shape, `PagedShapes` in the server), expiry time, return count and
//! redelivered flag are one slot (`run` more ids after `id`): a recovered or paged-out backlog
//! of millions is a handful of slots instead of 32 bytes a message (docs/performance.md,
//! "Recovery of 10M"). Taking one message out of the middle of a run splits it.
//!
//! Expiry: while the expiry times of the slots are non-decreasing in id order (no TTL at all, or
//! one queue TTL with one publisher: the usual cases) the ring itself is the expiry order and
//! no index is kept. The first insert that breaks the order builds an expiry set
//! (`BTreeSet<(time, id)>`), kept until the queue is empty again.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::chunked::{Chunked, Pos};

use crate::message::Message;
use crate::queue::MsgId;

/// No expiry (a slot's `expires_at`).
const NEVER: u64 = u64::MAX;
/// `Slot::flags`: the redelivered bit; the bits below it count returns (saturating).
const REDELIVERED: u32 = 1 << 31;

/// A ready message.
#[derive(Debug, Clone)]
pub(crate) struct Ready {
    pub(crate) message: Arc<Message>,
    pub(crate) redelivered: bool,
    /// Absolute expiry time (ms), from x-message-ttl / expiration.
    pub(crate) expires_at: Option<u64>,
    /// Times the message was returned to the queue (for x-delivery-limit).
    pub(crate) returns: u32,
}

fn flags(returns: u32, redelivered: bool) -> u32 {
    returns.min(REDELIVERED - 1) | if redelivered { REDELIVERED } else { 0 }
}

/// One place in the ring (32 bytes): ids `id ..= id + run`, alike (same message, expiry,
/// returns, redelivered). A tombstone (`message: None`, always `run == 0`) keeps its id and
/// expiry so the ring stays sorted by id and, while monotonic, by expiry.
#[derive(Debug, Clone)]
struct Slot {
    id: MsgId,
    message: Option<Arc<Message>>,
    expires_at: u64,
    /// Returns and [`REDELIVERED`].
    flags: u32,
    /// More ids in this slot after `id`.
    run: u32,
}

impl Slot {
    fn last(&self) -> MsgId {
        self.id + u64::from(self.run)
    }

    fn ready(&self, message: Arc<Message>) -> Ready {
        Ready {
            message,
            redelivered: self.flags & REDELIVERED != 0,
            expires_at: (self.expires_at != NEVER).then_some(self.expires_at),
            returns: self.flags & !REDELIVERED,
        }
    }

    /// Whether a message with these fields at id `last() + 1` can join this slot.
    fn joins(&self, message: &Arc<Message>, expires_at: u64, flags: u32) -> bool {
        self.run < u32::MAX
            && self.expires_at == expires_at
            && self.flags == flags
            && self
                .message
                .as_ref()
                .is_some_and(|m| Arc::ptr_eq(m, message))
    }
}

/// Ready messages by id, with their expiry order.
#[derive(Debug, Default)]
pub(crate) struct ReadyRing {
    slots: Chunked<Slot>,
    /// Live messages (ids in live slots, runs counted whole).
    live: usize,
    /// Tombstones.
    dead: usize,
    /// `Some` once expiry times stopped being monotonic in id order.
    expiry: Option<BTreeSet<(u64, MsgId)>>,
}

impl ReadyRing {
    /// Number of ready messages.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// `Ok(i)`: slot `i` holds `id` (live or a tombstone); `Err(i)`: `id` would go at `i`.
    fn position(&self, id: MsgId) -> Result<Pos, Pos> {
        // Fast paths: the back (publish) and the front (delivery, requeue).
        match self.slots.back() {
            None => return Err(self.slots.end()),
            Some(b) if b.last() < id => return Err(self.slots.end()),
            // In the back slot (the newest message, or the run it joined).
            Some(b) if b.id <= id => return Ok(self.slots.last()),
            _ => {}
        }
        if let Some(f) = self.slots.front() {
            if id < f.id {
                return Err(self.slots.first());
            }
            if id <= f.last() {
                return Ok(self.slots.first());
            }
        }
        let p = self.slots.partition_point(|s| s.id <= id);
        match self
            .slots
            .prev(p)
            .and_then(|i| Some((i, self.slots.get(i)?)))
        {
            Some((i, s)) if id <= s.last() => Ok(i),
            _ => Err(p),
        }
    }

    /// Splits the run of slot `i` (which holds `id`) so that `id` has a slot of its own;
    /// returns its index.
    fn isolate(&mut self, i: Pos, id: MsgId) -> Pos {
        let Some(s) = self.slots.get_mut(i) else {
            return i;
        };
        if s.run == 0 {
            return i;
        }
        let (first, last) = (s.id, s.last());
        let mut one = s.clone();
        one.id = id;
        one.run = 0;
        let mut at = i;
        if id > first {
            s.run = (id - first - 1) as u32;
            at = self.slots.insert(self.slots.next(i), one.clone());
        } else {
            *s = one.clone();
        }
        if id < last {
            let mut right = one;
            right.id = id + 1;
            right.run = (last - id - 1) as u32;
            // A split chunk may move `at`: it is right before the inserted slot.
            let r = self.slots.insert(self.slots.next(at), right);
            at = self.slots.prev(r).unwrap_or(at);
        }
        at
    }

    /// Insert `id` (not present as a live message).
    pub(crate) fn insert(&mut self, id: MsgId, r: Ready) {
        if let Err(r) = self.push_back(id, r) {
            self.insert_anywhere(id, r);
        }
    }

    /// [`Self::insert`] of an id above every slot (a publish: the usual case) whose expiry keeps
    /// the ring in expiry order: joins the back slot's run or becomes the new back slot, without
    /// the general path's search and neighbour lookups (the same ring as that path makes:
    /// `ReadyRing::insert_anywhere`, proptest `fast_paths_make_the_general_paths_ring`).
    /// Otherwise the message comes back.
    fn push_back(&mut self, id: MsgId, r: Ready) -> Result<(), Ready> {
        let expires_at = r.expires_at.unwrap_or(NEVER);
        let flags = flags(r.returns, r.redelivered);
        match self.slots.back_mut() {
            Some(b) if b.last() >= id || (self.expiry.is_none() && b.expires_at > expires_at) => {
                return Err(r);
            }
            Some(b) if b.last() + 1 == id && b.joins(&r.message, expires_at, flags) => {
                b.run += 1;
            }
            _ => self.slots.push_back(Slot {
                id,
                message: Some(r.message),
                expires_at,
                flags,
                run: 0,
            }),
        }
        self.live += 1;
        if let Some(set) = self.expiry.as_mut()
            && expires_at != NEVER
        {
            set.insert((expires_at, id));
        }
        Ok(())
    }

    /// [`Self::insert`] anywhere: in its id's place (a requeue, a tombstone refilled), joining
    /// a neighbour's run when alike; builds the expiry index once expiry times stop rising
    /// with ids.
    fn insert_anywhere(&mut self, id: MsgId, r: Ready) {
        let expires_at = r.expires_at.unwrap_or(NEVER);
        let flags = flags(r.returns, r.redelivered);
        // The neighbours whose expiry times bound this one's while the ring is the order.
        let (before, after) = match self.position(id) {
            Ok(i) => {
                // Its tombstone: the message comes back to its place.
                let Some(s) = self.slots.get_mut(i) else {
                    return;
                };
                if s.message.is_some() {
                    return;
                }
                *s = Slot {
                    id,
                    message: Some(r.message),
                    expires_at,
                    flags,
                    run: 0,
                };
                self.dead -= 1;
                (self.slots.prev(i), self.slots.next(i))
            }
            Err(i) => {
                let p = self.slots.prev(i);
                match p.and_then(|p| self.slots.get_mut(p)) {
                    Some(prev)
                        if prev.last() + 1 == id && prev.joins(&r.message, expires_at, flags) =>
                    {
                        prev.run += 1;
                        (p, i)
                    }
                    _ => {
                        let at = self.slots.insert(
                            i,
                            Slot {
                                id,
                                message: Some(r.message),
                                expires_at,
                                flags,
                                run: 0,
                            },
                        );
                        (self.slots.prev(at), self.slots.next(at))
                    }
                }
            }
        };
        self.live += 1;
        match self.expiry.as_mut() {
            Some(set) => {
                if expires_at != NEVER {
                    set.insert((expires_at, id));
                }
            }
            None => {
                let before = before
                    .and_then(|p| self.slots.get(p))
                    .map_or(0, |s| s.expires_at);
                let after = self.slots.get(after).map_or(NEVER, |s| s.expires_at);
                if before > expires_at || expires_at > after {
                    self.build_expiry_index();
                }
            }
        }
    }

    fn build_expiry_index(&mut self) {
        self.expiry = Some(
            self.slots
                .iter()
                .filter(|s| s.message.is_some() && s.expires_at != NEVER)
                .flat_map(|s| (s.id..=s.last()).map(move |id| (s.expires_at, id)))
                .collect(),
        );
    }

    /// Remove `id`; `None` when it is not ready.
    pub(crate) fn remove(&mut self, id: MsgId) -> Option<Ready> {
        let i = self.position(id).ok()?;
        self.slots.get(i)?.message.as_ref()?;
        let i = self.isolate(i, id);
        self.remove_at(i)
    }

    /// Tombstones slot `i` (a slot of one id).
    fn remove_at(&mut self, i: Pos) -> Option<Ready> {
        let slot = self.slots.get_mut(i)?;
        let message = slot.message.take()?;
        let r = slot.ready(message);
        let (t, id) = (slot.expires_at, slot.id);
        self.live -= 1;
        self.dead += 1;
        if let Some(set) = self.expiry.as_mut()
            && t != NEVER
        {
            set.remove(&(t, id));
        }
        // The front one goes in `trim` (every delivery: not worth a look at its chunk).
        if self.dead > 32 && i != self.slots.first() {
            self.compact(i);
        }
        self.trim();
        Some(r)
    }

    /// Drops the tombstones of slot `i`'s chunk once they are half of it: past a few dozen
    /// tombstones no chunk is left more than half tombstones, so the ring has at most about
    /// one per live message, and compacting costs one chunk, never the whole ring.
    fn compact(&mut self, i: Pos) {
        let (mut n, mut dead) = (0, 0);
        for s in self.slots.chunk_of(i) {
            n += 1;
            dead += usize::from(s.message.is_none());
        }
        if dead * 2 > n {
            self.dead -= self.slots.retain_in_chunk(i, |s| s.message.is_some());
        }
    }

    /// Drops tombstones at both ends.
    fn trim(&mut self) {
        while self.slots.front().is_some_and(|s| s.message.is_none()) {
            self.slots.pop_front();
            self.dead -= 1;
        }
        while self.slots.back().is_some_and(|s| s.message.is_none()) {
            self.slots.pop_back();
            self.dead -= 1;
        }
        if self.live == 0 {
            self.expiry = None;
        }
    }

    /// Remove the first ready message in id order.
    pub(crate) fn pop_first(&mut self) -> Option<(MsgId, Ready)> {
        let front = self.slots.front_mut()?;
        let id = front.id;
        if front.run == 0 {
            if front.message.is_none() {
                return self.remove_at(self.slots.first()).map(|r| (id, r));
            }
            // A slot of one message: it leaves the ring at once (the general path,
            // `remove_at`, makes it a tombstone that `trim` then drops: the same ring).
            let mut slot = self.slots.pop_front()?;
            let message = slot.message.take()?;
            self.live -= 1;
            if let Some(set) = self.expiry.as_mut()
                && slot.expires_at != NEVER
            {
                set.remove(&(slot.expires_at, id));
            }
            // The ends are never tombstones at rest: only a new front can be one.
            if self.dead > 0 {
                self.trim();
            } else if self.live == 0 {
                self.expiry = None;
            }
            return Some((id, slot.ready(message)));
        }
        let message = front.message.clone()?;
        let r = front.ready(message);
        front.id += 1;
        front.run -= 1;
        let t = front.expires_at;
        self.live -= 1;
        if let Some(set) = self.expiry.as_mut()
            && t != NEVER
        {
            set.remove(&(t, id));
        }
        Some((id, r))
    }

    /// The earliest expiry among ready messages.
    pub(crate) fn next_expiry(&self) -> Option<(u64, MsgId)> {
        match &self.expiry {
            Some(set) => set.first().copied(),
            None => self
                .slots
                .front()
                .filter(|s| s.expires_at != NEVER)
                .map(|s| (s.expires_at, s.id)),
        }
    }

    /// The live slot holding `id`.
    fn live_slot(&self, id: MsgId) -> Option<&Slot> {
        let i = self.position(id).ok()?;
        self.slots.get(i).filter(|s| s.message.is_some())
    }

    pub(crate) fn get(&self, id: MsgId) -> Option<&Arc<Message>> {
        self.live_slot(id)?.message.as_ref()
    }

    pub(crate) fn expires_at(&self, id: MsgId) -> Option<u64> {
        let s = self.live_slot(id)?;
        (s.expires_at != NEVER).then_some(s.expires_at)
    }

    pub(crate) fn returns_of(&self, id: MsgId) -> Option<u32> {
        self.live_slot(id).map(|s| s.flags & !REDELIVERED)
    }

    pub(crate) fn set_returns(&mut self, id: MsgId, returns: u32) {
        let Some(s) = self.live_slot(id) else {
            return;
        };
        let new = flags(returns, s.flags & REDELIVERED != 0);
        if new == s.flags {
            return;
        }
        if let Ok(i) = self.position(id) {
            let i = self.isolate(i, id);
            if let Some(s) = self.slots.get_mut(i) {
                s.flags = new;
            }
        }
    }

    /// Replace the message of ready `id`; returns whether it was ready. A message that now
    /// looks like its neighbour (paged out to the same shape) joins its run.
    pub(crate) fn swap(&mut self, id: MsgId, message: Arc<Message>) -> bool {
        if self.live_slot(id).is_none() {
            return false;
        }
        let Ok(i) = self.position(id) else {
            return false;
        };
        let i = self.isolate(i, id);
        let Some(s) = self.slots.get_mut(i) else {
            return false;
        };
        s.message = Some(message.clone());
        let (expires_at, flags) = (s.expires_at, s.flags);
        let mut i = i;
        if let Some(p) = self.slots.prev(i)
            && let Some(prev) = self.slots.get_mut(p)
            && prev.last() + 1 == id
            && prev.joins(&message, expires_at, flags)
        {
            prev.run += 1;
            self.slots.remove(i);
            i = p;
        }
        let next = self.slots.get(self.slots.next(i)).cloned();
        if let (Some(cur), Some(next)) = (self.slots.get(i), next)
            && cur.last() + 1 == next.id
            && u64::from(cur.run) + u64::from(next.run) < u64::from(u32::MAX)
            && next.expires_at == cur.expires_at
            && next.flags == cur.flags
            && next
                .message
                .as_ref()
                .is_some_and(|m| Arc::ptr_eq(m, &message))
        {
            if let Some(cur) = self.slots.get_mut(i) {
                cur.run += next.run + 1;
            }
            self.slots.remove(self.slots.next(i));
        }
        true
    }

    /// Ready messages in id order, from id `from` on.
    pub(crate) fn iter_from(&self, from: MsgId) -> impl Iterator<Item = (MsgId, ReadyView<'_>)> {
        let start = self.slots.partition_point(|s| s.last() < from);
        self.slots.iter_from(start).flat_map(move |s| {
            let view = s.message.as_ref().map(|m| ReadyView {
                message: m,
                redelivered: s.flags & REDELIVERED != 0,
                returns: s.flags & !REDELIVERED,
                expires_at: (s.expires_at != NEVER).then_some(s.expires_at),
            });
            (s.id.max(from)..=s.last()).filter_map(move |id| view.map(|v| (id, v)))
        })
    }

    /// Ready messages in id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (MsgId, ReadyView<'_>)> {
        self.iter_from(0)
    }

    /// Remove everything; returns the ids that were ready.
    pub(crate) fn clear(&mut self) -> Vec<MsgId> {
        let ids = self
            .slots
            .iter()
            .filter(|s| s.message.is_some())
            .flat_map(|s| s.id..=s.last())
            .collect();
        *self = ReadyRing::default();
        ids
    }
}

/// A ready message seen in place.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadyView<'a> {
    pub(crate) message: &'a Arc<Message>,
    pub(crate) redelivered: bool,
    pub(crate) returns: u32,
    pub(crate) expires_at: Option<u64>,
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use charon_protocol::RawProperties;

    use super::*;

    fn ready(expires_at: Option<u64>) -> Ready {
        Ready {
            message: Arc::new(Message::new(
                "",
                "k",
                RawProperties::default(),
                Bytes::from_static(b"x"),
            )),
            redelivered: false,
            expires_at,
            returns: 0,
        }
    }

    #[test]
    fn a_slot_is_32_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 32);
    }

    #[test]
    fn keeps_id_order_whatever_the_insert_order_and_fills_tombstones() {
        let mut r = ReadyRing::default();
        for id in [5, 1, 9, 3, 7] {
            r.insert(id, ready(None));
        }
        assert!(r.remove(3).is_some());
        assert!(r.remove(3).is_none());
        r.insert(3, ready(None));
        r.insert(4, ready(None));
        let ids: Vec<MsgId> = r.iter().map(|(id, _)| id).collect();
        assert_eq!(ids, vec![1, 3, 4, 5, 7, 9]);
        assert_eq!(r.pop_first().map(|(id, _)| id), Some(1));
        assert_eq!(r.len(), 5);
        assert_eq!(
            r.iter_from(5).map(|(id, _)| id).collect::<Vec<_>>(),
            [5, 7, 9]
        );
    }

    #[test]
    fn expiry_order_comes_from_the_ring_until_it_is_not_monotonic() {
        let mut r = ReadyRing::default();
        r.insert(1, ready(Some(10)));
        r.insert(2, ready(Some(20)));
        r.insert(3, ready(None));
        assert!(r.expiry.is_none());
        assert_eq!(r.next_expiry(), Some((10, 1)));
        r.insert(4, ready(Some(5)));
        assert!(r.expiry.is_some());
        assert_eq!(r.next_expiry(), Some((5, 4)));
        assert!(r.remove(4).is_some());
        assert_eq!(r.next_expiry(), Some((10, 1)));
        r.clear();
        assert!(r.expiry.is_none() && r.is_empty());
    }

    #[test]
    fn a_large_ring_in_chunks_keeps_id_order_through_middle_inserts_and_removals() {
        let mut r = ReadyRing::default();
        let mut model = std::collections::BTreeSet::new();
        // Each message its own slot (no runs): thousands of slots, many chunks.
        for id in (0..20_000).step_by(2) {
            r.insert(id, ready(None));
            model.insert(id);
        }
        for id in (1..20_000).step_by(4) {
            r.insert(id, ready(None));
            model.insert(id);
        }
        for id in (0..20_000).step_by(3) {
            assert_eq!(r.remove(id).is_some(), model.remove(&id));
        }
        for id in (0..20_000).step_by(6) {
            r.insert(id, ready(None));
            model.insert(id);
        }
        assert_eq!(r.len(), model.len());
        let ids: Vec<MsgId> = r.iter().map(|(id, _)| id).collect();
        assert_eq!(ids, model.iter().copied().collect::<Vec<_>>());
        assert_eq!(
            r.iter_from(10_001)
                .map(|(id, _)| id)
                .take(3)
                .collect::<Vec<_>>(),
            model.range(10_001..).take(3).copied().collect::<Vec<_>>()
        );
        assert!(r.slots.len() < 2 * r.len() + 65);
        while let Some((id, _)) = r.pop_first() {
            assert!(model.remove(&id));
        }
        assert!(model.is_empty() && r.slots.len() == 0);
    }

    #[test]
    fn many_middle_removals_compact_the_ring() {
        let mut r = ReadyRing::default();
        for id in 0..1000 {
            r.insert(id, ready(None));
        }
        for id in (1..999).filter(|i| i % 3 != 0) {
            assert!(r.remove(id).is_some());
        }
        assert!(r.slots.len() < 2 * r.len() + 65);
        let ids: Vec<MsgId> = r.iter().map(|(id, _)| id).collect();
        assert_eq!(ids.len(), r.len());
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert!(r.get(3).is_some());
        assert!(r.get(4).is_none());
    }

    #[test]
    fn alike_neighbours_share_a_slot_and_split_when_one_leaves() {
        let shape = ready(None).message;
        let alike = |returns| Ready {
            message: shape.clone(),
            redelivered: false,
            expires_at: Some(50),
            returns,
        };
        let mut r = ReadyRing::default();
        for id in 10..1010 {
            r.insert(id, alike(0));
        }
        assert_eq!((r.slots.len(), r.len()), (1, 1000));
        assert!(r.remove(500).is_some());
        assert_eq!(
            (r.slots.len(), r.len()),
            (3, 999),
            "split around a tombstone"
        );
        r.set_returns(20, 2);
        assert_eq!((r.returns_of(20), r.returns_of(21)), (Some(2), Some(0)));
        assert_eq!(r.pop_first().map(|(id, _)| id), Some(10));
        assert_eq!(r.next_expiry(), Some((50, 11)));
        // A message paged out to the same shape joins its neighbours.
        let own = ready(Some(50)).message;
        r.insert(
            1010,
            Ready {
                message: own,
                ..alike(0)
            },
        );
        let before = r.slots.len();
        assert!(r.swap(1010, shape.clone()));
        assert_eq!(r.slots.len(), before - 1);
        let ids: Vec<MsgId> = r.iter_from(498).map(|(id, _)| id).take(3).collect();
        assert_eq!(ids, vec![498, 499, 501]);
        assert_eq!(r.clear().len(), 999);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, Option<u8>),
        Remove(u8),
        PopFirst,
        ExpireFirst,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (any::<u8>(), proptest::option::of(any::<u8>())).prop_map(|(i, t)| Op::Insert(i, t)),
            2 => any::<u8>().prop_map(Op::Remove),
            1 => Just(Op::PopFirst),
            1 => Just(Op::ExpireFirst),
        ]
    }

    #[derive(Debug, Clone)]
    enum RunOp {
        /// id, shape (0..2), returns (0..2)
        Insert(u8, u8, u8),
        Remove(u8),
        PopFirst,
        Swap(u8, u8),
        SetReturns(u8, u8),
    }

    fn run_op() -> impl proptest::strategy::Strategy<Value = RunOp> {
        use proptest::prelude::*;
        let id = prop_oneof![3 => 0u8..40, 1 => any::<u8>()];
        prop_oneof![
            6 => (id.clone(), 0u8..2, 0u8..2).prop_map(|(i, m, r)| RunOp::Insert(i, m, r)),
            2 => id.clone().prop_map(RunOp::Remove),
            1 => Just(RunOp::PopFirst),
            1 => (id.clone(), 0u8..3).prop_map(|(i, m)| RunOp::Swap(i, m)),
            1 => (id, 0u8..3).prop_map(|(i, r)| RunOp::SetReturns(i, r)),
        ]
    }

    impl ReadyRing {
        /// `pop_first` the general way: the front slot tombstoned, then trimmed.
        fn pop_first_general(&mut self) -> Option<(MsgId, Ready)> {
            let front = self.slots.front()?;
            let id = front.id;
            if front.run == 0 {
                return self.remove_at(self.slots.first()).map(|r| (id, r));
            }
            self.pop_first()
        }

        /// Everything that makes the ring: slots (message by pointer), chunks, counts, the
        /// expiry index.
        #[allow(clippy::type_complexity)]
        fn snapshot(
            &self,
        ) -> (
            Vec<(MsgId, u32, u64, u32, Option<usize>)>,
            Vec<usize>,
            (usize, usize),
            Option<Vec<(u64, MsgId)>>,
        ) {
            let slots = self
                .slots
                .iter()
                .map(|s| {
                    let m = s.message.as_ref().map(|m| Arc::as_ptr(m) as usize);
                    (s.id, s.run, s.expires_at, s.flags, m)
                })
                .collect();
            let expiry = self.expiry.as_ref().map(|e| e.iter().copied().collect());
            (
                slots,
                self.slots.chunk_lens(),
                (self.live, self.dead),
                expiry,
            )
        }
    }

    #[derive(Debug, Clone)]
    enum FastOp {
        /// The next id (a publish): shape (0..2 shared, 2 own), expiry, returns.
        Publish(u8, Option<u8>, u8),
        /// Some id below the next (a requeue or a refill), same fields.
        Back(u16, u8, Option<u8>, u8),
        /// Skip ids (other queues' publishes of a shared id counter).
        Skip(u8),
        PopFirst,
        Remove(u16),
    }

    fn fast_op() -> impl proptest::strategy::Strategy<Value = FastOp> {
        use proptest::prelude::*;
        let fields = || (0u8..3, proptest::option::of(0u8..4), 0u8..2);
        prop_oneof![
            8 => fields().prop_map(|(m, t, r)| FastOp::Publish(m, t, r)),
            1 => (any::<u16>(), fields()).prop_map(|(i, (m, t, r))| FastOp::Back(i, m, t, r)),
            1 => (0u8..3).prop_map(FastOp::Skip),
            5 => Just(FastOp::PopFirst),
            1 => any::<u16>().prop_map(FastOp::Remove),
        ]
    }

    proptest::proptest! {
        /// The fast paths (`push_back` for appends, a single slot leaving the front at once)
        /// make exactly the ring the general paths make (`insert_anywhere`, tombstone + trim):
        /// same slots, runs, chunks, counts and expiry index, same messages returned.
        #[test]
        fn fast_paths_make_the_general_paths_ring(
            ops in proptest::collection::vec(fast_op(), 1..600),
        ) {
            let shapes: Vec<Arc<Message>> = (0..2).map(|_| ready(None).message).collect();
            let (mut fast, mut general) = (ReadyRing::default(), ReadyRing::default());
            let mut next: MsgId = 0;
            let mut live = std::collections::BTreeSet::new();
            let make = |m: u8, t: Option<u8>, returns: u8| Ready {
                message: shapes
                    .get(usize::from(m))
                    .cloned()
                    .unwrap_or_else(|| ready(None).message),
                redelivered: returns > 0,
                expires_at: t.map(|t| 10 + u64::from(t)),
                returns: u32::from(returns),
            };
            for op in ops {
                match op {
                    FastOp::Publish(m, t, r) => {
                        let ready = make(m, t, r);
                        fast.insert(next, ready.clone());
                        general.insert_anywhere(next, ready);
                        live.insert(next);
                        next += 1;
                    }
                    FastOp::Back(i, m, t, r) => {
                        let id = MsgId::from(i) % next.max(1);
                        if live.insert(id) {
                            let ready = make(m, t, r);
                            fast.insert(id, ready.clone());
                            general.insert_anywhere(id, ready);
                        }
                    }
                    FastOp::Skip(n) => next += MsgId::from(n),
                    FastOp::PopFirst => {
                        let a = fast.pop_first();
                        let b = general.pop_first_general();
                        if let Some((id, _)) = &a {
                            live.remove(id);
                        }
                        let key = |x: &Option<(MsgId, Ready)>| {
                            x.as_ref().map(|(id, r)| {
                                (*id, Arc::as_ptr(&r.message) as usize, r.expires_at, r.returns, r.redelivered)
                            })
                        };
                        proptest::prop_assert_eq!(key(&a), key(&b));
                    }
                    FastOp::Remove(i) => {
                        let id = MsgId::from(i) % next.max(1);
                        let a = fast.remove(id).map(|r| Arc::as_ptr(&r.message) as usize);
                        let b = general.remove(id).map(|r| Arc::as_ptr(&r.message) as usize);
                        live.remove(&id);
                        proptest::prop_assert_eq!(a, b);
                    }
                }
                proptest::prop_assert_eq!(fast.snapshot(), general.snapshot());
                proptest::prop_assert_eq!(fast.next_expiry(), general.next_expiry());
            }
        }
    }

    proptest::proptest! {
        /// Runs of alike messages (shared `Arc`s, as paged-out and recovered ones) against a
        /// B-tree model: same messages (by pointer), returns and order, whatever splits them.
        #[test]
        fn runs_match_a_btree_model(ops in proptest::collection::vec(run_op(), 1..300)) {
            use std::collections::BTreeMap;
            let shapes: Vec<Arc<Message>> = (0..3).map(|_| ready(None).message).collect();
            let mut ring = ReadyRing::default();
            let mut model: BTreeMap<MsgId, (usize, u32)> = BTreeMap::new();
            for op in ops {
                match op {
                    RunOp::Insert(id, m, returns) => {
                        let id = MsgId::from(id);
                        if let std::collections::btree_map::Entry::Vacant(e) = model.entry(id) {
                            e.insert((usize::from(m), u32::from(returns)));
                            ring.insert(id, Ready {
                                message: shapes[usize::from(m)].clone(),
                                redelivered: returns > 0,
                                expires_at: None,
                                returns: u32::from(returns),
                            });
                        }
                    }
                    RunOp::Remove(id) => {
                        let id = MsgId::from(id);
                        let got = ring.remove(id).map(|r| r.returns);
                        proptest::prop_assert_eq!(got, model.remove(&id).map(|(_, r)| r));
                    }
                    RunOp::PopFirst => {
                        let got = ring.pop_first().map(|(id, r)| (id, r.returns));
                        let want = model.iter().next().map(|(id, (_, r))| (*id, *r));
                        if let Some((id, _)) = want {
                            model.remove(&id);
                        }
                        proptest::prop_assert_eq!(got, want);
                    }
                    RunOp::Swap(id, m) => {
                        let id = MsgId::from(id);
                        let got = ring.swap(id, shapes[usize::from(m)].clone());
                        let want = model.get_mut(&id).map(|e| e.0 = usize::from(m)).is_some();
                        proptest::prop_assert_eq!(got, want);
                    }
                    RunOp::SetReturns(id, r) => {
                        let id = MsgId::from(id);
                        ring.set_returns(id, u32::from(r));
                        if let Some(e) = model.get_mut(&id) {
                            e.1 = u32::from(r);
                        }
                    }
                }
                proptest::prop_assert_eq!(ring.len(), model.len());
                let got: Vec<(MsgId, u32)> = ring.iter().map(|(id, v)| (id, v.returns)).collect();
                let want: Vec<(MsgId, u32)> = model.iter().map(|(id, (_, r))| (*id, *r)).collect();
                proptest::prop_assert_eq!(got, want);
                for (id, (m, r)) in &model {
                    let got = ring.get(*id).is_some_and(|g| Arc::ptr_eq(g, &shapes[*m]));
                    proptest::prop_assert!(got, "message of {}", id);
                    proptest::prop_assert_eq!(ring.returns_of(*id), Some(*r));
                }
                let from: Vec<MsgId> = ring.iter_from(20).map(|(id, _)| id).collect();
                let want: Vec<MsgId> = model.range(20..).map(|(id, _)| *id).collect();
                proptest::prop_assert_eq!(from, want);
            }
        }
    }

    proptest::proptest! {
        /// The ring against a B-tree model (the structure it replaced): same messages in the
        /// same order, same earliest expiry, whatever the order of inserts and removals.
        #[test]
        fn ring_matches_a_btree_model(ops in proptest::collection::vec(op(), 1..300)) {
            use std::collections::BTreeMap;
            let mut ring = ReadyRing::default();
            let mut model: BTreeMap<MsgId, Option<u64>> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(id, t) => {
                        let (id, t) = (MsgId::from(id), t.map(u64::from));
                        if let std::collections::btree_map::Entry::Vacant(e) = model.entry(id) {
                            e.insert(t);
                            ring.insert(id, ready(t));
                        }
                    }
                    Op::Remove(id) => {
                        let id = MsgId::from(id);
                        proptest::prop_assert_eq!(ring.remove(id).is_some(), model.remove(&id).is_some());
                    }
                    Op::PopFirst => {
                        let got = ring.pop_first().map(|(id, _)| id);
                        let want = model.keys().next().copied();
                        if let Some(id) = want {
                            model.remove(&id);
                        }
                        proptest::prop_assert_eq!(got, want);
                    }
                    Op::ExpireFirst => {
                        let want = model.iter().filter_map(|(id, t)| t.map(|t| (t, *id))).min();
                        proptest::prop_assert_eq!(ring.next_expiry(), want);
                        if let Some((_, id)) = want {
                            model.remove(&id);
                            proptest::prop_assert!(ring.remove(id).is_some());
                        }
                    }
                }
                proptest::prop_assert_eq!(ring.len(), model.len());
                let ids: Vec<MsgId> = ring.iter().map(|(id, _)| id).collect();
                let want: Vec<MsgId> = model.keys().copied().collect();
                proptest::prop_assert_eq!(ids, want);
                let exp: Vec<Option<u64>> = ring.iter().map(|(_, r)| r.expires_at).collect();
                let want: Vec<Option<u64>> = model.values().copied().collect();
                proptest::prop_assert_eq!(exp, want);
            }
        }
    }
}
