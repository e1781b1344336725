//! Preallocated and recycled segment files (`docs/storage-format.md` §2.5), so that the
//! `fdatasync` of a group commit writes data into blocks the file already owns instead of
//! also journaling a new file size and new blocks.
//!
//! A new segment is either the *spare* — the file of a deleted segment, kept under the name
//! [`SPARE`] instead of being removed — or a new file reserved to `segment_size` with
//! `fallocate`. Either way its tail past the written records is not records: zeros, or records
//! of the segment it used to be (all with indexes below the new segment's `first_index`).
//! Recovery cuts such a tail off the newest segment without a warning, and the writer cuts it
//! off a segment before sealing it, so sealed segments end at their last record.
//!
//! When there is no spare, the active segment is half full and a backlog keeps segments alive
//! (live items of at least a quarter of a segment), the compaction thread prepares one ahead
//! ([`prepare`]): a file of zeros, written and synced, so the segment that adopts it
//! writes into blocks that are already written extents (no extent conversion, no inode write in
//! the commits' `fdatasync`). One spare at most: the slot is reserved ([`reserve`]) by whoever
//! is making a spare, recycling or zeroing.

use std::io;
use std::mem;
use std::sync::Arc;

use crate::segment::{self, SegId};
use crate::storage::StorageFile;
use crate::store::Shared;

/// File name of the spare (never a segment name).
pub(crate) const SPARE: &str = "spare.wal.free";
/// File name of a spare being zeroed (never a segment or a spare; removed when found at start).
pub(crate) const ZEROING: &str = "spare.wal.zero";
/// Zeros written per `write` while preparing a spare.
const ZERO_CHUNK: usize = 1 << 20;

/// The spare file, and whether someone is making one (recycling a deleted segment's file or
/// zeroing a new one).
#[derive(Debug, Default)]
pub(crate) struct Slot {
    file: Option<Arc<dyn StorageFile>>,
    reserved: bool,
    /// `(batches, bytes_written)` of the store's stats when [`prepare`] last looked.
    seen: (u64, u64),
}

/// Zeroing pays only when commits are small: it costs ~25 ms of CPU per 64 MiB (~0.4 ms a MiB)
/// and saves ~60 µs of kernel CPU per commit into the zeroed blocks (`docs/performance.md`
/// part 10), so it is done only while the commits since the last look averaged at most this
/// many bytes (≥ 8 commits a MiB; b's are ~40 KiB, a 1 KiB backlog's ~800 KiB).
const ZERO_MAX_BYTES_PER_COMMIT: u64 = 128 << 10;

/// Zeroing pays only while a backlog keeps the segments alive: the live items must make at
/// least `1 / ZERO_MIN_LIVE_FRACTION` of a segment. While consumers keep up (a stream such as
/// amqp-load's b: a few hundred KiB live), segments die whole soon after they are written and
/// their files come back as spares for free (recycling), so a zeroed spare costs ~165 ms of CPU
/// a 64 MiB segment (~0.3 µs a 16-byte message in b, `docs/performance.md` part 14) for one
/// rollover that a `fallocate`d file serves about as well.
const ZERO_MIN_LIVE_FRACTION: u64 = 4;

/// Creates segment `seg` with `header` at its start, durable in the directory; returns the
/// file and the syncs it took. Uses the spare when there is one (its header is rewritten and
/// synced *before* it takes the segment's name, so a crash never shows the old segment under
/// the new name), else a new file preallocated to `segment_size`.
pub(crate) fn new_segment(
    shared: &Shared,
    seg: SegId,
    header: &[u8],
) -> io::Result<(Arc<dyn StorageFile>, u64)> {
    let name = segment::file_name(seg);
    let spare = shared
        .spare
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .file
        .take();
    if let Some(file) = spare {
        file.write_all_at(header, 0)?;
        file.sync()?;
        shared.storage.rename(SPARE, &name)?;
        shared.storage.sync_dir()?;
        return Ok((file, 2));
    }
    let file = shared.storage.create(&name)?;
    if shared.config.preallocate {
        file.preallocate(shared.config.segment_size)?;
    }
    shared.storage.sync_dir()?;
    Ok((file, 1))
}

/// Reserves the spare slot for a file about to become the spare (preallocation on, no spare,
/// nobody making one). The caller then renames its file to [`SPARE`] and syncs the directory,
/// then calls [`keep`], or [`release`] when it gave up.
pub(crate) fn reserve(shared: &Shared) -> bool {
    if !shared.config.preallocate {
        return false;
    }
    let mut slot = shared.spare.lock().unwrap_or_else(|e| e.into_inner());
    if slot.file.is_some() || slot.reserved {
        return false;
    }
    slot.reserved = true;
    true
}

/// The reservation is given up (no spare was made).
pub(crate) fn release(shared: &Shared) {
    shared
        .spare
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .reserved = false;
}

/// `file` is the spare now (its rename is durable); ends the reservation.
pub(crate) fn keep(shared: &Shared, file: Arc<dyn StorageFile>) {
    let mut slot = shared.spare.lock().unwrap_or_else(|e| e.into_inner());
    slot.file = Some(file);
    slot.reserved = false;
}

/// Prepares a zeroed spare when there is none, the active segment is at least half full and
/// two segments' worth of disk is free (compaction thread). Returns whether it made one. An error leaves no spare and no
/// `ZEROING` file behind when it can (the store is not poisoned: the writer just creates a
/// fresh file at the next rollover, as without a spare).
pub(crate) fn prepare(shared: &Shared) -> bool {
    let size = shared.config.segment_size;
    if !shared.config.zero_spare {
        return false;
    }
    let (batches, bytes, live) = {
        let st = shared.lock();
        if st.closed || st.poisoned.is_some() || st.active_len < size / 2 {
            return false;
        }
        let live = live_bytes(st.index.segs.values().map(|g| g.live_bytes));
        if live < size / ZERO_MIN_LIVE_FRACTION {
            return false;
        }
        (st.stats.batches, st.stats.bytes_written, live)
    };
    {
        let mut slot = shared.spare.lock().unwrap_or_else(|e| e.into_inner());
        let (b0, w0) = mem::replace(&mut slot.seen, (batches, bytes));
        let commits = batches.saturating_sub(b0);
        if commits == 0 || bytes.saturating_sub(w0) / commits > ZERO_MAX_BYTES_PER_COMMIT {
            return false;
        }
    }
    // A spare takes a whole segment of disk at once. On a nearly full disk that is the room
    // the writer needs for records it has already taken (its append would fail: a poisoned
    // store), so a spare is made only while two segments' worth is free.
    if !room_for_spare(shared, size) {
        return false;
    }
    if !reserve(shared) {
        return false;
    }
    match zero_fill(shared, size) {
        Ok(Some(file)) => {
            keep(shared, file);
            tracing::debug!(bytes = size, live, "zeroed spare segment file prepared");
            true
        }
        Ok(None) => {
            release(shared);
            false
        }
        Err(e) => {
            release(shared);
            tracing::warn!(error = %e, "could not prepare a zeroed spare segment file");
            let _ = shared.storage.remove(ZEROING);
            false
        }
    }
}

/// The live bytes of all segments (a zeroed spare needs a backlog of at least
/// `1 / ZERO_MIN_LIVE_FRACTION` of a segment).
fn live_bytes(segs: impl Iterator<Item = u64>) -> u64 {
    segs.fold(0u64, u64::saturating_add)
}

/// Whether the disk has room for a spare of `size` bytes and another segment's worth after it
/// (an unknown free space counts as no room).
fn room_for_spare(shared: &Shared, size: u64) -> bool {
    shared
        .storage
        .free_bytes()
        .is_ok_and(|free| free >= size.saturating_mul(2))
}

/// Writes `len` zeros into a new [`ZEROING`] file, syncs it, renames it to [`SPARE`] and syncs
/// the directory. `None` when the store closed meanwhile (the file is removed).
fn zero_fill(shared: &Shared, len: u64) -> io::Result<Option<Arc<dyn StorageFile>>> {
    // A leftover of an earlier attempt that failed half-way.
    match shared.storage.remove(ZEROING) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let file = shared.storage.create(ZEROING)?;
    let zeros = vec![0u8; ZERO_CHUNK];
    let mut at = 0u64;
    while at < len {
        if shared.lock().closed {
            shared.storage.remove(ZEROING)?;
            return Ok(None);
        }
        let n = usize::try_from(len - at).map_or(ZERO_CHUNK, |left| left.min(ZERO_CHUNK));
        file.write_all_at(zeros.get(..n).unwrap_or(&zeros), at)?;
        at += n as u64;
    }
    file.sync()?;
    shared.storage.rename(ZEROING, SPARE)?;
    shared.storage.sync_dir()?;
    Ok(Some(file))
}

/// Where a newest segment's written records end: `tail` (the bytes after the last valid
/// record) is preallocated or recycled space when it is all zeros or starts with an intact
/// record from before the segment (index not above `last_index`). Anything else is torn.
pub(crate) fn is_unused_space(tail: &[u8], last_index: u64) -> bool {
    if tail.iter().all(|b| *b == 0) {
        return true;
    }
    matches!(crate::record::parse(tail), Ok(f) if f.index <= last_index)
}
