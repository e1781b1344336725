//! [`IdSet`]: a set of a queue's message ids kept as runs of consecutive ids. A queue's ids
//! are handed out in order, and which of them the store holds (all of a durable queue's
//! persistent backlog, typically) forms a few long runs, so a backlog of millions costs a few
//! B-tree entries instead of a hash-map entry per message (docs/performance.md,
//! "Position-based recovery").

use std::collections::BTreeMap;

/// Message ids as runs `start → end` (end exclusive), never adjacent or overlapping. The
/// lowest run is kept out of the B-tree (`head`): a FIFO queue's ids leave from its front and,
/// while it is the only run, arrive at its back, so the common insert and removal change two
/// integers instead of re-keying a B-tree entry per id.
#[derive(Debug, Default, Clone)]
pub(crate) struct IdSet {
    /// The lowest run; `None` only when the set is empty.
    head: Option<(u64, u64)>,
    /// The other runs, all above `head`.
    runs: BTreeMap<u64, u64>,
    len: usize,
}

impl IdSet {
    /// Ids in the set.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The run holding `id`, or the one before it, among the runs above `head`.
    fn run_at(&self, id: u64) -> Option<(u64, u64)> {
        self.runs.range(..=id).next_back().map(|(s, e)| (*s, *e))
    }

    /// Whether `id` is in the set. Inline: `StoreSide::load_stored` asks once a delivery, and
    /// left out of line it cost ~11 instructions a call (part 19).
    #[inline]
    pub(crate) fn contains(&self, id: u64) -> bool {
        // The common cases without a range search: the first run (a FIFO queue's oldest
        // messages, being delivered and settled) and the last (the newest).
        let Some((s, e)) = self.head else {
            return false;
        };
        if id < e {
            return s <= id;
        }
        if let Some((s, e)) = self.runs.last_key_value()
            && *s <= id
        {
            return id < *e;
        }
        self.run_at(id).is_some_and(|(_, e)| id < e)
    }

    /// Puts `head` back into the B-tree (before a general change).
    fn unpark(&mut self) {
        if let Some((s, e)) = self.head.take() {
            self.runs.insert(s, e);
        }
    }

    /// Takes the lowest run out of the B-tree into `head` (after a general change).
    fn park(&mut self) {
        self.head = self.runs.pop_first();
    }

    /// Add `id`; false when it was there already.
    pub(crate) fn insert(&mut self, id: u64) -> bool {
        // Ids are handed out from 0 upwards: `u64::MAX` is never one.
        let Some(next) = id.checked_add(1) else {
            return false;
        };
        // The common cases: the id after the last run's end.
        match &mut self.head {
            None => {
                self.head = Some((id, next));
                self.len += 1;
                return true;
            }
            Some((_, e)) if *e == id && self.runs.is_empty() => {
                *e = next;
                self.len += 1;
                return true;
            }
            Some(_) => {}
        }
        if let Some(mut last) = self.runs.last_entry()
            && *last.get() == id
        {
            *last.get_mut() = next;
            self.len += 1;
            return true;
        }
        self.unpark();
        let before = self.run_at(id);
        let added = if before.is_some_and(|(_, e)| id < e) {
            false
        } else {
            let joins_before = before.filter(|(_, e)| *e == id).map(|(s, _)| s);
            let after_end = self.runs.remove(&next);
            let start = joins_before.unwrap_or(id);
            self.runs.insert(start, after_end.unwrap_or(next));
            self.len += 1;
            true
        };
        self.park();
        added
    }

    /// Remove `id`; false when it was not there.
    pub(crate) fn remove(&mut self, id: u64) -> bool {
        let Some((s, e)) = self.head else {
            return false;
        };
        // The common case: the oldest id of a FIFO queue leaves (no B-tree change).
        if id == s {
            if id + 1 < e {
                self.head = Some((id + 1, e));
            } else {
                self.park();
            }
            self.len -= 1;
            return true;
        }
        if id < s {
            return false;
        }
        self.unpark();
        let removed = match self.run_at(id).filter(|(_, e)| id < *e) {
            None => false,
            Some((s, e)) => {
                self.runs.remove(&s);
                if s < id {
                    self.runs.insert(s, id);
                }
                if id + 1 < e {
                    self.runs.insert(id + 1, e);
                }
                self.len -= 1;
                true
            }
        };
        self.park();
        removed
    }

    /// Runs held (for tests and sizes).
    #[cfg(test)]
    fn runs(&self) -> usize {
        usize::from(self.head.is_some()) + self.runs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn a_fifo_backlog_is_one_run() {
        let mut s = IdSet::default();
        for id in 0..100_000 {
            assert!(s.insert(id));
        }
        assert_eq!((s.len(), s.runs()), (100_000, 1));
        for id in 0..50_000 {
            assert!(s.remove(id));
        }
        assert_eq!((s.len(), s.runs()), (50_000, 1));
        assert!(!s.contains(49_999) && s.contains(50_000) && !s.contains(100_000));
        assert!(!s.insert(60_000) && !s.remove(10));
    }

    proptest! {
        /// Inserts and removals in any order behave as a `BTreeSet`, and runs stay maximal.
        #[test]
        fn idset_matches_a_btreeset(ops in prop::collection::vec((any::<bool>(), 0u64..64), 0..300)) {
            let mut s = IdSet::default();
            let mut model = BTreeSet::new();
            for (add, id) in ops {
                if add {
                    prop_assert_eq!(s.insert(id), model.insert(id));
                } else {
                    prop_assert_eq!(s.remove(id), model.remove(&id));
                }
                prop_assert_eq!(s.len(), model.len());
                for id in 0..66 {
                    prop_assert_eq!(s.contains(id), model.contains(&id));
                }
                let runs = model.iter().filter(|id| **id == 0 || !model.contains(&(**id - 1))).count();
                prop_assert_eq!(s.runs(), runs);
            }
        }

        /// A FIFO-like stream (ids appended in order, the oldest or a random one leaving, a
        /// few re-inserted) through the head run's fast paths behaves as a `BTreeSet`.
        #[test]
        fn idset_fifo_stream_matches_a_btreeset(ops in prop::collection::vec((0u8..4, 0u64..8), 0..400)) {
            let mut s = IdSet::default();
            let mut model = BTreeSet::new();
            let mut next = 0u64;
            for (op, k) in ops {
                match op {
                    0 | 1 => {
                        prop_assert_eq!(s.insert(next), model.insert(next));
                        next += 1;
                    }
                    2 => {
                        let id = model.iter().nth(k as usize).copied().unwrap_or(next);
                        prop_assert_eq!(s.remove(id), model.remove(&id));
                    }
                    _ => {
                        let id = next.saturating_sub(k + 1);
                        prop_assert_eq!(s.insert(id), model.insert(id));
                    }
                }
                prop_assert_eq!(s.len(), model.len());
                prop_assert_eq!(s.is_empty(), model.is_empty());
                for id in next.saturating_sub(12)..next + 2 {
                    prop_assert_eq!(s.contains(id), model.contains(&id));
                }
                let runs = model.iter().filter(|id| **id == 0 || !model.contains(&(**id - 1))).count();
                prop_assert_eq!(s.runs(), runs);
            }
        }
    }
}
