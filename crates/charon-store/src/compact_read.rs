//! Compaction's reads (`compaction`): the victim segment is scanned through a window of a few
//! MiB (`window::Window`, as recovery reads) instead of being read whole, and the records still
//! live are then read back by runs of neighbours, a slice at a time. What compaction holds in
//! memory is the window and one slice of live records, never a whole 64 MiB segment (reading
//! it whole into a fresh zeroed buffer cost page clearing on every compaction and up to 64 MiB
//! of the broker's resident set).

use std::collections::BTreeSet;

use bytes::Bytes;

use crate::index::Loc;
use crate::record::{self, Payload};
use crate::segment::{SEGMENT_HEADER_LEN, SegId};
use crate::store::Shared;
use crate::types::{Member, MessageId};
use crate::window::Window;

/// Neighbouring records closer than this are read with one `pread`.
const MAX_GAP: u64 = 16 << 10;
/// A run read at once is at most this long (a larger record is read alone).
const MAX_RUN: u64 = 1 << 20;

/// What a segment's records may still hold alive.
#[derive(Default)]
pub(crate) struct Refs {
    pub(crate) msgs: BTreeSet<MessageId>,
    pub(crate) counted: Vec<Member>,
    pub(crate) defs: Vec<(u8, Bytes, Loc)>,
    pub(crate) parks: Vec<(Member, Loc)>,
}

/// At most this many live index entries (messages, definitions, parks) are walked under the
/// store lock instead of scanning the segment's file, and never more than one per 64 bytes of
/// the segment (a small segment is scanned: cheaper than walking a larger index).
const WALK_MAX: usize = 16 << 10;

/// What segment `seg` still holds alive, from the index rather than the file, when the index
/// is small (`None`: scan the file). A segment sealed while a few messages were in flight (or
/// holding the one definition record of a queue) otherwise cost a read and parse of its whole
/// 64 MiB for a handful of items that often died before the scan ended.
pub(crate) fn from_index(shared: &Shared, seg: SegId, size: u64) -> Option<Refs> {
    let limit = WALK_MAX.min(usize::try_from(size / 64).unwrap_or(WALK_MAX));
    let st = shared.lock();
    let ix = &st.index;
    if ix.messages.len() + ix.defs.len() + ix.parks.len() > limit {
        return None;
    }
    let mut refs = Refs::default();
    refs.msgs.extend(
        ix.messages
            .iter()
            .map(|(id, _)| id)
            .filter(|id| ix.has_item_in(*id, seg)),
    );
    refs.defs.extend(
        ix.defs
            .iter()
            .filter(|(_, loc)| loc.seg == seg)
            .map(|((kind, key), loc)| (*kind, key.clone(), *loc)),
    );
    refs.parks.extend(
        ix.parks
            .iter()
            .filter(|(_, p)| p.loc.seg == seg)
            .map(|(m, p)| (*m, p.loc)),
    );
    Some(refs)
}

/// Whether `rest` holds a whole record (by its length field).
fn whole(rest: &[u8]) -> bool {
    rest.get(..4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .is_some_and(|b| rest.len() >= 8 + u32::from_le_bytes(b) as usize)
}

/// Scans a (synced, sealed) segment of `size` bytes and lists what its records refer to;
/// `None` when it cannot be read (not written yet, gone, or a read error).
pub(crate) fn scan(shared: &Shared, seg: SegId, size: u64) -> Option<Refs> {
    // A segment not completely written (never the case for a sealed, durable one): nothing.
    if !shared.is_written(seg, 0, size) {
        return None;
    }
    let file = shared.file(seg)?;
    let len = usize::try_from(size).ok()?;
    let mut window = Window::new(len);
    let mut refs = Refs::default();
    let mut pos = SEGMENT_HEADER_LEN as usize;
    while pos < len {
        if !whole(window.rest(pos)) {
            let need = window
                .rest(pos)
                .get(..4)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map_or(0, |b| 8 + u32::from_le_bytes(b) as usize);
            if let Err(e) = window.load(&*file, pos, need.min(len - pos)) {
                tracing::warn!(segment = seg, error = %e, "compaction read failed");
                return None;
            }
        }
        let Ok(f) = record::parse(window.rest(pos)) else {
            tracing::error!(segment = seg, offset = pos, "compaction: record unreadable");
            break;
        };
        let loc = Loc {
            seg,
            offset: pos as u64,
            len: f.total_len as u32,
        };
        match f.payload {
            Payload::Publish { .. } | Payload::DeadLetter { .. } => {
                refs.msgs.insert(f.index);
            }
            Payload::Carry { msg_id, .. } => {
                refs.msgs.insert(msg_id);
            }
            Payload::Enqueue { msg, .. } => {
                refs.msgs.insert(msg);
            }
            // Its members are items here like an Enqueue's; their message is found by member.
            Payload::Route { members, .. } => refs.counted.extend(members),
            Payload::Park { member, .. } => refs.parks.push((member, loc)),
            Payload::DeliveryCount { member, .. } => refs.counted.push(member),
            Payload::DeliveryCounts { queue, counts } => {
                refs.counted
                    .extend(counts.iter().map(|(id, _)| (queue, *id)));
            }
            Payload::PutDefinition { kind, key, .. } => {
                refs.defs.push((kind, Bytes::copy_from_slice(key), loc));
            }
            Payload::Settle { .. } | Payload::DeleteDefinition { .. } | Payload::Purge { .. } => {}
        }
        pos += f.total_len;
    }
    Some(refs)
}

/// Reads `len` bytes at `offset` of segment `seg`, once they are written.
pub(crate) fn read(shared: &Shared, seg: SegId, offset: u64, len: u64) -> Option<Vec<u8>> {
    // A record not written yet (a copy just appended to the active segment): in a
    // preallocated or recycled file the bytes there are zeros or a stale record of the file's
    // old segment, never to be copied forward (§2.5).
    if !shared.is_written(seg, offset, len) {
        return None;
    }
    let file = shared.file(seg)?;
    let mut buf = vec![0u8; usize::try_from(len).ok()?];
    match file.read_exact_at(&mut buf, offset) {
        Ok(()) => Some(buf),
        Err(e) => {
            tracing::warn!(segment = seg, error = %e, "compaction read failed");
            None
        }
    }
}

/// The records at `locs` (each message's record), read by runs of neighbours: one `pread` per
/// run. A record that cannot be read is left out (the copy is skipped, the message stays).
pub(crate) fn records(
    shared: &Shared,
    locs: &[(MessageId, Loc)],
) -> Vec<(MessageId, Loc, Vec<u8>)> {
    let mut sorted: Vec<(MessageId, Loc)> = locs.to_vec();
    sorted.sort_by_key(|(_, l)| (l.seg, l.offset));
    let mut out = Vec::with_capacity(sorted.len());
    let mut i = 0;
    while let Some((_, first)) = sorted.get(i) {
        let start = first.offset;
        let mut end = start + u64::from(first.len);
        let mut j = i + 1;
        while let Some((_, l)) = sorted.get(j) {
            let next_end = l.offset + u64::from(l.len);
            if l.seg != first.seg || l.offset > end + MAX_GAP || next_end - start > MAX_RUN {
                break;
            }
            end = end.max(next_end);
            j += 1;
        }
        if let Some(run) = read(shared, first.seg, start, end - start) {
            for (id, l) in sorted.get(i..j).unwrap_or(&[]) {
                let at = (l.offset - start) as usize;
                if let Some(b) = run.get(at..at + l.len as usize) {
                    out.push((*id, *l, b.to_vec()));
                }
            }
        }
        i = j;
    }
    out
}
