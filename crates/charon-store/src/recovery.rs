//! Replaying the logs at open: definitions, and per queue the live messages in queue order.
//! A torn or corrupt tail is truncated (and later segments removed), logged, never served.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use crate::error::StoreError;
use crate::frame::{self, Stop};
use crate::fs::Fs;
use crate::live::Liveness;
use crate::record::{Record, StoredMessage};

/// One live message of a queue after recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredMessage {
    /// Queue-local id.
    pub id: u64,
    /// The stored message (its `queues` list is as written, not filtered).
    pub message: Arc<StoredMessage>,
    /// Delivered at least once before (or possibly: after a crash every unacked delivery shows
    /// as delivered, since `Delivered` records are lazy).
    pub delivered: bool,
}

/// Everything recovered at open.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Live definitions by (kind, key).
    pub definitions: BTreeMap<(Arc<str>, Arc<str>), Bytes>,
    /// Live messages per queue, by queue-local id.
    pub queues: HashMap<Arc<str>, BTreeMap<u64, RecoveredMessage>>,
    /// The highest message id seen (new ids must be greater).
    pub max_message_id: u64,
    /// Bytes dropped from a torn or corrupt tail, if any.
    pub truncated_bytes: u64,
}

/// Replay state of the message log.
pub(crate) struct MessageReplay {
    pub(crate) next_index: u64,
    pub(crate) segments: Vec<(u64, PathBuf, u64)>,
    pub(crate) liveness: Liveness,
}

pub(crate) fn segment_name(first_index: u64) -> String {
    format!("{first_index:020}.seg")
}

fn first_index_of(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    name.strip_suffix(".seg")?.parse().ok()
}

fn add(rec: &mut Recovered, m: StoredMessage) {
    rec.max_message_id = rec.max_message_id.max(m.message_id);
    let m = Arc::new(m);
    for (q, id) in &m.queues {
        rec.queues.entry(q.clone()).or_default().insert(
            *id,
            RecoveredMessage {
                id: *id,
                message: m.clone(),
                delivered: false,
            },
        );
    }
}

fn remove(rec: &mut Recovered, q: &Arc<str>, id: u64) {
    if let Some(msgs) = rec.queues.get_mut(q) {
        msgs.remove(&id);
    }
}

/// Applies one record to the recovered state.
pub(crate) fn apply(rec: &mut Recovered, r: Record) {
    match r {
        Record::Publish(m) => add(rec, m),
        Record::Settle { queue, ids } => {
            for id in ids {
                remove(rec, &queue, id);
            }
        }
        Record::DeadLetterMove {
            from_queue,
            from_id,
            message,
        } => {
            remove(rec, &from_queue, from_id);
            add(rec, message);
        }
        Record::Delivered { queue, ids } => {
            if let Some(msgs) = rec.queues.get_mut(&queue) {
                for id in ids {
                    if let Some(m) = msgs.get_mut(&id) {
                        m.delivered = true;
                    }
                }
            }
        }
        Record::PutDefinition { kind, key, value } => {
            rec.definitions.insert((kind, key), value);
        }
        Record::DeleteDefinition { kind, key } => {
            rec.definitions.remove(&(kind, key));
        }
    }
}

/// Replays the message segments in `dir`.
pub(crate) fn replay_messages(
    fs: &dyn Fs,
    dir: &Path,
    rec: &mut Recovered,
) -> Result<MessageReplay, StoreError> {
    let mut segs: Vec<(u64, PathBuf)> = fs
        .list(dir)
        .map_err(|e| StoreError::io("listing", dir, e))?
        .into_iter()
        .filter_map(|p| first_index_of(&p).map(|i| (i, p)))
        .collect();
    segs.sort();
    let mut out = MessageReplay {
        next_index: 1,
        segments: Vec::new(),
        liveness: Liveness::default(),
    };
    let mut expected: Option<u64> = None;
    let mut broken = false;
    for (first, path) in segs {
        if broken {
            tracing::warn!(segment = %path.display(), "removing a segment after a corrupt record");
            fs.remove(&path)
                .map_err(|e| StoreError::io("removing", &path, e))?;
            continue;
        }
        let data = Bytes::from(
            fs.read(&path)
                .map_err(|e| StoreError::io("reading", &path, e))?,
        );
        let (frames, stop) = frame::read_all(&data, expected.or(Some(first)));
        let mut size = data.len() as u64;
        if let Stop::Bad { offset, reason } = stop {
            tracing::warn!(segment = %path.display(), offset, reason, "torn or corrupt log tail: truncating");
            rec.truncated_bytes += data.len() as u64 - offset as u64;
            fs.truncate(&path, offset as u64)
                .map_err(|e| StoreError::io("truncating", &path, e))?;
            size = offset as u64;
            broken = true;
        }
        out.liveness.open_segment(first);
        for f in frames {
            expected = Some(f.index + 1);
            out.next_index = f.index + 1;
            out.liveness.track(&f.record, first);
            apply(rec, f.record);
        }
        if size == 0 && broken {
            fs.remove(&path)
                .map_err(|e| StoreError::io("removing", &path, e))?;
            out.liveness.forget_segment(first);
            continue;
        }
        out.segments.push((first, path, size));
    }
    Ok(out)
}

/// Replays the definitions log; returns the next index.
pub(crate) fn replay_definitions(
    fs: &dyn Fs,
    path: &Path,
    rec: &mut Recovered,
) -> Result<u64, StoreError> {
    let data = match fs.read(path) {
        Ok(d) => Bytes::from(d),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(1),
        Err(e) => return Err(StoreError::io("reading", path, e)),
    };
    let (frames, stop) = frame::read_all(&data, None);
    if let Stop::Bad { offset, reason } = stop {
        tracing::warn!(file = %path.display(), offset, reason, "torn or corrupt definitions tail: dropped");
        rec.truncated_bytes += data.len() as u64 - offset as u64;
    }
    let mut next = 1;
    for f in frames {
        next = f.index + 1;
        apply(rec, f.record);
    }
    Ok(next)
}
