//! Record framing (`docs/storage-format.md` §2.2): a 28-byte header with
//! length, CRC32C, index, term and kind, then the payload.

mod payload;

pub(crate) use payload::{
    Kind, MsgBody, Payload, encode_carry, encode_command, encode_publish_record, message_prefix,
};

use crate::error::AppendError;
use crate::types::Command;

/// Header bytes before the payload.
pub(crate) const HEADER_LEN: usize = 28;
/// Where a record's kind byte sits in its header (docs/storage-format.md).
pub(crate) const KIND_AT: usize = 24;
/// Bytes covered by `len` that are not payload (index, term, kind, flags, reserved).
const LEN_OVERHEAD: u32 = 20;
/// Largest `len` accepted when reading.
pub(crate) const MAX_RECORD: u32 = 1 << 30;

/// Whether a payload of `len` bytes fits a record that recovery accepts.
pub(crate) fn fits(len: usize) -> bool {
    u32::try_from(len).is_ok_and(|n| n <= MAX_RECORD - LEN_OVERHEAD)
}

/// Append one framed record to `out` (`payload` must [`fits`]).
pub(crate) fn frame(out: &mut Vec<u8>, index: u64, term: u64, kind: Kind, payload: &[u8]) {
    let len = LEN_OVERHEAD + payload.len() as u32;
    let start = out.len();
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(&term.to_le_bytes());
    out.extend_from_slice(&[kind as u8, 0, 0, 0]);
    out.extend_from_slice(payload);
    let covered = out.get(start + 8..).unwrap_or(&[]);
    let crc = crc32c::crc32c(covered);
    if let Some(slot) = out.get_mut(start + 4..start + 8) {
        slot.copy_from_slice(&crc.to_le_bytes());
    }
}

/// Appends `cmd` as one record to `out` with its payload encoded in place (the body is copied
/// once, straight into the batch buffer) and its index, term and CRC still to be set by
/// [`seal`]. Returns the kind, the record's length and the body's offset inside the record.
/// On an error `out` is left as it was.
pub(crate) fn encode_record(
    out: &mut Vec<u8>,
    cmd: &Command,
) -> Result<(Kind, usize, Option<usize>), AppendError> {
    encode_record_with(out, |out| payload::encode_command_into(out, cmd))
}

/// [`encode_record`] with the payload appended by `encode` (which returns the kind and the
/// body's offset in the payload, as `payload::encode_command_into`).
pub(crate) fn encode_record_with(
    out: &mut Vec<u8>,
    encode: impl FnOnce(&mut Vec<u8>) -> Result<(Kind, Option<usize>), AppendError>,
) -> Result<(Kind, usize, Option<usize>), AppendError> {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_LEN]);
    let (kind, body_at) = match encode(out) {
        Ok(r) => r,
        Err(e) => {
            out.truncate(start);
            return Err(e);
        }
    };
    let payload_len = out.len() - start - HEADER_LEN;
    if !fits(payload_len) {
        out.truncate(start);
        return Err(AppendError::Invalid("record larger than 1 GiB"));
    }
    if let Some(kb) = out.get_mut(start + KIND_AT) {
        *kb = kind as u8;
    }
    Ok((
        kind,
        HEADER_LEN + payload_len,
        body_at.map(|at| HEADER_LEN + at),
    ))
}

/// Sets the length, index and term of a record [`encode_record`] made (`rec` is exactly the
/// record's bytes). Its CRC is set by the writer thread ([`set_crcs`], outside the store lock)
/// before the record is written; afterwards it is what [`frame`] writes.
pub(crate) fn seal(rec: &mut [u8], index: u64, term: u64) {
    let len = (rec.len() - 8) as u32;
    if let Some(s) = rec.get_mut(0..4) {
        s.copy_from_slice(&len.to_le_bytes());
    }
    if let Some(s) = rec.get_mut(8..16) {
        s.copy_from_slice(&index.to_le_bytes());
    }
    if let Some(s) = rec.get_mut(16..24) {
        s.copy_from_slice(&term.to_le_bytes());
    }
}

/// Sets the CRC of every record in `recs` (whole records, one after the other, as a batch
/// chunk holds them after its segment header): the writer does this before writing a batch,
/// so callers appending under the store lock do not checksum there.
pub(crate) fn set_crcs(recs: &mut [u8]) {
    let mut pos = 0usize;
    while let Some(len) = le_u32(recs, pos) {
        let end = pos + 8 + len as usize;
        let Some(covered) = recs.get(pos + 8..end) else {
            return;
        };
        let crc = crc32c::crc32c(covered);
        if let Some(s) = recs.get_mut(pos + 4..pos + 8) {
            s.copy_from_slice(&crc.to_le_bytes());
        }
        pos = end;
    }
}

/// A record found in a buffer.
#[derive(Debug)]
pub(crate) struct Framed<'a> {
    /// Log index.
    pub(crate) index: u64,
    /// Decoded payload.
    pub(crate) payload: Payload<'a>,
    /// Total length including the header.
    pub(crate) total_len: usize,
}

/// Why the bytes at an offset are not a valid record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Invalid {
    /// The buffer ends inside the record (torn tail).
    Truncated,
    /// Length field out of bounds.
    BadLength(u32),
    /// Checksum mismatch.
    Crc,
    /// Unknown kind, or a payload that does not decode exactly.
    Payload(&'static str),
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Invalid::Truncated => write!(f, "record ends past end of file"),
            Invalid::BadLength(l) => write!(f, "bad record length {l}"),
            Invalid::Crc => write!(f, "CRC32C mismatch"),
            Invalid::Payload(r) => write!(f, "bad payload: {r}"),
        }
    }
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_le_bytes(s.try_into().ok()?))
}

fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at + 8)?;
    Some(u64::from_le_bytes(s.try_into().ok()?))
}

/// Parse the record at the start of `buf`.
pub(crate) fn parse(buf: &[u8]) -> Result<Framed<'_>, Invalid> {
    let len = le_u32(buf, 0).ok_or(Invalid::Truncated)?;
    if !(LEN_OVERHEAD..=MAX_RECORD).contains(&len) {
        return Err(Invalid::BadLength(len));
    }
    let total = 8 + len as usize;
    let rec = buf.get(..total).ok_or(Invalid::Truncated)?;
    let crc = le_u32(rec, 4).ok_or(Invalid::Truncated)?;
    let covered = rec.get(8..).ok_or(Invalid::Truncated)?;
    if crc32c::crc32c(covered) != crc {
        return Err(Invalid::Crc);
    }
    let index = le_u64(rec, 8).ok_or(Invalid::Truncated)?;
    let kind = *rec.get(24).ok_or(Invalid::Truncated)?;
    let body = rec.get(HEADER_LEN..).ok_or(Invalid::Truncated)?;
    let payload = Payload::decode(kind, body).map_err(Invalid::Payload)?;
    Ok(Framed {
        index,
        payload,
        total_len: total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The one-pass publish record is byte for byte what the general encoder
        /// (`encode_record` of a `Command::Publish`) writes, with the same body offset and
        /// length, and refuses what it refuses leaving the buffer as it was; sealed and
        /// checksummed, it parses back to the same message.
        #[test]
        fn the_publish_record_is_what_the_general_encoder_writes(
            prefix in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
            members in proptest::collection::vec((0u64..u64::MAX, 0u64..u64::MAX), 0..4),
            exchange in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            routing_key in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            properties in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..2000),
            enqueue_ms in 0u64..u64::MAX,
            expiry_ms in proptest::option::of(0u64..u64::MAX - 1),
        ) {
            let message = crate::types::NewMessage {
                exchange: bytes::Bytes::from(exchange),
                routing_key: bytes::Bytes::from(routing_key),
                properties: bytes::Bytes::from(properties),
                body: bytes::Bytes::from(body),
                enqueue_ms,
                expiry_ms,
            };
            let mut model = prefix.clone();
            let mut fast = prefix.clone();
            let msg = MsgBody::of(&message);
            let got = encode_publish_record(&mut fast, &msg, &members);
            let cmd = Command::Publish { message: message.clone(), members: members.clone() };
            let want = encode_record(&mut model, &cmd);
            match (got, want) {
                (Ok((len, at)), Ok((kind, want_len, want_at))) => {
                    proptest::prop_assert_eq!(kind, Kind::Publish);
                    proptest::prop_assert_eq!(len, want_len);
                    proptest::prop_assert_eq!(Some(at), want_at);
                    proptest::prop_assert_eq!(&fast, &model);
                    let rec = fast.get_mut(prefix.len()..).expect("record");
                    proptest::prop_assert_eq!(rec.get(at..), Some(&message.body[..]));
                    seal(rec, 5, 0);
                    set_crcs(rec);
                    let f = parse(rec).expect("parses");
                    proptest::prop_assert_eq!(f.index, 5);
                    proptest::prop_assert_eq!(f.total_len, len);
                    let Payload::Publish { members: m, msg: back } = f.payload else {
                        panic!("not a publish");
                    };
                    proptest::prop_assert_eq!(m, members);
                    proptest::prop_assert_eq!(back.exchange, &message.exchange[..]);
                    proptest::prop_assert_eq!(back.routing_key, &message.routing_key[..]);
                    proptest::prop_assert_eq!(back.properties, &message.properties[..]);
                    proptest::prop_assert_eq!(back.body, &message.body[..]);
                    proptest::prop_assert_eq!(back.body_offset + HEADER_LEN, at);
                    proptest::prop_assert_eq!(back.enqueue_ms, enqueue_ms);
                    proptest::prop_assert_eq!(back.expiry_ms, expiry_ms);
                }
                (Err(a), Err(b)) => {
                    proptest::prop_assert_eq!(a.to_string(), b.to_string());
                    proptest::prop_assert_eq!(&fast, &prefix);
                }
                (got, want) => proptest::prop_assert!(false, "{got:?} against {want:?}"),
            }
        }
    }

    #[test]
    fn the_largest_record_that_fits_is_accepted_when_read() {
        let max = (MAX_RECORD - LEN_OVERHEAD) as usize;
        assert!(fits(max) && !fits(max + 1));
        // The bound recovery applies to `len`, without allocating 1 GiB.
        let head = (LEN_OVERHEAD + max as u32).to_le_bytes();
        assert_eq!(parse(&head).err(), Some(Invalid::Truncated));
        let head = (LEN_OVERHEAD + max as u32 + 1).to_le_bytes();
        assert!(matches!(parse(&head), Err(Invalid::BadLength(_))));
    }

    #[test]
    fn frame_then_parse() {
        let mut out = Vec::new();
        frame(&mut out, 7, 0, Kind::Purge, &9u64.to_le_bytes());
        let f = parse(&out).expect("valid");
        assert_eq!(f.index, 7);
        assert_eq!(f.total_len, out.len());
        assert!(matches!(f.payload, Payload::Purge { queue: 9 }));
    }

    #[test]
    fn set_crcs_checksums_every_record_of_a_chunk() {
        let mut framed = Vec::new();
        frame(&mut framed, 1, 0, Kind::Purge, &9u64.to_le_bytes());
        frame(&mut framed, 2, 0, Kind::Purge, &[1u8; 8]);
        frame(&mut framed, 3, 0, Kind::Purge, &7u64.to_le_bytes());
        let mut unsealed = framed.clone();
        let second = parse(&framed).expect("valid").total_len;
        for at in [0, second, 2 * second] {
            unsealed.get_mut(at + 4..at + 8).expect("crc").fill(0);
        }
        assert!(parse(&unsealed).is_err());
        set_crcs(&mut unsealed);
        assert_eq!(unsealed, framed);
    }

    #[test]
    fn a_record_encoded_in_place_and_sealed_is_what_frame_writes() {
        use bytes::Bytes;
        let cmd = Command::Publish {
            message: crate::types::NewMessage {
                exchange: Bytes::from_static(b"ex"),
                routing_key: Bytes::from_static(b"rk"),
                properties: Bytes::from_static(&[0x10, 0, 2]),
                body: Bytes::from_static(b"hello body"),
                enqueue_ms: 5,
                expiry_ms: Some(9),
            },
            members: vec![(1, 2), (3, 4)],
        };
        let (kind, payload, at) = encode_command(&cmd).expect("encodes");
        let mut framed = vec![7u8; 3];
        frame(&mut framed, 42, 0, kind, &payload);
        let mut inplace = vec![7u8; 3];
        let (k2, len, body_at) = encode_record(&mut inplace, &cmd).expect("encodes");
        assert_eq!(k2, kind);
        assert_eq!(len, inplace.len() - 3);
        seal(inplace.get_mut(3..).expect("record"), 42, 0);
        set_crcs(inplace.get_mut(3..).expect("record"));
        assert_eq!(inplace, framed);
        assert_eq!(body_at, at.map(|a| a + HEADER_LEN));
        let rec = inplace.get(3..).expect("record");
        let body_at = body_at.expect("a publish has a body");
        assert_eq!(rec.get(body_at..), Some(&b"hello body"[..]));
        // An invalid command leaves the buffer as it was.
        let bad = Command::Publish {
            message: crate::types::NewMessage {
                exchange: Bytes::from(vec![b'x'; 300]),
                routing_key: Bytes::new(),
                properties: Bytes::new(),
                body: Bytes::new(),
                enqueue_ms: 0,
                expiry_ms: None,
            },
            members: vec![(1, 1)],
        };
        assert!(encode_record(&mut inplace, &bad).is_err());
        assert_eq!(inplace, framed);
    }

    #[test]
    fn every_flipped_byte_is_caught() {
        let mut out = Vec::new();
        frame(&mut out, 7, 0, Kind::Purge, &9u64.to_le_bytes());
        for i in 0..out.len() {
            let mut bad = out.clone();
            if let Some(b) = bad.get_mut(i) {
                *b ^= 0x40;
            }
            assert!(parse(&bad).is_err(), "flip at {i} not caught");
        }
    }

    #[test]
    fn every_prefix_is_truncated() {
        let mut out = Vec::new();
        frame(&mut out, 7, 0, Kind::Purge, &9u64.to_le_bytes());
        for n in 0..out.len() {
            assert_eq!(
                parse(out.get(..n).unwrap_or(&[])).err(),
                Some(Invalid::Truncated)
            );
        }
    }
}
