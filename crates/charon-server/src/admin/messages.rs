//! Messages through the management API: publish to an exchange, get from a queue with
//! RabbitMQ's ack modes, purge, and peek (Charon's: read ready messages in queue order without
//! changing the queue). Permission checks are the AMQP ones: write on the exchange to publish,
//! read on the queue to get, purge or peek.

use std::sync::Arc;

use bytes::Bytes;
use charon_core::{Message, routing};
use charon_protocol::{BasicProperties, RawProperties};

use super::topology::ask;
use super::users::AdminError;
use crate::access::{Permission, ResourceKind};
use crate::broker::Broker;
use crate::handles::{QueueCmd, QueueHandle};
use crate::queue::admin::{AdminQuery, Peeked, QueueDetails};
use crate::queue::place;

/// What a `POST .../get` does with the messages it fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckMode {
    /// `ack_requeue_true`: back to the queue (redelivered).
    AckRequeueTrue,
    /// `ack_requeue_false`: removed (acked).
    AckRequeueFalse,
    /// `reject_requeue_true`: back to the queue (redelivered).
    RejectRequeueTrue,
    /// `reject_requeue_false`: rejected (dead-lettered if the queue has a DLX).
    RejectRequeueFalse,
}

impl AckMode {
    /// Parses RabbitMQ's names.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "ack_requeue_true" => AckMode::AckRequeueTrue,
            "ack_requeue_false" => AckMode::AckRequeueFalse,
            "reject_requeue_true" => AckMode::RejectRequeueTrue,
            "reject_requeue_false" => AckMode::RejectRequeueFalse,
            _ => return None,
        })
    }
}

/// A message fetched by get.
#[derive(Debug, Clone)]
pub struct Got {
    /// The message.
    pub message: Arc<Message>,
    /// Delivered before.
    pub redelivered: bool,
    /// Ready messages left after it.
    pub remaining: u32,
}

impl Broker {
    fn readable_queue(
        &self,
        user: &str,
        vhost: &str,
        name: &str,
    ) -> Result<QueueHandle, AdminError> {
        let q = self.queue_handle(vhost, name)?;
        self.access()
            .check(user, vhost, ResourceKind::Queue, name, Permission::Read)?;
        Ok(q)
    }

    /// Publishes as `user`; returns whether the message reached a queue. A persistent message
    /// is on disk when this returns.
    pub async fn publish_message(
        &self,
        user: &str,
        vhost: &str,
        exchange: &str,
        routing_key: &str,
        properties: BasicProperties,
        body: Bytes,
    ) -> Result<bool, AdminError> {
        let v = self
            .vhost(vhost)
            .ok_or_else(|| AdminError::Missing("vhost_not_found".into()))?;
        self.access().check(
            user,
            vhost,
            ResourceKind::Exchange,
            exchange,
            Permission::Write,
        )?;
        let (cc, bcc) = routing::header_routes(&properties);
        let mut keys: Vec<&str> = vec![routing_key];
        keys.extend(cc.iter().chain(&bcc).map(|k| k.as_ref()));
        let mut targets: Vec<QueueHandle> = Vec::new();
        {
            let topo = v.topology.read().unwrap_or_else(|p| p.into_inner());
            if topo.exchange(exchange).is_none() {
                return Err(AdminError::NotFound);
            }
            crate::topic_access::check_publish(self, &topo, user, exchange, &keys)?;
            topo.route(exchange, &keys, properties.headers().as_ref(), &mut targets)?;
        }
        let raw =
            routing::strip_bcc(&properties).unwrap_or_else(|| RawProperties::encode(&properties));
        let message = Arc::new(
            Message::new(Arc::from(exchange), Arc::from(routing_key), raw, body).with_bcc(bcc),
        );
        let routed = !targets.is_empty();
        let (placed, durable) = place(&v, targets, &message);
        for (q, placed) in placed {
            let _ = q
                .send(QueueCmd::Publish {
                    placed,
                    confirm: None,
                })
                .await;
        }
        if let Some(d) = durable
            && !d.wait().await
        {
            return Err(AdminError::BadRequest(
                "the message could not be stored".into(),
            ));
        }
        Ok(routed)
    }

    /// Fetches up to `count` messages as `user`, then settles them all per `mode`.
    pub async fn get_messages(
        &self,
        user: &str,
        vhost: &str,
        queue: &str,
        count: usize,
        mode: AckMode,
    ) -> Result<Vec<Got>, AdminError> {
        let q = self.readable_queue(user, vhost, queue)?;
        let mut got = Vec::new();
        let mut ids = Vec::new();
        for _ in 0..count {
            let Some(Some(g)) = ask(&q, |reply| QueueCmd::Get {
                no_ack: false,
                reply,
            })
            .await
            else {
                break;
            };
            ids.push(g.id);
            got.push(Got {
                message: g.message,
                redelivered: g.redelivered,
                remaining: g.remaining,
            });
        }
        if !ids.is_empty() {
            let cmd = match mode {
                AckMode::AckRequeueTrue | AckMode::RejectRequeueTrue => QueueCmd::Requeue { ids },
                AckMode::AckRequeueFalse => QueueCmd::Ack { ids },
                AckMode::RejectRequeueFalse => QueueCmd::Reject { ids },
            };
            let _ = q.send(cmd).await;
        }
        Ok(got)
    }

    /// Purges a queue as `user`; returns how many ready messages went.
    pub async fn purge_queue(
        &self,
        user: &str,
        vhost: &str,
        queue: &str,
    ) -> Result<u32, AdminError> {
        let q = self.readable_queue(user, vhost, queue)?;
        ask(&q, |reply| QueueCmd::Purge { reply })
            .await
            .ok_or(AdminError::NotFound)
    }

    /// Peeks as `user`: up to `count` ready messages from position `offset`, unchanged.
    pub async fn peek_messages(
        &self,
        user: &str,
        vhost: &str,
        queue: &str,
        offset: usize,
        count: usize,
    ) -> Result<Vec<Peeked>, AdminError> {
        let q = self.readable_queue(user, vhost, queue)?;
        ask(&q, |reply| {
            QueueCmd::Admin(AdminQuery::Peek {
                offset,
                count,
                reply,
            })
        })
        .await
        .ok_or(AdminError::NotFound)
    }

    /// A queue's details (counts, counters, head facts); `None` when it is gone.
    pub async fn queue_details(&self, q: &QueueHandle) -> Option<QueueDetails> {
        ask(q, |reply| QueueCmd::Admin(AdminQuery::Details { reply })).await
    }
}
