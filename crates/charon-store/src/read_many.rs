//! Reading many bodies at once (a queue delivering a run of paged-out messages): one lock
//! to find them all, then one positioned read per run of neighbouring records instead of one
//! `pread` per body. Anything that cannot be served that way (not written yet, its segment
//! gone meanwhile) falls back to [`Store::read_body`].
//!
//! A *dense* run (its bodies at least half of its bytes, the usual case for a backlog
//! delivered in order) is read into a buffer of its own, without zero-filling it first, and
//! its bodies are slices of that buffer: no allocation and no copy per body. The buffer lives
//! while any of its bodies is held; the server holds read-back bodies only until the delivery
//! is encoded (a queue keeps the paged-out shape), so it is freed with its batch, and it is at
//! most twice its bodies. A *sparse* run is read into the thread's kept buffer and each body
//! copied out of it (a slice would keep the records between the bodies alive too).

use std::cell::RefCell;

use bytes::Bytes;

use crate::store::Store;
use crate::types::{BodyRef, Member};

/// Bytes between two bodies still read in one go (the records' headers and metadata between
/// them are read and dropped).
const MAX_GAP: u64 = 16 << 10;
/// Longest run read in one go.
const MAX_RUN: u64 = 1 << 20;

thread_local! {
    /// The thread's buffer for sparse runs of at most [`MAX_RUN`] bytes (kept zero-filled to
    /// its length once grown, so a run is read into it without clearing it again).
    static RUN_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Whether bodies of `bodies` bytes in all are sliced out of a run of `run` bytes (their
/// bytes at least half of it) rather than copied out.
fn dense(bodies: u64, run: u64) -> bool {
    bodies.saturating_mul(2) >= run
}

impl Store {
    /// The bodies of stored messages `msgs` (their message ids), in the same order; `None` for
    /// a message the store no longer has or whose body could not be read. Bodies of one dense
    /// run share one buffer (see the module docs).
    pub fn read_bodies(&self, msgs: &[u64]) -> Vec<Option<Bytes>> {
        let at: Vec<(usize, BodyRef)> = {
            let st = self.shared().lock();
            msgs.iter()
                .enumerate()
                .filter_map(|(i, m)| st.index.messages.get(m).map(|e| (i, e.body(*m))))
                .collect()
        };
        self.read_located(msgs.len(), at)
    }

    /// For each member `(queue, queue-local id)` of `members`, in the same order, its message
    /// id and body; `None` for a member the store no longer has or whose body could not be
    /// read. One lock finds them all (a queue delivering a paged-out batch asked the store once
    /// per message for its id, then once more for the bodies).
    pub fn read_member_bodies(&self, members: &[Member]) -> Vec<Option<(u64, Bytes)>> {
        let at: Vec<(usize, BodyRef)> = {
            let st = self.shared().lock();
            members
                .iter()
                .enumerate()
                .filter_map(|(i, m)| {
                    let msg = st.index.message_of(*m)?;
                    st.index.messages.get(&msg).map(|e| (i, e.body(msg)))
                })
                .collect()
        };
        let ids: Vec<(usize, u64)> = at.iter().map(|(i, b)| (*i, b.msg)).collect();
        let mut bodies = self.read_located(members.len(), at);
        let mut out: Vec<Option<(u64, Bytes)>> = vec![None; members.len()];
        for (i, msg) in ids {
            if let (Some(slot), Some(body)) =
                (out.get_mut(i), bodies.get_mut(i).and_then(Option::take))
            {
                *slot = Some((msg, body));
            }
        }
        out
    }

    /// The bodies at `at` (`(slot, where)`) in `n` slots: runs of neighbouring records read
    /// in one go each, a dense run sliced, a sparse one copied out.
    fn read_located(&self, n: usize, mut at: Vec<(usize, BodyRef)>) -> Vec<Option<Bytes>> {
        let mut out: Vec<Option<Bytes>> = vec![None; n];
        at.sort_unstable_by_key(|(_, b)| (b.segment, b.offset));
        let mut rest = at.as_slice();
        while let Some((first, _)) = rest.split_first() {
            let seg = first.1.segment;
            let start = first.1.offset;
            let mut end = start + u64::from(first.1.len);
            let mut bodies = u64::from(first.1.len);
            let mut n = 1;
            for (_, b) in rest.iter().skip(1) {
                let b_end = b.offset + u64::from(b.len);
                if b.segment != seg || b.offset > end + MAX_GAP || b_end - start > MAX_RUN {
                    break;
                }
                end = end.max(b_end);
                bodies += u64::from(b.len);
                n += 1;
            }
            let (run, tail) = rest.split_at(n);
            rest = tail;
            let read = if dense(bodies, end - start) {
                self.read_run_shared(seg, start, end).map(|buf| {
                    for (i, b) in run {
                        let from = (b.offset - start) as usize;
                        let to = from + b.len as usize;
                        if let Some(slot) = out.get_mut(*i)
                            && to <= buf.len()
                        {
                            *slot = Some(buf.slice(from..to));
                        }
                    }
                })
            } else {
                self.read_run(seg, start, end, |buf| {
                    for (i, b) in run {
                        let from = (b.offset - start) as usize;
                        let slot = out.get_mut(*i);
                        if let (Some(slot), Some(body)) =
                            (slot, buf.get(from..from + b.len as usize))
                        {
                            *slot = Some(Bytes::copy_from_slice(body));
                        }
                    }
                })
            };
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

    /// Bytes `start..end` of segment `seg` in a buffer of their own, when they are written and
    /// the segment still exists after the read (see `Store::read_body`); `None` otherwise.
    fn read_run_shared(&self, seg: u64, start: u64, end: u64) -> Option<Bytes> {
        let shared = self.shared();
        if !shared.is_written(seg, start, end - start) {
            return None;
        }
        let file = shared.file(seg)?;
        let len = usize::try_from(end - start).ok()?;
        let buf = file.read_vec_at(len, start).ok()?;
        shared.file(seg)?;
        Some(Bytes::from(buf))
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
