//! State shared between the runner, producers and consumers.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use crate::BenchError;

/// Counters and control shared by every worker.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Origin of the timestamps written into message bodies.
    pub(crate) origin: Instant,
    /// Messages written to sockets by producers.
    pub(crate) published: AtomicU64,
    /// Messages confirmed (ack or nack) by the broker.
    pub(crate) confirmed: AtomicU64,
    /// Messages nacked by the broker.
    pub(crate) nacked: AtomicU64,
    /// Messages fully received by consumers (in dead-letter scenarios: by DLQ consumers).
    pub(crate) consumed: AtomicU64,
    /// Messages rejected (nack requeue=false) by main-queue consumers (dead-letter scenario).
    pub(crate) rejected: AtomicU64,
    /// Producers that reached `--pmessages`.
    pub(crate) producers_done: AtomicU64,
    /// When the last producer to finish was done: the broker had taken its last message
    /// (`now_nanos`, 0 = not yet).
    pub(crate) publish_done_ns: AtomicU64,
    /// Messages the consumers expect in all (`--pmessages` x producers; 0 = unbounded).
    pub(crate) expected: u64,
    /// When the first message was consumed (`now_nanos`, 0 = not yet).
    pub(crate) first_consumed_ns: AtomicU64,
    /// When `consumed` reached `expected` (`now_nanos`, 0 = not yet).
    pub(crate) all_consumed_ns: AtomicU64,
    /// Cancelled when the measurement ends (or a worker fails).
    pub(crate) stop: CancellationToken,
    /// First worker error.
    pub(crate) error: Mutex<Option<BenchError>>,
}

impl Shared {
    /// `expected`: messages the consumers should receive in all (0 = unbounded).
    pub(crate) fn new(expected: u64) -> Self {
        Self {
            origin: Instant::now(),
            published: AtomicU64::new(0),
            confirmed: AtomicU64::new(0),
            nacked: AtomicU64::new(0),
            consumed: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            producers_done: AtomicU64::new(0),
            publish_done_ns: AtomicU64::new(0),
            expected,
            first_consumed_ns: AtomicU64::new(0),
            all_consumed_ns: AtomicU64::new(0),
            stop: CancellationToken::new(),
            error: Mutex::new(None),
        }
    }

    /// Nanoseconds since the shared origin.
    #[inline]
    pub(crate) fn now_nanos(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    /// Counts `n` messages consumed at `now` (a `now_nanos` value), noting the first receipt
    /// and the one that completes `expected`.
    pub(crate) fn add_consumed(&self, n: u64, now: u64) {
        let before = self.consumed.fetch_add(n, Ordering::Relaxed);
        let now = now.max(1);
        if before == 0 {
            self.first_consumed_ns.store(now, Ordering::Relaxed);
        }
        if self.expected > 0 && before < self.expected && before + n >= self.expected {
            self.all_consumed_ns.store(now, Ordering::Relaxed);
        }
    }

    /// A producer reached its message limit at `now`.
    pub(crate) fn producer_done(&self, now: u64) {
        self.publish_done_ns
            .fetch_max(now.max(1), Ordering::Relaxed);
        self.producers_done.fetch_add(1, Ordering::Relaxed);
    }

    /// Seconds between two `now_nanos` values (negative if `to` is earlier); `None` if either
    /// is unset (0).
    pub(crate) fn secs_between(from: u64, to: u64) -> Option<f64> {
        (from > 0 && to > 0).then(|| (to as f64 - from as f64) / 1e9)
    }

    /// Records a worker failure (first one wins) and stops the run.
    pub(crate) fn fail(&self, e: BenchError) {
        if let Ok(mut slot) = self.error.lock()
            && slot.is_none()
        {
            *slot = Some(e);
        }
        self.stop.cancel();
    }

    pub(crate) fn take_error(&self) -> Option<BenchError> {
        self.error.lock().ok().and_then(|mut s| s.take())
    }

    pub(crate) fn load(&self, c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_first_and_completing_receipts() {
        let s = Shared::new(10);
        s.add_consumed(4, 100);
        s.add_consumed(4, 200);
        assert_eq!(s.load(&s.all_consumed_ns), 0);
        s.add_consumed(5, 300);
        s.add_consumed(1, 400);
        assert_eq!(s.load(&s.first_consumed_ns), 100);
        assert_eq!(s.load(&s.all_consumed_ns), 300);
        assert_eq!(s.load(&s.consumed), 14);
    }

    #[test]
    fn unbounded_runs_never_complete() {
        let s = Shared::new(0);
        s.add_consumed(1000, 5);
        assert_eq!(s.load(&s.all_consumed_ns), 0);
        assert_eq!(Shared::secs_between(0, 5), None);
        assert_eq!(Shared::secs_between(2_000_000_000, 500_000_000), Some(-1.5));
    }
}
