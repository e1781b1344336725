//! [`IdSet`]: a set of a queue's message ids kept as runs of consecutive ids. A queue's ids
//! are handed out in order, and which of them the store holds (all of a durable queue's
//! persistent backlog, typically) forms a few long runs, so a backlog of millions costs a few
//! B-tree entries instead of a hash-map entry per message (docs/performance.md,
//! "Position-based recovery").

use std::collections::BTreeMap;

/// Message ids as runs `start → end` (end exclusive), never adjacent or overlapping.
#[derive(Debug, Default, Clone)]
pub(crate) struct IdSet {
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

    /// The run holding `id`, or the one before it.
    fn run_at(&self, id: u64) -> Option<(u64, u64)> {
        self.runs.range(..=id).next_back().map(|(s, e)| (*s, *e))
    }

    pub(crate) fn contains(&self, id: u64) -> bool {
        // The common cases without a range search: the first run (a FIFO queue's oldest
        // messages, being delivered and settled) and the last (the newest).
        if let Some((s, e)) = self.runs.first_key_value()
            && *s <= id
            && id < *e
        {
            return true;
        }
        if let Some((s, e)) = self.runs.last_key_value()
            && *s <= id
        {
            return id < *e;
        }
        self.run_at(id).is_some_and(|(_, e)| id < e)
    }

    /// Add `id`; false when it was there already.
    pub(crate) fn insert(&mut self, id: u64) -> bool {
        // Ids are handed out from 0 upwards: `u64::MAX` is never one.
        let Some(next) = id.checked_add(1) else {
            return false;
        };
        // The common case: the id after the last run's end.
        if let Some(mut last) = self.runs.last_entry()
            && *last.get() == id
        {
            *last.get_mut() = next;
            self.len += 1;
            return true;
        }
        let before = self.run_at(id);
        if before.is_some_and(|(_, e)| id < e) {
            return false;
        }
        let joins_before = before.filter(|(_, e)| *e == id).map(|(s, _)| s);
        let after_end = self.runs.remove(&next);
        let start = joins_before.unwrap_or(id);
        self.runs.insert(start, after_end.unwrap_or(next));
        self.len += 1;
        true
    }

    /// Remove `id`; false when it was not there.
    pub(crate) fn remove(&mut self, id: u64) -> bool {
        // The common case: the oldest id of a FIFO queue leaves (no range search).
        if let Some(first) = self.runs.first_entry()
            && *first.key() == id
        {
            let e = first.remove();
            if id + 1 < e {
                self.runs.insert(id + 1, e);
            }
            self.len -= 1;
            return true;
        }
        let Some((s, e)) = self.run_at(id).filter(|(_, e)| id < *e) else {
            return false;
        };
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

    /// Runs held (for tests and sizes).
    #[cfg(test)]
    fn runs(&self) -> usize {
        self.runs.len()
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
    }
}
