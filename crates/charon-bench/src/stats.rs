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
    /// Cancelled when the measurement ends (or a worker fails).
    pub(crate) stop: CancellationToken,
    /// First worker error.
    pub(crate) error: Mutex<Option<BenchError>>,
}

impl Shared {
    pub(crate) fn new() -> Self {
        Self {
            origin: Instant::now(),
            published: AtomicU64::new(0),
            confirmed: AtomicU64::new(0),
            nacked: AtomicU64::new(0),
            consumed: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            producers_done: AtomicU64::new(0),
            stop: CancellationToken::new(),
            error: Mutex::new(None),
        }
    }

    /// Nanoseconds since the shared origin.
    #[inline]
    pub(crate) fn now_nanos(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
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
