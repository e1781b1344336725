//! Publishing a message as a client's basic.publish would, from inside the broker (replays):
//! routed by the vhost's exchanges, stored once for its durable queues when persistent, and
//! confirmed only when every queue took it and the store has it on disk.

use std::sync::Arc;

use bytes::Bytes;
use charon_core::Message;
use charon_protocol::RawProperties;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::handles::{ConfirmTo, ConnEvent, ConnHandle, QueueCmd, QueueHandle};
use crate::persist::Durable;
use crate::queue::{allocate, now_ms, placed};
use crate::vhost::VHostState;

/// Why a publish did not land.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// Routing failed (no such exchange, internal exchange): RabbitMQ's text.
    #[error("{0}")]
    Route(String),
    /// No queue is bound for it.
    #[error("NO_ROUTE")]
    NoRoute,
    /// A queue refused it (`reject-publish`), or went away.
    #[error("refused by queue '{0}'")]
    Refused(String),
    /// The store could not take it.
    #[error("not stored: {0}")]
    Store(String),
}

/// A publish handed to its queues, not yet confirmed.
#[derive(Debug)]
pub struct Pending {
    /// The store's index of the message (`None`: not stored: transient, or no durable queue).
    pub store_index: Option<u64>,
    commit: Option<Durable>,
    confirms: UnboundedReceiver<ConnEvent>,
    queues: Vec<QueueHandle>,
}

impl Pending {
    /// Waits for every queue's confirm and the store's commit.
    pub async fn wait(mut self) -> Result<(), PublishError> {
        let mut left = self.queues.len();
        while left > 0 {
            match self.confirms.recv().await {
                Some(ConnEvent::Confirm { ack: true, .. }) => left -= 1,
                Some(ConnEvent::Confirm { ack: false, .. }) => {
                    return Err(PublishError::Refused(refused_name(&self.queues)));
                }
                Some(ConnEvent::Confirms { answers, .. }) => {
                    for (_, ack) in answers.iter() {
                        if !ack {
                            return Err(PublishError::Refused(refused_name(&self.queues)));
                        }
                        left = left.saturating_sub(1);
                    }
                }
                Some(_) => {}
                None => return Err(PublishError::Refused(refused_name(&self.queues))),
            }
        }
        if let Some(c) = self.commit.take()
            && !c.wait().await
        {
            return Err(PublishError::Store("the store could not write it".into()));
        }
        Ok(())
    }
}

fn refused_name(queues: &[QueueHandle]) -> String {
    queues
        .first()
        .map(|q| q.name().to_string())
        .unwrap_or_default()
}

/// A publish routed and appended to the store, not yet handed to its queues: no consumer can
/// receive it before [`Prepared::hand_over`] (replays record its store index first).
#[derive(Debug)]
pub(super) struct Prepared {
    /// The store's index of the message (`None`: not stored: transient, or no durable queue).
    pub store_index: Option<u64>,
    commit: Option<Durable>,
    message: Arc<Message>,
    places: crate::queue::Places,
    targets: Vec<QueueHandle>,
}

impl Prepared {
    /// Hands the message to its queues; the confirms follow in [`Pending::wait`].
    pub(super) async fn hand_over(self) -> Result<Pending, PublishError> {
        let (conn, confirms) = ConnHandle::new();
        for (q, placed) in placed(self.places, &self.message, self.store_index) {
            let confirm = Some(ConfirmTo {
                conn: conn.clone(),
                channel: 1,
                seq: 1,
            });
            if !q.send(QueueCmd::Publish { placed, confirm }).await {
                return Err(PublishError::Refused(q.name().to_string()));
            }
        }
        Ok(Pending {
            store_index: self.store_index,
            commit: self.commit,
            confirms,
            queues: self.targets,
        })
    }
}

/// Routes and hands `properties`/`body` to the queues `exchange` reaches in `vhost` with any of
/// `routing_keys` (see [`prepare`]).
pub async fn publish_message(
    vhost: &Arc<VHostState>,
    exchange: &str,
    routing_keys: &[&str],
    properties: RawProperties,
    body: Bytes,
) -> Result<Pending, PublishError> {
    prepare(vhost, exchange, routing_keys, properties, body)?
        .hand_over()
        .await
}

/// Routes `properties`/`body` in `vhost` through `exchange` with any of `routing_keys` (the first
/// is the message's routing key; the others are what `CC` added when it was first published, as
/// its `x-death` entry kept them) and appends it to the store for its durable queues.
pub(super) fn prepare(
    vhost: &Arc<VHostState>,
    exchange: &str,
    routing_keys: &[&str],
    properties: RawProperties,
    body: Bytes,
) -> Result<Prepared, PublishError> {
    let routing_key = routing_keys.first().copied().unwrap_or("");
    let decoded = properties.decode().ok();
    let headers = decoded.as_ref().and_then(|d| d.headers().as_ref());
    let mut targets: Vec<QueueHandle> = Vec::new();
    {
        let topo = vhost.topology.read().unwrap_or_else(|p| p.into_inner());
        let keys = if routing_keys.is_empty() {
            &[""][..]
        } else {
            routing_keys
        };
        topo.route(exchange, keys, headers, &mut targets)
            .map_err(|e| PublishError::Route(e.to_string()))?;
    }
    if targets.is_empty() {
        return Err(PublishError::NoRoute);
    }
    let message = Arc::new(Message::new(
        Arc::from(exchange),
        Arc::from(routing_key),
        properties,
        body,
    ));
    let persistent = message.properties.delivery_mode() == Some(2);
    let (places, members) = allocate(targets.clone(), persistent);
    let (stored, commit) = match vhost.persistence() {
        Some(p) if !members.is_empty() => match p.publish(&message, &members, now_ms()) {
            (Some(msg), durable) => (Some(msg), Some(durable)),
            (None, _) => return Err(PublishError::Store("the store refused it".into())),
        },
        _ => (None, None),
    };
    Ok(Prepared {
        store_index: stored,
        commit,
        message,
        places,
        targets,
    })
}
