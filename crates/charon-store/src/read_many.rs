//! Reading many bodies at once (a queue delivering a run of paged-out messages): one lock
//! to find them all, then one positioned read per run of neighbouring records instead of one
//! `pread` per body (each body is then copied out of the run's buffer). Anything
//! that cannot be served that way (not written yet, its segment gone meanwhile) falls back to
//! [`Store::read_body`].

use bytes::Bytes;

use crate::store::Store;
use crate::types::BodyRef;

/// Bytes between two bodies still read in one go (the records' headers and metadata between
/// them are read and dropped).
const MAX_GAP: u64 = 16 << 10;
/// Longest run read in one go.
const MAX_RUN: u64 = 1 << 20;

impl Store {
    /// The bodies of stored messages `msgs` (their message ids), in the same order; `None` for
    /// a message the store no longer has or whose body could not be read.
    pub fn read_bodies(&self, msgs: &[u64]) -> Vec<Option<Bytes>> {
        let mut out: Vec<Option<Bytes>> = vec![None; msgs.len()];
        let mut at: Vec<(usize, BodyRef)> = {
            let st = self.shared().lock();
            msgs.iter()
                .enumerate()
                .filter_map(|(i, m)| st.index.messages.get(m).map(|e| (i, e.body(*m))))
                .collect()
        };
        at.sort_unstable_by_key(|(_, b)| (b.segment, b.offset));
        let mut rest = at.as_slice();
        while let Some((first, _)) = rest.split_first() {
            let seg = first.1.segment;
            let start = first.1.offset;
            let mut end = start + u64::from(first.1.len);
            let mut n = 1;
            for (_, b) in rest.iter().skip(1) {
                let b_end = b.offset + u64::from(b.len);
                if b.segment != seg || b.offset > end + MAX_GAP || b_end - start > MAX_RUN {
                    break;
                }
                end = end.max(b_end);
                n += 1;
            }
            let (run, tail) = rest.split_at(n);
            rest = tail;
            match self.read_run(seg, start, end) {
                Some(buf) => {
                    for (i, b) in run {
                        let from = (b.offset - start) as usize;
                        let slot = out.get_mut(*i);
                        // Copied out, not sliced: a slice would keep the whole run's buffer
                        // alive as long as any one of its messages is held (memory).
                        if let (Some(slot), Some(body)) =
                            (slot, buf.get(from..from + b.len as usize))
                        {
                            *slot = Some(Bytes::copy_from_slice(body));
                        }
                    }
                }
                None => {
                    for (i, b) in run {
                        if let Some(slot) = out.get_mut(*i) {
                            *slot = self.read_body(b).ok();
                        }
                    }
                }
            }
        }
        out
    }

    /// Bytes `start..end` of segment `seg` when they are written and the segment still exists
    /// after the read (see `Store::read_body`).
    fn read_run(&self, seg: u64, start: u64, end: u64) -> Option<Vec<u8>> {
        let shared = self.shared();
        if !shared.is_written(seg, start, end - start) {
            return None;
        }
        let file = shared.file(seg)?;
        let mut buf = vec![0u8; usize::try_from(end - start).ok()?];
        file.read_exact_at(&mut buf, start).ok()?;
        shared.file(seg)?;
        Some(buf)
    }
}
