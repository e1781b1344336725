//! The group-commit writer thread (`docs/storage-format.md` §3): take the
//! whole pending batch, write it, sync once, complete every waiter, then
//! delete dead segments and wake the compaction thread (`compactor`). A failed
//! write or sync poisons the store.

use std::io;
use std::mem;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::compaction;
use crate::error::CommitError;
use crate::record;
use crate::segment::SEGMENT_HEADER_LEN;
use crate::spare;
use crate::storage::StorageFile;
use crate::store::{Batch, Chunk, GATHER_MAX_BYTES, Shared};
use crate::zero_ahead::{self, ZeroState};

/// Thread body; returns when the store is closed and nothing is pending.
/// `end` is where the written bytes of `active` end.
pub(crate) fn run(shared: Arc<Shared>, mut active: Arc<dyn StorageFile>, mut end: u64) {
    // Whether the last batch was taken without waiting (appends arrive back to back).
    let mut streaming = false;
    // How long the last batch's write and sync took (`pace`).
    let mut last_commit = Duration::ZERO;
    loop {
        let Some((mut batch, waited)) = next_batch(&shared, streaming, last_commit) else {
            shared.durable_tx.send_modify(|d| d.closed = true);
            return;
        };
        streaming = !waited && !batch.is_empty();
        if !batch.is_empty() {
            let written: u64 = batch.chunks.iter().map(|c| c.bytes.len() as u64).sum();
            let started = Instant::now();
            let res = write(&shared, &mut active, &mut end, &mut batch.chunks);
            last_commit = started.elapsed();
            match res {
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
                        let zero =
                            ZeroState::committed(&mut st, written, shared.config.segment_size);
                        (st.durable_seg > before || zero, index)
                    };
                    // Published after the lock is released: waking the connections that wait
                    // for it does not hold up appenders (the index only grows).
                    shared
                        .durable_tx
                        .send_modify(|d| d.index = d.index.max(index));
                    // Compaction looks again when a segment was sealed (and on its idle tick,
                    // for segments dying by settles): not after every batch, which woke its
                    // thread and took the store lock a thousand times a second for nothing;
                    // also when the zeros ahead of the writer run low (`zero_ahead`).
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
fn next_batch(shared: &Shared, streaming: bool, last_commit: Duration) -> Option<(Batch, bool)> {
    if streaming && !shared.config.gather.is_zero() {
        gather(shared, last_commit);
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
    let batch = mem::take(&mut st.batch);
    // No zeroing ahead (`zero_ahead`) may reach into the bytes about to be written.
    for c in &batch.chunks {
        st = zero_ahead::claim(shared, st, c.seg, c.offset + c.bytes.len() as u64);
    }
    drop(st);
    Some((batch, waited))
}

/// Lets a streaming batch grow: one [`StoreConfig::gather`](crate::StoreConfig), then more, a
/// `gather` at a time, while the batch gained a record that is not lazy (a publish, not a
/// consumer's settle) during the last one, up to
/// [`StoreConfig::gather_max`](crate::StoreConfig) in all or [`GATHER_MAX_BYTES`] pending.
/// A publisher streaming within its confirm window keeps the batch growing, so one write and
/// one `fdatasync` carry more of its window; once every publisher waits for its confirms (or
/// stopped) the batch stops growing and is taken after at most one more `gather`.
fn gather(shared: &Shared, last_commit: Duration) {
    let step = shared.config.gather;
    if shared.config.gather_max <= step {
        // Off (the default): one `gather`, or the pace of a fast stream (`pace`).
        std::thread::sleep(pace(shared, step, last_commit));
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

/// Records waiting when the writer comes back from a commit from which on the stream counts as
/// fast: at least this many arrived during one write and sync.
const PACE_MIN_RECORDS: u64 = 32;
/// The longest a fast stream's batch is left to grow.
const PACE_MAX: Duration = Duration::from_millis(2);

/// How long a streaming batch is left to grow: one `gather`, or, when at least
/// [`PACE_MIN_RECORDS`] records arrived during the last write and sync (a fast stream, tens of
/// thousands of records a second), as long as that write and sync took (at most [`PACE_MAX`]):
/// the commits then come at most about every two write-and-sync times, so a cheaper commit
/// carries more records instead of only coming sooner. A slower stream (fewer records a
/// commit) keeps the one `gather`, so its confirm latency is unchanged.
fn pace(shared: &Shared, step: Duration, last_commit: Duration) -> Duration {
    if !shared.config.pace {
        return step;
    }
    let waiting = shared.lock().batch.urgent_records;
    pace_for(waiting, step, last_commit)
}

/// [`pace`]'s rule: `waiting` records arrived during the last write and sync, which took
/// `last_commit`.
fn pace_for(waiting: u64, step: Duration, last_commit: Duration) -> Duration {
    if waiting < PACE_MIN_RECORDS {
        return step;
    }
    last_commit.clamp(step, PACE_MAX.max(step))
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
            // No zeroing ahead may touch the old segment's file once it is cut.
            zero_ahead::seal_before(shared, chunk.seg);
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
            if n == 1 && shared.config.preallocate {
                // A fresh `fallocate`d file (not a recycled or zeroed spare): zero ahead in it.
                shared
                    .lock()
                    .zero
                    .start(chunk.seg, file.clone(), SEGMENT_HEADER_LEN);
            }
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

#[cfg(test)]
mod tests {
    use super::{PACE_MAX, PACE_MIN_RECORDS, pace_for};
    use std::time::Duration;

    const STEP: Duration = Duration::from_micros(200);

    #[test]
    fn a_slow_stream_keeps_one_gather() {
        for waiting in [0, 1, PACE_MIN_RECORDS - 1] {
            assert_eq!(pace_for(waiting, STEP, Duration::from_millis(1)), STEP);
        }
    }

    #[test]
    fn a_fast_stream_waits_as_long_as_the_last_commit_took_within_bounds() {
        let ms = Duration::from_millis;
        assert_eq!(pace_for(PACE_MIN_RECORDS, STEP, ms(1)), ms(1));
        assert_eq!(pace_for(500, STEP, Duration::from_micros(50)), STEP);
        assert_eq!(pace_for(500, STEP, ms(40)), PACE_MAX);
        // A `gather` above the cap is never shortened.
        assert_eq!(pace_for(500, ms(5), ms(1)), ms(5));
    }
}
