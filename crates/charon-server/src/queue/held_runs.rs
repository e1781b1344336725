//! [`HeldRuns`]: the small transient bodies a queue holds in memory and counts against the
//! budget, as runs of consecutive ids with one body size each (a steady publisher's backlog is
//! one run), instead of a hash map entry and a deque slot a message (~40 bytes each: more than
//! a 16-byte body it could page out; scenario e's 1M expiring messages, docs/performance.md).
//! They join the per-message tracking (`StoreSide::bodies`) only when the budget is exceeded
//! and they may have to be paged out.

use std::collections::BTreeMap;

use charon_core::MsgId;

/// Ids `first .. first + n`, each holding a body of `bytes` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    first: MsgId,
    n: u32,
    bytes: u32,
}

impl Run {
    fn end(&self) -> MsgId {
        self.first + u64::from(self.n)
    }
}

/// Held small bodies by id: runs by their first id, never overlapping. A B-tree, so that
/// removing an id from the middle of a run (a retried or a consumed-out-of-order message) costs
/// O(log runs): the sorted `VecDeque` this was at first shifted every later run for it, which
/// took the queue actor 20–40 ms per turn once a retried backlog had split into many runs
/// (release lateness of parked retries, docs/retries.md).
#[derive(Debug, Default)]
pub(crate) struct HeldRuns {
    runs: BTreeMap<MsgId, Run>,
    /// Bodies held.
    len: usize,
    /// Their bytes.
    bytes: u64,
}

impl HeldRuns {
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of all held bodies.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Message `id` (not held yet) holds a body of `bytes` bytes.
    pub(crate) fn insert(&mut self, id: MsgId, bytes: u32) {
        if let Some((_, p)) = self.runs.range_mut(..=id).next_back() {
            if id < p.end() {
                return; // already held
            }
            if p.end() == id && p.bytes == bytes && p.n < u32::MAX {
                p.n += 1;
                self.len += 1;
                self.bytes += u64::from(bytes);
                return;
            }
        }
        self.runs.insert(
            id,
            Run {
                first: id,
                n: 1,
                bytes,
            },
        );
        self.len += 1;
        self.bytes += u64::from(bytes);
    }

    /// Message `id` no longer holds its body: its size, when it was held here.
    pub(crate) fn remove(&mut self, id: MsgId) -> Option<u32> {
        let (_, run) = self.runs.range_mut(..=id).next_back()?;
        let r = *run;
        if id >= r.end() {
            return None;
        }
        if id + 1 == r.end() && r.n > 1 {
            // The last of its run: shortened in place.
            run.n -= 1;
        } else {
            self.runs.remove(&r.first);
            if id > r.first {
                let n = (id - r.first) as u32;
                self.runs.insert(r.first, Run { n, ..r });
            }
            if id + 1 < r.end() {
                let first = id + 1;
                let n = (r.end() - first) as u32;
                self.runs.insert(first, Run { first, n, ..r });
            }
        }
        self.len -= 1;
        self.bytes -= u64::from(r.bytes);
        Some(r.bytes)
    }

    /// Takes every held body out, in id order: (id, bytes).
    pub(crate) fn take_all(&mut self) -> Vec<(MsgId, u32)> {
        let out = self
            .runs
            .values()
            .flat_map(|r| (r.first..r.end()).map(move |id| (id, r.bytes)))
            .collect();
        *self = HeldRuns::default();
        out
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
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u64..120, 1u32..3).prop_map(|(i, b)| Op::Insert(i, b)),
            2 => (0u64..120).prop_map(Op::Remove),
        ]
    }

    proptest! {
        /// Runs behave as a map of id → size.
        #[test]
        fn runs_match_a_map(ops in prop::collection::vec(op(), 0..300)) {
            let mut h = HeldRuns::default();
            let mut model: BTreeMap<u64, u32> = BTreeMap::new();
            for o in ops {
                match o {
                    Op::Insert(id, b) => {
                        h.insert(id, b);
                        model.entry(id).or_insert(b);
                    }
                    Op::Remove(id) => prop_assert_eq!(h.remove(id), model.remove(&id)),
                }
                prop_assert_eq!(h.len, model.len());
                prop_assert_eq!(h.bytes(), model.values().map(|b| u64::from(*b)).sum::<u64>());
                prop_assert!(h.runs.values().zip(h.runs.values().skip(1)).all(|(a, b)| a.end() <= b.first));
                prop_assert!(h.runs.iter().all(|(k, r)| *k == r.first && r.n > 0));
            }
            let all = h.take_all();
            prop_assert_eq!(all, model.into_iter().collect::<Vec<_>>());
            prop_assert!(h.is_empty());
        }
    }

    #[test]
    fn a_steady_backlog_is_one_run() {
        let mut h = HeldRuns::default();
        for id in 0..100_000 {
            h.insert(id, 16);
        }
        assert_eq!(h.runs.len(), 1);
        for id in 0..50_000 {
            assert_eq!(h.remove(id), Some(16));
        }
        assert_eq!((h.runs.len(), h.bytes()), (1, 50_000 * 16));
    }
}
