//! [`QueueState`]: ready messages ordered by id (so requeued messages go
//! back to their original position), unacked deliveries, consumers,
//! message TTL and max-length (drop-head) enforcement.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::consumers::Consumers;
use super::{ConsumerId, ConsumerSpec, Delivery, GetResult, MsgId};
use crate::arguments::QueueArgs;
use crate::error::CoreError;
use crate::message::Message;

#[derive(Debug, Clone)]
struct Ready {
    message: Arc<Message>,
    redelivered: bool,
    /// Absolute expiry time (ms), from x-message-ttl.
    expires_at: Option<u64>,
}

#[derive(Debug, Clone)]
struct Unacked {
    message: Arc<Message>,
    consumer: Option<ConsumerId>,
    expires_at: Option<u64>,
}

/// The state of one queue.
#[derive(Debug)]
pub struct QueueState {
    name: Arc<str>,
    vhost: Arc<str>,
    args: QueueArgs,
    next_id: MsgId,
    ready: BTreeMap<MsgId, Ready>,
    ready_bytes: u64,
    unacked: HashMap<MsgId, Unacked>,
    consumers: Consumers,
    dropped: Vec<Arc<Message>>,
}

impl QueueState {
    /// An empty queue.
    pub fn new(name: Arc<str>, args: QueueArgs) -> Self {
        QueueState {
            name,
            vhost: Arc::from("/"),
            args,
            next_id: 0,
            ready: BTreeMap::new(),
            ready_bytes: 0,
            unacked: HashMap::new(),
            consumers: Consumers::default(),
            dropped: Vec::new(),
        }
    }

    /// Set the vhost name used in error texts (default `/`).
    pub fn set_vhost(&mut self, vhost: &str) {
        self.vhost = Arc::from(vhost);
    }

    /// Queue name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Parsed arguments.
    pub fn args(&self) -> &QueueArgs {
        &self.args
    }

    /// Enqueue a message; applies x-message-ttl and drop-head max-length.
    pub fn publish(&mut self, message: Arc<Message>, now_ms: u64) -> MsgId {
        let id = self.next_id;
        self.next_id += 1;
        let expires_at = self.args.message_ttl.map(|t| now_ms.saturating_add(t));
        self.ready_bytes += message.body_size();
        self.ready.insert(
            id,
            Ready {
                message,
                redelivered: false,
                expires_at,
            },
        );
        self.enforce_limits();
        id
    }

    /// Would publishing a message of `body_size` exceed max-length /
    /// max-length-bytes (for `reject-publish` overflow)?
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
                Some((_, r)) => self.dropped.push(r.message),
                None => return,
            }
        }
    }

    fn pop_ready(&mut self) -> Option<(MsgId, Ready)> {
        let (id, r) = self.ready.pop_first()?;
        self.ready_bytes -= r.message.body_size();
        Some((id, r))
    }

    /// Drop expired messages at the head (RabbitMQ expires from the head).
    pub fn expire(&mut self, now_ms: u64) {
        while let Some((_, r)) = self.ready.first_key_value() {
            if r.expires_at.is_some_and(|t| t <= now_ms) {
                if let Some((_, r)) = self.pop_ready() {
                    self.dropped.push(r.message);
                }
            } else {
                return;
            }
        }
    }

    /// When the head message expires, if it has a TTL (for the server's timer).
    pub fn next_expiry(&self) -> Option<u64> {
        self.ready.first_key_value().and_then(|(_, r)| r.expires_at)
    }

    /// Messages dropped by TTL or max-length since the last call (for
    /// dead-lettering).
    pub fn take_dropped(&mut self) -> Vec<Arc<Message>> {
        std::mem::take(&mut self.dropped)
    }

    /// Register a consumer. Exclusive consumers need an unused queue, and
    /// no consumer may join an exclusively consumed queue.
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

    /// Hand out ready messages round-robin to consumers with credit.
    /// `may_deliver` is called right before each delivery and a `true`
    /// always results in exactly one delivery to that consumer.
    pub fn next_deliveries(
        &mut self,
        now_ms: u64,
        may_deliver: &mut dyn FnMut(ConsumerId) -> bool,
        out: &mut Vec<Delivery>,
    ) {
        let sac = self.args.single_active_consumer;
        let mut idle = 0;
        while idle < self.consumers.len() {
            self.expire(now_ms);
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
            if !no_ack {
                if let Some(c) = self.consumers.front_mut() {
                    c.unacked += 1;
                }
                self.unacked.insert(
                    id,
                    Unacked {
                        message: r.message.clone(),
                        consumer: Some(cid),
                        expires_at: r.expires_at,
                    },
                );
            }
            out.push(Delivery {
                consumer: cid,
                id,
                message: r.message,
                redelivered: r.redelivered,
            });
            self.consumers.rotate();
            idle = 0;
        }
    }

    /// basic.get: the head message, if any.
    pub fn get(&mut self, no_ack: bool, now_ms: u64) -> Option<GetResult> {
        self.expire(now_ms);
        let (id, r) = self.pop_ready()?;
        if !no_ack {
            self.unacked.insert(
                id,
                Unacked {
                    message: r.message.clone(),
                    consumer: None,
                    expires_at: r.expires_at,
                },
            );
        }
        Some(GetResult {
            id,
            message: r.message,
            redelivered: r.redelivered,
            remaining: self.message_count(),
        })
    }

    fn settle(&mut self, id: MsgId) -> Option<Unacked> {
        let u = self.unacked.remove(&id)?;
        if let Some(c) = u.consumer {
            self.consumers.settled(c);
        }
        Some(u)
    }

    /// Acknowledge; unknown ids are ignored.
    pub fn ack(&mut self, ids: &[MsgId]) {
        for id in ids {
            self.settle(*id);
        }
    }

    /// Put unacked messages back at their original position, redelivered.
    pub fn requeue(&mut self, ids: &[MsgId]) {
        for id in ids {
            if let Some(u) = self.settle(*id) {
                self.ready_bytes += u.message.body_size();
                self.ready.insert(
                    *id,
                    Ready {
                        message: u.message,
                        redelivered: true,
                        expires_at: u.expires_at,
                    },
                );
            }
        }
        self.enforce_limits();
    }

    /// Remove unacked messages without requeueing; returns them.
    pub fn reject(&mut self, ids: &[MsgId]) -> Vec<Arc<Message>> {
        ids.iter()
            .filter_map(|id| self.settle(*id).map(|u| u.message))
            .collect()
    }

    /// Remove all ready messages; returns how many.
    pub fn purge(&mut self) -> u32 {
        let n = self.message_count();
        self.ready.clear();
        self.ready_bytes = 0;
        n
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
        self.unacked.contains_key(&id)
    }
}
