//! The ready messages of a queue in id order: a ring ([`VecDeque`]) of compact slots, sorted by
//! id, with tombstones for messages taken out of the middle (expiry anywhere in the queue,
//! removal by id, retries). Publishes append at the back, deliveries pop the front and a
//! requeued message goes back to its id's place (near the front: the ring shifts the shorter
//! side), so the common operations cost O(1) and about 32 bytes a message, against ~1.7 k
//! instructions and ~100 bytes for the B-tree map plus expiry set this replaces
//! (docs/performance.md).
//!
//! Expiry: while the expiry times of the slots are non-decreasing in id order (no TTL at all, or
//! one queue TTL with one publisher: the usual cases) the ring itself is the expiry order and
//! no index is kept. The first insert that breaks the order builds an expiry set
//! (`BTreeSet<(time, id)>`), kept until the queue is empty again.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use crate::message::Message;
use crate::queue::MsgId;

/// No expiry (a slot's `expires_at`).
const NEVER: u64 = u64::MAX;

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

/// One place in the ring (32 bytes). A tombstone (`message: None`) keeps its id and expiry so
/// the ring stays sorted by id and, while monotonic, by expiry.
#[derive(Debug, Clone)]
struct Slot {
    id: MsgId,
    message: Option<Arc<Message>>,
    expires_at: u64,
    returns: u32,
    redelivered: bool,
}

impl Slot {
    fn take(&mut self) -> Option<Ready> {
        let message = self.message.take()?;
        Some(Ready {
            message,
            redelivered: self.redelivered,
            expires_at: (self.expires_at != NEVER).then_some(self.expires_at),
            returns: self.returns,
        })
    }
}

/// Ready messages by id, with their expiry order.
#[derive(Debug, Default)]
pub(crate) struct ReadyRing {
    slots: VecDeque<Slot>,
    /// Live (non-tombstone) slots.
    live: usize,
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

    /// Room for `n` more slots, allocated exactly.
    pub(crate) fn reserve(&mut self, n: usize) {
        self.slots.reserve_exact(n);
    }

    fn position(&self, id: MsgId) -> Result<usize, usize> {
        // Fast paths: the back (publish) and the front (delivery, requeue).
        match self.slots.back() {
            None => return Err(0),
            Some(b) if b.id < id => return Err(self.slots.len()),
            _ => {}
        }
        self.slots.binary_search_by_key(&id, |s| s.id)
    }

    /// Insert `id` (not present as a live message).
    pub(crate) fn insert(&mut self, id: MsgId, r: Ready) {
        let expires_at = r.expires_at.unwrap_or(NEVER);
        let slot = Slot {
            id,
            message: Some(r.message),
            expires_at,
            returns: r.returns,
            redelivered: r.redelivered,
        };
        let pos = match self.position(id) {
            Ok(i) => {
                // Its tombstone: the message comes back to its place.
                if let Some(s) = self.slots.get_mut(i) {
                    if s.message.is_some() {
                        return;
                    }
                    *s = slot;
                }
                i
            }
            Err(i) => {
                self.slots.insert(i, slot);
                i
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
                let before = pos
                    .checked_sub(1)
                    .and_then(|p| self.slots.get(p))
                    .map_or(0, |s| s.expires_at);
                let after = self.slots.get(pos + 1).map_or(NEVER, |s| s.expires_at);
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
                .map(|s| (s.expires_at, s.id))
                .collect(),
        );
    }

    /// Remove `id`; `None` when it is not ready.
    pub(crate) fn remove(&mut self, id: MsgId) -> Option<Ready> {
        let i = self.position(id).ok()?;
        self.remove_at(i)
    }

    fn remove_at(&mut self, i: usize) -> Option<Ready> {
        let slot = self.slots.get_mut(i)?;
        let r = slot.take()?;
        let (t, id) = (slot.expires_at, slot.id);
        self.live -= 1;
        if let Some(set) = self.expiry.as_mut()
            && t != NEVER
        {
            set.remove(&(t, id));
        }
        self.trim();
        Some(r)
    }

    /// Drops tombstones at both ends; compacts when tombstones outnumber live slots.
    fn trim(&mut self) {
        while self.slots.front().is_some_and(|s| s.message.is_none()) {
            self.slots.pop_front();
        }
        while self.slots.back().is_some_and(|s| s.message.is_none()) {
            self.slots.pop_back();
        }
        if self.live == 0 {
            self.expiry = None;
            if self.slots.capacity() > 1024 {
                self.slots = VecDeque::new();
            }
            return;
        }
        let dead = self.slots.len() - self.live;
        if dead > 64 && dead > self.live {
            self.slots.retain(|s| s.message.is_some());
        }
        if self.slots.capacity() > 1024 && self.slots.len() * 4 < self.slots.capacity() {
            self.slots.shrink_to(self.slots.len() * 2);
        }
    }

    /// The first ready message in id order.
    pub(crate) fn first_id(&self) -> Option<MsgId> {
        // `trim` keeps a live slot at the front.
        self.slots.front().map(|s| s.id)
    }

    /// Remove the first ready message in id order.
    pub(crate) fn pop_first(&mut self) -> Option<(MsgId, Ready)> {
        let id = self.first_id()?;
        self.remove_at(0).map(|r| (id, r))
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

    pub(crate) fn get(&self, id: MsgId) -> Option<&Arc<Message>> {
        let i = self.position(id).ok()?;
        self.slots.get(i)?.message.as_ref()
    }

    pub(crate) fn expires_at(&self, id: MsgId) -> Option<u64> {
        let i = self.position(id).ok()?;
        let s = self.slots.get(i)?;
        (s.message.is_some() && s.expires_at != NEVER).then_some(s.expires_at)
    }

    pub(crate) fn returns_of(&self, id: MsgId) -> Option<u32> {
        let i = self.position(id).ok()?;
        let s = self.slots.get(i)?;
        s.message.as_ref().map(|_| s.returns)
    }

    pub(crate) fn set_returns(&mut self, id: MsgId, returns: u32) {
        if let Ok(i) = self.position(id)
            && let Some(s) = self.slots.get_mut(i)
            && s.message.is_some()
        {
            s.returns = returns;
        }
    }

    /// Replace the message of ready `id`; returns whether it was ready.
    pub(crate) fn swap(&mut self, id: MsgId, message: Arc<Message>) -> bool {
        let Ok(i) = self.position(id) else {
            return false;
        };
        match self.slots.get_mut(i) {
            Some(s) if s.message.is_some() => {
                s.message = Some(message);
                true
            }
            _ => false,
        }
    }

    /// Ready messages in id order, from id `from` on.
    pub(crate) fn iter_from(&self, from: MsgId) -> impl Iterator<Item = (MsgId, ReadyView<'_>)> {
        let start = self.slots.partition_point(|s| s.id < from);
        self.slots.range(start..).filter_map(|s| {
            s.message.as_ref().map(|m| {
                (
                    s.id,
                    ReadyView {
                        message: m,
                        redelivered: s.redelivered,
                        returns: s.returns,
                        expires_at: (s.expires_at != NEVER).then_some(s.expires_at),
                    },
                )
            })
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
            .map(|s| s.id)
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
