//! [`QueueMembers`]: one queue's live members (queue-local id → message, delivery count) in id
//! order, as chunks of 12-byte slots with tombstones instead of a B-tree (~48 bytes an entry
//! with node slack when ids are appended in order), since there is one per stored message per
//! queue (docs/performance.md, "Position-based recovery", "Recovery of 10M").
//!
//! Members arrive nearly in id order (a queue hands its ids out in order; records reach the log
//! shortly after), so an insert is an append or a short shift near the back; a compaction copy
//! re-creates a member at its own id, finding its tombstone. Removals leave tombstones, dropped
//! at the ends (a FIFO queue settles its front) and compacted away once they outnumber the
//! live members. Chunks of at most [`CHUNK`] slots (ids as 32-bit offsets from the chunk's
//! base) grow one at a time: no ring doubling (old and new buffer at once) at millions.
//! Delivery counts are kept aside (only members delivered before have one), each with the
//! record item that holds it (`DeliveryCount`/`DeliveryCounts`, for the index's segment
//! accounting): one map entry per delivered member, not two.

use std::collections::VecDeque;

use foldhash::HashMap as FastMap;

use crate::messages::shrink_sparse;
use crate::types::MessageId;

/// Slots a chunk takes by appends (a chunk may hold up to twice as many after inserts in the
/// middle, then it splits).
#[cfg(not(test))]
const CHUNK: usize = 4096;
/// Small in tests, so that the proptest splits and chains chunks.
#[cfg(test)]
const CHUNK: usize = 8;
/// The message id of a tombstone (message ids are log indexes: never this one).
const DEAD: MessageId = u64::MAX;

/// A record's share of a segment's bytes holding a delivery count: `(segment, bytes)` (the
/// index's live item).
pub(crate) type CountItem = (u64, u64);

/// One live member (16 bytes: there is one per message per queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemberEntry {
    pub(crate) msg: MessageId,
    pub(crate) count: u32,
}

/// A place in a chunk (12 bytes, 4-byte aligned); message [`DEAD`] is a tombstone.
#[derive(Debug, Clone, Copy)]
struct Slot {
    /// Id less the chunk's base.
    off: u32,
    msg_lo: u32,
    msg_hi: u32,
}

impl Slot {
    fn new(off: u32, msg: MessageId) -> Self {
        Slot {
            off,
            msg_lo: msg as u32,
            msg_hi: (msg >> 32) as u32,
        }
    }

    fn msg(&self) -> MessageId {
        u64::from(self.msg_lo) | (u64::from(self.msg_hi) << 32)
    }

    fn set_msg(&mut self, msg: MessageId) {
        self.msg_lo = msg as u32;
        self.msg_hi = (msg >> 32) as u32;
    }

    fn live(&self) -> bool {
        self.msg() != DEAD
    }
}

#[derive(Debug, Clone)]
struct Chunk {
    base: u64,
    /// Sorted by `off`, never empty.
    slots: VecDeque<Slot>,
}

impl Chunk {
    fn id(&self, s: &Slot) -> u64 {
        self.base + u64::from(s.off)
    }

    fn first(&self) -> u64 {
        self.slots.front().map_or(self.base, |s| self.id(s))
    }

    fn last(&self) -> u64 {
        self.slots.back().map_or(self.base, |s| self.id(s))
    }

    /// Whether id `id` (not below `base`) has an offset here.
    fn fits(&self, id: u64) -> bool {
        id >= self.base && id - self.base <= u64::from(u32::MAX)
    }

    fn find(&self, id: u64) -> Result<usize, usize> {
        if id < self.base {
            return Err(0);
        }
        let Ok(off) = u32::try_from(id - self.base) else {
            return Err(self.slots.len());
        };
        // Beyond the last (a new member at the back).
        if self.slots.back().is_none_or(|s| s.off < off) {
            return Err(self.slots.len());
        }
        // Offsets are unique and sorted, and a queue hands its ids out in order, so a chunk is
        // usually dense (tombstones keep their slots): try the slot the offset would have then.
        if let Some(first) = self.slots.front().map(|s| s.off)
            && let Some(i) = off.checked_sub(first).map(|d| d as usize)
            && self.slots.get(i).is_some_and(|s| s.off == off)
        {
            return Ok(i);
        }
        self.slots.binary_search_by_key(&off, |s| s.off)
    }

    /// Moves the base down to `base` (every offset stays in range: checked by the caller).
    fn rebase(&mut self, base: u64) {
        let d = (self.base - base) as u32;
        for s in &mut self.slots {
            s.off += d;
        }
        self.base = base;
    }
}

/// A queue's members by queue-local id.
#[derive(Debug, Default)]
pub(crate) struct QueueMembers {
    chunks: VecDeque<Chunk>,
    /// Delivery counts by member id, with the record item holding each (`None`: held by the
    /// message's own record, a `Carry`). Members without an entry have count 0 and no item.
    counts: FastMap<u64, (u32, Option<CountItem>)>,
    live: usize,
    dead: usize,
}

impl QueueMembers {
    pub(crate) fn is_empty(&self) -> bool {
        self.live == 0
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// The chunk `id` falls in: the last one starting at or before it (0 when none does).
    fn chunk_of(&self, id: u64) -> usize {
        match self.chunks.back() {
            None => return 0,
            Some(b) if b.first() <= id => return self.chunks.len() - 1,
            _ => {}
        }
        // Settles of a FIFO queue fall in the front chunk.
        if self.chunks.get(1).is_some_and(|c| id < c.first()) {
            return 0;
        }
        self.chunks
            .partition_point(|c| c.first() <= id)
            .saturating_sub(1)
    }

    fn slot(&self, id: u64) -> Option<(usize, usize)> {
        let c = self.chunk_of(id);
        let i = self.chunks.get(c)?.find(id).ok()?;
        Some((c, i))
    }

    fn slot_mut(&mut self, id: u64) -> Option<&mut Slot> {
        let (c, i) = self.slot(id)?;
        self.chunks.get_mut(c)?.slots.get_mut(i)
    }

    pub(crate) fn get(&self, id: u64) -> Option<MemberEntry> {
        let (c, i) = self.slot(id)?;
        let s = self.chunks.get(c)?.slots.get(i)?;
        s.live().then(|| MemberEntry {
            msg: s.msg(),
            count: self.count_of(id),
        })
    }

    fn count_of(&self, id: u64) -> u32 {
        self.counts.get(&id).map_or(0, |c| c.0)
    }

    /// The record item holding member `id`'s delivery count.
    pub(crate) fn count_item(&self, id: u64) -> Option<CountItem> {
        self.counts.get(&id).and_then(|c| c.1)
    }

    /// Forgets member `id`'s count; the item that held it.
    fn drop_count(&mut self, id: u64) -> Option<CountItem> {
        if self.counts.is_empty() {
            return None;
        }
        let (_, item) = self.counts.remove(&id)?;
        shrink_sparse(&mut self.counts);
        item
    }

    /// Sets member `id`'s delivery count, now held by `item`: `None` when the member does not
    /// exist, else the item that held its count before.
    pub(crate) fn set_count(
        &mut self,
        id: u64,
        count: u32,
        item: CountItem,
    ) -> Option<Option<CountItem>> {
        if !self.slot_mut(id).is_some_and(|s| s.live()) {
            return None;
        }
        Some(
            self.counts
                .insert(id, (count, Some(item)))
                .and_then(|c| c.1),
        )
    }

    /// Adds (or replaces) member `id`, its count held by the message's own record; the item
    /// that held a replaced member's count.
    pub(crate) fn insert(&mut self, id: u64, e: MemberEntry) -> Option<CountItem> {
        if e.msg == DEAD {
            return None; // never a message id (a log index)
        }
        let old = if e.count == 0 {
            self.drop_count(id)
        } else {
            self.counts.insert(id, (e.count, None)).and_then(|c| c.1)
        };
        self.insert_slot(id, e);
        old
    }

    fn insert_slot(&mut self, id: u64, e: MemberEntry) {
        // The common case: a new member past every slot (a publish) appended to the last
        // chunk, without a search.
        if let Some(c) = self.chunks.back_mut()
            && c.slots.back().is_some_and(|s| c.id(s) < id)
            && c.slots.len() < CHUNK
            && c.fits(id)
        {
            let off = (id - c.base) as u32;
            c.slots.push_back(Slot::new(off, e.msg));
            self.live += 1;
            return;
        }
        if let Some(s) = self.slot_mut(id) {
            let was_live = s.live();
            s.set_msg(e.msg);
            if !was_live {
                self.live += 1;
                self.dead -= 1;
            }
            return;
        }
        self.live += 1;
        let ci = self.chunk_of(id);
        let n = self.chunks.len();
        let Some(c) = self.chunks.get_mut(ci) else {
            self.chunks.push_back(Self::one(id, e.msg));
            return;
        };
        if id < c.first() {
            // Below every member (ci == 0).
            if c.slots.len() < CHUNK && c.last() - id <= u64::from(u32::MAX) {
                if id < c.base {
                    c.rebase(id);
                }
                let off = (id - c.base) as u32;
                c.slots.push_front(Slot::new(off, e.msg));
            } else {
                self.chunks.push_front(Self::one(id, e.msg));
            }
            return;
        }
        let at = c.find(id).unwrap_or_else(|i| i);
        let append = at == c.slots.len();
        if append && ci + 1 == n && (c.slots.len() >= CHUNK || !c.fits(id)) {
            self.chunks.push_back(Self::one(id, e.msg));
            return;
        }
        if !c.fits(id) {
            // Between this chunk and the next, too far from this one's base.
            self.chunks.insert(ci + 1, Self::one(id, e.msg));
            return;
        }
        let off = (id - c.base) as u32;
        c.slots.insert(at, Slot::new(off, e.msg));
        if c.slots.len() > 2 * CHUNK {
            let mut right = c.slots.split_off(CHUNK);
            c.slots.shrink_to_fit();
            right.shrink_to_fit();
            let base = c.base;
            self.chunks.insert(ci + 1, Chunk { base, slots: right });
        }
    }

    fn one(id: u64, msg: MessageId) -> Chunk {
        let mut slots = VecDeque::with_capacity(1);
        slots.push_back(Slot::new(0, msg));
        Chunk { base: id, slots }
    }

    /// Whether `id` is above every slot of the queue (live or tombstone): no member has it, so
    /// a removal would find nothing (a publish's new member, `Index::create`).
    pub(crate) fn above_all(&self, id: u64) -> bool {
        match self.chunks.back() {
            None => true,
            Some(c) => c.slots.back().is_some_and(|s| c.id(s) < id),
        }
    }

    /// Removes member `id`; with the item that held its delivery count.
    pub(crate) fn remove(&mut self, id: u64) -> Option<(MemberEntry, Option<CountItem>)> {
        let r = self.take(id)?;
        self.trim();
        Some(r)
    }

    /// Removes member `id` as [`QueueMembers::remove`] does, but leaves tombstones at the ends
    /// and the memory as they are: a caller removing a run of members (a `Settle` record's
    /// ids, `Index::settle`) calls [`QueueMembers::trim`] once after the run instead of once
    /// a member. Between the two the members are exactly those `remove` would leave.
    pub(crate) fn take(&mut self, id: u64) -> Option<(MemberEntry, Option<CountItem>)> {
        // The common case: a FIFO queue's oldest member leaves (no search, no tombstone).
        let msg = if let Some(c) = self.chunks.front_mut()
            && c.slots.front().is_some_and(|s| s.live() && c.id(s) == id)
        {
            let s = c.slots.pop_front()?;
            if c.slots.is_empty() {
                self.chunks.pop_front();
            }
            s.msg()
        } else {
            let s = self.slot_mut(id).filter(|s| s.live())?;
            let msg = s.msg();
            s.set_msg(DEAD);
            self.dead += 1;
            msg
        };
        let (count, item) = if self.counts.is_empty() {
            (0, None)
        } else {
            (self.count_of(id), self.drop_count(id))
        };
        self.live -= 1;
        Some((MemberEntry { msg, count }, item))
    }

    /// Drops tombstones at the ends; compacts once they outnumber the live members; gives
    /// memory back as chunks empty (amortised O(1) per removal).
    pub(crate) fn trim(&mut self) {
        while let Some(c) = self.chunks.front_mut() {
            while c.slots.front().is_some_and(|s| !s.live()) {
                c.slots.pop_front();
                self.dead -= 1;
            }
            if !c.slots.is_empty() {
                break;
            }
            self.chunks.pop_front();
        }
        while let Some(c) = self.chunks.back_mut() {
            while c.slots.back().is_some_and(|s| !s.live()) {
                c.slots.pop_back();
                self.dead -= 1;
            }
            if !c.slots.is_empty() {
                break;
            }
            self.chunks.pop_back();
        }
        if self.dead > 64 && self.dead > self.live {
            for c in &mut self.chunks {
                c.slots.retain(Slot::live);
                c.slots.shrink_to_fit();
            }
            self.chunks.retain(|c| !c.slots.is_empty());
            self.dead = 0;
        }
        if let Some(c) = self.chunks.front_mut() {
            let cap = c.slots.capacity();
            if cap > 64 && c.slots.len() * 4 < cap {
                c.slots.shrink_to(c.slots.len() * 2);
            }
        }
        let cap = self.chunks.capacity();
        if cap > 64 && self.chunks.len() * 4 < cap {
            self.chunks.shrink_to(self.chunks.len() * 2);
        }
    }

    /// No tombstone and no empty chunk at either end (what [`QueueMembers::trim`] leaves).
    #[cfg(test)]
    pub(crate) fn trimmed(&self) -> bool {
        self.chunks.iter().all(|c| !c.slots.is_empty())
            && self
                .chunks
                .front()
                .is_none_or(|c| c.slots.front().is_some_and(Slot::live))
            && self
                .chunks
                .back()
                .is_none_or(|c| c.slots.back().is_some_and(Slot::live))
    }

    /// Live members in id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, MemberEntry)> + '_ {
        self.chunks.iter().flat_map(move |c| {
            c.slots.iter().filter(|s| s.live()).map(move |s| {
                let id = c.id(s);
                (
                    id,
                    MemberEntry {
                        msg: s.msg(),
                        count: self.count_of(id),
                    },
                )
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_slot_is_12_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 12);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u64),
        Remove(u64),
        Count(u64, u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Mostly near the back (as members arrive), sometimes anywhere.
        let id = prop_oneof![
            3 => 0u64..400,
            1 => 0u64..40,
            1 => (1u64 << 32)..(1u64 << 32) + 40,
            1 => (u64::MAX - 40)..=u64::MAX,
        ];
        prop_oneof![
            3 => (id.clone(), 0..u64::MAX).prop_map(|(i, m)| Op::Insert(i, m)),
            3 => id.clone().prop_map(Op::Remove),
            1 => (id, prop_oneof![Just(0u32), any::<u32>()]).prop_map(|(i, c)| Op::Count(i, c)),
        ]
    }

    proptest! {
        /// The ring behaves as a B-tree map of members, in order.
        #[test]
        fn members_match_a_btree_map(ops in prop::collection::vec(op(), 0..400)) {
            let mut r = QueueMembers::default();
            // Each member with the item holding its count.
            let mut model: BTreeMap<u64, (MemberEntry, Option<CountItem>)> = BTreeMap::new();
            for o in ops {
                match o {
                    Op::Insert(id, msg) => {
                        let e = MemberEntry { msg, count: 0 };
                        let old = model.insert(id, (e, None)).and_then(|o| o.1);
                        prop_assert_eq!(r.insert(id, e), old);
                    }
                    Op::Remove(id) => {
                        let got = r.remove(id);
                        let want = model.remove(&id);
                        prop_assert_eq!(got.map(|g| g.0), want.map(|w| w.0));
                        // The item that held the count comes back with the member.
                        prop_assert_eq!(got.and_then(|g| g.1), want.and_then(|w| w.1));
                    }
                    Op::Count(id, c) => {
                        let item = (id, u64::from(c));
                        let want = model.get_mut(&id).map(|e| {
                            e.0.count = c;
                            e.1.replace(item)
                        });
                        prop_assert_eq!(r.set_count(id, c, item), want);
                    }
                }
                prop_assert_eq!(r.len(), model.len());
                prop_assert_eq!(r.is_empty(), model.is_empty());
                let got: Vec<_> = r.iter().collect();
                let want: Vec<_> = model.iter().map(|(k, v)| (*k, v.0)).collect();
                prop_assert_eq!(got, want);
                for id in [0, 1, 39, 200, 399, 400, 1 << 32, u64::MAX] {
                    prop_assert_eq!(r.get(id), model.get(&id).map(|v| v.0));
                    prop_assert_eq!(r.count_item(id), model.get(&id).and_then(|v| v.1));
                    // Above every member: nothing there (live or with a count).
                    if r.above_all(id) {
                        prop_assert!(model.range(id..).next().is_none());
                    }
                }
                if let Some((&last, _)) = model.iter().next_back() {
                    prop_assert!(!r.above_all(last));
                    if last < u64::MAX {
                        prop_assert!(r.above_all(last + 1));
                    }
                }
            }
        }

        /// A FIFO-like stream (appends in order, the oldest or a random member leaving, some
        /// counted) through the append and front-removal fast paths behaves as a B-tree map,
        /// and the tombstone accounting stays exact (no tombstone or empty chunk at the ends).
        #[test]
        fn a_fifo_stream_matches_a_btree_map(ops in prop::collection::vec((0u8..6, 0usize..12), 0..600)) {
            let mut r = QueueMembers::default();
            let mut model: BTreeMap<u64, (MemberEntry, Option<CountItem>)> = BTreeMap::new();
            let mut next = 0u64;
            for (op, k) in ops {
                match op {
                    0 | 1 => {
                        let e = MemberEntry { msg: next * 7, count: 0 };
                        let old = model.insert(next, (e, None)).and_then(|o| o.1);
                        prop_assert_eq!(r.insert(next, e), old);
                        next += 1;
                    }
                    2 | 3 => {
                        // The oldest (k == 0, mostly) or the k-th oldest leaves.
                        let id = model.keys().nth(if op == 2 { 0 } else { k }).copied().unwrap_or(next);
                        let got = r.remove(id);
                        let want = model.remove(&id);
                        prop_assert_eq!(got.map(|g| g.0), want.map(|w| w.0));
                        prop_assert_eq!(got.and_then(|g| g.1), want.and_then(|w| w.1));
                    }
                    5 => {
                        // A settle record's run (`Index::settle`): ids from the k-th oldest on,
                        // 10·k + 1 of them, the second one skipped (a requeued tag inside a
                        // multiple ack), each taken, then one trim.
                        let first = model.keys().nth(k).copied().unwrap_or(next);
                        for id in (first..first + 10 * k as u64 + 1).filter(|&i| i != first + 1) {
                            let got = r.take(id);
                            let want = model.remove(&id);
                            prop_assert_eq!(got.map(|g| g.0), want.map(|w| w.0));
                            prop_assert_eq!(got.and_then(|g| g.1), want.and_then(|w| w.1));
                        }
                        r.trim();
                    }
                    _ => {
                        let id = model.keys().nth(k).copied().unwrap_or(next);
                        let item = (id, k as u64);
                        let want = model.get_mut(&id).map(|e| {
                            e.0.count = k as u32 + 1;
                            e.1.replace(item)
                        });
                        prop_assert_eq!(r.set_count(id, k as u32 + 1, item), want);
                    }
                }
                prop_assert_eq!(r.len(), model.len());
                let got: Vec<_> = r.iter().collect();
                let want: Vec<_> = model.iter().map(|(k, v)| (*k, v.0)).collect();
                prop_assert_eq!(got, want);
                let dead: usize = r.chunks.iter().map(|c| c.slots.iter().filter(|s| !s.live()).count()).sum();
                prop_assert_eq!(r.dead, dead);
                prop_assert!(r.chunks.iter().all(|c| !c.slots.is_empty()));
                prop_assert!(r.chunks.front().is_none_or(|c| c.slots.front().is_some_and(Slot::live)));
                prop_assert!(r.chunks.back().is_none_or(|c| c.slots.back().is_some_and(Slot::live)));
            }
        }
    }
}
