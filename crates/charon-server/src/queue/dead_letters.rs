//! Carrying out dead-lettering for one queue actor: the queue's state machine reports the
//! messages that left it ([`DeadLetter`]s); this module turns each into its dead-lettered copy
//! (`charon_core::dead_letter`), routes it through the dead-letter exchange, drops targets that
//! would close an automatic cycle, and hands it to the target queues.
//!
//! Nothing is lost on the way: a target whose command channel is full, or that refuses the
//! message (`reject-publish` overflow), leaves it in this queue's outbox, retried until it is
//! taken (at-least-once between queues, as quorum queues' `at-least-once` strategy). A message is
//! dropped only when the spec says so: no dead-letter exchange configured, the dead-letter
//! exchange does not exist (counted per queue, logged once per queue), or the routing reaches no
//! queue.

use std::collections::VecDeque;
use std::sync::Arc;

use charon_core::dead_letter::{self, DlxSettings, Reason};
use charon_core::{Body, DeadLetter, Message};
use charon_protocol::RawProperties;

use super::place::{allocate, placed};
use super::stored::StoreSide;
use crate::handles::{Placed, QueueCmd, QueueHandle};
use crate::locks::RwLockExt;
use crate::vhost::VHostState;

/// Delay before dead letters refused by a full `reject-publish` queue are offered again (ms).
const RETRY_MS: u64 = 50;
/// Delay before dead letters blocked by a full command channel are offered again (ms).
const BUSY_RETRY_MS: u64 = 1;

#[derive(Debug)]
struct Pending {
    messages: Vec<Placed>,
    target: QueueHandle,
    not_before: u64,
}

/// A dead-lettered copy as made for one original, and where it routed: what the copy of any
/// dead letter with the same properties, exchange, routing keys and reason is, within one
/// dispatch (same time, same topology).
#[derive(Debug)]
struct Copied {
    from_properties: RawProperties,
    from_exchange: Arc<str>,
    from_routing_key: Arc<str>,
    from_bcc: charon_core::Bcc,
    reason: Reason,
    /// The copy's properties (x-death added), routing key and delivery mode.
    properties: RawProperties,
    routing_key: Arc<str>,
    persistent: bool,
    /// Target queues, cycles removed; `None`: the dead-letter exchange does not exist.
    queues: Option<Vec<QueueHandle>>,
    /// The dead-letter exchange routed it to no queue (before cycles were removed).
    no_route: bool,
}

impl Copied {
    /// Whether `original` dead-lettered for `reason` makes this same copy.
    fn is_for(&self, original: &Message, reason: Reason) -> bool {
        self.reason == reason
            && self.from_properties == original.properties
            && self.from_routing_key == original.routing_key
            && self.from_exchange == original.exchange
            && self.from_bcc == original.bcc
    }
}

/// The dead-lettering side of one queue actor.
#[derive(Debug)]
pub(super) struct DeadLetterDispatcher {
    vhost: Arc<VHostState>,
    outbox: VecDeque<Pending>,
    /// Dead letters dropped because the DLX did not exist.
    pub(super) dropped_no_dlx: u64,
    /// Dead letters dropped because the DLX routed them to no queue.
    pub(super) dropped_no_route: u64,
    warned_no_dlx: bool,
}

impl DeadLetterDispatcher {
    pub(super) fn new(vhost: Arc<VHostState>) -> Self {
        Self {
            vhost,
            outbox: VecDeque::new(),
            dropped_no_dlx: 0,
            dropped_no_route: 0,
            warned_no_dlx: false,
        }
    }

    /// When the outbox next wants to retry (wall-clock ms).
    pub(super) fn next_retry(&self) -> Option<u64> {
        self.outbox.iter().map(|p| p.not_before).min()
    }

    /// Dead-letters `dead` from queue `me` to `target`'s exchange at `now`. Each dead letter's
    /// places in its target queues are chosen here, and the store records the move as one
    /// step: the source's stored message out, the copy in at every durable target (`store`:
    /// this queue's store side, if durable). Copies routed back to `me` are returned for the
    /// caller to enqueue.
    pub(super) fn dispatch(
        &mut self,
        me: &QueueHandle,
        target: Option<&DlxSettings>,
        dead: Vec<DeadLetter>,
        now: u64,
        mut store: Option<&mut StoreSide>,
    ) -> Vec<Placed> {
        let mut local = Vec::new();
        let Some(target) = target else {
            return local;
        };
        // One command per target queue for the whole batch.
        let mut batches: Vec<(QueueHandle, Vec<Placed>)> = Vec::new();
        // The last copy made: the next dead letter with the same properties, routing and
        // reason becomes the same copy (a mass expiry is mostly alike messages).
        let mut last: Option<Copied> = None;
        // Dead letters not handled yet, this one included (room for a target's batch).
        let mut left = dead.len();
        for DeadLetter {
            message: dead_message,
            reason,
            id,
        } in dead
        {
            let left_now = left;
            left -= 1;
            let source = store.as_deref().and_then(|s| s.source_of(id));
            // The message itself, not a second handle on it: its body can then move into the
            // copy (`take_body`).
            let original = match (store.as_deref(), id) {
                (Some(s), Some(id)) => {
                    let loaded = s.load(id, &dead_message);
                    drop(dead_message);
                    loaded
                }
                _ => dead_message,
            };
            if !last.as_ref().is_some_and(|c| c.is_for(&original, reason)) {
                last = Some(self.copy(me, target, &original, reason, now));
            }
            let Some(copied) = last.as_ref() else {
                continue;
            };
            let Some(queues) = copied.queues.as_ref() else {
                self.dropped_no_dlx += 1;
                if !self.warned_no_dlx {
                    self.warned_no_dlx = true;
                    tracing::warn!(
                        queue = %me.name(),
                        dlx = %target.exchange,
                        "dead-letter exchange does not exist: dead letters from this queue are dropped (logged once per queue)"
                    );
                }
                continue;
            };
            if copied.no_route {
                self.dropped_no_route += 1;
            }
            let message = Arc::new(Message::new(
                target.exchange.clone(),
                copied.routing_key.clone(),
                copied.properties.clone(),
                take_body(original),
            ));
            if !copied.persistent && source.is_none() {
                // Transient, and not in the store here: no record, no store members, so the
                // places are made straight from the routed queues (no `Vec` per dead letter).
                for q in queues {
                    let placed = Placed {
                        message: message.clone(),
                        id: q.alloc_id(),
                        stored: None,
                    };
                    hand(me, &mut local, &mut batches, q, placed, left_now);
                }
                continue;
            }
            let (places, members) = allocate(queues.iter().cloned(), copied.persistent);
            let stored = match (store.as_deref_mut(), source) {
                (Some(s), Some(src)) => {
                    s.moved(src.1);
                    s.p.dead_letter(src, &message, members, now)
                }
                _ if !members.is_empty() => self
                    .vhost
                    .persistence()
                    .and_then(|p| p.publish_nowait(&message, &members, now)),
                _ => None,
            };
            for (q, placed) in placed(places, &message, stored) {
                hand(me, &mut local, &mut batches, &q, placed, left_now);
            }
        }
        for (q, messages) in batches {
            if self.outbox.iter().any(|p| p.target.same(&q)) {
                // Behind what already waits for that target, to keep their order.
                self.outbox.push_back(Pending {
                    messages,
                    target: q,
                    not_before: now + BUSY_RETRY_MS,
                });
            } else {
                self.offer(me, messages, q, now);
            }
        }
        local
    }

    /// Makes the dead-lettered copy of `original` (`dead_letter::make_copy`) and routes it
    /// through `target`'s exchange, dropping the targets that would close a cycle.
    fn copy(
        &self,
        me: &QueueHandle,
        target: &DlxSettings,
        original: &Message,
        reason: Reason,
        now: u64,
    ) -> Copied {
        let copy = dead_letter::make_copy(original, me.name(), reason, target, now);
        let keys: Vec<&str> = copy.routing_keys.iter().map(|k| k.as_ref()).collect();
        let mut queues: Vec<QueueHandle> = Vec::new();
        let routed = {
            let topo = self.vhost.topology.read_recover();
            // Headers are read only by headers exchanges: when none is reachable from the
            // dead-letter exchange (the default exchange, a fanout to the DLQ), the copy's
            // properties are not decoded for routing (a copy made on the encoded properties is
            // not decoded at all then).
            let decoded = match &copy.properties {
                _ if !topo.routing_reads_headers(&target.exchange) => None,
                Some(p) => Some(p.clone()),
                None => copy.message.properties.decode().ok(),
            };
            let headers = decoded.as_ref().and_then(|p| p.headers().as_ref());
            topo.route_dead_letter(&target.exchange, &keys, headers, &mut queues)
        };
        let no_route = routed && queues.is_empty();
        let props = &copy.message.properties;
        queues.retain(|q| !dead_letter::is_cycle_raw(reason, props, q.name()));
        Copied {
            from_properties: original.properties.clone(),
            from_exchange: original.exchange.clone(),
            from_routing_key: original.routing_key.clone(),
            from_bcc: original.bcc.clone(),
            reason,
            persistent: copy.message.properties.delivery_mode() == Some(2),
            properties: copy.message.properties,
            routing_key: copy.message.routing_key,
            queues: routed.then_some(queues),
            no_route,
        }
    }

    /// A target refused `messages`: keep them, retry later.
    pub(super) fn refused(&mut self, messages: Vec<Placed>, target: QueueHandle, now: u64) {
        self.outbox.push_back(Pending {
            messages,
            target,
            not_before: now + RETRY_MS,
        });
    }

    /// Retries due outbox entries, in order per target (an entry waits while an earlier one
    /// for the same target does).
    pub(super) fn retry(&mut self, me: &QueueHandle, now: u64) {
        let n = self.outbox.len();
        let mut waiting: Vec<QueueHandle> = Vec::new();
        for _ in 0..n {
            let Some(p) = self.outbox.pop_front() else {
                break;
            };
            if p.not_before > now || waiting.iter().any(|t| t.same(&p.target)) {
                waiting.push(p.target.clone());
                self.outbox.push_back(p);
                continue;
            }
            let before = self.outbox.len();
            let target = p.target.clone();
            self.offer(me, p.messages, p.target, now);
            if self.outbox.len() > before {
                waiting.push(target);
            }
        }
    }

    fn offer(&mut self, me: &QueueHandle, messages: Vec<Placed>, target: QueueHandle, now: u64) {
        let cmd = QueueCmd::EnqueueDeadLetters {
            messages,
            from: me.clone(),
        };
        match target.try_send(cmd) {
            Ok(()) | Err(None) => {}
            Err(Some(QueueCmd::EnqueueDeadLetters { messages, .. })) => {
                self.outbox.push_back(Pending {
                    messages,
                    target,
                    not_before: now + BUSY_RETRY_MS,
                });
            }
            Err(Some(_)) => {}
        }
    }
}

/// The body of a message that leaves its queue, for its dead-lettered copy: moved out when
/// nothing else holds the message (the usual case), so the copy shares the original's bytes
/// without a clone (a clone of a body not shared yet allocates its shared handle: ~200
/// instructions a dead letter, docs/performance.md "Persistent/transient path, part 11").
fn take_body(original: Arc<Message>) -> Body {
    match Arc::try_unwrap(original) {
        Ok(m) => m.body,
        Err(shared) => shared.body.clone(),
    }
}

/// `placed` for queue `q`: kept for `me` itself (`local`) or added to `q`'s batch, made with
/// room for the `left` dead letters still to come when it is new.
fn hand(
    me: &QueueHandle,
    local: &mut Vec<Placed>,
    batches: &mut Vec<(QueueHandle, Vec<Placed>)>,
    q: &QueueHandle,
    placed: Placed,
    left: usize,
) {
    if q.same(me) {
        local.push(placed);
    } else if let Some((_, v)) = batches.iter_mut().find(|(h, _)| h.same(q)) {
        v.push(placed);
    } else {
        let mut v = Vec::with_capacity(left.clamp(1, 4096));
        v.push(placed);
        batches.push((q.clone(), v));
    }
}

/// Sends refused dead letters back to their source without blocking the refusing actor.
pub(super) fn refuse(from: QueueHandle, messages: Vec<Placed>, me: QueueHandle) {
    let cmd = QueueCmd::DeadLettersRefused {
        messages,
        target: me,
    };
    if let Err(Some(cmd)) = from.try_send(cmd) {
        tokio::spawn(async move { from.send(cmd).await });
    }
}
