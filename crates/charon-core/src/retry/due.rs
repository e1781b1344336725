//! [`DueIndex`]: the parked messages of one queue in due order, as compact 32-byte records
//! ([`Parked`]: due time, id, the message pointer, the attempt) — the same size as a ready
//! message's slot in the queue's ring, so parking a message costs no more than queuing it.
//!
//! Records live in a few *lanes* (rings sorted by `(due, id)`): a record goes to the back of
//! the lane whose last record is the latest one not after it. Parked messages of one attempt
//! with one delay arrive in due order (now + the same delay), so the usual cases — a fixed
//! delay, a delay list, backoff without jitter — fill one lane per distinct delay and cost
//! O(1) to park and to release. A record that fits no lane when [`MAX_LANES`] are in use
//! (jitter, a clock step back, recovery in store order) goes to a binary heap of the same
//! records: O(log n), same size. The earliest record is the smallest of the lane fronts and
//! the heap's top.
//!
//! The B-tree map this replaces cost ~100 bytes per parked message (nodes about half full when
//! keys arrive in order, 48-byte entries) against 32 for a queued one (docs/retries.md).

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::sync::Arc;

use super::lane::Lane;
use crate::message::Message;
use crate::queue::MsgId;

/// Most lanes; beyond, records go to the heap.
pub(super) const MAX_LANES: usize = 16;

/// The heap gives back capacity once it is less than a quarter full (and larger than this
/// many records; lanes give blocks back as they empty, `retry::lane`).
const SHRINK_ABOVE: usize = 1024;

/// A parked message (32 bytes).
#[derive(Debug, Clone)]
pub(super) struct Parked {
    /// When it comes back (µs, wall clock).
    pub(super) due: u64,
    /// Its id in the queue while parked.
    pub(super) id: MsgId,
    /// As it was delivered: `x-retry-count` is set when it comes back.
    pub(super) message: Arc<Message>,
    /// Its retry attempt (the `x-retry-count` it comes back with).
    pub(super) attempt: u32,
}

impl Parked {
    fn key(&self) -> (u64, MsgId) {
        (self.due, self.id)
    }
}

/// Heap order: by `(due, id)`.
#[derive(Debug)]
struct ByDue(Parked);

impl PartialEq for ByDue {
    fn eq(&self, other: &Self) -> bool {
        self.0.key() == other.0.key()
    }
}
impl Eq for ByDue {}
impl PartialOrd for ByDue {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ByDue {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.key().cmp(&other.0.key())
    }
}

/// Parked messages in `(due, id)` order.
#[derive(Debug, Default)]
pub(super) struct DueIndex {
    lanes: Vec<Lane<Parked>>,
    heap: BinaryHeap<Reverse<ByDue>>,
    len: usize,
}

/// Where the earliest record is.
#[derive(Clone, Copy)]
enum First {
    Lane(usize),
    Heap,
}

impl DueIndex {
    /// Number of parked messages.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Parks `p`.
    pub(super) fn insert(&mut self, p: Parked) {
        self.len += 1;
        let key = p.key();
        let best = self
            .lanes
            .iter()
            .enumerate()
            .filter_map(|(i, l)| l.back().map(|b| (b.key(), i)))
            .filter(|(k, _)| *k <= key)
            .max();
        if let Some(lane) = best.and_then(|(_, i)| self.lanes.get_mut(i)) {
            lane.push_back(p);
        } else if self.lanes.len() < MAX_LANES {
            self.lanes.push(Lane::with(p));
        } else {
            self.heap.push(Reverse(ByDue(p)));
        }
    }

    fn first(&self) -> Option<((u64, MsgId), First)> {
        let lanes = self
            .lanes
            .iter()
            .enumerate()
            .filter_map(|(i, l)| l.front().map(|f| (f.key(), First::Lane(i))));
        let heap = self.heap.peek().map(|Reverse(p)| (p.0.key(), First::Heap));
        lanes.chain(heap).min_by_key(|(k, _)| *k)
    }

    /// The earliest `(due, id)`.
    pub(super) fn first_key(&self) -> Option<(u64, MsgId)> {
        self.first().map(|(k, _)| k)
    }

    /// Takes the earliest record if it is due at `now` (µs).
    pub(super) fn pop_due(&mut self, now: u64) -> Option<Parked> {
        let ((due, _), at) = self.first()?;
        if due > now {
            return None;
        }
        let p = match at {
            First::Heap => {
                let p = self.heap.pop().map(|Reverse(p)| p.0);
                shrink(&mut self.heap);
                p
            }
            First::Lane(i) => {
                let lane = self.lanes.get_mut(i)?;
                let p = lane.pop_front();
                if lane.is_empty() {
                    self.lanes.swap_remove(i);
                }
                p
            }
        };
        if p.is_some() {
            self.len -= 1;
        }
        p
    }

    /// Every record, in no particular order (the index is left empty).
    pub(super) fn drain(&mut self) -> impl Iterator<Item = Parked> + use<> {
        self.len = 0;
        let lanes = std::mem::take(&mut self.lanes);
        let heap = std::mem::take(&mut self.heap);
        lanes
            .into_iter()
            .flatten()
            .chain(heap.into_iter().map(|Reverse(p)| p.0))
    }
}

fn shrink(heap: &mut BinaryHeap<Reverse<ByDue>>) {
    if heap.capacity() > SHRINK_ABOVE && heap.len() * 4 < heap.capacity() {
        heap.shrink_to(heap.len() * 2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(due: u64, id: MsgId, m: &Arc<Message>) -> Parked {
        Parked {
            due,
            id,
            message: m.clone(),
            attempt: 1,
        }
    }

    #[test]
    fn a_parked_record_is_as_small_as_a_ready_slot() {
        // A ready message costs a 32-byte slot in the queue's ring: parking must not cost more
        // (issue 10: ≤ 64 bytes beyond a queued message, docs/retries.md).
        assert_eq!(std::mem::size_of::<Parked>(), 32);
        assert_eq!(std::mem::size_of::<Reverse<ByDue>>(), 32);
    }

    #[test]
    fn records_come_out_in_due_then_id_order_from_lanes_and_heap() {
        let m = Arc::new(Message::new(
            "",
            "q",
            charon_protocol::RawProperties::empty(),
            bytes::Bytes::new(),
        ));
        let mut d = DueIndex::default();
        assert!(d.pop_due(u64::MAX).is_none());
        d.insert(rec(5, 9, &m));
        assert!(d.pop_due(4).is_none());
        assert_eq!(d.pop_due(5).map(|p| p.key()), Some((5, 9)));
        let mut want = Vec::new();
        // Three delays interleaved (three lanes), then pseudo-random due times (more lanes,
        // then the heap), with ties broken by id.
        let mut x = 7u64;
        for id in 0..3000u64 {
            let due = if id < 1500 {
                id * 10 + [0, 5000, 20000][(id % 3) as usize]
            } else {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 40) % 40_000
            };
            d.insert(rec(due, id, &m));
            want.push((due, id));
        }
        assert_eq!(d.lanes.len(), MAX_LANES);
        assert!(!d.heap.is_empty());
        want.sort_unstable();
        assert_eq!(d.first_key(), want.first().copied());
        let mut got = Vec::new();
        while let Some(p) = d.pop_due(u64::MAX) {
            got.push(p.key());
        }
        assert_eq!(got, want);
        assert_eq!(d.len(), 0);
        assert!(d.lanes.is_empty());
    }
}
