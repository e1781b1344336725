//! Page-out backpressure between a queue and the connections publishing to it (RabbitMQ's
//! credit flow idea, for paging): a queue whose page-out lags behind (bodies written to its
//! page-out area that the store has not made durable yet, so they cannot leave memory) raises
//! its [`PageFlow`]; a connection that publishes to a queue with the flag raised stops reading
//! its socket (state `flow` in `/api/connections`, as RabbitMQ shows a connection its queues
//! throttle) until the queue lowers it. Publishers then go at the speed of the page-out instead
//! of filling memory up to the memory alarm.
//!
//! The flag is a `watch`: the queue actor is its only writer; a connection keeps a receiver
//! only while it waits. No lock, nothing held across `.await`.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::watch;

/// A queue's page-out backpressure flag.
#[derive(Debug)]
pub struct PageFlow {
    /// The flag, for the publish path's check (one relaxed load per target queue).
    on: AtomicBool,
    /// The same, to wait on.
    tx: watch::Sender<bool>,
}

impl Default for PageFlow {
    fn default() -> Self {
        PageFlow {
            on: AtomicBool::new(false),
            tx: watch::Sender::new(false),
        }
    }
}

impl PageFlow {
    /// Raises (`true`) or lowers the flag; waiters are woken only by a change.
    pub fn set(&self, on: bool) {
        if self.on.swap(on, Ordering::Relaxed) == on {
            return;
        }
        self.tx.send_if_modified(|v| {
            let changed = *v != on;
            *v = on;
            changed
        });
    }

    /// Whether publishers must wait.
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// A receiver to wait on until the flag is lowered (or the queue is gone).
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.tx.subscribe()
    }
}

/// Waits until the flag behind `rx` is lowered or its queue is gone.
pub async fn lowered(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|on| !on).await;
}

/// Whether a publisher must still wait on `rx`: raised, and its queue is still there.
pub fn still_raised(rx: &watch::Receiver<bool>) -> bool {
    rx.has_changed().is_ok() && *rx.borrow()
}
