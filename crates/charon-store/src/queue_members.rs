//! [`QueueMembers`]: one queue's live members (queue-local id → message, delivery count) in id
//! order, as a ring of 24-byte slots with tombstones instead of a B-tree (~48 bytes an entry
//! with node slack when ids are appended in order), since there is one per stored message per
//! queue (docs/performance.md, "Position-based recovery").
//!
//! Members arrive nearly in id order (a queue hands its ids out in order; records reach the log
//! shortly after), so an insert is an append or a short shift near the back; a compaction copy
//! re-creates a member at its own id, finding its tombstone. Removals leave tombstones, dropped
//! at the ends (a FIFO queue settles its front) and compacted away once they outnumber the
//! live members.

use std::collections::VecDeque;

use crate::types::MessageId;

/// One live member (16 bytes: there is one per message per queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemberEntry {
    pub(crate) msg: MessageId,
    pub(crate) count: u32,
}

/// A place in the ring (24 bytes); `live == false` is a tombstone.
#[derive(Debug, Clone, Copy)]
struct Slot {
    id: u64,
    msg: MessageId,
    count: u32,
    live: bool,
}

/// A queue's members by queue-local id.
#[derive(Debug, Default)]
pub(crate) struct QueueMembers {
    slots: VecDeque<Slot>,
    live: usize,
}

impl QueueMembers {
    pub(crate) fn is_empty(&self) -> bool {
        self.live == 0
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    fn position(&self, id: u64) -> Result<usize, usize> {
        match self.slots.back() {
            None => return Err(0),
            Some(b) if b.id < id => return Err(self.slots.len()),
            Some(b) if b.id == id => return Ok(self.slots.len() - 1),
            _ => {}
        }
        match self.slots.front() {
            Some(f) if f.id == id => return Ok(0),
            Some(f) if f.id > id => return Err(0),
            _ => {}
        }
        self.slots.binary_search_by_key(&id, |s| s.id)
    }

    pub(crate) fn get(&self, id: u64) -> Option<MemberEntry> {
        let i = self.position(id).ok()?;
        self.slots.get(i).filter(|s| s.live).map(|s| MemberEntry {
            msg: s.msg,
            count: s.count,
        })
    }

    /// Sets member `id`'s delivery count; false when it does not exist.
    pub(crate) fn set_count(&mut self, id: u64, count: u32) -> bool {
        let Ok(i) = self.position(id) else {
            return false;
        };
        match self.slots.get_mut(i) {
            Some(s) if s.live => {
                s.count = count;
                true
            }
            _ => false,
        }
    }

    /// Adds (or replaces) member `id`.
    pub(crate) fn insert(&mut self, id: u64, e: MemberEntry) {
        let slot = Slot {
            id,
            msg: e.msg,
            count: e.count,
            live: true,
        };
        match self.position(id) {
            Ok(i) => {
                if let Some(s) = self.slots.get_mut(i) {
                    if !s.live {
                        self.live += 1;
                    }
                    *s = slot;
                }
            }
            Err(i) => {
                self.slots.insert(i, slot);
                self.live += 1;
            }
        }
    }

    /// Removes member `id`.
    pub(crate) fn remove(&mut self, id: u64) -> Option<MemberEntry> {
        let i = self.position(id).ok()?;
        let s = self.slots.get_mut(i).filter(|s| s.live)?;
        s.live = false;
        let out = MemberEntry {
            msg: s.msg,
            count: s.count,
        };
        self.live -= 1;
        self.trim();
        Some(out)
    }

    /// Drops tombstones at the ends; compacts once they outnumber the live members; gives
    /// memory back once the ring is mostly empty (amortised O(1) per removal).
    fn trim(&mut self) {
        while self.slots.front().is_some_and(|s| !s.live) {
            self.slots.pop_front();
        }
        while self.slots.back().is_some_and(|s| !s.live) {
            self.slots.pop_back();
        }
        let dead = self.slots.len() - self.live;
        if dead > 64 && dead > self.live {
            self.slots.retain(|s| s.live);
        }
        let cap = self.slots.capacity();
        if cap > 1024 && self.slots.len() * 4 < cap {
            self.slots.shrink_to(self.slots.len() * 2);
        }
    }

    /// Live members in id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, MemberEntry)> + '_ {
        self.slots.iter().filter(|s| s.live).map(|s| {
            (
                s.id,
                MemberEntry {
                    msg: s.msg,
                    count: s.count,
                },
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_slot_is_24_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 24);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u64),
        Remove(u64),
        Count(u64, u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Mostly near the back (as members arrive), sometimes anywhere.
        let id = prop_oneof![3 => 0u64..400, 1 => 0u64..40];
        prop_oneof![
            3 => (id.clone(), any::<u64>()).prop_map(|(i, m)| Op::Insert(i, m)),
            3 => id.clone().prop_map(Op::Remove),
            1 => (id, any::<u32>()).prop_map(|(i, c)| Op::Count(i, c)),
        ]
    }

    proptest! {
        /// The ring behaves as a B-tree map of members, in order.
        #[test]
        fn members_match_a_btree_map(ops in prop::collection::vec(op(), 0..400)) {
            let mut r = QueueMembers::default();
            let mut model: BTreeMap<u64, MemberEntry> = BTreeMap::new();
            for o in ops {
                match o {
                    Op::Insert(id, msg) => {
                        let e = MemberEntry { msg, count: 0 };
                        r.insert(id, e);
                        model.insert(id, e);
                    }
                    Op::Remove(id) => prop_assert_eq!(r.remove(id), model.remove(&id)),
                    Op::Count(id, c) => {
                        let want = model.get_mut(&id).map(|e| e.count = c).is_some();
                        prop_assert_eq!(r.set_count(id, c), want);
                    }
                }
                prop_assert_eq!(r.len(), model.len());
                prop_assert_eq!(r.is_empty(), model.is_empty());
                let got: Vec<_> = r.iter().collect();
                let want: Vec<_> = model.iter().map(|(k, v)| (*k, *v)).collect();
                prop_assert_eq!(got, want);
                for id in [0, 1, 39, 200, 399, 400] {
                    prop_assert_eq!(r.get(id), model.get(&id).copied());
                }
            }
        }
    }
}
