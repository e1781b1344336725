//! [`Messages`]: the live messages of the index, one 32-byte entry each in an [`IdTable`]
//! (~34 bytes a message for dense ids, no hash table doubling), since there is one per stored
//! message and a backlog of millions lives in RAM (docs/performance.md, "Position-based
//! recovery", "Recovery of 10M").
//!
//! An entry holds where the message's record is (segment and offset as `u32`: the store keeps
//! segment ids and segment files below 4 Gi, `docs/storage-format.md` §7) and, inline, its one
//! member — the common case. A message in several queues has its member list in a side map
//! instead (fan-out is rare next to backlogs), flagged in the entry.

use foldhash::HashMap as FastMap;

use crate::id_table::IdTable;
use crate::index::Loc;
use crate::segment::SegId;
use crate::types::{BodyRef, Member, MessageId, QueueId};

/// Set in `MsgEntry::body_off` when the members are in [`Messages::multi`] (records are at
/// most 1 GiB, so a body offset never has this bit).
const MULTI: u32 = 1 << 31;

/// One live message (28 bytes, 4-byte aligned). The body is the last field of its record, so
/// its length is the record's length less the body offset. The metadata (exchange, routing
/// key, properties, times) stays on disk: [`crate::MetaReader`] reads it. The one member's
/// queue is an index into [`Messages`]' table of queues (a store has few queues and millions
/// of messages).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MsgEntry {
    seg: u32,
    /// Offset of the record header in the file.
    offset: u32,
    /// Whole record length.
    len: u32,
    /// Offset of the body from the start of the record, and [`MULTI`].
    body_off: u32,
    /// The only member (unless [`MULTI`]): its queue's index, its queue-local id in halves.
    queue: u32,
    qid_lo: u32,
    qid_hi: u32,
}

impl MsgEntry {
    /// Where the message's record lies.
    pub(crate) fn loc(&self) -> Loc {
        Loc {
            seg: SegId::from(self.seg),
            offset: u64::from(self.offset),
            len: self.len,
        }
    }

    pub(crate) fn seg(&self) -> SegId {
        SegId::from(self.seg)
    }

    fn body_off(&self) -> u32 {
        self.body_off & !MULTI
    }

    fn multi(&self) -> bool {
        self.body_off & MULTI != 0
    }

    fn qid(&self) -> u64 {
        u64::from(self.qid_lo) | (u64::from(self.qid_hi) << 32)
    }

    /// Where message `id`'s body is.
    pub(crate) fn body(&self, id: MessageId) -> BodyRef {
        BodyRef {
            msg: id,
            segment: self.seg(),
            offset: u64::from(self.offset) + u64::from(self.body_off()),
            len: self.len.saturating_sub(self.body_off()),
        }
    }

    /// The record's bytes before the body: header and payload up to and including the body's
    /// length (what [`crate::MetaReader`] reads).
    pub(crate) fn prefix_len(&self) -> u32 {
        self.body_off()
    }
}

/// The live messages by id.
#[derive(Debug, Default)]
pub(crate) struct Messages {
    map: IdTable<MsgEntry>,
    /// Member lists of messages flagged [`MULTI`] (zero, or two and more members).
    multi: FastMap<MessageId, Vec<Member>>,
    /// Queues of inline members by index: (queue id, entries naming it).
    queues: Vec<(QueueId, u32)>,
    queue_index: FastMap<QueueId, u32>,
    /// Indexes no entry names (reused).
    free: Vec<u32>,
    /// The index [`Self::intern`] gave last (checked against `queues` before use).
    last: u32,
}

impl Messages {
    pub(crate) fn get(&self, id: &MessageId) -> Option<&MsgEntry> {
        self.map.get(id)
    }

    pub(crate) fn contains_key(&self, id: &MessageId) -> bool {
        self.map.contains_key(id)
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// Every live message with its entry, in id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (MessageId, &MsgEntry)> + '_ {
        self.map.iter()
    }

    /// An entry's inline member.
    fn one(&self, e: &MsgEntry) -> Member {
        let q = self.queues.get(e.queue as usize).map_or(0, |(q, _)| *q);
        (q, e.qid())
    }

    /// Queue `q`'s index, one more entry naming it.
    fn intern(&mut self, q: QueueId) -> u32 {
        // The common case: the queue interned last (a slot naming a queue is that queue's
        // only one while entries name it).
        if let Some(slot) = self.queues.get_mut(self.last as usize)
            && slot.0 == q
            && slot.1 > 0
        {
            slot.1 += 1;
            return self.last;
        }
        if let Some(&i) = self.queue_index.get(&q) {
            self.last = i;
            if let Some(slot) = self.queues.get_mut(i as usize) {
                slot.1 += 1;
            }
            return i;
        }
        let i = match self.free.pop() {
            Some(i) => {
                if let Some(slot) = self.queues.get_mut(i as usize) {
                    *slot = (q, 1);
                }
                i
            }
            None => {
                self.queues.push((q, 1));
                (self.queues.len() - 1) as u32
            }
        };
        self.queue_index.insert(q, i);
        self.last = i;
        i
    }

    /// One entry less names queue index `i`.
    fn release(&mut self, i: u32) {
        let Some(slot) = self.queues.get_mut(i as usize) else {
            return;
        };
        slot.1 -= 1;
        if slot.1 == 0 {
            self.queue_index.remove(&slot.0);
            self.free.push(i);
        }
    }

    /// Makes `m` the inline member of `e`.
    fn set_one(&mut self, e: &mut MsgEntry, m: Member) {
        e.queue = self.intern(m.0);
        e.qid_lo = m.1 as u32;
        e.qid_hi = (m.1 >> 32) as u32;
    }

    /// Message `id`'s members, in the order they were added.
    pub(crate) fn members(&self, id: &MessageId) -> impl Iterator<Item = Member> + '_ {
        let (one, many): (Option<Member>, &[Member]) = match self.map.get(id) {
            Some(e) if !e.multi() => (Some(self.one(e)), &[]),
            Some(_) => (None, self.multi.get(id).map_or(&[][..], Vec::as_slice)),
            None => (None, &[]),
        };
        one.into_iter().chain(many.iter().copied())
    }

    /// Message `id` lives in the record at `loc`, its body `body_off` bytes into it, with
    /// `members` (replacing an entry of the same id). `None` when the place does not fit the
    /// entry (never, within the store's limits: `segment::MAX_SEG`, `segment::MAX_FILE`).
    pub(crate) fn insert(
        &mut self,
        id: MessageId,
        loc: Loc,
        body_off: u32,
        members: &[Member],
    ) -> Option<()> {
        let seg = u32::try_from(loc.seg).ok()?;
        let offset = u32::try_from(loc.offset).ok()?;
        if body_off & MULTI != 0 {
            return None;
        }
        let mut e = MsgEntry {
            seg,
            offset,
            len: loc.len,
            body_off,
            queue: 0,
            qid_lo: 0,
            qid_hi: 0,
        };
        if let [one] = members {
            self.set_one(&mut e, *one);
            if !self.multi.is_empty() {
                self.multi.remove(&id);
            }
        } else {
            e.body_off |= MULTI;
            self.multi.insert(id, members.to_vec());
        }
        if let Some(old) = self.map.insert(id, e)
            && !old.multi()
        {
            self.release(old.queue);
        }
        Some(())
    }

    /// Remove message `id`: its entry and members.
    pub(crate) fn remove(&mut self, id: &MessageId) -> Option<(MsgEntry, Vec<Member>)> {
        let e = self.map.remove(id)?;
        let members = if e.multi() {
            let list = self.multi.remove(id).unwrap_or_default();
            shrink_sparse(&mut self.multi);
            list
        } else {
            let one = self.one(&e);
            self.release(e.queue);
            vec![one]
        };
        Some((e, members))
    }

    /// Removes member `m` of message `id`; when it was the last, the message too: then its
    /// entry. (A message with one member, the common case, leaves without a member list.)
    pub(crate) fn remove_member_or_message(
        &mut self,
        id: MessageId,
        m: Member,
    ) -> Option<MsgEntry> {
        // One lookup for the common case: the message's one inline member is `m`.
        let queues = &self.queues;
        let mut multi = false;
        let removed = self.map.remove_if(&id, |e| {
            multi = e.multi();
            !multi && queues.get(e.queue as usize).map_or(0, |(q, _)| *q) == m.0 && e.qid() == m.1
        });
        if let Some(e) = removed {
            self.release(e.queue);
            return Some(e);
        }
        if !multi {
            return None;
        }
        match self.remove_member(id, m) {
            Some(true) => self.remove(&id).map(|(e, _)| e),
            _ => None,
        }
    }

    /// Add member `m` to message `id` (which exists).
    pub(crate) fn add_member(&mut self, id: MessageId, m: Member) {
        let Some(e) = self.map.get(&id).copied() else {
            return;
        };
        if e.multi() {
            self.multi.entry(id).or_default().push(m);
            return;
        }
        let one = self.one(&e);
        self.release(e.queue);
        if let Some(x) = self.map.get_mut(&id) {
            x.body_off |= MULTI;
        }
        self.multi.insert(id, vec![one, m]);
    }

    /// Remove member `m` from message `id`; `Some(true)` when it has no member left.
    pub(crate) fn remove_member(&mut self, id: MessageId, m: Member) -> Option<bool> {
        let mut e = self.map.get(&id).copied()?;
        if !e.multi() {
            if self.one(&e) == m {
                self.release(e.queue);
                e.body_off |= MULTI;
                if let Some(x) = self.map.get_mut(&id) {
                    *x = e;
                }
                self.multi.insert(id, Vec::new());
                return Some(true);
            }
            return Some(false);
        }
        let list = self.multi.entry(id).or_default();
        list.retain(|x| *x != m);
        match list.as_slice() {
            [] => Some(true),
            [one] => {
                let one = *one;
                self.multi.remove(&id);
                shrink_sparse(&mut self.multi);
                self.set_one(&mut e, one);
                e.body_off &= !MULTI;
                if let Some(x) = self.map.get_mut(&id) {
                    *x = e;
                }
                Some(false)
            }
            _ => Some(false),
        }
    }

    /// Ids of messages without members.
    pub(crate) fn memberless(&self) -> Vec<MessageId> {
        self.multi
            .iter()
            .filter(|(_, v)| v.is_empty())
            .map(|(id, _)| *id)
            .collect()
    }

    /// Queues named by inline members (tests: the table gives indexes back).
    #[cfg(test)]
    fn named_queues(&self) -> usize {
        self.queue_index.len()
    }
}

/// Gives a map's memory back once it is mostly empty (a drained backlog of a million messages
/// otherwise keeps its table, ~150 MB, for good). Amortised O(1): after shrinking to twice its
/// length a map must lose three quarters of its entries before it shrinks again.
pub(crate) fn shrink_sparse<K: Eq + std::hash::Hash, V, S: std::hash::BuildHasher>(
    map: &mut std::collections::HashMap<K, V, S>,
) {
    let cap = map.capacity();
    if cap > 1024 && map.len() * 4 < cap {
        map.shrink_to(map.len() * 2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(seg: SegId) -> Loc {
        Loc {
            seg,
            offset: 100,
            len: 50,
        }
    }

    #[test]
    fn an_entry_is_28_bytes() {
        assert_eq!(std::mem::size_of::<MsgEntry>(), 28);
    }

    #[test]
    fn members_move_between_inline_and_the_side_map() {
        let mut ms = Messages::default();
        ms.insert(7, loc(3), 40, &[(1, 1)]).expect("fits");
        assert_eq!(ms.members(&7).collect::<Vec<_>>(), [(1, 1)]);
        let e = *ms.get(&7).expect("entry");
        assert_eq!(e.loc(), loc(3));
        assert_eq!(
            (e.body(7).offset, e.body(7).len, e.prefix_len()),
            (140, 10, 40)
        );
        ms.add_member(7, (2, 5));
        ms.add_member(7, (3, 5));
        assert_eq!(ms.members(&7).collect::<Vec<_>>(), [(1, 1), (2, 5), (3, 5)]);
        assert_eq!(
            ms.get(&7).map(|e| e.body(7).len),
            Some(10),
            "flag kept out of the body"
        );
        assert_eq!(ms.remove_member(7, (2, 5)), Some(false));
        assert_eq!(ms.remove_member(7, (9, 9)), Some(false));
        assert_eq!(ms.remove_member(7, (1, 1)), Some(false));
        assert_eq!(ms.members(&7).collect::<Vec<_>>(), [(3, 5)]);
        assert!(ms.multi.is_empty(), "back inline");
        assert_eq!(ms.remove_member(7, (3, 5)), Some(true));
        assert_eq!(ms.memberless(), vec![7]);
        let (_, members) = ms.remove(&7).expect("removed");
        assert!(members.is_empty() && ms.is_empty() && ms.multi.is_empty());
        assert_eq!(ms.named_queues(), 0, "queue indexes given back");
        assert_eq!(ms.remove_member(7, (3, 5)), None);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, Vec<(u8, u8)>),
        Add(u8, (u8, u8)),
        RemoveMember(u8, (u8, u8)),
        RemoveMemberOrMessage(u8, (u8, u8)),
        Remove(u8),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        let member = (0u8..3, 0u8..4);
        prop_oneof![
            (0u8..6, proptest::collection::vec(member.clone(), 0..4))
                .prop_map(|(i, m)| Op::Insert(i, m)),
            (0u8..6, member.clone()).prop_map(|(i, m)| Op::Add(i, m)),
            (0u8..6, member.clone()).prop_map(|(i, m)| Op::RemoveMember(i, m)),
            (0u8..6, member).prop_map(|(i, m)| Op::RemoveMemberOrMessage(i, m)),
            (0u8..6).prop_map(Op::Remove),
        ]
    }

    proptest::proptest! {
        /// The compact entries (one member inline, others in the side map) behave as a map of
        /// member lists.
        #[test]
        fn messages_match_a_map_of_member_lists(ops in proptest::collection::vec(op(), 0..80)) {
            use std::collections::BTreeMap;
            let mut ms = Messages::default();
            let mut model: BTreeMap<MessageId, (Loc, Vec<Member>)> = BTreeMap::new();
            let m = |(q, i): (u8, u8)| (u64::from(q), u64::from(i));
            for (n, o) in ops.into_iter().enumerate() {
                match o {
                    Op::Insert(id, members) => {
                        let id = u64::from(id);
                        let members: Vec<Member> = members.into_iter().map(m).collect();
                        let place = Loc { seg: n as u64 + 1, offset: 24 + n as u64, len: 100 };
                        ms.insert(id, place, 60, &members).expect("fits");
                        model.insert(id, (place, members));
                    }
                    Op::Add(id, x) => {
                        let id = u64::from(id);
                        ms.add_member(id, m(x));
                        if let Some((_, v)) = model.get_mut(&id) {
                            v.push(m(x));
                        }
                    }
                    Op::RemoveMember(id, x) => {
                        let id = u64::from(id);
                        let got = ms.remove_member(id, m(x));
                        let want = model.get_mut(&id).map(|(_, v)| {
                            v.retain(|y| *y != m(x));
                            v.is_empty()
                        });
                        proptest::prop_assert_eq!(got, want);
                    }
                    Op::RemoveMemberOrMessage(id, x) => {
                        let id = u64::from(id);
                        let got = ms.remove_member_or_message(id, m(x)).map(|e| e.loc());
                        let last = model.get_mut(&id).is_some_and(|(_, v)| {
                            v.retain(|y| *y != m(x));
                            v.is_empty()
                        });
                        let want = if last { model.remove(&id).map(|(l, _)| l) } else { None };
                        proptest::prop_assert_eq!(got, want);
                    }
                    Op::Remove(id) => {
                        let id = u64::from(id);
                        let got = ms.remove(&id).map(|(e, v)| (e.loc(), v));
                        proptest::prop_assert_eq!(got, model.remove(&id));
                    }
                }
                proptest::prop_assert_eq!(ms.len(), model.len());
                for (id, (place, v)) in &model {
                    proptest::prop_assert_eq!(ms.members(id).collect::<Vec<_>>(), v.clone());
                    let e = ms.get(id).expect("present");
                    proptest::prop_assert_eq!(e.loc(), *place);
                    proptest::prop_assert_eq!((e.prefix_len(), e.body(*id).len), (60, 40));
                }
                // Queues of inline members (a single member added to an empty list stays in
                // the side map).
                let named: std::collections::BTreeSet<u64> = model
                    .iter()
                    .filter(|(id, _)| ms.get(id).is_some_and(|e| !e.multi()))
                    .filter_map(|(_, (_, v))| v.first().map(|m| m.0))
                    .collect();
                proptest::prop_assert_eq!(ms.named_queues(), named.len());
                let mut empty = ms.memberless();
                empty.sort_unstable();
                let want: Vec<MessageId> =
                    model.iter().filter(|(_, (_, v))| v.is_empty()).map(|(id, _)| *id).collect();
                proptest::prop_assert_eq!(empty, want);
            }
        }
    }

    #[test]
    fn places_beyond_the_limits_are_refused() {
        let mut ms = Messages::default();
        assert!(ms.insert(1, loc(1 << 32), 40, &[(1, 1)]).is_none());
        let far = Loc {
            seg: 1,
            offset: 1 << 32,
            len: 50,
        };
        assert!(ms.insert(1, far, 40, &[(1, 1)]).is_none());
        assert!(ms.is_empty());
    }
}
