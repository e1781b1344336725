//! Delivery flow control between queue actors and connections.
//!
//! A queue actor never blocks on a connection. Instead it asks, before each delivery, whether the
//! consumer's connection and channel can take one more message ([`ConnFlow::try_take`],
//! [`ChannelLimit::try_take`]). When they cannot, the queue registers itself as *starved* and is
//! kicked ([`super::QueueCmd::Kick`]) once the connection has written its backlog or the
//! channel got acks back. This bounds every connection's outbound buffer (by
//! [`MAX_PENDING_DELIVERIES`]) and the channel-wide prefetch (`basic.qos global=true`) without a
//! lock held across an `.await`.
//!
//! Registration and release are ordered (`SeqCst` counter, then the mutex-guarded list) so that a
//! queue either sees the released credit or is found in the starved list: no lost wake-up.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

use super::queue::QueueHandle;
use crate::locks::MutexExt;

/// Deliveries a connection may have encoded but not yet written to its socket.
pub const MAX_PENDING_DELIVERIES: usize = 8192;

/// Queues waiting for credit, each at most once. `any` says whether the list may be non-empty,
/// so that releasing credit (every flush, every settle) takes the lock only when a queue waits:
/// a registrant sets it (`SeqCst`) before re-checking the credit, a releaser reads it (`SeqCst`)
/// after giving credit back, so either the registrant sees the credit or the releaser sees
/// the flag.
#[derive(Debug, Default)]
struct Starved {
    list: Mutex<Vec<QueueHandle>>,
    any: AtomicBool,
}

impl Starved {
    fn register(&self, queue: &QueueHandle) {
        let mut list = self.list.lock_recover();
        if !list.iter().any(|q| q.same(queue)) {
            list.push(queue.clone());
        }
        self.any.store(true, Ordering::SeqCst);
    }

    fn kick_all(&self) {
        if !self.any.load(Ordering::SeqCst) {
            return;
        }
        let drained: Vec<QueueHandle> = {
            let mut list = self.list.lock_recover();
            self.any.store(false, Ordering::SeqCst);
            std::mem::take(&mut *list)
        };
        for q in drained {
            q.kick();
        }
    }
}

/// Per-connection outbound backlog, shared by the connection and the queues delivering to it.
#[derive(Debug, Default)]
pub struct ConnFlow {
    pending: AtomicUsize,
    starved: Starved,
}

impl ConnFlow {
    /// Takes one delivery slot, or registers `queue` to be kicked when slots free up.
    pub fn try_take(&self, queue: &QueueHandle) -> bool {
        if self.pending.fetch_add(1, Ordering::SeqCst) < MAX_PENDING_DELIVERIES {
            return true;
        }
        self.pending.fetch_sub(1, Ordering::SeqCst);
        self.starved.register(queue);
        // Re-check after registering: the writer may have drained in between.
        if self.pending.fetch_add(1, Ordering::SeqCst) < MAX_PENDING_DELIVERIES {
            return true;
        }
        self.pending.fetch_sub(1, Ordering::SeqCst);
        false
    }

    /// Releases `n` slots once their deliveries were written (or dropped).
    pub fn release(&self, n: usize) {
        if n == 0 {
            return;
        }
        let before = self.pending.fetch_sub(n, Ordering::SeqCst);
        if before.saturating_sub(n) < MAX_PENDING_DELIVERIES / 2 {
            self.starved.kick_all();
        }
    }
}

/// Per-channel delivery gate: channel.flow and the channel-wide prefetch limit.
#[derive(Debug)]
pub struct ChannelLimit {
    active: AtomicBool,
    /// Channel-wide prefetch (`basic.qos global=true`); 0 means none.
    limit: AtomicU32,
    /// Deliveries on this channel that await an ack.
    unacked: AtomicU32,
    starved: Starved,
}

impl Default for ChannelLimit {
    fn default() -> Self {
        Self {
            active: AtomicBool::new(true),
            limit: AtomicU32::new(0),
            unacked: AtomicU32::new(0),
            starved: Starved::default(),
        }
    }
}

impl ChannelLimit {
    /// Takes one delivery for a consumer on this channel. `acked` deliveries count against the
    /// channel-wide prefetch; no-ack ones only need the channel to be active.
    pub fn try_take(&self, queue: &QueueHandle, acked: bool) -> bool {
        if self.admit(acked) {
            return true;
        }
        self.starved.register(queue);
        self.admit(acked)
    }

    fn admit(&self, acked: bool) -> bool {
        if !self.active.load(Ordering::SeqCst) {
            return false;
        }
        if !acked {
            return true;
        }
        let limit = self.limit.load(Ordering::SeqCst);
        let before = self.unacked.fetch_add(1, Ordering::SeqCst);
        if limit == 0 || before < limit {
            return true;
        }
        self.unacked.fetch_sub(1, Ordering::SeqCst);
        false
    }

    /// Gives back `n` acked deliveries (acked, rejected or requeued).
    pub fn settle(&self, n: u32) {
        if n == 0 {
            return;
        }
        let _ = self
            .unacked
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
                Some(v.saturating_sub(n))
            });
        self.starved.kick_all();
    }

    /// Sets the channel-wide prefetch (0 = unlimited) and wakes waiting queues.
    pub fn set_limit(&self, limit: u32) {
        self.limit.store(limit, Ordering::SeqCst);
        self.starved.kick_all();
    }

    /// channel.flow: pauses or resumes deliveries.
    pub fn set_active(&self, active: bool) {
        self.active.store(active, Ordering::SeqCst);
        if active {
            self.starved.kick_all();
        }
    }
}
