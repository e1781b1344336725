//! Record framing: `len u32 | crc32c u32 | type u8 | index u64 | term u32 | payload`, and the
//! reader that stops at the first torn or corrupt record.

use bytes::{BufMut, Bytes};

use crate::record::Record;

/// Bytes before the checksummed part.
pub(crate) const PREFIX: usize = 8;
/// Checksummed bytes before the payload: type, index, term.
pub(crate) const FIXED: usize = 1 + 8 + 4;
/// Largest record accepted on read (guards against a garbage length).
pub(crate) const MAX_RECORD: usize = 1 << 30;

/// Appends one framed record to `out`.
pub(crate) fn encode(out: &mut Vec<u8>, record: &Record, index: u64, term: u32) {
    let start = out.len();
    out.put_u32_le(0);
    out.put_u32_le(0);
    out.put_u8(record.type_byte());
    out.put_u64_le(index);
    out.put_u32_le(term);
    record.encode_payload(out);
    let len = out.len() - start - PREFIX;
    let crc = crc32c::crc32c(&out[start + PREFIX..]);
    out[start..start + 4].copy_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// One decoded frame.
#[derive(Debug)]
pub(crate) struct Frame {
    pub(crate) index: u64,
    pub(crate) record: Record,
}

/// Why reading stopped.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Clean end of file.
    End,
    /// A torn or corrupt record at this offset.
    Bad {
        /// Where the bad record starts.
        offset: usize,
        /// What was wrong.
        reason: &'static str,
    },
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes)
}

/// Reads the frames of `data` in order, checking lengths, checksums and that indexes follow
/// `expected_index` by one (when it is `Some`).
pub(crate) fn read_all(data: &Bytes, mut expected_index: Option<u64>) -> (Vec<Frame>, Stop) {
    let mut out = Vec::new();
    let mut off = 0;
    loop {
        if off == data.len() {
            return (out, Stop::End);
        }
        let bad = |reason| Stop::Bad {
            offset: off,
            reason,
        };
        let (Some(len), Some(crc)) = (le_u32(data, off), le_u32(data, off + 4)) else {
            return (out, bad("truncated header"));
        };
        let len = len as usize;
        if !(FIXED..=MAX_RECORD).contains(&len) {
            return (out, bad("bad length"));
        }
        let start = off + PREFIX;
        let Some(body) = data.get(start..start + len) else {
            return (out, bad("truncated record"));
        };
        if crc32c::crc32c(body) != crc {
            return (out, bad("checksum mismatch"));
        }
        let t = body[0];
        let index = u64::from_le_bytes(body[1..9].try_into().unwrap_or([0; 8]));
        if expected_index.is_some_and(|e| e != index) {
            return (out, bad("index out of sequence"));
        }
        let payload = data.slice(start + FIXED..start + len);
        let Some(record) = Record::decode(t, payload) else {
            return (out, bad("undecodable payload"));
        };
        out.push(Frame { index, record });
        expected_index = Some(index + 1);
        off = start + len;
    }
}
