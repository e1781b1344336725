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
use crate::types::{BodyRef, Member, MessageId};

/// Set in `MsgEntry::body_off` when the members are in [`Messages::multi`] (records are at
/// most 1 GiB, so a body offset never has this bit).
const MULTI: u32 = 1 << 31;

/// One live message (32 bytes). The body is the last field of its record, so its length is
/// the record's length less the body offset. The metadata (exchange, routing key,
/// properties, times) stays on disk: [`crate::MetaReader`] reads it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MsgEntry {
    seg: u32,
    /// Offset of the record header in the file.
    offset: u32,
    /// Whole record length.
    len: u32,
    /// Offset of the body from the start of the record, and [`MULTI`].
    body_off: u32,
    /// The only member (unless [`MULTI`]).
    one: Member,
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

    /// Message `id`'s members, in the order they were added.
    pub(crate) fn members(&self, id: &MessageId) -> &[Member] {
        match self.map.get(id) {
            Some(e) if e.body_off & MULTI == 0 => std::slice::from_ref(&e.one),
            Some(_) => self.multi.get(id).map_or(&[], Vec::as_slice),
            None => &[],
        }
    }

    /// Message `id` lives in the record at `loc`, its body `body_off` bytes into it, with
    /// `members` (replacing an entry of the same id). `None` when the place does not fit the
    /// entry (never, within the store's limits: `segment::MAX_SEG`, `segment::MAX_FILE`).
    pub(crate) fn insert(
        &mut self,
        id: MessageId,
        loc: Loc,
        body_off: u32,
        members: Vec<Member>,
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
            one: (0, 0),
        };
        if let [one] = members.as_slice() {
            e.one = *one;
            self.multi.remove(&id);
        } else {
            e.body_off |= MULTI;
            self.multi.insert(id, members);
        }
        self.map.insert(id, e);
        Some(())
    }

    /// Remove message `id`: its entry and members.
    pub(crate) fn remove(&mut self, id: &MessageId) -> Option<(MsgEntry, Vec<Member>)> {
        let e = self.map.remove(id)?;
        let members = if e.body_off & MULTI == 0 {
            vec![e.one]
        } else {
            let list = self.multi.remove(id).unwrap_or_default();
            shrink_sparse(&mut self.multi);
            list
        };
        Some((e, members))
    }

    /// Add member `m` to message `id` (which exists).
    pub(crate) fn add_member(&mut self, id: MessageId, m: Member) {
        let Some(e) = self.map.get_mut(&id) else {
            return;
        };
        if e.body_off & MULTI == 0 {
            e.body_off |= MULTI;
            self.multi.insert(id, vec![e.one, m]);
        } else {
            self.multi.entry(id).or_default().push(m);
        }
    }

    /// Remove member `m` from message `id`; `Some(true)` when it has no member left.
    pub(crate) fn remove_member(&mut self, id: MessageId, m: Member) -> Option<bool> {
        let e = self.map.get_mut(&id)?;
        if e.body_off & MULTI == 0 {
            if e.one == m {
                e.body_off |= MULTI;
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
                e.one = *one;
                e.body_off &= !MULTI;
                self.multi.remove(&id);
                shrink_sparse(&mut self.multi);
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
    fn an_entry_is_32_bytes() {
        assert_eq!(std::mem::size_of::<MsgEntry>(), 32);
    }

    #[test]
    fn members_move_between_inline_and_the_side_map() {
        let mut ms = Messages::default();
        ms.insert(7, loc(3), 40, vec![(1, 1)]).expect("fits");
        assert_eq!(ms.members(&7), &[(1, 1)]);
        let e = *ms.get(&7).expect("entry");
        assert_eq!(e.loc(), loc(3));
        assert_eq!(
            (e.body(7).offset, e.body(7).len, e.prefix_len()),
            (140, 10, 40)
        );
        ms.add_member(7, (2, 5));
        ms.add_member(7, (3, 5));
        assert_eq!(ms.members(&7), &[(1, 1), (2, 5), (3, 5)]);
        assert_eq!(
            ms.get(&7).map(|e| e.body(7).len),
            Some(10),
            "flag kept out of the body"
        );
        assert_eq!(ms.remove_member(7, (2, 5)), Some(false));
        assert_eq!(ms.remove_member(7, (9, 9)), Some(false));
        assert_eq!(ms.remove_member(7, (1, 1)), Some(false));
        assert_eq!(ms.members(&7), &[(3, 5)]);
        assert!(ms.multi.is_empty(), "back inline");
        assert_eq!(ms.remove_member(7, (3, 5)), Some(true));
        assert_eq!(ms.memberless(), vec![7]);
        let (_, members) = ms.remove(&7).expect("removed");
        assert!(members.is_empty() && ms.is_empty() && ms.multi.is_empty());
        assert_eq!(ms.remove_member(7, (3, 5)), None);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, Vec<(u8, u8)>),
        Add(u8, (u8, u8)),
        RemoveMember(u8, (u8, u8)),
        Remove(u8),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        let member = (0u8..3, 0u8..4);
        prop_oneof![
            (0u8..6, proptest::collection::vec(member.clone(), 0..4))
                .prop_map(|(i, m)| Op::Insert(i, m)),
            (0u8..6, member.clone()).prop_map(|(i, m)| Op::Add(i, m)),
            (0u8..6, member).prop_map(|(i, m)| Op::RemoveMember(i, m)),
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
                        ms.insert(id, place, 60, members.clone()).expect("fits");
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
                    Op::Remove(id) => {
                        let id = u64::from(id);
                        let got = ms.remove(&id).map(|(e, v)| (e.loc(), v));
                        proptest::prop_assert_eq!(got, model.remove(&id));
                    }
                }
                proptest::prop_assert_eq!(ms.len(), model.len());
                for (id, (place, v)) in &model {
                    proptest::prop_assert_eq!(ms.members(id), v.as_slice());
                    let e = ms.get(id).expect("present");
                    proptest::prop_assert_eq!(e.loc(), *place);
                    proptest::prop_assert_eq!((e.prefix_len(), e.body(*id).len), (60, 40));
                }
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
        assert!(ms.insert(1, loc(1 << 32), 40, vec![(1, 1)]).is_none());
        let far = Loc {
            seg: 1,
            offset: 1 << 32,
            len: 50,
        };
        assert!(ms.insert(1, far, 40, vec![(1, 1)]).is_none());
        assert!(ms.is_empty());
    }
}
