//! [`Chunked`]: an ordered sequence kept as a deque of small chunks (at most [`CHUNK`] items
//! each), addressed by [`Pos`] (chunk, offset) instead of a flat index. It backs the ready ring
//! (`ready.rs`), which was one `VecDeque` of 32-byte slots: growing it past a power of two
//! copied the whole backlog into a buffer twice as large in one step (16 MiB copied and 32 MiB
//! faulted in at 512k ready messages: a 10–20 ms turn of the queue actor, during which every
//! timer of the queue waited; docs/retries.md, stop 19), and shrinking it copied again. Here
//! pushing, popping and inserting touch one chunk (≤ 8 KiB of slots), and the outer deque holds
//! one 32-byte header per chunk (~100 KiB for a million items), so no single step copies more
//! than a chunk or that small outer deque.

use std::collections::VecDeque;

/// Most items in one chunk.
pub(crate) const CHUNK: usize = 256;

/// Room of the first chunk of an empty sequence.
const FIRST_CHUNK: usize = 16;

/// Where an item is: chunk `c`, offset `o` in it. The end of the sequence is `(chunks, 0)`.
/// Like an index, a position is invalidated by inserting or removing before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Pos {
    c: usize,
    o: usize,
}

/// A sequence in chunks; every chunk holds at least one item.
#[derive(Debug)]
pub(crate) struct Chunked<T> {
    chunks: VecDeque<VecDeque<T>>,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked {
            chunks: VecDeque::new(),
            len: 0,
        }
    }
}

impl<T> Chunked<T> {
    /// Items (the ring counts its live messages itself).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The first position (the end when empty).
    pub(crate) fn first(&self) -> Pos {
        Pos { c: 0, o: 0 }
    }

    /// The position of the last item (the first, [`Self::first`], when empty).
    pub(crate) fn last(&self) -> Pos {
        let c = self.chunks.len().saturating_sub(1);
        let o = self
            .chunks
            .back()
            .map_or(0, |ch| ch.len().saturating_sub(1));
        Pos { c, o }
    }

    /// The position after the last item.
    pub(crate) fn end(&self) -> Pos {
        Pos {
            c: self.chunks.len(),
            o: 0,
        }
    }

    pub(crate) fn front(&self) -> Option<&T> {
        self.chunks.front()?.front()
    }

    pub(crate) fn front_mut(&mut self) -> Option<&mut T> {
        self.chunks.front_mut()?.front_mut()
    }

    pub(crate) fn back(&self) -> Option<&T> {
        self.chunks.back()?.back()
    }

    pub(crate) fn back_mut(&mut self) -> Option<&mut T> {
        self.chunks.back_mut()?.back_mut()
    }

    pub(crate) fn get(&self, p: Pos) -> Option<&T> {
        self.chunks.get(p.c)?.get(p.o)
    }

    pub(crate) fn get_mut(&mut self, p: Pos) -> Option<&mut T> {
        self.chunks.get_mut(p.c)?.get_mut(p.o)
    }

    /// The position after `p` (the end after the last item).
    pub(crate) fn next(&self, p: Pos) -> Pos {
        match self.chunks.get(p.c) {
            Some(ch) if p.o + 1 < ch.len() => Pos { c: p.c, o: p.o + 1 },
            Some(_) => Pos { c: p.c + 1, o: 0 },
            None => p,
        }
    }

    /// The position before `p` (`None` at the first).
    pub(crate) fn prev(&self, p: Pos) -> Option<Pos> {
        if p.o > 0 {
            return Some(Pos { c: p.c, o: p.o - 1 });
        }
        let c = p.c.checked_sub(1)?;
        let len = self.chunks.get(c)?.len();
        Some(Pos { c, o: len - 1 })
    }

    /// The first position whose item fails `pred` (the end if none does); `pred` must hold for
    /// a prefix of the sequence and fail for the rest. O(log n).
    pub(crate) fn partition_point(&self, mut pred: impl FnMut(&T) -> bool) -> Pos {
        let c = self
            .chunks
            .partition_point(|ch| ch.back().is_some_and(&mut pred));
        match self.chunks.get(c) {
            Some(ch) => Pos {
                c,
                o: ch.partition_point(pred),
            },
            None => self.end(),
        }
    }

    /// Appends `item`.
    pub(crate) fn push_back(&mut self, item: T) {
        self.len += 1;
        match self.chunks.back_mut() {
            Some(ch) if ch.len() < CHUNK => ch.push_back(item),
            full => {
                // A queue that filled a chunk gets whole chunks; a short one stays small, but
                // starts with room for a few (a queue its consumers keep empty makes a new
                // chunk for every batch: growing it from 4 slots cost two reallocations each).
                let mut ch = if full.is_some() {
                    VecDeque::with_capacity(CHUNK)
                } else {
                    VecDeque::with_capacity(FIRST_CHUNK)
                };
                ch.push_back(item);
                self.chunks.push_back(ch);
            }
        }
    }

    /// Inserts `item` at `p` (before the item there; at the end for [`Self::end`]); returns
    /// where it went. A full chunk is split in two first.
    pub(crate) fn insert(&mut self, p: Pos, item: T) -> Pos {
        if p.c >= self.chunks.len() {
            self.push_back(item);
            let c = self.chunks.len() - 1;
            let o = self.chunks.get(c).map_or(0, |ch| ch.len() - 1);
            return Pos { c, o };
        }
        let Pos { mut c, mut o } = p;
        if let Some(ch) = self.chunks.get_mut(c)
            && ch.len() >= CHUNK
        {
            let tail = ch.split_off(CHUNK / 2);
            self.chunks.insert(c + 1, tail);
            if o > CHUNK / 2 {
                c += 1;
                o -= CHUNK / 2;
            }
        }
        if let Some(ch) = self.chunks.get_mut(c) {
            ch.insert(o, item);
            self.len += 1;
        }
        Pos { c, o }
    }

    /// Removes the item at `p`.
    pub(crate) fn remove(&mut self, p: Pos) -> Option<T> {
        let ch = self.chunks.get_mut(p.c)?;
        let item = ch.remove(p.o)?;
        if ch.is_empty() {
            self.chunks.remove(p.c);
            self.shrink();
        }
        self.len -= 1;
        Some(item)
    }

    pub(crate) fn pop_front(&mut self) -> Option<T> {
        let ch = self.chunks.front_mut()?;
        let item = ch.pop_front()?;
        if ch.is_empty() {
            self.chunks.pop_front();
            self.shrink();
        }
        self.len -= 1;
        Some(item)
    }

    pub(crate) fn pop_back(&mut self) -> Option<T> {
        let ch = self.chunks.back_mut()?;
        let item = ch.pop_back()?;
        if ch.is_empty() {
            self.chunks.pop_back();
            self.shrink();
        }
        self.len -= 1;
        Some(item)
    }

    /// Keeps the items of `p`'s chunk for which `keep` holds; returns how many went.
    pub(crate) fn retain_in_chunk(&mut self, p: Pos, keep: impl FnMut(&T) -> bool) -> usize {
        let Some(ch) = self.chunks.get_mut(p.c) else {
            return 0;
        };
        let before = ch.len();
        ch.retain(keep);
        let gone = before - ch.len();
        if ch.is_empty() {
            self.chunks.remove(p.c);
            self.shrink();
        }
        self.len -= gone;
        gone
    }

    /// The items of `p`'s chunk.
    pub(crate) fn chunk_of(&self, p: Pos) -> impl Iterator<Item = &T> {
        self.chunks.get(p.c).into_iter().flatten()
    }

    /// The items in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }

    /// The items in order from `p` on.
    pub(crate) fn iter_from(&self, p: Pos) -> impl Iterator<Item = &T> {
        self.chunks
            .range(p.c.min(self.chunks.len())..)
            .enumerate()
            .flat_map(move |(k, ch)| ch.range(if k == 0 { p.o.min(ch.len()) } else { 0 }..))
    }

    /// The outer deque gives its room back once mostly empty (it is small: a header a chunk).
    fn shrink(&mut self) {
        let cap = self.chunks.capacity();
        if cap > 64 && self.chunks.len() * 4 < cap {
            self.chunks.shrink_to(self.chunks.len() * 2);
        }
    }

    /// Chunks (tests: the structure's invariants).
    #[cfg(test)]
    pub(crate) fn chunk_lens(&self) -> Vec<usize> {
        self.chunks.iter().map(VecDeque::len).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Push(u32),
        Insert(usize, u32),
        Remove(usize),
        PopFront,
        PopBack,
        Retain(usize, u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => any::<u32>().prop_map(Op::Push),
            4 => (any::<usize>(), any::<u32>()).prop_map(|(i, v)| Op::Insert(i, v)),
            2 => any::<usize>().prop_map(Op::Remove),
            1 => Just(Op::PopFront),
            1 => Just(Op::PopBack),
            1 => (any::<usize>(), 1u32..4).prop_map(|(i, m)| Op::Retain(i, m)),
        ]
    }

    /// The position of flat index `i` (walking: tests only).
    fn pos_of(c: &Chunked<u32>, i: usize) -> Pos {
        let mut p = c.first();
        for _ in 0..i {
            p = c.next(p);
        }
        p
    }

    proptest! {
        /// Behaves as a `VecDeque` addressed by flat index; chunks are never empty nor over
        /// `CHUNK`; `next`/`prev`/`partition_point`/`iter_from` agree with the flat order.
        #[test]
        fn matches_a_vecdeque(ops in prop::collection::vec(op(), 0..700)) {
            let mut c: Chunked<u32> = Chunked::default();
            let mut m: VecDeque<u32> = VecDeque::new();
            for o in ops {
                match o {
                    Op::Push(v) => { c.push_back(v); m.push_back(v); }
                    Op::Insert(i, v) => {
                        let i = i % (m.len() + 1);
                        let p = c.insert(pos_of(&c, i), v);
                        m.insert(i, v);
                        prop_assert_eq!(c.get(p), Some(&v));
                        prop_assert_eq!(p, pos_of(&c, i));
                    }
                    Op::Remove(i) => {
                        if m.is_empty() { continue; }
                        let i = i % m.len();
                        prop_assert_eq!(c.remove(pos_of(&c, i)), m.remove(i));
                    }
                    Op::PopFront => prop_assert_eq!(c.pop_front(), m.pop_front()),
                    Op::PopBack => prop_assert_eq!(c.pop_back(), m.pop_back()),
                    Op::Retain(i, k) => {
                        if m.is_empty() { continue; }
                        let p = pos_of(&c, i % m.len());
                        let chunk: Vec<u32> = c.chunk_of(p).copied().collect();
                        // The flat range of that chunk.
                        let start = (0..m.len()).find(|j| pos_of(&c, *j).c == p.c).unwrap_or(0);
                        let gone = c.retain_in_chunk(p, |v| v % k != 0);
                        let kept: Vec<u32> = chunk.iter().copied().filter(|v| v % k != 0).collect();
                        prop_assert_eq!(gone, chunk.len() - kept.len());
                        m.drain(start..start + chunk.len());
                        for (j, v) in kept.into_iter().enumerate() { m.insert(start + j, v); }
                    }
                }
                prop_assert_eq!(c.len(), m.len());
                prop_assert!(c.chunk_lens().iter().all(|l| *l > 0 && *l <= CHUNK));
                prop_assert_eq!(c.front(), m.front());
                prop_assert_eq!(c.back(), m.back());
            }
            prop_assert_eq!(c.iter().copied().collect::<Vec<_>>(), m.iter().copied().collect::<Vec<_>>());
            // Walking forward and back visits every item in order.
            let mut p = c.first();
            let mut seen = Vec::new();
            while let Some(v) = c.get(p) { seen.push(*v); p = c.next(p); }
            prop_assert_eq!(p, c.end());
            prop_assert_eq!(&seen, &m.iter().copied().collect::<Vec<_>>());
            let mut back = Vec::new();
            let mut q = c.prev(c.end());
            while let Some(p) = q { back.extend(c.get(p).copied()); q = c.prev(p); }
            back.reverse();
            prop_assert_eq!(&back, &seen);
            for i in 0..=m.len() {
                prop_assert_eq!(c.iter_from(pos_of(&c, i)).copied().collect::<Vec<_>>(), m.range(i..).copied().collect::<Vec<_>>());
            }
        }

        /// `partition_point` on a sorted sequence finds the first item over a bound.
        #[test]
        fn partition_point_matches(mut vals in prop::collection::vec(0u32..2000, 0..2000), bound in 0u32..2100) {
            vals.sort_unstable();
            let mut c: Chunked<u32> = Chunked::default();
            // Built by inserts in the middle too, so chunks are of uneven sizes.
            for (i, v) in vals.iter().enumerate() {
                if i % 3 == 0 { c.push_back(*v) } else {
                    let p = c.partition_point(|x| *x <= *v);
                    c.insert(p, *v);
                }
            }
            let m: Vec<u32> = c.iter().copied().collect();
            prop_assert_eq!(&m, &vals);
            let p = c.partition_point(|x| *x < bound);
            prop_assert_eq!(p, pos_of(&c, m.partition_point(|x| *x < bound)));
        }
    }

    #[test]
    fn a_growing_sequence_never_moves_more_than_a_chunk() {
        let mut c: Chunked<u64> = Chunked::default();
        for i in 0..100_000u64 {
            c.push_back(i);
        }
        assert_eq!(c.chunk_lens().len(), 100_000usize.div_ceil(CHUNK));
        for _ in 0..99_990 {
            c.pop_front();
        }
        assert_eq!((c.len(), c.chunk_lens().len()), (10, 1));
    }
}
