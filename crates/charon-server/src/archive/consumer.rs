//! One archive queue's internal consumer: takes deliveries like a client consumer with a
//! prefetch, writes each batch to the archive in one transaction, and acks the batch only once
//! that transaction committed and is on disk (SQLite: the WAL synced after the COMMIT, on
//! another thread, `charon_archive::wal_sync`). One batch is written while the next is taken
//! and extracted (the broker's hand-over and the SQL overlap), and while the one before is
//! synced. While the database fails, the batch stays unacked
//! and is retried; the rest of the queue waits.
//!
//! It also takes its queue's direct messages (`queue/direct.rs`: routed while the queue was
//! empty, never queued), in the same batches: those are settled in the store with
//! `DirectArchived` once their batch is durable, and given back to the queue (`DirectReturned`)
//! if this archiver stops before that. Direct messages are taken before deliveries, so records
//! keep arrival order.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use charon_archive::extract;
use charon_archive::wal_sync::WalSync;
use charon_core::ConsumerSpec;
use tokio::sync::{mpsc, oneshot};

use super::ArchiveService;
use crate::handles::{
    ChannelLimit, ConnEvent, ConnHandle, ConsumerTarget, Placed, QueueCmd, QueueHandle,
};

/// Unacked deliveries the archiver takes from its queue at once (a batch being synced, one
/// being written, the next being taken, and some in flight).
const PREFETCH: u16 = 16000;
/// Most records written in one transaction.
const MAX_BATCH: usize = 4000;
/// Fewest records worth writing ahead of the rest of the batch (see [`durable_front`]).
const MIN_FRONT: usize = 400;

/// A message's key in the archive: the store's identity of the message in this queue when the
/// store holds it (the same after a restart), else this run's identity (such a message does
/// not survive a restart). A direct message has the key a delivery of it would have had: the
/// store's ids (it is in the store for this queue just the same) or this run's queue id.
fn stable_key(svc: &ArchiveService, queue: &QueueHandle, id: u64, stored: Option<u64>) -> String {
    match (queue.store_id(), stored) {
        (Some(q), Some(m)) => format!("s:{q}:{m}"),
        _ => format!("t:{}:{}:{}", svc.boot, queue.id(), id),
    }
}

/// Consumes `queue` of `vhost` into the archive until the queue goes away.
pub(super) async fn run(svc: Arc<ArchiveService>, vhost: String, queue: QueueHandle) {
    let Some(broker) = svc.broker() else { return };
    let (conn, mut rx) = ConnHandle::new();
    let limit = Arc::new(ChannelLimit::default());
    let (reply, accepted) = oneshot::channel();
    let id = broker.next_id();
    // The store's durable index: a batch is written only once the store records that put its
    // messages into the queue are on disk (`Batch::store_upto`).
    let store = broker
        .vhost(&vhost)
        .and_then(|v| v.persistence().map(|p| p.durable_watch()));
    drop(broker);
    let cmd = QueueCmd::Consume {
        id,
        spec: ConsumerSpec {
            no_ack: false,
            prefetch: PREFETCH,
            exclusive: false,
        },
        target: ConsumerTarget {
            conn: conn.clone(),
            channel: 1,
            limit: limit.clone(),
            tag: Arc::from("charon.archive"),
        },
        reply,
    };
    if !queue.send(cmd).await || !matches!(accepted.await, Ok(Ok(()))) {
        tracing::warn!(queue = %queue.name(), "the archive could not consume from its queue");
        return;
    }
    // Direct messages (`queue/direct.rs`): asked for once consuming.
    let (dtx, mut drx) = mpsc::channel::<Vec<Placed>>(crate::queue::direct::CHANNEL_BATCHES);
    let mut direct_open = queue.send(QueueCmd::ArchiveDirect { tx: dtx }).await;
    tracing::info!(vhost = %vhost, queue = %queue.name(), "archiving dead letters");
    // The next batch: each delivery is extracted as it arrives, while the previous batch is
    // being written on the writer's thread (extraction is ~6 µs per record: done after the
    // write, it was on the hand-over's serial path).
    let mut batch = Batch::with_capacity(MAX_BATCH);
    // The batch being written: its task, what to settle once it is durable, and word of its
    // first failed attempt (its direct messages then go back to the queue, to wait there).
    let mut writing: Option<Writing> = None;
    // Batches written whose sync runs (SQLite: committed without the fsync, `wal_sync`), oldest
    // first: each is settled once its sync is done, in order.
    let mut syncing: VecDeque<(tokio::task::JoinHandle<()>, Settle)> = VecDeque::new();
    // The last batch written, emptied: the next batch is filled in its memory.
    let mut spare: Option<Batch> = None;
    let mut gone = false;
    // A write attempt failed and none succeeded since: direct messages go back to the queue.
    let mut failing = false;
    // Direct messages of a batch whose write or sync failed (given back below).
    let mut lost: Vec<Placed> = Vec::new();
    let extract_one =
        |batch: &mut Batch, id: u64, stored: Option<u64>, m: &charon_core::Message, now| {
            batch.records.push(extract(
                &svc.extract,
                stable_key(&svc, &queue, id, stored),
                &vhost,
                queue.name(),
                &m.properties,
                m.body.to_bytes().unwrap_or_default(),
                now,
            ));
        };
    let handle = |ev: ConnEvent, batch: &mut Batch| match ev {
        ConnEvent::Deliver { deliveries, .. } => {
            conn.flow().release(deliveries.len());
            let now = charon_archive::time::now_ms();
            for d in deliveries {
                if !batch.returned.is_empty() && batch.returned.remove(&d.id) {
                    // Given back from this batch, whose record it keeps: acked with it.
                    batch.settle.ids.push(d.id);
                    continue;
                }
                extract_one(batch, d.id, d.stored, &d.message, now);
                batch.note(d.stored, false);
                batch.settle.ids.push(d.id);
            }
            false
        }
        ConnEvent::ConsumerCancelled { .. } => true,
        ConnEvent::Confirm { .. } | ConnEvent::Confirms { .. } | ConnEvent::Control(_) => false,
    };
    let take_direct = |placed: Vec<Placed>, batch: &mut Batch| {
        let now = charon_archive::time::now_ms();
        for p in placed {
            extract_one(batch, p.id, p.stored, &p.message, now);
            batch.note(p.stored, true);
            batch.settle.direct.push(p);
        }
    };
    let stopped = loop {
        if gone && writing.is_none() && syncing.is_empty() && batch.is_empty() {
            break false;
        }
        tokio::select! {
            biased;
            r = pending_or(syncing.front_mut().map(|s| &mut s.0)) => {
                let Some((_, settle)) = syncing.pop_front() else { continue };
                if r.is_err() {
                    tracing::error!(queue = %queue.name(), "archive sync failed; its batch stays unacked");
                    lost = settle.direct;
                    break true;
                }
                let n = u32::try_from(settle.ids.len()).unwrap_or(u32::MAX);
                if !settle.done(&queue).await {
                    break true;
                }
                limit.settle(n);
            }
            ev = watch_write(writing.as_mut()) => match ev {
                WriteEvent::Failed => {
                    // The database refused the batch: its direct messages, and those of the
                    // next batch, wait in the queue (it holds them in the store already)
                    // instead of in this archiver, and so do those that come until a write
                    // succeeds. Both batches keep their records; should a message's record be
                    // written twice, the key is the same and one record stays.
                    failing = true;
                    let Some(w) = writing.as_mut() else { continue };
                    let mut direct = std::mem::take(&mut w.1.direct);
                    // The next batch keeps their records: when they come back as deliveries
                    // into it, they are not extracted twice (one key twice in a batch).
                    batch.returned.extend(batch.settle.direct.iter().map(|p| p.id));
                    direct.append(&mut batch.settle.direct);
                    if !direct.is_empty() {
                        tracing::warn!(queue = %queue.name(), messages = direct.len(), "archive write failed: direct messages back to the queue");
                        if !queue.send(QueueCmd::DirectReturned { placed: direct }).await {
                            break true;
                        }
                    }
                }
                WriteEvent::Done(r) => {
                    failing = false;
                    let Some((_, settle, _)) = writing.take() else { continue };
                    let Ok(written) = r else {
                        tracing::error!(queue = %queue.name(), "archive writer failed; its batch stays unacked");
                        lost = settle.direct;
                        break true;
                    };
                    let Written { batch: mut done, sync } = *written;
                    done.clear();
                    spare = Some(done);
                    // Its sync starts now; the next batch is written meanwhile (below).
                    syncing.push_back((tokio::spawn(sync_batch(queue.name().to_string(), sync)), settle));
                }
            },
            d = drx.recv(), if direct_open && batch.len() < MAX_BATCH => match d {
                Some(placed) if failing => {
                    if !queue.send(QueueCmd::DirectReturned { placed }).await {
                        break true;
                    }
                }
                Some(placed) => take_direct(placed, &mut batch),
                None => direct_open = false,
            },
            ev = rx.recv(), if !gone && batch.len() < MAX_BATCH => match ev {
                Some(ev) => gone |= handle(ev, &mut batch),
                None => break true,
            },
            else => {}
        }
        while batch.len() < MAX_BATCH {
            // Direct messages first: a delivery that follows them was queued after them.
            if direct_open
                && !failing
                && let Ok(placed) = drx.try_recv()
            {
                take_direct(placed, &mut batch);
                continue;
            }
            match rx.try_recv() {
                Ok(ev) => gone |= handle(ev, &mut batch),
                Err(_) => break,
            }
        }
        if writing.is_none() && !batch.is_empty() {
            let mut next = spare.take().unwrap_or_default();
            // The records whose messages the store has on disk already are written now; the
            // rest (the newest, whose store commit is still under way) stay in the batch being
            // filled, instead of the writer waiting for that commit (docs/archive.md
            // "Nineteenth round").
            let front = match &store {
                Some(w)
                    if !failing
                        && batch.returned.is_empty()
                        && batch.len() == batch.marks.len() =>
                {
                    durable_front(&batch.marks, |i| w.is_durable(i))
                }
                _ => 0,
            };
            if front > 0 {
                batch.move_front(front, &mut next);
            } else {
                std::mem::swap(&mut batch, &mut next);
            }
            writing = Some(spawn_write(&svc, &queue, next, store.clone()));
        }
    };
    // Direct messages not durable in the archive go back to the queue (stored there as if just
    // published: their store record already names the queue). Archived already, they are
    // archived again later under the same key (no second record).
    let mut back: Vec<Placed> = lost;
    back.append(&mut batch.settle.direct);
    if stopped {
        back.extend(writing.into_iter().flat_map(|(_, s, _)| s.direct));
        back.extend(syncing.into_iter().flat_map(|(_, s)| s.direct));
    }
    drx.close();
    while let Ok(placed) = drx.try_recv() {
        back.extend(placed);
    }
    // Ids are allocated in arrival order: queued back in that order.
    back.sort_by_key(|p| p.id);
    if !back.is_empty() {
        tracing::warn!(queue = %queue.name(), messages = back.len(), "archiver stopped: direct messages back to the queue");
        let _ = queue.send(QueueCmd::DirectReturned { placed: back }).await;
    }
    tracing::info!(queue = %queue.name(), "archiver stops");
}

/// What a batch settles once it is durable: the queue's deliveries (acked) and its direct
/// messages (settled in the store, out of flight).
#[derive(Default)]
struct Settle {
    ids: Vec<u64>,
    direct: Vec<Placed>,
}

impl Settle {
    /// Tells the queue; false when it is gone.
    async fn done(self, queue: &QueueHandle) -> bool {
        if !self.ids.is_empty() && !queue.send(QueueCmd::Ack { ids: self.ids }).await {
            return false;
        }
        if !self.direct.is_empty() {
            let count = self.direct.len();
            let bytes = self.direct.iter().map(|p| p.message.body_size()).sum();
            let stored = self
                .direct
                .iter()
                .filter(|p| p.stored.is_some())
                .map(|p| p.id)
                .collect();
            return queue
                .send(QueueCmd::DirectArchived {
                    count,
                    bytes,
                    stored,
                })
                .await;
        }
        true
    }
}

/// Deliveries and direct messages taken and extracted (their parameters built), not yet
/// written.
#[derive(Default)]
struct Batch {
    records: charon_archive::ingest::Batch,
    settle: Settle,
    /// Direct messages given back to the queue whose records this batch keeps (a failed
    /// write): their deliveries are only acked with the batch.
    returned: HashSet<u64>,
    /// Per record, in the records' order: its message's store id (0: not in the store) and
    /// whether it is a direct message.
    marks: Vec<(u64, bool)>,
}

impl Batch {
    fn with_capacity(n: usize) -> Batch {
        Batch {
            records: charon_archive::ingest::Batch::with_capacity(n),
            settle: Settle {
                ids: Vec::with_capacity(n),
                direct: Vec::new(),
            },
            returned: HashSet::new(),
            marks: Vec::with_capacity(n),
        }
    }

    /// Notes the record just extracted: its message's store id and kind.
    fn note(&mut self, stored: Option<u64>, direct: bool) {
        self.marks.push((stored.unwrap_or(0), direct));
    }

    /// The highest store id (log index) of its messages: the batch is written once the store
    /// is durable up to it. Otherwise a kill -9 could leave a record in the archive whose
    /// message the store lost: a dead letter whose move was not on disk is dead-lettered again
    /// from its source after the restart, under a new store id, i.e. a second key.
    fn store_upto(&self) -> u64 {
        self.marks.iter().map(|m| m.0).max().unwrap_or(0)
    }

    /// Moves the first `n` records (rounded down to whole INSERT chunks, see
    /// `charon_archive::ingest::Batch::move_front`) into `into`, emptied first, with what
    /// settles them; `into`'s store bound is theirs, this batch's that of the records left.
    /// Only for a batch whose every settle has its record and every record its settle (no
    /// direct message given back, `returned` empty: see the write's failure above).
    fn move_front(&mut self, n: usize, into: &mut Batch) {
        into.clear();
        let n = self.records.move_front(n, &mut into.records);
        into.marks.extend(self.marks.drain(..n));
        let direct = into.marks.iter().filter(|m| m.1).count();
        into.settle.ids.extend(self.settle.ids.drain(..n - direct));
        into.settle
            .direct
            .extend(self.settle.direct.drain(..direct));
    }

    /// Records taken.
    fn len(&self) -> usize {
        self.settle.ids.len() + self.settle.direct.len()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Empty, its memory kept.
    fn clear(&mut self) {
        self.records.clear();
        self.settle.ids.clear();
        self.settle.direct.clear();
        self.returned.clear();
        self.marks.clear();
    }
}

/// How many of a batch's first records to write at once, ahead of the rest: the records before
/// the first whose message is not durable in the store yet (`durable(store id)`), in whole
/// INSERT chunks, when that is at least [`MIN_FRONT`] records; 0 when the whole batch is to be
/// written (every message durable, or too few: the write then waits for the store, as a batch
/// always did). Every record written has its message on disk in the store, either way.
fn durable_front(marks: &[(u64, bool)], durable: impl Fn(u64) -> bool) -> usize {
    // The store ids' running maximum never decreases, so the durable records' front is a
    // partition point of it (a dozen probes of the store's state, not one per record).
    let mut top = 0;
    let upto: Vec<u64> = marks
        .iter()
        .map(|m| {
            top = top.max(m.0);
            top
        })
        .collect();
    let end = upto.partition_point(|&i| durable(i));
    if end == marks.len() {
        return 0;
    }
    let chunk = charon_archive::ingest::Batch::CHUNK;
    let front = end / chunk * chunk;
    if front >= MIN_FRONT { front } else { 0 }
}

/// A batch written (committed), and what makes it durable before its acks (`None`: it is).
struct Written {
    batch: Batch,
    sync: Option<WalSync>,
}

/// Waits for `h`, or forever when there is none (a disabled `select!` branch).
async fn pending_or<T>(
    h: Option<&mut tokio::task::JoinHandle<T>>,
) -> Result<T, tokio::task::JoinError> {
    match h {
        Some(h) => h.await,
        None => std::future::pending().await,
    }
}

/// What became of the batch being written.
enum WriteEvent {
    /// An attempt failed (it is retried).
    Failed,
    /// The write is over (written, or its task failed).
    Done(Result<Box<Written>, tokio::task::JoinError>),
}

/// The batch being written: its task and its sender's word of a failed attempt.
type Writing = (tokio::task::JoinHandle<Written>, Settle, mpsc::Receiver<()>);

/// Waits for the batch being written to be done or to fail an attempt (forever when none).
async fn watch_write(w: Option<&mut Writing>) -> WriteEvent {
    let Some((task, _, failed)) = w else {
        return std::future::pending().await;
    };
    tokio::select! {
        biased;
        r = task => WriteEvent::Done(r.map(Box::new)),
        Some(()) = failed.recv() => WriteEvent::Failed,
    }
}

/// Makes a written batch durable (`sync` on a blocking thread), retrying every second until
/// the sync succeeds; the batch's messages are acked only after.
async fn sync_batch(queue: String, sync: Option<WalSync>) {
    let Some(sync) = sync else { return };
    let mut failures = 0u32;
    loop {
        let s = sync.clone();
        match tokio::task::spawn_blocking(move || s.sync()).await {
            Ok(Ok(())) => return,
            Ok(Err(e)) => {
                if failures.is_multiple_of(30) {
                    tracing::error!(queue = %queue, error = %e, "archive sync failed; the batch stays unacked, retrying");
                }
            }
            Err(e) => tracing::error!(queue = %queue, error = %e, "archive sync task"),
        }
        failures += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Starts writing `batch`; returns the task (which gives the batch back, emptied, once
/// written, with what makes it durable) and what to settle once it is durable.
fn spawn_write(
    svc: &Arc<ArchiveService>,
    queue: &QueueHandle,
    mut batch: Batch,
    store: Option<charon_store::DurableWatch>,
) -> Writing {
    tracing::debug!(queue = %queue.name(), records = batch.records.len(), "archive batch: writing");
    let ids = std::mem::take(&mut batch.settle.ids);
    let direct = std::mem::take(&mut batch.settle.direct);
    let (svc, name) = (svc.clone(), queue.name().to_string());
    let (failed_tx, failed) = mpsc::channel(1);
    let upto = batch.store_upto();
    let records = Arc::new(batch.records);
    // Its messages durable in the store already (the usual case, see `durable_front`): the
    // write starts now on a blocking thread, not once the task below has had its turn on the
    // runtime.
    let first: Option<Attempt> = store
        .as_ref()
        .is_none_or(|w| upto == 0 || w.is_durable(upto))
        .then(|| {
            let recs = records.clone();
            svc.start_now(move |c| charon_archive::ingest::insert_prepared_sync_later(c, &recs))
                .map(|f| Box::pin(f) as Attempt)
        })
        .flatten();
    let task = tokio::spawn(async move {
        let t0 = std::time::Instant::now();
        if first.is_none()
            && let Some(mut w) = store.filter(|_| upto > 0)
            && let Err(e) = w.reached(upto).await
        {
            tracing::error!(queue = %name, error = %e, "the store stopped before the batch's messages were durable there; writing it anyway");
        }
        tracing::debug!(queue = %name, started = first.is_some(), waited = ?t0.elapsed(), "archive batch: its messages durable in the store");
        let (records, sync) = write(svc, name, records, first, failed_tx).await;
        Written {
            batch: Batch {
                records,
                settle: batch.settle,
                returned: HashSet::new(),
                marks: batch.marks,
            },
            sync,
        }
    });
    (task, Settle { ids, direct }, failed)
}

/// A write attempt started already ([`ArchiveService::start_now`]): records new, and the sync.
type Attempt = std::pin::Pin<
    Box<
        dyn std::future::Future<
                Output = Result<(u64, Option<WalSync>), charon_archive::ArchiveError>,
            > + Send,
    >,
>;

/// Writes `records` in one transaction (`first`: its first attempt, started already),
/// retrying every second until the database takes them;
/// gives them back (their memory serves the next batch) with what makes them durable.
async fn write(
    svc: Arc<ArchiveService>,
    queue: String,
    records: Arc<charon_archive::ingest::Batch>,
    mut first: Option<Attempt>,
    failed: mpsc::Sender<()>,
) -> (charon_archive::ingest::Batch, Option<WalSync>) {
    let mut failures = 0u32;
    loop {
        let t0 = std::time::Instant::now();
        let attempt = match first.take() {
            Some(started) => started.await,
            None => {
                let recs = records.clone();
                svc.run(move |c| charon_archive::ingest::insert_prepared_sync_later(c, &recs))
                    .await
            }
        };
        match attempt {
            Ok((_, sync)) => {
                tracing::debug!(queue = %queue, records = records.len(), took = ?t0.elapsed(), "archive batch: written");
                return (Arc::try_unwrap(records).unwrap_or_default(), sync);
            }
            Err(e) => {
                if failures.is_multiple_of(30) {
                    tracing::error!(queue = %queue, error = %e, pending = records.len(), "archiving failed; the messages stay in the queue, retrying");
                }
                if failures == 0 {
                    let _ = failed.try_send(());
                }
                failures += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use charon_archive::NewRecord;
    use charon_core::Message;
    use charon_protocol::RawProperties;

    use super::{Batch, MIN_FRONT, durable_front};
    use crate::handles::Placed;

    /// Marks of `n` records whose messages have store ids 1..=n, every third one direct.
    fn marks(n: u64) -> Vec<(u64, bool)> {
        (1..=n).map(|i| (i, i % 3 == 0)).collect()
    }

    #[test]
    fn the_front_is_the_records_whose_messages_are_durable_in_whole_chunks() {
        // Durable up to store id 2,345 of 4,000: 2,300 records go ahead (whole chunks of 100).
        assert_eq!(durable_front(&marks(4000), |i| i <= 2345), 2300);
        // Every message durable: the whole batch is written, nothing to split.
        assert_eq!(durable_front(&marks(4000), |i| i <= 4000), 0);
        // Too few durable to be worth their own transaction: the batch waits, as before.
        assert_eq!(durable_front(&marks(4000), |i| i < MIN_FRONT as u64), 0);
        assert_eq!(
            durable_front(&marks(4000), |i| i <= MIN_FRONT as u64),
            MIN_FRONT
        );
        // Nothing durable.
        assert_eq!(durable_front(&marks(4000), |_| false), 0);
        // Store ids out of order: a record is written ahead only when every record before it
        // is durable too (the front ends at the first one that is not).
        let mut m = marks(1000);
        m[450].0 = 5000;
        assert_eq!(durable_front(&m, |i| i <= 1000), 400);
        // Records outside the store (id 0) are durable.
        let zeros = vec![(0, false); 900];
        assert_eq!(durable_front(&zeros, |i| i == 0), 0);
    }

    fn record(i: u64) -> NewRecord {
        NewRecord {
            stable_key: format!("s:1:{i}"),
            vhost: "/".into(),
            queue: "dlq".into(),
            original_queue: None,
            original_exchange: None,
            original_routing_keys: Vec::new(),
            reason: None,
            death_count: 0,
            message_id: None,
            correlation_id: None,
            key: None,
            content_type: None,
            properties: "{}".into(),
            headers: "{}".into(),
            amqp_properties: Bytes::new(),
            payload: Bytes::new(),
            error_message: None,
            error_stacktrace: None,
            error_fingerprint: None,
            created_at: 0,
        }
    }

    #[test]
    fn the_front_moves_with_exactly_its_own_acks_and_direct_messages() {
        let mut b = Batch::with_capacity(16);
        for i in 1..=700u64 {
            b.records.push(record(i));
            let direct = i % 3 == 0;
            b.note(Some(i), direct);
            if direct {
                b.settle.direct.push(Placed {
                    message: Arc::new(Message::new(
                        Arc::from(""),
                        Arc::from("dlq"),
                        RawProperties::empty(),
                        Bytes::new(),
                    )),
                    id: i,
                    stored: Some(i),
                });
            } else {
                b.settle.ids.push(i);
            }
        }
        let mut front = Batch::with_capacity(16);
        b.move_front(450, &mut front);
        // 400 records (whole chunks): ids 1..=400, of them 133 direct (every third).
        assert_eq!(front.records.len(), 400);
        assert_eq!(front.len(), 400);
        assert_eq!(front.settle.direct.len(), 133);
        let mut settled: Vec<u64> = front.settle.ids.clone();
        settled.extend(front.settle.direct.iter().map(|p| p.id));
        settled.sort_unstable();
        assert_eq!(settled, (1..=400).collect::<Vec<_>>());
        assert_eq!(front.store_upto(), 400);
        // The rest: 401..=700, its bound 700, its records and settles matching.
        assert_eq!((b.records.len(), b.len(), b.marks.len()), (300, 300, 300));
        assert_eq!(b.settle.ids.first(), Some(&401));
        assert_eq!(b.settle.direct.first().map(|p| p.id), Some(402));
        assert_eq!(b.store_upto(), 700);
    }
}
