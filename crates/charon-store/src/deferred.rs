//! The *deferred region* of the pending batch (issue 13 b; `docs/storage-format.md` §3.1):
//! a publish appended with [`crate::Store::publish_nowait`] is encoded into the batch at once
//! (its bytes copied once, as before) but **not applied to the in-memory index**, and neither is
//! anything appended after it, until the batch is *formed* — by the writer when it takes the
//! batch, or by an append that needs the index current first (`State::form_deferred`). A
//! `Settle` appended meanwhile that removes the last member of such a publish **cancels** it:
//! the settle drops that id, and at forming the publish's record is cut out of the batch (the
//! bytes after it move down), so the message costs no index entry, no settle, no bytes on disk
//! and no checksum. Its log index stays reserved and is never written (a gap, which the format
//! allows: indexes only need to increase, §1); the batch's last index covers it, so the
//! publisher's confirm (a wait on the durable index) is released with the batch it belonged to.
//!
//! This module owns the bookkeeping only: which records of the last chunk are deferred, what
//! forming applies for each, and which queue members belong to a deferred publish.

use crate::record::Kind;
use crate::types::{Member, QueueId};

/// One deferred record: where it lies in the batch's last chunk, its reserved log index, and
/// what forming applies to the index.
#[derive(Debug)]
pub(crate) struct Item {
    /// Offset of the record in the last chunk's bytes.
    pub(crate) start: usize,
    /// Whole record length.
    pub(crate) len: u32,
    /// Its log index (reserved at append).
    pub(crate) index: u64,
    pub(crate) what: What,
}

/// What forming does with a deferred record.
#[derive(Debug)]
pub(crate) enum What {
    /// A publish: its members are `members[first..first + n]` of [`Deferred::members`].
    Publish {
        first: u32,
        n: u32,
        /// The body's offset in the payload (`MsgBody::body_offset`).
        body_offset: u32,
        /// Members not settled yet; 0: cancelled.
        left: u32,
    },
    /// A settle, applied from its ids (no parse).
    Settle { queue: QueueId, ids: Vec<u64> },
    /// Delivery counts, applied from the command.
    Counts {
        queue: QueueId,
        counts: Vec<(u64, u32)>,
    },
    /// Anything else deferrable (a definition, one delivery count): parsed back at forming.
    Decode(Kind),
}

impl Item {
    /// Whether this is a publish every member of which was settled before forming.
    pub(crate) fn cancelled(&self) -> bool {
        matches!(self.what, What::Publish { left: 0, .. })
    }
}

/// A queue's members of deferred publishes: (queue-local id, item, settled), and whether they
/// are in id order (they are when one publisher feeds the queue; sorted once otherwise).
#[derive(Debug, Default)]
struct QueueRefs {
    entries: Vec<(u64, u32, bool)>,
    sorted: bool,
}

/// The deferred region of the pending batch.
#[derive(Debug, Default)]
pub(crate) struct Deferred {
    /// In log-index order (the order of their bytes in the last chunk).
    pub(crate) items: Vec<Item>,
    /// Members of the deferred publishes.
    pub(crate) members: Vec<Member>,
    queues: foldhash::HashMap<QueueId, QueueRefs>,
    /// Publishes cancelled since open (stats).
    pub(crate) cancelled: u64,
}

/// Above this many queues the lookup's map is dropped at forming rather than kept for reuse.
const KEEP_QUEUES: usize = 64;

impl Deferred {
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// A publish at `members` was appended (record at `start`, `len` bytes, log `index`).
    pub(crate) fn add_publish(
        &mut self,
        start: usize,
        len: u32,
        index: u64,
        members: &[Member],
        body_offset: u32,
    ) {
        let item = self.items.len() as u32;
        let first = self.members.len() as u32;
        self.members.extend_from_slice(members);
        for &(queue, qid) in members {
            let q = self.queues.entry(queue).or_default();
            if q.entries.is_empty() {
                q.sorted = true;
            } else if q.entries.last().is_some_and(|l| l.0 >= qid) {
                q.sorted = false;
            }
            q.entries.push((qid, item, false));
        }
        self.items.push(Item {
            start,
            len,
            index,
            what: What::Publish {
                first,
                n: members.len() as u32,
                body_offset,
                left: members.len() as u32,
            },
        });
    }

    /// Another deferrable record was appended after the first deferred publish.
    pub(crate) fn add(&mut self, start: usize, len: u32, index: u64, what: What) {
        self.items.push(Item {
            start,
            len,
            index,
            what,
        });
    }

    /// A settle of `ids` of `queue` is being appended: each id that is the last unsettled member
    /// of a deferred publish cancels that publish and leaves `ids` (nothing needs removing from
    /// the log: its publish will not be written). Other ids stay (a member of a deferred publish
    /// that keeps other members is settled by the record, after the publish, as before).
    pub(crate) fn settle(&mut self, queue: QueueId, ids: &mut Vec<u64>) {
        if self.items.is_empty() {
            return;
        }
        let Some(q) = self.queues.get_mut(&queue) else {
            return;
        };
        if q.entries.is_empty() {
            return;
        }
        if !q.sorted {
            q.entries.sort_unstable_by_key(|e| e.0);
            q.sorted = true;
        }
        let items = &mut self.items;
        let cancelled = &mut self.cancelled;
        ids.retain(|id| {
            let Ok(at) = q.entries.binary_search_by_key(id, |e| e.0) else {
                return true;
            };
            let Some(entry) = q.entries.get_mut(at) else {
                return true;
            };
            if entry.2 {
                return true;
            }
            let Some(Item {
                what: What::Publish { left, .. },
                ..
            }) = items.get_mut(entry.1 as usize)
            else {
                return true;
            };
            entry.2 = true;
            *left = left.saturating_sub(1);
            if *left == 0 {
                *cancelled += 1;
                return false;
            }
            true
        });
    }

    /// The message id (log index) of member `member` if a deferred publish, not cancelled, put
    /// it there.
    pub(crate) fn message_of(&self, member: Member) -> Option<u64> {
        let q = self.queues.get(&member.0)?;
        let hit = if q.sorted {
            q.entries
                .binary_search_by_key(&member.1, |e| e.0)
                .ok()
                .and_then(|at| q.entries.get(at))
        } else {
            q.entries.iter().find(|e| e.0 == member.1)
        };
        let (_, item, settled) = hit?;
        let item = self.items.get(*item as usize)?;
        (!settled && !item.cancelled()).then_some(item.index)
    }

    /// Forgets the member lookup (after forming, or when the batch is dropped); keeps the
    /// allocations of a few queues for the next batch.
    pub(crate) fn reset(&mut self) {
        self.items.clear();
        self.members.clear();
        if self.queues.len() > KEEP_QUEUES {
            self.queues.clear();
        } else {
            for q in self.queues.values_mut() {
                q.entries.clear();
                q.sorted = true;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn publish(d: &mut Deferred, index: u64, members: &[Member]) {
        let start = d.items.len() * 100;
        d.add_publish(start, 100, index, members, 50);
    }

    #[test]
    fn a_settle_cancels_a_publish_once_every_member_is_settled() {
        let mut d = Deferred::default();
        publish(&mut d, 1, &[(7, 1)]);
        publish(&mut d, 2, &[(7, 2), (8, 2)]);
        publish(&mut d, 3, &[(7, 3)]);
        // 1: its only member: cancelled, the id leaves the settle; 9: not deferred, kept.
        let mut ids = vec![1, 9];
        d.settle(7, &mut ids);
        assert_eq!(ids, vec![9]);
        assert!(d.items[0].cancelled());
        assert_eq!(d.message_of((7, 1)), None);
        // 2 keeps a member in queue 8: the id stays (the record settles it after the publish).
        let mut ids = vec![2];
        d.settle(7, &mut ids);
        assert_eq!(ids, vec![2]);
        assert!(!d.items[1].cancelled());
        assert_eq!(d.message_of((8, 2)), Some(2));
        // Settled twice: the second settle must not count it again.
        let mut ids = vec![2];
        d.settle(7, &mut ids);
        assert_eq!(ids, vec![2]);
        assert!(!d.items[1].cancelled());
        // Its last member: cancelled.
        let mut ids = vec![2];
        d.settle(8, &mut ids);
        assert!(ids.is_empty());
        assert!(d.items[1].cancelled());
        assert_eq!(d.message_of((7, 3)), Some(3));
        assert_eq!(d.cancelled, 2);
        d.reset();
        assert!(d.is_empty());
        assert_eq!(d.message_of((7, 3)), None);
    }

    #[test]
    fn members_out_of_order_are_found() {
        let mut d = Deferred::default();
        publish(&mut d, 1, &[(1, 5)]);
        publish(&mut d, 2, &[(1, 3)]);
        publish(&mut d, 3, &[(1, 4)]);
        assert_eq!(d.message_of((1, 3)), Some(2));
        let mut ids = vec![4, 5, 6];
        d.settle(1, &mut ids);
        assert_eq!(ids, vec![6]);
        assert!(d.items[0].cancelled() && d.items[2].cancelled());
        assert!(!d.items[1].cancelled());
    }
}
