//! [`Store`]: the public handle. Appends frame records into the pending
//! batch under one lock and hand back a [`Commit`] that completes when the
//! writer thread (`writer`) has synced the batch.

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;

use crate::batch_buffers::BatchBuffers;
use tokio::sync::oneshot;

use crate::compactor::{self, Moved};
use crate::durable::{Durability, DurableWatch};
use crate::error::{AppendError, CommitError, OpenError, ReadError};
use crate::index::{Index, Loc};
use crate::record::{self, HEADER_LEN, Kind, MsgBody, Payload};
use crate::recovery;
use crate::segment::{self, SEGMENT_HEADER_LEN, SegId};
use crate::spare;
use crate::storage::{DiskStorage, Storage, StorageFile};
use crate::types::{Appended, BodyRef, Command, Member, MessageRef, Recovered};
use crate::writer;

/// Tuning knobs.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Roll to a new segment past this many bytes (default 64 MiB).
    pub segment_size: u64,
    /// Compact a sealed segment whose live bytes are below this fraction of
    /// its size (default 0.3; 0 disables compaction).
    pub compact_ratio: f64,
    /// Compaction waits until more than this many sealed segments exist (default 2; RabbitMQ's
    /// message store likewise waits for more than two files' worth): one or two sealed segments
    /// are mostly the consumers' lag and die whole a moment later, so copying their live tails
    /// forward is wasted work. 0 compacts as soon as the ratios allow.
    pub compact_min_segments: u32,
    /// How often an idle writer looks for segments to delete or compact.
    pub idle_tick: Duration,
    /// Preallocate new segment files to `segment_size` and recycle the file of a deleted
    /// segment as the next one (default on), so a group commit's `fdatasync` does not also
    /// journal a size change (`docs/storage-format.md` §2.5).
    pub preallocate: bool,
    /// While appends arrive back to back, the writer waits this long before taking the next
    /// batch, so a group commit gathers more (default 200 µs; zero: never waits). Nothing
    /// waits when the writer was idle: a lone publish is written at once.
    pub gather: Duration,
    /// After the first `gather`, the writer keeps gathering, `gather` at a time, while the
    /// pending batch still grows (a publisher streaming within its confirm window), up to
    /// this long in all or 1 MiB pending (`CHARON_STORE_GATHER_MAX_US`; default 0, i.e. at
    /// most `gather`: one gather as before — 2 ms made f's publish phase dearer on this
    /// machine, `docs/performance.md` part 12). A batch that did
    /// not grow during a `gather` is taken at once: its publishers wait for their confirms.
    pub gather_max: Duration,
    /// When there is no spare and the active segment is half full, prepare a zeroed spare file
    /// ahead of the writer on the compaction thread (default on; needs `preallocate`), so the
    /// next segment's commits write into written blocks (`docs/storage-format.md` §2.5).
    /// `CHARON_STORE_ZERO_SPARE=0` turns the default off (benchmarks).
    pub zero_spare: bool,
    /// A batch holding only lazy records (settles, delivery counts, definitions appended
    /// without a waiter, e.g. a queue's delivered mark: nobody waits for them to be durable) is left this long for more to join it before it is written and synced
    /// (default 20 ms, or `CHARON_STORE_LINGER_US`; zero: written at once). Any other record, a
    /// waiter, 1 MiB pending, or closing the store ends the wait at once
    /// (`docs/storage-format.md` §3).
    pub linger: Duration,
}

/// A lingering lazy batch is taken at once when it holds this many bytes.
pub(crate) const LINGER_MAX_BYTES: usize = 1 << 20;

/// A streaming batch stops gathering ([`StoreConfig::gather_max`]) at this many bytes.
pub(crate) const GATHER_MAX_BYTES: usize = 1 << 20;

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            segment_size: 64 << 20,
            compact_ratio: 0.3,
            compact_min_segments: 2,
            idle_tick: Duration::from_millis(200),
            preallocate: true,
            gather: gather_default(),
            gather_max: micros_from_env("CHARON_STORE_GATHER_MAX_US", 0),
            zero_spare: std::env::var("CHARON_STORE_ZERO_SPARE").map_or(true, |v| v != "0"),
            linger: linger_default(),
        }
    }
}

/// [`StoreConfig::linger`]'s default: 20 ms, or `CHARON_STORE_LINGER_US` (benchmarks).
fn linger_default() -> Duration {
    micros_from_env("CHARON_STORE_LINGER_US", 20_000)
}

/// [`StoreConfig::gather`]'s default: 200 µs, or `CHARON_STORE_GATHER_US` (benchmarks).
fn gather_default() -> Duration {
    micros_from_env("CHARON_STORE_GATHER_US", 200)
}

/// Microseconds from the environment variable `name`, or `default` when unset or not a number.
fn micros_from_env(name: &str, default: u64) -> Duration {
    let us = std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    Duration::from_micros(us)
}

/// Counters and sizes, for metrics and benches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Last index known durable.
    pub durable_index: u64,
    /// Batches written.
    pub batches: u64,
    /// `fdatasync`/`fsync` calls (files and directory).
    pub syncs: u64,
    /// Records appended.
    pub records: u64,
    /// Bytes written to segment files.
    pub bytes_written: u64,
    /// Segments on disk.
    pub segments: usize,
    /// Bytes in segment files.
    pub disk_bytes: u64,
    /// Bytes of live items.
    pub live_bytes: u64,
    /// Live messages.
    pub live_messages: usize,
    /// Segments deleted since open.
    pub segments_deleted: u64,
    /// Records copied forward by compaction since open.
    pub records_carried: u64,
    /// Times the compaction thread looked for a segment to compact (tests wait on it).
    pub compaction_checks: u64,
}

pub(crate) type Waiter = oneshot::Sender<Result<(), CommitError>>;

/// Bytes for one file, in write order.
#[derive(Debug)]
pub(crate) struct Chunk {
    pub(crate) seg: SegId,
    pub(crate) offset: u64,
    pub(crate) create: bool,
    pub(crate) bytes: Vec<u8>,
}

/// What the writer takes in one go.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub(crate) chunks: Vec<Chunk>,
    pub(crate) waiters: Vec<Waiter>,
    pub(crate) last_index: u64,
    /// Whether it holds anything but lazy records (settles, delivery counts) or a waiter:
    /// then it is written without lingering.
    pub(crate) urgent: bool,
    /// Records in it that are not lazy (publishes, dead letters, compaction copies…): the
    /// streaming gather goes on only while these grow, not while settles trickle in.
    pub(crate) urgent_records: u64,
}

impl Batch {
    pub(crate) fn is_empty(&self) -> bool {
        self.chunks.is_empty() && self.waiters.is_empty()
    }

    /// Whether the writer should take it now rather than linger for more lazy records.
    pub(crate) fn ready(&self) -> bool {
        self.urgent || self.bytes() >= LINGER_MAX_BYTES
    }

    /// Bytes pending.
    pub(crate) fn bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.bytes.len()).sum()
    }
}

#[derive(Debug)]
pub(crate) struct State {
    pub(crate) index: Index,
    pub(crate) next_index: u64,
    pub(crate) active: SegId,
    pub(crate) active_len: u64,
    pub(crate) batch: Batch,
    pub(crate) durable_index: u64,
    /// Newest segment whose creation is durable (written, synced, directory
    /// synced). Only older segments are deleted or compacted: they are
    /// sealed and every byte of them is on disk.
    pub(crate) durable_seg: SegId,
    pub(crate) poisoned: Option<String>,
    pub(crate) closed: bool,
    pub(crate) writer_idle: bool,
    /// The writer waits with a lazy batch ([`StoreConfig::linger`]): wake it only when the
    /// batch becomes [`Batch::ready`] (or at close).
    pub(crate) writer_lingering: bool,
    pub(crate) stats: StoreStats,
    /// Written batch buffers kept for reuse, and the room a new one starts with.
    pub(crate) pool: BatchBuffers,
    /// Where messages compaction is copying were before (read there until the copy is durable).
    pub(crate) moved: Moved,
}

/// Heap bytes of the index a live message with one member costs: its 28-byte entry, ~1 byte
/// of its id chunk, its 12-byte member slot (measured at 10M: 393 MiB, docs/performance.md).
pub const INDEX_BYTES_PER_MESSAGE: u64 = 41;

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) state: Mutex<State>,
    pub(crate) wake: Condvar,
    /// Wakes the compaction thread (with `state`'s mutex).
    pub(crate) compact_wake: Condvar,
    pub(crate) storage: Arc<dyn Storage>,
    /// Open segment files, for reads; the writer adds and removes entries.
    pub(crate) files: RwLock<HashMap<SegId, Arc<dyn StorageFile>>>,
    pub(crate) config: StoreConfig,
    /// Where the written bytes of the log end: (active segment, end offset). Past it a
    /// preallocated or recycled file holds zeros or stale records, never a body to serve.
    pub(crate) written: Mutex<(SegId, u64)>,
    /// A deleted segment's file, or a zeroed one, kept for the next segment (`spare`).
    pub(crate) spare: Mutex<spare::Slot>,
    /// The durable index (and poisoning), published by the writer once per batch.
    pub(crate) durable_tx: tokio::sync::watch::Sender<Durability>,
    /// Live messages in the index, published after each append (read without the lock by
    /// [`Store::index_bytes`]).
    pub(crate) live: AtomicU64,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // The state is only mutated in short, non-panicking sections.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The writer wrote up to `end` in segment `seg`.
    pub(crate) fn set_written(&self, seg: SegId, end: u64) {
        *self.written.lock().unwrap_or_else(|e| e.into_inner()) = (seg, end);
    }

    /// Whether `len` bytes at `offset` of segment `seg` have been written.
    pub(crate) fn is_written(&self, seg: SegId, offset: u64, len: u64) -> bool {
        let (wseg, wend) = *self.written.lock().unwrap_or_else(|e| e.into_inner());
        seg < wseg || (seg == wseg && offset.saturating_add(len) <= wend)
    }

    pub(crate) fn file(&self, seg: SegId) -> Option<Arc<dyn StorageFile>> {
        let files = self.files.read().unwrap_or_else(|e| e.into_inner());
        files.get(&seg).cloned()
    }
}

impl State {
    /// A batch buffer (`batch_buffers`).
    fn buffer(&mut self) -> Vec<u8> {
        self.pool.take()
    }

    /// Gives written batch buffers back for reuse.
    pub(crate) fn recycle(&mut self, chunks: Vec<Chunk>) {
        self.pool.give_back(chunks.into_iter().map(|c| c.bytes));
    }

    /// Rolls over to a new segment when a record of `rec_len` bytes does not fit the active
    /// one; the new segment's chunk starts with its header.
    fn roll_if_full(&mut self, segment_size: u64, rec_len: u64) -> bool {
        if self.active_len > SEGMENT_HEADER_LEN && self.active_len + rec_len > segment_size {
            self.active += 1;
            self.active_len = SEGMENT_HEADER_LEN;
            self.index.add_segment(self.active, SEGMENT_HEADER_LEN);
            let mut bytes = self.buffer();
            bytes.extend_from_slice(&segment::header(self.next_index));
            self.batch.chunks.push(Chunk {
                seg: self.active,
                offset: 0,
                create: true,
                bytes,
            });
            return true;
        }
        false
    }

    /// The pending chunk of the active segment (started when there is none).
    fn active_chunk(&mut self) -> &mut Chunk {
        let active = self.active;
        if !matches!(self.batch.chunks.last(), Some(c) if c.seg == active) {
            let bytes = self.buffer();
            self.batch.chunks.push(Chunk {
                seg: active,
                offset: self.active_len,
                create: false,
                bytes,
            });
        }
        match self.batch.chunks.last_mut() {
            Some(c) => c,
            None => unreachable!("just pushed"),
        }
    }

    /// Bookkeeping for the record of `rec_len` bytes just put at the end of the active chunk.
    fn account(&mut self, rec_len: u64) -> (u64, Loc) {
        let (index, loc) = self.place(rec_len);
        self.index.grow(loc.seg, rec_len);
        (index, loc)
    }

    /// [`State::account`] but for the segment's size in the index, which the caller grows
    /// (a publish: `Index::append_publish`, one lookup with its live item).
    fn place(&mut self, rec_len: u64) -> (u64, Loc) {
        let index = self.next_index;
        let loc = Loc {
            seg: self.active,
            offset: self.active_len,
            len: rec_len as u32,
        };
        self.next_index += 1;
        self.active_len += rec_len;
        self.batch.last_index = index;
        self.stats.records += 1;
        (index, loc)
    }

    /// Frame one record into the pending batch and apply it to the index.
    pub(crate) fn push(
        &mut self,
        segment_size: u64,
        kind: Kind,
        payload: &[u8],
        decoded: &Payload<'_>,
    ) -> (u64, Loc) {
        let rec_len = (HEADER_LEN + payload.len()) as u64;
        self.roll_if_full(segment_size, rec_len);
        let index = self.next_index;
        let chunk = self.active_chunk();
        record::frame(&mut chunk.bytes, index, 0, kind, payload);
        self.batch.urgent = true;
        self.batch.urgent_records += 1;
        let (index, loc) = self.account(rec_len);
        self.index.apply(index, loc, decoded);
        (index, loc)
    }

    /// Encodes one record with `encode` (as [`record::encode_record`]) straight into the
    /// pending batch, moving it to the next segment's chunk when it does not fit the active
    /// one, and seals and places it (`State::place`: the caller grows the segment's size in
    /// the index). Returns its kind, index, where it lies, where it
    /// starts in the batch's last chunk, and the body's offset in the record.
    fn append_record(
        &mut self,
        segment_size: u64,
        urgent: bool,
        encode: impl FnOnce(&mut Vec<u8>) -> Result<(Kind, usize, Option<usize>), AppendError>,
    ) -> Result<(Kind, u64, Loc, usize, Option<usize>), AppendError> {
        let active_len = self.active_len;
        if urgent {
            self.batch.urgent = true;
            self.batch.urgent_records += 1;
        }
        let chunk = self.active_chunk();
        let mut start = chunk.bytes.len();
        let (kind, rec_len, body_at) = encode(&mut chunk.bytes)?;
        if active_len > SEGMENT_HEADER_LEN && active_len + rec_len as u64 > segment_size {
            // Rare (once a segment): the record goes to the next segment's chunk.
            let rec = chunk.bytes.split_off(start);
            let empty = chunk.bytes.is_empty() && !chunk.create;
            if empty {
                self.batch.chunks.pop();
            }
            self.roll_if_full(segment_size, rec_len as u64);
            let chunk = self.active_chunk();
            start = chunk.bytes.len();
            chunk.bytes.extend_from_slice(&rec);
        }
        let index = self.next_index;
        if let Some(rec) = self
            .batch
            .chunks
            .last_mut()
            .and_then(|c| c.bytes.get_mut(start..))
        {
            record::seal(rec, index, 0);
        }
        let (index, loc) = self.place(rec_len as u64);
        Ok((kind, index, loc, start, body_at))
    }

    /// Encodes a publish of the borrowed `message` at `members` straight into the pending
    /// batch (its bytes copied once), frames it and applies it to the index. Returns its
    /// index, where it lies, and the body's offset in the record.
    pub(crate) fn push_publish(
        &mut self,
        segment_size: u64,
        message: &MessageRef<'_>,
        members: &[Member],
    ) -> Result<(u64, Loc, usize), AppendError> {
        let msg = MsgBody::of_ref(message);
        let (_, index, loc, _, body_at) = self.append_record(segment_size, true, |out| {
            let (len, at) = record::encode_publish_record(out, &msg, members)?;
            Ok((Kind::Publish, len, Some(at)))
        })?;
        let at = body_at.ok_or(AppendError::Invalid("internal encoding error"))?;
        // Applied from the borrowed members (what `Index::apply` does with a decoded
        // `Publish`), so the caller needs no member `Vec`.
        let msg = MsgBody {
            body_offset: at - HEADER_LEN,
            ..msg
        };
        self.index.append_publish(index, loc, &msg, members);
        Ok((index, loc, at))
    }

    /// Encodes `cmd` straight into the pending batch (its body copied once), frames it and
    /// applies it to the index. Returns its index, where it lies, and the body's offset in
    /// the record for message-creating commands.
    pub(crate) fn push_command(
        &mut self,
        segment_size: u64,
        cmd: Command,
    ) -> Result<(u64, Loc, Option<usize>), AppendError> {
        let urgent = !matches!(
            cmd,
            Command::Settle { .. }
                | Command::DeliveryCount { .. }
                | Command::DeliveryCounts { .. }
                | Command::PutDefinition { .. }
                | Command::DeleteDefinition { .. }
        );
        let (kind, index, loc, start, body_at) =
            self.append_record(segment_size, urgent, |out| record::encode_record(out, &cmd))?;
        self.index.grow(loc.seg, u64::from(loc.len));
        let Some(chunk) = self.batch.chunks.last() else {
            unreachable!("the record's chunk");
        };
        let rec = chunk.bytes.get(start + HEADER_LEN..).unwrap_or(&[]);
        // The hot record (a publish) is applied from the command (its members moved, not
        // copied), not parsed back.
        match (cmd, body_at) {
            (Command::Publish { message, members }, Some(at)) => {
                let decoded = Payload::Publish {
                    members,
                    msg: MsgBody {
                        body_offset: at - HEADER_LEN,
                        ..MsgBody::of(&message)
                    },
                };
                self.index.apply(index, loc, &decoded);
            }
            // Settles and delivery counts (every queue batch) are applied from the command too:
            // no parse and no second id list.
            (Command::Settle { queue, ids }, _) => {
                self.index
                    .apply(index, loc, &Payload::Settle { queue, ids });
            }
            (Command::DeliveryCounts { queue, counts }, _) => {
                self.index
                    .apply(index, loc, &Payload::DeliveryCounts { queue, counts });
            }
            _ => {
                let decoded = Payload::decode(kind as u8, rec)
                    .map_err(|_| AppendError::Invalid("internal encoding error"))?;
                self.index.apply(index, loc, &decoded);
            }
        }
        Ok((index, loc, body_at))
    }
}

/// Wakes the writer if it waits for what was just appended: when idle, or when lingering
/// over a lazy batch that is now [`Batch::ready`].
pub(crate) fn wake_writer(shared: &Shared, st: &mut State) {
    if st.writer_idle && (!st.writer_lingering || st.batch.ready()) {
        st.writer_idle = false;
        shared.wake.notify_one();
    }
}

/// Completes when the appended record (and everything before it) is
/// durable. Await it, or call [`Commit::wait`] from a plain thread.
#[derive(Debug)]
#[must_use = "a commit that is not awaited confirms nothing"]
pub struct Commit {
    rx: oneshot::Receiver<Result<(), CommitError>>,
}

impl Commit {
    /// Block the current (non-async) thread until durable.
    pub fn wait(self) -> Result<(), CommitError> {
        self.rx.blocking_recv().unwrap_or(Err(CommitError::Closed))
    }
}

impl Future for Commit {
    type Output = Result<(), CommitError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(CommitError::Closed)))
    }
}

/// The durable store. Share it as `Arc<Store>`; dropping it flushes what is
/// pending and stops the writer thread.
#[derive(Debug)]
pub struct Store {
    pub(crate) shared: Arc<Shared>,
    writer: Option<JoinHandle<()>>,
    compactor: Option<JoinHandle<()>>,
}

impl Store {
    /// Open (recovering) the store in directory `dir` on the real disk.
    pub fn open_dir(
        dir: impl AsRef<Path>,
        config: StoreConfig,
    ) -> Result<(Store, Recovered), OpenError> {
        let storage = DiskStorage::new(dir.as_ref()).map_err(|source| OpenError::Io {
            op: "create dir",
            name: dir.as_ref().display().to_string(),
            source,
        })?;
        Store::open(Arc::new(storage), config)
    }

    /// Open (recovering) the store on `storage`. A `segment_size` above 1 GiB is taken as
    /// 1 GiB (the index keeps offsets as `u32`, `docs/storage-format.md` §7).
    pub fn open(
        storage: Arc<dyn Storage>,
        mut config: StoreConfig,
    ) -> Result<(Store, Recovered), OpenError> {
        config.segment_size = config.segment_size.min(segment::MAX_SEGMENT_SIZE);
        let out = recovery::recover(&*storage)?;
        let mut index = out.index;
        let active = out.last_segment + 1;
        let last = out.recovered.last_index;
        let name = segment::file_name(active);
        let io = |op: &'static str| {
            let name = name.clone();
            move |source| OpenError::Io { op, name, source }
        };
        let file = match out.spare {
            // The spare's header is rewritten and synced before it takes the name (`spare`).
            Some(spare) => {
                spare
                    .write_all_at(&segment::header(last + 1), 0)
                    .map_err(io("write"))?;
                spare.sync().map_err(io("sync"))?;
                storage.rename(spare::SPARE, &name).map_err(io("rename"))?;
                spare
            }
            None => {
                let file = storage.create(&name).map_err(io("create"))?;
                if config.preallocate {
                    file.preallocate(config.segment_size)
                        .map_err(io("preallocate"))?;
                }
                file.write_all_at(&segment::header(last + 1), 0)
                    .map_err(io("write"))?;
                file
            }
        };
        file.sync().map_err(io("sync"))?;
        storage.sync_dir().map_err(io("sync dir"))?;
        index.add_segment(active, SEGMENT_HEADER_LEN);
        let mut files: HashMap<SegId, Arc<dyn StorageFile>> = out.files.into_iter().collect();
        files.insert(active, file.clone());
        let live = AtomicU64::new(index.messages.len() as u64);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                index,
                next_index: last + 1,
                active,
                active_len: SEGMENT_HEADER_LEN,
                batch: Batch::default(),
                durable_index: last,
                durable_seg: active,
                poisoned: None,
                closed: false,
                writer_idle: false,
                writer_lingering: false,
                stats: StoreStats {
                    durable_index: last,
                    ..StoreStats::default()
                },
                pool: BatchBuffers::default(),
                moved: Moved::default(),
            }),
            wake: Condvar::new(),
            compact_wake: Condvar::new(),
            storage,
            files: RwLock::new(files),
            config,
            written: Mutex::new((active, SEGMENT_HEADER_LEN)),
            spare: Mutex::new(spare::Slot::default()),
            durable_tx: tokio::sync::watch::Sender::new(Durability {
                index: last,
                ..Durability::default()
            }),
            live,
        });
        let thread_shared = shared.clone();
        let writer = std::thread::Builder::new()
            .name("charon-store-writer".into())
            .spawn(move || writer::run(thread_shared, file, SEGMENT_HEADER_LEN))
            .map_err(OpenError::Spawn)?;
        let mut store = Store {
            shared: shared.clone(),
            writer: Some(writer),
            compactor: None,
        };
        let thread_shared = shared;
        // On failure `store` is dropped, which stops the writer.
        store.compactor = Some(
            std::thread::Builder::new()
                .name("charon-store-compactor".into())
                .spawn(move || compactor::run(thread_shared))
                .map_err(OpenError::Spawn)?,
        );
        Ok((store, out.recovered))
    }

    /// Append `cmd`; the [`Commit`] completes once it is durable.
    pub fn append(&self, cmd: Command) -> Result<(Appended, Commit), AppendError> {
        let (tx, rx) = oneshot::channel();
        let appended = self.push(cmd, Some(tx))?;
        Ok((appended, Commit { rx }))
    }

    /// Append `cmd` without waiting: it goes into the next batch, and is
    /// durable once any later commit completes.
    pub fn append_nowait(&self, cmd: Command) -> Result<Appended, AppendError> {
        self.push(cmd, None)
    }

    /// [`Store::append_nowait`] of a [`Command::Publish`] with the message borrowed: its bytes
    /// are copied once into the pending batch, so the caller needs no owned `Bytes` of them
    /// (no clone, and no promotion allocation of a not-yet-shared body, per message). The
    /// members are borrowed too: a publish to one queue passes `&[(queue, id)]`, no `Vec`.
    pub fn publish_nowait(
        &self,
        message: MessageRef<'_>,
        members: &[Member],
    ) -> Result<Appended, AppendError> {
        let len =
            u32::try_from(message.body.len()).map_err(|_| AppendError::Invalid("body too long"))?;
        self.push_with(len, true, None, |st, segment_size| {
            let (index, loc, at) = st.push_publish(segment_size, &message, members)?;
            Ok((index, loc, Some(at)))
        })
    }

    /// A watch on the durable index: wait for the index of an [`Store::append_nowait`] with
    /// it instead of a [`Commit`] per record.
    pub fn durable_watch(&self) -> DurableWatch {
        DurableWatch(self.shared.durable_tx.subscribe())
    }

    /// A barrier: completes once everything appended before it is durable.
    pub fn sync(&self) -> Result<Commit, AppendError> {
        let (tx, rx) = oneshot::channel();
        let mut st = self.shared.lock();
        check_open(&st)?;
        st.batch.waiters.push(tx);
        st.batch.urgent = true;
        self.wake(&mut st);
        Ok(Commit { rx })
    }

    fn push(&self, cmd: Command, waiter: Option<Waiter>) -> Result<Appended, AppendError> {
        let body_len = match &cmd {
            Command::Publish { message, .. } | Command::DeadLetter { message, .. } => {
                u32::try_from(message.body.len())
                    .map_err(|_| AppendError::Invalid("body too long"))?
            }
            _ => 0,
        };
        // A dead-letter with no target stores no message.
        let stored = !matches!(&cmd, Command::DeadLetter { targets, .. } if targets.is_empty());
        self.push_with(body_len, stored, waiter, |st, segment_size| {
            st.push_command(segment_size, cmd)
        })
    }

    /// What every append does around `encode` (which puts one record into the pending batch
    /// and returns its index, where it lies and its body's offset): checks the store is open
    /// and has segment ids left, counts the live messages, adds `waiter`, wakes the writer,
    /// and says where the body of `body_len` bytes lies when the record `stored` a message.
    fn push_with(
        &self,
        body_len: u32,
        stored: bool,
        waiter: Option<Waiter>,
        encode: impl FnOnce(&mut State, u64) -> Result<(u64, Loc, Option<usize>), AppendError>,
    ) -> Result<Appended, AppendError> {
        let mut st = self.shared.lock();
        check_open(&st)?;
        if st.active >= segment::MAX_SEG {
            return Err(AppendError::Invalid("segment ids exhausted"));
        }
        let (index, loc, body_at) = encode(&mut st, self.shared.config.segment_size)?;
        self.shared
            .live
            .store(st.index.messages.len() as u64, Ordering::Relaxed);
        if let Some(w) = waiter {
            st.batch.waiters.push(w);
            st.batch.urgent = true;
        }
        self.wake(&mut st);
        drop(st);
        let body = body_at.filter(|_| stored).map(|at| BodyRef {
            msg: index,
            segment: loc.seg,
            offset: loc.offset + at as u64,
            len: body_len,
        });
        Ok(Appended { index, body })
    }

    fn wake(&self, st: &mut State) {
        wake_writer(&self.shared, st);
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Read a body back (one positioned read). Valid once the record that
    /// stored it is committed; follows the message if compaction moved it.
    pub fn read_body(&self, body: &BodyRef) -> Result<Bytes, ReadError> {
        let mut at = *body;
        let mut tries = 0;
        loop {
            match self.read_body_once(&at) {
                // Compaction may have just copied the message forward into a batch that is not
                // written yet: wait a little (rare, and short: one group commit), then read it
                // where it is now. Not a `Commit::wait`: callers may be async tasks.
                Err(ReadError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::UnexpectedEof && tries < 5000 =>
                {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(1));
                    at = self
                        .current_body(body.msg)
                        .ok_or(ReadError::NotFound(body.msg))?;
                }
                // Copied forward into a segment the writer has not created yet (the index
                // knows the new place at once, the file comes with the next write): the same
                // wait. Without it a read racing compaction lost the body (seen under load:
                // thousands of paged-out messages delivered empty, docs/performance.md).
                Err(ReadError::NotFound(_))
                    if tries < 5000 && self.current_body(body.msg).is_some() =>
                {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(1));
                    at = self
                        .current_body(body.msg)
                        .ok_or(ReadError::NotFound(body.msg))?;
                }
                other => return other,
            }
        }
    }

    fn read_body_once(&self, body: &BodyRef) -> Result<Bytes, ReadError> {
        // Not written yet (a copy compaction just made): past the written end a preallocated
        // or recycled file holds zeros or stale records. Retried by `read_body`.
        let unwritten = |at: &BodyRef| ReadError::Io {
            segment: at.segment,
            source: std::io::ErrorKind::UnexpectedEof.into(),
        };
        // Its segment deleted (compacted away): read it where it is now.
        let at = match self.shared.file(body.segment) {
            Some(_) => *body,
            None => self
                .current_body(body.msg)
                .ok_or(ReadError::NotFound(body.msg))?,
        };
        // Checked before looking the file up: a message compaction just copied into a segment
        // the writer has not created yet has no file either, and is not lost (it was reported
        // "not found" here, a block of live messages delivered without their bodies).
        if !self
            .shared
            .is_written(at.segment, at.offset, u64::from(at.len))
        {
            // A copy compaction made, not written yet: the body is still where it was.
            if let Some(b) = self.read_moved(&at) {
                return Ok(b);
            }
            return Err(unwritten(&at));
        }
        // Written means created (the writer registers a segment's file before writing to it);
        // a file gone since is a segment deleted meanwhile: retried at the current place.
        let file = self.shared.file(at.segment).ok_or_else(|| unwritten(&at))?;
        let mut buf = vec![0u8; at.len as usize];
        file.read_exact_at(&mut buf, at.offset)
            .map_err(|source| ReadError::Io {
                segment: at.segment,
                source,
            })?;
        // A segment deleted meanwhile may have become the spare and been rewritten: only a
        // read that finished while the segment still existed is its bytes. Retried by
        // `read_body` at the message's current place.
        if self.shared.file(at.segment).is_none() {
            return Err(unwritten(&at));
        }
        Ok(Bytes::from(buf))
    }

    /// The body of a message whose copy (at `at`) is not written yet, read where it was
    /// before: that record stays on disk until the copy is durable (`compactor::Moved`).
    fn read_moved(&self, at: &BodyRef) -> Option<Bytes> {
        let old = self
            .shared
            .lock()
            .moved
            .get(at.msg)
            .filter(|o| (o.segment, o.offset) != (at.segment, at.offset) && o.len == at.len)?;
        if !self
            .shared
            .is_written(old.segment, old.offset, u64::from(old.len))
        {
            return None;
        }
        let file = self.shared.file(old.segment)?;
        let mut buf = vec![0u8; old.len as usize];
        file.read_exact_at(&mut buf, old.offset).ok()?;
        // Still there after the read: the bytes are the message's (see `read_body_once`).
        self.shared.file(old.segment)?;
        Some(Bytes::from(buf))
    }

    /// Where message `msg`'s body is now, if it is live.
    pub fn current_body(&self, msg: u64) -> Option<BodyRef> {
        self.shared
            .lock()
            .index
            .messages
            .get(&msg)
            .map(|e| e.body(msg))
    }

    /// Where the body of the message at `member` is now (and the message's id), if it is live.
    pub fn member_body(&self, member: crate::types::Member) -> Option<BodyRef> {
        let st = self.shared.lock();
        let msg = st.index.message_of(member)?;
        st.index.messages.get(&msg).map(|e| e.body(msg))
    }

    /// Last log index known durable: a body stored by a record at or below it can be read back.
    pub fn durable_index(&self) -> u64 {
        self.shared.lock().durable_index
    }

    /// Free bytes on the data directory's file system (for a disk alarm).
    pub fn free_bytes(&self) -> std::io::Result<u64> {
        self.shared.storage.free_bytes()
    }

    /// Counters and sizes.
    pub fn stats(&self) -> StoreStats {
        let st = self.shared.lock();
        let mut s = st.stats.clone();
        s.durable_index = st.durable_index;
        s.segments = st.index.segs.len();
        s.disk_bytes = st.index.segs.values().map(|g| g.size).sum();
        s.live_bytes = st.index.segs.values().map(|g| g.live_bytes).sum();
        s.live_messages = st.index.messages.len();
        s
    }

    /// Approximate heap bytes of the in-memory index of live messages
    /// ([`INDEX_BYTES_PER_MESSAGE`] a message; read without the store's lock). The broker
    /// counts it against its memory budget for held bodies (docs/performance.md).
    pub fn index_bytes(&self) -> u64 {
        self.shared
            .live
            .load(Ordering::Relaxed)
            .saturating_mul(INDEX_BYTES_PER_MESSAGE)
    }

    /// Why the store refuses writes, if it does.
    pub fn poisoned(&self) -> Option<String> {
        self.shared.lock().poisoned.clone()
    }
}

fn check_open(st: &State) -> Result<(), AppendError> {
    if let Some(p) = &st.poisoned {
        return Err(AppendError::Poisoned(p.clone()));
    }
    if st.closed {
        return Err(AppendError::Closed);
    }
    Ok(())
}

impl Drop for Store {
    fn drop(&mut self) {
        {
            let mut st = self.shared.lock();
            st.closed = true;
        }
        self.shared.wake.notify_all();
        self.shared.compact_wake.notify_all();
        // The compactor first: it may still append copies (the writer flushes them).
        if let Some(c) = self.compactor.take()
            && c.join().is_err()
        {
            tracing::error!("store compaction thread panicked");
        }
        if let Some(w) = self.writer.take()
            && w.join().is_err()
        {
            tracing::error!("store writer thread panicked");
        }
    }
}
