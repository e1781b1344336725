//! Replaying ready messages of a queue (a dead-letter queue, typically) to an exchange, for the
//! management API and the UI's DLQ browser: each message is moved inside the broker, not copied
//! by a client. The message keeps its properties byte for byte (headers, x-death with its
//! timestamps, CC); it goes to its original exchange and routing keys (`x-death`, charon-core's
//! `original_target`) or to a given exchange and routing key.
//!
//! One message at a time, inside its queue's actor (`QueueCmd::Take`): the route is decided with
//! the message in hand, and only a message that routes somewhere leaves the queue. A stored
//! message moves in the store with one `Route` record (out of this queue, into every durable
//! target, atomically), so after a crash it is in one place or the other, never both, never
//! lost; the call returns once that record is durable. Permissions are those of a get here
//! (read on the queue) and a publish there (write on the exchange); the exchange counts the
//! publish like any other.

use std::sync::Arc;

use charon_core::{Message, MsgId, dead_letter, routing};
use charon_protocol::BasicProperties;
use tokio::sync::oneshot;

use crate::access::{Permission, ResourceKind};
use crate::admin::users::AdminError;
use crate::broker::Broker;
use crate::handles::{QueueCmd, QueueHandle, TakeRoute, TakeRouteFn, Taken};
use crate::locks::RwLockExt;
use crate::queue::{allocate, now_ms, placed};
use crate::vhost::VHostState;

/// Where replayed messages go.
#[derive(Debug, Clone)]
pub enum ReplayTarget {
    /// Each message's original exchange and routing keys (from its `x-death`).
    Original,
    /// This exchange (`""`: the default exchange) with this routing key (plus the message's own
    /// `CC` header keys).
    To {
        /// Exchange.
        exchange: String,
        /// Routing key.
        routing_key: String,
    },
}

/// What happened to each message asked for.
#[derive(Debug, Default, Clone)]
pub struct ReplayReport {
    /// Replayed: `(id, exchange, queues reached)`.
    pub replayed: Vec<(MsgId, String, usize)>,
    /// Not ready in the queue (consumed, removed, never there).
    pub missing: Vec<MsgId>,
    /// Left in the queue, with the reason (no x-death, exchange missing, routed nowhere,
    /// access refused).
    pub failed: Vec<(MsgId, String)>,
}

/// Decides, in the queue actor, where `message` goes: `Ok((message to publish, targets))`.
fn route_fn(
    vhost: Arc<VHostState>,
    access: Option<Arc<crate::access::VHostAccess>>,
    target: ReplayTarget,
) -> TakeRouteFn {
    Box::new(move |m: &Arc<Message>| {
        let props: Option<BasicProperties> = m.properties.decode().ok();
        let headers = props.as_ref().and_then(|p| p.headers().as_ref());
        let (exchange, mut keys) = match target {
            ReplayTarget::Original => dead_letter::original_target(headers)
                .ok_or_else(|| "not dead-lettered: no x-death header".to_string())?,
            ReplayTarget::To {
                exchange,
                routing_key,
            } => (exchange, vec![routing_key]),
        };
        if keys.is_empty() {
            keys.push(m.routing_key.to_string());
        }
        let access = access.ok_or_else(|| "access refused".to_string())?;
        access
            .check(ResourceKind::Exchange, &exchange, Permission::Write)
            .map_err(|e| e.to_string())?;
        // The message's own CC keys route too, as at publish (BCC was stripped then).
        let cc = props
            .as_ref()
            .map(|p| routing::header_routes(p).0)
            .unwrap_or_default();
        let mut all: Vec<&str> = keys.iter().map(String::as_str).collect();
        all.extend(cc.iter().map(|k| k.as_ref()));
        let mut targets = Vec::new();
        {
            let topo = vhost.topology.read_recover();
            if topo.exchange(&exchange).is_none() {
                return Err(format!("no exchange '{exchange}'"));
            }
            topo.route(&exchange, &all, headers, &mut targets)
                .map_err(|e| e.to_string())?;
        }
        if targets.is_empty() {
            return Err(format!("exchange '{exchange}' routed it to no queue"));
        }
        let first = keys.first().map_or("", String::as_str);
        let replayed = Message::new(
            Arc::from(exchange.as_str()),
            Arc::from(first),
            m.properties.clone(),
            m.body.clone(),
        );
        Ok((Arc::new(replayed), targets))
    })
}

impl Broker {
    /// Replays the ready messages `ids` of `queue` in `vhost` as `user` to `target`.
    pub async fn replay_messages(
        &self,
        user: &str,
        vhost: &str,
        queue: &str,
        ids: Vec<MsgId>,
        target: ReplayTarget,
    ) -> Result<ReplayReport, AdminError> {
        let handle = self.queue_handle(vhost, queue)?;
        self.access()
            .check(user, vhost, ResourceKind::Queue, queue, Permission::Read)?;
        let v = self
            .vhost(vhost)
            .ok_or_else(|| AdminError::Missing("vhost_not_found".into()))?;
        let mut report = ReplayReport::default();
        let mut wrote = false;
        for id in ids {
            let route = route_fn(
                v.clone(),
                self.access().permissions(user, vhost),
                target.clone(),
            );
            let (tx, rx) = oneshot::channel();
            let cmd = QueueCmd::Take {
                id,
                route: TakeRoute(route),
                reply: tx,
            };
            if !handle.send(cmd).await {
                return Err(AdminError::NotFound);
            }
            match rx.await.map_err(|_| AdminError::NotFound)? {
                Taken::Missing => report.missing.push(id),
                Taken::Refused(why) => report.failed.push((id, why)),
                Taken::Out {
                    message,
                    targets,
                    source,
                    store_msg,
                } => {
                    let n = targets.len();
                    let exchange = message.exchange.to_string();
                    wrote |= self
                        .deliver_moved(&v, message, targets, source, store_msg)
                        .await;
                    report.replayed.push((id, exchange, n));
                }
            }
        }
        if wrote {
            self.wait_durable().await;
        }
        Ok(report)
    }

    /// Hands a taken message to `targets`; its stored copy (`source`) moves with one `Route`
    /// record, or a persistent message not stored before is stored for its durable targets.
    /// Returns whether the store was written.
    async fn deliver_moved(
        &self,
        v: &VHostState,
        message: Arc<Message>,
        targets: Vec<QueueHandle>,
        source: Option<(u64, u64)>,
        store_msg: Option<u64>,
    ) -> bool {
        let persistent = message.properties.delivery_mode() == Some(2);
        let (places, members) = allocate(targets, persistent);
        let p = v.persistence();
        let (stored, wrote) = match (source, p) {
            (Some(src), Some(p)) => {
                p.route(src, members);
                (store_msg, true)
            }
            (None, Some(p)) if !members.is_empty() => {
                let (msg, _durable) = p.publish(&message, &members, now_ms());
                (msg, true)
            }
            _ => (None, false),
        };
        for (q, placed) in placed(places, &message, stored) {
            let _ = q
                .send(QueueCmd::Publish {
                    placed,
                    confirm: None,
                })
                .await;
        }
        wrote
    }
}
