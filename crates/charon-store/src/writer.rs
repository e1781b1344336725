//! The group-commit writer thread (`docs/storage-format.md` §3): take the
//! whole pending batch, write it, sync once, complete every waiter, then
//! delete dead segments and wake the compaction thread (`compactor`). A failed
//! write or sync poisons the store.

use std::io;
use std::mem;
use std::sync::Arc;
use std::time::Instant;

use crate::compaction;
use crate::error::CommitError;
use crate::record;
use crate::segment::SEGMENT_HEADER_LEN;
use crate::spare;
use crate::storage::StorageFile;
use crate::store::{Batch, Chunk, GATHER_MAX_BYTES, Shared};

/// Thread body; returns when the store is closed and nothing is pending.
/// `end` is where the written bytes of `active` end.
pub(crate) fn run(shared: Arc<Shared>, mut active: Arc<dyn StorageFile>, mut end: u64) {
    // Whether the last batch was taken without waiting (appends arrive back to back).
    let mut streaming = false;
    loop {
        let Some((mut batch, waited)) = next_batch(&shared, streaming) else {
            shared.durable_tx.send_modify(|d| d.closed = true);
            return;
        };
        streaming = !waited && !batch.is_empty();
        if !batch.is_empty() {
            let written: u64 = batch.chunks.iter().map(|c| c.bytes.len() as u64).sum();
            match write(&shared, &mut active, &mut end, &mut batch.chunks) {
                Ok(syncs) => {
                    let (sealed, index) = {
                        let mut st = shared.lock();
                        let before = st.durable_seg;
                        st.durable_index = st.durable_index.max(batch.last_index);
                        let index = st.durable_index;
                        if let Some(c) = batch.chunks.last() {
                            st.durable_seg = st.durable_seg.max(c.seg);
                        }
                        st.stats.batches += 1;
                        st.stats.syncs += syncs;
                        st.stats.bytes_written += written;
                        st.recycle(batch.chunks);
                        st.moved.durable(index);
                        (st.durable_seg > before, index)
                    };
                    // Published after the lock is released: waking the connections that wait
                    // for it does not hold up appenders (the index only grows).
                    shared
                        .durable_tx
                        .send_modify(|d| d.index = d.index.max(index));
                    // Compaction looks again when a segment was sealed (and on its idle tick,
                    // for segments dying by settles): not after every batch, which woke its
                    // thread and took the store lock a thousand times a second for nothing.
                    if sealed {
                        shared.compact_wake.notify_one();
                    }
                    for w in batch.waiters {
                        // A dropped receiver only means nobody waits.
                        let _ = w.send(Ok(()));
                    }
                }
                Err(e) => {
                    let msg = e.to_string();
                    tracing::error!(error = %msg, "store write failed; store poisoned");
                    poison(&shared, &msg);
                    for w in batch.waiters {
                        let _ = w.send(Err(CommitError::Poisoned(msg.clone())));
                    }
                }
            }
        }
        if let Err(e) = compaction::reclaim(&shared) {
            let msg = e.to_string();
            tracing::error!(error = %msg, "segment reclamation failed; store poisoned");
            poison(&shared, &msg);
        }
    }
}

/// Wait for work: the batch and whether the writer had to wait for it. `Some(empty)` on an
/// idle tick, `None` when closed. While appends arrive back to back (`streaming`: the last
/// batch was waiting when the writer came back for it), the writer first lets
/// [`StoreConfig::gather`](crate::StoreConfig) pass, so one write and one `fdatasync`
/// carry more records (fewer syncs, writer wake-ups and confirm rounds per message).
/// A batch of lazy records only lingers up to [`StoreConfig::linger`](crate::StoreConfig).
fn next_batch(shared: &Shared, streaming: bool) -> Option<(Batch, bool)> {
    if streaming && !shared.config.gather.is_zero() {
        gather(shared);
    }
    let mut st = shared.lock();
    let waited = st.batch.is_empty();
    if waited {
        if st.closed {
            return None;
        }
        st.writer_idle = true;
        st = shared
            .wake
            .wait_timeout(st, shared.config.idle_tick)
            .map(|(g, _)| g)
            .unwrap_or_else(|e| e.into_inner().0);
        st.writer_idle = false;
    }
    // Only settles and delivery counts, which nobody waits for: let more join them (one
    // commit instead of one per acked run while consumers drain a backlog). A publish, a
    // waiter, a full megabyte or closing takes it at once.
    if !st.batch.is_empty() && !st.batch.ready() && !shared.config.linger.is_zero() {
        let deadline = Instant::now() + shared.config.linger;
        st.writer_lingering = true;
        while !st.closed && st.poisoned.is_none() && !st.batch.ready() {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            st.writer_idle = true;
            st = shared
                .wake
                .wait_timeout(st, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
            st.writer_idle = false;
        }
        st.writer_lingering = false;
    }
    if st.poisoned.is_some() {
        let batch = mem::take(&mut st.batch);
        let msg = st.poisoned.clone().unwrap_or_default();
        let closed = st.closed;
        drop(st);
        for w in batch.waiters {
            let _ = w.send(Err(CommitError::Poisoned(msg.clone())));
        }
        return (!closed).then(|| (Batch::default(), waited));
    }
    if st.batch.is_empty() && st.closed {
        return None;
    }
    Some((mem::take(&mut st.batch), waited))
}

/// Lets a streaming batch grow: one [`StoreConfig::gather`](crate::StoreConfig), then more, a
/// `gather` at a time, while the batch gained a record that is not lazy (a publish, not a
/// consumer's settle) during the last one, up to
/// [`StoreConfig::gather_max`](crate::StoreConfig) in all or [`GATHER_MAX_BYTES`] pending.
/// A publisher streaming within its confirm window keeps the batch growing, so one write and
/// one `fdatasync` carry more of its window; once every publisher waits for its confirms (or
/// stopped) the batch stops growing and is taken after at most one more `gather`.
fn gather(shared: &Shared) {
    let step = shared.config.gather;
    if shared.config.gather_max <= step {
        // Off (the default): one `gather`, without looking at the batch.
        std::thread::sleep(step);
        return;
    }
    let start = Instant::now();
    let mut seen = shared.lock().batch.urgent_records;
    loop {
        std::thread::sleep(step);
        if start.elapsed() + step > shared.config.gather_max {
            return;
        }
        let st = shared.lock();
        let grew = st.batch.urgent_records != seen;
        if !grew || st.closed || st.batch.bytes() >= GATHER_MAX_BYTES {
            return;
        }
        seen = st.batch.urgent_records;
    }
}

/// Write the chunks and sync; returns the number of syncs. `end` tracks where
/// the written bytes of the active segment end.
///
/// A new segment's directory entry is made durable before the first byte
/// goes into it, so segment files appear on disk in id order: after a crash
/// no segment can be missing below one that exists (§3). A segment is sealed
/// at its last record: the preallocated or recycled space after it is cut
/// off before the final sync (§2.5).
fn write(
    shared: &Shared,
    active: &mut Arc<dyn StorageFile>,
    end: &mut u64,
    chunks: &mut [Chunk],
) -> io::Result<u64> {
    let mut syncs = 0;
    for chunk in chunks.iter_mut() {
        // Checksums are computed here, outside the store lock (`record::seal` leaves them).
        let first = if chunk.create {
            SEGMENT_HEADER_LEN as usize
        } else {
            0
        };
        if let Some(recs) = chunk.bytes.get_mut(first..) {
            record::set_crcs(recs);
        }
        if chunk.create {
            // Seal the old segment completely before the new one gets a byte.
            if active.size()? > *end {
                active.truncate(*end)?;
            }
            active.sync()?;
            let header = chunk
                .bytes
                .get(..SEGMENT_HEADER_LEN as usize)
                .unwrap_or(&[]);
            let (file, n) = spare::new_segment(shared, chunk.seg, header)?;
            syncs += 1 + n;
            shared
                .files
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(chunk.seg, file.clone());
            *active = file;
        }
        active.write_all_at(&chunk.bytes, chunk.offset)?;
        *end = chunk.offset + chunk.bytes.len() as u64;
        shared.set_written(chunk.seg, *end);
    }
    if !chunks.is_empty() {
        active.sync()?;
        syncs += 1;
    }
    Ok(syncs)
}

fn poison(shared: &Shared, msg: &str) {
    shared.durable_tx.send_modify(|d| d.poisoned = true);
    let batch = {
        let mut st = shared.lock();
        if st.poisoned.is_none() {
            st.poisoned = Some(msg.to_string());
        }
        mem::take(&mut st.batch)
    };
    for w in batch.waiters {
        let _ = w.send(Err(CommitError::Poisoned(msg.to_string())));
    }
}
