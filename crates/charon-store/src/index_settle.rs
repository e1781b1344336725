//! A `Settle` record applied to the index in one pass (the hot record of every consuming queue):
//! the queue's members looked up once per record, not once per id; each message's entry read
//! once (it is removed, or, when other members keep it, read for the dependency); the kills of
//! consecutive ids whose records lie in one segment accounted to that segment once. Exactly the
//! state [`Index::remove_member`] per id gives (unit test below, and the store's model proptest
//! with crashes applies every settle through here); members with an `Enqueue` item or a park
//! take that general path.

use std::collections::BTreeMap;

use crate::index::{Index, SegStats};
use crate::segment::SegId;
use crate::types::QueueId;

/// Kills of items in one segment by one record, not yet accounted.
#[derive(Debug, Default)]
struct KillRun {
    seg: Option<SegId>,
    items: u64,
    bytes: u64,
}

impl Index {
    /// Applies `Settle { queue, ids }`, found in segment `seg` at log index `index`.
    pub(crate) fn settle(&mut self, queue: QueueId, ids: &[u64], seg: SegId, index: u64) {
        if !self.member_items.is_empty() || !self.parks.is_empty() {
            for id in ids {
                self.remove_member((queue, *id), seg, index);
            }
            return;
        }
        let Index {
            queues,
            messages,
            segs,
            ..
        } = self;
        let Some(q) = queues.get_mut(&queue) else {
            return;
        };
        let mut run = KillRun::default();
        // The segment of the last message other members keep alive (the settle depends on it).
        let mut kept_in: Option<SegId> = None;
        for &id in ids {
            // Tombstones and memory are trimmed once after the record's ids (below).
            let Some((e, counted)) = q.take(id) else {
                continue;
            };
            if let Some(item) = counted {
                run.add(segs, item, seg, index);
            }
            match messages.remove_member_or_message(e.msg, (queue, id)) {
                Some(old) => run.add(segs, (old.seg(), u64::from(old.loc().len)), seg, index),
                None => {
                    if let Some(ms) = messages.get(&e.msg).map(|m| m.seg())
                        && kept_in != Some(ms)
                    {
                        kept_in = Some(ms);
                        depend(segs, seg, ms);
                    }
                }
            }
        }
        q.trim();
        if q.is_empty() {
            queues.remove(&queue);
        }
        run.flush(segs, seg, index);
    }
}

impl KillRun {
    /// One more killed item (`(segment, bytes)`); a run of another segment is accounted first.
    fn add(
        &mut self,
        segs: &mut BTreeMap<SegId, SegStats>,
        (s, bytes): (SegId, u64),
        killer: SegId,
        index: u64,
    ) {
        if self.seg != Some(s) {
            self.flush(segs, killer, index);
            self.seg = Some(s);
        }
        self.items += 1;
        self.bytes += bytes;
    }

    /// Accounts the run's kills to its segment, as that many `Index::kill`s would.
    fn flush(&mut self, segs: &mut BTreeMap<SegId, SegStats>, killer: SegId, index: u64) {
        let Some(s) = self.seg.take() else {
            return;
        };
        if let Some(st) = segs.get_mut(&s) {
            st.live_items = st.live_items.saturating_sub(self.items);
            st.live_bytes = st.live_bytes.saturating_sub(self.bytes);
            st.killed_at = st.killed_at.max(index);
        }
        depend(segs, killer, s);
        self.items = 0;
        self.bytes = 0;
    }
}

/// As `Index::depend`: a record in `killer` changed an item in `seg`.
fn depend(segs: &mut BTreeMap<SegId, SegStats>, killer: SegId, seg: SegId) {
    if seg != killer
        && let Some(k) = segs.get_mut(&killer)
    {
        k.deps.insert(seg);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use crate::index::tests::BODY;
    use crate::index::{Index, Loc};
    use crate::record::Payload;

    #[derive(Debug, Clone)]
    enum Op {
        /// A message at the next id of each queue in the mask (bit 0: queue 1, bit 1: queue 2).
        Publish(u8),
        /// Delivery counts for these ids of queue 1 or 2.
        Counts(u64, Vec<u64>),
        Settle(u64, Vec<u64>),
        /// The active segment rolls.
        Roll,
    }

    fn op() -> impl Strategy<Value = Op> {
        let ids = || proptest::collection::vec(1u64..40, 0..8);
        prop_oneof![
            4 => (1u8..4).prop_map(Op::Publish),
            1 => (1u64..3, ids()).prop_map(|(q, v)| Op::Counts(q, v)),
            3 => (1u64..3, ids()).prop_map(|(q, v)| Op::Settle(q, v)),
            1 => Just(Op::Roll),
        ]
    }

    /// What the index holds, in a form two indexes can be compared by.
    fn snapshot(ix: &Index) -> String {
        let messages: Vec<_> = ix
            .messages
            .iter()
            .map(|(id, e)| (id, e.loc(), ix.members_of(id)))
            .collect();
        let mut queues: Vec<_> = ix
            .queues
            .iter()
            .map(|(q, m)| (*q, m.iter().collect::<Vec<_>>()))
            .collect();
        queues.sort_by_key(|(q, _)| *q);
        format!("{:?}\n{messages:?}\n{queues:?}", ix.segs)
    }

    proptest! {
        /// The one-pass settle leaves exactly the state a general removal per id leaves.
        #[test]
        fn one_pass_settle_matches_removal_per_id(ops in proptest::collection::vec(op(), 1..60)) {
            let mut fast = Index::default();
            let mut general = Index::default();
            let mut seg = 1;
            fast.add_segment(seg, 0);
            general.add_segment(seg, 0);
            let mut next = [1u64, 1u64];
            for (i, op) in ops.into_iter().enumerate() {
                let index = i as u64 + 1;
                let loc = Loc { seg, offset: 16 + index * 10, len: 40 + (index % 7) as u32 };
                match op {
                    Op::Publish(mask) => {
                        let mut members = Vec::new();
                        for (q, n) in next.iter_mut().enumerate() {
                            if mask & (1 << q) != 0 {
                                members.push((q as u64 + 1, *n));
                                *n += 1;
                            }
                        }
                        let p = Payload::Publish { members, msg: BODY };
                        fast.apply(index, loc, &p);
                        general.apply(index, loc, &p);
                    }
                    Op::Counts(queue, ids) => {
                        let p = Payload::DeliveryCounts {
                            queue,
                            counts: ids.iter().map(|id| (*id, 1)).collect(),
                        };
                        fast.apply(index, loc, &p);
                        general.apply(index, loc, &p);
                    }
                    Op::Settle(queue, ids) => {
                        fast.apply(index, loc, &Payload::Settle { queue, ids: ids.clone() });
                        for id in ids {
                            general.remove_member((queue, id), seg, index);
                        }
                    }
                    Op::Roll => {
                        seg += 1;
                        fast.add_segment(seg, 0);
                        general.add_segment(seg, 0);
                    }
                }
                prop_assert_eq!(snapshot(&fast), snapshot(&general));
                // The settle's one trim after its ids leaves no tombstone at a queue's ends.
                prop_assert!(fast.queues.values().all(|q| q.trimmed()));
            }
        }
    }
}
