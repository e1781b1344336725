//! Per-channel state held by the connection task.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::BytesMut;
use charon_core::{ConsumerId, MsgId};
use charon_protocol::CLASS_BASIC;

use super::confirms::ConfirmTracker;
use crate::error::{AmqpError, ServerError};
use crate::handles::{ChannelLimit, QueueHandle};

/// A publish waiting for its content header and body frames.
#[derive(Debug)]
pub(crate) struct PendingPublish {
    /// Exchange and routing key, shared with the channel's previous publish when alike
    /// (`shapes`).
    pub(crate) exchange: Arc<str>,
    pub(crate) routing_key: Arc<str>,
    pub(crate) mandatory: bool,
    pub(crate) header: Option<(u64, charon_protocol::RawProperties)>,
    pub(crate) body: BytesMut,
    /// A body that came in one frame (small ones kept in place, `shapes::BodyPart::into_body`).
    pub(crate) first_body: Option<charon_core::Body>,
}

impl PendingPublish {
    /// A publish of `exchange`/`routing_key` waiting for its content.
    pub(crate) fn new(
        shapes: &mut super::shapes::Shapes,
        exchange: &str,
        routing_key: &str,
        mandatory: bool,
    ) -> Self {
        let (exchange, routing_key) = shapes.names(exchange, routing_key);
        Self::named(exchange, routing_key, mandatory)
    }

    /// A publish of names already shared (`Shapes::names_of`) waiting for its content.
    pub(crate) fn named(exchange: Arc<str>, routing_key: Arc<str>, mandatory: bool) -> Self {
        Self {
            exchange,
            routing_key,
            mandatory,
            header: None,
            body: BytesMut::new(),
            first_body: None,
        }
    }

    /// 505 for a frame other than the content this publish waits for: its header first, then
    /// body frames (RabbitMQ's `rabbit_command_assembler` texts, reported on basic.publish).
    pub(crate) fn content_expected(&self) -> AmqpError {
        let err = if self.header.is_some() {
            ServerError::ContentBodyExpected
        } else {
            ServerError::ContentHeaderExpected
        };
        AmqpError::from(err).on(CLASS_BASIC, PUBLISH_METHOD_ID)
    }
}

/// Method id of basic.publish.
pub(crate) const PUBLISH_METHOD_ID: u16 = 40;

/// One delivered, unacked message.
#[derive(Debug)]
pub(crate) struct Unacked {
    pub(crate) queue: QueueHandle,
    pub(crate) id: MsgId,
    /// When it was delivered (`consumer_timeout`).
    pub(crate) at: std::time::Instant,
}

/// A consumer registered on this channel.
#[derive(Debug)]
pub(crate) struct ChannelConsumer {
    pub(crate) queue: QueueHandle,
    pub(crate) id: ConsumerId,
}

/// State of one open channel.
#[derive(Debug, Default)]
pub(crate) struct Channel {
    /// channel.close sent, waiting for close-ok: other frames are ignored.
    pub(crate) closing: bool,
    pub(crate) publish: Option<PendingPublish>,
    pub(crate) confirm: bool,
    /// Publisher confirms (confirm mode).
    pub(crate) confirms: ConfirmTracker,
    pub(crate) next_tag: u64,
    pub(crate) unacked: charon_core::tag_ring::TagRing<Unacked>,
    pub(crate) consumers: HashMap<Arc<str>, ChannelConsumer>,
    pub(crate) limit: Arc<ChannelLimit>,
    /// Per-consumer prefetch for consumers created from now on (basic.qos global=false).
    pub(crate) prefetch: u16,
    /// tx.select seen: publishes and settlements wait for tx.commit.
    pub(crate) tx: Option<TxBuffer>,
    /// Counted against the user's `max-channels` until the channel is dropped.
    pub(crate) _slot: Option<crate::limits::ChannelSlot>,
    /// Counters and facts shared with the management registry.
    pub(crate) stats: Arc<crate::admin::ChannelStats>,
    /// What consecutive publishes share (names, properties).
    pub(crate) shapes: super::shapes::Shapes,
}

/// What a transaction holds until tx.commit.
#[derive(Debug, Default)]
pub(crate) struct TxBuffer {
    /// Routed publishes: (targets, message).
    pub(crate) publishes: Vec<(Vec<QueueHandle>, Arc<charon_core::Message>)>,
    /// basic.ack/nack/reject as received: (delivery tag, multiple, how).
    pub(crate) settles: Vec<(u64, bool, Settle)>,
}

/// How delivered messages are settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settle {
    /// basic.ack.
    Ack,
    /// basic.nack/reject with requeue: a failed delivery (counts towards a quorum queue's
    /// delivery limit).
    Requeue,
    /// basic.nack/reject without requeue (dead-lettered when the queue has a DLX).
    Reject,
    /// basic.recover: back to the queue without a failed delivery.
    Return,
}

impl Channel {
    /// Settles the given tags, grouping message ids per queue. `multiple` takes the whole
    /// range at once (`TagRing::take_through`).
    pub(crate) fn take_tags(
        &mut self,
        tag: u64,
        multiple: bool,
    ) -> Option<Vec<(QueueHandle, Vec<MsgId>)>> {
        let mut groups: Vec<(QueueHandle, Vec<MsgId>)> = Vec::new();
        // Room for the whole range in the first queue's list (a consumer's acks are usually of
        // one queue): growing it from one id copied it at every doubling.
        let room = if multiple {
            self.unacked
                .bound_through(if tag == 0 { u64::MAX } else { tag })
        } else {
            1
        };
        let mut group = |u: Unacked| match groups.last_mut() {
            Some((q, ids)) if q.same(&u.queue) => ids.push(u.id),
            _ => match groups.iter_mut().find(|(q, _)| q.same(&u.queue)) {
                Some((_, ids)) => ids.push(u.id),
                None => {
                    let mut ids = Vec::with_capacity(if groups.is_empty() { room } else { 1 });
                    ids.push(u.id);
                    groups.push((u.queue, ids));
                }
            },
        };
        if !multiple {
            group(self.unacked.remove(tag)?);
        } else if tag == 0 {
            self.unacked.take_all(group);
        } else if self.unacked.take_through(tag, group) == 0 {
            // Nothing at or below `tag`: an unknown tag (406).
            return None;
        }
        let n: usize = groups.iter().map(|(_, ids)| ids.len()).sum();
        self.limit.settle(u32::try_from(n).unwrap_or(u32::MAX));
        Some(groups)
    }
}
