//! [`QueueState`]: ready messages ordered by id (so requeued messages go back to their original
//! position), unacked deliveries, consumers, and the rules that take messages out of a queue
//! other than by acknowledgement: message TTL (per queue and per message, expiring wherever the
//! message sits, not only at the head), max-length / max-length-bytes with each overflow mode,
//! rejection and the delivery limit. Every message leaving that way becomes a [`DeadLetter`]
//! value with its reason; whether it goes to a dead-letter exchange is the caller's business.
//!
//! Priority queues (`x-max-priority` on a classic queue, as RabbitMQ's `rabbit_priority_queue`):
//! ready messages leave highest priority first, FIFO (by id) within a priority; a message
//! without `priority` is 0, one above the maximum counts as the maximum. Everything that takes
//! "the head" (delivery, basic.get, drop-head, browse) follows that order, so a requeued
//! message goes back to its place within its priority.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::consumers::Consumers;
use super::{
    ConsumerId, ConsumerSpec, DeadLetter, Delivery, GetResult, MsgId, PublishOutcome, Reason,
};
use crate::arguments::{Overflow, QueueArgs, QueueType};
use crate::error::CoreError;
use crate::message::Message;

mod chunked;
mod park;
mod ready;

use ready::{Ready, ReadyRing};

/// A ready message as [`QueueState::browse_detailed`] shows it.
#[derive(Debug, Clone)]
pub struct Browsed {
    /// Its id in the queue.
    pub id: MsgId,
    /// The message.
    pub message: Arc<Message>,
    /// Delivered before.
    pub redelivered: bool,
    /// Times returned to the queue.
    pub returns: u32,
    /// Absolute expiry (ms), if any.
    pub expires_at: Option<u64>,
}

#[derive(Debug, Clone)]
struct Unacked {
    message: Arc<Message>,
    consumer: Option<ConsumerId>,
    expires_at: Option<u64>,
    returns: u32,
}

/// The state of one queue.
#[derive(Debug)]
pub struct QueueState {
    name: Arc<str>,
    vhost: Arc<str>,
    args: QueueArgs,
    next_id: MsgId,
    /// Ready messages in id order, with their expiry order (`state/ready.rs`).
    ready: ReadyRing,
    ready_bytes: u64,
    /// By id (a fast hash: several lookups per delivered message).
    /// By id: ids are delivered mostly in increasing order (`crate::tag_ring`).
    unacked: crate::tag_ring::TagRing<Unacked>,
    /// Priority queues only: ready messages in delivery order, (max - priority, id).
    order: Option<BTreeSet<(u8, MsgId)>>,
    consumers: Consumers,
    dead: Vec<DeadLetter>,
    /// Ids of messages that left the queue by any means, when tracked (durable queues: the
    /// owner settles them in the store).
    gone: Option<Vec<MsgId>>,
}

/// RabbitMQ 4.x's `delivery-limit` of a quorum queue when neither argument nor policy sets one.
pub(crate) const QUORUM_DEFAULT_DELIVERY_LIMIT: i64 = 20;

/// The per-message TTL of `message` (its `expiration` property, milliseconds), if valid.
fn message_ttl(message: &Message) -> Option<u64> {
    let raw = message.properties.expiration()?;
    std::str::from_utf8(raw).ok()?.trim().parse().ok()
}

/// The highest priority of a priority queue: `x-max-priority` on a classic queue (quorum
/// queues and streams order FIFO here).
fn priority_levels(args: &QueueArgs) -> Option<u8> {
    args.max_priority
        .filter(|_| args.queue_type == QueueType::Classic)
}

impl QueueState {
    /// Position of `message` (id `id`) in a priority queue with highest priority `max`.
    fn rank(max: u8, id: MsgId, message: &Message) -> (u8, MsgId) {
        let p = message.properties.priority().unwrap_or(0).min(max);
        (max - p, id)
    }

    /// An empty queue.
    pub fn new(name: Arc<str>, args: QueueArgs) -> Self {
        let order = priority_levels(&args).map(|_| BTreeSet::new());
        QueueState {
            name,
            vhost: Arc::from("/"),
            args,
            next_id: 0,
            ready: ReadyRing::default(),
            ready_bytes: 0,
            unacked: crate::tag_ring::TagRing::default(),
            order,
            consumers: Consumers::default(),
            dead: Vec::new(),
            gone: None,
        }
    }

    /// Starts recording the ids of messages that leave the queue (see [`Self::take_gone`]).
    pub fn track_gone(&mut self) {
        self.gone.get_or_insert_with(Vec::new);
    }

    /// Ids of messages that left the queue (acked, rejected, expired, dropped, purged, removed,
    /// delivered with no-ack) since the last call; empty unless [`Self::track_gone`] was called.
    pub fn take_gone(&mut self) -> Vec<MsgId> {
        self.gone.as_mut().map(std::mem::take).unwrap_or_default()
    }

    fn mark_gone(&mut self, id: MsgId) {
        if let Some(g) = self.gone.as_mut() {
            g.push(id);
        }
    }

    /// Puts a recovered message back (restart): ready, at position `id`, with its absolute
    /// expiry; later publishes get ids above every restored one.
    pub fn restore(
        &mut self,
        id: MsgId,
        message: Arc<Message>,
        expires_at: Option<u64>,
        redelivered: bool,
    ) {
        self.next_id = self.next_id.max(id + 1);
        self.insert_ready(
            id,
            Ready {
                message,
                redelivered,
                expires_at,
                returns: 0,
            },
        );
    }

    /// When `message`, enqueued at `enqueued_ms`, expires here: the smaller of the queue's
    /// message TTL and the message's own `expiration`.
    pub fn expiry_for(&self, message: &Message, enqueued_ms: u64) -> Option<u64> {
        let ttl = match (self.args.message_ttl, message_ttl(message)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        ttl.map(|t| enqueued_ms.saturating_add(t))
    }

    /// The absolute expiry of ready or unacked message `id`, if it has one.
    pub fn expiry_of(&self, id: MsgId) -> Option<u64> {
        self.ready
            .expires_at(id)
            .or_else(|| self.unacked.get(id).and_then(|u| u.expires_at))
    }

    /// Set the vhost name used in error texts (default `/`).
    pub fn set_vhost(&mut self, vhost: &str) {
        self.vhost = Arc::from(vhost);
    }

    /// Queue name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The settings the queue runs with (arguments overlaid with its policy).
    pub fn args(&self) -> &QueueArgs {
        &self.args
    }

    /// Apply new effective settings at once (a policy was set, changed or cleared): a lowered
    /// max-length drops (dead-letters) heads now; a new TTL applies to messages enqueued from now
    /// on, as in RabbitMQ.
    pub fn set_args(&mut self, args: QueueArgs) {
        let levels = priority_levels(&args);
        let rebuild = levels != priority_levels(&self.args);
        self.args = args;
        if rebuild {
            // Policies cannot set x-max-priority; kept correct should the settings differ anyway.
            self.order = levels.map(|max| {
                self.ready
                    .iter()
                    .map(|(id, r)| Self::rank(max, id, r.message))
                    .collect()
            });
        }
        self.enforce_limits();
    }

    /// Enqueue a message at `now_ms`. With `reject-publish`/`reject-publish-dlx` overflow a full
    /// queue refuses it (the latter also dead-letters it, reason `maxlen`); with drop-head the
    /// oldest ready messages are dead-lettered until the limits hold.
    pub fn publish(&mut self, message: Arc<Message>, now_ms: u64) -> PublishOutcome {
        let id = self.next_id;
        self.publish_as(id, message, now_ms)
    }

    /// [`Self::publish`] under an id the caller chose (ids handed out ahead by the owner, e.g.
    /// so that one store record can name the message's place in several queues). Ids must not
    /// repeat; later [`Self::publish`] calls use ids above every id seen.
    pub fn publish_as(&mut self, id: MsgId, message: Arc<Message>, now_ms: u64) -> PublishOutcome {
        if self.refuses(message.body_size()) {
            let dead_lettered = self.args.overflow == Overflow::RejectPublishDlx;
            if dead_lettered {
                self.dead.push(DeadLetter {
                    message,
                    reason: Reason::Maxlen,
                    id: None,
                });
            }
            return PublishOutcome::Rejected { dead_lettered };
        }
        self.next_id = self.next_id.max(id + 1);
        let expires_at = self.expiry_for(&message, now_ms);
        self.insert_ready(
            id,
            Ready {
                message,
                redelivered: false,
                expires_at,
                returns: 0,
            },
        );
        self.enforce_limits();
        PublishOutcome::Enqueued(id)
    }

    fn insert_ready(&mut self, id: MsgId, r: Ready) {
        if let (Some(order), Some(max)) = (self.order.as_mut(), priority_levels(&self.args)) {
            order.insert(Self::rank(max, id, &r.message));
        }
        self.ready_bytes += r.message.body_size();
        self.ready.insert(id, r);
    }

    fn remove_ready(&mut self, id: MsgId) -> Option<Ready> {
        let r = self.ready.remove(id)?;
        if let (Some(order), Some(max)) = (self.order.as_mut(), priority_levels(&self.args)) {
            order.remove(&Self::rank(max, id, &r.message));
        }
        self.ready_bytes -= r.message.body_size();
        Some(r)
    }

    fn pop_ready(&mut self) -> Option<(MsgId, Ready)> {
        let id = match &self.order {
            Some(order) => order.first()?.1,
            None => {
                let (id, r) = self.ready.pop_first()?;
                self.ready_bytes -= r.message.body_size();
                return Some((id, r));
            }
        };
        self.remove_ready(id).map(|r| (id, r))
    }

    /// Whether a new message of `body_size` is refused: the queue is full and its overflow mode
    /// is `reject-publish` or `reject-publish-dlx`.
    pub fn refuses(&self, body_size: u64) -> bool {
        self.args.overflow != Overflow::DropHead && self.is_full_for(body_size)
    }

    /// Would publishing a message of `body_size` exceed max-length / max-length-bytes?
    pub fn is_full_for(&self, body_size: u64) -> bool {
        self.args
            .max_length
            .is_some_and(|m| self.ready.len() as u64 >= m)
            || self
                .args
                .max_length_bytes
                .is_some_and(|m| self.ready_bytes + body_size > m)
    }

    fn enforce_limits(&mut self) {
        if self.args.overflow != Overflow::DropHead {
            return;
        }
        loop {
            let over_len = self
                .args
                .max_length
                .is_some_and(|m| self.ready.len() as u64 > m);
            let over_bytes = self
                .args
                .max_length_bytes
                .is_some_and(|m| self.ready_bytes > m);
            if !(over_len || over_bytes) {
                return;
            }
            match self.pop_ready() {
                Some((id, r)) => {
                    self.mark_gone(id);
                    self.dead.push(DeadLetter {
                        message: r.message,
                        reason: Reason::Maxlen,
                        id: Some(id),
                    });
                }
                None => return,
            }
        }
    }

    /// Dead-letter (reason `expired`) every ready message whose expiry is at or before
    /// `now_ms`, wherever it sits in the queue.
    pub fn expire(&mut self, now_ms: u64) {
        self.expire_at_most(now_ms, usize::MAX);
    }

    /// [`Self::expire`], at most `max` messages (the owner dead-letters them before taking
    /// the next ones, so a mass expiry runs in batches of bounded size); returns whether more
    /// are due.
    pub fn expire_at_most(&mut self, now_ms: u64, max: usize) -> bool {
        let mut n = 0;
        while let Some((t, id)) = self.ready.next_expiry() {
            if t > now_ms {
                return false;
            }
            if n == max {
                return true;
            }
            n += 1;
            if let Some(r) = self.remove_ready(id) {
                self.mark_gone(id);
                self.dead.push(DeadLetter {
                    message: r.message,
                    reason: Reason::Expired,
                    id: Some(id),
                });
            }
        }
        false
    }

    /// The earliest expiry among ready messages (for the owner's timer).
    pub fn next_expiry(&self) -> Option<u64> {
        self.ready.next_expiry().map(|(t, _)| t)
    }

    /// Messages that left the queue by TTL, max-length, rejection or delivery limit since the
    /// last call, in the order they left.
    pub fn take_dead_letters(&mut self) -> Vec<DeadLetter> {
        std::mem::take(&mut self.dead)
    }

    /// Whether dead letters are waiting to be taken.
    pub fn has_dead_letters(&self) -> bool {
        !self.dead.is_empty()
    }

    /// Register a consumer. Exclusive consumers need an unused queue, and no consumer may join
    /// an exclusively consumed queue.
    pub fn add_consumer(&mut self, id: ConsumerId, spec: ConsumerSpec) -> Result<(), CoreError> {
        if self.consumers.any_exclusive() || (spec.exclusive && !self.consumers.is_empty()) {
            return Err(CoreError::ExclusiveConsume {
                queue: self.name.to_string(),
                vhost: self.vhost.to_string(),
            });
        }
        self.consumers.add(id, spec);
        Ok(())
    }

    /// Unregister a consumer; its unacked messages stay unacked.
    pub fn remove_consumer(&mut self, id: ConsumerId) {
        self.consumers.remove(id);
    }

    /// Hand out ready messages round-robin to consumers with credit. `may_deliver` is called
    /// right before each delivery and a `true` always results in exactly one delivery to that
    /// consumer. Messages that expired before `now_ms` are never delivered; a message expiring
    /// exactly now (TTL 0) is delivered if a consumer can take it at once.
    pub fn next_deliveries(
        &mut self,
        now_ms: u64,
        may_deliver: &mut dyn FnMut(ConsumerId) -> bool,
        out: &mut Vec<Delivery>,
    ) {
        self.expire(now_ms.saturating_sub(1));
        let sac = self.args.single_active_consumer;
        let mut idle = 0;
        while idle < self.consumers.len() {
            if self.ready.is_empty() {
                return;
            }
            let Some(c) = self.consumers.front() else {
                return;
            };
            let (cid, no_ack) = (c.id, c.spec.no_ack);
            let eligible = c.has_credit() && (!sac || self.consumers.active() == Some(cid));
            if !eligible || !may_deliver(cid) {
                self.consumers.rotate();
                idle += 1;
                continue;
            }
            let Some((id, r)) = self.pop_ready() else {
                return;
            };
            if no_ack {
                self.mark_gone(id);
            } else {
                if let Some(c) = self.consumers.front_mut() {
                    c.unacked += 1;
                }
                self.unacked.insert(
                    id,
                    Unacked {
                        message: r.message.clone(),
                        consumer: Some(cid),
                        expires_at: r.expires_at,
                        returns: r.returns,
                    },
                );
            }
            out.push(Delivery {
                consumer: cid,
                id,
                message: r.message,
                redelivered: r.redelivered,
                returns: r.returns,
                stored: None,
            });
            self.consumers.rotate();
            idle = 0;
        }
    }

    /// basic.get: the head message, if any (expired messages are dead-lettered first).
    pub fn get(&mut self, no_ack: bool, now_ms: u64) -> Option<GetResult> {
        self.expire(now_ms);
        let (id, r) = self.pop_ready()?;
        if no_ack {
            self.mark_gone(id);
        } else {
            self.unacked.insert(
                id,
                Unacked {
                    message: r.message.clone(),
                    consumer: None,
                    expires_at: r.expires_at,
                    returns: r.returns,
                },
            );
        }
        Some(GetResult {
            id,
            message: r.message,
            redelivered: r.redelivered,
            remaining: self.message_count(),
            returns: r.returns,
        })
    }

    fn settle(&mut self, id: MsgId) -> Option<Unacked> {
        // The ring gives its memory back after a burst of unacked deliveries by itself.
        let u = self.unacked.remove(id)?;
        if let Some(c) = u.consumer {
            self.consumers.settled(c);
        }
        Some(u)
    }

    /// Acknowledge; unknown ids are ignored.
    pub fn ack(&mut self, ids: &[MsgId]) {
        // One pass over the unacked ring for the whole list (a multi-ack's ids are a run):
        // its front and length bound are fixed up once after it, not once an id.
        let QueueState {
            unacked,
            consumers,
            gone,
            ..
        } = self;
        unacked.remove_each(ids, |id, u| {
            if let Some(c) = u.consumer {
                consumers.settled(c);
            }
            if let Some(g) = gone.as_mut() {
                g.push(id);
            }
        });
    }

    /// The delivery limit in force: quorum queues, 20 unless set (RabbitMQ 4.x's default), a
    /// negative setting means none; classic queues (a Charon extension, `docs/retries.md`): the
    /// `delivery-limit` policy key (classic queues refuse the argument), no default.
    fn delivery_limit(&self) -> Option<u64> {
        match self.args.queue_type {
            QueueType::Quorum => u64::try_from(
                self.args
                    .delivery_limit
                    .unwrap_or(QUORUM_DEFAULT_DELIVERY_LIMIT),
            )
            .ok(),
            QueueType::Classic => self.args.delivery_limit.and_then(|l| u64::try_from(l).ok()),
            QueueType::Stream => None,
        }
    }

    /// Return unacked messages after a failed delivery (basic.reject / basic.nack with
    /// requeue=true) to their original position, marked redelivered; this counts as a return
    /// (`x-delivery-count`). A message returned more times than the delivery limit is
    /// dead-lettered (reason `delivery_limit`) instead.
    pub fn requeue(&mut self, ids: &[MsgId]) {
        self.put_back(ids, true);
    }

    /// Return unacked messages whose consumer went (channel or connection closed, basic.recover)
    /// to their original position, marked redelivered, without counting a return: as RabbitMQ
    /// 4.x, only a failed delivery counts towards the delivery limit.
    pub fn release(&mut self, ids: &[MsgId]) {
        self.put_back(ids, false);
    }

    fn put_back(&mut self, ids: &[MsgId], counted: bool) {
        let limit = self.delivery_limit();
        for id in ids {
            if let Some(u) = self.settle(*id) {
                let returns = u.returns.saturating_add(u32::from(counted));
                if limit.is_some_and(|l| u64::from(returns) > l) {
                    self.mark_gone(*id);
                    self.dead.push(DeadLetter {
                        message: u.message,
                        reason: Reason::DeliveryLimit,
                        id: Some(*id),
                    });
                    continue;
                }
                self.insert_ready(
                    *id,
                    Ready {
                        message: u.message,
                        redelivered: true,
                        expires_at: u.expires_at,
                        returns,
                    },
                );
            }
        }
        self.enforce_limits();
    }

    /// Reject unacked messages without requeueing (basic.reject / basic.nack requeue=false):
    /// they are dead-lettered with reason `rejected`. Returns how many were known.
    pub fn reject(&mut self, ids: &[MsgId]) -> usize {
        let mut n = 0;
        for id in ids {
            if let Some(u) = self.settle(*id) {
                self.mark_gone(*id);
                self.dead.push(DeadLetter {
                    message: u.message,
                    reason: Reason::Rejected,
                    id: Some(*id),
                });
                n += 1;
            }
        }
        n
    }

    /// Remove all ready messages (not dead-lettered); returns how many.
    pub fn purge(&mut self) -> u32 {
        let n = self.message_count();
        let ids = self.ready.clear();
        if self.gone.is_some() {
            for id in ids {
                self.mark_gone(id);
            }
        }
        if let Some(order) = self.order.as_mut() {
            order.clear();
        }
        self.ready_bytes = 0;
        n
    }

    /// Up to `limit` ready messages from position `from` (0 = head), without removing them.
    pub fn browse(&self, from: usize, limit: usize) -> Vec<(MsgId, Arc<Message>)> {
        match &self.order {
            Some(order) => order
                .iter()
                .skip(from)
                .take(limit)
                .filter_map(|(_, id)| self.ready.get(*id).map(|m| (*id, m.clone())))
                .collect(),
            None => self
                .ready
                .iter()
                .skip(from)
                .take(limit)
                .map(|(id, r)| (id, r.message.clone()))
                .collect(),
        }
    }

    /// Like [`Self::browse`], with each message's redelivered flag, return count and expiry
    /// (for peeking through the management API; nothing changes).
    pub fn browse_detailed(&self, from: usize, limit: usize) -> Vec<Browsed> {
        self.ready
            .iter()
            .skip(from)
            .take(limit)
            .map(|(id, r)| Browsed {
                id,
                message: r.message.clone(),
                redelivered: r.redelivered,
                returns: r.returns,
                expires_at: r.expires_at,
            })
            .collect()
    }

    /// Remove one ready message by id (not dead-lettered); returns it.
    pub fn remove(&mut self, id: MsgId) -> Option<Arc<Message>> {
        let m = self.remove_ready(id).map(|r| r.message)?;
        self.mark_gone(id);
        Some(m)
    }

    /// Replaces ready or unacked message `id` by `message`, which must have the same
    /// [`Message::body_size`] (a paged-out copy, or the body read back). Returns whether `id`
    /// was found.
    pub fn swap_message(&mut self, id: MsgId, message: Arc<Message>) -> bool {
        debug_assert!(
            self.ready
                .get(id)
                .is_none_or(|m| m.body_size() == message.body_size())
        );
        if self.ready.get(id).is_some() {
            self.ready.swap(id, message)
        } else if let Some(u) = self.unacked.get_mut(id) {
            u.message = message;
            true
        } else {
            false
        }
    }

    /// Ready message `id`, if it is ready.
    pub fn ready_message(&self, id: MsgId) -> Option<&Arc<Message>> {
        self.ready.get(id)
    }

    /// Ready messages.
    pub fn message_count(&self) -> u32 {
        u32::try_from(self.ready.len()).unwrap_or(u32::MAX)
    }

    /// Delivered, not yet settled messages.
    pub fn unacked_count(&self) -> u32 {
        u32::try_from(self.unacked.len()).unwrap_or(u32::MAX)
    }

    /// Registered consumers.
    pub fn consumer_count(&self) -> u32 {
        u32::try_from(self.consumers.len()).unwrap_or(u32::MAX)
    }

    /// Body bytes of ready messages.
    pub fn ready_bytes(&self) -> u64 {
        self.ready_bytes
    }

    /// Is `id` currently unacked?
    pub fn is_unacked(&self, id: MsgId) -> bool {
        self.unacked.contains(id)
    }
}
