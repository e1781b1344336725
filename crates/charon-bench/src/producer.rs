//! Producer: publishes pre-encoded messages in batches (many per syscall).
//!
//! Pacing: socket writes are awaited (TCP backpressure), `--rate` is enforced
//! with a schedule, and `--confirm N` keeps at most N unconfirmed messages
//! in flight (a semaphore refilled by the confirm reader task).
//!
//! With `--pmessages`, a producer counts as done when the broker has taken all
//! its messages: a `basic.qos` marker sent after the last one has been answered
//! (the broker read everything before it) and, in confirm mode, all are confirmed.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::Semaphore;

use crate::BenchError;
use crate::client::Connection;
use crate::client::connection::{CHANNEL, check_async_method, close_frame};
use crate::client::frame_io::{FRAME_METHOD, FrameReader};
use crate::client::wire::{self, PublishTemplate};
use crate::stats::Shared;

/// Target size of one write (bytes).
const BATCH_BYTES: usize = 128 * 1024;

/// How long to wait for the broker to drain a producer connection at the end.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(15);

/// What a producer publishes and how.
#[derive(Debug, Clone)]
pub(crate) struct ProducerCfg {
    pub(crate) queue: String,
    pub(crate) size: usize,
    pub(crate) persistent: bool,
    pub(crate) rate: u64,
    pub(crate) confirm: u32,
    pub(crate) limit: u64,
}

/// Tracks publisher confirms (possibly multiple / out of order) and refills the window.
#[derive(Debug, Default)]
struct ConfirmTracker {
    acked_upto: u64,
    singles: BTreeSet<u64>,
}

impl ConfirmTracker {
    /// Returns how many new messages this ack/nack confirms.
    fn confirm(&mut self, tag: u64, multiple: bool) -> u64 {
        if tag <= self.acked_upto {
            return 0;
        }
        if multiple {
            let already = self.singles.range(..=tag).count() as u64;
            self.singles = self.singles.split_off(&(tag + 1));
            let n = tag - self.acked_upto - already;
            self.acked_upto = tag;
            self.advance();
            n
        } else if self.singles.insert(tag) {
            self.advance();
            1
        } else {
            0
        }
    }

    fn advance(&mut self) {
        while self.singles.remove(&(self.acked_upto + 1)) {
            self.acked_upto += 1;
        }
    }
}

/// When a producer with a message limit is done: its end marker answered and, in confirm
/// mode, all its messages confirmed.
#[derive(Debug)]
struct DoneTracker {
    confirms: bool,
    limit: u64,
    marker_answered: bool,
    confirmed: u64,
    reported: bool,
}

impl DoneTracker {
    fn new(cfg: &ProducerCfg) -> Self {
        Self {
            confirms: cfg.confirm > 0,
            limit: cfg.limit,
            marker_answered: false,
            confirmed: 0,
            // Without a limit there is nothing to report.
            reported: cfg.limit == 0,
        }
    }

    /// True exactly once: when the producer becomes done.
    fn became_done(&mut self) -> bool {
        if self.reported || !self.marker_answered || (self.confirms && self.confirmed < self.limit)
        {
            return false;
        }
        self.reported = true;
        true
    }
}

/// Reads the producer connection: confirms, the end marker's qos-ok, closes; everything else
/// is ignored.
async fn confirm_reader(
    mut reader: FrameReader,
    window: Option<Arc<Semaphore>>,
    mut done: DoneTracker,
    shared: Arc<Shared>,
) -> Result<(), BenchError> {
    let mut tracker = ConfirmTracker::default();
    loop {
        // Runs until connection.close-ok (after the publisher's close) or EOF;
        // the caller bounds it with a timeout.
        reader.fill().await?;
        let mut confirmed = 0u64;
        let mut nacked = 0u64;
        while let Some(f) = reader.next_frame()? {
            if f.kind != FRAME_METHOD {
                continue;
            }
            match wire::method_ids(f.payload) {
                Some((wire::CLASS_BASIC, m)) if m == wire::BASIC_ACK || m == wire::BASIC_NACK => {
                    let (tag, multiple) = wire::ack_fields(f.payload)
                        .ok_or_else(|| BenchError::Protocol("short basic.ack".into()))?;
                    let n = tracker.confirm(tag, multiple);
                    confirmed += n;
                    if m == wire::BASIC_NACK {
                        nacked += n;
                    }
                }
                Some((wire::CLASS_BASIC, wire::BASIC_RETURN)) => {}
                Some((wire::CLASS_BASIC, wire::BASIC_QOS_OK)) => done.marker_answered = true,
                Some((wire::CLASS_CONNECTION, wire::CONNECTION_CLOSE_OK)) => return Ok(()),
                _ => {
                    // connection.blocked/unblocked and others are informational;
                    // closes become errors.
                    check_async_method(f.full)?;
                }
            }
        }
        if confirmed > 0 {
            shared.confirmed.fetch_add(confirmed, Ordering::Relaxed);
            if let Some(w) = &window {
                w.add_permits(confirmed as usize);
            }
        }
        if nacked > 0 {
            shared.nacked.fetch_add(nacked, Ordering::Relaxed);
        }
        done.confirmed += confirmed;
        if done.became_done() {
            shared.producer_done(shared.now_nanos());
        }
    }
}

/// Runs one producer until `shared.stop` or its message limit.
/// `conn` must already be in confirm mode if `cfg.confirm > 0`.
pub(crate) async fn run_producer(
    conn: Connection,
    cfg: ProducerCfg,
    shared: Arc<Shared>,
) -> Result<(), BenchError> {
    let Connection {
        reader,
        writer,
        frame_max,
    } = conn;
    let window = (cfg.confirm > 0).then(|| Arc::new(Semaphore::new(cfg.confirm as usize)));
    let done = DoneTracker::new(&cfg);
    let reader_task = tokio::spawn(confirm_reader(reader, window.clone(), done, shared.clone()));
    let result = publish_loop(writer, &cfg, frame_max, window, &shared).await;
    if let Err(e) = result {
        shared.fail(e);
    }
    // Wait for close-ok: it guarantees the broker routed everything this
    // connection published, so no late message lands in a later run's queue.
    let abort = reader_task.abort_handle();
    match tokio::time::timeout(CLOSE_TIMEOUT, reader_task).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => {
            if !shared.stop.is_cancelled() {
                shared.fail(e);
            }
        }
        Ok(Err(e)) => shared.fail(BenchError::Task(e.to_string())),
        Err(_) => {
            abort.abort();
            tracing::warn!("producer connection: no close-ok within {CLOSE_TIMEOUT:?}");
        }
    }
    Ok(())
}

async fn publish_loop(
    mut writer: OwnedWriteHalf,
    cfg: &ProducerCfg,
    frame_max: u32,
    window: Option<Arc<Semaphore>>,
    shared: &Shared,
) -> Result<(), BenchError> {
    let template =
        PublishTemplate::new(CHANNEL, "", &cfg.queue, cfg.size, cfg.persistent, frame_max);
    let per_batch = (BATCH_BYTES / template.bytes.len().max(1)).max(1) as u64;
    let mut buf = Vec::with_capacity(BATCH_BYTES + template.bytes.len());
    let started = Instant::now();
    let mut sent = 0u64;
    loop {
        if shared.stop.is_cancelled() {
            break;
        }
        let mut n = per_batch;
        if cfg.limit > 0 {
            n = n.min(cfg.limit - sent);
            if n == 0 {
                buf.clear();
                wire::encode_qos_marker(&mut buf, CHANNEL);
                writer.write_all(&buf).await?;
                break;
            }
        }
        if cfg.rate > 0 {
            let due = (started.elapsed().as_secs_f64() * cfg.rate as f64) as u64 + 1;
            if due <= sent {
                let next = started + Duration::from_secs_f64(sent as f64 / cfg.rate as f64);
                tokio::select! {
                    _ = tokio::time::sleep_until(next.into()) => {}
                    _ = shared.stop.cancelled() => break,
                }
                continue;
            }
            n = n.min(due - sent);
        }
        if let Some(w) = &window {
            let avail = w.available_permits() as u64;
            if avail == 0 {
                tokio::select! {
                    p = w.acquire() => {
                        p.map_err(|e| BenchError::Task(e.to_string()))?.forget();
                    }
                    _ = shared.stop.cancelled() => break,
                }
                let more = (w.available_permits() as u64).min(n - 1);
                if more > 0
                    && let Ok(p) = w.try_acquire_many(more as u32)
                {
                    p.forget();
                }
                n = 1 + more;
            } else {
                n = n.min(avail);
                if let Ok(p) = w.try_acquire_many(n as u32) {
                    p.forget();
                }
            }
        }
        buf.clear();
        let ts = shared.now_nanos();
        for _ in 0..n {
            template.append(&mut buf, ts);
        }
        tokio::select! {
            r = writer.write_all(&buf) => r?,
            // A blocked broker: give up; a partial frame may be left on the
            // wire, so the socket is dropped, not closed.
            _ = async {
                shared.stop.cancelled().await;
                tokio::time::sleep(CLOSE_TIMEOUT).await;
            } => return Ok(()),
        }
        sent += n;
        shared.published.fetch_add(n, Ordering::Relaxed);
    }
    // Stay connected until the end of the run (confirms may still arrive),
    // then close the connection cleanly.
    shared.stop.cancelled().await;
    let _ = writer.write_all(&close_frame()?).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{ConfirmTracker, DoneTracker, ProducerCfg};

    fn cfg(confirm: u32, limit: u64) -> ProducerCfg {
        ProducerCfg {
            queue: "q".into(),
            size: 16,
            persistent: false,
            rate: 0,
            confirm,
            limit,
        }
    }

    #[test]
    fn done_needs_the_marker_and_every_confirm() {
        let mut d = DoneTracker::new(&cfg(10, 100));
        d.confirmed = 100;
        assert!(!d.became_done(), "marker not answered yet");
        d.marker_answered = true;
        assert!(d.became_done());
        assert!(!d.became_done(), "reported once");

        let mut d = DoneTracker::new(&cfg(10, 100));
        d.marker_answered = true;
        d.confirmed = 99;
        assert!(!d.became_done());
        d.confirmed = 100;
        assert!(d.became_done());

        let mut d = DoneTracker::new(&cfg(0, 100));
        d.marker_answered = true;
        assert!(d.became_done(), "no confirms: the marker suffices");
        let mut d = DoneTracker::new(&cfg(0, 0));
        d.marker_answered = true;
        assert!(!d.became_done(), "no limit: never done");
    }

    #[test]
    fn confirms_mixed() {
        let mut t = ConfirmTracker::default();
        assert_eq!(t.confirm(2, false), 1);
        assert_eq!(t.confirm(1, false), 1);
        assert_eq!(t.acked_upto, 2);
        assert_eq!(t.confirm(5, false), 1);
        assert_eq!(t.confirm(6, true), 3);
        assert_eq!(t.confirm(6, true), 0);
        assert_eq!(t.confirm(10, true), 4);
        assert!(t.singles.is_empty());
    }
}
