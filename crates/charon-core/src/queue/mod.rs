//! The state of one queue (ready messages, unacknowledged deliveries,
//! consumers), owned by one actor in the server. Pure: time comes in as
//! `now_ms`.

mod consumers;
mod state;

#[cfg(test)]
mod model_tests;

use std::sync::Arc;

use crate::message::Message;

pub use state::QueueState;

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
}
