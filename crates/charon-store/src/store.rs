//! [`Store`]: open (recover, snapshot the definitions, start the writer thread), append with or
//! without waiting for durability, close.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;

use tokio::sync::oneshot;

use crate::error::StoreError;
use crate::frame;
use crate::fs::Fs;
use crate::record::Record;
use crate::recovery::{self, Recovered, segment_name};
use crate::writer::{Cmd, Ticket, Writer};

/// The definitions log's file name.
pub(crate) const DEFINITIONS: &str = "definitions.log";
const MESSAGES: &str = "messages";

/// Store settings.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Data directory.
    pub dir: PathBuf,
    /// Segment size in bytes before a new one starts.
    pub segment_size: u64,
}

impl StoreConfig {
    /// Defaults (64 MiB segments) under `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            segment_size: 64 << 20,
        }
    }
}

/// Counters of the writer: appends and syncs (batches).
#[derive(Debug, Default)]
pub struct WriterStats {
    appends: AtomicU64,
    syncs: AtomicU64,
}

impl WriterStats {
    pub(crate) fn record(&self, n: u64) {
        self.appends.fetch_add(n, Ordering::Relaxed);
        self.syncs.fetch_add(1, Ordering::Relaxed);
    }
    /// Records appended so far.
    pub fn appends(&self) -> u64 {
        self.appends.load(Ordering::Relaxed)
    }
    /// Group-commit batches (one sync each) so far.
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }
}

/// The durable log of one broker.
pub struct Store {
    tx: Option<mpsc::Sender<Cmd>>,
    thread: Option<JoinHandle<()>>,
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    stats: Arc<WriterStats>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("dir", &self.dir).finish()
    }
}

fn rewrite_definitions(fs: &dyn Fs, dir: &Path, rec: &Recovered) -> Result<u64, StoreError> {
    let path = dir.join(DEFINITIONS);
    let tmp = dir.join(format!("{DEFINITIONS}.tmp"));
    let _ = fs.remove(&tmp);
    let mut buf = Vec::new();
    let mut index = 1;
    for ((kind, key), value) in &rec.definitions {
        let r = Record::PutDefinition {
            kind: kind.clone(),
            key: key.clone(),
            value: value.clone(),
        };
        frame::encode(&mut buf, &r, index, 0);
        index += 1;
    }
    let mut f = fs
        .open_append(&tmp)
        .map_err(|e| StoreError::io("creating", &tmp, e))?;
    f.append(&buf)
        .map_err(|e| StoreError::io("writing", &tmp, e))?;
    f.sync().map_err(|e| StoreError::io("syncing", &tmp, e))?;
    drop(f);
    fs.rename(&tmp, &path)
        .map_err(|e| StoreError::io("renaming", &tmp, e))?;
    fs.sync_dir(dir)
        .map_err(|e| StoreError::io("syncing", dir, e))?;
    Ok(index)
}

impl Store {
    /// Opens the store in `config.dir` on `fs`, recovering what is there.
    pub fn open(fs: Arc<dyn Fs>, config: &StoreConfig) -> Result<(Store, Recovered), StoreError> {
        let dir = config.dir.clone();
        let msg_dir = dir.join(MESSAGES);
        fs.create_dir_all(&msg_dir)
            .map_err(|e| StoreError::io("creating", &msg_dir, e))?;
        let mut rec = Recovered::default();
        recovery::replay_definitions(fs.as_ref(), &dir.join(DEFINITIONS), &mut rec)?;
        let replay = recovery::replay_messages(fs.as_ref(), &msg_dir, &mut rec)?;
        let def_next_index = rewrite_definitions(fs.as_ref(), &dir, &rec)?;
        let def_file = fs
            .open_append(&dir.join(DEFINITIONS))
            .map_err(|e| StoreError::io("opening", &dir, e))?;
        // Continue the last segment, or start one.
        let mut segments = replay.segments;
        let (segment_first, segment_len) = match segments.pop() {
            Some((first, _, len)) => (first, len),
            None => (replay.next_index, 0),
        };
        let seg_path = msg_dir.join(segment_name(segment_first));
        let msg_file = fs
            .open_append(&seg_path)
            .map_err(|e| StoreError::io("opening", &seg_path, e))?;
        fs.sync_dir(&msg_dir)
            .map_err(|e| StoreError::io("syncing", &msg_dir, e))?;
        let mut liveness = replay.liveness;
        liveness.open_segment(segment_first);
        let stats = Arc::new(WriterStats::default());
        let writer = Writer {
            fs: fs.clone(),
            dir: msg_dir,
            segment_size: config.segment_size.max(1),
            msg_file,
            segment_first,
            segment_len,
            old_segments: segments.into_iter().map(|(f, p, _)| (f, p)).collect(),
            next_index: replay.next_index,
            def_file,
            def_next_index,
            liveness,
            stats: stats.clone(),
        };
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("charon-store".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| StoreError::io("spawning the writer for", &dir, e))?;
        Ok((
            Store {
                tx: Some(tx),
                thread: Some(thread),
                fs,
                dir,
                stats,
            },
            rec,
        ))
    }

    /// Appends a record; the ticket completes with its index once it is on disk (after the
    /// group commit that includes it).
    pub fn append(&self, record: Record) -> Ticket {
        let (tx, rx) = oneshot::channel();
        match &self.tx {
            Some(s) => {
                if let Err(mpsc::SendError(Cmd::Append(_, Some(tx)))) =
                    s.send(Cmd::Append(record, Some(tx)))
                {
                    let _ = tx.send(Err(StoreError::Closed));
                }
            }
            None => {
                let _ = tx.send(Err(StoreError::Closed));
            }
        }
        rx
    }

    /// Appends a record without waiting; it goes into the next group commit.
    pub fn append_nowait(&self, record: Record) -> Result<(), StoreError> {
        self.tx
            .as_ref()
            .ok_or(StoreError::Closed)?
            .send(Cmd::Append(record, None))
            .map_err(|_| StoreError::Closed)
    }

    /// Appends and waits (blocking the calling thread) until durable.
    pub fn append_sync(&self, record: Record) -> Result<u64, StoreError> {
        self.append(record)
            .blocking_recv()
            .map_err(|_| StoreError::Closed)?
    }

    /// Writer counters (appends, group commits).
    pub fn stats(&self) -> &WriterStats {
        &self.stats
    }

    /// Free bytes on the data directory's file system (for the disk alarm).
    pub fn free_bytes(&self) -> Result<u64, StoreError> {
        self.fs
            .free_bytes(&self.dir)
            .map_err(|e| StoreError::io("statvfs", &self.dir, e))
    }

    /// Message segment files currently on disk (for tests and metrics).
    pub fn segment_count(&self) -> usize {
        self.fs
            .list(&self.dir.join(MESSAGES))
            .map(|v| v.len())
            .unwrap_or(0)
    }

    /// Flushes pending appends and stops the writer.
    pub fn close(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.shutdown();
    }
}
