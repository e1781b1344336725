//! The dead-lettering header rewrite ([`super::headers::update`]) done on the encoded
//! properties: the headers table is walked in place, the entries dead-lettering does not touch
//! are copied byte for byte, and only `x-death`'s changed entry and the `x-*-death-*` headers are
//! written. No decode, no re-encode, a handful of allocations instead of one per header value:
//! a retry loop (seed 003's retry queue) rewrites `x-death` twice per cycle.
//!
//! It answers `None` (the caller takes the decoding path) whenever the result could differ from
//! the decoding path's in meaning: malformed or non-canonical bytes ([`raw_table::is_canonical`],
//! non-UTF-8 short strings), an `expiration` (it moves into the entry), `CC`/`BCC` headers,
//! an `x-death` that is not an array of tables, a matched entry whose `count` is no integer.
//! The result decodes to exactly what the decoding path produces (proptest `raw_tests`); only
//! the order of the entries in the encoded tables differs.

use charon_protocol::RawProperties;
use charon_protocol::raw_table::{
    self as rt, HeadersSplit, RawField, put_i64, put_key, put_long, put_longstr, put_timestamp,
};

use super::headers::Death;

/// The keys dead-lettering writes at the top level (besides `x-death`).
const FIRST: [&str; 3] = [
    "x-first-death-queue",
    "x-first-death-reason",
    "x-first-death-exchange",
];
const LAST: [&str; 3] = [
    "x-last-death-queue",
    "x-last-death-reason",
    "x-last-death-exchange",
];

/// Whether the short-string properties of `raw` are UTF-8 (decoding fails otherwise).
fn short_strings_ok(before: &[u8], after: &[u8], flags: u16) -> bool {
    // content-type, content-encoding.
    let mut r = before;
    for bit in [15u16, 14] {
        if flags & (1 << bit) != 0 {
            let Some((&n, rest)) = r.split_first() else {
                return false;
            };
            let Some((s, rest)) = rest.split_at_checked(usize::from(n)) else {
                return false;
            };
            if std::str::from_utf8(s).is_err() {
                return false;
            }
            r = rest;
        }
    }
    // After the headers: delivery-mode, priority (octets), correlation-id, reply-to,
    // expiration, message-id (short), timestamp (8), type, user-id, app-id, cluster-id.
    let mut r = after;
    for bit in (2u16..=12).rev() {
        if flags & (1 << bit) == 0 {
            continue;
        }
        let n = match bit {
            12 | 11 => 1,
            6 => 8,
            _ => {
                let Some((&n, rest)) = r.split_first() else {
                    return false;
                };
                let Some((s, rest)) = rest.split_at_checked(usize::from(n)) else {
                    return false;
                };
                if std::str::from_utf8(s).is_err() {
                    return false;
                }
                r = rest;
                continue;
            }
        };
        let Some((_, rest)) = r.split_at_checked(n) else {
            return false;
        };
        r = rest;
    }
    r.is_empty()
}

/// The headers of `raw` as encoded entries, when its bytes can be edited in place with the
/// meaning a decode/edit/encode would give: well formed, short strings UTF-8, headers canonical
/// ([`rt::is_canonical`]). `None`: take the decoding path.
pub(crate) fn editable(raw: &RawProperties) -> Option<(HeadersSplit<'_>, Vec<RawField<'_>>)> {
    let split = raw.split_headers()?;
    if !short_strings_ok(split.before, split.after, split.flags) {
        return None;
    }
    let body = split.headers.unwrap_or_default();
    if !rt::is_canonical(body) {
        return None;
    }
    let fields = rt::fields(body)?;
    Some((split, fields))
}

/// `raw` with the death recorded, or `None` when the decoding path must do it.
pub(super) fn update(raw: &RawProperties, d: &Death<'_>, drop_cc: bool) -> Option<RawProperties> {
    let (split, fields) = editable(raw)?;
    // The expiration moves into the x-death entry: left to the decoding path.
    if split.flags & (1 << 8) != 0 {
        return None;
    }
    let body = split.headers.unwrap_or_default();
    // CC/BCC change the routing keys and are removed: the decoding path handles them.
    let _ = drop_cc;
    if fields.iter().any(|f| f.key == b"CC" || f.key == b"BCC") {
        return None;
    }
    let deaths = match rt::last(&fields, "x-death") {
        Some(f) if f.value.tag == b'A' => rt::elements(f.value.body)?,
        Some(_) | None => Vec::new(),
    };
    let is_same = |t: &[RawField<'_>]| {
        let text = |k| {
            rt::last(t, k)
                .filter(|f| f.value.tag == b'S')
                .map(|f| f.value.body)
        };
        text("queue") == Some(d.queue.as_bytes())
            && text("reason") == Some(d.reason.as_str().as_bytes())
    };
    let mut matched: Option<(usize, Vec<RawField<'_>>)> = None;
    for (i, v) in deaths.iter().enumerate() {
        if v.tag == b'F' {
            let t = rt::fields(v.body)?;
            if is_same(&t) {
                matched = Some((i, t));
                break;
            }
        }
    }
    let mut out = Vec::with_capacity(body.len() + 256);
    for f in &fields {
        let k = f.key;
        if k == b"x-death" || LAST.iter().any(|l| l.as_bytes() == k) {
            continue;
        }
        out.extend_from_slice(f.bytes);
    }
    // x-death: the {queue, reason} entry first, then the others in their order.
    put_key(&mut out, "x-death");
    out.push(b'A');
    let mut array = Vec::with_capacity(256);
    let entry = entry(matched.as_ref().map(|(_, t)| t.as_slice()), d)?;
    array.push(b'F');
    put_long(&mut array, &entry);
    for (i, v) in deaths.iter().enumerate() {
        if matched.as_ref().is_some_and(|(m, _)| *m == i) {
            continue;
        }
        array.extend_from_slice(v.bytes);
    }
    put_long(&mut out, &array);
    let values = [d.queue, d.reason.as_str(), d.exchange];
    for (k, v) in FIRST.iter().zip(values) {
        if rt::last(&fields, k).is_none() {
            put_key(&mut out, k);
            put_longstr(&mut out, v.as_bytes());
        }
    }
    for (k, v) in LAST.iter().zip(values) {
        put_key(&mut out, k);
        put_longstr(&mut out, v.as_bytes());
    }
    Some(RawProperties::with_headers_body(&split, &out))
}

/// The x-death entry: the matched one with `count` + 1, or a new one.
fn entry(matched: Option<&[RawField<'_>]>, d: &Death<'_>) -> Option<Vec<u8>> {
    let mut e = Vec::with_capacity(160);
    match matched {
        Some(t) => {
            // The integer types the decoding path counts from (others: left to it).
            let count = match rt::last(t, "count") {
                Some(f) if matches!(f.value.tag, b's' | b'I' | b'i' | b'l') => f.value.int()?,
                Some(_) => return None,
                None => 0,
            };
            for f in t.iter().filter(|f| f.key != b"count") {
                e.extend_from_slice(f.bytes);
            }
            put_key(&mut e, "count");
            put_i64(&mut e, count.saturating_add(1));
        }
        None => {
            put_key(&mut e, "count");
            put_i64(&mut e, 1);
            put_key(&mut e, "reason");
            put_longstr(&mut e, d.reason.as_str().as_bytes());
            put_key(&mut e, "queue");
            put_longstr(&mut e, d.queue.as_bytes());
            put_key(&mut e, "time");
            put_timestamp(&mut e, d.time_secs);
            put_key(&mut e, "exchange");
            put_longstr(&mut e, d.exchange.as_bytes());
            put_key(&mut e, "routing-keys");
            e.push(b'A');
            let mut keys = Vec::with_capacity(64);
            for k in d.routing_keys {
                put_longstr(&mut keys, k.as_bytes());
            }
            put_long(&mut e, &keys);
        }
    }
    Some(e)
}
