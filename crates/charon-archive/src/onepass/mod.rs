//! Extraction in one pass over a message's encoded properties (docs/archive.md "Eighth round"):
//! the record of [`crate::extract::extract_general`] without decoding the properties into a
//! `BasicProperties` and its header `FieldTable` (a `BTreeMap` of owned values, ~19,000
//! instructions per record to build and ~5,000 to free, only to read about eight headers).
//!
//! The property octets are walked once: the short-string properties are borrowed, the headers
//! table is written as JSON straight from its octets ([`write`]: exactly the text
//! [`crate::json::table_to_json_text`] writes for the decoded table; its keys and string values
//! checked as UTF-8 once, as the whole text), and the headers the record needs are read from the
//! same table's entries ([`walk`]) — a string header written without an escape as its slice of
//! that checked text, not checked again; the other properties' JSON text is written from the
//! borrowed values ([`Props::to_json_text`]). The general path decodes with
//! `amq-protocol`, whose field table is a `BTreeMap`: its JSON lists keys in byte order and keeps
//! the last of repeated keys; the walk does the same.
//!
//! Whatever this walk does not accept exactly as the general path would — malformed or trailing
//! octets, a short string (property or key) that is not UTF-8, an unknown type tag, tables nested
//! deeper than `MAX_TABLE_NESTING` — makes [`parse`] answer `None`, and the caller takes the
//! general path (which then yields what it always did). `tests/onepass.rs` compares both over
//! arbitrary properties and field tables.

mod walk;
mod write;

use walk::{Cur, Entry, Val, find, get};
use write::{Check, Span};

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
    /// Every property but the headers as JSON text: exactly what `serde_json::to_string` writes
    /// for the object `json::properties_to_json` builds (serde_json's map sorts its keys, so
    /// they are written here in byte order; strings escaped as serde_json escapes them).
    pub(crate) fn to_json_text(&self) -> String {
        use std::fmt::Write as _;
        enum V<'v> {
            S(&'v str),
            N(u64),
        }
        // Sorted by key.
        let fields = [
            ("app_id", self.app_id.map(V::S)),
            ("content_encoding", self.content_encoding.map(V::S)),
            ("content_type", self.content_type.map(V::S)),
            ("correlation_id", self.correlation_id.map(V::S)),
            (
                "delivery_mode",
                self.delivery_mode.map(|d| V::N(u64::from(d))),
            ),
            ("expiration", self.expiration.map(V::S)),
            ("message_id", self.message_id.map(V::S)),
            ("priority", self.priority.map(|p| V::N(u64::from(p)))),
            ("reply_to", self.reply_to.map(V::S)),
            ("timestamp", self.timestamp.map(V::N)),
            ("type", self.kind.map(V::S)),
            ("user_id", self.user_id.map(V::S)),
        ];
        let mut out = String::with_capacity(128);
        out.push('{');
        for (k, v) in fields {
            let Some(v) = v else { continue };
            if out.len() > 1 {
                out.push(',');
            }
            out.push('"');
            out.push_str(k);
            out.push_str("\":");
            match v {
                V::S(s) => write::write_str(&mut out, s),
                V::N(n) => {
                    let _ = write!(out, "{n}");
                }
            }
        }
        out.push('}');
        out
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
    /// Per entry of `headers`: where its text lies in `headers_json`, for a string value written
    /// without an escape.
    spans: Vec<Span>,
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
            spans: Vec::new(),
        });
    };
    let mut json = Vec::with_capacity(body.len() + body.len() / 8 + 16);
    let mut spans = Vec::with_capacity(16);
    let headers = write::write_table(&mut json, body, 1, Check::Once, Some(&mut spans))?;
    let (headers_json, headers) = match String::from_utf8(json) {
        Ok(text) => (text, headers),
        Err(e) => {
            // A key or a string value is not UTF-8: written again, each checked (the rare case).
            let mut json = e.into_bytes();
            json.clear();
            spans.clear();
            let headers = write::write_table(&mut json, body, 1, Check::Each, Some(&mut spans))?;
            (String::from_utf8(json).ok()?, headers)
        }
    };
    Some(Parsed {
        props,
        headers_json,
        headers,
        spans,
    })
}

impl<'a> Parsed<'a> {
    /// A header's value.
    pub(crate) fn header(&self, key: &str) -> Option<Val<'a>> {
        get(&self.headers, key)
    }

    /// A header as text (`extract`'s `text`): a string written without an escape is its slice of
    /// the checked JSON text (the same octets, or with [`Check::Each`] the same lossy text).
    pub(crate) fn header_text(&self, key: &str) -> Option<String> {
        let i = find(&self.headers, key)?;
        if let Some(Some((a, b))) = self.spans.get(i)
            && let Some(t) = self.headers_json.get(*a..*b)
        {
            return Some(t.to_string());
        }
        self.headers.get(i).and_then(|(_, v)| v.text())
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
            let Some([count, d_queue, d_reason, d_keys]) =
                d.table_values(["count", "queue", "reason", "routing-keys"])
            else {
                continue;
            };
            death_count = death_count.wrapping_add(count.and_then(|v| v.int()).unwrap_or(1));
            let same = |v: Option<Val<'_>>, want: &Option<String>| match want {
                None => true,
                Some(w) => v.is_some_and(|v| v.text_is(w)),
            };
            if routing_keys.is_empty()
                && same(d_queue, queue)
                && same(d_reason, reason)
                && let Some(keys) = d_keys.and_then(|v| v.elements())
            {
                routing_keys = keys.filter_map(|v| v.text()).collect();
            }
        }
        (death_count, routing_keys)
    }
}
