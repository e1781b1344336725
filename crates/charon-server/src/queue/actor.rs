//! The queue actor: one task owns one `QueueState` and carries out what it decides.
//!
//! It drains its command channel in batches (up to [`BATCH`] commands), applies them to the state,
//! then runs the delivery loop once for the whole batch, sending each consumer's deliveries as one
//! event. Delivery credit comes from [`crate::handles`]; the actor never awaits a connection. It
//! wakes on its own for the earliest message expiry, for dead letters waiting to be retried and
//! for its own `x-expires`; what left the queue goes to [`super::dead_letters`].

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use charon_core::dead_letter::DlxSettings;
use charon_core::{ConsumerId, Delivery, PublishOutcome, QueueState};
use tokio::sync::mpsc;

use super::dead_letters::{self, DeadLetterDispatcher};
use super::retry::RetrySide;
use super::stored::StoreSide;
use crate::handles::{
    ConfirmBatch, ConnEvent, ConsumerTarget, Placed, QueueCmd, QueueHandle, QueueStats,
};
use crate::locks::RwLockExt;
use crate::vhost::VHostState;

/// Most commands handled between two runs of the delivery loop.
const BATCH: usize = 512;
/// A loop of the actor longer than this is logged (debug).
const SLOW_LOOP: Duration = Duration::from_millis(5);
/// How many expired messages are dead-lettered at a time (see `after_batch`).
const EXPIRE_BATCH: usize = 4096;

/// Wall-clock milliseconds: TTLs count from enqueue time by the wall clock (they must survive
/// restarts once the store lands).
pub(crate) fn now_ms() -> u64 {
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
pub(crate) struct QueueContext {
    /// Its vhost (dead-letter routing, self-removal).
    pub(crate) vhost: Arc<VHostState>,
    /// Auto-delete: remove itself once its last consumer is gone (RabbitMQ's rule: only after
    /// it has had at least one consumer).
    pub(crate) auto_delete: bool,
    /// For a durable queue of a broker with a store: its messages in the store.
    pub(crate) store: Option<StoreSide>,
}

/// Spawns the actor for `state`, reachable through `handle`.
///
/// The actor keeps a clone of its own handle to register for credit wake-ups, so it lives until
/// it is told to stop ([`QueueCmd::Delete`]), its last consumer leaves an auto-delete queue, or it
/// expires (`x-expires`).
pub(crate) fn spawn(
    state: QueueState,
    handle: &QueueHandle,
    rx: mpsc::Receiver<QueueCmd>,
    ctx: QueueContext,
) {
    tokio::spawn(run(state, handle.clone(), rx, ctx));
}

fn dl_target(state: &QueueState) -> Option<DlxSettings> {
    let a = state.args();
    a.dead_letter_exchange.as_ref().map(|x| DlxSettings {
        exchange: Arc::from(x.as_str()),
        routing_key: a.dead_letter_routing_key.as_deref().map(Arc::from),
    })
}

/// Whether the actor goes on after a command or a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    Continue,
    Stop,
}

/// One queue actor's state: the queue, its consumers, its dead-lettering side, its context.
struct Actor {
    state: QueueState,
    me: QueueHandle,
    ctx: QueueContext,
    /// Looked up once per delivery: a fast hash (ids are broker-made).
    consumers: foldhash::HashMap<ConsumerId, Consumer>,
    dl: DeadLetterDispatcher,
    /// Where dead letters go (argument or policy), if anywhere.
    target: Option<DlxSettings>,
    /// Last use (consume, cancel, get, redeclare): `x-expires` counts from here.
    last_used: u64,
    /// Deliveries of this batch (reused buffer).
    out: Vec<Delivery>,
    /// Store delivery counters to write: (id, failed deliveries + 1), at a first delivery (1)
    /// and at every failed delivery (reject/nack requeue=true).
    delivered: Vec<(u64, u32)>,
    /// Retries: parked messages, held keys (`queue/retry.rs`).
    retry: RetrySide,
    /// Message counters for management and metrics (this actor is their only writer).
    counters: super::admin::QueueCounters,
    /// Dead-lettered counts by error fingerprint.
    errors: super::dl_errors::DlErrors,
    /// Publisher confirms of this batch, sent once it is handled.
    confirms: ConfirmBatch,
    /// An archive queue's direct hand-over to its archiver (`queue/direct.rs`).
    direct: super::direct::DirectSide,
}

async fn run(
    state: QueueState,
    me: QueueHandle,
    mut rx: mpsc::Receiver<QueueCmd>,
    ctx: QueueContext,
) {
    let mut actor = Actor::new(state, me, ctx);
    // Grows with the batches that come (up to BATCH): an idle queue does not keep room for
    // 512 commands (~45 KiB, most of an idle queue's memory with 10,000 queues).
    let mut batch = Vec::new();
    let mut page_wake = super::page_flow::Wake::new(actor.ctx.store.as_ref());
    loop {
        let timer = actor.next_wake(now_ms());
        let slept = std::time::Instant::now();
        let paging = page_wake.armed(actor.ctx.store.as_ref());
        tokio::select! {
            n = rx.recv_many(&mut batch, BATCH) => if n == 0 { return },
            () = tokio::time::sleep(timer.unwrap_or_default()), if timer.is_some() => {}
            () = page_wake.wait(paging), if paging.is_some() => {}
        }
        let now = now_ms();
        let t0 = std::time::Instant::now();
        if let Some(late) = timer.and_then(|t| (t0 - slept).checked_sub(t))
            && late >= SLOW_LOOP
        {
            tracing::debug!(queue = %actor.me.name(), late_us = late.as_micros() as u64, "late queue wake");
        }
        let commands = batch.len();
        crate::turn_cpu::start();
        actor
            .me
            .took_from_inbox(batch.iter().map(crate::handles::inbox_bytes_of).sum());
        for cmd in batch.drain(..) {
            if actor.handle(cmd, now) == Next::Stop {
                actor.confirms.flush();
                return;
            }
        }
        actor.flush_direct(now);
        actor.confirms.flush();
        crate::turn_cpu::mark("handle");
        let handled = t0.elapsed();
        if actor.after_batch(now) == Next::Stop {
            return;
        }
        let total = t0.elapsed();
        crate::turn_cpu::finish(format_args!(
            "commands={commands} ready_bytes={} messages={} unacked={} parked={} wall_us={}",
            actor.state.ready_bytes(),
            actor.state.message_count(),
            actor.state.unacked_count(),
            actor.retry.stats().parked,
            total.as_micros()
        ));
        if total >= SLOW_LOOP {
            // A stall delays every timer of this queue (TTLs, parked messages): visible with
            // `--log-level charon_server::queue::actor=debug`.
            tracing::debug!(
                queue = %actor.me.name(),
                commands,
                handle_us = handled.as_micros() as u64,
                after_batch_us = (total - handled).as_micros() as u64,
                ready_bytes = actor.state.ready_bytes(),
                "slow queue loop"
            );
        }
    }
}

impl Actor {
    fn new(mut state: QueueState, me: QueueHandle, ctx: QueueContext) -> Self {
        let mut retry = RetrySide::default();
        retry.settings_changed(&mut state, now_ms());
        Self {
            retry,
            target: dl_target(&state),
            dl: DeadLetterDispatcher::new(ctx.vhost.clone()),
            state,
            me,
            ctx,
            consumers: foldhash::HashMap::default(),
            last_used: now_ms(),
            out: Vec::new(),
            delivered: Vec::new(),
            counters: Default::default(),
            errors: Default::default(),
            confirms: ConfirmBatch::default(),
            direct: Default::default(),
        }
    }

    /// How long to sleep when no command comes: until the earliest message expiry, outbox
    /// retry or `x-expires` deadline (none: until the next command).
    fn next_wake(&self, now: u64) -> Option<Duration> {
        let expires_at = if self.consumers.is_empty() {
            self.state
                .args()
                .expires
                .map(|e| self.last_used.saturating_add(e))
        } else {
            None
        };
        let wake = [self.state.next_expiry(), self.dl.next_retry(), expires_at]
            .into_iter()
            .flatten()
            .min()
            .map(|t| Duration::from_millis(t.saturating_sub(now)));
        // Parked messages are due in µs.
        let release = self
            .retry
            .next_due_us()
            .map(|t| Duration::from_micros(t.saturating_sub(crate::lateness::now_us())));
        wake.into_iter().chain(release).min()
    }

    /// Applies one command.
    fn handle(&mut self, cmd: QueueCmd, now: u64) -> Next {
        match cmd {
            QueueCmd::Publish { placed, confirm } => {
                let taken = self.enqueue(placed, now);
                self.counters.published += u64::from(taken);
                if let Some(c) = confirm {
                    // Sent with the batch's other confirms, one event per publishing channel.
                    self.confirms.add(&c.conn, c.channel, c.seq, taken);
                }
            }
            QueueCmd::PublishBatch { placed, conn } => {
                // As the same publishes one by one (`QueueCmd::Publish` above).
                for (placed, confirm) in placed {
                    let taken = self.enqueue(placed, now);
                    self.counters.published += u64::from(taken);
                    if let (Some(conn), Some((channel, seq))) = (&conn, confirm) {
                        self.confirms.add(conn, channel, seq, taken);
                    }
                }
            }
            QueueCmd::EnqueueDeadLetters { messages, from } => {
                self.take_dead_letters(messages, from, now)
            }
            QueueCmd::DeadLettersRefused { messages, target } => {
                self.dl.refused(messages, target, now);
            }
            QueueCmd::SetArgs { args } => {
                self.state.set_args(*args);
                self.retry.settings_changed(&mut self.state, now);
                self.target = dl_target(&self.state);
            }
            QueueCmd::Touch => self.last_used = now,
            QueueCmd::Consume {
                id,
                spec,
                target,
                reply,
            } => {
                self.last_used = now;
                let result = self.state.add_consumer(id, spec);
                if result.is_ok() {
                    let no_ack = spec.no_ack;
                    self.consumers.insert(id, Consumer { target, no_ack });
                }
                let _ = reply.send(result);
            }
            QueueCmd::Cancel { id } => {
                self.last_used = now;
                self.state.remove_consumer(id);
                self.consumers.remove(&id);
                if self.consumers.is_empty() && self.ctx.auto_delete && self.remove_self() {
                    return Next::Stop;
                }
            }
            QueueCmd::Ack { ids } => {
                self.counters.acked += ids.len() as u64;
                self.state.ack(&ids);
            }
            QueueCmd::Requeue { ids } => {
                let store = self.ctx.store.as_ref();
                self.retry.failed(&mut self.state, &ids, true, store);
                // The failed-delivery count changed: the store keeps it (count + 1).
                for id in ids {
                    if let Some(r) = self.state.returns_of(id) {
                        self.delivered.push((id, r.saturating_add(1)));
                    }
                }
            }
            QueueCmd::Return { ids } => self.state.release(&ids),
            QueueCmd::Reject { ids } => {
                let store = self.ctx.store.as_ref();
                self.retry.failed(&mut self.state, &ids, false, store);
            }
            QueueCmd::RestoreParked { parked } => self.retry.restore(&mut self.state, parked),
            QueueCmd::Get { no_ack, reply } => {
                self.last_used = now;
                let mut got = self.state.get(no_ack, now);
                if let Some(g) = got.as_mut() {
                    self.counters.get += 1;
                    if !g.redelivered {
                        self.delivered.push((g.id, 1));
                    }
                    if let Some(s) = &self.ctx.store {
                        g.message = s.load(g.id, &g.message);
                    }
                }
                let _ = reply.send(got);
            }
            QueueCmd::Purge { reply } => {
                let more = self.retry.purge();
                let n = self.state.purge() + u32::try_from(more.len()).unwrap_or(u32::MAX);
                if let Some(s) = self.ctx.store.as_mut() {
                    s.gone(more);
                }
                let _ = reply.send(n);
            }
            QueueCmd::Browse { reply } => {
                let all = self.state.browse(0, usize::MAX).into_iter().map(|(_, m)| m);
                let _ = reply.send(all.collect());
            }
            QueueCmd::Remove { ids, reply } => {
                let removed = ids
                    .into_iter()
                    .filter(|id| self.state.remove(*id).is_some());
                let _ = reply.send(removed.collect());
            }
            QueueCmd::Take { id, route, reply } => {
                let _ = reply.send(super::take::take(
                    &mut self.state,
                    self.ctx.store.as_mut(),
                    id,
                    route,
                ));
            }
            QueueCmd::Stats { reply } => {
                let mut s = stats_of(&self.state);
                s.dead_letters_dropped_no_dlx = self.dl.dropped_no_dlx;
                let r = self.retry.stats();
                (s.parked, s.held, s.next_due_ms) = (r.parked, r.held, r.next_due);
                s.release_lateness = self.retry.lateness();
                let _ = reply.send(s);
            }
            QueueCmd::Delete { reply } => {
                for c in self.consumers.values() {
                    let _ = c.target.conn.send(ConnEvent::ConsumerCancelled {
                        channel: c.target.channel,
                        consumer_tag: c.target.tag.clone(),
                    });
                }
                let _ = reply.send(self.state.message_count());
                if let Some(s) = self.ctx.store.as_mut() {
                    s.purge();
                }
                return Next::Stop;
            }
            QueueCmd::Kick => {}
            QueueCmd::Admin(q) => self.admin_query(q),
            QueueCmd::ArchiveDirect { tx } => self.direct.attach(tx),
            QueueCmd::DirectArchived {
                count,
                bytes,
                stored,
            } => {
                self.direct.settled(count, bytes);
                self.counters.acked += count as u64;
                self.counters.archived_direct += count as u64;
                if let Some(s) = self.ctx.store.as_ref() {
                    s.settle_direct(stored);
                }
            }
            QueueCmd::DirectReturned { placed } => {
                let bytes = placed.iter().map(|p| p.message.body_size()).sum();
                self.direct.settled(placed.len(), bytes);
                self.queue_instead(placed, now);
            }
        }
        Next::Continue
    }

    /// Dead letters another queue routed here; a full reject-publish(-dlx) queue refuses them
    /// and they stay with their source.
    fn take_dead_letters(&mut self, messages: Vec<Placed>, from: QueueHandle, now: u64) {
        let mut refused = Vec::new();
        for placed in messages {
            if self.state.refuses(placed.message.body_size()) {
                refused.push(placed);
            } else {
                self.enqueue(placed, now);
                self.counters.dead_letters_in += 1;
            }
        }
        if !refused.is_empty() {
            dead_letters::refuse(from, refused, self.me.clone());
        }
    }

    /// After a batch of commands: deliver, expire, dead-letter, write what the store needs,
    /// and end the queue when its `x-expires` ran out.
    fn after_batch(&mut self, now: u64) -> Next {
        self.retry
            .release(&mut self.state, &self.me, self.ctx.store.as_mut());
        crate::turn_cpu::mark("release");
        self.counters.delivered += deliver(
            &mut self.state,
            &self.me,
            &self.consumers,
            self.ctx.store.as_ref(),
            now,
            &mut self.out,
            &mut self.delivered,
        );
        // A mass expiry goes out in bounded batches: each is dead-lettered before the next
        // is taken, so the buffers stay small and are reused.
        crate::turn_cpu::mark("deliver");
        let mut came_back = false;
        loop {
            let more = self.state.expire_at_most(now, EXPIRE_BATCH);
            came_back |= self.dispatch_dead_letters(now);
            if !more {
                break;
            }
        }
        if came_back {
            // Dead-lettered back into this queue: its consumers get them now, not at the next
            // command.
            deliver(
                &mut self.state,
                &self.me,
                &self.consumers,
                self.ctx.store.as_ref(),
                now,
                &mut self.out,
                &mut self.delivered,
            );
        }
        self.dl.retry(&self.me, now);
        crate::turn_cpu::mark("expire");
        let gone = self.state.take_gone();
        self.retry.gone(&mut self.state, &gone, now);
        crate::turn_cpu::mark("retry_gone");
        if let Some(s) = self.ctx.store.as_mut() {
            // Priorities and retries deliver out of id order: no delivered mark (`marks`).
            let a = self.state.args();
            let fifo = a.max_priority.is_none() && a.retry.is_none();
            s.delivered(&mut self.delivered, fifo);
            crate::turn_cpu::mark("st_delivered");
            s.gone(gone);
            crate::turn_cpu::mark("st_gone");
            s.page_out(&mut self.state);
            crate::turn_cpu::mark("page_out");
        }
        super::page_flow::throttle(&self.me, self.ctx.store.as_ref());
        self.delivered.clear();
        if self.consumers.is_empty()
            && self
                .state
                .args()
                .expires
                .is_some_and(|e| now >= self.last_used.saturating_add(e))
            && self.remove_self()
        {
            // x-expires: the queue goes with its messages, which are not dead-lettered.
            return Next::Stop;
        }
        Next::Continue
    }

    /// Dead-letters what left the queue. Dead letters routed back to this queue are enqueued
    /// here, which may dead-letter others (drop-head); loops until settled (cycle detection
    /// bounds it). Returns whether any came back into this queue.
    fn dispatch_dead_letters(&mut self, now: u64) -> bool {
        let mut came_back = false;
        let mut rounds = 0;
        while self.state.has_dead_letters() && rounds < 16 {
            rounds += 1;
            let dead = self.state.take_dead_letters();
            self.counters.note_dead(&dead, self.target.is_some());
            if self.target.is_some() {
                self.errors.note(&dead);
            }
            let local = self.dl.dispatch(
                &self.me,
                self.target.as_ref(),
                dead,
                now,
                self.ctx.store.as_mut(),
            );
            for placed in local {
                came_back |= self.enqueue(placed, now);
            }
        }
        came_back |= self.flush_direct(now);
        came_back
    }

    /// Sends this turn's direct messages to the archiver; those it cannot take now (channel
    /// full, archiver gone) are queued, in order. Returns whether any were queued.
    fn flush_direct(&mut self, now: u64) -> bool {
        if !self.direct.has_out() {
            return false;
        }
        let back = self.direct.flush();
        self.queue_instead(back, now)
    }

    /// Queues direct messages the archiver did not take or gave back, in order (they were
    /// counted as delivered when taken). Returns whether there were any.
    fn queue_instead(&mut self, placed: Vec<Placed>, now: u64) -> bool {
        let any = !placed.is_empty();
        self.counters.delivered = self.counters.delivered.saturating_sub(placed.len() as u64);
        for p in placed {
            self.enqueue_queued(p, now);
        }
        any
    }

    /// Enqueues `placed` (a publish or a dead letter whose sender chose its id and wrote it to
    /// the store); returns whether the queue took it.
    fn enqueue(&mut self, placed: Placed, now: u64) -> bool {
        if self.direct.wants(&self.state, &placed) {
            self.counters.delivered += 1;
            self.direct.take(placed);
            return true;
        }
        self.enqueue_queued(placed, now)
    }

    /// [`Actor::enqueue`] into the queue itself (not handed over directly).
    fn enqueue_queued(&mut self, placed: Placed, now: u64) -> bool {
        let Placed {
            message,
            id,
            stored,
        } = placed;
        if self.retry.holds(&self.state, id, &message) {
            // Held behind a retrying message of its key: the queue's all the same.
            if let Some(s) = self.ctx.store.as_mut() {
                s.accept(id, stored, &message, self.state.ready_bytes());
            }
            return true;
        }
        if self.ctx.store.is_none() {
            // Nothing to tell a store: the message moves into the state (no second reference).
            return matches!(
                self.state.publish_as(id, message, now),
                PublishOutcome::Enqueued(_)
            );
        }
        // Over the body budget a stored message enters already paged out (`StoreSide::admit`).
        let (message, kept) = match self.ctx.store.as_mut() {
            Some(s) => s.admit(&self.state, id, stored, message),
            None => (message, None),
        };
        match self.state.publish_as(id, message.clone(), now) {
            PublishOutcome::Enqueued(_) => {
                if let Some(s) = self.ctx.store.as_mut() {
                    s.accept(id, stored, &message, self.state.ready_bytes());
                    if let (Some(body), Some(msg)) = (kept, stored) {
                        s.keep_until_durable(id, msg, body);
                    }
                }
                true
            }
            PublishOutcome::Rejected { .. } => {
                if let (Some(s), Some(_)) = (self.ctx.store.as_mut(), stored) {
                    s.refused(id);
                }
                false
            }
        }
    }

    /// Answers a management query (peek, details).
    fn admin_query(&self, q: super::admin::AdminQuery) {
        match q {
            super::admin::AdminQuery::Peek {
                offset,
                count,
                reply,
            } => {
                let peeked =
                    super::admin::peek(&self.state, self.ctx.store.as_ref(), offset, count);
                let _ = reply.send(peeked);
            }
            super::admin::AdminQuery::Details { reply } => {
                let mut stats = stats_of(&self.state);
                stats.dead_letters_dropped_no_dlx = self.dl.dropped_no_dlx;
                let r = self.retry.stats();
                (stats.parked, stats.held, stats.next_due_ms) = (r.parked, r.held, r.next_due);
                stats.release_lateness = self.retry.lateness();
                let (head_timestamp, head_death_time) = super::admin::head_facts(&self.state);
                let _ = reply.send(super::admin::QueueDetails {
                    stats,
                    counters: self.counters,
                    ready_bytes: self.state.ready_bytes(),
                    head_timestamp,
                    head_death_time,
                    dropped_no_route: self.dl.dropped_no_route,
                    errors: self.errors.snapshot(),
                });
            }
        }
    }

    /// Removes the queue from its vhost (auto-delete, x-expires) if the registered queue of
    /// that name is this one; its stored messages and its definition go with it.
    fn remove_self(&mut self) -> bool {
        let me = &self.me;
        {
            let mut topo = self.ctx.vhost.topology.write_recover();
            if !topo.queue(me.name()).is_some_and(|e| e.handle.same(me)) {
                return false;
            }
            topo.remove_queue(me.name());
        }
        if let Some(s) = self.ctx.store.as_mut() {
            s.purge();
        }
        drop(self.ctx.vhost.save_topology());
        true
    }
}

/// Runs the delivery loop and sends each consumer's share as one event.
fn deliver(
    state: &mut QueueState,
    me: &QueueHandle,
    consumers: &foldhash::HashMap<ConsumerId, Consumer>,
    store: Option<&StoreSide>,
    now: u64,
    out: &mut Vec<Delivery>,
    delivered: &mut Vec<(u64, u32)>,
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
    if let Some(s) = store {
        // Paged-out bodies of the whole batch in one go (read-ahead; `StoreSide::load_many`).
        s.load_many(out);
    }
    // Group consecutive deliveries per consumer, preserving queue order within each consumer.
    let mut grouped: Vec<(ConsumerId, Vec<Delivery>)> = Vec::new();
    let mut left = out.len();
    for mut d in out.drain(..) {
        left -= 1;
        if !d.redelivered {
            delivered.push((d.id, 1));
        }
        // `load_many` gave most their bodies and store ids already.
        if let Some(s) = store
            && (d.stored.is_none() || d.message.is_paged())
        {
            (d.message, d.stored) = s.load_stored(d.id, &d.message);
        }
        match grouped.iter_mut().find(|(id, _)| *id == d.consumer) {
            Some((_, v)) => v.push(d),
            None => {
                // Room for the rest too: with one consumer (the usual case) the batch goes
                // out in one allocation instead of growing by doubling.
                let mut v = Vec::with_capacity(left + 1);
                let consumer = d.consumer;
                v.push(d);
                grouped.push((consumer, v));
            }
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

/// The counts a queue reports.
fn stats_of(state: &QueueState) -> QueueStats {
    QueueStats {
        messages: state.message_count(),
        unacked: state.unacked_count(),
        consumers: state.consumer_count(),
        ..QueueStats::default()
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
    use crate::handles::{
        ChannelLimit, ConnEvent, ConnHandle, ConsumerTarget, Placed, QueueCmd, QueueHandle,
    };
    use crate::vhost::VHostState;

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
        assert_eq!(got, Some((charon_core::Body::from(Bytes::from("x")), 1)));
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
