//! Publisher confirms of one channel as a pure state machine: sequence numbers, how many
//! answers each publish still waits for (one per queue that takes it, plus one for its store
//! commit), and what to send. Acks are coalesced: everything below the smallest pending
//! publish is acked with `multiple`; a refused publish is nacked alone, after what precedes it
//! is acked.

use std::collections::{BTreeSet, VecDeque};

/// What the channel sends the publisher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConfirmReply {
    /// basic.ack of `seq` (and everything before it, when `multiple`).
    Ack {
        /// Highest sequence number acked.
        seq: u64,
        /// Whether earlier unconfirmed ones are acked with it.
        multiple: bool,
    },
    /// basic.nack of `seq` alone.
    Nack {
        /// The refused publish.
        seq: u64,
    },
}

/// The confirm state of one channel in confirm mode.
#[derive(Debug, Default)]
pub(crate) struct ConfirmTracker {
    /// Last sequence number handed out.
    last_seq: u64,
    /// Answers still awaited by publish `base + i` (0: none: answered, or never expected).
    /// Sequence numbers are dense, so a ring instead of a map: O(1) per publish and answer.
    pending: VecDeque<u32>,
    /// Sequence number of `pending[0]`.
    base: u64,
    /// Highest seq already acked (or nacked) to the client.
    acked_upto: u64,
    /// Refused publishes waiting to be nacked in seq order.
    nacked: BTreeSet<u64>,
}

impl ConfirmTracker {
    /// The next publish's sequence number.
    pub(crate) fn next_seq(&mut self) -> u64 {
        self.last_seq += 1;
        self.last_seq
    }

    /// Publish `seq` waits for `answers` answers (none: it is confirmed at the next flush).
    pub(crate) fn expect(&mut self, seq: u64, answers: u32) {
        if answers == 0 {
            return;
        }
        if self.pending.is_empty() {
            self.base = seq;
        }
        let Some(i) = seq
            .checked_sub(self.base)
            .and_then(|i| usize::try_from(i).ok())
        else {
            return;
        };
        // The usual case: the next seq after the last one pending (a plain push, no resize).
        if self.pending.len() == i {
            self.pending.push_back(answers);
            return;
        }
        if self.pending.len() < i {
            self.pending.resize(i + 1, 0);
        }
        if let Some(slot) = self.pending.get_mut(i) {
            *slot = answers;
        }
    }

    /// One answer for `seq`: a queue took it / its commit is on disk (`ack`), or it was refused
    /// (then it is nacked, whatever else answers).
    pub(crate) fn answer(&mut self, seq: u64, ack: bool) {
        let Some(left) = seq
            .checked_sub(self.base)
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| self.pending.get_mut(i))
            .filter(|left| **left > 0)
        else {
            return;
        };
        if ack {
            *left -= 1;
        } else {
            *left = 0;
            self.nacked.insert(seq);
        }
    }

    /// The same answer for every publish `first..=last` (a batch of answers).
    pub(crate) fn answer_run(&mut self, first: u64, last: u64, ack: bool) {
        if !ack {
            for seq in first..=last {
                self.answer(seq, false);
            }
            return;
        }
        let lo = first.saturating_sub(self.base);
        let Some(hi) = last
            .checked_sub(self.base)
            .and_then(|h| h.checked_add(1))
            .map(|h| h.min(self.pending.len() as u64))
        else {
            return;
        };
        if lo >= hi {
            return;
        }
        for left in self.pending.range_mut(lo as usize..hi as usize) {
            *left = left.saturating_sub(1);
        }
    }

    /// Highest seq confirmed (acked or nacked) so far (management counters).
    pub(crate) fn confirmed(&self) -> u64 {
        self.acked_upto
    }

    /// What can be confirmed now, in the order to send it.
    pub(crate) fn flush(&mut self, out: &mut Vec<ConfirmReply>) {
        while self.pending.front() == Some(&0) {
            self.pending.pop_front();
            self.base += 1;
        }
        let upto = if self.pending.is_empty() {
            self.last_seq
        } else {
            self.base - 1
        };
        while let Some(&n) = self.nacked.first() {
            if n > upto {
                break;
            }
            self.nacked.remove(&n);
            if n - 1 > self.acked_upto {
                out.push(ConfirmReply::Ack {
                    seq: n - 1,
                    multiple: n - 1 - self.acked_upto > 1,
                });
            }
            out.push(ConfirmReply::Nack { seq: n });
            self.acked_upto = n;
        }
        if upto > self.acked_upto {
            out.push(ConfirmReply::Ack {
                seq: upto,
                multiple: upto - self.acked_upto > 1,
            });
            self.acked_upto = upto;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ConfirmReply::{Ack, Nack};
    use super::*;

    fn flush(t: &mut ConfirmTracker) -> Vec<ConfirmReply> {
        let mut out = Vec::new();
        t.flush(&mut out);
        out
    }

    #[test]
    fn an_unroutable_publish_is_acked_at_once() {
        let mut t = ConfirmTracker::default();
        let seq = t.next_seq();
        t.expect(seq, 0);
        assert_eq!(
            flush(&mut t),
            vec![Ack {
                seq: 1,
                multiple: false
            }]
        );
        assert_eq!(flush(&mut t), vec![]);
    }

    #[test]
    fn acks_wait_for_every_answer_and_coalesce() {
        let mut t = ConfirmTracker::default();
        for _ in 0..3 {
            let seq = t.next_seq();
            // Two queues plus the store commit.
            t.expect(seq, 3);
        }
        assert_eq!(flush(&mut t), vec![]);
        for seq in [2, 3] {
            for _ in 0..3 {
                t.answer(seq, true);
            }
        }
        // 1 is still pending: nothing below it to ack.
        assert_eq!(flush(&mut t), vec![]);
        t.answer(1, true);
        t.answer(1, true);
        assert_eq!(flush(&mut t), vec![]);
        t.answer(1, true);
        assert_eq!(
            flush(&mut t),
            vec![Ack {
                seq: 3,
                multiple: true
            }]
        );
    }

    #[test]
    fn a_refused_publish_is_nacked_alone_after_what_precedes_it() {
        let mut t = ConfirmTracker::default();
        for _ in 0..4 {
            let seq = t.next_seq();
            t.expect(seq, 1);
        }
        t.answer(1, true);
        t.answer(2, true);
        t.answer(3, false);
        // A late answer for a refused publish changes nothing.
        t.answer(3, true);
        assert_eq!(
            flush(&mut t),
            vec![
                Ack {
                    seq: 2,
                    multiple: true
                },
                Nack { seq: 3 }
            ]
        );
        t.answer(4, true);
        assert_eq!(
            flush(&mut t),
            vec![Ack {
                seq: 4,
                multiple: false
            }]
        );
    }

    #[test]
    fn answers_in_runs_confirm_like_single_answers() {
        // Two queues and the commit per publish; answers come as runs from each source, in
        // any order among the sources.
        let mut t = ConfirmTracker::default();
        for _ in 0..1000 {
            let seq = t.next_seq();
            t.expect(seq, 3);
        }
        t.answer_run(1, 600, true);
        t.answer_run(1, 1000, true);
        assert_eq!(flush(&mut t), vec![]);
        t.answer_run(1, 400, true);
        assert_eq!(
            flush(&mut t),
            vec![Ack {
                seq: 400,
                multiple: true
            }]
        );
        // A refused run in the middle is nacked seq by seq, after what precedes it is acked.
        t.answer_run(401, 402, false);
        t.answer_run(403, 1000, true);
        t.answer_run(601, 1000, true);
        assert_eq!(
            flush(&mut t),
            vec![
                Nack { seq: 401 },
                Nack { seq: 402 },
                Ack {
                    seq: 1000,
                    multiple: true
                }
            ]
        );
        // Runs reaching past what is pending, or before it, change nothing.
        t.answer_run(1, 2000, true);
        assert_eq!(flush(&mut t), vec![]);
        let seq = t.next_seq();
        t.expect(seq, 1);
        assert_eq!(flush(&mut t), vec![]);
        t.answer_run(seq, seq, true);
        assert_eq!(
            flush(&mut t),
            vec![Ack {
                seq,
                multiple: false
            }]
        );
    }

    #[test]
    fn publishes_without_answers_between_tracked_ones_are_confirmed_in_order() {
        let mut t = ConfirmTracker::default();
        let a = t.next_seq();
        t.expect(a, 1);
        let b = t.next_seq();
        t.expect(b, 0); // unroutable: nothing to wait for
        let c = t.next_seq();
        t.expect(c, 1);
        t.answer(c, true);
        assert_eq!(flush(&mut t), vec![]);
        t.answer(a, true);
        assert_eq!(
            flush(&mut t),
            vec![Ack {
                seq: c,
                multiple: true
            }]
        );
        // A long run of unroutable publishes, then a tracked one: no room kept for the gap.
        for _ in 0..100_000 {
            let s = t.next_seq();
            t.expect(s, 0);
        }
        let d = t.next_seq();
        t.expect(d, 1);
        assert!(t.pending.len() <= 1);
        t.answer(d, true);
        assert_eq!(
            flush(&mut t),
            vec![Ack {
                seq: d,
                multiple: true
            }]
        );
    }

    #[test]
    fn consecutive_nacks_go_out_one_by_one() {
        let mut t = ConfirmTracker::default();
        for _ in 0..2 {
            let seq = t.next_seq();
            t.expect(seq, 1);
        }
        t.answer(2, false);
        t.answer(1, false);
        assert_eq!(flush(&mut t), vec![Nack { seq: 1 }, Nack { seq: 2 }]);
        assert_eq!(t.next_seq(), 3);
    }

    /// The tracker's ring against a plain map of what each publish still waits for.
    #[derive(Default)]
    struct Model {
        last_seq: u64,
        left: std::collections::BTreeMap<u64, u32>,
        nacked: BTreeSet<u64>,
        acked_upto: u64,
    }

    impl Model {
        fn answer(&mut self, seq: u64, ack: bool) {
            if let Some(left) = self.left.get_mut(&seq).filter(|l| **l > 0) {
                if ack {
                    *left -= 1;
                } else {
                    *left = 0;
                    self.nacked.insert(seq);
                }
            }
        }

        fn flush(&mut self) -> Vec<ConfirmReply> {
            let mut out = Vec::new();
            let upto = self
                .left
                .iter()
                .find(|(_, l)| **l > 0)
                .map_or(self.last_seq, |(s, _)| s - 1);
            while let Some(&n) = self.nacked.first().filter(|n| **n <= upto) {
                self.nacked.remove(&n);
                if n - 1 > self.acked_upto {
                    out.push(Ack {
                        seq: n - 1,
                        multiple: n - 1 - self.acked_upto > 1,
                    });
                }
                out.push(Nack { seq: n });
                self.acked_upto = n;
            }
            if upto > self.acked_upto {
                out.push(Ack {
                    seq: upto,
                    multiple: upto - self.acked_upto > 1,
                });
                self.acked_upto = upto;
            }
            out
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// A publish waiting for this many answers.
        Publish(u32),
        /// An answer for the publish this far back from the newest.
        Answer(u64, bool),
        /// The same answer for a run of publishes (back, length).
        Run(u64, u64, bool),
        Flush,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0u32..4).prop_map(Op::Publish),
            3 => (0u64..12, proptest::bool::weighted(0.9)).prop_map(|(b, a)| Op::Answer(b, a)),
            1 => (0u64..12, 1u64..6, proptest::bool::weighted(0.9)).prop_map(|(b, l, a)| Op::Run(b, l, a)),
            2 => Just(Op::Flush),
        ]
    }

    proptest::proptest! {
        #[test]
        fn the_ring_confirms_as_a_map_of_waiting_publishes(
            ops in proptest::collection::vec(op(), 1..300)
        ) {
            let mut t = ConfirmTracker::default();
            let mut m = Model::default();
            for op in ops {
                match op {
                    Op::Publish(n) => {
                        let seq = t.next_seq();
                        m.last_seq = seq;
                        t.expect(seq, n);
                        if n > 0 {
                            m.left.insert(seq, n);
                        }
                    }
                    Op::Answer(back, ack) => {
                        let seq = m.last_seq.saturating_sub(back);
                        t.answer(seq, ack);
                        m.answer(seq, ack);
                    }
                    Op::Run(back, len, ack) => {
                        let first = m.last_seq.saturating_sub(back);
                        let last = first + len - 1;
                        t.answer_run(first, last, ack);
                        for seq in first..=last {
                            m.answer(seq, ack);
                        }
                    }
                    Op::Flush => proptest::prop_assert_eq!(flush(&mut t), m.flush()),
                }
            }
            proptest::prop_assert_eq!(flush(&mut t), m.flush());
        }
    }
}
