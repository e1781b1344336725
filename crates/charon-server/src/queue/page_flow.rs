//! A queue's side of page-out backpressure (`handles::page_flow`). After each page-out pass
//! (`StoreSide::page_out`) the queue raises its flag while the bodies it wrote to its page-out
//! area but cannot drop yet (the store has not made them durable) exceed
//! `page_out_flow_bytes`, and lowers it once they are under half: the connections publishing
//! to it stop reading meanwhile. While its page-out waits, the queue wakes by itself when the
//! store's durable index reaches what it waits for (or, with the test knob, at its next pass):
//! throttled publishers send no commands that would wake it.

use std::time::Instant;

use charon_store::DurableWatch;

use super::stored::StoreSide;
use crate::handles::QueueHandle;

/// Raises or lowers `me`'s flag from the lag of its last page-out pass and the publishes
/// still in its channel (a connection raises it too when it finds the channel over the bound).
pub(super) fn throttle(me: &QueueHandle, s: Option<&StoreSide>) {
    let limit = s.map_or(DEFAULT_FLOW_BYTES, |s| s.p.paging().flow_bytes);
    let lag = s.map_or(0, |s| s.page_lag().bytes);
    let inbox = me.inbox_bytes();
    let flow = me.page_flow();
    let on = if flow.is_on() {
        lag > limit / 2 || inbox > limit / 2
    } else {
        lag > limit || inbox > limit
    };
    if on != flow.is_on() {
        tracing::debug!(queue = %me.name(), on, lag, inbox, "page-out flow");
    }
    flow.set(on);
}

/// `page_out_flow_bytes`'s default, for a queue without a store.
const DEFAULT_FLOW_BYTES: u64 = 32 << 20;

/// What a waiting page-out waits for.
#[derive(Debug, Clone, Copy)]
pub(super) enum Until {
    /// The store's durable index reaching this.
    Durable(u64),
    /// This time (the test knob's next pass).
    Time(Instant),
}

/// The actor's wake-up for its page-out.
#[derive(Debug)]
pub(super) struct Wake {
    /// `None` without a store, or once the store failed (no more waiting on it).
    watch: Option<DurableWatch>,
}

impl Wake {
    pub(super) fn new(store: Option<&StoreSide>) -> Self {
        Wake {
            watch: store.map(|s| s.p.durable_watch()),
        }
    }

    /// What to wake for, if the last page-out pass left work waiting.
    pub(super) fn armed(&self, store: Option<&StoreSide>) -> Option<Until> {
        let lag = store?.page_lag();
        match lag.waiting_for {
            Some(i) if self.watch.is_some() => Some(Until::Durable(i)),
            _ => lag.next_pass.map(Until::Time),
        }
    }

    /// Completes when `until` is reached.
    pub(super) async fn wait(&mut self, until: Option<Until>) {
        match until {
            Some(Until::Durable(i)) => {
                if let Some(w) = self.watch.as_mut()
                    && w.reached(i).await.is_err()
                {
                    // Poisoned or closed: the store will not make it durable.
                    self.watch = None;
                }
            }
            Some(Until::Time(t)) => {
                tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await;
            }
            None => std::future::pending().await,
        }
    }
}
