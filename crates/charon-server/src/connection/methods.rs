//! Frame and method handling for an open connection.
//!
//! Each AMQP method is answered here; domain rules (routing, declare equivalence, queue state)
//! live in `charon-core` and in the queue actors. Errors come back as [`AmqpError`] and are
//! turned into channel.close or connection.close in [`Connection::on_frame`].

use std::sync::Arc;

use bytes::BytesMut;
use charon_core::{ConsumerSpec, ExchangeDeclare, Message, QueueDeclare};
use charon_protocol::methods::{basic, channel as chm, confirm, connection, exchange, queue, tx};
use charon_protocol::{
    AMQPClass, AMQPValue, CLASS_BASIC, Frame, encode_basic_ack, encode_basic_deliver,
    encode_basic_get_ok, encode_basic_return, encode_content, encode_method,
};
use tokio::sync::oneshot;

use super::channel::{Channel, ChannelConsumer, PendingPublish, TxBuffer, Unacked};
use super::{Connection, Next};
use crate::broker::spawn_queue;
use crate::error::{AmqpError, code};
use crate::outbound::ConnEvent;
use crate::queue::{ConfirmTo, ConsumerTarget, QueueCmd, QueueHandle};

fn method_ids(m: &AMQPClass) -> (u16, u16) {
    (m.get_amqp_class_id(), m.get_amqp_method_id())
}

/// Cancels a channel's consumers and returns its unacked messages to their queues, in order.
pub(crate) async fn release_channel(ch: Channel) {
    for (_, c) in ch.consumers {
        let _ = c.queue.send(QueueCmd::Cancel { id: c.id }).await;
    }
    let mut groups: Vec<(QueueHandle, Vec<u64>)> = Vec::new();
    for (_, u) in ch.unacked {
        match groups.iter_mut().find(|(q, _)| q.same(&u.queue)) {
            Some((_, ids)) => ids.push(u.id),
            None => groups.push((u.queue, vec![u.id])),
        }
    }
    for (q, ids) in groups {
        let _ = q.send(QueueCmd::Requeue { ids }).await;
    }
}

impl Connection {
    pub(super) async fn on_frame(&mut self, frame: Frame) -> Next {
        if self.closing {
            if let Frame::Method { method, .. } = &frame {
                match **method {
                    AMQPClass::Connection(connection::AMQPMethod::CloseOk(_)) => return Next::Stop,
                    AMQPClass::Connection(connection::AMQPMethod::Close(_)) => {
                        encode_method(
                            &mut self.out,
                            0,
                            &AMQPClass::Connection(connection::AMQPMethod::CloseOk(
                                connection::CloseOk {},
                            )),
                        );
                        return Next::Stop;
                    }
                    _ => {}
                }
            }
            return Next::Continue;
        }
        let result = match frame {
            Frame::Heartbeat { channel: 0 } => Ok(()),
            Frame::Heartbeat { channel } => Err((
                channel,
                AmqpError::unexpected_frame("type 8, all octets = <<>>"),
            )),
            Frame::Method { channel: 0, method } => return self.on_connection_method(*method),
            Frame::Method { channel, method } => self.on_channel_method(channel, *method).await,
            Frame::Header { channel, header } => self.on_header(channel, header).await,
            Frame::Body { channel, payload } => self.on_body(channel, payload).await,
        };
        match result {
            Ok(()) => Next::Continue,
            Err((channel, err)) if !err.is_connection_error() && channel != 0 => {
                self.close_channel(channel, err).await;
                Next::Continue
            }
            Err((_, err)) => {
                self.close_connection(err);
                Next::Continue
            }
        }
    }

    fn on_connection_method(&mut self, method: AMQPClass) -> Next {
        match method {
            AMQPClass::Connection(connection::AMQPMethod::Close(_)) => {
                encode_method(
                    &mut self.out,
                    0,
                    &AMQPClass::Connection(connection::AMQPMethod::CloseOk(connection::CloseOk {})),
                );
                Next::Stop
            }
            AMQPClass::Connection(connection::AMQPMethod::CloseOk(_)) => Next::Stop,
            other => {
                let (c, m) = method_ids(&other);
                self.close_connection(
                    AmqpError::channel_error("unexpected method in connection state running")
                        .on(c, m),
                );
                Next::Continue
            }
        }
    }

    async fn close_channel(&mut self, channel: u16, err: AmqpError) {
        if let Some(ch) = self.channels.get_mut(&channel) {
            ch.closing = true;
            ch.publish = None;
            let consumers = std::mem::take(&mut ch.consumers);
            let unacked = std::mem::take(&mut ch.unacked);
            release_channel(Channel {
                consumers,
                unacked,
                ..Default::default()
            })
            .await;
        }
        encode_method(
            &mut self.out,
            channel,
            &AMQPClass::Channel(chm::AMQPMethod::Close(chm::Close {
                reply_code: err.code,
                reply_text: err.text.as_str().into(),
                class_id: err.class_id,
                method_id: err.method_id,
            })),
        );
    }

    fn reply(&mut self, channel: u16, method: AMQPClass) {
        encode_method(&mut self.out, channel, &method);
    }

    async fn on_channel_method(
        &mut self,
        channel: u16,
        method: AMQPClass,
    ) -> Result<(), (u16, AmqpError)> {
        let (cid, mid) = method_ids(&method);
        if let AMQPClass::Channel(chm::AMQPMethod::Open(_)) = method {
            if self.channels.contains_key(&channel) {
                return Err((
                    channel,
                    AmqpError::channel_error("second 'channel.open' seen").on(cid, mid),
                ));
            }
            if self.channels.len() >= usize::from(self.channel_max) {
                return Err((channel, AmqpError::not_allowed(format!(
                    "number of channels opened ({}) has reached the negotiated channel_max ({})",
                    self.channels.len(), self.channel_max
                )).on(cid, mid)));
            }
            self.channels.insert(channel, Channel::default());
            self.reply(
                channel,
                AMQPClass::Channel(chm::AMQPMethod::OpenOk(chm::OpenOk {})),
            );
            return Ok(());
        }
        let Some(ch) = self.channels.get(&channel) else {
            return Err((
                channel,
                AmqpError::channel_error("expected 'channel.open'").on(cid, mid),
            ));
        };
        if ch.closing {
            match method {
                AMQPClass::Channel(chm::AMQPMethod::CloseOk(_)) => {
                    self.channels.remove(&channel);
                }
                AMQPClass::Channel(chm::AMQPMethod::Close(_)) => {
                    self.channels.remove(&channel);
                    self.reply(
                        channel,
                        AMQPClass::Channel(chm::AMQPMethod::CloseOk(chm::CloseOk {})),
                    );
                }
                _ => {}
            }
            return Ok(());
        }
        if ch.publish.is_some() {
            return Err((
                channel,
                AmqpError::unexpected_frame(
                    "expected content header for class 60, got non content header frame instead",
                )
                .on(cid, mid),
            ));
        }
        self.dispatch(channel, method)
            .await
            .map_err(|e| (channel, e.on(cid, mid)))
    }

    async fn dispatch(&mut self, channel: u16, method: AMQPClass) -> Result<(), AmqpError> {
        match method {
            AMQPClass::Channel(chm::AMQPMethod::Close(_)) => {
                if let Some(ch) = self.channels.remove(&channel) {
                    release_channel(ch).await;
                }
                self.reply(
                    channel,
                    AMQPClass::Channel(chm::AMQPMethod::CloseOk(chm::CloseOk {})),
                );
            }
            AMQPClass::Channel(chm::AMQPMethod::CloseOk(_)) => {}
            AMQPClass::Channel(chm::AMQPMethod::Flow(f)) => {
                if !f.active {
                    return Err(AmqpError::not_implemented("active=false"));
                }
                self.reply(
                    channel,
                    AMQPClass::Channel(chm::AMQPMethod::FlowOk(chm::FlowOk { active: true })),
                );
            }
            AMQPClass::Exchange(m) => self.on_exchange(channel, m)?,
            AMQPClass::Queue(m) => self.on_queue(channel, m).await?,
            AMQPClass::Basic(m) => self.on_basic(channel, m).await?,
            AMQPClass::Confirm(confirm::AMQPMethod::Select(s)) => {
                let ch = self.channel_mut(channel)?;
                if ch.tx.is_some() {
                    return Err(AmqpError::precondition(
                        "cannot switch from tx to confirm mode",
                    ));
                }
                ch.confirm = true;
                if !s.nowait {
                    self.reply(
                        channel,
                        AMQPClass::Confirm(confirm::AMQPMethod::SelectOk(confirm::SelectOk {})),
                    );
                }
            }
            AMQPClass::Tx(m) => self.on_tx(channel, m).await?,
            _ => {
                return Err(AmqpError::new(
                    code::COMMAND_INVALID,
                    "unimplemented method",
                ));
            }
        }
        Ok(())
    }

    async fn on_tx(&mut self, channel: u16, m: tx::AMQPMethod) -> Result<(), AmqpError> {
        let ch = self.channel_mut(channel)?;
        match m {
            tx::AMQPMethod::Select(_) => {
                if ch.confirm {
                    return Err(AmqpError::precondition(
                        "cannot switch from confirm to tx mode",
                    ));
                }
                ch.tx.get_or_insert_with(TxBuffer::default);
                self.reply(
                    channel,
                    AMQPClass::Tx(tx::AMQPMethod::SelectOk(tx::SelectOk {})),
                );
            }
            tx::AMQPMethod::Commit(_) => {
                let Some(buf) = ch.tx.replace(TxBuffer::default()) else {
                    return Err(AmqpError::precondition("channel is not transactional"));
                };
                for (targets, message) in buf.publishes {
                    for q in targets {
                        let _ = q
                            .send(QueueCmd::Publish {
                                message: message.clone(),
                                confirm: None,
                            })
                            .await;
                    }
                }
                for (tag, multiple, how) in buf.settles {
                    let how = match how {
                        0 => Settle::Ack,
                        1 => Settle::Requeue,
                        _ => Settle::Reject,
                    };
                    self.settle_now(channel, tag, multiple, how).await?;
                }
                self.reply(
                    channel,
                    AMQPClass::Tx(tx::AMQPMethod::CommitOk(tx::CommitOk {})),
                );
            }
            tx::AMQPMethod::Rollback(_) => {
                // Publishes and settlements are dropped; the messages stay unacked.
                if ch.tx.replace(TxBuffer::default()).is_none() {
                    return Err(AmqpError::precondition("channel is not transactional"));
                }
                self.reply(
                    channel,
                    AMQPClass::Tx(tx::AMQPMethod::RollbackOk(tx::RollbackOk {})),
                );
            }
            _ => {
                return Err(AmqpError::new(
                    code::COMMAND_INVALID,
                    "unimplemented method",
                ));
            }
        }
        Ok(())
    }

    fn on_exchange(&mut self, channel: u16, m: exchange::AMQPMethod) -> Result<(), AmqpError> {
        let mut topo = self
            .vhost
            .topology
            .write()
            .unwrap_or_else(|p| p.into_inner());
        let (reply, nowait) = match m {
            exchange::AMQPMethod::Declare(d) => {
                topo.declare_exchange(&ExchangeDeclare {
                    name: d.exchange.as_str().into(),
                    kind: d.kind.as_str().into(),
                    passive: d.passive,
                    durable: d.durable,
                    auto_delete: d.auto_delete,
                    internal: d.internal,
                    arguments: d.arguments,
                })?;
                (
                    exchange::AMQPMethod::DeclareOk(exchange::DeclareOk {}),
                    d.nowait,
                )
            }
            exchange::AMQPMethod::Delete(d) => {
                topo.delete_exchange(d.exchange.as_str(), d.if_unused)?;
                (
                    exchange::AMQPMethod::DeleteOk(exchange::DeleteOk {}),
                    d.nowait,
                )
            }
            exchange::AMQPMethod::Bind(b) => {
                topo.bind_exchange(
                    b.destination.as_str(),
                    b.source.as_str(),
                    b.routing_key.as_str(),
                    &b.arguments,
                )?;
                (exchange::AMQPMethod::BindOk(exchange::BindOk {}), b.nowait)
            }
            exchange::AMQPMethod::Unbind(b) => {
                topo.unbind_exchange(
                    b.destination.as_str(),
                    b.source.as_str(),
                    b.routing_key.as_str(),
                    &b.arguments,
                )?;
                (
                    exchange::AMQPMethod::UnbindOk(exchange::UnbindOk {}),
                    b.nowait,
                )
            }
            _ => {
                return Err(AmqpError::new(
                    code::COMMAND_INVALID,
                    "unimplemented method",
                ));
            }
        };
        drop(topo);
        if !nowait {
            self.reply(channel, AMQPClass::Exchange(reply));
        }
        Ok(())
    }

    /// The queue `name` (or the channel's... RabbitMQ's "last declared" is not tracked yet).
    fn queue_handle(&self, name: &str) -> Result<QueueHandle, AmqpError> {
        let topo = self
            .vhost
            .topology
            .read()
            .unwrap_or_else(|p| p.into_inner());
        Ok(topo.check_queue_access(name, self.id)?.handle.clone())
    }

    async fn ask<T>(
        q: &QueueHandle,
        make: impl FnOnce(oneshot::Sender<T>) -> QueueCmd,
    ) -> Result<T, AmqpError> {
        let (tx, rx) = oneshot::channel();
        if !q.send(make(tx)).await {
            return Err(AmqpError::not_found(format!("no queue '{}'", q.name())));
        }
        rx.await
            .map_err(|_| AmqpError::not_found(format!("no queue '{}'", q.name())))
    }

    async fn on_queue(&mut self, channel: u16, m: queue::AMQPMethod) -> Result<(), AmqpError> {
        match m {
            queue::AMQPMethod::Declare(d) => {
                let vhost_name = self.vhost_name.clone();
                let vhost = self.vhost.clone();
                let (name, handle) = {
                    let mut topo = self
                        .vhost
                        .topology
                        .write()
                        .unwrap_or_else(|p| p.into_inner());
                    let (name, entry, _) = topo.declare_queue(
                        &QueueDeclare {
                            name: d.queue.as_str().into(),
                            passive: d.passive,
                            durable: d.durable,
                            exclusive: d.exclusive,
                            auto_delete: d.auto_delete,
                            arguments: d.arguments,
                        },
                        self.id,
                        |meta| spawn_queue(meta, &vhost, &vhost_name),
                    )?;
                    (name, entry.handle.clone())
                };
                let stats = Self::ask(&handle, |reply| QueueCmd::Stats { reply }).await?;
                if !d.nowait {
                    self.reply(
                        channel,
                        AMQPClass::Queue(queue::AMQPMethod::DeclareOk(queue::DeclareOk {
                            queue: name.as_ref().into(),
                            message_count: stats.messages,
                            consumer_count: stats.consumers,
                        })),
                    );
                }
            }
            queue::AMQPMethod::Bind(b) => {
                {
                    let mut topo = self
                        .vhost
                        .topology
                        .write()
                        .unwrap_or_else(|p| p.into_inner());
                    if topo.queue(b.queue.as_str()).is_some() {
                        topo.check_queue_access(b.queue.as_str(), self.id)?;
                    }
                    topo.bind_queue(
                        b.queue.as_str(),
                        b.exchange.as_str(),
                        b.routing_key.as_str(),
                        &b.arguments,
                    )?;
                }
                if !b.nowait {
                    self.reply(
                        channel,
                        AMQPClass::Queue(queue::AMQPMethod::BindOk(queue::BindOk {})),
                    );
                }
            }
            queue::AMQPMethod::Unbind(b) => {
                {
                    let mut topo = self
                        .vhost
                        .topology
                        .write()
                        .unwrap_or_else(|p| p.into_inner());
                    topo.unbind_queue(
                        b.queue.as_str(),
                        b.exchange.as_str(),
                        b.routing_key.as_str(),
                        &b.arguments,
                    )?;
                }
                self.reply(
                    channel,
                    AMQPClass::Queue(queue::AMQPMethod::UnbindOk(queue::UnbindOk {})),
                );
            }
            queue::AMQPMethod::Purge(p) => {
                let q = self.queue_handle(p.queue.as_str())?;
                let n = Self::ask(&q, |reply| QueueCmd::Purge { reply }).await?;
                if !p.nowait {
                    self.reply(
                        channel,
                        AMQPClass::Queue(queue::AMQPMethod::PurgeOk(queue::PurgeOk {
                            message_count: n,
                        })),
                    );
                }
            }
            queue::AMQPMethod::Delete(d) => {
                let name = d.queue.as_str().to_string();
                let exists = {
                    let topo = self
                        .vhost
                        .topology
                        .read()
                        .unwrap_or_else(|p| p.into_inner());
                    topo.queue(&name).is_some()
                };
                let mut count = 0;
                if exists {
                    let q = self.queue_handle(&name)?;
                    let stats = Self::ask(&q, |reply| QueueCmd::Stats { reply }).await?;
                    if d.if_unused && stats.consumers > 0 {
                        return Err(AmqpError::precondition(format!(
                            "queue '{name}' in vhost '{}' in use",
                            self.vhost_name
                        )));
                    }
                    if d.if_empty && stats.messages > 0 {
                        return Err(AmqpError::precondition(format!(
                            "queue '{name}' in vhost '{}' not empty",
                            self.vhost_name
                        )));
                    }
                    let removed = {
                        let mut topo = self
                            .vhost
                            .topology
                            .write()
                            .unwrap_or_else(|p| p.into_inner());
                        topo.remove_queue(&name)
                    };
                    if let Some(entry) = removed {
                        count = Self::ask(&entry.handle, |reply| QueueCmd::Delete { reply })
                            .await
                            .unwrap_or(0);
                    }
                }
                if !d.nowait {
                    self.reply(
                        channel,
                        AMQPClass::Queue(queue::AMQPMethod::DeleteOk(queue::DeleteOk {
                            message_count: count,
                        })),
                    );
                }
            }
            _ => {
                return Err(AmqpError::new(
                    code::COMMAND_INVALID,
                    "unimplemented method",
                ));
            }
        }
        Ok(())
    }

    fn channel_mut(&mut self, channel: u16) -> Result<&mut Channel, AmqpError> {
        self.channels
            .get_mut(&channel)
            .ok_or_else(|| AmqpError::channel_error("expected 'channel.open'"))
    }

    async fn on_basic(&mut self, channel: u16, m: basic::AMQPMethod) -> Result<(), AmqpError> {
        match m {
            basic::AMQPMethod::Publish(p) => {
                if p.immediate {
                    return Err(AmqpError::not_implemented("immediate=true"));
                }
                self.channel_mut(channel)?.publish = Some(PendingPublish {
                    method: p,
                    header: None,
                    body: BytesMut::new(),
                    first_body: None,
                });
            }
            basic::AMQPMethod::Qos(q) => {
                let ch = self.channel_mut(channel)?;
                if q.global {
                    ch.limit.set_limit(u32::from(q.prefetch_count));
                } else {
                    ch.prefetch = q.prefetch_count;
                }
                self.reply(
                    channel,
                    AMQPClass::Basic(basic::AMQPMethod::QosOk(basic::QosOk {})),
                );
            }
            basic::AMQPMethod::Consume(c) => self.consume(channel, c).await?,
            basic::AMQPMethod::Cancel(c) => {
                let tag: Arc<str> = Arc::from(c.consumer_tag.as_str());
                let removed = self.channel_mut(channel)?.consumers.remove(&tag);
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
                        let ch = self.channel_mut(channel)?;
                        ch.next_tag += 1;
                        let tag = ch.next_tag;
                        if !g.no_ack {
                            ch.unacked.insert(tag, Unacked { queue: q, id: r.id });
                        }
                        let msg = r.message;
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
                            &msg.properties,
                            &msg.body,
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
                    return Err(AmqpError::not_implemented("requeue=false"));
                }
                self.settle(channel, 0, true, Settle::Requeue).await?;
                self.reply(
                    channel,
                    AMQPClass::Basic(basic::AMQPMethod::RecoverOk(basic::RecoverOk {})),
                );
            }
            basic::AMQPMethod::RecoverAsync(_) => {
                return Err(AmqpError::not_implemented("requeue=false"));
            }
            _ => {
                return Err(AmqpError::new(
                    code::COMMAND_INVALID,
                    "unimplemented method",
                ));
            }
        }
        Ok(())
    }

    async fn consume(&mut self, channel: u16, c: basic::Consume) -> Result<(), AmqpError> {
        let q = self.queue_handle(c.queue.as_str())?;
        let tag: Arc<str> = if c.consumer_tag.as_str().is_empty() {
            Arc::from(server_tag("amq.ctag-"))
        } else {
            Arc::from(c.consumer_tag.as_str())
        };
        let conn = self.handle.clone();
        let ch = self.channel_mut(channel)?;
        if ch.consumers.contains_key(&tag) {
            return Err(AmqpError::not_allowed(format!(
                "attempt to reuse consumer tag '{tag}'"
            )));
        }
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
        self.channel_mut(channel)?
            .consumers
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

    async fn settle(
        &mut self,
        channel: u16,
        tag: u64,
        multiple: bool,
        how: Settle,
    ) -> Result<(), AmqpError> {
        let ch = self.channel_mut(channel)?;
        if let Some(buf) = ch.tx.as_mut() {
            if !(ch.unacked.contains_key(&tag) || multiple && tag == 0) {
                return Err(AmqpError::precondition(format!(
                    "unknown delivery tag {tag}"
                )));
            }
            let code = match how {
                Settle::Ack => 0,
                Settle::Requeue => 1,
                Settle::Reject => 2,
            };
            buf.settles.push((tag, multiple, code));
            return Ok(());
        }
        self.settle_now(channel, tag, multiple, how).await
    }

    async fn settle_now(
        &mut self,
        channel: u16,
        tag: u64,
        multiple: bool,
        how: Settle,
    ) -> Result<(), AmqpError> {
        let groups = self
            .channel_mut(channel)?
            .take_tags(tag, multiple)
            .ok_or_else(|| AmqpError::precondition(format!("unknown delivery tag {tag}")))?;
        for (q, ids) in groups {
            let cmd = match how {
                Settle::Ack => QueueCmd::Ack { ids },
                Settle::Requeue => QueueCmd::Requeue { ids },
                Settle::Reject => QueueCmd::Reject { ids },
            };
            let _ = q.send(cmd).await;
        }
        Ok(())
    }

    /// The publish a content frame belongs to; `None` on a closing channel (frame ignored);
    /// 505 when the channel has no publish waiting for content.
    fn pending_publish(
        &mut self,
        channel: u16,
    ) -> Result<Option<&mut PendingPublish>, (u16, AmqpError)> {
        let unexpected = || {
            (
                channel,
                AmqpError::unexpected_frame("expected method frame, got non method frame instead"),
            )
        };
        let ch = self.channels.get_mut(&channel).ok_or_else(unexpected)?;
        if ch.closing {
            return Ok(None);
        }
        ch.publish.as_mut().map(Some).ok_or_else(unexpected)
    }

    async fn on_header(
        &mut self,
        channel: u16,
        header: charon_protocol::ContentHeader,
    ) -> Result<(), (u16, AmqpError)> {
        let Some(p) = self.pending_publish(channel)? else {
            return Ok(());
        };
        if p.header.is_some() {
            return Err((
                channel,
                AmqpError::unexpected_frame(
                    "expected content body, got non content body frame instead",
                ),
            ));
        }
        if header.class_id != CLASS_BASIC {
            return Err((
                channel,
                AmqpError::unexpected_frame(format!(
                    "expected content header for class 60, got one for class {} instead",
                    header.class_id
                )),
            ));
        }
        p.header = Some((header.body_size, header.properties));
        if header.body_size == 0 {
            return self
                .complete_publish(channel)
                .await
                .map_err(|e| (channel, e.on(60, 40)));
        }
        Ok(())
    }

    async fn on_body(
        &mut self,
        channel: u16,
        payload: bytes::Bytes,
    ) -> Result<(), (u16, AmqpError)> {
        let Some(p) = self.pending_publish(channel)? else {
            return Ok(());
        };
        let Some((size, _)) = &p.header else {
            return Err((
                channel,
                AmqpError::unexpected_frame(
                    "expected content header for class 60, got non content header frame instead",
                ),
            ));
        };
        let size = *size;
        if p.first_body.is_none() && p.body.is_empty() && payload.len() as u64 == size {
            p.first_body = Some(payload);
        } else {
            if let Some(first) = p.first_body.take() {
                p.body.extend_from_slice(&first);
            }
            p.body.extend_from_slice(&payload);
        }
        let have = p.first_body.as_ref().map_or(p.body.len(), |b| b.len()) as u64;
        if have >= size {
            return self
                .complete_publish(channel)
                .await
                .map_err(|e| (channel, e.on(60, 40)));
        }
        Ok(())
    }

    async fn complete_publish(&mut self, channel: u16) -> Result<(), AmqpError> {
        let ch = self.channel_mut(channel)?;
        let Some(p) = ch.publish.take() else {
            return Ok(());
        };
        let Some((_, properties)) = p.header else {
            return Ok(());
        };
        let body = match p.first_body {
            Some(b) => b,
            None => p.body.freeze(),
        };
        let seq = if ch.confirm {
            ch.next_seq += 1;
            Some(ch.next_seq)
        } else {
            None
        };
        let exchange = p.method.exchange.as_str();
        let routing_key = p.method.routing_key.as_str();
        // CC/BCC and headers-exchange matching need the headers; decode only when present.
        let decoded = if properties.flags() & 0x2000 != 0 {
            properties.decode().ok()
        } else {
            None
        };
        let headers = decoded.as_ref().and_then(|d| d.headers().as_ref());
        let mut keys: Vec<&str> = vec![routing_key];
        let mut extra: Vec<String> = Vec::new();
        if let Some(h) = headers {
            for k in ["CC", "BCC"] {
                if let Some(AMQPValue::FieldArray(a)) =
                    h.inner().get(&charon_protocol::ShortString::from(k))
                {
                    for v in a.as_slice() {
                        if let AMQPValue::LongString(s) = v {
                            extra.push(String::from_utf8_lossy(s.as_bytes()).into_owned());
                        }
                    }
                }
            }
        }
        keys.extend(extra.iter().map(String::as_str));
        let mut targets: Vec<QueueHandle> = Vec::new();
        {
            let topo = self
                .vhost
                .topology
                .read()
                .unwrap_or_else(|p| p.into_inner());
            topo.route(exchange, &keys, headers, &mut targets)?;
        }
        let message = Arc::new(Message::new(
            Arc::from(exchange),
            Arc::from(routing_key),
            properties,
            body,
        ));
        if targets.is_empty() && p.method.mandatory {
            encode_basic_return(
                &mut self.out,
                channel,
                code::NO_ROUTE,
                "NO_ROUTE",
                exchange,
                routing_key,
            );
            encode_content(
                &mut self.out,
                channel,
                CLASS_BASIC,
                &message.properties,
                &message.body,
                self.frame_max,
            );
        }
        if let Some(seq) = seq {
            let ch = self.channel_mut(channel)?;
            if !targets.is_empty() {
                ch.pending_confirms
                    .insert(seq, u32::try_from(targets.len()).unwrap_or(u32::MAX));
            }
            self.flush_confirms(channel);
        }
        if let Some(buf) = self.channel_mut(channel)?.tx.as_mut() {
            buf.publishes.push((targets, message));
            return Ok(());
        }
        for q in targets {
            let confirm = seq.map(|seq| ConfirmTo {
                conn: self.handle.clone(),
                channel,
                seq,
            });
            let _ = q
                .send(QueueCmd::Publish {
                    message: message.clone(),
                    confirm,
                })
                .await;
        }
        Ok(())
    }

    /// Acks (multiple) everything below the smallest still-pending publish.
    fn flush_confirms(&mut self, channel: u16) {
        let Some(ch) = self.channels.get_mut(&channel) else {
            return;
        };
        let upto = match ch.pending_confirms.keys().next() {
            Some(first) => first - 1,
            None => ch.next_seq,
        };
        if upto > ch.acked_upto {
            let multiple = upto - ch.acked_upto > 1;
            ch.acked_upto = upto;
            encode_basic_ack(&mut self.out, channel, upto, multiple);
        }
    }

    pub(super) fn on_event(&mut self, ev: ConnEvent) {
        match ev {
            ConnEvent::Deliver {
                channel,
                consumer_tag,
                no_ack,
                queue,
                deliveries,
            } => {
                let n = deliveries.len();
                let Some(ch) = self.channels.get_mut(&channel).filter(|c| !c.closing) else {
                    // Channel gone: hand the messages back.
                    let ids: Vec<u64> = deliveries.iter().map(|d| d.id).collect();
                    if !no_ack {
                        queue.kick();
                        let q = queue.clone();
                        tokio::spawn(async move { q.send(QueueCmd::Requeue { ids }).await });
                    }
                    self.handle.flow().release(n);
                    return;
                };
                for d in deliveries {
                    ch.next_tag += 1;
                    let tag = ch.next_tag;
                    if !no_ack {
                        ch.unacked.insert(
                            tag,
                            Unacked {
                                queue: queue.clone(),
                                id: d.id,
                            },
                        );
                    }
                    let m = &d.message;
                    encode_basic_deliver(
                        &mut self.out,
                        channel,
                        &consumer_tag,
                        tag,
                        d.redelivered,
                        &m.exchange,
                        &m.routing_key,
                    );
                    encode_content(
                        &mut self.out,
                        channel,
                        CLASS_BASIC,
                        &m.properties,
                        &m.body,
                        self.frame_max,
                    );
                }
                self.out_deliveries += n;
            }
            ConnEvent::Confirm { channel, seq, ack } => {
                let Some(ch) = self.channels.get_mut(&channel) else {
                    return;
                };
                if let Some(left) = ch.pending_confirms.get_mut(&seq) {
                    *left = left.saturating_sub(1);
                    if *left == 0 || !ack {
                        ch.pending_confirms.remove(&seq);
                    }
                }
                self.flush_confirms(channel);
            }
            ConnEvent::ConsumerCancelled {
                channel,
                consumer_tag,
            } => {
                if let Some(ch) = self.channels.get_mut(&channel)
                    && ch.consumers.remove(&consumer_tag).is_some()
                {
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

/// A server-made name: `prefix` + 22 URL-safe base64 characters (128 random bits), as RabbitMQ.
fn server_tag(prefix: &str) -> String {
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

#[derive(Clone, Copy)]
enum Settle {
    Ack,
    Requeue,
    Reject,
}
