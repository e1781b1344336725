//! Publisher confirms of one channel as a pure state machine: sequence numbers, how many
//! answers each publish still waits for (one per queue that takes it, plus one for its store
//! commit), and what to send. Acks are coalesced: everything below the smallest pending
//! publish is acked with `multiple`; a refused publish is nacked alone, after what precedes it
//! is acked.

use std::collections::{BTreeMap, BTreeSet};

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
    /// seq → answers still awaited.
    pending: BTreeMap<u64, u32>,
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
        if answers > 0 {
            self.pending.insert(seq, answers);
        }
    }

    /// One answer for `seq`: a queue took it / its commit is on disk (`ack`), or it was refused
    /// (then it is nacked, whatever else answers).
    pub(crate) fn answer(&mut self, seq: u64, ack: bool) {
        let Some(left) = self.pending.get_mut(&seq) else {
            return;
        };
        *left = left.saturating_sub(1);
        if !ack {
            self.pending.remove(&seq);
            self.nacked.insert(seq);
        } else if *left == 0 {
            self.pending.remove(&seq);
        }
    }

    /// Highest seq confirmed (acked or nacked) so far (management counters).
    pub(crate) fn confirmed(&self) -> u64 {
        self.acked_upto
    }

    /// What can be confirmed now, in the order to send it.
    pub(crate) fn flush(&mut self, out: &mut Vec<ConfirmReply>) {
        let upto = match self.pending.keys().next() {
            Some(first) => first - 1,
            None => self.last_seq,
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
}
