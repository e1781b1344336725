//! The headers' JSON written straight from the encoded table: the text
//! [`crate::json::table_to_json_text`] writes (serde_json) for the decoded table: keys in byte
//! order, the last of repeated keys, strings escaped as serde_json escapes them (`"`, `\\`, the
//! control characters; `\b \t \n \f \r` short, others `\u00xx`), integers in decimal,
//! floats as serde_json formats them (non-finite ones `null`), decimals as `value / 10^scale`,
//! timestamps as integers, void as `null`.

use std::fmt::Write as _;

use charon_protocol::MAX_TABLE_NESTING;

use super::walk::{Entry, Val, be, entries_at, lossy};

/// Writes table body `body` (at nesting depth `depth`; the headers are 1) as a JSON object and
/// returns its entries; `None` when decoding would fail on it (malformed, a key not UTF-8, too
/// deep).
pub(super) fn write_table<'a>(
    out: &mut String,
    body: &'a [u8],
    depth: usize,
) -> Option<Vec<Entry<'a>>> {
    if depth > MAX_TABLE_NESTING {
        return None;
    }
    let es = entries_at(body, Some(depth))?;
    out.push('{');
    for (i, (k, v)) in es.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_str(out, k);
        out.push(':');
        write_value(out, *v, depth)?;
    }
    out.push('}');
    Some(es)
}

/// A float as serde_json writes it (`null` when not finite).
fn write_float(out: &mut String, f: f64) -> Option<()> {
    out.push_str(&serde_json::to_string(&f).ok()?);
    Some(())
}

fn write_int(out: &mut String, n: impl std::fmt::Display) -> Option<()> {
    write!(out, "{n}").ok()
}

/// Writes value `v` of a table or array at nesting depth `depth`.
pub(super) fn write_value(out: &mut String, v: Val<'_>, depth: usize) -> Option<()> {
    let b = v.body;
    match v.tag {
        b't' => out.push_str(if b.iter().any(|x| *x != 0) {
            "true"
        } else {
            "false"
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
        b'S' | b'x' => write_str(out, &lossy(b)),
        b'V' => out.push_str("null"),
        b'A' => {
            let depth = depth + 1;
            if depth > MAX_TABLE_NESTING {
                return None;
            }
            let mut c = super::walk::Cur(b);
            out.push('[');
            let mut first = true;
            while !c.0.is_empty() {
                if !first {
                    out.push(',');
                }
                first = false;
                write_value(out, c.value()?, depth)?;
            }
            out.push(']');
        }
        b'F' => {
            write_table(out, b, depth + 1)?;
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

/// A JSON string, escaped as serde_json escapes it. Runs of 8 octets that need no escape are
/// skipped a word at a time.
pub(super) fn write_str(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        if let Some(w) = bytes.get(i..i + 8)
            && let Ok(w) = <[u8; 8]>::try_from(w)
            && !any_to_escape(u64::from_le_bytes(w))
        {
            i += 8;
            continue;
        }
        let c = bytes.get(i).copied().unwrap_or_default();
        i += 1;
        if c >= 0x20 && c != b'"' && c != b'\\' {
            continue;
        }
        // `c` is ASCII: `i - 1` is a character boundary.
        out.push_str(s.get(start..i - 1).unwrap_or_default());
        match c {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x08 => out.push_str("\\b"),
            0x09 => out.push_str("\\t"),
            0x0a => out.push_str("\\n"),
            0x0c => out.push_str("\\f"),
            0x0d => out.push_str("\\r"),
            _ => {
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(c >> 4)]));
                out.push(char::from(HEX[usize::from(c & 15)]));
            }
        }
        start = i;
    }
    out.push_str(s.get(start..).unwrap_or_default());
    out.push('"');
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
        }
    }
}
