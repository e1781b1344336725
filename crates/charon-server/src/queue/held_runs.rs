//! [`HeldRuns`]: the small transient bodies a queue holds in memory and counts against the
//! budget, as runs of consecutive ids with one body size each (a steady publisher's backlog is
//! one run), instead of a hash map entry and a deque slot a message (~40 bytes each: more than
//! a 16-byte body it could page out; scenario e's 1M expiring messages, docs/performance.md).
//! They join the per-message tracking (`StoreSide::bodies`) only when the budget is exceeded
//! and they may have to be paged out.

use std::collections::VecDeque;

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

/// Held small bodies by id.
#[derive(Debug, Default)]
pub(crate) struct HeldRuns {
    runs: VecDeque<Run>,
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
        let at = self.runs.partition_point(|r| r.first <= id);
        if let Some(p) = at.checked_sub(1).and_then(|p| self.runs.get_mut(p)) {
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
            at,
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
        let i = self
            .runs
            .partition_point(|r| r.first <= id)
            .checked_sub(1)?;
        let r = *self.runs.get(i)?;
        if id >= r.end() {
            return None;
        }
        if r.n == 1 {
            self.runs.remove(i);
        } else if id == r.first {
            if let Some(x) = self.runs.get_mut(i) {
                x.first += 1;
                x.n -= 1;
            }
        } else if id + 1 == r.end() {
            if let Some(x) = self.runs.get_mut(i) {
                x.n -= 1;
            }
        } else {
            let left = (id - r.first) as u32;
            if let Some(x) = self.runs.get_mut(i) {
                x.n = left;
            }
            self.runs.insert(
                i + 1,
                Run {
                    first: id + 1,
                    n: r.n - left - 1,
                    bytes: r.bytes,
                },
            );
        }
        self.len -= 1;
        self.bytes -= u64::from(r.bytes);
        let cap = self.runs.capacity();
        if cap > 1024 && self.runs.len() * 4 < cap {
            self.runs.shrink_to(self.runs.len() * 2);
        }
        Some(r.bytes)
    }

    /// Takes every held body out, in id order: (id, bytes).
    pub(crate) fn take_all(&mut self) -> Vec<(MsgId, u32)> {
        let out = self
            .runs
            .iter()
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
                prop_assert!(h.runs.iter().zip(h.runs.iter().skip(1)).all(|(a, b)| a.end() <= b.first));
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
