//! What the management API asks a queue actor beyond its counts: peeking at ready messages
//! (nothing changes: no redelivered flag, no delivery count) and details with the actor's
//! message counters (published, delivered, acked, dead-lettered per reason, dropped per cause).
//! Counters are plain fields of the actor: the actor is their only writer.

use std::sync::Arc;

use charon_core::dead_letter::Reason as DeadReason;
use charon_core::{DeadLetter, Message, MsgId, QueueState};
use tokio::sync::oneshot;

use super::stored::StoreSide;
use crate::handles::QueueStats;

/// Dead-letter reasons in counter order.
pub const REASONS: [DeadReason; 4] = [
    DeadReason::Rejected,
    DeadReason::Expired,
    DeadReason::Maxlen,
    DeadReason::DeliveryLimit,
];

/// A queue's cumulative message counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounters {
    /// Messages enqueued by publishes.
    pub published: u64,
    /// Dead letters received from other queues.
    pub dead_letters_in: u64,
    /// Messages delivered to consumers.
    pub delivered: u64,
    /// Messages fetched with basic.get.
    pub get: u64,
    /// Acknowledged.
    pub acked: u64,
    /// Archived by the direct hand-over (never queued; `queue/direct.rs`), durable.
    pub archived_direct: u64,
    /// Dead-lettered (a DLX was set), by reason in [`REASONS`] order.
    pub dead_lettered: [u64; 4],
    /// Discarded without a DLX, by reason in [`REASONS`] order.
    pub discarded: [u64; 4],
}

impl QueueCounters {
    /// Counts messages that left the queue other than by ack; `has_dlx`: they are dead-lettered
    /// (else discarded).
    pub fn note_dead(&mut self, dead: &[DeadLetter], has_dlx: bool) {
        for d in dead {
            let i = REASONS.iter().position(|r| *r == d.reason).unwrap_or(0);
            if has_dlx {
                self.dead_lettered[i] += 1;
            } else {
                self.discarded[i] += 1;
            }
        }
    }
}

/// A ready message as peeked.
#[derive(Debug, Clone)]
pub struct Peeked {
    /// Its id in the queue.
    pub id: MsgId,
    /// The message, body loaded.
    pub message: Arc<Message>,
    /// Delivered before.
    pub redelivered: bool,
}

/// A queue's details.
#[derive(Debug, Clone, Default)]
pub struct QueueDetails {
    /// Counts.
    pub stats: QueueStats,
    /// Cumulative counters.
    pub counters: QueueCounters,
    /// Body bytes of ready messages.
    pub ready_bytes: u64,
    /// The head message's `timestamp` property (s).
    pub head_timestamp: Option<u64>,
    /// The head message's most recent dead-lettering time (x-death `time`, s), if it has one.
    pub head_death_time: Option<u64>,
    /// Dead letters dropped because the routing reached no queue.
    pub dropped_no_route: u64,
    /// Dead-lettered counts by error fingerprint (`dl_errors`), most frequent first.
    pub errors: Vec<super::dl_errors::ErrorCount>,
}

/// Management queries to a queue actor.
#[derive(Debug)]
pub enum AdminQuery {
    /// Up to `count` ready messages from position `offset`, unchanged.
    Peek {
        /// First position (0 = head).
        offset: usize,
        /// Most messages.
        count: usize,
        /// The messages.
        reply: oneshot::Sender<Vec<Peeked>>,
    },
    /// Counts, counters and head facts.
    Details {
        /// The details.
        reply: oneshot::Sender<QueueDetails>,
    },
}

/// Peeks: the ready messages with their bodies read back when paged out.
pub(super) fn peek(
    state: &QueueState,
    store: Option<&StoreSide>,
    offset: usize,
    count: usize,
) -> Vec<Peeked> {
    state
        .browse_detailed(offset, count)
        .into_iter()
        .map(|b| Peeked {
            id: b.id,
            message: match store {
                Some(s) => s.load(b.id, &b.message),
                None => b.message,
            },
            redelivered: b.redelivered,
        })
        .collect()
}

/// Head facts for details.
pub(super) fn head_facts(state: &QueueState) -> (Option<u64>, Option<u64>) {
    let Some(head) = state.browse(0, 1).into_iter().next() else {
        return (None, None);
    };
    let Ok(props) = head.1.properties.decode() else {
        return (None, None);
    };
    let ts = *props.timestamp();
    let death = props.headers().as_ref().and_then(|h| {
        match h
            .inner()
            .get(&charon_protocol::ShortString::from("x-death"))
        {
            Some(charon_protocol::AMQPValue::FieldArray(a)) => {
                a.as_slice().first().and_then(|e| match e {
                    charon_protocol::AMQPValue::FieldTable(t) => {
                        match t.inner().get(&charon_protocol::ShortString::from("time")) {
                            Some(charon_protocol::AMQPValue::Timestamp(t)) => Some(*t),
                            _ => None,
                        }
                    }
                    _ => None,
                })
            }
            _ => None,
        }
    });
    (ts, death)
}
