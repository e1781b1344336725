//! An archive queue's direct hand-over (docs/archive.md, "Sixteenth round, ingest"): while the
//! queue is empty (nothing ready, nothing unacked), its archiver is its only consumer and keeps
//! up (fewer than [`IN_FLIGHT_MAX`] direct messages not yet durable in the archive), a message
//! routed to it is not queued: it goes to the archiver over a bounded channel, one batch per
//! actor turn. The store holds it exactly as it would for the queue (the publisher's or the
//! dead-lettering queue's record names this queue), so confirms and the source's settle are
//! today's; the archiver settles it in the store only once its archive batch is durable, or gives
//! it back to be queued. What this module owns: the sender, the turn's messages, the count in
//! flight.

use charon_core::QueueState;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use crate::handles::Placed;

/// Direct messages handed over and not yet durable in the archive (nor given back) at most: a
/// few of the archiver's batches (it writes up to 4,000 at a time). Past it the queue queues.
pub(crate) const IN_FLIGHT_MAX: usize = 12_000;
/// Body bytes in flight at most (large bodies: the count alone would let gigabytes wait).
pub(crate) const IN_FLIGHT_MAX_BYTES: u64 = 64 << 20;

/// Batches (one per actor turn) the channel holds.
pub(crate) const CHANNEL_BATCHES: usize = 256;

/// The queue's side of the direct hand-over.
#[derive(Default)]
pub(super) struct DirectSide {
    /// The archiver's channel, once it asked for direct messages.
    tx: Option<mpsc::Sender<Vec<Placed>>>,
    /// Handed over, not yet settled or given back.
    in_flight: usize,
    /// Their body bytes, and those of this turn's.
    bytes: u64,
    /// This turn's direct messages, sent by [`DirectSide::flush`].
    out: Vec<Placed>,
}

impl DirectSide {
    /// The archiver asks for direct messages (a later archiver replaces an earlier one).
    pub(super) fn attach(&mut self, tx: mpsc::Sender<Vec<Placed>>) {
        self.tx = Some(tx);
    }

    /// Whether `placed` may go to the archiver directly instead of into `state`: an archiver is
    /// attached and is the only consumer, the queue holds nothing (so order is kept: every
    /// queued message was archived and settled before), there is room in flight, the message's
    /// body is in memory, and no setting needs the queue to hold the message (length limits
    /// count queued messages only; retries and priorities act on queued ones).
    pub(super) fn wants(&self, state: &QueueState, placed: &Placed) -> bool {
        if self.tx.is_none()
            || self.in_flight + self.out.len() >= IN_FLIGHT_MAX
            || self.bytes + placed.message.body_size() > IN_FLIGHT_MAX_BYTES
        {
            return false;
        }
        let a = state.args();
        state.message_count() == 0
            && state.unacked_count() == 0
            && state.consumer_count() == 1
            && a.max_length.is_none()
            && a.max_length_bytes.is_none()
            && a.retry.is_none()
            && a.max_priority.is_none()
            && placed.message.body.resident().is_some()
    }

    /// Takes `placed` for this turn's batch.
    pub(super) fn take(&mut self, placed: Placed) {
        self.bytes += placed.message.body_size();
        self.out.push(placed);
    }

    /// Whether this turn took any.
    pub(super) fn has_out(&self) -> bool {
        !self.out.is_empty()
    }

    /// Sends this turn's messages to the archiver; gives back those the channel did not take
    /// (full, or the archiver gone), for the queue to hold, in order.
    pub(super) fn flush(&mut self) -> Vec<Placed> {
        if self.out.is_empty() {
            return Vec::new();
        }
        let batch = std::mem::take(&mut self.out);
        let n = batch.len();
        let Some(tx) = self.tx.as_ref() else {
            return batch;
        };
        match tx.try_send(batch) {
            Ok(()) => {
                self.in_flight += n;
                Vec::new()
            }
            Err(TrySendError::Full(b)) => self.not_sent(b),
            Err(TrySendError::Closed(b)) => {
                self.tx = None;
                self.not_sent(b)
            }
        }
    }

    /// A batch the channel did not take: its bytes are not in flight.
    fn not_sent(&mut self, batch: Vec<Placed>) -> Vec<Placed> {
        let bytes: u64 = batch.iter().map(|p| p.message.body_size()).sum();
        self.bytes = self.bytes.saturating_sub(bytes);
        batch
    }

    /// `n` direct messages of `bytes` body bytes left flight (archived and durable, or given
    /// back).
    pub(super) fn settled(&mut self, n: usize, bytes: u64) {
        self.in_flight = self.in_flight.saturating_sub(n);
        self.bytes = self.bytes.saturating_sub(bytes);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use charon_core::{ConsumerSpec, Message, QueueArgs};
    use charon_protocol::RawProperties;

    use super::*;

    fn placed(id: u64) -> Placed {
        Placed {
            message: Arc::new(Message::new(
                Arc::from(""),
                Arc::from("q"),
                RawProperties::empty(),
                Bytes::from_static(b"x"),
            )),
            id,
            stored: None,
        }
    }

    fn state(args: QueueArgs) -> QueueState {
        let mut s = QueueState::new(Arc::from("q"), args);
        let spec = ConsumerSpec {
            no_ack: false,
            prefetch: 16000,
            exclusive: false,
        };
        assert!(s.add_consumer(1, spec).is_ok());
        s
    }

    #[test]
    fn direct_only_with_an_archiver_an_empty_queue_and_no_length_limit() {
        let mut d = DirectSide::default();
        let s = state(QueueArgs::default());
        assert!(!d.wants(&s, &placed(1)), "no archiver attached");
        let (tx, mut rx) = mpsc::channel(CHANNEL_BATCHES);
        d.attach(tx);
        assert!(d.wants(&s, &placed(1)));
        let limited = state(QueueArgs {
            max_length: Some(10),
            ..QueueArgs::default()
        });
        assert!(
            !d.wants(&limited, &placed(1)),
            "max-length counts queued messages"
        );
        let mut busy = state(QueueArgs::default());
        busy.publish_as(5, placed(5).message, 0);
        assert!(!d.wants(&busy, &placed(6)), "the queue holds a message");
        d.take(placed(1));
        d.take(placed(2));
        assert!(d.flush().is_empty());
        let got = rx
            .try_recv()
            .map(|b| b.iter().map(|p| p.id).collect::<Vec<_>>());
        assert_eq!(got.ok(), Some(vec![1, 2]));
        assert_eq!((d.in_flight, d.bytes), (2, 2));
        d.settled(2, 2);
        assert_eq!((d.in_flight, d.bytes), (0, 0));
        d.bytes = IN_FLIGHT_MAX_BYTES;
        assert!(!d.wants(&s, &placed(3)), "the window's bytes are full");
    }

    #[test]
    fn a_full_window_queues_and_a_gone_archiver_gives_everything_back() {
        let mut d = DirectSide::default();
        let s = state(QueueArgs::default());
        let (tx, rx) = mpsc::channel(CHANNEL_BATCHES);
        d.attach(tx);
        d.in_flight = IN_FLIGHT_MAX - 1;
        assert!(d.wants(&s, &placed(1)));
        d.take(placed(1));
        assert!(!d.wants(&s, &placed(2)), "the window is full");
        assert!(d.flush().is_empty());
        drop(rx);
        d.settled(IN_FLIGHT_MAX, 1);
        d.take(placed(3));
        d.take(placed(4));
        let back: Vec<u64> = d.flush().iter().map(|p| p.id).collect();
        assert_eq!(back, vec![3, 4]);
        assert!(!d.wants(&s, &placed(5)), "the archiver is gone");
    }
}
