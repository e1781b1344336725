//! Frame and method handling for an open connection.
//!
//! This module takes frames apart (method/header/body/heartbeat, connection vs channel), handles
//! the channel class and dispatches the other classes to one file each: [`exchanges`],
//! [`queues`], [`consume`] (basic minus publish), [`publish`] (basic.publish and its content
//! frames), [`transactions`] (tx and confirm.select); [`events`] handles what queue actors send.
//! Domain rules (routing, declare equivalence, queue state) live in `charon-core` and in the
//! queue actors; permission checks in [`crate::access`]. Errors come back as [`AmqpError`] and
//! are turned into channel.close or connection.close in [`Connection::on_frame`].

use charon_protocol::methods::{channel as chm, confirm, connection, queue};
use charon_protocol::{AMQPClass, FRAME_BODY, FRAME_HEADER, FRAME_HEARTBEAT, Frame, encode_method};

use super::channel::Channel;
use super::shapes::BodyPart;
use super::{Connection, Next};
use crate::access::{Permission, ResourceKind};
use crate::error::{AmqpError, ServerError};
use crate::handles::{QueueCmd, QueueHandle};

mod consume;
mod delayed;
mod events;
mod exchanges;
mod fast;
mod publish;
mod queues;
mod settles;
mod transactions;

pub(super) use fast::HotRest;

pub(crate) use settles::Gathered;

fn method_ids(m: &AMQPClass) -> (u16, u16) {
    (m.get_amqp_class_id(), m.get_amqp_method_id())
}

/// Cancels a channel's consumers and returns its unacked messages to their queues, in order,
/// and waits until every queue concerned has handled that (an auto-delete queue whose last
/// consumer went is gone from its vhost by then), as RabbitMQ does before its close-ok.
pub(crate) async fn release_channel(ch: Channel) {
    let mut touched: Vec<QueueHandle> = Vec::new();
    let mut touch = |q: &QueueHandle| {
        if !touched.iter().any(|t| t.same(q)) {
            touched.push(q.clone());
        }
    };
    for (_, c) in ch.consumers {
        touch(&c.queue);
        let _ = c.queue.send(QueueCmd::Cancel { id: c.id }).await;
    }
    let mut groups: Vec<(QueueHandle, Vec<u64>)> = Vec::new();
    let mut unacked = ch.unacked;
    unacked.take_all(
        |u| match groups.iter_mut().find(|(q, _)| q.same(&u.queue)) {
            Some((_, ids)) => ids.push(u.id),
            None => groups.push((u.queue, vec![u.id])),
        },
    );
    for (q, ids) in groups {
        touch(&q);
        // A closed channel's messages go back without counting a failed delivery.
        let _ = q.send(QueueCmd::Return { ids }).await;
    }
    for q in touched {
        barrier(&q).await;
    }
}

/// Waits until `q` has handled every command sent to it before (or has stopped).
pub(crate) async fn barrier(q: &QueueHandle) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    if q.send(QueueCmd::Stats { reply: tx }).await {
        let _ = rx.await;
    }
}

impl Connection {
    pub(super) async fn on_frame(&mut self, frame: Frame) -> Next {
        if self.closing {
            if let Frame::Method { method, .. } = &frame {
                match **method {
                    AMQPClass::Connection(connection::AMQPMethod::CloseOk(_)) => return Next::Stop,
                    AMQPClass::Connection(connection::AMQPMethod::Close(_)) => {
                        self.owes_close_ok = true;
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
                ServerError::frame_refused(FRAME_HEARTBEAT, &[]).into(),
            )),
            Frame::Method { channel: 0, method } => return self.on_connection_method(*method),
            Frame::Method { channel, method } => self.on_channel_method(channel, *method).await,
            // Content on channel 0: RabbitMQ's reader refuses the frame itself.
            Frame::Header { channel: 0, header } => Err((
                0,
                ServerError::frame_refused(FRAME_HEADER, &header.payload()).into(),
            )),
            Frame::Body {
                channel: 0,
                payload,
            } => Err((0, ServerError::frame_refused(FRAME_BODY, &payload).into())),
            Frame::Header { channel, header } => {
                let complete = self.on_header(channel, header);
                self.complete_if(channel, complete).await
            }
            Frame::Body { channel, payload } => {
                let complete = self.on_body(channel, BodyPart::Shared(payload));
                self.complete_if(channel, complete).await
            }
        };
        match result {
            Ok(()) => Next::Continue,
            Err(e) => self.frame_failed(e).await,
        }
    }

    /// Completes the publish on `channel` when its content is complete.
    async fn complete_if(
        &mut self,
        channel: u16,
        complete: Result<bool, (u16, AmqpError)>,
    ) -> Result<(), (u16, AmqpError)> {
        if complete? {
            self.complete_publish(channel).await.map_err(|e| {
                (
                    channel,
                    e.on(
                        charon_protocol::CLASS_BASIC,
                        super::channel::PUBLISH_METHOD_ID,
                    ),
                )
            })?;
        }
        Ok(())
    }

    /// A frame's handling failed: close its channel (soft error) or the connection.
    pub(super) async fn frame_failed(&mut self, (channel, err): (u16, AmqpError)) -> Next {
        if !err.is_connection_error() && channel != 0 {
            self.close_channel(channel, err).await;
        } else {
            self.close_connection(err);
        }
        Next::Continue
    }

    fn on_connection_method(&mut self, method: AMQPClass) -> Next {
        match method {
            AMQPClass::Connection(connection::AMQPMethod::Close(_)) => {
                // close-ok goes out once channels and exclusive queues are gone (`serve`).
                self.owes_close_ok = true;
                Next::Stop
            }
            AMQPClass::Connection(connection::AMQPMethod::CloseOk(_)) => Next::Stop,
            AMQPClass::Connection(connection::AMQPMethod::UpdateSecret(u)) => {
                self.update_secret(u.reason.as_str());
                Next::Continue
            }
            other => {
                let (c, m) = method_ids(&other);
                self.close_connection(
                    AmqpError::from(ServerError::UnexpectedConnectionMethod).on(c, m),
                );
                Next::Continue
            }
        }
    }

    /// connection.update-secret: RabbitMQ's internal users have no expiring credentials, so the
    /// new secret changes nothing; the user's access to the vhost is checked again (it may have
    /// been revoked since the connection opened) and update-secret-ok is sent.
    fn update_secret(&mut self, reason: &str) {
        match self
            .broker
            .access()
            .permissions(&self.user, &self.vhost_name)
        {
            Some(access) => {
                self.access = access;
                tracing::info!(conn = self.id, user = %self.user, reason, "user updated secret");
                self.reply(
                    0,
                    AMQPClass::Connection(connection::AMQPMethod::UpdateSecretOk(
                        connection::UpdateSecretOk {},
                    )),
                );
            }
            None => {
                let err: AmqpError = ServerError::VHostAccessRefused {
                    vhost: self.vhost_name.clone(),
                    user: self.user.clone(),
                }
                .into();
                self.close_connection(err.on(10, 70));
            }
        }
    }

    pub(super) async fn close_channel(&mut self, channel: u16, err: AmqpError) {
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
                reply_code: err.code.code(),
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
                    AmqpError::from(ServerError::SecondChannelOpen).on(cid, mid),
                ));
            }
            if self.channels.len() >= usize::from(self.channel_max) {
                let err = ServerError::ChannelMaxReached {
                    open: self.channels.len(),
                    max: self.channel_max,
                };
                return Err((channel, AmqpError::from(err).on(cid, mid)));
            }
            let slot = self
                .slot
                .limits()
                .open_channel(&self.user)
                .map_err(|e| (channel, e.on(cid, mid)))?;
            let ch = Channel {
                _slot: Some(slot),
                ..Default::default()
            };
            self.admin.channel_opened(channel, &ch.stats);
            self.channels.insert(channel, ch);
            self.reply(
                channel,
                AMQPClass::Channel(chm::AMQPMethod::OpenOk(chm::OpenOk {})),
            );
            return Ok(());
        }
        let Some(ch) = self.channels.get(&channel) else {
            return Err((
                channel,
                AmqpError::from(ServerError::ChannelNotOpen).on(cid, mid),
            ));
        };
        if ch.closing {
            match method {
                AMQPClass::Channel(chm::AMQPMethod::CloseOk(_)) => {
                    self.channels.remove(&channel);
                }
                AMQPClass::Channel(chm::AMQPMethod::Close(_)) => {
                    // Both sides closed at once: answer, but stay closing until the client's
                    // close-ok for our channel.close arrives (RabbitMQ's reader does the same).
                    self.reply(
                        channel,
                        AMQPClass::Channel(chm::AMQPMethod::CloseOk(chm::CloseOk {})),
                    );
                }
                _ => {}
            }
            return Ok(());
        }
        if let Some(p) = &ch.publish {
            return Err((channel, p.content_expected()));
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
                    return Err(ServerError::FlowInactive.into());
                }
                self.reply(
                    channel,
                    AMQPClass::Channel(chm::AMQPMethod::FlowOk(chm::FlowOk { active: true })),
                );
            }
            AMQPClass::Exchange(m) => {
                self.on_exchange(channel, m)?;
                // The reply goes out after this returns: declare-ok means the definition is on disk.
                if let Some(t) = self.vhost.save_topology() {
                    t.wait().await;
                }
            }
            AMQPClass::Queue(m) => {
                let changes = !matches!(m, queue::AMQPMethod::Purge(_));
                self.on_queue(channel, m).await?;
                if changes && let Some(t) = self.vhost.save_topology() {
                    t.wait().await;
                }
            }
            AMQPClass::Basic(m) => self.on_basic(channel, m).await?,
            AMQPClass::Confirm(confirm::AMQPMethod::Select(s)) => {
                self.on_confirm_select(channel, s)?
            }
            AMQPClass::Tx(m) => self.on_tx(channel, m).await?,
            _ => {
                return Err(ServerError::UnimplementedMethod.into());
            }
        }
        Ok(())
    }

    /// Checks one permission of this connection's user on its vhost (403 when refused).
    fn permit(&self, kind: ResourceKind, name: &str, perm: Permission) -> Result<(), AmqpError> {
        Ok(self.access.check(kind, name, perm)?)
    }

    fn channel_mut(&mut self, channel: u16) -> Result<&mut Channel, AmqpError> {
        self.channels
            .get_mut(&channel)
            .ok_or_else(|| ServerError::ChannelNotOpen.into())
    }
}
