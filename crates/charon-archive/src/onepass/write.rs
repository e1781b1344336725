//! The headers' JSON written straight from the encoded table: the text
//! [`crate::json::table_to_json_text`] writes (serde_json) for the decoded table: keys in byte
//! order, the last of repeated keys, strings escaped as serde_json escapes them (`"`, `\\`, the
//! control characters; `\b \t \n \f \r` short, others `\u00xx`), integers in decimal,
//! floats as serde_json formats them (non-finite ones `null`), decimals as `value / 10^scale`,
//! timestamps as integers, void as `null`.
//!
//! The text is written as octets. With [`Check::Once`] keys and string values are copied as they
//! are and the caller checks the whole text as UTF-8 once (`onepass::parse`): every copied key
//! and value lies between ASCII octets of the text (its quotes, or an escape's), so the whole
//! text is UTF-8 exactly when each of them is. Only when it is not is the table written again
//! with [`Check::Each`]: keys checked (`None` for one that is not UTF-8, as decoding fails),
//! values read as lossy UTF-8, as the general path reads them.

use charon_protocol::MAX_TABLE_NESTING;

use super::walk::{Entry, Val, be, entries_at, lossy};

/// How keys and string values are checked as UTF-8 while written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Check {
    /// Copied as they are; the caller checks the whole text.
    Once,
    /// Keys checked, values lossy: the text is UTF-8 by construction.
    Each,
}

/// Where a top-level string value's text lies in the written JSON (between its quotes), when it
/// was copied without an escape: that slice of the checked text is the value's text.
pub(super) type Span = Option<(usize, usize)>;

/// Writes table body `body` (at nesting depth `depth`; the headers are 1) as a JSON object and
/// returns its entries; `None` when decoding would fail on it (malformed, too deep, and with
/// [`Check::Each`] a key not UTF-8). With `spans`, one [`Span`] per entry is pushed.
pub(super) fn write_table<'a>(
    out: &mut Vec<u8>,
    body: &'a [u8],
    depth: usize,
    check: Check,
    mut spans: Option<&mut Vec<Span>>,
) -> Option<Vec<Entry<'a>>> {
    if depth > MAX_TABLE_NESTING {
        return None;
    }
    let es = entries_at(body, Some(depth))?;
    out.push(b'{');
    for (i, (k, v)) in es.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if check == Check::Each && std::str::from_utf8(k).is_err() {
            return None;
        }
        write_bytes(out, k);
        out.push(b':');
        let span = match v.tag {
            b'S' | b'x' => {
                let start = out.len() + 1;
                write_text(out, v.body, check).then(|| (start, out.len() - 1))
            }
            _ => {
                write_value(out, *v, depth, check)?;
                None
            }
        };
        if let Some(s) = spans.as_deref_mut() {
            s.push(span);
        }
    }
    out.push(b'}');
    Some(es)
}

/// A long string or byte array value as a JSON string; whether it was copied without an escape.
fn write_text(out: &mut Vec<u8>, b: &[u8], check: Check) -> bool {
    match check {
        Check::Once => write_bytes(out, b),
        Check::Each => write_bytes(out, lossy(b).as_bytes()),
    }
}

/// A float as serde_json writes it (`null` when not finite).
fn write_float(out: &mut Vec<u8>, f: f64) -> Option<()> {
    out.extend_from_slice(serde_json::to_string(&f).ok()?.as_bytes());
    Some(())
}

fn write_int(out: &mut Vec<u8>, n: impl std::fmt::Display) -> Option<()> {
    std::io::Write::write_fmt(out, format_args!("{n}")).ok()
}

/// Writes value `v` of a table or array at nesting depth `depth`.
pub(super) fn write_value(out: &mut Vec<u8>, v: Val<'_>, depth: usize, check: Check) -> Option<()> {
    let b = v.body;
    match v.tag {
        b't' => out.extend_from_slice(if b.iter().any(|x| *x != 0) {
            b"true"
        } else {
            b"false"
        }),
        b'b' => write_int(out, i8::from_be_bytes(be(b)?))?,
        b'B' => write_int(out, u8::from_be_bytes(be(b)?))?,
        b's' | b'U' => write_int(out, i16::from_be_bytes(be(b)?))?,
        b'u' => write_int(out, u16::from_be_bytes(be(b)?))?,
        b'I' => write_int(out, i32::from_be_bytes(be(b)?))?,
        b'i' => write_int(out, u32::from_be_bytes(be(b)?))?,
        b'l' | b'L' => write_int(out, i64::from_be_bytes(be(b)?))?,
        b'T' => write_int(out, u64::from_be_bytes(be(b)?))?,
        b'f' => write_float(out, f64::from(f32::from_be_bytes(be(b)?)))?,
        b'd' => write_float(out, f64::from_be_bytes(be(b)?))?,
        b'D' => {
            let [scale, v @ ..]: [u8; 5] = be(b)?;
            write_float(
                out,
                f64::from(u32::from_be_bytes(v)) / 10f64.powi(i32::from(scale)),
            )?;
        }
        b'S' | b'x' => {
            write_text(out, b, check);
        }
        b'V' => out.extend_from_slice(b"null"),
        b'A' => {
            let depth = depth + 1;
            if depth > MAX_TABLE_NESTING {
                return None;
            }
            let mut c = super::walk::Cur(b);
            out.push(b'[');
            let mut first = true;
            while !c.0.is_empty() {
                if !first {
                    out.push(b',');
                }
                first = false;
                write_value(out, c.value()?, depth, check)?;
            }
            out.push(b']');
        }
        b'F' => {
            write_table(out, b, depth + 1, check, None)?;
        }
        _ => return None,
    }
    Some(())
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Whether any of the 8 octets of `w` must be escaped (below 0x20, `"` or `\\`): the classic
/// "has a zero byte" / "has a byte less than n" word tests, exact as a yes/no answer.
fn any_to_escape(w: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below = w.wrapping_sub(ONES * 0x20) & !w;
    let q = w ^ (ONES * u64::from(b'"'));
    let quote = q.wrapping_sub(ONES) & !q;
    let b = w ^ (ONES * u64::from(b'\\'));
    let backslash = b.wrapping_sub(ONES) & !b;
    (below | quote | backslash) & HIGH != 0
}

/// The index of the first octet of `bytes` from `i` on that must be escaped, if any. Runs of 8
/// octets that need no escape are skipped a word at a time.
fn next_escape(bytes: &[u8], mut i: usize) -> Option<usize> {
    while i < bytes.len() {
        if let Some(w) = bytes.get(i..i + 8)
            && let Ok(w) = <[u8; 8]>::try_from(w)
            && !any_to_escape(u64::from_le_bytes(w))
        {
            i += 8;
            continue;
        }
        let c = bytes.get(i).copied().unwrap_or_default();
        if c < 0x20 || c == b'"' || c == b'\\' {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// The escape of octet `c` (below 0x20, `"` or `\\`) as serde_json writes it, in `buf`.
fn escape(c: u8, buf: &mut [u8; 6]) -> &[u8] {
    let short = match c {
        b'"' => b'"',
        b'\\' => b'\\',
        0x08 => b'b',
        0x09 => b't',
        0x0a => b'n',
        0x0c => b'f',
        0x0d => b'r',
        _ => {
            *buf = [
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(c >> 4)],
                HEX[usize::from(c & 15)],
            ];
            return &buf[..];
        }
    };
    buf[0] = b'\\';
    buf[1] = short;
    &buf[..2]
}

/// A JSON string, escaped as serde_json escapes it.
pub(super) fn write_str(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut buf = [0u8; 6];
    while let Some(i) = next_escape(bytes, start) {
        // The octet at `i` is ASCII: `i` and `i + 1` are character boundaries, and the escape
        // is ASCII.
        out.push_str(s.get(start..i).unwrap_or_default());
        let c = bytes.get(i).copied().unwrap_or_default();
        out.push_str(std::str::from_utf8(escape(c, &mut buf)).unwrap_or_default());
        start = i + 1;
    }
    out.push_str(s.get(start..).unwrap_or_default());
    out.push('"');
}

/// Octets as a JSON string, escaped as [`write_str`] escapes text (octets not UTF-8 are copied as
/// they are: see the module's doc); whether they were copied without an escape.
pub(super) fn write_bytes(out: &mut Vec<u8>, bytes: &[u8]) -> bool {
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    let mut buf = [0u8; 6];
    while let Some(i) = next_escape(bytes, start) {
        out.extend_from_slice(bytes.get(start..i).unwrap_or_default());
        let c = bytes.get(i).copied().unwrap_or_default();
        out.extend_from_slice(escape(c, &mut buf));
        start = i + 1;
    }
    out.extend_from_slice(bytes.get(start..).unwrap_or_default());
    out.push(b'"');
    start == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_as_serde_json() {
        let mut all: Vec<u8> = (0u8..0x80).collect();
        all.extend_from_slice("é日\"\\ plain run of text, then \u{1}".as_bytes());
        let s = String::from_utf8(all).expect("utf-8");
        for start in 0..s.len() {
            let Some(t) = s.get(start..) else { continue };
            let mut out = String::new();
            write_str(&mut out, t);
            assert_eq!(out, serde_json::to_string(t).expect("json"), "{t:?}");
            let mut octets = Vec::new();
            let verbatim = write_bytes(&mut octets, t.as_bytes());
            assert_eq!(octets, out.as_bytes(), "{t:?}");
            assert_eq!(verbatim, out.len() == t.len() + 2, "{t:?}");
        }
        // Octets that are not UTF-8 are copied as they are.
        let mut octets = Vec::new();
        assert!(write_bytes(&mut octets, b"a\xffb"));
        assert_eq!(octets, b"\"a\xffb\"");
    }
}
