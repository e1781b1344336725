//! [`IdMap`]: a map from a queue's message ids to small values, kept in chunks of 64
//! consecutive ids. A queue hands out ids in order and its messages mostly leave in order, so
//! neighbouring ids sit in the same chunk: an insert, lookup or removal touches one chunk that
//! is usually already in cache, and the map never rehashes or moves all its entries at once.
//! A hash map of a million entries does both: a lookup is a cache miss, and a resize (or the
//! in-place rehash that churn of removals and inserts triggers) stalls the queue actor for tens
//! of milliseconds, which showed as release lateness of parked retries (docs/retries.md).
//!
//! A chunk holds only its present values, in id order, with a bitmap of which ids they are:
//! a dense chunk costs ~16 bytes per value, a chunk with one value a few dozen bytes. The
//! values are a ring (`VecDeque`), so that the oldest leaving (a FIFO queue's settles) and the
//! newest arriving move no other value.
//!
//! The chunks are kept in a [`ChunkRing`]: the chunks of the current run of ids in a ring
//! indexed by chunk number (an index, not a B-tree search, for the next id's insert and the
//! oldest id's removal), older or far-off chunks in a B-tree.

use std::collections::VecDeque;

use charon_store::ChunkRing;

/// Ids per chunk (the bitmap's width).
const CHUNK: u64 = 64;

/// The present values of 64 consecutive ids.
#[derive(Debug, Clone, Default)]
struct Chunk<V> {
    /// Bit `i`: id `chunk * 64 + i` is present.
    mask: u64,
    /// The present values, in id order.
    vals: VecDeque<V>,
}

impl<V> Chunk<V> {
    /// Index in `vals` of slot `slot`'s value (present or not).
    fn rank(&self, slot: u32) -> usize {
        let below = self.mask & ((1u64 << slot) - 1);
        // The usual cases without a population count (software on the baseline x86-64
        // target, ~12 instructions): the oldest id (a FIFO settle) and the newest (an append).
        if below == 0 {
            0
        } else if below == self.mask {
            self.vals.len()
        } else {
            below.count_ones() as usize
        }
    }

    fn has(&self, slot: u32) -> bool {
        self.mask & (1u64 << slot) != 0
    }
}

/// Message id → `V`, in chunks of 64 ids (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct IdMap<V> {
    chunks: ChunkRing<Chunk<V>>,
    len: usize,
}

impl<V> Default for IdMap<V> {
    fn default() -> Self {
        IdMap {
            chunks: ChunkRing::default(),
            len: 0,
        }
    }
}

/// The chunk and slot of `id`.
fn split(id: u64) -> (u64, u32) {
    (id / CHUNK, (id % CHUNK) as u32)
}

impl<V> IdMap<V> {
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn get(&self, id: u64) -> Option<&V> {
        let (c, slot) = split(id);
        let chunk = self.chunks.get(c)?;
        if !chunk.has(slot) {
            return None;
        }
        chunk.vals.get(chunk.rank(slot))
    }

    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut V> {
        let (c, slot) = split(id);
        let chunk = self.chunks.get_mut(c)?;
        if !chunk.has(slot) {
            return None;
        }
        let at = chunk.rank(slot);
        chunk.vals.get_mut(at)
    }

    pub(crate) fn contains_key(&self, id: u64) -> bool {
        let (c, slot) = split(id);
        self.chunks.get(c).is_some_and(|ch| ch.has(slot))
    }

    /// Sets `id`'s value; returns the one it replaces.
    pub(crate) fn insert(&mut self, id: u64, v: V) -> Option<V> {
        let (c, slot) = split(id);
        let chunk = self.chunks.get_or_insert_with(c, || Chunk {
            mask: 0,
            vals: VecDeque::new(),
        });
        let at = chunk.rank(slot);
        if chunk.has(slot) {
            return chunk.vals.get_mut(at).map(|old| std::mem::replace(old, v));
        }
        chunk.mask |= 1u64 << slot;
        // Appends (ids arrive in order) without the ring's general insert.
        if at == chunk.vals.len() {
            chunk.vals.push_back(v);
        } else {
            chunk.vals.insert(at, v);
        }
        self.len += 1;
        None
    }

    /// Removes `id`'s value (a chunk left empty is freed).
    pub(crate) fn remove(&mut self, id: u64) -> Option<V> {
        let (c, slot) = split(id);
        let chunk = self.chunks.get_mut(c)?;
        if !chunk.has(slot) {
            return None;
        }
        let at = chunk.rank(slot);
        // The oldest leaving (a FIFO queue's settles) without the ring's general removal.
        let v = if at == 0 {
            chunk.vals.pop_front()?
        } else {
            chunk.vals.remove(at)?
        };
        chunk.mask &= !(1u64 << slot);
        if chunk.mask == 0 {
            self.chunks.remove(c);
        } else if chunk.vals.capacity() >= 16 && chunk.vals.len() * 4 <= chunk.vals.capacity() {
            chunk.vals.shrink_to(chunk.vals.len() * 2);
        }
        self.len -= 1;
        Some(v)
    }

    /// The values, in id order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.chunks.values().flat_map(|c| c.vals.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap as Model;

    #[test]
    fn a_fifo_stream_keeps_only_the_chunks_it_holds() {
        let mut m = IdMap::default();
        for id in 0..10_000u64 {
            assert_eq!(m.insert(id, id * 2), None);
            if id >= 100 {
                assert_eq!(m.remove(id - 100), Some((id - 100) * 2));
            }
        }
        assert_eq!(m.len(), 100);
        assert!(
            m.chunks.len() <= 3,
            "{} chunks for 100 consecutive ids",
            m.chunks.len()
        );
        assert_eq!(m.get(9_950), Some(&19_900));
        assert_eq!(m.get(9_899), None);
    }

    proptest! {
        /// Inserts, replacements and removals in any order behave as an ordered map.
        #[test]
        fn idmap_matches_a_btreemap(ops in prop::collection::vec((0u8..3, 0u64..300, any::<u32>()), 0..400)) {
            let mut m = IdMap::default();
            let mut model = Model::new();
            for (op, id, v) in ops {
                match op {
                    0 => prop_assert_eq!(m.insert(id, v), model.insert(id, v)),
                    1 => prop_assert_eq!(m.remove(id), model.remove(&id)),
                    _ => {
                        if let Some(x) = m.get_mut(id) {
                            *x = v;
                        }
                        if let Some(x) = model.get_mut(&id) {
                            *x = v;
                        }
                    }
                }
                prop_assert_eq!(m.len(), model.len());
                prop_assert_eq!(m.is_empty(), model.is_empty());
                for probe in 0..302 {
                    prop_assert_eq!(m.get(probe), model.get(&probe));
                    prop_assert_eq!(m.contains_key(probe), model.contains_key(&probe));
                }
                prop_assert_eq!(m.values().copied().collect::<Vec<_>>(), model.values().copied().collect::<Vec<_>>());
            }
        }
    }
}
