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

use charon_core::DeadLetter;
use charon_core::dead_letter::{self, DlxSettings};

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
        for d in dead {
            let source = store.as_deref().and_then(|s| s.source_of(d.id));
            let original = match (store.as_deref(), d.id) {
                (Some(s), Some(id)) => s.load(id, &d.message),
                _ => d.message.clone(),
            };
            let copy = dead_letter::make_copy(&original, me.name(), d.reason, target, now);
            let headers = copy.properties.headers().as_ref();
            let keys: Vec<&str> = copy.routing_keys.iter().map(|k| k.as_ref()).collect();
            let mut queues: Vec<QueueHandle> = Vec::new();
            let routed = {
                let topo = self.vhost.topology.read_recover();
                topo.route_dead_letter(&target.exchange, &keys, headers, &mut queues)
            };
            if !routed {
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
            }
            if queues.is_empty() {
                self.dropped_no_route += 1;
            }
            let persistent = *copy.properties.delivery_mode() == Some(2);
            let (places, members) = allocate(
                queues
                    .into_iter()
                    .filter(|q| !dead_letter::is_cycle(d.reason, &copy.properties, q.name())),
                persistent,
            );
            let message = Arc::new(copy.message);
            let stored = match (store.as_deref_mut(), source) {
                (Some(s), Some(src)) => {
                    s.moved(src.1);
                    s.p.dead_letter(src, &message, members, now)
                }
                _ if !members.is_empty() => self
                    .vhost
                    .persistence()
                    .and_then(|p| p.publish_nowait(&message, members, now)),
                _ => None,
            };
            for (q, placed) in placed(places, &message, stored) {
                if q.same(me) {
                    local.push(placed);
                } else if let Some((_, v)) = batches.iter_mut().find(|(h, _)| h.same(&q)) {
                    v.push(placed);
                } else {
                    batches.push((q, vec![placed]));
                }
            }
        }
        for (q, messages) in batches {
            self.offer(me, messages, q, now);
        }
        local
    }

    /// A target refused `messages`: keep them, retry later.
    pub(super) fn refused(&mut self, messages: Vec<Placed>, target: QueueHandle, now: u64) {
        self.outbox.push_back(Pending {
            messages,
            target,
            not_before: now + RETRY_MS,
        });
    }

    /// Retries due outbox entries.
    pub(super) fn retry(&mut self, me: &QueueHandle, now: u64) {
        let n = self.outbox.len();
        for _ in 0..n {
            let Some(p) = self.outbox.pop_front() else {
                break;
            };
            if p.not_before > now {
                self.outbox.push_back(p);
                continue;
            }
            self.offer(me, p.messages, p.target, now);
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
