//! The in-memory index: which messages, members and definitions are live,
//! where each lives, and the per-segment accounting that decides when a
//! segment may be deleted or should be compacted
//! (`docs/storage-format.md` §5).
//!
//! [`Index::apply`] is the one state machine: the live store applies each
//! record as it is appended, recovery applies each record as it is read.
//! Every operation on state that is already gone is a no-op.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use foldhash::HashMap as FastMap;

use crate::messages::{Messages, shrink_sparse};
use crate::queue_members::{MemberEntry, QueueMembers};
use crate::record::{HEADER_LEN, MsgBody, Payload};
use crate::segment::SegId;
use crate::types::{DefinitionKey, Member, MessageId, QueueId};

/// Where a record lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Loc {
    pub(crate) seg: SegId,
    /// Offset of the record header in the file.
    pub(crate) offset: u64,
    /// Whole record length.
    pub(crate) len: u32,
}

/// A live item's place and the bytes it accounts for.
type Item = (SegId, u64);

/// Records other than the message's own that hold a member's state; kept
/// aside because few members have any. (The record holding a member's delivery count is kept
/// with the count, in `QueueMembers`.)
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct MemberItems {
    /// The `Enqueue` record that added this member.
    enqueued: Option<Item>,
}

/// Accounting for one segment.
#[derive(Debug, Default, Clone)]
pub(crate) struct SegStats {
    pub(crate) live_items: u64,
    pub(crate) live_bytes: u64,
    /// Bytes in the file (header + records).
    pub(crate) size: u64,
    /// Largest index of a record that killed an item here.
    pub(crate) killed_at: u64,
    /// Older segments holding items that records here killed.
    pub(crate) deps: BTreeSet<SegId>,
}

/// A member's park state and the `Park` record holding it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ParkEntry {
    pub(crate) due_ms: u64,
    pub(crate) attempt: u32,
    pub(crate) loc: Loc,
}

impl ParkEntry {
    fn item(&self) -> Item {
        (self.loc.seg, u64::from(self.loc.len))
    }
}

#[derive(Debug, Default)]
pub(crate) struct Index {
    /// Parked members (few: kept aside).
    pub(crate) parks: HashMap<Member, ParkEntry>,
    // Keyed by ids the store and the broker choose: a fast hash (std's SipHash was a fifth of
    // the CPU of a persistent publish, docs/performance.md).
    pub(crate) messages: Messages,
    pub(crate) queues: FastMap<QueueId, QueueMembers>,
    pub(crate) member_items: FastMap<Member, MemberItems>,
    pub(crate) defs: HashMap<DefinitionKey, Loc>,
    pub(crate) segs: BTreeMap<SegId, SegStats>,
}

impl Index {
    pub(crate) fn add_segment(&mut self, seg: SegId, size: u64) {
        self.segs.insert(
            seg,
            SegStats {
                size,
                ..SegStats::default()
            },
        );
    }

    pub(crate) fn grow(&mut self, seg: SegId, bytes: u64) {
        if let Some(s) = self.segs.get_mut(&seg) {
            s.size += bytes;
        }
    }

    fn add_item(&mut self, (seg, bytes): Item) {
        if let Some(s) = self.segs.get_mut(&seg) {
            s.live_items += 1;
            s.live_bytes += bytes;
        }
    }

    /// `killer_seg`'s record at `index` killed the item at `victim`.
    fn kill(&mut self, (seg, bytes): Item, killer_seg: SegId, index: u64) {
        if let Some(s) = self.segs.get_mut(&seg) {
            s.live_items = s.live_items.saturating_sub(1);
            s.live_bytes = s.live_bytes.saturating_sub(bytes);
            s.killed_at = s.killed_at.max(index);
        }
        self.depend(killer_seg, seg);
    }

    /// A record in `killer_seg` changed an item that stays live in `seg`
    /// (e.g. removed one of a message's members): the record must outlive
    /// that item's segment.
    fn depend(&mut self, killer_seg: SegId, seg: SegId) {
        if seg != killer_seg
            && let Some(k) = self.segs.get_mut(&killer_seg)
        {
            k.deps.insert(seg);
        }
    }

    /// Apply a `Publish` record of `msg` at `members` (what [`Index::apply`] does with a decoded
    /// one; the live store's borrowed publish calls it without making the `Payload`).
    pub(crate) fn apply_publish(
        &mut self,
        index: u64,
        loc: Loc,
        msg: &MsgBody<'_>,
        members: &[Member],
    ) {
        self.create(index, index, loc, msg, members.iter().map(|m| (*m, 0)));
    }

    /// The live store's publish of the record it just appended at `loc` (log index `index`):
    /// what [`Index::grow`] by the record and then [`Index::apply_publish`] do, with one
    /// lookup of the segment's accounting for both, and a publish to one member (the usual
    /// case) placed without the member list `create` keeps for several.
    pub(crate) fn append_publish(
        &mut self,
        index: u64,
        loc: Loc,
        msg: &MsgBody<'_>,
        members: &[Member],
    ) {
        let len = u64::from(loc.len);
        let fits = u32::try_from(loc.seg).is_ok() && u32::try_from(loc.offset).is_ok();
        let ([m], true) = (members, fits) else {
            self.grow(loc.seg, len);
            self.apply_publish(index, loc, msg, members);
            return;
        };
        if let Some(s) = self.segs.get_mut(&loc.seg) {
            s.size += len;
            s.live_items += 1;
            s.live_bytes += len;
        }
        // Records are at most 1 GiB (`record::fits`), so this fits a u32.
        let body_off = (HEADER_LEN + msg.body_offset) as u32;
        let m = *m;
        let entry = MemberEntry {
            msg: index,
            count: 0,
        };
        let q = self.queues.entry(m.0).or_default();
        let old = if q.above_all(m.1) {
            q.insert(m.1, entry)
        } else {
            self.remove_member(m, loc.seg, index);
            self.queues.entry(m.0).or_default().insert(m.1, entry)
        };
        if let Some(old) = old {
            self.kill(old, loc.seg, index);
        }
        let _ = self
            .messages
            .insert(index, loc, body_off, std::slice::from_ref(&m));
    }

    /// Apply one record found at `loc` with log index `index`.
    pub(crate) fn apply(&mut self, index: u64, loc: Loc, payload: &Payload<'_>) {
        let seg = loc.seg;
        match payload {
            Payload::Publish { members, msg } => self.apply_publish(index, loc, msg, members),
            Payload::Enqueue { msg, members } => self.enqueue(index, loc, *msg, members),
            Payload::Route { source, members } => {
                let Some(msg) = self.message_of(*source) else {
                    return;
                };
                // The targets first, so the message lives on when the source goes.
                self.enqueue(index, loc, msg, members);
                self.remove_member(*source, seg, index);
            }
            Payload::Park {
                member,
                due_ms,
                attempt,
            } => {
                if self.message_of(*member).is_none() {
                    return;
                }
                let new = ParkEntry {
                    due_ms: *due_ms,
                    attempt: *attempt,
                    loc,
                };
                self.add_item(new.item());
                if let Some(old) = self.parks.insert(*member, new) {
                    self.kill(old.item(), seg, index);
                }
            }
            Payload::Settle { queue, ids } => self.settle(*queue, ids, seg, index),
            Payload::DeadLetter {
                source,
                members,
                msg,
            } => {
                self.remove_member(*source, seg, index);
                self.create(index, index, loc, msg, members.iter().map(|m| (*m, 0)));
            }
            Payload::DeliveryCount { member, count } => {
                self.set_count(*member, *count, (seg, u64::from(loc.len)), index);
            }
            Payload::DeliveryCounts { queue, counts } => {
                // Like `Enqueue`, the record's bytes are shared among the counts it holds.
                let share = u64::from(loc.len) / counts.len().max(1) as u64;
                for (id, count) in counts {
                    self.set_count((*queue, *id), *count, (seg, share), index);
                }
            }
            Payload::Carry {
                msg_id,
                members,
                msg,
            } => {
                // Park states stay with their members (their records stay where they are).
                let mut parks = Vec::new();
                if let Some((old, members)) = self.messages.remove(msg_id) {
                    self.kill((old.seg(), u64::from(old.loc().len)), seg, index);
                    for m in members {
                        if let Some(p) = self.parks.remove(&m) {
                            parks.push((m, p));
                        }
                        self.drop_member_entry(m, seg, index);
                    }
                }
                self.create(*msg_id, index, loc, msg, members.iter().copied());
                for (m, p) in parks {
                    if self.message_of(m) == Some(*msg_id) {
                        self.parks.insert(m, p);
                    } else {
                        self.kill(p.item(), seg, index);
                    }
                }
            }
            Payload::PutDefinition { kind, key, .. } => {
                let k = (*kind, Bytes::copy_from_slice(key));
                if let Some(old) = self.defs.insert(k, loc) {
                    self.kill((old.seg, u64::from(old.len)), seg, index);
                }
                self.add_item((seg, u64::from(loc.len)));
            }
            Payload::DeleteDefinition { kind, key } => {
                let k = (*kind, Bytes::copy_from_slice(key));
                if let Some(old) = self.defs.remove(&k) {
                    self.kill((old.seg, u64::from(old.len)), seg, index);
                }
            }
            Payload::Purge { queue } => {
                let ids: Vec<u64> = self
                    .queues
                    .get(queue)
                    .map(|q| q.iter().map(|(id, _)| id).collect())
                    .unwrap_or_default();
                for id in ids {
                    self.remove_member((*queue, id), seg, index);
                }
            }
        }
    }

    /// A member's delivery count is now `count`, held by `item` (a `DeliveryCount` record or
    /// a share of a `DeliveryCounts` one); the record that held it before dies. No-op for a
    /// member that does not exist.
    fn set_count(&mut self, member: Member, count: u32, item: Item, index: u64) {
        let Some(old) = self
            .queues
            .get_mut(&member.0)
            .and_then(|q| q.set_count(member.1, count, item))
        else {
            return;
        };
        self.add_item(item);
        if let Some(old) = old {
            self.kill(old, item.0, index);
        }
    }

    /// `Enqueue` (and the enqueue half of `Route`): message `msg`, if it still exists, at
    /// `members`; the record's bytes are shared among the members it adds.
    fn enqueue(&mut self, index: u64, loc: Loc, msg: MessageId, members: &[Member]) {
        let seg = loc.seg;
        let msg = &msg;
        {
            {
                if !self.messages.contains_key(msg) {
                    return;
                }
                let share = u64::from(loc.len) / members.len().max(1) as u64;
                for m in members {
                    let existing = self.queues.get(&m.0).and_then(|q| q.get(m.1));
                    if existing.is_some_and(|e| e.msg == *msg) {
                        continue;
                    }
                    self.remove_member(*m, seg, index);
                    if !self.messages.contains_key(msg) {
                        return;
                    }
                    self.messages.add_member(*msg, *m);
                    let item = (seg, share);
                    self.add_item(item);
                    let old = self.queues.entry(m.0).or_default().insert(
                        m.1,
                        MemberEntry {
                            msg: *msg,
                            count: 0,
                        },
                    );
                    if let Some(old) = old {
                        self.kill(old, seg, index);
                    }
                    self.member_items.insert(
                        *m,
                        MemberItems {
                            enqueued: Some(item),
                        },
                    );
                }
            }
        }
    }

    /// Message `id` now lives in the record at `loc` (log index `index`)
    /// with `members`; a member that belonged to another message leaves it.
    fn create(
        &mut self,
        id: MessageId,
        index: u64,
        loc: Loc,
        msg: &MsgBody<'_>,
        members: impl Iterator<Item = (Member, u32)>,
    ) {
        // Records are at most 1 GiB (`record::fits`), so this fits a u32.
        let body_off = (HEADER_LEN + msg.body_offset) as u32;
        let mut members = members.peekable();
        if members.peek().is_none() {
            // Stored nowhere (a dead-letter with no target): dead at once.
            return;
        }
        if u32::try_from(loc.seg).is_err() || u32::try_from(loc.offset).is_err() {
            // Beyond the store's limits (`segment::MAX_SEG`, `MAX_FILE`): never written so.
            tracing::error!(
                seg = loc.seg,
                offset = loc.offset,
                "record beyond the store's limits"
            );
            return;
        }
        self.add_item((loc.seg, u64::from(loc.len)));
        // One member (the common case) needs no list.
        let mut first: Option<Member> = None;
        let mut list: Vec<Member> = Vec::new();
        for (m, count) in members {
            if first == Some(m) || list.contains(&m) {
                continue;
            }
            // A new member (past the queue's last, the common case) belongs to no message yet:
            // then one lookup of its queue.
            let q = self.queues.entry(m.0).or_default();
            let old = if q.above_all(m.1) {
                q.insert(m.1, MemberEntry { msg: id, count })
            } else {
                self.remove_member(m, loc.seg, index);
                self.queues
                    .entry(m.0)
                    .or_default()
                    .insert(m.1, MemberEntry { msg: id, count })
            };
            match first {
                None => first = Some(m),
                Some(f) => {
                    if list.is_empty() {
                        list.push(f);
                    }
                    list.push(m);
                }
            }
            if let Some(old) = old {
                self.kill(old, loc.seg, index);
            }
        }
        // Fits: checked above.
        let members = match &first {
            Some(f) if list.is_empty() => std::slice::from_ref(f),
            _ => list.as_slice(),
        };
        let _ = self.messages.insert(id, loc, body_off, members);
    }

    /// Remove a member's queue entry and kill the records it owns; does not
    /// touch the message.
    fn drop_member_entry(&mut self, m: Member, seg: SegId, index: u64) -> Option<MemberEntry> {
        let q = self.queues.get_mut(&m.0)?;
        let (e, counted) = q.remove(m.1)?;
        if q.is_empty() {
            self.queues.remove(&m.0);
        }
        if let Some(item) = counted {
            self.kill(item, seg, index);
        }
        // Few members have an `Enqueue` item or a park: skip the lookups while there are none.
        if !self.member_items.is_empty()
            && let Some(items) = self.member_items.remove(&m)
        {
            shrink_sparse(&mut self.member_items);
            if let Some(item) = items.enqueued {
                self.kill(item, seg, index);
            }
        }
        if !self.parks.is_empty()
            && let Some(p) = self.parks.remove(&m)
        {
            self.kill(p.item(), seg, index);
        }
        if let Some(msg_seg) = self.messages.get(&e.msg).map(|m| m.seg()) {
            self.depend(seg, msg_seg);
        }
        Some(e)
    }

    /// Remove a member; a message left without members dies.
    pub(crate) fn remove_member(&mut self, m: Member, seg: SegId, index: u64) {
        let Some(e) = self.drop_member_entry(m, seg, index) else {
            return;
        };
        if let Some(old) = self.messages.remove_member_or_message(e.msg, m) {
            self.kill((old.seg(), u64::from(old.loc().len)), seg, index);
        }
    }

    /// Drop messages that never got a member (end of recovery); `seg` and
    /// `index` stand for "now".
    pub(crate) fn drop_memberless(&mut self, seg: SegId, index: u64) {
        for id in self.messages.memberless() {
            if let Some((e, _)) = self.messages.remove(&id) {
                self.kill((e.seg(), u64::from(e.loc().len)), seg, index);
            }
        }
    }

    /// Segments that may be deleted now: older than `below` (the newest
    /// segment known to exist on disk, which is never deleted), no live
    /// item, killed by durable records only, all deps already deleted.
    pub(crate) fn deletable(&self, durable: u64, below: SegId) -> Vec<SegId> {
        self.segs
            .range(..below)
            .filter(|(_, s)| {
                s.live_items == 0
                    && s.killed_at <= durable
                    && s.deps.iter().all(|d| !self.segs.contains_key(d))
            })
            .map(|(id, _)| *id)
            .collect()
    }

    /// For each segment, the bytes of *other* segments that cannot be
    /// deleted while it exists: sealed segments with nothing live whose
    /// records killed or changed items in it (tombstones), passed down the
    /// dependency chain and split evenly where a segment waits for several.
    /// Compaction counts them as garbage the segment holds (§5).
    pub(crate) fn pinned_bytes(&self, active: SegId) -> HashMap<SegId, u64> {
        let mut pinned: HashMap<SegId, u64> = HashMap::new();
        // Deps are always older segments, so newest-first visits a segment
        // after everything that waits for it.
        for (id, s) in self.segs.iter().rev() {
            if *id == active || s.live_items > 0 {
                continue;
            }
            let present: Vec<SegId> = s
                .deps
                .iter()
                .copied()
                .filter(|d| self.segs.contains_key(d))
                .collect();
            if present.is_empty() {
                continue;
            }
            let weight = s.size + pinned.get(id).copied().unwrap_or(0);
            let share = weight / present.len() as u64;
            for d in present {
                *pinned.entry(d).or_default() += share;
            }
        }
        pinned
    }

    /// Forget a deleted segment.
    pub(crate) fn remove_segment(&mut self, seg: SegId) {
        self.segs.remove(&seg);
    }

    /// Whether live message `msg` has an item in `seg`: its own record, or
    /// the `Enqueue` or `DeliveryCount` record of one of its members.
    pub(crate) fn has_item_in(&self, msg: MessageId, seg: SegId) -> bool {
        let Some(e) = self.messages.get(&msg) else {
            return false;
        };
        e.seg() == seg
            || self.messages.members(&msg).any(|m| {
                self.member_items
                    .get(&m)
                    .and_then(|it| it.enqueued)
                    .is_some_and(|(s, _)| s == seg)
                    || self
                        .queues
                        .get(&m.0)
                        .and_then(|q| q.count_item(m.1))
                        .is_some_and(|(s, _)| s == seg)
            })
    }

    /// The message a live member belongs to.
    pub(crate) fn message_of(&self, m: Member) -> Option<MessageId> {
        self.queues.get(&m.0)?.get(m.1).map(|e| e.msg)
    }

    /// A message's members with their delivery counts.
    pub(crate) fn members_of(&self, msg: MessageId) -> Vec<(Member, u32)> {
        self.messages
            .members(&msg)
            .map(|m| {
                let count = self
                    .queues
                    .get(&m.0)
                    .and_then(|q| q.get(m.1))
                    .map_or(0, |e| e.count);
                (m, count)
            })
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal message body for index tests (also used by `index_settle`'s).
    pub(crate) const BODY: MsgBody<'static> = MsgBody {
        enqueue_ms: 0,
        expiry_ms: None,
        exchange: b"",
        routing_key: b"",
        properties: b"",
        body: b"x",
        body_offset: 0,
    };

    fn loc(seg: SegId, offset: u64) -> Loc {
        Loc {
            seg,
            offset,
            len: 100,
        }
    }

    fn index(segs: &[SegId]) -> Index {
        let mut ix = Index::default();
        for s in segs {
            ix.add_segment(*s, 1000);
        }
        ix
    }

    #[test]
    fn settling_one_of_two_members_pins_the_settle_to_the_message() {
        let mut ix = index(&[1, 2, 3]);
        let publish = Payload::Publish {
            members: vec![(1, 1), (2, 1)],
            msg: BODY,
        };
        ix.apply(1, loc(1, 16), &publish);
        ix.apply(
            2,
            loc(2, 16),
            &Payload::Settle {
                queue: 1,
                ids: vec![1],
            },
        );
        // Segment 2 holds nothing live, but its settle must outlive segment 1.
        assert_eq!(ix.deletable(2, 3), Vec::<SegId>::new());
        ix.apply(
            3,
            loc(3, 16),
            &Payload::Settle {
                queue: 2,
                ids: vec![1],
            },
        );
        assert_eq!(ix.deletable(3, 3), vec![1]);
        ix.remove_segment(1);
        assert_eq!(ix.deletable(3, 3), vec![2]);
    }

    #[test]
    fn nothing_is_deleted_before_the_killing_record_is_durable() {
        let mut ix = index(&[1, 2]);
        ix.apply(
            1,
            loc(1, 16),
            &Payload::Publish {
                members: vec![(1, 1)],
                msg: BODY,
            },
        );
        ix.apply(
            2,
            loc(2, 16),
            &Payload::Settle {
                queue: 1,
                ids: vec![1],
            },
        );
        assert!(ix.deletable(1, 2).is_empty());
        assert_eq!(ix.deletable(2, 2), vec![1]);
    }

    #[test]
    fn a_delivery_count_record_lives_while_it_holds_a_live_members_count() {
        let mut ix = index(&[1, 2, 3, 4]);
        ix.apply(
            1,
            loc(1, 16),
            &Payload::Publish {
                members: vec![(1, 1), (1, 2)],
                msg: BODY,
            },
        );
        let counts = |ids: &[u64]| Payload::DeliveryCounts {
            queue: 1,
            counts: ids.iter().map(|id| (*id, 1)).collect(),
        };
        ix.apply(2, loc(2, 32), &counts(&[1, 2]));
        assert_eq!(ix.segs.get(&2).map(|s| s.live_items), Some(2));
        assert!(ix.has_item_in(1, 2));
        // A newer count for one member kills its share in segment 2; settling the other kills
        // the rest, and segment 2 may go (its counts are replaced or gone).
        ix.apply(3, loc(3, 16), &counts(&[1]));
        assert_eq!(ix.segs.get(&2).map(|s| s.live_items), Some(1));
        ix.apply(
            4,
            loc(4, 16),
            &Payload::Settle {
                queue: 1,
                ids: vec![2],
            },
        );
        assert_eq!(ix.segs.get(&2).map(|s| s.live_items), Some(0));
        assert!(!ix.has_item_in(1, 2) && ix.has_item_in(1, 3));
        assert_eq!(ix.deletable(4, 4), vec![2]);
        assert_eq!(ix.members_of(1), vec![((1, 1), 1)]);
        // Settling the last member kills its count record's item with the message.
        ix.apply(
            5,
            loc(4, 16),
            &Payload::Settle {
                queue: 1,
                ids: vec![1],
            },
        );
        assert_eq!(ix.segs.get(&3).map(|s| s.live_items), Some(0));
        // Segment 3 killed an item in segment 2: it goes once 2 is gone.
        assert_eq!(ix.deletable(5, 4), vec![1, 2]);
        ix.remove_segment(1);
        ix.remove_segment(2);
        assert_eq!(ix.deletable(5, 4), vec![3]);
    }

    #[test]
    fn carry_moves_the_message_and_keeps_counts() {
        let mut ix = index(&[1, 2, 3]);
        ix.apply(
            1,
            loc(1, 16),
            &Payload::Publish {
                members: vec![(1, 1), (2, 1)],
                msg: BODY,
            },
        );
        ix.apply(
            2,
            loc(2, 16),
            &Payload::DeliveryCount {
                member: (1, 1),
                count: 4,
            },
        );
        let members = ix.members_of(1);
        assert_eq!(members, vec![((1, 1), 4), ((2, 1), 0)]);
        ix.apply(
            3,
            loc(3, 16),
            &Payload::Carry {
                msg_id: 1,
                members,
                msg: BODY,
            },
        );
        assert_eq!(ix.messages.get(&1).map(|m| m.seg()), Some(3));
        assert_eq!(ix.members_of(1), vec![((1, 1), 4), ((2, 1), 0)]);
        assert_eq!(ix.deletable(3, 4), vec![1, 2]);
    }

    #[test]
    fn operations_on_missing_state_are_no_ops() {
        let mut ix = index(&[1]);
        ix.apply(
            1,
            loc(1, 16),
            &Payload::Settle {
                queue: 1,
                ids: vec![9],
            },
        );
        ix.apply(
            2,
            loc(1, 200),
            &Payload::Enqueue {
                msg: 77,
                members: vec![(1, 1)],
            },
        );
        ix.apply(3, loc(1, 300), &Payload::Purge { queue: 5 });
        assert!(ix.messages.is_empty() && ix.queues.is_empty());
    }

    /// One step of the proptest below: a publish at `members` in segment `seg` (offset past
    /// `u32` when `far`), or a settle of `ids` of queue `queue`.
    #[derive(Debug, Clone)]
    enum Step {
        Publish {
            seg: SegId,
            far: bool,
            members: Vec<Member>,
        },
        Settle {
            queue: QueueId,
            ids: Vec<u64>,
        },
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        let member = (1u64..4, 0u64..12);
        prop_oneof![
            3 => (1u64..4, proptest::bool::weighted(0.05), proptest::collection::vec(member, 0..4))
                .prop_map(|(seg, far, members)| Step::Publish { seg, far, members }),
            1 => (1u64..4, proptest::collection::vec(0u64..12, 0..5))
                .prop_map(|(queue, ids)| Step::Settle { queue, ids }),
        ]
    }

    /// What a test can see of an index: segment accounting, messages with their members and
    /// counts, and each member's message.
    fn observe(ix: &Index) -> String {
        let msgs: Vec<_> = ix
            .messages
            .iter()
            .map(|(id, e)| (id, e.loc(), e.body(id), ix.members_of(id)))
            .collect();
        let members: Vec<_> = (1u64..4)
            .flat_map(|q| (0u64..12).map(move |i| (q, i)))
            .map(|m| (m, ix.message_of(m)))
            .collect();
        format!("{:?}\n{msgs:?}\n{members:?}", ix.segs)
    }

    proptest::proptest! {
        /// The live store's publish (`append_publish`: one segment lookup, one member without
        /// a list) leaves the index exactly as growing the segment and applying the publish
        /// record (`grow` + `apply_publish`, what recovery does) would: for publishes to zero,
        /// one or several members, members that already belonged to another message, records
        /// beyond the store's limits, and settles between them.
        #[test]
        fn append_publish_is_grow_and_apply_publish(steps in proptest::collection::vec(step(), 1..40)) {
            let mut live = index(&[1, 2, 3]);
            let mut applied = index(&[1, 2, 3]);
            for (n, s) in steps.iter().enumerate() {
                let index = n as u64 + 1;
                let body = MsgBody { body_offset: 7, ..BODY };
                match s {
                    Step::Publish { seg, far, members } => {
                        let offset = if *far { u64::from(u32::MAX) + 16 } else { 16 * index };
                        let at = Loc { seg: *seg, offset, len: 40 + index as u32 };
                        live.append_publish(index, at, &body, members);
                        applied.grow(at.seg, u64::from(at.len));
                        applied.apply_publish(index, at, &body, members);
                    }
                    Step::Settle { queue, ids } => {
                        let p = Payload::Settle { queue: *queue, ids: ids.clone() };
                        live.apply(index, loc(1, 16 * index), &p);
                        applied.apply(index, loc(1, 16 * index), &p);
                    }
                }
                proptest::prop_assert_eq!(observe(&live), observe(&applied), "after step {}", n);
            }
        }
    }
}
