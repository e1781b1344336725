//! The writer thread: group commit. It takes every pending append, encodes the batch into one
//! buffer per log, writes it with one call, syncs once, then completes every ticket of the batch.
//! It also rolls segments and deletes the oldest segment once nothing in it is live.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, TryRecvError};

use tokio::sync::oneshot;

use crate::error::StoreError;
use crate::frame;
use crate::fs::{Fs, LogFile};
use crate::live::Liveness;
use crate::record::Record;
use crate::recovery::segment_name;

/// Most appends in one batch.
const MAX_BATCH: usize = 8192;

/// Completion of one append: the record's index once it is durable.
pub type Ticket = oneshot::Receiver<Result<u64, StoreError>>;

pub(crate) enum Cmd {
    Append(Record, Option<oneshot::Sender<Result<u64, StoreError>>>),
}

pub(crate) struct Writer {
    pub(crate) fs: Arc<dyn Fs>,
    pub(crate) dir: PathBuf,
    pub(crate) segment_size: u64,
    pub(crate) msg_file: Box<dyn LogFile>,
    pub(crate) segment_first: u64,
    pub(crate) segment_len: u64,
    /// Older segments still on disk, oldest first: (first index, path).
    pub(crate) old_segments: Vec<(u64, PathBuf)>,
    pub(crate) next_index: u64,
    pub(crate) def_file: Box<dyn LogFile>,
    pub(crate) def_next_index: u64,
    pub(crate) liveness: Liveness,
    /// Appends done and syncs done (for measurements).
    pub(crate) stats: Arc<crate::store::WriterStats>,
}

fn dup(e: &StoreError) -> StoreError {
    match e {
        StoreError::Io { op, path, source } => StoreError::Io {
            op,
            path: path.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
        StoreError::Closed => StoreError::Closed,
        StoreError::Undecodable { index, reason } => StoreError::Undecodable {
            index: *index,
            reason,
        },
    }
}

impl Writer {
    pub(crate) fn run(mut self, rx: Receiver<Cmd>) {
        let mut batch: Vec<Cmd> = Vec::with_capacity(MAX_BATCH);
        while let Ok(first) = rx.recv() {
            batch.push(first);
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(c) => batch.push(c),
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            let mut waiters = Vec::with_capacity(batch.len());
            let result = self.write_batch(&mut batch, &mut waiters);
            for (tx, index) in waiters {
                let _ = tx.send(match &result {
                    Ok(()) => Ok(index),
                    Err(e) => Err(dup(e)),
                });
            }
            if let Err(e) = result {
                tracing::error!(error = %e, "store write failed; the store stops accepting writes");
                return;
            }
            self.reclaim();
        }
    }

    fn write_batch(
        &mut self,
        batch: &mut Vec<Cmd>,
        waiters: &mut Vec<(oneshot::Sender<Result<u64, StoreError>>, u64)>,
    ) -> Result<(), StoreError> {
        let mut msg_buf = Vec::new();
        let mut def_buf = Vec::new();
        let n = batch.len() as u64;
        for Cmd::Append(record, tx) in batch.drain(..) {
            let index = if record.is_definition() {
                let i = self.def_next_index;
                self.def_next_index += 1;
                frame::encode(&mut def_buf, &record, i, 0);
                i
            } else {
                if self.segment_len + msg_buf.len() as u64 >= self.segment_size
                    && self.segment_len + msg_buf.len() as u64 > 0
                {
                    self.roll(&mut msg_buf)?;
                }
                let i = self.next_index;
                self.next_index += 1;
                self.liveness.track(&record, self.segment_first);
                frame::encode(&mut msg_buf, &record, i, 0);
                i
            };
            if let Some(tx) = tx {
                waiters.push((tx, index));
            }
        }
        if !msg_buf.is_empty() {
            self.write_msgs(&msg_buf)?;
            self.msg_file
                .sync()
                .map_err(|e| StoreError::io("syncing", &self.segment_path(), e))?;
        }
        if !def_buf.is_empty() {
            let p = self.dir.join(crate::store::DEFINITIONS);
            self.def_file
                .append(&def_buf)
                .map_err(|e| StoreError::io("writing", &p, e))?;
            self.def_file
                .sync()
                .map_err(|e| StoreError::io("syncing", &p, e))?;
        }
        self.stats.record(n);
        Ok(())
    }

    fn segment_path(&self) -> PathBuf {
        self.dir.join(segment_name(self.segment_first))
    }

    fn write_msgs(&mut self, buf: &[u8]) -> Result<(), StoreError> {
        self.msg_file
            .append(buf)
            .map_err(|e| StoreError::io("writing", &self.segment_path(), e))?;
        self.segment_len += buf.len() as u64;
        Ok(())
    }

    /// Writes and syncs what is buffered into the current segment, then starts a new one.
    fn roll(&mut self, buf: &mut Vec<u8>) -> Result<(), StoreError> {
        if !buf.is_empty() {
            self.write_msgs(buf)?;
            buf.clear();
        }
        self.msg_file
            .sync()
            .map_err(|e| StoreError::io("syncing", &self.segment_path(), e))?;
        self.old_segments
            .push((self.segment_first, self.segment_path()));
        self.segment_first = self.next_index;
        self.segment_len = 0;
        let p = self.segment_path();
        self.msg_file = self
            .fs
            .open_append(&p)
            .map_err(|e| StoreError::io("creating", &p, e))?;
        self.fs
            .sync_dir(&self.dir)
            .map_err(|e| StoreError::io("syncing", &self.dir, e))?;
        self.liveness.open_segment(self.segment_first);
        Ok(())
    }

    /// Deletes the oldest segments while nothing in them is live (only from the head: a settle
    /// in segment k only refers to messages in segments <= k).
    fn reclaim(&mut self) {
        while let Some((first, path)) = self.old_segments.first().cloned() {
            if self.liveness.live_in(first) > 0 {
                return;
            }
            if let Err(e) = self.fs.remove(&path) {
                tracing::warn!(segment = %path.display(), error = %e, "could not delete a reclaimed segment");
                return;
            }
            self.liveness.forget_segment(first);
            self.old_segments.remove(0);
        }
    }
}
