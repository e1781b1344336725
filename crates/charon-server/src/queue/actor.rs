//! The queue actor: one task owns one `QueueState` and carries out what it decides.
//!
//! It drains its command channel in batches (up to [`BATCH`] commands), applies them to the state,
//! then runs the delivery loop once for the whole batch, sending each consumer's deliveries as one
//! event. Delivery credit comes from [`crate::flow`]; the actor never awaits a connection. It
//! wakes on its own for the earliest message expiry, for dead letters waiting to be retried and
//! for its own `x-expires`; what left the queue goes to [`super::dead_letters`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use charon_core::dead_letter::DeadLetterTarget;
use charon_core::{ConsumerId, Delivery, PublishOutcome, QueueState};
use tokio::sync::mpsc;

use super::dead_letters::{self, DeadLetterer};
use super::handle::{ConsumerTarget, Placed, QueueCmd, QueueHandle, QueueStats};
use super::stored::StoreSide;
use crate::broker::VHostState;
use crate::outbound::ConnEvent;

/// Most commands handled between two runs of the delivery loop.
const BATCH: usize = 512;

/// Wall-clock milliseconds: TTLs count from enqueue time by the wall clock (they must survive
/// restarts once the store lands).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

struct Consumer {
    target: ConsumerTarget,
    no_ack: bool,
}

/// Where a queue lives and how it ends.
#[derive(Debug)]
pub struct QueueContext {
    /// Its vhost (dead-letter routing, self-removal).
    pub vhost: Arc<VHostState>,
    /// Auto-delete: remove itself once its last consumer is gone (RabbitMQ's rule: only after
    /// it has had at least one consumer).
    pub auto_delete: bool,
    /// For a durable queue of a broker with a store: its messages in the store.
    pub store: Option<StoreSide>,
}

/// Spawns the actor for `state`, reachable through `handle`.
///
/// The actor keeps a clone of its own handle to register for credit wake-ups, so it lives until
/// it is told to stop ([`QueueCmd::Delete`]), its last consumer leaves an auto-delete queue, or it
/// expires (`x-expires`).
pub fn spawn(
    state: QueueState,
    handle: &QueueHandle,
    rx: mpsc::Receiver<QueueCmd>,
    ctx: QueueContext,
) {
    tokio::spawn(run(state, handle.clone(), rx, ctx));
}

fn dl_target(state: &QueueState) -> Option<DeadLetterTarget> {
    let a = state.args();
    a.dead_letter_exchange.as_ref().map(|x| DeadLetterTarget {
        exchange: Arc::from(x.as_str()),
        routing_key: a.dead_letter_routing_key.as_deref().map(Arc::from),
    })
}

/// Removes the queue from its vhost (auto-delete, x-expires) if the registered queue of that
/// name is this one; its stored messages and its definition go with it.
fn remove_self(ctx: &mut QueueContext, me: &QueueHandle) -> bool {
    {
        let mut topo = ctx
            .vhost
            .topology
            .write()
            .unwrap_or_else(|p| p.into_inner());
        if !topo.queue(me.name()).is_some_and(|e| e.handle.same(me)) {
            return false;
        }
        topo.remove_queue(me.name());
    }
    if let Some(s) = ctx.store.as_mut() {
        s.purge();
    }
    drop(ctx.vhost.save_topology());
    true
}

/// Enqueues `placed` (a publish or a dead letter whose sender chose its id and wrote it to the
/// store); returns whether the queue took it.
fn enqueue(state: &mut QueueState, ctx: &mut QueueContext, placed: Placed, now: u64) -> bool {
    let Placed {
        message,
        id,
        stored,
    } = placed;
    match state.publish_as(id, message.clone(), now) {
        PublishOutcome::Enqueued(_) => {
            if let Some(s) = ctx.store.as_mut() {
                s.accept(id, stored, &message);
            }
            true
        }
        PublishOutcome::Rejected { .. } => {
            if let (Some(s), Some(_)) = (ctx.store.as_mut(), stored) {
                s.refused(id);
            }
            false
        }
    }
}

async fn run(
    mut state: QueueState,
    me: QueueHandle,
    mut rx: mpsc::Receiver<QueueCmd>,
    mut ctx: QueueContext,
) {
    let mut consumers: HashMap<ConsumerId, Consumer> = HashMap::new();
    let mut batch = Vec::with_capacity(BATCH);
    let mut out: Vec<Delivery> = Vec::new();
    let mut dl = DeadLetterer::new(ctx.vhost.clone());
    let mut target = dl_target(&state);
    let mut last_used = now_ms();
    let mut counters = super::admin::QueueCounters::default();
    loop {
        let now = now_ms();
        let expires_at = if consumers.is_empty() {
            state.args().expires.map(|e| last_used.saturating_add(e))
        } else {
            None
        };
        let wake = [state.next_expiry(), dl.next_retry(), expires_at]
            .into_iter()
            .flatten()
            .min();
        let timer = wake.map(|t| Duration::from_millis(t.saturating_sub(now)));
        tokio::select! {
            n = rx.recv_many(&mut batch, BATCH) => if n == 0 { return },
            () = tokio::time::sleep(timer.unwrap_or_default()), if timer.is_some() => {}
        }
        let now = now_ms();
        let mut delivered: Vec<u64> = Vec::new();
        for cmd in batch.drain(..) {
            match cmd {
                QueueCmd::Publish { placed, confirm } => {
                    let taken = enqueue(&mut state, &mut ctx, placed, now);
                    counters.published += u64::from(taken);
                    if let Some(c) = confirm {
                        let _ = c.conn.send(ConnEvent::Confirm {
                            channel: c.channel,
                            seq: c.seq,
                            ack: taken,
                        });
                    }
                }
                QueueCmd::DeadLetter { messages, from } => {
                    // A full reject-publish(-dlx) queue refuses them; they stay with their source.
                    let mut refused = Vec::new();
                    for placed in messages {
                        if state.refuses(placed.message.body_size()) {
                            refused.push(placed);
                        } else {
                            enqueue(&mut state, &mut ctx, placed, now);
                            counters.dead_letters_in += 1;
                        }
                    }
                    if !refused.is_empty() {
                        dead_letters::refuse(from, refused, me.clone());
                    }
                }
                QueueCmd::DeadLetterRefused { messages, target } => {
                    dl.refused(messages, target, now);
                }
                QueueCmd::SetArgs { args } => {
                    state.set_args(*args);
                    target = dl_target(&state);
                }
                QueueCmd::Touch => last_used = now,
                QueueCmd::Consume {
                    id,
                    spec,
                    target,
                    reply,
                } => {
                    last_used = now;
                    let result = state.add_consumer(id, spec);
                    if result.is_ok() {
                        consumers.insert(
                            id,
                            Consumer {
                                target,
                                no_ack: spec.no_ack,
                            },
                        );
                    }
                    let _ = reply.send(result);
                }
                QueueCmd::Cancel { id } => {
                    last_used = now;
                    state.remove_consumer(id);
                    consumers.remove(&id);
                    if consumers.is_empty() && ctx.auto_delete && remove_self(&mut ctx, &me) {
                        return;
                    }
                }
                QueueCmd::Ack { ids } => {
                    counters.acked += ids.len() as u64;
                    state.ack(&ids);
                }
                QueueCmd::Requeue { ids } => state.requeue(&ids),
                QueueCmd::Reject { ids } => {
                    state.reject(&ids);
                }
                QueueCmd::Get { no_ack, reply } => {
                    last_used = now;
                    let mut got = state.get(no_ack, now);
                    if let Some(g) = got.as_mut() {
                        counters.get += 1;
                        if !g.redelivered {
                            delivered.push(g.id);
                        }
                        if let Some(s) = &ctx.store {
                            g.message = s.load(g.id, &g.message);
                        }
                    }
                    let _ = reply.send(got);
                }
                QueueCmd::Purge { reply } => {
                    let _ = reply.send(state.purge());
                }
                QueueCmd::Remove { ids, reply } => {
                    let removed = ids.into_iter().filter(|id| state.remove(*id).is_some());
                    let _ = reply.send(removed.collect());
                }
                QueueCmd::Stats { reply } => {
                    let mut s = stats_of(&state);
                    s.dead_letters_dropped_no_dlx = dl.dropped_no_dlx;
                    let _ = reply.send(s);
                }
                QueueCmd::Delete { reply } => {
                    for c in consumers.values() {
                        let _ = c.target.conn.send(ConnEvent::ConsumerCancelled {
                            channel: c.target.channel,
                            consumer_tag: c.target.tag.clone(),
                        });
                    }
                    let _ = reply.send(state.message_count());
                    if let Some(s) = ctx.store.as_mut() {
                        s.purge();
                    }
                    return;
                }
                QueueCmd::Kick => {}
                QueueCmd::Admin(q) => admin_query(q, &state, &ctx, &dl, &counters),
            }
        }
        counters.delivered += deliver(
            &mut state,
            &me,
            &consumers,
            ctx.store.as_ref(),
            now,
            &mut out,
            &mut delivered,
        );
        state.expire(now);
        // Dead letters routed back to this queue are enqueued here, which may dead-letter
        // others (drop-head); loop until settled (cycle detection bounds it).
        let mut rounds = 0;
        while state.has_dead_letters() && rounds < 16 {
            rounds += 1;
            let dead = state.take_dead_letters();
            counters.note_dead(&dead, target.is_some());
            let local = dl.dispatch(&me, target.as_ref(), dead, now, ctx.store.as_mut());
            for placed in local {
                enqueue(&mut state, &mut ctx, placed, now);
            }
        }
        dl.retry(&me, now);
        if let Some(s) = ctx.store.as_mut() {
            s.delivered(&mut delivered);
            s.gone(state.take_gone());
            s.page_out(&mut state);
        }
        if consumers.is_empty()
            && state
                .args()
                .expires
                .is_some_and(|e| now >= last_used.saturating_add(e))
            && remove_self(&mut ctx, &me)
        {
            // x-expires: the queue goes with its messages, which are not dead-lettered.
            return;
        }
    }
}

/// Runs the delivery loop and sends each consumer's share as one event.
fn deliver(
    state: &mut QueueState,
    me: &QueueHandle,
    consumers: &HashMap<ConsumerId, Consumer>,
    store: Option<&StoreSide>,
    now: u64,
    out: &mut Vec<Delivery>,
    delivered: &mut Vec<u64>,
) -> u64 {
    if consumers.is_empty() || state.message_count() == 0 {
        return 0;
    }
    let mut may_deliver = |id: ConsumerId| -> bool {
        let Some(c) = consumers.get(&id) else {
            return false;
        };
        if !c.target.limit.try_take(me, !c.no_ack) {
            return false;
        }
        if !c.target.conn.flow().try_take(me) {
            if !c.no_ack {
                c.target.limit.settle(1);
            }
            return false;
        }
        true
    };
    state.next_deliveries(now, &mut may_deliver, out);
    let count = out.len() as u64;
    // Group consecutive deliveries per consumer, preserving queue order within each consumer.
    let mut grouped: Vec<(ConsumerId, Vec<Delivery>)> = Vec::new();
    for mut d in out.drain(..) {
        if !d.redelivered {
            delivered.push(d.id);
        }
        if let Some(s) = store {
            d.message = s.load(d.id, &d.message);
        }
        match grouped.iter_mut().find(|(id, _)| *id == d.consumer) {
            Some((_, v)) => v.push(d),
            None => grouped.push((d.consumer, vec![d])),
        }
    }
    for (id, deliveries) in grouped {
        if let Some(c) = consumers.get(&id) {
            let _ = c.target.conn.send(ConnEvent::Deliver {
                channel: c.target.channel,
                consumer_tag: c.target.tag.clone(),
                no_ack: c.no_ack,
                queue: me.clone(),
                deliveries,
            });
        }
    }
    count
}

/// Answers a management query (peek, details).
fn admin_query(
    q: super::admin::AdminQuery,
    state: &QueueState,
    ctx: &QueueContext,
    dl: &DeadLetterer,
    counters: &super::admin::QueueCounters,
) {
    match q {
        super::admin::AdminQuery::Peek {
            offset,
            count,
            reply,
        } => {
            let _ = reply.send(super::admin::peek(state, ctx.store.as_ref(), offset, count));
        }
        super::admin::AdminQuery::Details { reply } => {
            let mut stats = stats_of(state);
            stats.dead_letters_dropped_no_dlx = dl.dropped_no_dlx;
            let (head_timestamp, head_death_time) = super::admin::head_facts(state);
            let _ = reply.send(super::admin::QueueDetails {
                stats,
                counters: *counters,
                ready_bytes: state.ready_bytes(),
                head_timestamp,
                head_death_time,
                dropped_no_route: dl.dropped_no_route,
            });
        }
    }
}

/// The counts a queue reports.
fn stats_of(state: &QueueState) -> QueueStats {
    QueueStats {
        messages: state.message_count(),
        unacked: state.unacked_count(),
        consumers: state.consumer_count(),
        dead_letters_dropped_no_dlx: 0,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use charon_core::{ConsumerSpec, Message, QueueArgs, QueueState};
    use charon_protocol::RawProperties;
    use tokio::sync::oneshot;

    use super::{QueueContext, spawn};
    use crate::broker::VHostState;
    use crate::flow::ChannelLimit;
    use crate::outbound::{ConnEvent, ConnHandle};
    use crate::queue::{ConsumerTarget, Placed, QueueCmd, QueueHandle};

    fn msg(body: &'static str) -> Arc<Message> {
        Arc::new(Message::new(
            Arc::from(""),
            Arc::from("q"),
            RawProperties::empty(),
            Bytes::from_static(body.as_bytes()),
        ))
    }

    fn start() -> QueueHandle {
        let (handle, rx) = QueueHandle::new(Arc::from("q"));
        spawn(
            QueueState::new(Arc::from("q"), QueueArgs::default()),
            &handle,
            rx,
            QueueContext {
                vhost: Arc::new(VHostState::new("/", 1)),
                auto_delete: false,
                store: None,
            },
        );
        handle
    }

    #[tokio::test]
    async fn deliveries_reach_the_consumer_in_publish_order_and_delete_cancels_it() {
        let q = start();
        let (conn, mut events) = ConnHandle::new();
        for b in ["a", "b", "c"] {
            assert!(
                q.send(QueueCmd::Publish {
                    placed: Placed {
                        message: msg(b),
                        id: q.alloc_id(),
                        stored: None
                    },
                    confirm: None
                })
                .await
            );
        }
        let (tx, rx) = oneshot::channel();
        let target = ConsumerTarget {
            conn: conn.clone(),
            channel: 1,
            limit: Arc::new(ChannelLimit::default()),
            tag: Arc::from("ctag"),
        };
        let spec = ConsumerSpec {
            no_ack: false,
            prefetch: 0,
            exclusive: false,
        };
        assert!(
            q.send(QueueCmd::Consume {
                id: 7,
                spec,
                target,
                reply: tx
            })
            .await
        );
        assert_eq!(rx.await.ok(), Some(Ok(())));
        let mut bodies = Vec::new();
        while bodies.len() < 3 {
            match events.recv().await {
                Some(ConnEvent::Deliver {
                    deliveries,
                    consumer_tag,
                    ..
                }) => {
                    assert_eq!(&*consumer_tag, "ctag");
                    bodies.extend(deliveries.iter().map(|d| d.message.body.clone()));
                }
                other => panic!("unexpected event {other:?}"),
            }
        }
        assert_eq!(
            bodies,
            vec![Bytes::from("a"), Bytes::from("b"), Bytes::from("c")]
        );
        let (tx, rx) = oneshot::channel();
        assert!(q.send(QueueCmd::Delete { reply: tx }).await);
        assert_eq!(rx.await.ok(), Some(0));
        match events.recv().await {
            Some(ConnEvent::ConsumerCancelled {
                channel,
                consumer_tag,
            }) => {
                assert_eq!((channel, &*consumer_tag), (1, "ctag"));
            }
            other => panic!("expected basic.cancel, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn get_returns_messages_with_remaining_count_then_empty() {
        let q = start();
        for b in ["x", "y"] {
            assert!(
                q.send(QueueCmd::Publish {
                    placed: Placed {
                        message: msg(b),
                        id: q.alloc_id(),
                        stored: None
                    },
                    confirm: None
                })
                .await
            );
        }
        let (tx, rx) = oneshot::channel();
        assert!(
            q.send(QueueCmd::Get {
                no_ack: true,
                reply: tx
            })
            .await
        );
        let got = rx
            .await
            .ok()
            .flatten()
            .map(|g| (g.message.body.clone(), g.remaining));
        assert_eq!(got, Some((Bytes::from("x"), 1)));
        let (tx, rx) = oneshot::channel();
        assert!(q.send(QueueCmd::Purge { reply: tx }).await);
        assert_eq!(rx.await.ok(), Some(1));
        let (tx, rx) = oneshot::channel();
        assert!(
            q.send(QueueCmd::Get {
                no_ack: true,
                reply: tx
            })
            .await
        );
        assert!(matches!(rx.await, Ok(None)));
    }

    #[tokio::test]
    async fn remove_takes_ready_messages_by_id_and_reports_the_missing() {
        let q = start();
        let mut ids = Vec::new();
        for b in ["a", "b", "c"] {
            let id = q.alloc_id();
            ids.push(id);
            let placed = Placed {
                message: msg(b),
                id,
                stored: None,
            };
            assert!(
                q.send(QueueCmd::Publish {
                    placed,
                    confirm: None
                })
                .await
            );
        }
        let (tx, rx) = oneshot::channel();
        let asked = vec![ids[1], 999];
        assert!(
            q.send(QueueCmd::Remove {
                ids: asked,
                reply: tx
            })
            .await
        );
        assert_eq!(rx.await.ok(), Some(vec![ids[1]]));
        let mut bodies = Vec::new();
        for _ in 0..3 {
            let (tx, rx) = oneshot::channel();
            assert!(
                q.send(QueueCmd::Get {
                    no_ack: true,
                    reply: tx
                })
                .await
            );
            if let Some(g) = rx.await.ok().flatten() {
                bodies.push(g.message.body.clone());
            }
        }
        assert_eq!(bodies, vec![Bytes::from("a"), Bytes::from("c")]);
    }
}
