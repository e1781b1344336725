//! Allocation-free structural walker for AMQP field tables and arrays.
//!
//! `amq-protocol` parses nested tables recursively with no depth limit, so a
//! frame made of nothing but nested tables could overflow the stack of a
//! (small) async worker thread. Every table is therefore walked here first,
//! with [`MAX_TABLE_NESTING`] enforced, before `amq-protocol` sees it. The
//! walker accepts exactly the value types `amq-protocol` accepts (RabbitMQ's
//! set plus `U`).

use crate::wire::Reader;

/// Maximum nesting depth of field tables/arrays (a top-level table is depth
/// 1). RabbitMQ has no limit; real clients use 2 or 3 levels (`x-death`
/// headers are 3). amq-protocol needs ~10 KiB of stack per level in debug
/// builds and ~1.3 KiB in release, so 32 levels stay well inside a 2 MiB
/// tokio worker stack.
pub const MAX_TABLE_NESTING: usize = 32;

/// A structural problem found while walking a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TableError {
    /// Offset of the problem, relative to the start of the walked slice.
    pub(crate) offset: usize,
    /// What was wrong.
    pub(crate) reason: &'static str,
}

fn err(r: &Reader<'_>, base: usize, reason: &'static str) -> TableError {
    TableError {
        offset: base.saturating_add(r.pos()),
        reason,
    }
}

/// Walk a length-prefixed field table at the cursor (u32 length + entries),
/// advancing past it. `base` is the offset of `r`'s slice in the caller's
/// frame, for error reporting.
pub(crate) fn skip_table(r: &mut Reader<'_>, base: usize, depth: usize) -> Result<(), TableError> {
    let start = r.pos();
    let body = r
        .long_str()
        .ok_or_else(|| err(r, base, "field table length exceeds available bytes"))?;
    walk_table_body(
        body,
        base.saturating_add(start).saturating_add(4),
        depth + 1,
    )
}

fn walk_table_body(body: &[u8], base: usize, depth: usize) -> Result<(), TableError> {
    if depth > MAX_TABLE_NESTING {
        return Err(TableError {
            offset: base,
            reason: "field tables/arrays nested too deeply",
        });
    }
    let mut r = Reader::new(body);
    while r.remaining() > 0 {
        r.short_str()
            .ok_or_else(|| err(&r, base, "truncated field name"))?;
        skip_value(&mut r, base, depth)?;
    }
    Ok(())
}

fn walk_array_body(body: &[u8], base: usize, depth: usize) -> Result<(), TableError> {
    if depth > MAX_TABLE_NESTING {
        return Err(TableError {
            offset: base,
            reason: "field tables/arrays nested too deeply",
        });
    }
    let mut r = Reader::new(body);
    while r.remaining() > 0 {
        skip_value(&mut r, base, depth)?;
    }
    Ok(())
}

/// Skip one typed value (type octet + value).
fn skip_value(r: &mut Reader<'_>, base: usize, depth: usize) -> Result<(), TableError> {
    let at = r.pos();
    let ty = r
        .u8()
        .ok_or_else(|| err(r, base, "missing field value type"))?;
    let fixed = match ty {
        b't' | b'b' | b'B' => 1,
        b's' | b'U' | b'u' => 2,
        b'I' | b'i' | b'f' => 4,
        b'l' | b'L' | b'd' | b'T' => 8,
        b'D' => 5,
        b'V' => 0,
        b'S' | b'x' => {
            return r
                .long_str()
                .map(|_| ())
                .ok_or_else(|| err(r, base, "string/byte-array length exceeds available bytes"));
        }
        b'F' | b'A' => {
            let len_at = r.pos();
            let body = r
                .long_str()
                .ok_or_else(|| err(r, base, "nested table/array length exceeds available bytes"))?;
            let body_base = base.saturating_add(len_at).saturating_add(4);
            return if ty == b'F' {
                walk_table_body(body, body_base, depth + 1)
            } else {
                walk_array_body(body, body_base, depth + 1)
            };
        }
        _ => {
            return Err(TableError {
                offset: base.saturating_add(at),
                reason: "unknown field value type",
            });
        }
    };
    r.skip(fixed)
        .ok_or_else(|| err(r, base, "truncated field value"))
}

/// Decodes an AMQPLAIN SASL response: a field table *without* its 4-byte length prefix
/// (`LOGIN` and `PASSWORD` keys). `None` when it is malformed or nested too deeply.
pub fn decode_amqplain(response: &[u8]) -> Option<crate::FieldTable> {
    let len = u32::try_from(response.len()).ok()?;
    let mut framed = Vec::with_capacity(response.len() + 4);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(response);
    let mut r = Reader::new(&framed);
    skip_table(&mut r, 0, 0).ok()?;
    let (_, table) = amq_protocol::types::parsing::parse_field_table(framed.as_slice()).ok()?;
    Some(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(bytes: &[u8]) -> Result<(), TableError> {
        let mut r = Reader::new(bytes);
        skip_table(&mut r, 0, 0)?;
        assert_eq!(r.remaining(), 0);
        Ok(())
    }

    #[test]
    fn empty_table() {
        assert!(check(&[0, 0, 0, 0]).is_ok());
    }

    #[test]
    fn simple_entries() {
        let t = [0, 0, 0, 7, 1, b'a', b'I', 0, 0, 0, 5];
        assert!(check(&t).is_ok());
        let bad = [0, 0, 0, 7, 1, b'a', b'?', 0, 0, 0, 5];
        assert_eq!(check(&bad).map_err(|e| e.offset), Err(6));
        let short = [0, 0, 0, 6, 1, b'a', b'I', 0, 0, 0];
        assert!(check(&short).is_err());
        let overlong = [0, 0, 0, 9, 1, b'a', b'V'];
        assert!(check(&overlong).is_err());
    }

    fn nested(depth: usize) -> Vec<u8> {
        // table { "": F { "": F { ... {} } } }
        let mut inner: Vec<u8> = Vec::new();
        for _ in 1..depth {
            let mut t = vec![0u8, b'F'];
            t.extend_from_slice(&u32::try_from(inner.len()).unwrap_or(0).to_be_bytes());
            t.extend_from_slice(&inner);
            inner = t;
        }
        let mut out = u32::try_from(inner.len())
            .unwrap_or(0)
            .to_be_bytes()
            .to_vec();
        out.extend_from_slice(&inner);
        out
    }

    #[test]
    fn nesting_limit() {
        assert!(check(&nested(MAX_TABLE_NESTING)).is_ok());
        assert_eq!(
            check(&nested(MAX_TABLE_NESTING + 1)).map_err(|e| e.reason),
            Err("field tables/arrays nested too deeply")
        );
        assert!(check(&nested(2_000)).is_err());
    }
}
