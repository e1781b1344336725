//! An exchange's message counters as RabbitMQ's management API shows them: `publish_in`
//! (messages published into the exchange, routed or not) and `publish_out` (deliveries routed
//! out of it to queues: one per queue a message reaches, as RabbitMQ sums its per-queue,
//! per-exchange counts). Counted by [`crate::VHost::route`] while routing; relaxed atomics, as
//! routing runs under a shared lock.

use std::sync::atomic::{AtomicU64, Ordering};

/// Cumulative counts of one exchange.
#[derive(Debug, Default)]
pub struct ExchangeStats {
    publish_in: AtomicU64,
    publish_out: AtomicU64,
}

impl ExchangeStats {
    /// One message published into the exchange that reached `queues` queues.
    pub fn record(&self, queues: usize) {
        self.publish_in.fetch_add(1, Ordering::Relaxed);
        if queues > 0 {
            self.publish_out.fetch_add(queues as u64, Ordering::Relaxed);
        }
    }

    /// `(publish_in, publish_out)`.
    pub fn get(&self) -> (u64, u64) {
        (
            self.publish_in.load(Ordering::Relaxed),
            self.publish_out.load(Ordering::Relaxed),
        )
    }
}
