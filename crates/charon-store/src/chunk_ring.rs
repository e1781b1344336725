//! [`ChunkRing`]: an ordered map from `u64` keys to chunks for keys that are mostly dense and
//! arrive mostly in increasing order — the chunk keys (`id / 64`) of message ids, which are log
//! indexes. The store's message table (`IdTable`) and a queue's id maps (`charon-server`'s
//! `IdMap`) keep their chunks here.
//!
//! The keys of the current run sit in a ring (`VecDeque`) indexed by `key - base`: a lookup, the
//! next key's insert and the oldest key's removal are an index, a push and a pop, not a B-tree
//! search (docs/performance.md part 18). Keys the ring does not cover — older than its front
//! (an out-of-order insert), or too far past its back — go to a B-tree (the spill), so sparse and
//! out-of-order keys stay correct and cost what they did before.
//!
//! Memory: an empty slot inside the ring (a hole, left by a chunk that emptied between live ones)
//! costs one `Option<C>`. Holes are bounded: at most as many as the live chunks in the ring plus
//! [`SLACK`]. An insert that would pass that bound first moves the ring's oldest chunks to the
//! spill; a removal that passes it does the same. The ring's front and back slots are always
//! live, and its buffer shrinks when it is a quarter used, so the ring costs at most ~8 slots a
//! live chunk (~5 bytes an id for 64-id chunks of 40 bytes) and usually ~1 slot.

use std::collections::{BTreeMap, VecDeque};

/// Holes allowed in the ring beyond one per live chunk.
pub const SLACK: usize = 8;

/// Key → chunk, a ring for the current run of keys and a B-tree for the rest (module docs).
#[derive(Debug, Clone)]
pub struct ChunkRing<C> {
    /// Slot `i` is key `base + i`; `None` is a hole. Front and back are `Some` when non-empty.
    ring: VecDeque<Option<C>>,
    base: u64,
    /// `Some` slots in `ring`.
    live: usize,
    /// Keys outside `base..base + ring.len()`.
    spill: BTreeMap<u64, C>,
}

impl<C> Default for ChunkRing<C> {
    fn default() -> Self {
        ChunkRing {
            ring: VecDeque::new(),
            base: 0,
            live: 0,
            spill: BTreeMap::new(),
        }
    }
}

impl<C> ChunkRing<C> {
    /// Chunks held.
    pub fn len(&self) -> usize {
        self.live + self.spill.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ring slot of `key`, when the ring covers it.
    fn slot(&self, key: u64) -> Option<usize> {
        let i = key.wrapping_sub(self.base);
        (i < self.ring.len() as u64).then_some(i as usize)
    }

    pub fn get(&self, key: u64) -> Option<&C> {
        match self.slot(key) {
            Some(i) => self.ring.get(i)?.as_ref(),
            None => self.spill.get(&key),
        }
    }

    pub fn get_mut(&mut self, key: u64) -> Option<&mut C> {
        match self.slot(key) {
            Some(i) => self.ring.get_mut(i)?.as_mut(),
            None => self.spill.get_mut(&key),
        }
    }

    /// Key `key`'s chunk, made by `make` when there is none. Inline: a queue's `IdMap::insert`
    /// calls it once a message, and left out of line it cost ~16 instructions a call (part 19).
    #[inline]
    pub fn get_or_insert_with(&mut self, key: u64, make: impl FnOnce() -> C) -> &mut C {
        if self.slot(key).is_none() && !self.cover(key) {
            return self.spill.entry(key).or_insert_with(make);
        }
        let i = key.wrapping_sub(self.base) as usize;
        let live = &mut self.live;
        let slot = match self.ring.get_mut(i) {
            Some(s) => s,
            // `cover` made the ring cover `key`.
            None => unreachable!("ring covers its key"),
        };
        slot.get_or_insert_with(|| {
            *live += 1;
            make()
        })
    }

    /// Grows the ring to cover `key` when the holes stay bounded (moving its oldest chunks to
    /// the spill if that makes room); false when `key` belongs in the spill.
    fn cover(&mut self, key: u64) -> bool {
        if self.ring.is_empty() {
            return self.restart(key);
        }
        let end = self.base.saturating_add(self.ring.len() as u64);
        if key >= end {
            // Holes added: the slots between the back and `key`.
            let gap = key - end;
            while !self.ring.is_empty() && !self.fits(gap) {
                self.spill_front();
            }
            if self.ring.is_empty() {
                return self.restart(key);
            }
            let end = self.base.saturating_add(self.ring.len() as u64);
            let gap = key - end;
            self.ring
                .extend(std::iter::repeat_with(|| None).take(gap as usize + 1));
            self.take_spill(end, key);
            true
        } else {
            // Older than the front: prepend when the holes stay bounded, else the spill.
            let gap = self.base - key - 1;
            if !self.fits(gap) {
                return false;
            }
            for _ in 0..=gap {
                self.ring.push_front(None);
            }
            let old = self.base;
            self.base = key;
            self.take_spill(key, old - 1);
            true
        }
    }

    /// Whether `gap` more holes and one more live chunk keep the holes bounded.
    fn fits(&self, gap: u64) -> bool {
        let holes = (self.ring.len() - self.live) as u64;
        holes + gap <= (self.live + 1 + SLACK) as u64
    }

    /// Starts an empty ring at `key` (its chunk taken from the spill if it is there).
    fn restart(&mut self, key: u64) -> bool {
        self.base = key;
        self.ring.clear();
        self.live = 0;
        self.ring.push_back(None);
        self.take_spill(key, key);
        true
    }

    /// Moves the spill's chunks with keys in `from..=to` (now covered) into the ring.
    fn take_spill(&mut self, from: u64, to: u64) {
        if self.spill.is_empty() {
            return;
        }
        let keys: Vec<u64> = self.spill.range(from..=to).map(|(k, _)| *k).collect();
        for k in keys {
            if let (Some(c), Some(i)) = (self.spill.remove(&k), self.slot(k))
                && let Some(s) = self.ring.get_mut(i)
            {
                *s = Some(c);
                self.live += 1;
            }
        }
    }

    /// Moves the ring's front chunk to the spill and drops the holes after it.
    fn spill_front(&mut self) {
        if let Some(Some(c)) = self.ring.pop_front() {
            self.spill.insert(self.base, c);
            self.live -= 1;
        }
        self.base = self.base.wrapping_add(1);
        self.trim();
    }

    /// Drops holes at both ends (the ring's ends are always live).
    fn trim(&mut self) {
        while let Some(None) = self.ring.front() {
            self.ring.pop_front();
            self.base = self.base.wrapping_add(1);
        }
        while let Some(None) = self.ring.back() {
            self.ring.pop_back();
        }
        let (len, cap) = (self.ring.len(), self.ring.capacity());
        if cap > 64 && len * 4 <= cap {
            self.ring.shrink_to(len * 2);
        }
    }

    /// Removes key `key`'s chunk.
    pub fn remove(&mut self, key: u64) -> Option<C> {
        let Some(i) = self.slot(key) else {
            return self.spill.remove(&key);
        };
        let c = self.ring.get_mut(i)?.take()?;
        self.live -= 1;
        if i == 0 || i + 1 == self.ring.len() {
            self.trim();
        }
        while self.ring.len() - self.live > self.live + SLACK {
            self.spill_front();
        }
        Some(c)
    }

    /// Chunks in key order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &C)> + '_ {
        let end = self.base.saturating_add(self.ring.len() as u64);
        let (below, above) = if self.ring.is_empty() {
            (self.spill.range(..), self.spill.range(0..0))
        } else {
            (self.spill.range(..self.base), self.spill.range(end..))
        };
        let base = self.base;
        let ring = self
            .ring
            .iter()
            .enumerate()
            .filter_map(move |(i, c)| Some((base + i as u64, c.as_ref()?)));
        below
            .map(|(k, c)| (*k, c))
            .chain(ring)
            .chain(above.map(|(k, c)| (*k, c)))
    }

    /// Chunks in key order.
    pub fn values(&self) -> impl Iterator<Item = &C> + '_ {
        self.iter().map(|(_, c)| c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u32),
        Remove(u64),
        /// Inserts `n` keys in order from the newest key + `skip`.
        Run(u8, u8),
        /// Removes the oldest `n` keys.
        Drain(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        // In-order runs, small gaps, older keys, far keys and the ends of the key space.
        let key = prop_oneof![
            4 => 0u64..200,
            1 => 1000u64..1100,
            1 => any::<u64>(),
            1 => (u64::MAX - 50)..=u64::MAX,
        ];
        prop_oneof![
            3 => (key.clone(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            3 => key.prop_map(Op::Remove),
            2 => (1u8..60, 0u8..30).prop_map(|(n, s)| Op::Run(n, s)),
            1 => (1u8..60).prop_map(Op::Drain),
        ]
    }

    /// The ring's invariants: ends live, holes bounded, no key in both places.
    fn check(r: &ChunkRing<u32>) -> Result<(), TestCaseError> {
        let holes = r.ring.len() - r.live;
        prop_assert_eq!(r.ring.iter().filter(|s| s.is_some()).count(), r.live);
        prop_assert!(holes <= r.live + SLACK, "{} holes, {} live", holes, r.live);
        if !r.ring.is_empty() {
            prop_assert!(r.ring.front().is_some_and(Option::is_some));
            prop_assert!(r.ring.back().is_some_and(Option::is_some));
            let end = r.base.saturating_add(r.ring.len() as u64);
            prop_assert!(r.spill.range(r.base..end).next().is_none());
        }
        Ok(())
    }

    proptest! {
        /// The ring behaves as a B-tree map under in-order runs, gaps, out-of-order keys and
        /// removal in any order, growing and shrinking, and keeps its holes bounded.
        #[test]
        fn chunk_ring_matches_a_btree_map(ops in prop::collection::vec(op(), 0..300)) {
            let mut r: ChunkRing<u32> = ChunkRing::default();
            let mut model: BTreeMap<u64, u32> = BTreeMap::new();
            for o in ops {
                match o {
                    Op::Insert(k, v) => {
                        let got = *r.get_or_insert_with(k, || v);
                        let want = *model.entry(k).or_insert(v);
                        prop_assert_eq!(got, want);
                        if let (Some(a), Some(b)) = (r.get_mut(k), model.get_mut(&k)) {
                            *a = a.wrapping_add(1);
                            *b = b.wrapping_add(1);
                        }
                    }
                    Op::Remove(k) => prop_assert_eq!(r.remove(k), model.remove(&k)),
                    Op::Run(n, skip) => {
                        let from = model.keys().next_back().map_or(0, |k| k.saturating_add(1));
                        let from = from.saturating_add(u64::from(skip));
                        for k in (from..=u64::MAX).take(usize::from(n)) {
                            r.get_or_insert_with(k, || k as u32);
                            model.entry(k).or_insert(k as u32);
                        }
                    }
                    Op::Drain(n) => {
                        let keys: Vec<u64> = model.keys().take(usize::from(n)).copied().collect();
                        for k in keys {
                            prop_assert_eq!(r.remove(k), model.remove(&k));
                        }
                    }
                }
                check(&r)?;
                prop_assert_eq!(r.len(), model.len());
                let got: Vec<(u64, u32)> = r.iter().map(|(k, v)| (k, *v)).collect();
                let want: Vec<(u64, u32)> = model.iter().map(|(k, v)| (*k, *v)).collect();
                prop_assert_eq!(got, want);
                for k in [0, 1, 63, 199, 1000, u64::MAX] {
                    prop_assert_eq!(r.get(k), model.get(&k));
                }
            }
        }
    }

    #[test]
    fn an_in_order_stream_stays_in_the_ring() {
        let mut r: ChunkRing<u64> = ChunkRing::default();
        for k in 0..10_000u64 {
            r.get_or_insert_with(k, || k);
            if k >= 100 {
                assert_eq!(r.remove(k - 100), Some(k - 100));
            }
        }
        assert!(r.spill.is_empty());
        assert_eq!(r.ring.len(), 100);
        assert!(r.ring.capacity() <= 256, "{}", r.ring.capacity());
    }

    #[test]
    fn one_old_chunk_left_behind_does_not_grow_the_ring() {
        let mut r: ChunkRing<u64> = ChunkRing::default();
        r.get_or_insert_with(0, || 0);
        for k in 1..100_000u64 {
            r.get_or_insert_with(k, || k);
            if k >= 2 {
                r.remove(k - 1);
            }
        }
        assert!(r.ring.len() <= 2 + SLACK, "{} slots", r.ring.len());
        assert!(r.ring.capacity() <= 64, "{} capacity", r.ring.capacity());
        assert_eq!(r.get(0), Some(&0));
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn sparse_keys_keep_the_holes_bounded() {
        let mut r: ChunkRing<u64> = ChunkRing::default();
        for k in (0..100_000u64).step_by(17) {
            r.get_or_insert_with(k, || k);
        }
        assert!(r.ring.len() - r.live <= r.live + SLACK);
        assert_eq!(r.len(), 100_000usize.div_ceil(17));
        assert!(r.iter().map(|(k, _)| k).eq((0..100_000u64).step_by(17)));
    }
}
