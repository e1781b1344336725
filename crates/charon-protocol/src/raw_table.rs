//! Reading and writing encoded field tables without decoding them: the entries of a table body
//! as `(key, type, value bytes)` slices, the elements of an array body, the headers table of
//! encoded properties, and writers for the few value types the broker adds itself. Used where
//! the broker rewrites a few headers of a message (dead-lettering's `x-death`) and copies the
//! rest byte for byte.
//!
//! [`is_canonical`] says whether a table's bytes survive a decode/encode round trip through
//! `amq-protocol` unchanged in meaning: every key valid UTF-8, no type tag that decoding
//! renames (`U` is read as `s`, `L` as `l`). Callers copy bytes only then.

use crate::RawProperties;
use crate::table::MAX_TABLE_NESTING;
use crate::wire::Reader;

/// One entry of a table body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawField<'a> {
    /// The key (short string bytes).
    pub key: &'a [u8],
    /// The value: type tag and its bytes.
    pub value: RawValue<'a>,
    /// The whole entry as encoded (key and value).
    pub bytes: &'a [u8],
}

/// One typed value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawValue<'a> {
    /// Type tag (`S`, `F`, `A`, `l`, ...).
    pub tag: u8,
    /// The value's bytes after the tag; for `S`, `x`, `F`, `A` without the length prefix.
    pub body: &'a [u8],
    /// Tag and value as encoded.
    pub bytes: &'a [u8],
}

impl RawValue<'_> {
    /// An integer value (`b B s u I i l`), as the broker reads counts.
    pub fn int(&self) -> Option<i64> {
        let b = self.body;
        Some(match self.tag {
            b'b' => i64::from(i8::from_be_bytes(b.try_into().ok()?)),
            b'B' => i64::from(u8::from_be_bytes(b.try_into().ok()?)),
            b's' => i64::from(i16::from_be_bytes(b.try_into().ok()?)),
            b'u' => i64::from(u16::from_be_bytes(b.try_into().ok()?)),
            b'I' => i64::from(i32::from_be_bytes(b.try_into().ok()?)),
            b'i' => i64::from(u32::from_be_bytes(b.try_into().ok()?)),
            b'l' => i64::from_be_bytes(b.try_into().ok()?),
            _ => return None,
        })
    }
}

fn value<'a>(r: &mut Reader<'a>) -> Option<RawValue<'a>> {
    let start = *r;
    let tag = r.u8()?;
    let body = match tag {
        b't' | b'b' | b'B' => r.take(1)?,
        b's' | b'U' | b'u' => r.take(2)?,
        b'I' | b'i' | b'f' => r.take(4)?,
        b'l' | b'L' | b'd' | b'T' => r.take(8)?,
        b'D' => r.take(5)?,
        b'V' => r.take(0)?,
        b'S' | b'x' | b'F' | b'A' => r.long_str()?,
        _ => return None,
    };
    let mut s = start;
    let bytes = s.take(r.pos() - start.pos())?;
    Some(RawValue { tag, body, bytes })
}

/// The entries of table body `body` (without its length prefix), in order; `None` when it is
/// malformed.
pub fn fields(body: &[u8]) -> Option<Vec<RawField<'_>>> {
    let mut r = Reader::new(body);
    let mut out = Vec::with_capacity(8);
    while r.remaining() > 0 {
        let start = r;
        let key = r.short_str()?;
        let value = value(&mut r)?;
        let mut s = start;
        let bytes = s.take(r.pos() - start.pos())?;
        out.push(RawField { key, value, bytes });
    }
    Some(out)
}

/// The last entry of `fields` named `key` (decoding keeps the last of repeated keys).
pub fn last<'a, 'b>(fields: &'b [RawField<'a>], key: &str) -> Option<&'b RawField<'a>> {
    fields.iter().rev().find(|f| f.key == key.as_bytes())
}

/// The elements of array body `body` (without its length prefix); `None` when malformed.
pub fn elements(body: &[u8]) -> Option<Vec<RawValue<'_>>> {
    let mut r = Reader::new(body);
    let mut out = Vec::with_capacity(4);
    while r.remaining() > 0 {
        out.push(value(&mut r)?);
    }
    Some(out)
}

/// Whether table body `body` means the same after a decode/encode round trip: well formed, not
/// nested too deeply, every key UTF-8, no `U` or `L` tags (decoding renames them).
pub fn is_canonical(body: &[u8]) -> bool {
    canonical_table(body, 1)
}

fn canonical_table(body: &[u8], depth: usize) -> bool {
    if depth > MAX_TABLE_NESTING {
        return false;
    }
    // Walked in place (no allocation): this runs for every message whose headers are edited.
    let mut r = Reader::new(body);
    while r.remaining() > 0 {
        let Some(key) = r.short_str() else {
            return false;
        };
        if std::str::from_utf8(key).is_err() {
            return false;
        }
        match value(&mut r) {
            Some(v) if canonical_value(&v, depth) => {}
            _ => return false,
        }
    }
    true
}

fn canonical_value(v: &RawValue<'_>, depth: usize) -> bool {
    match v.tag {
        b'U' | b'L' => false,
        b'F' => canonical_table(v.body, depth + 1),
        b'A' => {
            if depth >= MAX_TABLE_NESTING {
                return false;
            }
            let mut r = Reader::new(v.body);
            while r.remaining() > 0 {
                match value(&mut r) {
                    Some(e) if canonical_value(&e, depth + 1) => {}
                    _ => return false,
                }
            }
            true
        }
        _ => true,
    }
}

/// Appends a short string key.
pub fn put_key(out: &mut Vec<u8>, key: &str) {
    let k = key.as_bytes();
    let k = k.get(..k.len().min(255)).unwrap_or_default();
    out.push(u8::try_from(k.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(k);
}

/// Appends a long string value (`S`).
pub fn put_longstr(out: &mut Vec<u8>, v: &[u8]) {
    out.push(b'S');
    put_long(out, v);
}

/// Appends a length-prefixed body (u32 length + bytes) with no tag.
pub fn put_long(out: &mut Vec<u8>, v: &[u8]) {
    out.extend_from_slice(&u32::try_from(v.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(v);
}

/// Appends a signed 64-bit integer value (`l`).
pub fn put_i64(out: &mut Vec<u8>, v: i64) {
    out.push(b'l');
    out.extend_from_slice(&v.to_be_bytes());
}

/// Appends a timestamp value (`T`).
pub fn put_timestamp(out: &mut Vec<u8>, v: u64) {
    out.push(b'T');
    out.extend_from_slice(&v.to_be_bytes());
}

/// Encoded properties split around the headers table: flags and the properties before it,
/// the headers table's body (`None`: no headers), the properties after it.
#[derive(Debug, Clone, Copy)]
pub struct HeadersSplit<'a> {
    /// The property flags.
    pub flags: u16,
    /// content-type and content-encoding as encoded (after the flags).
    pub before: &'a [u8],
    /// The headers table body (without its length prefix).
    pub headers: Option<&'a [u8]>,
    /// Every property after the headers, as encoded.
    pub after: &'a [u8],
}

/// Bit of the headers property in the flags.
const HEADERS_FLAG: u16 = 1 << 13;

impl RawProperties {
    /// Splits the encoded properties around the headers table (`None` when malformed or when
    /// the flag word has its low bits set).
    pub fn split_headers(&self) -> Option<HeadersSplit<'_>> {
        let bytes = self.wire_bytes();
        let mut r = Reader::new(bytes);
        let flags = r.u16()?;
        if flags & 0b11 != 0 {
            return None;
        }
        let before_start = r;
        for bit in [15, 14] {
            if flags & (1 << bit) != 0 {
                r.short_str()?;
            }
        }
        let mut b = before_start;
        let before = b.take(r.pos() - before_start.pos())?;
        let headers = if flags & HEADERS_FLAG != 0 {
            Some(r.long_str()?)
        } else {
            None
        };
        let after = r.take(r.remaining())?;
        Some(HeadersSplit {
            flags,
            before,
            headers,
            after,
        })
    }

    /// Properties made of `split` with the headers table body `headers`.
    pub fn with_headers_body(split: &HeadersSplit<'_>, headers: &[u8]) -> RawProperties {
        let mut out =
            Vec::with_capacity(2 + split.before.len() + 4 + headers.len() + split.after.len());
        out.extend_from_slice(&(split.flags | HEADERS_FLAG).to_be_bytes());
        out.extend_from_slice(split.before);
        put_long(&mut out, headers);
        out.extend_from_slice(split.after);
        RawProperties(bytes::Bytes::from(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AMQPValue, BasicProperties, FieldArray, FieldTable, LongString, ShortString};

    #[test]
    fn splits_and_rebuilds_headers() {
        let mut h = FieldTable::default();
        h.insert(ShortString::from("a"), AMQPValue::LongLongInt(7));
        h.insert(
            ShortString::from("b"),
            AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::LongString(
                LongString::from("x"),
            )])),
        );
        let p = BasicProperties::default()
            .with_content_type(ShortString::from("t"))
            .with_headers(h)
            .with_delivery_mode(2);
        let raw = RawProperties::encode(&p);
        let split = raw.split_headers().expect("split");
        let body = split.headers.expect("headers");
        assert!(is_canonical(body));
        let fs = fields(body).expect("fields");
        assert_eq!(fs.len(), 2);
        assert_eq!(last(&fs, "a").and_then(|f| f.value.int()), Some(7));
        let arr = elements(last(&fs, "b").expect("b").value.body).expect("elements");
        assert_eq!(arr.first().map(|v| v.body), Some(&b"x"[..]));
        assert_eq!(RawProperties::with_headers_body(&split, body), raw);
        // No headers: the flag is set when they are added.
        let raw = RawProperties::encode(&BasicProperties::default().with_delivery_mode(1));
        let split = raw.split_headers().expect("split");
        assert!(split.headers.is_none());
        let mut t = Vec::new();
        put_key(&mut t, "k");
        put_i64(&mut t, 3);
        let back = RawProperties::with_headers_body(&split, &t)
            .decode()
            .expect("decode");
        assert_eq!(back.delivery_mode(), &Some(1));
        let k = back
            .headers()
            .as_ref()
            .and_then(|h| h.inner().get("k").cloned());
        assert_eq!(k, Some(AMQPValue::LongLongInt(3)));
    }

    #[test]
    fn renamed_tags_and_bad_keys_are_not_canonical() {
        assert!(!is_canonical(&[1, b'a', b'U', 0, 1]));
        assert!(!is_canonical(&[1, b'a', b'L', 0, 0, 0, 0, 0, 0, 0, 1]));
        assert!(!is_canonical(&[1, 0xff, b't', 1]));
        assert!(!is_canonical(&[1, b'a', b'A', 0, 0, 0, 3, b'U', 0, 1]));
        assert!(is_canonical(&[1, b'a', b's', 0, 1]));
        assert!(!is_canonical(&[1, b'a', b'?', 0]));
    }
}
