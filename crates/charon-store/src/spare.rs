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

use std::io;
use std::sync::Arc;

use crate::segment::{self, SegId};
use crate::storage::StorageFile;
use crate::store::Shared;

/// File name of the spare (never a segment name).
pub(crate) const SPARE: &str = "spare.wal.free";

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

/// Whether a deleted segment's file should become the spare (none yet, and preallocation on);
/// the caller renames it to [`SPARE`] instead of removing it.
pub(crate) fn wanted(shared: &Shared) -> bool {
    shared.config.preallocate
        && shared
            .spare
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
}

/// `file` is the spare now (its rename is durable).
pub(crate) fn keep(shared: &Shared, file: Arc<dyn StorageFile>) {
    *shared.spare.lock().unwrap_or_else(|e| e.into_inner()) = Some(file);
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
