//! What the null broker saw: the admin methods (in order) and settlement frame counts, so
//! tests can check what the tool sends without a real broker.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use amq_protocol::types::FieldTable;

/// An admin method received by the null broker.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// `queue.declare(queue, arguments)`.
    Declare {
        /// Queue name.
        queue: String,
        /// Declare arguments.
        arguments: FieldTable,
    },
    /// `queue.delete(queue)`.
    Delete(String),
    /// `queue.purge(queue)`.
    Purge(String),
    /// `basic.consume(queue)`.
    Consume(String),
}

/// Record of one null broker's traffic (shared by all its connections).
#[derive(Debug, Default)]
pub struct Observed {
    events: Mutex<Vec<Event>>,
    /// `basic.ack` frames from consumers.
    pub acks: AtomicU64,
    /// `basic.nack` frames with requeue=false.
    pub nacks_dropped: AtomicU64,
    /// `basic.reject` frames with requeue=false.
    pub rejects_dropped: AtomicU64,
    /// `basic.nack` / `basic.reject` frames with requeue=true.
    pub requeues: AtomicU64,
}

impl Observed {
    pub(crate) fn push(&self, e: Event) {
        if let Ok(mut v) = self.events.lock() {
            v.push(e);
        }
    }

    /// Counts a settlement frame (`basic.ack` / `nack` / `reject` payload); false if it is none.
    pub(crate) fn settlement(&self, payload: &[u8]) -> bool {
        let bump = |c: &AtomicU64| {
            c.fetch_add(1, Ordering::Relaxed);
            true
        };
        let requeue = |bit: u8| payload.get(12).is_some_and(|b| b & bit != 0);
        match payload.get(..4) {
            Some([0, 60, 0, 80]) => bump(&self.acks),
            Some([0, 60, 0, 120]) if requeue(2) => bump(&self.requeues),
            Some([0, 60, 0, 120]) => bump(&self.nacks_dropped),
            Some([0, 60, 0, 90]) if requeue(1) => bump(&self.requeues),
            Some([0, 60, 0, 90]) => bump(&self.rejects_dropped),
            _ => false,
        }
    }

    /// The admin methods received so far, in order.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Reads a counter.
    pub fn count(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}
