//! basic.qos/consume/cancel/get/ack/nack/reject/recover (publish is in `publish`).

use std::sync::Arc;

use charon_core::ConsumerSpec;
use charon_protocol::methods::basic;
use charon_protocol::{AMQPClass, CLASS_BASIC, encode_basic_get_ok, encode_content};

use super::super::Connection;
use super::super::channel::{ChannelConsumer, PendingPublish, Settle, Unacked};
use crate::access::{Permission, ResourceKind};
use crate::error::{AmqpError, ServerError};
use crate::handles::{ConsumerTarget, QueueCmd};

impl Connection {
    pub(super) async fn on_basic(
        &mut self,
        channel: u16,
        m: basic::AMQPMethod,
    ) -> Result<(), AmqpError> {
        match m {
            basic::AMQPMethod::Publish(p) => {
                if p.immediate {
                    return Err(ServerError::Immediate.into());
                }
                let ch = self.channel_mut(channel)?;
                ch.publish = Some(PendingPublish::new(
                    &mut ch.shapes,
                    p.exchange.as_str(),
                    p.routing_key.as_str(),
                    p.mandatory,
                ));
            }
            basic::AMQPMethod::Qos(q) => {
                // prefetch_size != 0 is refused by the framer (FrameError::PrefetchSize).
                let ch = self.channel_mut(channel)?;
                if q.global {
                    ch.limit.set_limit(u32::from(q.prefetch_count));
                } else {
                    ch.prefetch = q.prefetch_count;
                    ch.stats.prefetch.store(
                        u32::from(q.prefetch_count),
                        std::sync::atomic::Ordering::Relaxed,
                    );
                }
                self.reply(
                    channel,
                    AMQPClass::Basic(basic::AMQPMethod::QosOk(basic::QosOk {})),
                );
            }
            basic::AMQPMethod::Consume(c) => self.consume(channel, c).await?,
            basic::AMQPMethod::Cancel(c) => {
                let tag: Arc<str> = Arc::from(c.consumer_tag.as_str());
                let ch = self.channel_mut(channel)?;
                ch.stats.consumer_removed(&tag);
                let removed = ch.consumers.remove(&tag);
                if let Some(cons) = removed {
                    let _ = cons.queue.send(QueueCmd::Cancel { id: cons.id }).await;
                }
                if !c.nowait {
                    self.reply(
                        channel,
                        AMQPClass::Basic(basic::AMQPMethod::CancelOk(basic::CancelOk {
                            consumer_tag: c.consumer_tag,
                        })),
                    );
                }
            }
            basic::AMQPMethod::Get(g) => {
                self.permit(ResourceKind::Queue, g.queue.as_str(), Permission::Read)?;
                let q = self.queue_handle(g.queue.as_str())?;
                let got = Self::ask(&q, |reply| QueueCmd::Get {
                    no_ack: g.no_ack,
                    reply,
                })
                .await?;
                match got {
                    None => self.reply(
                        channel,
                        AMQPClass::Basic(basic::AMQPMethod::GetEmpty(basic::GetEmpty {})),
                    ),
                    Some(r) => {
                        let q_is_quorum = q.is_quorum();
                        let ch = self.channel_mut(channel)?;
                        crate::admin::ChannelStats::bump(&ch.stats.get, 1);
                        ch.next_tag += 1;
                        let tag = ch.next_tag;
                        if !g.no_ack {
                            ch.unacked.insert(
                                tag,
                                Unacked {
                                    queue: q,
                                    id: r.id,
                                    at: std::time::Instant::now(),
                                },
                            );
                        }
                        let msg = r.message;
                        let quorum_props = q_is_quorum
                            .then(|| {
                                charon_core::queue::quorum::delivery_properties(
                                    &msg.properties,
                                    r.returns,
                                )
                            })
                            .flatten();
                        encode_basic_get_ok(
                            &mut self.out,
                            channel,
                            tag,
                            r.redelivered,
                            &msg.exchange,
                            &msg.routing_key,
                            r.remaining,
                        );
                        encode_content(
                            &mut self.out,
                            channel,
                            CLASS_BASIC,
                            quorum_props.as_ref().unwrap_or(&msg.properties),
                            msg.body.wire_bytes(),
                            self.frame_max,
                        );
                    }
                }
            }
            basic::AMQPMethod::Ack(a) => {
                self.settle(channel, a.delivery_tag, a.multiple, Settle::Ack)
                    .await?
            }
            basic::AMQPMethod::Nack(n) => {
                let how = if n.requeue {
                    Settle::Requeue
                } else {
                    Settle::Reject
                };
                self.settle(channel, n.delivery_tag, n.multiple, how)
                    .await?;
            }
            basic::AMQPMethod::Reject(r) => {
                let how = if r.requeue {
                    Settle::Requeue
                } else {
                    Settle::Reject
                };
                self.settle(channel, r.delivery_tag, false, how).await?;
            }
            basic::AMQPMethod::Recover(r) => {
                if !r.requeue {
                    return Err(ServerError::RecoverWithoutRequeue.into());
                }
                self.settle(channel, 0, true, Settle::Return).await?;
                self.reply(
                    channel,
                    AMQPClass::Basic(basic::AMQPMethod::RecoverOk(basic::RecoverOk {})),
                );
            }
            basic::AMQPMethod::RecoverAsync(r) => {
                // Deprecated, but RabbitMQ still honours requeue=true: requeue, reply nothing.
                if !r.requeue {
                    return Err(ServerError::RecoverWithoutRequeue.into());
                }
                self.settle(channel, 0, true, Settle::Return).await?;
            }
            _ => {
                return Err(ServerError::UnimplementedMethod.into());
            }
        }
        Ok(())
    }

    pub(super) async fn consume(
        &mut self,
        channel: u16,
        c: basic::Consume,
    ) -> Result<(), AmqpError> {
        let tag: Arc<str> = if c.consumer_tag.as_str().is_empty() {
            Arc::from(server_tag("amq.ctag-"))
        } else {
            Arc::from(c.consumer_tag.as_str())
        };
        if self.channel_mut(channel)?.consumers.contains_key(&tag) {
            return Err(ServerError::ConsumerTagReused {
                tag: tag.to_string(),
            }
            .into());
        }
        self.permit(ResourceKind::Queue, c.queue.as_str(), Permission::Read)?;
        let q = self.queue_handle(c.queue.as_str())?;
        let conn = self.handle.clone();
        let ch = self.channel_mut(channel)?;
        let spec = ConsumerSpec {
            no_ack: c.no_ack,
            prefetch: ch.prefetch,
            exclusive: c.exclusive,
        };
        let target = ConsumerTarget {
            conn,
            channel,
            limit: ch.limit.clone(),
            tag: tag.clone(),
        };
        let id = self.broker.next_id();
        Self::ask(&q, |reply| QueueCmd::Consume {
            id,
            spec,
            target,
            reply,
        })
        .await??;
        let ch = self.channel_mut(channel)?;
        ch.stats
            .consumer_added(crate::admin::connections::ConsumerView {
                tag: tag.to_string(),
                queue: q.name().to_string(),
                ack_required: !c.no_ack,
                exclusive: c.exclusive,
                prefetch: spec.prefetch,
            });
        ch.consumers
            .insert(tag.clone(), ChannelConsumer { queue: q, id });
        if !c.nowait {
            self.reply(
                channel,
                AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(basic::ConsumeOk {
                    consumer_tag: tag.as_ref().into(),
                })),
            );
        }
        Ok(())
    }

    pub(super) async fn settle(
        &mut self,
        channel: u16,
        tag: u64,
        multiple: bool,
        how: Settle,
    ) -> Result<(), AmqpError> {
        let ch = self.channel_mut(channel)?;
        if let Some(buf) = ch.tx.as_mut() {
            if !(ch.unacked.contains(tag) || multiple && tag == 0) {
                return Err(ServerError::UnknownDeliveryTag { tag }.into());
            }
            buf.settles.push((tag, multiple, how));
            return Ok(());
        }
        self.settle_now(channel, tag, multiple, how).await
    }

    pub(super) async fn settle_now(
        &mut self,
        channel: u16,
        tag: u64,
        multiple: bool,
        how: Settle,
    ) -> Result<(), AmqpError> {
        let ch = self.channel_mut(channel)?;
        let groups = ch
            .take_tags(tag, multiple)
            .ok_or(ServerError::UnknownDeliveryTag { tag })?;
        if matches!(how, Settle::Ack) {
            let n: usize = groups.iter().map(|(_, ids)| ids.len()).sum();
            crate::admin::ChannelStats::bump(&ch.stats.ack, n as u64);
        }
        ch.stats.set_unacked(ch.unacked.len());
        for (q, ids) in groups {
            let cmd = match how {
                Settle::Ack => QueueCmd::Ack { ids },
                Settle::Requeue => QueueCmd::Requeue { ids },
                Settle::Return => QueueCmd::Return { ids },
                Settle::Reject => QueueCmd::Reject { ids },
            };
            let _ = q.send(cmd).await;
        }
        Ok(())
    }
}

/// A server-made name: `prefix` + 22 URL-safe base64 characters (128 random bits), as RabbitMQ.
pub(super) fn server_tag(prefix: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bits: u128 = rand::random();
    let mut s = String::with_capacity(prefix.len() + 22);
    s.push_str(prefix);
    for i in 0..22 {
        let idx = ((bits >> (i * 6)) & 63) as usize;
        s.push(char::from(ALPHABET.get(idx).copied().unwrap_or(b'A')));
    }
    s
}
