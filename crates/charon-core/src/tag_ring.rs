//! Unacked deliveries by an increasing key ([`TagRing`]): a ring indexed by key for the
//! recent ones, a `BTreeMap` for stragglers. Used for a channel's delivery tags
//! (charon-server) and a queue's unacked message ids ([`crate::queue::QueueState`]).
//!
//! Keys are handed out (mostly) in increasing order and are mostly settled near the front (in
//! order, or a few out of order), so the ring makes a delivery a `push_back` and a settle an
//! indexed `take` (with the settled slots at the front popped), where a `BTreeMap` costs a
//! node search and rebalancing each way (~350 + ~160 instructions a message in scenario a) and
//! a hash map a hash, a probe and now and then a rehash. A key below the ring's base (a
//! requeued message delivered again) goes to the map.
//!
//! The ring must not grow with the span of tags: a delivery that stays unacked for long while
//! thousands after it are settled would otherwise keep every slot after it. So the ring is
//! kept at most `2 × live + SLACK` slots long: when it is longer, its front entries move to
//! `old` (a map of the tags below the ring's base) until it is not. A large gap between tags
//! (deliveries without acks in between, e.g. a no-ack consumer on the same channel) moves the
//! ring's entries to `old` and restarts the ring at the new tag. Memory is thus bounded by the
//! live entries, whatever the tags.

use std::collections::{BTreeMap, VecDeque};

/// Empty slots allowed beyond twice the live entries in the ring.
const SLACK: usize = 64;

/// Slots of room a ring keeps however few entries it holds.
const KEEP: usize = 1024;

/// Entries by increasing tag.
#[derive(Debug, Clone)]
pub struct TagRing<T> {
    /// Tag of `ring[0]`.
    base: u64,
    /// Slot `i` holds tag `base + i`; the front slot is never empty.
    ring: VecDeque<Option<T>>,
    /// Entries in `ring`.
    in_ring: usize,
    /// Entries with tags below `base`.
    old: BTreeMap<u64, T>,
}

impl<T> Default for TagRing<T> {
    fn default() -> Self {
        Self {
            base: 0,
            ring: VecDeque::new(),
            in_ring: 0,
            old: BTreeMap::new(),
        }
    }
}

impl<T> TagRing<T> {
    /// How many entries.
    pub fn len(&self) -> usize {
        self.in_ring + self.old.len()
    }

    /// No entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds `value` at `tag`, normally above every tag already held (a tag held already is
    /// replaced).
    pub fn insert(&mut self, tag: u64, value: T) {
        if self.in_ring == 0 {
            if self.old.last_key_value().is_some_and(|(&t, _)| t >= tag) {
                // Not above the others (not how tags are handed out; kept correct anyway).
                self.old.insert(tag, value);
                return;
            }
            self.ring.clear();
            self.base = tag;
        }
        let Some(at) = tag.checked_sub(self.base) else {
            self.old.insert(tag, value);
            return;
        };
        let end = self.ring.len() as u64;
        if at < end {
            // Not above the others (not how tags are handed out; kept correct anyway).
            if let Some(slot) = usize::try_from(at).ok().and_then(|i| self.ring.get_mut(i)) {
                if slot.is_none() {
                    self.in_ring += 1;
                }
                *slot = Some(value);
            }
            return;
        }
        let gap = at - end;
        if gap > SLACK as u64 {
            self.evict_all();
            self.base = tag;
        } else {
            for _ in 0..gap {
                self.ring.push_back(None);
            }
        }
        self.ring.push_back(Some(value));
        self.in_ring += 1;
        // Pushing at the back leaves the front as it was: only the length bound can need work.
        if self.ring.len() > 2 * self.in_ring + SLACK {
            self.shrink();
        }
    }

    /// Takes the entry at `tag`.
    pub fn remove(&mut self, tag: u64) -> Option<T> {
        let Some(at) = tag.checked_sub(self.base) else {
            return self.old.remove(&tag);
        };
        let slot = usize::try_from(at)
            .ok()
            .and_then(|i| self.ring.get_mut(i))?;
        let value = slot.take()?;
        self.in_ring -= 1;
        // Only a settled front slot can leave empty slots at the front.
        if at == 0 {
            self.pop_empty_front();
        }
        if self.ring.len() > 2 * self.in_ring + SLACK {
            self.shrink();
        }
        Some(value)
    }

    /// Takes the entries at `tags` (in any order; a multiple ack gives a run), each into `f`
    /// with its tag; tags without an entry are skipped. The entries left are exactly those
    /// [`TagRing::remove`] per tag leaves, but the front's empty slots are popped and the length
    /// bound restored once after the run, not once a tag (a run of 100 settles pays them once).
    pub fn remove_each(&mut self, tags: &[u64], mut f: impl FnMut(u64, T)) {
        for &tag in tags {
            let value = match tag.checked_sub(self.base) {
                None => self.old.remove(&tag),
                Some(at) => usize::try_from(at)
                    .ok()
                    .and_then(|i| self.ring.get_mut(i))
                    .and_then(Option::take)
                    .inspect(|_| self.in_ring -= 1),
            };
            if let Some(value) = value {
                f(tag, value);
            }
        }
        self.pop_empty_front();
        if self.ring.len() > 2 * self.in_ring + SLACK {
            self.shrink();
        }
    }

    /// Whether an entry is at `tag`.
    pub fn contains(&self, tag: u64) -> bool {
        self.get(tag).is_some()
    }

    /// The entry at `tag`.
    pub fn get(&self, tag: u64) -> Option<&T> {
        match tag.checked_sub(self.base) {
            None => self.old.get(&tag),
            Some(at) => usize::try_from(at)
                .ok()
                .and_then(|i| self.ring.get(i))
                .and_then(Option::as_ref),
        }
    }

    /// The entry at `tag`, to change it.
    pub fn get_mut(&mut self, tag: u64) -> Option<&mut T> {
        match tag.checked_sub(self.base) {
            None => self.old.get_mut(&tag),
            Some(at) => usize::try_from(at)
                .ok()
                .and_then(|i| self.ring.get_mut(i))
                .and_then(Option::as_mut),
        }
    }

    /// The entry with the lowest tag.
    pub fn first(&self) -> Option<&T> {
        match self.old.first_key_value() {
            Some((_, v)) => Some(v),
            None => self.ring.front().and_then(Option::as_ref),
        }
    }

    /// An upper bound on how many entries have a tag at or below `tag` (exact when the ring
    /// has no gaps and nothing is below its base): room to reserve before
    /// [`TagRing::take_through`].
    pub fn bound_through(&self, tag: u64) -> usize {
        let in_ring = if self.in_ring == 0 || tag < self.base {
            0
        } else {
            usize::try_from(tag - self.base)
                .map_or(self.in_ring, |d| d.saturating_add(1).min(self.in_ring))
        };
        in_ring + self.old.len()
    }

    /// Takes every entry with a tag at or below `tag`, in tag order, into `f`; how many.
    pub fn take_through(&mut self, tag: u64, mut f: impl FnMut(T)) -> usize {
        let mut n = 0;
        if self.old.first_key_value().is_some_and(|(&t, _)| t <= tag) {
            let taken = match tag.checked_add(1) {
                Some(above) => {
                    let rest = self.old.split_off(&above);
                    std::mem::replace(&mut self.old, rest)
                }
                None => std::mem::take(&mut self.old),
            };
            n += taken.len();
            taken.into_values().for_each(&mut f);
        }
        while self.in_ring > 0 && self.base <= tag {
            if let Some(value) = self.ring.pop_front().flatten() {
                self.in_ring -= 1;
                n += 1;
                f(value);
            }
            self.base += 1;
        }
        self.pop_empty_front();
        n
    }

    /// Takes every entry, in tag order, into `f`; how many.
    pub fn take_all(&mut self, f: impl FnMut(T)) -> usize {
        self.take_through(u64::MAX, f)
    }

    /// Moves every entry of the ring to `old`.
    fn evict_all(&mut self) {
        while let Some(slot) = self.ring.pop_front() {
            if let Some(value) = slot {
                self.old.insert(self.base, value);
            }
            self.base += 1;
        }
        self.in_ring = 0;
    }

    /// Pops empty front slots, and moves front entries to `old` while the ring is longer than
    /// twice its entries plus [`SLACK`].
    fn shrink(&mut self) {
        self.pop_empty_front();
        while self.ring.len() > 2 * self.in_ring + SLACK {
            if let Some(Some(value)) = self.ring.pop_front() {
                self.old.insert(self.base, value);
                self.in_ring -= 1;
            }
            self.base += 1;
            self.pop_empty_front();
        }
    }

    fn pop_empty_front(&mut self) {
        while matches!(self.ring.front(), Some(None)) {
            self.ring.pop_front();
            self.base += 1;
        }
        let cap = self.ring.capacity();
        if cap > KEEP && self.ring.len() * 4 < cap {
            // Memory back after a burst of unacked deliveries (amortised: only after the ring
            // fell to a quarter of its room; a ring that stays under `KEEP` slots keeps its
            // room, so a channel whose unacked count swings with each batch does not
            // reallocate every time).
            self.ring.shrink_to(self.ring.len() * 2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Deliver(u64),
        Settle(u64),
        Through(u64),
        All,
        /// A key below the newest again (a requeued message delivered anew).
        Again(u64),
        /// `remove_each` of a run below the newest (`start` back, `len` tags) less the tags
        /// at `holes` (offsets into the run): a multiple ack over a requeued/nacked tag.
        Each(u64, u64, Vec<u64>),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => prop_oneof![Just(1u64), Just(1), Just(2), 1u64..100, 100u64..300].prop_map(Op::Deliver),
            4 => (0u64..400).prop_map(Op::Settle),
            1 => (0u64..400).prop_map(Op::Through),
            1 => Just(Op::All),
            2 => (0u64..400).prop_map(Op::Again),
            2 => (0u64..400, 0u64..150, proptest::collection::vec(0u64..150, 0..4))
                .prop_map(|(b, n, h)| Op::Each(b, n, h)),
        ]
    }

    fn check(ring: &TagRing<u64>, model: &BTreeMap<u64, u64>) {
        assert_eq!(ring.len(), model.len());
        assert!(ring.ring.len() <= 2 * ring.in_ring + SLACK);
        assert!(!matches!(ring.ring.front(), Some(None)));
        assert!(ring.old.keys().all(|&t| t < ring.base));
        assert_eq!(ring.first(), model.values().next());
        for (&t, &v) in model {
            assert!(ring.contains(t));
            assert_eq!(ring.get(t), Some(&v));
        }
    }

    proptest! {
        /// Against a `BTreeMap`: same entries, same order, and the ring stays bounded by its
        /// live entries.
        #[test]
        fn behaves_as_a_map_and_stays_bounded(ops in proptest::collection::vec(op(), 1..400)) {
            let mut ring = TagRing::default();
            let mut model = BTreeMap::new();
            let mut next = 0u64;
            for op in ops {
                match op {
                    Op::Deliver(step) => {
                        next += step;
                        ring.insert(next, next * 10);
                        model.insert(next, next * 10);
                    }
                    Op::Settle(back) => {
                        let tag = next.saturating_sub(back);
                        prop_assert_eq!(ring.remove(tag), model.remove(&tag));
                        prop_assert!(!ring.contains(tag));
                    }
                    Op::Through(back) => {
                        let tag = next.saturating_sub(back);
                        let bound = ring.bound_through(tag);
                        let mut got = Vec::new();
                        let n = ring.take_through(tag, |v| got.push(v));
                        prop_assert!(bound >= n);
                        let rest = model.split_off(&(tag + 1));
                        let want: Vec<u64> = std::mem::replace(&mut model, rest).into_values().collect();
                        prop_assert_eq!(n, want.len());
                        prop_assert_eq!(got, want);
                    }
                    Op::Again(back) => {
                        let tag = next.saturating_sub(back);
                        if tag > 0 && !model.contains_key(&tag) {
                            ring.insert(tag, tag * 7);
                            model.insert(tag, tag * 7);
                        }
                        if let Some(v) = ring.get_mut(tag) {
                            *v += 1;
                            let m = model.get_mut(&tag);
                            prop_assert!(m.is_some());
                            if let Some(m) = m {
                                *m += 1;
                            }
                        }
                    }
                    Op::Each(back, len, holes) => {
                        let first = next.saturating_sub(back);
                        let tags: Vec<u64> = (first..first + len)
                            .filter(|t| !holes.contains(&(t - first)))
                            .collect();
                        let mut got = Vec::new();
                        ring.remove_each(&tags, |t, v| got.push((t, v)));
                        let want: Vec<(u64, u64)> = tags
                            .iter()
                            .filter_map(|t| model.remove(t).map(|v| (*t, v)))
                            .collect();
                        prop_assert_eq!(got, want);
                    }
                    Op::All => {
                        let mut got = Vec::new();
                        ring.take_all(|v| got.push(v));
                        let want: Vec<u64> = std::mem::take(&mut model).into_values().collect();
                        prop_assert_eq!(got, want);
                    }
                }
                check(&ring, &model);
            }
        }
    }

    #[test]
    fn one_old_delivery_does_not_make_the_ring_grow() {
        let mut ring = TagRing::default();
        ring.insert(1, 1u64);
        for tag in 2..100_000u64 {
            ring.insert(tag, tag);
            assert_eq!(ring.remove(tag), Some(tag));
        }
        assert!(ring.ring.len() <= SLACK + 2, "{}", ring.ring.len());
        assert_eq!(ring.len(), 1);
        assert_eq!(ring.first(), Some(&1));
        assert_eq!(ring.remove(1), Some(1));
        assert!(ring.is_empty());
    }

    #[test]
    fn room_goes_back_after_a_burst() {
        let mut ring = TagRing::default();
        for tag in 1..=100_000u64 {
            ring.insert(tag, tag);
        }
        for tag in 1..100_000u64 {
            assert_eq!(ring.remove(tag), Some(tag));
        }
        assert!(ring.ring.capacity() <= KEEP, "{}", ring.ring.capacity());
        assert_eq!(ring.first(), Some(&100_000));
    }

    #[test]
    fn a_large_gap_restarts_the_ring() {
        let mut ring = TagRing::default();
        ring.insert(1, 1u64);
        ring.insert(2, 2);
        ring.insert(1_000_000, 3);
        assert!(ring.ring.len() <= 2);
        let mut got = Vec::new();
        assert_eq!(ring.take_through(2, |v| got.push(v)), 2);
        assert_eq!(got, vec![1, 2]);
        assert_eq!(ring.first(), Some(&3));
        assert_eq!(ring.take_through(999_999, |_| {}), 0);
        assert_eq!(ring.take_all(|_| {}), 1);
    }
}
