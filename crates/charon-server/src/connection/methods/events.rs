//! Events from queue actors (deliveries, confirms, consumer cancellations) and the broker's
//! signals (`Control`: shutdown, management close, alarm changes).

use bytes::BytesMut;
use charon_protocol::methods::basic;
use charon_protocol::{AMQPClass, DeliveryFrames, delivery_len, encode_delivery};

use super::super::Connection;
use super::super::channel::Unacked;
use crate::handles::{ConnEvent, Control, QueueCmd};

/// The most a delivery batch's output room is estimated at ahead of encoding (8 MiB; more
/// than a full batch of 1 KiB bodies): beyond it, `encode_delivery` grows the buffer as it
/// goes. Larger only when the batch's first delivery alone is larger.
const ROOM_ESTIMATE_CAP: usize = 8 << 20;

impl Connection {
    pub(crate) fn on_event(&mut self, ev: ConnEvent) {
        match ev {
            ConnEvent::Deliver {
                channel,
                consumer_tag,
                no_ack,
                queue,
                deliveries,
            } => {
                let n = deliveries.len();
                // The batch's room at once: growing the buffer delivery by delivery copies
                // what is already encoded at every doubling (a large batch of 1 KiB bodies
                // copied about one body's worth per delivery). Estimated from the first
                // delivery, not summed over all: a batch is one queue's messages to one
                // consumer, usually alike (one publisher's), and a pass over every message
                // only to size the buffer cost ~30 instructions a delivery. Larger messages
                // later in the batch grow the buffer as `encode_delivery` reserves for each.
                // The estimate is capped ([`ROOM_ESTIMATE_CAP`], or the first delivery's own
                // size when larger): a large first message before thousands of small ones
                // must not ask the allocator for its size times the batch's length.
                let room = deliveries.first().map_or(0, |d| {
                    let m = &d.message;
                    let frames = DeliveryFrames {
                        channel,
                        consumer_tag: &consumer_tag,
                        delivery_tag: 0,
                        redelivered: false,
                        exchange: &m.exchange,
                        routing_key: &m.routing_key,
                        properties: &m.properties,
                        body: m.body.wire_bytes(),
                    };
                    let first = delivery_len(&frames, self.frame_max);
                    first.saturating_mul(n).min(first.max(ROOM_ESTIMATE_CAP))
                });
                if self.out.capacity() - self.out.len() < room {
                    // The room is short. Earlier output (another batch) is written out first,
                    // and an empty buffer is replaced rather than grown: growing reallocates,
                    // which copies the whole old allocation (the allocator does not know how
                    // much of it is in use), ~1 MiB a batch of 1 KiB bodies.
                    self.write_out();
                    if self.out.is_empty() {
                        self.out = BytesMut::with_capacity(room);
                    }
                }
                let Some(ch) = self.channels.get_mut(&channel).filter(|c| !c.closing) else {
                    // Channel gone: hand the messages back.
                    let ids: Vec<u64> = deliveries.iter().map(|d| d.id).collect();
                    if !no_ack {
                        queue.kick();
                        let q = queue.clone();
                        tokio::spawn(async move { q.send(QueueCmd::Return { ids }).await });
                    }
                    self.handle.flow().release(n);
                    return;
                };
                let quorum = queue.is_quorum();
                let at = std::time::Instant::now();
                let stats = &ch.stats;
                crate::admin::ChannelStats::bump(
                    if no_ack {
                        &stats.deliver_no_ack
                    } else {
                        &stats.deliver
                    },
                    n as u64,
                );
                self.out.reserve(room);
                for d in deliveries {
                    if d.redelivered {
                        crate::admin::ChannelStats::bump(&ch.stats.redeliver, 1);
                    }
                    ch.next_tag += 1;
                    let tag = ch.next_tag;
                    if !no_ack {
                        ch.unacked.insert(
                            tag,
                            Unacked {
                                queue: queue.clone(),
                                id: d.id,
                                at,
                            },
                        );
                    }
                    let m = &d.message;
                    let quorum_props = quorum
                        .then(|| {
                            charon_core::queue::quorum::delivery_properties(
                                &m.properties,
                                d.returns,
                            )
                        })
                        .flatten();
                    let frames = DeliveryFrames {
                        channel,
                        consumer_tag: &consumer_tag,
                        delivery_tag: tag,
                        redelivered: d.redelivered,
                        exchange: &m.exchange,
                        routing_key: &m.routing_key,
                        properties: quorum_props.as_ref().unwrap_or(&m.properties),
                        body: m.body.wire_bytes(),
                    };
                    encode_delivery(&mut self.out, &frames, self.frame_max);
                }
                ch.stats.set_unacked(ch.unacked.len());
                self.out_deliveries += n;
            }
            ConnEvent::Confirm { channel, seq, ack } => {
                let Some(ch) = self.channels.get_mut(&channel) else {
                    return;
                };
                ch.confirms.answer(seq, ack);
                self.confirm_due(channel);
            }
            ConnEvent::Confirms { channel, answers } => {
                let Some(ch) = self.channels.get_mut(&channel) else {
                    return;
                };
                for &(first, last, ack) in answers.runs() {
                    ch.confirms.answer_run(first, last, ack);
                }
                self.confirm_due(channel);
            }
            ConnEvent::Control(c) => match c {
                Control::Shutdown => self.on_shutdown(),
                Control::Close(reason) => self.on_close_request(reason),
                Control::AlarmChanged => self.on_alarm_changed(),
            },
            ConnEvent::ConsumerCancelled {
                channel,
                consumer_tag,
            } => {
                if let Some(ch) = self.channels.get_mut(&channel)
                    && ch.consumers.remove(&consumer_tag).is_some()
                {
                    ch.stats.consumer_removed(&consumer_tag);
                    {
                        self.reply(
                            channel,
                            AMQPClass::Basic(basic::AMQPMethod::Cancel(basic::Cancel {
                                consumer_tag: consumer_tag.as_ref().into(),
                                nowait: true,
                            })),
                        );
                    }
                }
            }
        }
    }
}
