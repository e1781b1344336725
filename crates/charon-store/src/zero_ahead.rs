//! Zeroing ahead inside the active segment (`docs/storage-format.md` §2.5): a fresh segment
//! file is reserved with `fallocate`, whose blocks are *unwritten extents*; a group commit's
//! `fdatasync` into them converts the extent it wrote and so also writes the inode, one more
//! synchronous I/O a commit (`docs/performance.md` part 26). The compaction thread therefore
//! writes zeros a little ahead of the writer in such a segment and syncs them itself, so the
//! commits write into blocks that are already written extents and their `fdatasync` has no
//! inode to write.
//!
//! Zeros go only where no record is or will be: from the append frontier (`State::active_len`,
//! page-aligned) up, never below what was zeroed or claimed before. The writer, taking a batch,
//! waits for a zeroing in flight that reaches into the bytes it is about to write, and before it
//! seals a segment (truncation) it waits for any zeroing of that segment and ends zeroing there.
//! A recycled or zeroed spare is not zeroed again (its blocks are written already). Zeroing is
//! wanted only while commits are small (b-like streams); with large commits (a 1 KiB backlog)
//! the inode write is shared by many messages and zeros would double the bytes written.

use std::sync::Arc;

use crate::segment::SegId;
use crate::storage::StorageFile;
use crate::store::{Shared, State};

/// Zeros written (and synced) per step.
const CHUNK: u64 = 2 << 20;
/// How far ahead of the append frontier zeroing goes.
const AHEAD: u64 = 4 << 20;
/// The writer asks for more zeros once fewer than this many bytes past the frontier are zeroed.
const LOW_WATER: u64 = 2 << 20;
/// Zeroing is wanted while commits average at most this many bytes (the zeroed spare's rule,
/// `spare.rs`): b's commits are ~50 KiB, a 1 KiB backlog's ~800 KiB.
const MAX_BYTES_PER_COMMIT: u64 = 128 << 10;
/// Page size the zeroed ranges start at (a page the writer still writes into is never zeroed).
const PAGE: u64 = 4096;

/// The active segment's zeroing (under the store lock).
#[derive(Debug, Default)]
pub(crate) struct ZeroState {
    /// The segment being zeroed ahead, with its file; `None` when there is nothing to zero (a
    /// recycled or zeroed spare, preallocation off, or a segment about to be sealed).
    target: Option<(SegId, Arc<dyn StorageFile>)>,
    /// Below this offset of the target nothing is zeroed any more (zeroed, or the writer's).
    upto: u64,
    /// A zeroing in flight: `[start, end)` of the target.
    busy: Option<(u64, u64)>,
    /// Bytes a commit, averaged over the last commits (×16, fixed point).
    avg_commit_x16: u64,
    /// Bytes zeroed since open (stats).
    pub(crate) zeroed: u64,
}

impl ZeroState {
    /// Zero ahead in segment `seg` (a fresh `fallocate`d file) from `from` on.
    pub(crate) fn start(&mut self, seg: SegId, file: Arc<dyn StorageFile>, from: u64) {
        self.target = Some((seg, file));
        self.upto = from;
    }

    /// Whether the compaction thread has zeroing to do now.
    pub(crate) fn wanted(st: &State, segment_size: u64) -> bool {
        !st.closed && st.poisoned.is_none() && next_range(st, segment_size).is_some()
    }

    /// A commit of `bytes` was written: whether the compaction thread should be woken to zero.
    pub(crate) fn committed(st: &mut State, bytes: u64, segment_size: u64) -> bool {
        let z = &mut st.zero;
        z.avg_commit_x16 = z.avg_commit_x16 - z.avg_commit_x16 / 16 + bytes;
        z.busy.is_none()
            && z.target.is_some()
            && z.upto < segment_size.min(st.active_len.saturating_add(LOW_WATER))
            && next_range(st, segment_size).is_some()
    }
}

/// The range to zero next, if any: the target is the active segment, commits are small, and
/// less than [`AHEAD`] past the append frontier is zeroed.
fn next_range(st: &State, segment_size: u64) -> Option<(u64, u64)> {
    let z = &st.zero;
    let (seg, _) = z.target.as_ref()?;
    if *seg != st.active || z.busy.is_some() || z.avg_commit_x16 / 16 > MAX_BYTES_PER_COMMIT {
        return None;
    }
    let start = z.upto.max(st.active_len).next_multiple_of(PAGE);
    let limit = segment_size.min(st.active_len.saturating_add(AHEAD));
    (start < limit).then(|| (start, (start + CHUNK).min(segment_size)))
}

/// One step of zeroing on the compaction thread; whether it zeroed anything. An I/O error ends
/// zeroing in that segment (the commits still work, only without written extents ahead).
pub(crate) fn step(shared: &Shared) -> bool {
    let size = shared.config.segment_size;
    let (file, start, end) = {
        let mut st = shared.lock();
        if st.closed || st.poisoned.is_some() {
            return false;
        }
        let Some((start, end)) = next_range(&st, size) else {
            return false;
        };
        let Some((_, file)) = st.zero.target.clone() else {
            return false;
        };
        st.zero.busy = Some((start, end));
        st.zero.upto = end;
        (file, start, end)
    };
    let len = usize::try_from(end - start).unwrap_or(0);
    let res = file
        .write_all_at(&vec![0u8; len], start)
        .and_then(|()| file.sync());
    let mut st = shared.lock();
    st.zero.busy = None;
    match res {
        Ok(()) => st.zero.zeroed += end - start,
        Err(e) => {
            tracing::warn!(error = %e, "could not zero ahead in the active segment");
            st.zero.target = None;
        }
    }
    drop(st);
    // The writer may wait for this zeroing to end.
    shared.wake.notify_all();
    true
}

/// The writer is about to write the active segment's bytes below `end`: waits while a
/// zeroing in flight reaches into them, and claims them (never zeroed after this).
pub(crate) fn claim<'a>(
    shared: &'a Shared,
    mut st: std::sync::MutexGuard<'a, State>,
    seg: SegId,
    end: u64,
) -> std::sync::MutexGuard<'a, State> {
    loop {
        let z = &st.zero;
        let overlaps =
            matches!((&z.target, z.busy), (Some((s, _)), Some((b, _))) if *s == seg && b < end);
        if !overlaps {
            break;
        }
        st = shared
            .wake
            .wait_timeout(st, std::time::Duration::from_millis(50))
            .map(|(g, _)| g)
            .unwrap_or_else(|e| e.into_inner().0);
    }
    if matches!(&st.zero.target, Some((s, _)) if *s == seg) {
        st.zero.upto = st.zero.upto.max(end);
    }
    st
}

/// The writer is about to seal the active segment (cut its file at its last record) and start
/// segment `new`: waits for a zeroing of an older segment in flight and ends zeroing there.
pub(crate) fn seal_before(shared: &Shared, new: SegId) {
    let mut st = shared.lock();
    while matches!(&st.zero.target, Some((s, _)) if *s < new) && st.zero.busy.is_some() {
        st = shared
            .wake
            .wait_timeout(st, std::time::Duration::from_millis(50))
            .map(|(g, _)| g)
            .unwrap_or_else(|e| e.into_inner().0);
    }
    if matches!(&st.zero.target, Some((s, _)) if *s < new) {
        st.zero.target = None;
    }
}
