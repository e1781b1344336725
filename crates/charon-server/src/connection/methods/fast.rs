//! The publish hot path, beside the general frame dispatch: a basic.publish method frame on an
//! open channel is taken without going through [`Connection::on_frame`] (no `await` at all),
//! and content frames go straight to `on_header`/`on_body`.
//!
//! Why: `on_frame`'s future holds every method handler's state, so creating and awaiting it
//! for each of a publish's three frames copied that whole state (callgrind: `memcpy` under
//! `Connection::process`, ~470 instructions per message). The behaviour is `on_frame`'s: the
//! checks below are exactly those `on_channel_method` and `on_basic` make before a publish
//! waits for its content; anything else (closing connection or channel, channel 0, a publish
//! while content is expected, `immediate`) takes the general path and gets its error there.

use std::sync::Arc;

use charon_core::Message;
use charon_protocol::methods::basic;
use charon_protocol::{
    AMQPClass, CLASS_BASIC, ContentHeader, Frame, HotContent, HotMethod, peek_content,
};

use super::super::channel::{PUBLISH_METHOD_ID, PendingPublish, Settle};
use super::super::shapes::{BodyPart, SMALL_BODY};
use super::super::{Connection, Next};
use super::publish::Prepared;
use super::settles::requeue_or_reject;
use crate::error::AmqpError;
use crate::handles::{ConfirmTo, Placed, QueueCmd, QueueHandle};

impl Connection {
    /// Handles `frame` on the fast path, or gives it back for [`Connection::on_frame`].
    pub(in crate::connection) fn start_publish_fast(&mut self, frame: Frame) -> Option<Frame> {
        let Frame::Method { channel, method } = &frame else {
            return Some(frame);
        };
        let AMQPClass::Basic(basic::AMQPMethod::Publish(p)) = &**method else {
            return Some(frame);
        };
        let started = self.start_publish(
            *channel,
            p.exchange.as_str().as_bytes(),
            p.routing_key.as_str().as_bytes(),
            p.mandatory,
            p.immediate,
        );
        (started != Some(true)).then_some(frame)
    }

    /// A basic.publish on an open channel waiting for nothing: its content is expected from
    /// now on (`Some(true)`). `Some(false)`: nothing changed, the general path answers it.
    /// `None`: a name is not UTF-8 (nothing changed; the framer refuses the frame). The names
    /// are compared with the channel's last ones first (`shapes`), checked only when new.
    pub(in crate::connection) fn start_publish(
        &mut self,
        channel: u16,
        exchange: &[u8],
        routing_key: &[u8],
        mandatory: bool,
        immediate: bool,
    ) -> Option<bool> {
        if self.closing || channel == 0 || immediate {
            return Some(false);
        }
        match self.channels.get_mut(&channel) {
            Some(ch) if !ch.closing && ch.publish.is_none() => {
                let (exchange, routing_key) = ch.shapes.names_of(exchange, routing_key)?;
                ch.publish = Some(PendingPublish::named(exchange, routing_key, mandatory));
                Some(true)
            }
            _ => Some(false),
        }
    }

    /// A hot method frame read in place (`charon_protocol::peek_hot`): a publish or a settle
    /// handled as [`Connection::start_publish_fast`] and [`Connection::settle_fast`] would
    /// ([`HotRest::Done`]); otherwise the frame [`charon_protocol::decode_frame`] would have
    /// made, for the general path, or — a publish whose names are not UTF-8 — the framer's
    /// to refuse ([`HotRest::Framer`]: the frame is not consumed).
    pub(in crate::connection) fn hot_method(
        &mut self,
        channel: u16,
        method: HotMethod<'_>,
    ) -> HotRest {
        let handled = match method {
            HotMethod::Publish {
                exchange,
                routing_key,
                mandatory,
                immediate,
            } => match self.start_publish(channel, exchange, routing_key, mandatory, immediate) {
                Some(started) => started,
                None => return HotRest::Framer,
            },
            HotMethod::Ack {
                delivery_tag,
                multiple,
            } => self.settle_parts(channel, delivery_tag, multiple, Settle::Ack),
            HotMethod::Nack {
                delivery_tag,
                multiple,
                requeue,
            } => self.settle_parts(channel, delivery_tag, multiple, requeue_or_reject(requeue)),
            HotMethod::Reject {
                delivery_tag,
                requeue,
            } => self.settle_parts(channel, delivery_tag, false, requeue_or_reject(requeue)),
        };
        if handled {
            return HotRest::Done;
        }
        match method.to_class() {
            Some(class) => HotRest::Frame(Frame::Method {
                channel,
                method: Box::new(class),
            }),
            None => HotRest::Framer,
        }
    }

    /// Whether `frame` is content for [`Connection::content_now`].
    pub(in crate::connection) fn is_content(&self, frame: &Frame) -> bool {
        !self.closing
            && matches!(frame, Frame::Header { channel, .. } | Frame::Body { channel, .. } if *channel != 0)
    }

    /// A content frame (header or body) on a channel other than 0 on an open connection (see
    /// [`Connection::is_content`]): what `on_frame` does with it, without a future while
    /// nothing has to wait. A complete transient publish is routed, placed and handed to its
    /// queues with `try_send`; what has to wait (a full queue, a store commit, a delayed
    /// exchange, an error that closes a channel) comes back for [`Connection::content_rest`].
    pub(in crate::connection) fn content_now(&mut self, frame: Frame) -> Option<ContentRest> {
        let (channel, complete) = match frame {
            Frame::Header { channel, header } => (channel, self.on_header(channel, header)),
            Frame::Body { channel, payload } => {
                (channel, self.on_body(channel, BodyPart::Shared(payload)))
            }
            other => return Some(ContentRest::Frame(other)),
        };
        self.content_done(channel, complete)
    }

    /// A content frame read in place from `buf` (`charon_protocol::peek_content`) and handled
    /// as [`Connection::content_now`] handles the frame `decode_frame` would have made: a
    /// header's properties compared with the channel's last ones (`shapes`; checked only when
    /// they differ, copied only then), a small body copied straight out of the read buffer.
    /// `None`, with `buf` untouched: not taken (not content on an open channel, incomplete,
    /// anything the framer must judge, a body larger than `shapes::SMALL_BODY`), for the
    /// general path. `Some(rest)`: taken and `buf` advanced past it.
    pub(in crate::connection) fn content_in_place(
        &mut self,
        buf: &mut bytes::BytesMut,
    ) -> Option<Option<ContentRest>> {
        if self.closing {
            return None;
        }
        let channel = u16::from_be_bytes([*buf.get(1)?, *buf.get(2)?]);
        if channel == 0 {
            return None;
        }
        let ch = self.channels.get_mut(&channel)?;
        let hot = peek_content(buf, self.frame_max, ch.shapes.last_properties())?;
        let len = hot.len;
        let complete = match hot.content {
            HotContent::Header {
                body_size,
                properties,
            } => {
                let properties = ch.shapes.properties_of(properties);
                let header = ContentHeader {
                    class_id: CLASS_BASIC,
                    body_size,
                    properties,
                };
                self.on_header(channel, header)
            }
            HotContent::Body(payload) if payload.len() <= SMALL_BODY => {
                self.on_body(channel, BodyPart::InPlace(payload))
            }
            HotContent::Body(_) => return None,
        };
        bytes::Buf::advance(buf, len);
        Some(self.content_done(channel, complete))
    }

    /// The rest of a content frame once `on_header`/`on_body` took it.
    fn content_done(
        &mut self,
        channel: u16,
        complete: Result<bool, (u16, AmqpError)>,
    ) -> Option<ContentRest> {
        match complete {
            Ok(false) => None,
            Ok(true) => match self.publish_now(channel) {
                Ok(None) => None,
                Ok(Some(rest)) => Some(ContentRest::Publish(channel, rest)),
                Err(e) => Some(ContentRest::Failed((
                    channel,
                    e.on(CLASS_BASIC, PUBLISH_METHOD_ID),
                ))),
            },
            Err(e) => Some(ContentRest::Failed(e)),
        }
    }

    /// A complete publish, as far as it goes without waiting.
    fn publish_now(&mut self, channel: u16) -> Result<Option<PublishRest>, AmqpError> {
        let (seq, targets, message) = match self.prepare_publish(channel)? {
            None => return Ok(None),
            Some(Prepared::Place {
                seq,
                targets,
                message,
            }) => (seq, targets, message),
            Some(delayed) => return Ok(Some(PublishRest::Prepared(delayed))),
        };
        let mut targets = targets;
        if targets.len() == 1
            && let Some(q) = targets.pop()
        {
            // The emptied list serves the next publish.
            self.spare_targets = targets;
            return self.publish_one(channel, seq, q, message);
        }
        let (placed, stored) = self.place_start(channel, seq, targets, &message)?;
        if stored.is_some() || !self.publish_batches.is_empty() {
            // Gathered publishes go first (`content_rest` sends them, then these).
            return Ok(Some(PublishRest::Place(seq, placed, stored)));
        }
        let mut placed = placed.into_iter();
        while let Some((q, p)) = placed.next() {
            let confirm = seq.map(|seq| ConfirmTo {
                conn: self.handle.clone(),
                channel,
                seq,
            });
            match q.try_send(QueueCmd::Publish { placed: p, confirm }) {
                Ok(()) => self.published_to(&q),
                // The queue is gone (as a failed `send` on the slow path).
                Err(None) => {}
                Err(Some(cmd)) => {
                    // Full: this one and the rest wait, in order.
                    return Ok(Some(PublishRest::Send(seq, q, cmd, placed.collect())));
                }
            }
        }
        Ok(None)
    }

    /// A message routed to one queue (the usual case): what `place_start` and the loop above
    /// do, without their `Vec`s (one place, one answer, plus the store's commit for a
    /// persistent message to a durable queue). A stored message's commit is taken by the
    /// commit waiter before the queue gets the message, as in `place_finish`; only when the
    /// waiter is full does the rest wait there.
    fn publish_one(
        &mut self,
        channel: u16,
        seq: Option<u64>,
        q: QueueHandle,
        message: Arc<Message>,
    ) -> Result<Option<PublishRest>, AmqpError> {
        let (placed, stored) = if message.properties.delivery_mode() == Some(2) {
            crate::queue::place_one(&self.vhost, &q, message, &mut self.enqueue_clock)
        } else {
            let placed = Placed {
                id: q.alloc_id(),
                message,
                stored: None,
            };
            (placed, None)
        };
        if let Some(seq) = seq {
            // One answer from the queue, plus one for the store's commit.
            let n = 1 + u32::from(stored.is_some());
            self.channel_mut(channel)?.confirms.expect(seq, n);
            self.confirm_due(channel);
            if let Some(stored) = stored
                && let Err(stored) = self.commits.try_wait_for(channel, seq, stored)
            {
                let placed = vec![(q, placed)];
                return Ok(Some(PublishRest::Place(Some(seq), placed, Some(stored))));
            }
        }
        // Handed to the queue with the read batch's other publishes to it (`publish_batch.rs`).
        self.publish_batches
            .add(q, placed, seq.map(|seq| (channel, seq)));
        Ok(None)
    }

    /// Hands the gathered publishes to their queues, in order, waiting while a queue's channel
    /// is full (as a publish that found it full does).
    pub(in crate::connection) async fn flush_publishes(&mut self) {
        for gathered in self.publish_batches.take() {
            let (q, cmd) = gathered.command(&self.handle);
            match q.try_send(cmd) {
                Ok(()) => {}
                // The queue is gone (as a failed `send` on the slow path).
                Err(None) => continue,
                Err(Some(cmd)) => {
                    let _ = q.send(cmd).await;
                }
            }
            self.published_to(&q);
        }
    }

    /// What [`Connection::content_now`] left: waits as `on_frame` would.
    pub(in crate::connection) async fn content_rest(&mut self, rest: ContentRest) -> Next {
        // Gathered publishes go before whatever this does.
        if !self.publish_batches.is_empty() {
            self.flush_publishes().await;
        }
        let (channel, rest) = match rest {
            ContentRest::Frame(frame) => return Box::pin(self.on_frame(frame)).await,
            ContentRest::Failed(e) => return Box::pin(self.frame_failed(e)).await,
            ContentRest::Publish(channel, rest) => (channel, rest),
        };
        let result = match rest {
            PublishRest::Prepared(prepared) => self.finish_prepared(channel, prepared).await,
            PublishRest::Place(seq, placed, stored) => {
                self.place_finish(channel, seq, placed, stored).await;
                Ok(())
            }
            PublishRest::Send(seq, q, cmd, placed) => {
                let _ = q.send(cmd).await;
                self.published_to(&q);
                self.place_finish(channel, seq, placed, None).await;
                Ok(())
            }
        };
        match result {
            Ok(()) => Next::Continue,
            Err(e) => {
                Box::pin(self.frame_failed((channel, e.on(CLASS_BASIC, PUBLISH_METHOD_ID)))).await
            }
        }
    }
}

/// What [`Connection::hot_method`] left of a hot method frame.
pub(in crate::connection) enum HotRest {
    /// Handled: the frame is consumed.
    Done,
    /// The frame is consumed; the general path handles this.
    Frame(Frame),
    /// Not consumed: `decode_frame` decides (and refuses it).
    Framer,
}

/// What a content frame left to do that may wait.
pub(in crate::connection) enum ContentRest {
    /// Not content after all: `on_frame`.
    Frame(Frame),
    /// Its handling failed: close the channel or the connection.
    Failed((u16, AmqpError)),
    /// The rest of a complete publish on this channel.
    Publish(u16, PublishRest),
}

/// The rest of a publish.
pub(in crate::connection) enum PublishRest {
    /// Delayed exchange (or anything prepared but not placed).
    Prepared(Prepared),
    /// Placed with a store write: the commit waiter, then the queues.
    Place(
        Option<u64>,
        Vec<(QueueHandle, Placed)>,
        Option<crate::persist::Durable>,
    ),
    /// A queue's channel was full: this command, then the rest, in order.
    Send(
        Option<u64>,
        QueueHandle,
        QueueCmd,
        Vec<(QueueHandle, Placed)>,
    ),
}
