//! Reading many bodies at once (a queue delivering a run of paged-out messages): one lock
//! to find them all, then one positioned read per run of neighbouring records instead of one
//! `pread` per body (each body is then copied out of the run's buffer, which each thread
//! keeps for its next run: a fresh 1 MiB buffer per run cost page faults, zeroing and an
//! `munmap` every time, a fifth of scenario f's consume phase). Anything
//! that cannot be served that way (not written yet, its segment gone meanwhile) falls back to
//! [`Store::read_body`].

use std::cell::RefCell;

use bytes::Bytes;

use crate::store::Store;
use crate::types::BodyRef;

/// Bytes between two bodies still read in one go (the records' headers and metadata between
/// them are read and dropped).
const MAX_GAP: u64 = 16 << 10;
/// Longest run read in one go.
const MAX_RUN: u64 = 1 << 20;

thread_local! {
    /// The thread's buffer for runs of at most [`MAX_RUN`] bytes (kept zero-filled to its
    /// length once grown, so a run is read into it without clearing it again).
    static RUN_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

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
            let read = self.read_run(seg, start, end, |buf| {
                for (i, b) in run {
                    let from = (b.offset - start) as usize;
                    let slot = out.get_mut(*i);
                    // Copied out, not sliced: a slice would keep the whole run's buffer
                    // alive as long as any one of its messages is held (memory).
                    if let (Some(slot), Some(body)) = (slot, buf.get(from..from + b.len as usize)) {
                        *slot = Some(Bytes::copy_from_slice(body));
                    }
                }
            });
            match read {
                Some(()) => {}
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

    /// Reads bytes `start..end` of segment `seg` and hands them to `use_run`, when they are
    /// written and the segment still exists after the read (see `Store::read_body`); `None`
    /// (and `use_run` not called) otherwise.
    fn read_run<R>(
        &self,
        seg: u64,
        start: u64,
        end: u64,
        use_run: impl FnOnce(&[u8]) -> R,
    ) -> Option<R> {
        let shared = self.shared();
        if !shared.is_written(seg, start, end - start) {
            return None;
        }
        let file = shared.file(seg)?;
        let len = usize::try_from(end - start).ok()?;
        let read = |buf: &mut [u8]| -> Option<()> {
            file.read_exact_at(buf, start).ok()?;
            shared.file(seg).map(|_| ())
        };
        if end - start > MAX_RUN {
            // One large body: its own buffer (not kept).
            let mut buf = vec![0u8; len];
            read(&mut buf)?;
            return Some(use_run(&buf));
        }
        RUN_BUF.with(|cell| {
            let Ok(mut buf) = cell.try_borrow_mut() else {
                let mut buf = vec![0u8; len];
                read(&mut buf)?;
                return Some(use_run(&buf));
            };
            if buf.len() < len {
                buf.resize(len, 0);
            }
            let run = buf.get_mut(..len)?;
            read(run)?;
            Some(use_run(run))
        })
    }
}
