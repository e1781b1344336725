//! Space reclamation (`docs/storage-format.md` §5): deleting segments the index says are safe
//! to delete (the writer thread, between batches: [`reclaim`]), and copying the live items of
//! one mostly-dead segment forward so it can be deleted after the copies are durable (the
//! compaction thread, `compactor`: [`compact_one`]).
//!
//! Compaction reads and parses the victim segment outside the store lock;
//! the lock is taken only to look up which of its records are still live
//! and, in slices, to append the copies, so appends are never blocked for
//! long and the cost is proportional to the segment, not to the number of
//! live messages.

use std::io;

use bytes::Bytes;

use crate::compact_read;
use crate::compactor;
use crate::index::Loc;
use crate::record::{self, Kind, Payload, encode_carry, encode_command};
use crate::segment::{self, SegId};
use crate::spare;
use crate::store::{Shared, State};
use crate::types::{Command, Member, MessageId};

/// Compaction runs only while at least this fraction of the sealed segments' bytes is dead
/// (their own dead records and the dead segments waiting for deletion).
const GARBAGE_FRACTION: f64 = 0.5;

/// Copies appended per lock acquisition.
const SLICE: usize = 256;

/// Delete what can be deleted. An error means a directory sync failed: the caller poisons
/// the store.
pub(crate) fn reclaim(shared: &Shared) -> io::Result<()> {
    loop {
        let victims = {
            let st = shared.lock();
            if st.poisoned.is_some() {
                return Ok(());
            }
            st.index.deletable(st.durable_index, st.durable_seg)
        };
        if victims.is_empty() {
            return Ok(());
        }
        let mut removed = Vec::new();
        let mut recycled = None;
        for seg in victims {
            let name = segment::file_name(seg);
            // The first deleted segment's file becomes the spare when there is none (a whole
            // segment's worth of blocks the next segment writes into without growing a file).
            if recycled.is_none()
                && let Some(file) = shared.file(seg)
                && spare::reserve(shared)
            {
                match shared.storage.rename(&name, spare::SPARE) {
                    Ok(()) => {
                        recycled = Some(file);
                        removed.push(seg);
                        continue;
                    }
                    Err(e) => {
                        spare::release(shared);
                        tracing::warn!(segment = seg, error = %e, "could not recycle segment");
                    }
                }
            }
            match shared.storage.remove(&name) {
                Ok(()) => removed.push(seg),
                Err(e) if e.kind() == io::ErrorKind::NotFound => removed.push(seg),
                Err(e) => {
                    tracing::warn!(segment = seg, error = %e, "could not delete segment");
                }
            }
        }
        if removed.is_empty() {
            return Ok(());
        }
        // Only a durable removal may count as deleted for other segments' deps.
        shared.storage.sync_dir()?;
        let mut st = shared.lock();
        let mut files = shared.files.write().unwrap_or_else(|e| e.into_inner());
        for seg in removed {
            st.index.remove_segment(seg);
            files.remove(&seg);
            st.stats.segments_deleted += 1;
            st.stats.syncs += 1;
            tracing::debug!(segment = seg, "segment deleted");
        }
        drop(files);
        drop(st);
        // A spare only once no reader can reach it as its old segment (removed from `files`).
        if let Some(file) = recycled {
            spare::keep(shared, file);
        }
    }
}

/// Pick the fully durable, sealed segment with the smallest live fraction
/// below the configured ratio. The fraction counts, besides the segment's
/// own dead bytes, the dead segments it pins (`Index::pinned_bytes`): a
/// segment of long-lived messages whose settles are spread over the log
/// would otherwise keep every one of those segments on disk.
fn candidate(shared: &Shared) -> Option<(SegId, u64)> {
    let ratio = shared.config.compact_ratio;
    let mut st = shared.lock();
    if ratio <= 0.0 || st.poisoned.is_some() || st.closed {
        return None;
    }
    st.stats.compaction_checks += 1;
    // The log as a whole must be mostly garbage first (RabbitMQ's message store waits for half):
    // a backlog drained in order leaves at most its head segment partly dead, and that segment
    // dies whole a moment later; copying its live tail forward would only write it again.
    let (total, live) = st
        .index
        .segs
        .range(..st.durable_seg)
        .fold((0u64, 0u64), |(t, l), (_, s)| {
            (t + s.size, l + s.live_bytes.min(s.size))
        });
    if ((total - live) as f64) < GARBAGE_FRACTION * total as f64 {
        return None;
    }
    // And more than a couple of segments must be sealed: one or two sealed segments behind the
    // active one are mostly the consumers' lag (scenario b: a segment sealed every few seconds
    // with the last ~10k messages still queued), which dies whole shortly; scanning and copying
    // it cost a tenth of the broker's CPU there (docs/performance.md, part 5).
    if st.index.segs.range(..st.durable_seg).count() <= shared.config.compact_min_segments as usize
    {
        return None;
    }
    let pinned = st.index.pinned_bytes(st.active);
    st.index
        .segs
        .range(..st.durable_seg)
        .filter(|(_, s)| s.live_items > 0 && s.size > 0)
        .map(|(id, s)| {
            let span = s.size + pinned.get(id).copied().unwrap_or(0);
            (*id, s.size, s.live_bytes as f64 / span as f64)
        })
        .filter(|(_, _, frac)| *frac < ratio)
        .min_by(|a, b| a.2.total_cmp(&b.2))
        .map(|(id, size, _)| (id, size))
}

/// Compacts at most one segment; whether it did.
pub(crate) fn compact_one(shared: &Shared) -> bool {
    let Some((seg, size)) = candidate(shared) else {
        return false;
    };
    let Some(refs) = compact_read::from_index(shared, seg, size)
        .or_else(|| compact_read::scan(shared, seg, size))
    else {
        return false;
    };

    // Which messages still have an item here, and where their records are.
    let live: Vec<(MessageId, Loc)> = {
        let st = shared.lock();
        let mut ids = refs.msgs;
        ids.extend(refs.counted.iter().filter_map(|m| st.index.message_of(*m)));
        ids.into_iter()
            .filter(|id| st.index.has_item_in(*id, seg))
            .filter_map(|id| st.index.messages.get(&id).map(|e| (id, e.loc())))
            .collect()
    };
    let mut carried = 0u64;
    for slice in live.chunks(SLICE) {
        // Their records, read outside the lock, a slice at a time (the message record may
        // lie in another segment than the victim).
        let copies = compact_read::records(shared, slice);
        let mut st = shared.lock();
        if st.poisoned.is_some() || st.closed {
            return true;
        }
        for (id, loc, rec) in &copies {
            // Moved or died since the lookup: nothing to copy.
            let Some(old) = st
                .index
                .messages
                .get(id)
                .filter(|e| e.loc() == *loc)
                .map(|e| e.body(*id))
            else {
                continue;
            };
            let Ok(framed) = record::parse(rec) else {
                continue;
            };
            // The record must be this message's (its creating record, or a copy of it).
            let msg = match framed.payload {
                Payload::Publish { msg, .. } | Payload::DeadLetter { msg, .. }
                    if framed.index == *id =>
                {
                    msg
                }
                Payload::Carry { msg_id, msg, .. } if msg_id == *id => msg,
                _ => {
                    tracing::error!(message = id, "compaction: record is not the message's");
                    continue;
                }
            };
            let members = st.index.members_of(*id);
            let Ok((payload, _)) = encode_carry(*id, &members, &msg) else {
                continue;
            };
            if !record::fits(payload.len()) {
                continue;
            }
            let Ok(decoded) = Payload::decode(Kind::Carry as u8, &payload) else {
                continue;
            };
            let (index, _) = st.push(shared.config.segment_size, Kind::Carry, &payload, &decoded);
            // Until the copy is written its body is read where it was (`compactor::Moved`).
            st.moved.note(*id, old, index);
            carried += 1;
            // A member's Park record may sit in an older segment than the Carry: on replay it
            // would meet no message yet and be dropped. Write the park states after the Carry.
            for (member, _) in &members {
                if let Some(p) = st.index.parks.get(member).copied() {
                    carried += push_park(&mut st, shared, *member, p.due_ms, p.attempt);
                }
            }
        }
        st.stats.records_carried += carried;
        carried = 0;
        compactor::wake_writer(shared, &mut st);
    }

    // Definition records (few, small) read before taking the lock; still current is checked
    // under it.
    let defs: Vec<(u8, Bytes, Loc, Vec<u8>)> = refs
        .defs
        .into_iter()
        .filter_map(|(kind, key, loc)| {
            compact_read::read(shared, loc.seg, loc.offset, u64::from(loc.len))
                .map(|rec| (kind, key, loc, rec))
        })
        .collect();
    let mut st = shared.lock();
    if st.poisoned.is_some() || st.closed {
        return true;
    }
    let mut copied = 0u64;
    for (kind, key, loc, rec) in defs {
        if st.index.defs.get(&(kind, key.clone())) != Some(&loc) {
            continue;
        }
        let Ok(framed) = record::parse(&rec) else {
            continue;
        };
        let Payload::PutDefinition { value, .. } = framed.payload else {
            continue;
        };
        let cmd = Command::PutDefinition {
            kind,
            key,
            value: Bytes::copy_from_slice(value),
        };
        let Ok((kind, payload, _)) = encode_command(&cmd) else {
            continue;
        };
        let Ok(decoded) = Payload::decode(kind as u8, &payload) else {
            continue;
        };
        st.push(shared.config.segment_size, kind, &payload, &decoded);
        copied += 1;
    }
    for (member, loc) in refs.parks {
        let Some(p) = st
            .index
            .parks
            .get(&member)
            .filter(|p| p.loc == loc)
            .copied()
        else {
            continue;
        };
        copied += push_park(&mut st, shared, member, p.due_ms, p.attempt);
    }
    st.stats.records_carried += copied;
    compactor::wake_writer(shared, &mut st);
    tracing::debug!(segment = seg, "segment compacted");
    true
}

/// Writes a `Park` record for `member` (its current park state); 1 when written.
fn push_park(st: &mut State, shared: &Shared, member: Member, due_ms: u64, attempt: u32) -> u64 {
    let cmd = Command::Park {
        member,
        due_ms,
        attempt,
    };
    let Ok((kind, payload, _)) = encode_command(&cmd) else {
        return 0;
    };
    let Ok(decoded) = Payload::decode(kind as u8, &payload) else {
        return 0;
    };
    st.push(shared.config.segment_size, kind, &payload, &decoded);
    1
}
