//! [`MetaReader`]: a live message's metadata (exchange, routing key, properties, enqueue time,
//! expiry, where its body is) read back from its record on disk.
//!
//! Recovery keeps no metadata per message (docs/storage-format.md §4, docs/performance.md
//! "Position-based recovery"): the index holds only where each message's record is, and the
//! broker reads the fields of each recovered member as it rebuilds the queue. Reads go through
//! a window of the segment (growing from 4 KiB to [`WINDOW`], so a queue of a few messages reads
//! a few KiB), so a queue rebuilt in id order — its records mostly in file order — costs one read
//! per window, not one per message. A message compaction moved is
//! read where it is now; a record not written yet (a copy in the pending batch) is waited for,
//! as [`Store::read_body`] does.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::error::ReadError;
use crate::record::{self, HEADER_LEN};
use crate::segment::SegId;
use crate::store::{Shared, Store};
use crate::types::{BodyRef, MessageId, RecoveredMessage};

/// Most bytes read at a time.
const WINDOW: u64 = 256 << 10;
/// Bytes read by a new reader's first read (a queue of a few messages reads no more); each
/// further read doubles it up to [`WINDOW`].
const FIRST_WINDOW: u64 = 4 << 10;

/// Reads recovered (or any live) messages' metadata; see the module docs. One per thread.
#[derive(Debug)]
pub struct MetaReader {
    shared: Arc<Shared>,
    /// The segment the window holds (0: none).
    seg: SegId,
    /// File offset of `buf`'s first byte.
    start: u64,
    buf: Vec<u8>,
    /// Bytes the next read takes (from [`FIRST_WINDOW`] up to [`WINDOW`]).
    next: u64,
    /// The previous message's exchange, routing key and properties: a run of alike messages
    /// shares one copy of each.
    last: Option<(Bytes, Bytes, Bytes)>,
}

/// Where a message's record is: (segment, record offset, bytes before the body, body).
pub(crate) type Located = (SegId, u64, u32, BodyRef);

impl Store {
    /// A reader of live messages' metadata (what recovery no longer keeps in memory).
    pub fn meta_reader(&self) -> MetaReader {
        MetaReader {
            shared: self.shared.clone(),
            seg: 0,
            start: 0,
            buf: Vec::new(),
            next: FIRST_WINDOW,
            last: None,
        }
    }
}

impl MetaReader {
    /// Message `msg`'s metadata. [`ReadError::NotFound`] once it is gone (settled everywhere).
    pub fn read(&mut self, msg: MessageId) -> Result<RecoveredMessage, ReadError> {
        let mut tries = 0;
        loop {
            let (seg, offset, prefix, body) =
                self.shared.locate(msg).ok_or(ReadError::NotFound(msg))?;
            if let Some(m) = self.parse(msg, seg, offset, prefix, body)? {
                return Ok(m);
            }
            // Not written yet, or its segment went while we read: wait (one group commit at
            // most) and look it up again.
            tries += 1;
            if tries > 5000 {
                return Err(ReadError::Io {
                    segment: seg,
                    source: std::io::ErrorKind::UnexpectedEof.into(),
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn parse(
        &mut self,
        msg: MessageId,
        seg: SegId,
        offset: u64,
        prefix: u32,
        body: BodyRef,
    ) -> Result<Option<RecoveredMessage>, ReadError> {
        let bad = |reason: &str| ReadError::Io {
            segment: seg,
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("record of message {msg} at offset {offset}: {reason}"),
            ),
        };
        let Some(range) = self.window(seg, offset, u64::from(prefix))? else {
            return Ok(None);
        };
        let rec = self.buf.get(range).unwrap_or(&[]);
        let (Some(head), Some(payload)) = (rec.get(..HEADER_LEN), rec.get(HEADER_LEN..)) else {
            return Err(bad("shorter than a header"));
        };
        let index = head
            .get(8..16)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes);
        let kind = head.get(24).copied().unwrap_or(0);
        let (carried, m, body_len) = record::message_prefix(kind, payload).map_err(bad)?;
        // The record must be this message's: its creating record or a copy of it.
        if carried.or(index) != Some(msg) || body_len != body.len {
            return Err(bad("not this message's record"));
        }
        let share = |last: Option<&Bytes>, now: &[u8]| match last {
            Some(b) if &b[..] == now => b.clone(),
            _ => Bytes::copy_from_slice(now),
        };
        let last = self.last.as_ref();
        let exchange = share(last.map(|l| &l.0), m.exchange);
        let routing_key = share(last.map(|l| &l.1), m.routing_key);
        let properties = share(last.map(|l| &l.2), m.properties);
        let out = RecoveredMessage {
            id: msg,
            exchange,
            routing_key,
            properties,
            body,
            enqueue_ms: m.enqueue_ms,
            expiry_ms: m.expiry_ms,
        };
        self.last = Some((
            out.exchange.clone(),
            out.routing_key.clone(),
            out.properties.clone(),
        ));
        Ok(Some(out))
    }

    /// Where `len` bytes at `offset` of segment `seg` are in the window, read into it if they
    /// are not there; `None` when they are not written yet or the segment went meanwhile.
    fn window(
        &mut self,
        seg: SegId,
        offset: u64,
        len: u64,
    ) -> Result<Option<std::ops::Range<usize>>, ReadError> {
        let end = offset.saturating_add(len);
        let held = self.start.saturating_add(self.buf.len() as u64);
        if (self.seg != seg || offset < self.start || end > held) && !self.load(seg, offset, len)? {
            return Ok(None);
        }
        let at = (offset - self.start) as usize;
        Ok(Some(at..at + len as usize))
    }

    fn load(&mut self, seg: SegId, offset: u64, len: u64) -> Result<bool, ReadError> {
        let io = |source| ReadError::Io {
            segment: seg,
            source,
        };
        self.seg = 0;
        // Only written bytes: past the written end a preallocated or recycled file holds zeros
        // or stale records, which the window must never keep.
        let Some(end) = self.shared.written_end(seg) else {
            return Ok(false);
        };
        let Some(file) = self.shared.file(seg) else {
            return Ok(false);
        };
        let end = match end {
            Some(e) => e,
            None => file.size().map_err(io)?,
        };
        if offset.saturating_add(len) > end {
            return Ok(false);
        }
        let n = len.max(self.next).min(end - offset);
        self.next = (self.next * 2).min(WINDOW);
        self.buf.resize(n as usize, 0);
        file.read_exact_at(&mut self.buf, offset).map_err(io)?;
        // A segment deleted meanwhile may have become the spare and been rewritten.
        if self.shared.file(seg).is_none() {
            return Ok(false);
        }
        self.seg = seg;
        self.start = offset;
        Ok(true)
    }
}

impl Shared {
    /// How far segment `seg` is written: `None` not at all yet, `Some(None)` whole (sealed:
    /// its file ends at its last record), `Some(Some(end))` up to `end` (the active one).
    pub(crate) fn written_end(&self, seg: SegId) -> Option<Option<u64>> {
        let (wseg, wend) = *self.written.lock().unwrap_or_else(|e| e.into_inner());
        match seg.cmp(&wseg) {
            std::cmp::Ordering::Less => Some(None),
            std::cmp::Ordering::Equal => Some(Some(wend)),
            std::cmp::Ordering::Greater => None,
        }
    }

    /// Where live message `msg`'s record is.
    pub(crate) fn locate(&self, msg: MessageId) -> Option<Located> {
        let st = self.lock();
        let e = st.index.messages.get(&msg)?;
        let loc = e.loc();
        Some((loc.seg, loc.offset, e.prefix_len(), e.body(msg)))
    }
}
