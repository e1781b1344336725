//! Recovery (`docs/storage-format.md` §4): replay every segment in order
//! into an [`Index`], cut a torn tail off the last segment, refuse
//! corruption in sealed ones, and hand back the definitions and the live
//! members of every queue.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::error::OpenError;
use crate::index::{Index, Loc};
use crate::record::{self, Payload};
use crate::recovered_list::RecoveredList;
use crate::segment::{self, BadHeader, SEGMENT_HEADER_LEN, SegId};
use crate::spare;
use crate::storage::{Storage, StorageFile};
use crate::types::{Recovered, RecoveredEntry};
use crate::window::Window;

/// What the store needs to go on writing after recovery.
pub(crate) struct RecoveryOutcome {
    pub(crate) index: Index,
    pub(crate) recovered: Recovered,
    pub(crate) files: BTreeMap<SegId, Arc<dyn StorageFile>>,
    pub(crate) last_segment: SegId,
    /// A deleted segment's file kept for reuse (`spare`).
    pub(crate) spare: Option<Arc<dyn StorageFile>>,
}

fn io(op: &'static str, seg: SegId) -> impl FnOnce(std::io::Error) -> OpenError {
    move |source| OpenError::Io {
        op,
        name: segment::file_name(seg),
        source,
    }
}

/// Replay the log in `storage`.
pub(crate) fn recover(storage: &dyn Storage) -> Result<RecoveryOutcome, OpenError> {
    let names = storage.list().map_err(|source| OpenError::Io {
        op: "list",
        name: String::new(),
        source,
    })?;
    let mut segs: Vec<SegId> = Vec::new();
    let mut spare = None;
    for name in names {
        match segment::parse_name(&name) {
            Some(id) => segs.push(id),
            None if name == spare::SPARE => {
                spare = Some(storage.open(&name).map_err(|source| OpenError::Io {
                    op: "open",
                    name: name.clone(),
                    source,
                })?);
            }
            // A spare being zeroed when the broker stopped (`spare`): never a segment.
            None if name == spare::ZEROING => {
                if let Err(e) = storage.remove(&name) {
                    tracing::warn!(file = %name, error = %e, "could not remove unfinished spare");
                }
            }
            None => tracing::warn!(file = %name, "ignoring file that is not a segment"),
        }
    }
    segs.sort_unstable();

    let mut index = Index::default();
    let mut definitions: BTreeMap<(u8, Bytes), Bytes> = BTreeMap::new();
    let mut files = BTreeMap::new();
    let mut last_index = 0u64;
    let mut truncated_bytes = 0u64;

    for (i, &seg) in segs.iter().enumerate() {
        let is_last = i + 1 == segs.len();
        let file = storage
            .open(&segment::file_name(seg))
            .map_err(io("open", seg))?;
        let len = file.size().map_err(io("stat", seg))?;
        if seg > segment::MAX_SEG {
            return Err(corrupt(
                seg,
                0,
                "segment id beyond the store's limit (2^32 - 1)",
            ));
        }
        if len > segment::MAX_FILE {
            return Err(corrupt(seg, 0, "segment file larger than 4 GiB"));
        }
        let ulen = usize::try_from(len).map_err(|_| corrupt(seg, 0, "segment too large"))?;
        let mut win = Window::new(ulen);
        win.load(&*file, 0, 0).map_err(io("read", seg))?;

        let mut pos = match segment::check_header(win.rest(0)) {
            Ok(first) => {
                if first <= last_index {
                    return Err(corrupt(
                        seg,
                        0,
                        "first index not above the previous segment's",
                    ));
                }
                // Indexes below `first` were used by records since deleted.
                last_index = first - 1;
                SEGMENT_HEADER_LEN as usize
            }
            // An empty older segment is one an earlier recovery emptied
            // (below) before this process created a newer one.
            Err(BadHeader::Torn) if is_last || len == 0 => {
                // Torn while being created: nothing in it was ever durable. All zeros: a
                // preallocated file whose header never reached the disk.
                if !zeros_from(&*file, &mut win, 0, ulen).map_err(io("read", seg))? {
                    tracing::warn!(segment = seg, len, "segment header torn; emptying it");
                    truncated_bytes += len;
                }
                cut(&*file, seg, 0)?;
                index.add_segment(seg, 0);
                files.insert(seg, file);
                continue;
            }
            Err(BadHeader::Torn) => return Err(corrupt(seg, 0, "segment header torn or corrupt")),
            Err(BadHeader::Foreign(r)) => return Err(corrupt(seg, 0, r)),
        };
        index.add_segment(seg, 0);
        while pos < ulen {
            let rest = win.rest(pos);
            let framed = record::parse(rest)
                .map_err(|e| e.to_string())
                .and_then(|f| {
                    if f.index <= last_index {
                        Err(format!("index {} not above {last_index}", f.index))
                    } else {
                        Ok(f)
                    }
                });
            match framed {
                Ok(f) => {
                    let loc = Loc {
                        seg,
                        offset: pos as u64,
                        len: f.total_len as u32,
                    };
                    track_definition(&mut definitions, &f.payload);
                    index.apply(f.index, loc, &f.payload);
                    last_index = f.index;
                    pos += f.total_len;
                }
                // A zero record header in the newest segment: the preallocated tail (`spare`),
                // or torn. Decided by scanning the rest through the window, never by growing
                // it over the whole remainder (up to a segment, 64 MiB, at recovery's peak).
                Err(reason) if is_last && !win.at_end() && zero_header(rest) => {
                    if zeros_from(&*file, &mut win, pos, ulen).map_err(io("read", seg))? {
                        tracing::debug!(
                            segment = seg,
                            offset = pos,
                            "cutting unused segment space"
                        );
                    } else {
                        tracing::warn!(
                            segment = seg,
                            offset = pos,
                            cut = len - pos as u64,
                            %reason,
                            "torn tail: truncating the log"
                        );
                        truncated_bytes += len - pos as u64;
                    }
                    cut(&*file, seg, pos as u64)?;
                    break;
                }
                // Cut by the window, not by the file: read on from here.
                Err(_) if !win.at_end() => {
                    let at_least = win.held_from(pos).saturating_mul(2);
                    win.load(&*file, pos, at_least).map_err(io("read", seg))?;
                }
                Err(_) if is_last && spare::is_unused_space(rest, last_index) => {
                    // Preallocated or recycled space after the last record (`spare`).
                    tracing::debug!(segment = seg, offset = pos, "cutting unused segment space");
                    cut(&*file, seg, pos as u64)?;
                    break;
                }
                Err(reason) if is_last => {
                    tracing::warn!(
                        segment = seg,
                        offset = pos,
                        cut = len - pos as u64,
                        %reason,
                        "torn tail: truncating the log"
                    );
                    truncated_bytes += len - pos as u64;
                    cut(&*file, seg, pos as u64)?;
                    break;
                }
                Err(reason) => return Err(corrupt(seg, pos as u64, &reason)),
            }
        }
        index.grow(seg, pos as u64);
        files.insert(seg, file);
    }

    let last_segment = segs.last().copied().unwrap_or(0);
    index.drop_memberless(last_segment, last_index);
    let recovered = Recovered {
        definitions,
        queues: collect_queues(&index),
        last_index,
        truncated_bytes,
    };
    Ok(RecoveryOutcome {
        index,
        recovered,
        files,
        last_segment,
        spare,
    })
}

/// Whether `rest` starts with a record header of zeros (never a record: its length is at least
/// 20).
fn zero_header(rest: &[u8]) -> bool {
    !rest.is_empty() && rest.iter().take(record::HEADER_LEN).all(|b| *b == 0)
}

/// Whether the file is zeros from `from` to its end (read through the window).
fn zeros_from(
    file: &dyn StorageFile,
    win: &mut Window,
    from: usize,
    len: usize,
) -> std::io::Result<bool> {
    let mut at = from;
    while at < len {
        win.load(file, at, 0)?;
        let held = win.rest(at);
        if held.is_empty() {
            break;
        }
        if !held.iter().all(|b| *b == 0) {
            return Ok(false);
        }
        at += held.len();
    }
    Ok(true)
}

fn corrupt(segment: SegId, offset: u64, reason: &str) -> OpenError {
    OpenError::Corrupt {
        segment,
        offset,
        reason: reason.to_string(),
    }
}

fn cut(file: &dyn StorageFile, seg: SegId, len: u64) -> Result<(), OpenError> {
    file.truncate(len).map_err(io("truncate", seg))?;
    file.sync().map_err(io("sync", seg))
}

fn track_definition(defs: &mut BTreeMap<(u8, Bytes), Bytes>, p: &Payload<'_>) {
    match p {
        Payload::PutDefinition { kind, key, value } => {
            defs.insert(
                (*kind, Bytes::copy_from_slice(key)),
                Bytes::copy_from_slice(value),
            );
        }
        Payload::DeleteDefinition { kind, key } => {
            defs.remove(&(*kind, Bytes::copy_from_slice(key)));
        }
        _ => {}
    }
}

/// The per-queue lists: ids only (metadata stays on disk, `MetaReader`).
/// Packed (`RecoveredList`: a few bytes a member, sized exactly) since the whole index is in
/// memory meanwhile.
fn collect_queues(index: &Index) -> std::collections::HashMap<u64, RecoveredList> {
    let mut out = std::collections::HashMap::with_capacity(index.queues.len());
    for (q, members) in &index.queues {
        let list = RecoveredList::exact(|| {
            members.iter().map(|(id, e)| RecoveredEntry {
                id,
                msg: e.msg,
                delivery_count: e.count,
                parked: index.parks.get(&(*q, id)).map(|p| (p.due_ms, p.attempt)),
            })
        });
        out.insert(*q, list);
    }
    out
}
