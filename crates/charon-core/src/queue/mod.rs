//! The state of one queue (ready messages, unacknowledged deliveries,
//! consumers), owned by one actor in the server. Pure: time comes in as
//! `now_ms`.

mod consumers;
pub mod quorum;
mod state;

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod priority_tests;
#[cfg(test)]
mod rule_tests;

use std::sync::Arc;

use crate::dead_letter::Reason;
use crate::message::Message;

pub use state::{Browsed, QueueState};

/// Queue-local message id, increasing in publish order.
pub type MsgId = u64;
/// Consumer id, assigned by the server, unique per broker.
pub type ConsumerId = u64;

/// How a consumer consumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConsumerSpec {
    /// Deliveries are settled on send.
    pub no_ack: bool,
    /// Max unacked deliveries to this consumer (0 = unlimited).
    pub prefetch: u16,
    /// basic.consume exclusive flag.
    pub exclusive: bool,
}

/// One message handed to a consumer.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// Receiving consumer.
    pub consumer: ConsumerId,
    /// Message id (to ack/requeue/reject).
    pub id: MsgId,
    /// The message.
    pub message: Arc<Message>,
    /// Delivered before.
    pub redelivered: bool,
    /// Times returned to the queue before (quorum queues' `x-delivery-count`).
    pub returns: u32,
    /// The store's id of the message when the store holds it for this queue (set by the server;
    /// unique across restarts: the dead-letter archive keys its records by it).
    pub stored: Option<u64>,
}

/// A message that left its queue for `reason`, to be dead-lettered (or dropped when the queue
/// has no dead-letter exchange).
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    /// The message as it sat in the queue.
    pub message: Arc<Message>,
    /// Why it left.
    pub reason: Reason,
    /// Its id in the queue (`None` for a publish refused by `reject-publish-dlx`, which never
    /// entered the queue).
    pub id: Option<MsgId>,
}

/// What became of a publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishOutcome {
    /// Enqueued under this id.
    Enqueued(MsgId),
    /// Refused by a full queue (`reject-publish` / `reject-publish-dlx`); the publisher gets a
    /// nack under confirms. `dead_lettered`: it was also dead-lettered (reason `maxlen`).
    Rejected {
        /// Whether it became a dead letter.
        dead_lettered: bool,
    },
}

impl PublishOutcome {
    /// The id when enqueued.
    pub fn id(self) -> Option<MsgId> {
        match self {
            PublishOutcome::Enqueued(id) => Some(id),
            PublishOutcome::Rejected { .. } => None,
        }
    }
}

/// Result of basic.get.
#[derive(Debug, Clone, PartialEq)]
pub struct GetResult {
    /// Message id.
    pub id: MsgId,
    /// The message.
    pub message: Arc<Message>,
    /// Delivered before.
    pub redelivered: bool,
    /// Ready messages left after this get.
    pub remaining: u32,
    /// Times returned to the queue before.
    pub returns: u32,
}
