//! Extraction in one pass over a message's encoded properties (docs/archive.md "Eighth round"):
//! the record of [`crate::extract::extract_general`] without decoding the properties into a
//! `BasicProperties` and its header `FieldTable` (a `BTreeMap` of owned values, ~19,000
//! instructions per record to build and ~5,000 to free, only to read about eight headers).
//!
//! The property octets are walked once: the short-string properties are borrowed, the headers
//! table is written as JSON straight from its octets (serde_json's own serializer, so strings and
//! numbers come out exactly as [`crate::json::table_to_json_text`] writes them), and the headers
//! the record needs are read from the same table's entries. The general path decodes with
//! `amq-protocol`, whose field table is a `BTreeMap`: its JSON lists keys in byte order and keeps
//! the last of repeated keys; [`entries`] does the same.
//!
//! Whatever this walk does not accept exactly as the general path would — malformed or trailing
//! octets, a short string (property or key) that is not UTF-8, an unknown type tag, tables nested
//! deeper than [`MAX_TABLE_NESTING`] — makes [`parse`] answer `None`, and the caller takes the
//! general path (which then yields what it always did). `tests/onepass.rs` compares both over
//! arbitrary properties and field tables.

use charon_protocol::MAX_TABLE_NESTING;
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::{Map, Value, json};

/// A cursor over encoded octets.
#[derive(Clone, Copy)]
struct Cur<'a>(&'a [u8]);

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn u8(&mut self) -> Option<u8> {
        self.array::<1>().map(|[b]| b)
    }

    /// A short string's octets (u8 length).
    fn short(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }

    /// A long string's octets (u32 length).
    fn long(&mut self) -> Option<&'a [u8]> {
        let n = u32::from_be_bytes(self.array::<4>()?);
        self.take(usize::try_from(n).ok()?)
    }

    /// One typed value: its tag and the octets after it (for `S`, `x`, `F`, `A` without the
    /// length prefix). The tags are those `amq-protocol` reads (RabbitMQ's set plus `U`, `L`).
    fn value(&mut self) -> Option<Val<'a>> {
        let tag = self.u8()?;
        let body = match tag {
            b't' | b'b' | b'B' => self.take(1)?,
            b's' | b'U' | b'u' => self.take(2)?,
            b'I' | b'i' | b'f' => self.take(4)?,
            b'l' | b'L' | b'd' | b'T' => self.take(8)?,
            b'D' => self.take(5)?,
            b'V' => &[],
            b'S' | b'x' | b'F' | b'A' => self.long()?,
            _ => return None,
        };
        Some(Val { tag, body })
    }
}

/// One encoded field value: its type tag and octets (length prefix stripped).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Val<'a> {
    tag: u8,
    body: &'a [u8],
}

fn be<const N: usize>(b: &[u8]) -> Option<[u8; N]> {
    b.try_into().ok()
}

impl<'a> Val<'a> {
    /// The value as `extract`'s `text` reads a header: long strings and byte arrays as (lossy)
    /// UTF-8, void as nothing, anything else as its JSON text.
    fn text(&self) -> Option<String> {
        match self.tag {
            b'S' | b'x' => Some(String::from_utf8_lossy(self.body).into_owned()),
            b'V' => None,
            _ => serde_json::to_string(&ValJson(*self, 1)).ok(),
        }
    }

    /// The value as `extract`'s `int` reads a death count.
    fn int(&self) -> Option<i64> {
        let b = self.body;
        Some(match self.tag {
            b'b' => i64::from(i8::from_be_bytes(be(b)?)),
            b'B' => i64::from(u8::from_be_bytes(be(b)?)),
            b's' | b'U' => i64::from(i16::from_be_bytes(be(b)?)),
            b'u' => i64::from(u16::from_be_bytes(be(b)?)),
            b'I' => i64::from(i32::from_be_bytes(be(b)?)),
            b'i' => i64::from(u32::from_be_bytes(be(b)?)),
            b'l' | b'L' => i64::from_be_bytes(be(b)?),
            b'T' => i64::try_from(u64::from_be_bytes(be(b)?)).ok()?,
            _ => return None,
        })
    }

    /// The elements of an array value (`None` for any other type).
    fn elements(&self) -> Option<Elements<'a>> {
        (self.tag == b'A').then_some(Elements(Cur(self.body)))
    }

    /// The entries of a table value (`None` for any other type, or when malformed).
    fn table(&self) -> Option<Vec<Entry<'a>>> {
        if self.tag == b'F' {
            entries(self.body)
        } else {
            None
        }
    }
}

/// The elements of an array body, in order (stops at the first malformed one).
struct Elements<'a>(Cur<'a>);

impl<'a> Iterator for Elements<'a> {
    type Item = Val<'a>;
    fn next(&mut self) -> Option<Val<'a>> {
        if self.0.0.is_empty() {
            return None;
        }
        self.0.value()
    }
}

/// A table entry: key and value.
pub(crate) type Entry<'a> = (&'a str, Val<'a>);

/// The entries of table body `body` as the decoded `BTreeMap` has them: sorted by key (byte
/// order), the last of repeated keys kept. `None` when malformed or a key is not UTF-8. For a
/// table already walked by [`TableJson`] (which checks what the map drops, too).
pub(crate) fn entries(body: &[u8]) -> Option<Vec<Entry<'_>>> {
    entries_at(body, None)
}

/// [`entries`]; with `Some(depth)` (the table's nesting depth) the values of repeated keys that
/// the map drops are checked as decoding checks them (it fails on them all the same).
fn entries_at(body: &[u8], depth: Option<usize>) -> Option<Vec<Entry<'_>>> {
    let mut c = Cur(body);
    let mut out: Vec<Entry<'_>> = Vec::with_capacity(16);
    let mut sorted = true;
    while !c.0.is_empty() {
        let key = std::str::from_utf8(c.short()?).ok()?;
        let v = c.value()?;
        sorted &= out.last().is_none_or(|(k, _)| *k < key);
        out.push((key, v));
    }
    if sorted {
        return Some(out);
    }
    // Reversed, then a stable sort: of repeated keys the last comes first and is kept.
    out.reverse();
    out.sort_by(|a, b| a.0.cmp(b.0));
    let mut kept: Vec<Entry<'_>> = Vec::with_capacity(out.len());
    for e in out {
        if kept.last().is_some_and(|k| k.0 == e.0) {
            if let Some(d) = depth
                && !valid(e.1, d)
            {
                return None;
            }
        } else {
            kept.push(e);
        }
    }
    Some(kept)
}

/// Whether value `v` of a table or array at nesting depth `depth` decodes: nested tables' keys
/// UTF-8, well formed, not nested deeper than [`MAX_TABLE_NESTING`].
fn valid(v: Val<'_>, depth: usize) -> bool {
    let depth = depth + 1;
    match v.tag {
        b'F' | b'A' if depth > MAX_TABLE_NESTING => false,
        b'F' => {
            let mut c = Cur(v.body);
            while !c.0.is_empty() {
                let ok = c.short().is_some_and(|k| std::str::from_utf8(k).is_ok())
                    && c.value().is_some_and(|x| valid(x, depth));
                if !ok {
                    return false;
                }
            }
            true
        }
        b'A' => {
            let mut c = Cur(v.body);
            while !c.0.is_empty() {
                if !c.value().is_some_and(|x| valid(x, depth)) {
                    return false;
                }
            }
            true
        }
        _ => true,
    }
}

/// The value of `key` in sorted, de-duplicated `entries`.
fn get<'a>(entries: &[Entry<'a>], key: &str) -> Option<Val<'a>> {
    entries
        .binary_search_by(|(k, _)| (*k).cmp(key))
        .ok()
        .and_then(|i| entries.get(i))
        .map(|(_, v)| *v)
}

/// A value as JSON, written as `json::value_to_json` shows it; the `usize` is its nesting depth
/// (the headers table is 1). Malformed octets fail the serialization.
struct ValJson<'a>(Val<'a>, usize);

/// A table body as a JSON object (keys in byte order, the last of repeated keys).
struct TableJson<'a>(&'a [u8], usize);

fn malformed<E: serde::ser::Error>() -> E {
    E::custom("malformed field table")
}

impl Serialize for TableJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.1 > MAX_TABLE_NESTING {
            return Err(malformed());
        }
        let es = entries_at(self.0, Some(self.1)).ok_or_else(malformed)?;
        let mut m = s.serialize_map(None)?;
        for (k, v) in es {
            m.serialize_entry(k, &ValJson(v, self.1))?;
        }
        m.end()
    }
}

impl Serialize for ValJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let float = |s: S, f: f64| {
            if f.is_finite() {
                s.serialize_f64(f)
            } else {
                s.serialize_unit()
            }
        };
        let Val { tag, body } = self.0;
        let fixed = |b: &[u8]| -> Result<u64, S::Error> {
            // Big-endian, at most 8 octets (the walk gave each fixed type its width).
            Ok(b.iter().fold(0u64, |acc, x| (acc << 8) | u64::from(*x)))
        };
        match tag {
            b't' => s.serialize_bool(fixed(body)? != 0),
            b'b' => s.serialize_i64(i64::from(i8::from_be_bytes(
                be(body).ok_or_else(malformed)?,
            ))),
            b'B' => s.serialize_u64(fixed(body)?),
            b's' | b'U' => s.serialize_i64(i64::from(i16::from_be_bytes(
                be(body).ok_or_else(malformed)?,
            ))),
            b'u' | b'i' | b'T' => s.serialize_u64(fixed(body)?),
            b'I' => s.serialize_i64(i64::from(i32::from_be_bytes(
                be(body).ok_or_else(malformed)?,
            ))),
            b'l' | b'L' => s.serialize_i64(i64::from_be_bytes(be(body).ok_or_else(malformed)?)),
            b'f' => float(
                s,
                f64::from(f32::from_be_bytes(be(body).ok_or_else(malformed)?)),
            ),
            b'd' => float(s, f64::from_be_bytes(be(body).ok_or_else(malformed)?)),
            b'D' => {
                let [scale, v @ ..]: [u8; 5] = be(body).ok_or_else(malformed)?;
                let value = u32::from_be_bytes(v);
                float(s, f64::from(value) / 10f64.powi(i32::from(scale)))
            }
            b'S' | b'x' => s.serialize_str(&String::from_utf8_lossy(body)),
            b'V' => s.serialize_unit(),
            b'A' => {
                let depth = self.1 + 1;
                if depth > MAX_TABLE_NESTING {
                    return Err(malformed());
                }
                let mut c = Cur(body);
                let mut seq = s.serialize_seq(None)?;
                while !c.0.is_empty() {
                    let v = c.value().ok_or_else(malformed)?;
                    seq.serialize_element(&ValJson(v, depth))?;
                }
                seq.end()
            }
            b'F' => TableJson(body, self.1 + 1).serialize(s),
            _ => Err(malformed()),
        }
    }
}

/// The basic properties, borrowed from their octets.
#[derive(Debug, Default)]
pub(crate) struct Props<'a> {
    /// content-type.
    pub(crate) content_type: Option<&'a str>,
    content_encoding: Option<&'a str>,
    /// The headers table body (without its length).
    headers: Option<&'a [u8]>,
    delivery_mode: Option<u8>,
    priority: Option<u8>,
    /// correlation-id.
    pub(crate) correlation_id: Option<&'a str>,
    reply_to: Option<&'a str>,
    expiration: Option<&'a str>,
    /// message-id.
    pub(crate) message_id: Option<&'a str>,
    timestamp: Option<u64>,
    kind: Option<&'a str>,
    user_id: Option<&'a str>,
    app_id: Option<&'a str>,
}

/// A short-string property if flag bit `15 - n` is set: `Some(None)` when absent, `None` when
/// truncated or not UTF-8.
fn short_prop<'a>(c: &mut Cur<'a>, flags: u16, n: u32) -> Option<Option<&'a str>> {
    if flags & (1 << (15 - n)) == 0 {
        return Some(None);
    }
    std::str::from_utf8(c.short()?).ok().map(Some)
}

/// An octet property if flag bit `15 - n` is set.
fn octet_prop(c: &mut Cur<'_>, flags: u16, n: u32) -> Option<Option<u8>> {
    if flags & (1 << (15 - n)) == 0 {
        return Some(None);
    }
    c.u8().map(Some)
}

/// The properties, borrowed: `None` when the general decode would not give exactly these (it
/// fails on malformed or trailing octets and on a short string that is not UTF-8; the headers
/// table is checked when it is written, [`parse`]). The flag word's two low bits are ignored, as
/// `amq-protocol` ignores them.
fn props(bytes: &[u8]) -> Option<Props<'_>> {
    if bytes.is_empty() {
        return Some(Props::default());
    }
    let mut c = Cur(bytes);
    let f = u16::from_be_bytes(c.array::<2>()?);
    let c = &mut c;
    let content_type = short_prop(c, f, 0)?;
    let content_encoding = short_prop(c, f, 1)?;
    let headers = if f & (1 << 13) != 0 {
        Some(c.long()?)
    } else {
        None
    };
    let delivery_mode = octet_prop(c, f, 3)?;
    let priority = octet_prop(c, f, 4)?;
    let correlation_id = short_prop(c, f, 5)?;
    let reply_to = short_prop(c, f, 6)?;
    let expiration = short_prop(c, f, 7)?;
    let message_id = short_prop(c, f, 8)?;
    let timestamp = if f & (1 << 6) != 0 {
        Some(u64::from_be_bytes(c.array::<8>()?))
    } else {
        None
    };
    let kind = short_prop(c, f, 10)?;
    let user_id = short_prop(c, f, 11)?;
    let app_id = short_prop(c, f, 12)?;
    // cluster-id: not shown, but decoding fails when it is not UTF-8.
    short_prop(c, f, 13)?;
    if !c.0.is_empty() {
        return None;
    }
    Some(Props {
        content_type,
        content_encoding,
        headers,
        delivery_mode,
        priority,
        correlation_id,
        reply_to,
        expiration,
        message_id,
        timestamp,
        kind,
        user_id,
        app_id,
    })
}

impl Props<'_> {
    /// Every property but the headers as JSON, as `json::properties_to_json` builds it (same
    /// keys, inserted in the same order).
    pub(crate) fn to_json(&self) -> Value {
        let mut m = Map::new();
        let mut s = |k: &str, v: Option<&str>| {
            if let Some(v) = v {
                m.insert(k.to_string(), json!(v));
            }
        };
        s("content_type", self.content_type);
        s("content_encoding", self.content_encoding);
        s("correlation_id", self.correlation_id);
        s("reply_to", self.reply_to);
        s("expiration", self.expiration);
        s("message_id", self.message_id);
        s("type", self.kind);
        s("user_id", self.user_id);
        s("app_id", self.app_id);
        if let Some(d) = self.delivery_mode {
            m.insert("delivery_mode".into(), json!(d));
        }
        if let Some(p) = self.priority {
            m.insert("priority".into(), json!(p));
        }
        if let Some(t) = self.timestamp {
            m.insert("timestamp".into(), json!(t));
        }
        Value::Object(m)
    }
}

/// A message's properties walked once: the properties borrowed, the headers' JSON text, and the
/// headers' top-level entries (sorted, de-duplicated) to read the record's headers from.
pub(crate) struct Parsed<'a> {
    /// The properties but the headers.
    pub(crate) props: Props<'a>,
    /// The headers as JSON text (`{}` without headers).
    pub(crate) headers_json: String,
    /// The headers' entries.
    pub(crate) headers: Vec<Entry<'a>>,
}

/// Walks encoded properties once; `None` whenever the general decode would not give the same
/// (see the module's doc): the caller then takes the general path.
pub(crate) fn parse(bytes: &[u8]) -> Option<Parsed<'_>> {
    let props = props(bytes)?;
    let Some(body) = props.headers else {
        return Some(Parsed {
            props,
            headers_json: "{}".to_string(),
            headers: Vec::new(),
        });
    };
    let mut out = Vec::with_capacity(body.len() + body.len() / 8 + 16);
    TableJson(body, 1)
        .serialize(&mut serde_json::Serializer::new(&mut out))
        .ok()?;
    let headers_json = String::from_utf8(out).ok()?;
    // The walk above checked the whole table; its top level is read again for the lookups.
    let headers = entries(body)?;
    Some(Parsed {
        props,
        headers_json,
        headers,
    })
}

impl<'a> Parsed<'a> {
    /// A header's value.
    pub(crate) fn header(&self, key: &str) -> Option<Val<'a>> {
        get(&self.headers, key)
    }

    /// A header as text (`extract`'s `text`).
    pub(crate) fn header_text(&self, key: &str) -> Option<String> {
        self.header(key).and_then(|v| v.text())
    }

    /// The sum of the `x-death` counts (an entry without one counts 1) and the routing keys of
    /// the first entry matching `queue` and `reason` (either `None`: any), as `extract` reads them.
    pub(crate) fn deaths(
        &self,
        queue: &Option<String>,
        reason: &Option<String>,
    ) -> (i64, Vec<String>) {
        let mut routing_keys = Vec::new();
        let mut death_count = 0i64;
        let Some(deaths) = self.header("x-death").and_then(|v| v.elements()) else {
            return (death_count, routing_keys);
        };
        for d in deaths {
            let Some(d) = d.table() else {
                continue;
            };
            death_count =
                death_count.wrapping_add(get(&d, "count").and_then(|v| v.int()).unwrap_or(1));
            let same = |k: &str, want: &Option<String>| {
                want.is_none() || get(&d, k).and_then(|v| v.text()) == *want
            };
            if routing_keys.is_empty()
                && same("queue", queue)
                && same("reason", reason)
                && let Some(keys) = get(&d, "routing-keys").and_then(|v| v.elements())
            {
                routing_keys = keys.filter_map(|v| v.text()).collect();
            }
        }
        (death_count, routing_keys)
    }
}
