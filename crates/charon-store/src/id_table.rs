//! [`IdTable`]: a map from `u64` ids to small values for ids that are mostly dense and arrive
//! mostly in increasing order (message ids are log indexes), without a hash table's doubling.
//!
//! A hash map of millions of entries costs its table (key, value and control byte a bucket, 1 to
//! 2.3 buckets an entry as it doubles) and, while it doubles, the old and the new table at once:
//! at 10M stored messages that was ~700 MiB resident and ~1 GiB at the peak
//! (docs/performance.md, "Recovery of 10M"). Here ids are grouped in chunks of 64 consecutive
//! ids: a B-tree of chunks, each a bitmap of the ids present and their values in id order, grown
//! 8 at a time. An entry costs its value plus ~2 bytes of chunk overhead when the ids are dense;
//! memory grows one chunk at a time and a chunk is freed when it empties. A chunk's values are
//! a ring (`VecDeque`): the oldest id leaving (a FIFO queue's settles) and the newest arriving
//! move no other value, and a chunk drained from its front gives memory back in large steps
//! (it is about to be freed whole) instead of a reallocation every [`GROW`] removals.
//!
//! The chunks are kept in a [`ChunkRing`]: the chunks of the current run of ids in a ring
//! indexed by chunk number (an index, not a B-tree search, for the next id's insert and the
//! oldest id's removal), older or far-off chunks in a B-tree.

use std::collections::VecDeque;

use crate::ChunkRing;

/// Ids per chunk (a `u64` bitmap).
const SHIFT: u32 = 6;
const MASK: u64 = (1 << SHIFT) - 1;
/// A chunk's values grow by this many at a time (at most 64: little slack when full).
const GROW: usize = 8;

#[derive(Debug, Clone, Default)]
struct Chunk<V> {
    /// Bit `i`: id `base + i` is present.
    bits: u64,
    /// Values of the present ids, in id order.
    vals: VecDeque<V>,
}

impl<V> Chunk<V> {
    /// Index in `vals` of offset `off` (whether present or not: where it would go).
    fn rank(&self, off: u64) -> usize {
        let below = self.bits & ((1u64 << off) - 1);
        // The usual cases without a population count (software on the baseline x86-64
        // target, ~12 instructions): the oldest id (a FIFO settle) and the newest (an append).
        if below == 0 {
            0
        } else if below == self.bits {
            self.vals.len()
        } else {
            below.count_ones() as usize
        }
    }

    fn has(&self, off: u64) -> bool {
        self.bits & (1 << off) != 0
    }
}

/// A map `u64 → V` for mostly dense, mostly increasing ids.
#[derive(Debug, Clone)]
pub(crate) struct IdTable<V> {
    chunks: ChunkRing<Chunk<V>>,
    len: usize,
}

impl<V> Default for IdTable<V> {
    fn default() -> Self {
        IdTable {
            chunks: ChunkRing::default(),
            len: 0,
        }
    }
}

/// Room to add to a full chunk of `len` values before id offset `off` goes in at rank `r`:
/// [`GROW`], or the rest of the chunk when it has been filled in order from its first id with
/// at most one gap in 8 (the log indexes of a stream of publishes, other records taking the
/// gaps) — one reallocation a chunk instead of one every [`GROW`] ids. A chunk whose ids stop
/// coming keeps that slack until its first removal (`remove_if` shrinks it).
fn more_room(len: usize, r: usize, off: u64) -> usize {
    let n = len as u64;
    if r == len && len >= GROW && off >= n && (off - n) * 8 <= n {
        (MASK + 1 - off) as usize
    } else {
        GROW
    }
}

fn split(id: u64) -> (u64, u64) {
    (id >> SHIFT, id & MASK)
}

impl<V> IdTable<V> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn get(&self, id: &u64) -> Option<&V> {
        let (key, off) = split(*id);
        let c = self.chunks.get(key)?;
        if !c.has(off) {
            return None;
        }
        c.vals.get(c.rank(off))
    }

    pub(crate) fn get_mut(&mut self, id: &u64) -> Option<&mut V> {
        let (key, off) = split(*id);
        let c = self.chunks.get_mut(key)?;
        if !c.has(off) {
            return None;
        }
        let r = c.rank(off);
        c.vals.get_mut(r)
    }

    pub(crate) fn contains_key(&self, id: &u64) -> bool {
        let (key, off) = split(*id);
        self.chunks.get(key).is_some_and(|c| c.has(off))
    }

    /// Sets `id` to `v`; the value it replaces.
    pub(crate) fn insert(&mut self, id: u64, v: V) -> Option<V> {
        let (key, off) = split(id);
        let c = self.chunks.get_or_insert_with(key, || Chunk {
            bits: 0,
            vals: VecDeque::new(),
        });
        let r = c.rank(off);
        if c.has(off) {
            return c.vals.get_mut(r).map(|slot| std::mem::replace(slot, v));
        }
        if c.vals.len() == c.vals.capacity() {
            c.vals.reserve_exact(more_room(c.vals.len(), r, off));
        }
        // Appends (ids arrive mostly in order) without the ring's general insert.
        if r == c.vals.len() {
            c.vals.push_back(v);
        } else {
            c.vals.insert(r, v);
        }
        c.bits |= 1 << off;
        self.len += 1;
        None
    }

    pub(crate) fn remove(&mut self, id: &u64) -> Option<V> {
        self.remove_if(id, |_| true)
    }

    /// Removes `id` when `take` says so of its value (one lookup for both).
    pub(crate) fn remove_if(&mut self, id: &u64, take: impl FnOnce(&V) -> bool) -> Option<V> {
        let (key, off) = split(*id);
        let c = self.chunks.get_mut(key)?;
        if !c.has(off) {
            return None;
        }
        let r = c.rank(off);
        if !c.vals.get(r).is_some_and(take) {
            return None;
        }
        // The oldest leaving (a FIFO queue's settles) without the ring's general removal.
        let v = if r == 0 {
            c.vals.pop_front()?
        } else {
            c.vals.remove(r)?
        };
        c.bits &= !(1 << off);
        self.len -= 1;
        let (len, cap) = (c.vals.len(), c.vals.capacity());
        if c.bits == 0 {
            self.chunks.remove(key);
        } else if cap >= len + 2 * GROW && (r > 0 || len * 4 <= cap) {
            // Removals from the front drain the chunk: shrink by quarters (at most 4× a
            // value's size of slack in a chunk left so), elsewhere keep the slack at `GROW`.
            c.vals.shrink_to(len + GROW);
        }
        Some(v)
    }

    /// Entries in id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &V)> + '_ {
        self.chunks.iter().flat_map(|(key, c)| {
            let base = key << SHIFT;
            let mut bits = c.bits;
            c.vals.iter().map(move |v| {
                let off = u64::from(bits.trailing_zeros());
                bits &= bits - 1;
                (base + off, v)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u32),
        Remove(u64),
        /// Removes when the value is even.
        RemoveEven(u64),
        Bump(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Dense runs, chunk edges and far ids.
        let id = prop_oneof![4 => 0u64..300, 1 => any::<u64>(), 1 => (u64::MAX - 200)..=u64::MAX];
        prop_oneof![
            3 => (id.clone(), any::<u32>()).prop_map(|(i, v)| Op::Insert(i, v)),
            2 => id.clone().prop_map(Op::Remove),
            1 => id.clone().prop_map(Op::RemoveEven),
            1 => id.prop_map(Op::Bump),
        ]
    }

    proptest! {
        /// The table behaves as a B-tree map.
        #[test]
        fn id_table_matches_a_btree_map(ops in prop::collection::vec(op(), 0..500)) {
            let mut t = IdTable::default();
            let mut model: BTreeMap<u64, u32> = BTreeMap::new();
            for o in ops {
                match o {
                    Op::Insert(id, v) => prop_assert_eq!(t.insert(id, v), model.insert(id, v)),
                    Op::Remove(id) => prop_assert_eq!(t.remove(&id), model.remove(&id)),
                    Op::RemoveEven(id) => {
                        let want = if model.get(&id).is_some_and(|v| v % 2 == 0) {
                            model.remove(&id)
                        } else {
                            None
                        };
                        prop_assert_eq!(t.remove_if(&id, |v| v % 2 == 0), want);
                    }
                    Op::Bump(id) => {
                        if let Some(v) = t.get_mut(&id) {
                            *v = v.wrapping_add(1);
                        }
                        if let Some(v) = model.get_mut(&id) {
                            *v = v.wrapping_add(1);
                        }
                    }
                }
                prop_assert_eq!(t.len(), model.len());
                let got: Vec<(u64, u32)> = t.iter().map(|(k, v)| (k, *v)).collect();
                let want: Vec<(u64, u32)> = model.iter().map(|(k, v)| (*k, *v)).collect();
                prop_assert_eq!(got, want);
                for id in [0, 1, 63, 64, 65, 299, u64::MAX] {
                    prop_assert_eq!(t.get(&id), model.get(&id));
                    prop_assert_eq!(t.contains_key(&id), model.contains_key(&id));
                }
            }
        }
    }

    #[test]
    fn a_dense_run_costs_its_values_and_little_more() {
        let mut t = IdTable::default();
        for id in 0..64 * 100u64 {
            t.insert(id, [0u8; 32]);
        }
        assert_eq!(t.chunks.len(), 100);
        assert!(t.chunks.values().all(|c| c.vals.capacity() == 64));
        for id in 0..64 * 100u64 {
            assert!(t.remove(&id).is_some());
        }
        assert!(t.chunks.is_empty() && t.len() == 0);
    }

    #[test]
    fn a_chunk_filled_in_order_grows_once_and_a_sparse_one_by_steps() {
        // In order from the chunk's first id, one gap in 16: room for the rest at once.
        let mut t = IdTable::default();
        let mut caps = Vec::new();
        for id in (0..64u64).filter(|id| id % 16 != 15) {
            t.insert(id, 0u32);
            let cap = t.chunks.get(0).map_or(0, |c| c.vals.capacity());
            if caps.last() != Some(&cap) {
                caps.push(cap);
            }
        }
        assert_eq!(caps, vec![GROW, 64], "capacities of a dense chunk");
        // Every other id: never more than `GROW` of slack.
        let mut t = IdTable::default();
        for id in (0..64u64).step_by(2) {
            t.insert(id, 0u32);
            let c = t.chunks.get(0).map(|c| (c.vals.len(), c.vals.capacity()));
            assert!(c.is_some_and(|(len, cap)| cap <= len + GROW), "{c:?}");
        }
    }

    #[test]
    fn a_chunk_drained_from_its_front_keeps_bounded_slack() {
        let mut t = IdTable::default();
        for id in 0..64u64 {
            t.insert(id, [0u8; 28]);
        }
        let mut reallocs = 0;
        let mut cap = 64;
        for id in 0..63u64 {
            assert!(t.remove(&id).is_some());
            let (len, now) = t
                .chunks
                .get(0)
                .map_or((0, 0), |c| (c.vals.len(), c.vals.capacity()));
            assert!(now < (len + 2 * GROW).max(4 * len), "{len} values in {now}");
            if now != cap {
                reallocs += 1;
                cap = now;
            }
            assert_eq!(t.get(&(id + 1)), Some(&[0u8; 28]));
        }
        assert!(reallocs <= 3, "{reallocs} reallocations draining one chunk");
    }
}
