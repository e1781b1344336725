//! Publisher-confirm answers in batches: a queue actor (or the connection's commit waiter)
//! gathers the answers of one batch of work per publishing channel and sends them as one
//! [`super::ConnEvent::Confirms`] instead of one event per publish. Sequence numbers of one
//! channel arrive in increasing order, so the answers are kept as runs.

use super::conn::{ConnEvent, ConnHandle};

/// Answers for publishes of one channel: runs of consecutive sequence numbers with one
/// outcome each (accepted, or refused), in the order they were given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfirmAnswers {
    /// (first seq, last seq, accepted).
    runs: Vec<(u64, u64, bool)>,
}

impl ConfirmAnswers {
    /// One more answer (extends the last run when it follows it with the same outcome).
    pub fn push(&mut self, seq: u64, ack: bool) {
        if let Some((_, last, a)) = self.runs.last_mut()
            && *a == ack
            && last.checked_add(1) == Some(seq)
        {
            *last = seq;
            return;
        }
        self.runs.push((seq, seq, ack));
    }

    /// Every answer, in order: (seq, accepted).
    pub fn iter(&self) -> impl Iterator<Item = (u64, bool)> + '_ {
        self.runs
            .iter()
            .flat_map(|&(first, last, ack)| (first..=last).map(move |s| (s, ack)))
    }

    /// The runs: (first seq, last seq, accepted).
    pub fn runs(&self) -> &[(u64, u64, bool)] {
        &self.runs
    }

    /// How many answers.
    pub fn len(&self) -> u64 {
        self.runs.iter().map(|(f, l, _)| l - f + 1).sum()
    }

    /// No answer.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
}

/// The answers a queue actor (or commit waiter) owes, per (connection, channel), sent at the
/// end of its batch by [`ConfirmBatch::flush`].
#[derive(Debug, Default)]
pub struct ConfirmBatch {
    pending: Vec<(ConnHandle, u16, ConfirmAnswers)>,
}

impl ConfirmBatch {
    /// Publish `seq` of `conn`'s `channel` was accepted (`ack`) or refused.
    pub fn add(&mut self, conn: &ConnHandle, channel: u16, seq: u64, ack: bool) {
        // Few publishers per batch: the last entry almost always matches.
        let found = self
            .pending
            .iter_mut()
            .rev()
            .find(|(c, ch, _)| *ch == channel && c.same(conn));
        match found {
            Some((_, _, answers)) => answers.push(seq, ack),
            None => {
                let mut answers = ConfirmAnswers::default();
                answers.push(seq, ack);
                self.pending.push((conn.clone(), channel, answers));
            }
        }
    }

    /// Sends one event per (connection, channel) with everything gathered.
    pub fn flush(&mut self) {
        for (conn, channel, answers) in self.pending.drain(..) {
            let _ = conn.send(ConnEvent::Confirms { channel, answers });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_answers_make_runs_and_come_back_in_order() {
        let mut a = ConfirmAnswers::default();
        for s in 1..=5 {
            a.push(s, true);
        }
        a.push(6, false);
        a.push(7, true);
        a.push(9, true);
        assert_eq!(
            a.runs(),
            &[(1, 5, true), (6, 6, false), (7, 7, true), (9, 9, true)]
        );
        assert_eq!(a.len(), 8);
        let all: Vec<_> = a.iter().collect();
        assert_eq!(
            all,
            vec![
                (1, true),
                (2, true),
                (3, true),
                (4, true),
                (5, true),
                (6, false),
                (7, true),
                (9, true)
            ]
        );
    }

    #[tokio::test]
    async fn a_batch_sends_one_event_per_connection_and_channel() {
        let (c1, mut r1) = ConnHandle::new();
        let (c2, mut r2) = ConnHandle::new();
        let mut b = ConfirmBatch::default();
        for s in 1..=100 {
            b.add(&c1, 1, s, true);
            b.add(&c2, 1, s, s != 50);
        }
        b.add(&c1, 2, 7, true);
        b.flush();
        let mut got1 = Vec::new();
        while let Ok(ev) = r1.try_recv() {
            got1.push(ev);
        }
        assert_eq!(got1.len(), 2);
        match &got1[..] {
            [
                ConnEvent::Confirms {
                    channel: 1,
                    answers: a,
                },
                ConnEvent::Confirms {
                    channel: 2,
                    answers: b,
                },
            ] => {
                assert_eq!(a.runs(), &[(1, 100, true)]);
                assert_eq!(b.runs(), &[(7, 7, true)]);
            }
            other => panic!("unexpected events {other:?}"),
        }
        match r2.try_recv() {
            Ok(ConnEvent::Confirms {
                channel: 1,
                answers,
            }) => {
                assert_eq!(
                    answers.runs(),
                    &[(1, 49, true), (50, 50, false), (51, 100, true)]
                );
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(r2.try_recv().is_err());
    }
}
