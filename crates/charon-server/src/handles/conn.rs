//! Events that queue actors send to a connection task, and the handle they send them through;
//! also the broker's rare signals to a connection ([`Control`]: shutdown, a management close,
//! a resource alarm change), sent rather than waited on in every turn of the connection loop.
//!
//! The channel is unbounded in type but bounded in practice: deliveries take credit from
//! [`ConnFlow`] (at most [`super::MAX_PENDING_DELIVERIES`] unwritten) and from the channel's
//! prefetch; confirms are bounded by the publisher's own in-flight publishes, which wait on the
//! bounded queue command channels.

use std::sync::Arc;

use charon_core::Delivery;
use tokio::sync::mpsc;

use super::flow::ConnFlow;
use super::queue::QueueHandle;

/// What a queue tells a connection.
#[derive(Debug)]
pub enum ConnEvent {
    /// Messages for one consumer, in queue order; delivery tags are assigned by the connection.
    Deliver {
        /// Channel of the consumer.
        channel: u16,
        /// Consumer tag.
        consumer_tag: Arc<str>,
        /// Whether the consumer is no-ack (nothing to track).
        no_ack: bool,
        /// The queue, for acks.
        queue: QueueHandle,
        /// The deliveries.
        deliveries: Vec<Delivery>,
    },
    /// A publish with confirms was accepted (`ack`) or refused by one queue.
    Confirm {
        /// Publishing channel.
        channel: u16,
        /// Publish sequence number on that channel.
        seq: u64,
        /// Accepted or refused.
        ack: bool,
    },
    /// Answers for many publishes of one channel at once (a queue actor's batch, a group
    /// commit): each as [`ConnEvent::Confirm`] would give it, in order.
    Confirms {
        /// Publishing channel.
        channel: u16,
        /// (seq, accepted) runs.
        answers: super::ConfirmAnswers,
    },
    /// The queue was deleted under a consumer: send basic.cancel (consumer_cancel_notify).
    ConsumerCancelled {
        /// Channel of the consumer.
        channel: u16,
        /// Consumer tag.
        consumer_tag: Arc<str>,
    },
    /// A signal from the broker (through the connection registry, `admin::connections`).
    Control(Control),
}

/// The broker's rare signals to a connection. They used to be futures (a cancellation token, a
/// `Notify`, a `watch`) that the connection loop polled on every wake-up; as events they cost
/// nothing until they are sent (docs/performance.md, "Persistent/transient path, part 10").
#[derive(Debug)]
pub enum Control {
    /// The broker is shutting down: close with 320 CONNECTION_FORCED.
    Shutdown,
    /// Management asked to close the connection (320 with this reason).
    Close(String),
    /// The resource alarms changed: the connection reads their current state.
    AlarmChanged,
}

/// How queues reach one connection.
#[derive(Debug, Clone)]
pub struct ConnHandle {
    tx: mpsc::UnboundedSender<ConnEvent>,
    flow: Arc<ConnFlow>,
}

impl ConnHandle {
    /// A handle plus the receiver the connection task drains.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<ConnEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Self {
                tx,
                flow: Arc::new(ConnFlow::default()),
            },
            rx,
        )
    }

    /// The connection's delivery credit.
    pub fn flow(&self) -> &ConnFlow {
        &self.flow
    }

    /// The connection's delivery credit, shared with its writer task.
    pub fn flow_arc(&self) -> Arc<ConnFlow> {
        self.flow.clone()
    }

    /// Whether both handles reach the same connection.
    pub fn same(&self, other: &ConnHandle) -> bool {
        self.tx.same_channel(&other.tx)
    }

    /// Sends an event; false if the connection is gone.
    pub fn send(&self, event: ConnEvent) -> bool {
        self.tx.send(event).is_ok()
    }
}
