//! A dead letter as a record: what the archive keeps of an AMQP message (see docs/archive.md).
//!
//! The original queue, exchange and reason come from `x-first-death-*`, the routing keys from the
//! matching `x-death` entry, the death count is the sum of the `x-death` counts; the failure reason
//! from the configured headers, and its fingerprint groups dead letters by cause.

use bytes::Bytes;
use charon_protocol::{AMQPValue, BasicProperties, FieldTable, RawProperties};
use serde_json::Value;

use crate::json::{properties_to_json, table_to_json_text};
use crate::onepass;

/// Which headers carry what (configurable).
#[derive(Debug, Clone)]
pub struct ExtractConfig {
    /// Header whose value is the record's key; `None`: the `message_id` property.
    pub key_header: Option<String>,
    /// Headers searched in order for the error message.
    pub error_message_headers: Vec<String>,
    /// Headers searched in order for the stack trace.
    pub error_stacktrace_headers: Vec<String>,
}

impl Default for ExtractConfig {
    fn default() -> Self {
        Self {
            key_header: None,
            error_message_headers: vec!["x-exception-message".into()],
            error_stacktrace_headers: vec!["x-exception-stacktrace".into()],
        }
    }
}

/// A record about to be inserted.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRecord {
    /// Unique per stored message (idempotent insert).
    pub stable_key: String,
    /// Vhost.
    pub vhost: String,
    /// The archive queue.
    pub queue: String,
    /// `x-first-death-queue`.
    pub original_queue: Option<String>,
    /// `x-first-death-exchange`.
    pub original_exchange: Option<String>,
    /// The routing keys of that death.
    pub original_routing_keys: Vec<String>,
    /// `x-first-death-reason`.
    pub reason: Option<String>,
    /// Sum of the `x-death` counts.
    pub death_count: i64,
    /// `message_id` property.
    pub message_id: Option<String>,
    /// `correlation_id` property.
    pub correlation_id: Option<String>,
    /// The message key.
    pub key: Option<String>,
    /// `content_type` property.
    pub content_type: Option<String>,
    /// Properties but headers, JSON text (written once, stored as is).
    pub properties: String,
    /// Headers, JSON text (written once, stored as is).
    pub headers: String,
    /// Raw property bytes (exact types).
    pub amqp_properties: Bytes,
    /// Body.
    pub payload: Bytes,
    /// Error message.
    pub error_message: Option<String>,
    /// Stack trace.
    pub error_stacktrace: Option<String>,
    /// Fingerprint of the error.
    pub error_fingerprint: Option<String>,
    /// Archive time, ms.
    pub created_at: i64,
}

fn text(v: &AMQPValue) -> Option<String> {
    match v {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_string()),
        AMQPValue::ByteArray(b) => Some(String::from_utf8_lossy(b.as_slice()).into_owned()),
        AMQPValue::Void => None,
        other => match crate::json::value_to_json(other) {
            Value::String(s) => Some(s),
            j => Some(j.to_string()),
        },
    }
}

fn int(v: &AMQPValue) -> Option<i64> {
    match v {
        AMQPValue::ShortShortInt(x) => Some(i64::from(*x)),
        AMQPValue::ShortShortUInt(x) => Some(i64::from(*x)),
        AMQPValue::ShortInt(x) => Some(i64::from(*x)),
        AMQPValue::ShortUInt(x) => Some(i64::from(*x)),
        AMQPValue::LongInt(x) => Some(i64::from(*x)),
        AMQPValue::LongUInt(x) => Some(i64::from(*x)),
        AMQPValue::LongLongInt(x) => Some(*x),
        AMQPValue::Timestamp(x) => i64::try_from(*x).ok(),
        _ => None,
    }
}

fn get<'a>(t: &'a FieldTable, k: &str) -> Option<&'a AMQPValue> {
    t.inner().get(k)
}

/// Builds the record of a message taken from archive queue `queue` of `vhost`: in one walk over
/// the encoded properties ([`crate::onepass`]), or, where that walk does not take them exactly
/// as decoding would (malformed octets, a short string that is not UTF-8, …), by
/// [`extract_general`]. Both give the same record.
pub fn extract(
    cfg: &ExtractConfig,
    stable_key: String,
    vhost: &str,
    queue: &str,
    properties: &RawProperties,
    body: Bytes,
    now_ms: i64,
) -> NewRecord {
    let Some(p) = onepass::parse(&properties.0) else {
        return extract_general(cfg, stable_key, vhost, queue, properties, body, now_ms);
    };
    let h = |k: &str| p.header_text(k);
    let original_queue = h("x-first-death-queue");
    let original_exchange = h("x-first-death-exchange").or_else(|| h("x-original-exchange"));
    let reason = h("x-first-death-reason");
    let (death_count, routing_keys) = p.deaths(&original_queue, &reason);
    let message_id = p.props.message_id.map(str::to_string);
    let record = NewRecord {
        stable_key,
        vhost: vhost.to_string(),
        queue: queue.to_string(),
        original_queue,
        original_exchange,
        original_routing_keys: routing_keys,
        reason,
        death_count,
        message_id,
        correlation_id: p.props.correlation_id.map(str::to_string),
        key: None,
        content_type: p.props.content_type.map(str::to_string),
        properties: p.props.to_json_text(),
        // Moved in below, once the headers are read (they read its text).
        headers: String::new(),
        amqp_properties: properties.0.clone(),
        payload: body,
        error_message: None,
        error_stacktrace: None,
        error_fingerprint: None,
        created_at: now_ms,
    };
    let mut record = with_headers_read(record, cfg, h);
    record.headers = p.headers_json;
    record
}

/// What both ways of reading a record take from its headers (`h`: a header as text) once the
/// rest is filled: Spring AMQP's `x-original-routingKey` when no x-death entry gave routing
/// keys, the message key (`key_header`, default the message id) and the error texts with their
/// fingerprint.
fn with_headers_read(
    mut r: NewRecord,
    cfg: &ExtractConfig,
    h: impl Fn(&str) -> Option<String>,
) -> NewRecord {
    if r.original_routing_keys.is_empty()
        && let Some(k) = h("x-original-routingKey")
    {
        r.original_routing_keys.push(k);
    }
    r.key = match &cfg.key_header {
        Some(hk) => h(hk),
        None => r.message_id.clone(),
    };
    let first = |names: &[String]| names.iter().find_map(|n| h(n));
    r.error_message = first(&cfg.error_message_headers);
    r.error_stacktrace = first(&cfg.error_stacktrace_headers);
    r.error_fingerprint = fingerprint(r.error_message.as_deref(), r.error_stacktrace.as_deref());
    r
}

/// Whether [`extract`] takes the one-pass walk for these properties (tests: the walk must take
/// every well-formed message).
pub fn takes_one_pass(properties: &RawProperties) -> bool {
    onepass::parse(&properties.0).is_some()
}

/// [`extract`] by decoding the properties with `amq-protocol` into a `BasicProperties` and
/// reading its header `FieldTable`: the general path, taken for what the one-pass walk refuses,
/// and the model `tests/onepass.rs` compares that walk with.
pub fn extract_general(
    cfg: &ExtractConfig,
    stable_key: String,
    vhost: &str,
    queue: &str,
    properties: &RawProperties,
    body: Bytes,
    now_ms: i64,
) -> NewRecord {
    let props: BasicProperties = properties.decode().unwrap_or_default();
    let empty = FieldTable::default();
    let headers = props.headers().as_ref().unwrap_or(&empty);
    let h = |k: &str| get(headers, k).and_then(text);
    // Dead-lettered by a queue: x-first-death-*; republished by Spring AMQP's
    // RepublishMessageRecoverer: x-original-exchange / x-original-routingKey.
    let original_queue = h("x-first-death-queue");
    let original_exchange = h("x-first-death-exchange").or_else(|| h("x-original-exchange"));
    let reason = h("x-first-death-reason");
    let mut routing_keys = Vec::new();
    let mut death_count = 0i64;
    if let Some(AMQPValue::FieldArray(deaths)) = get(headers, "x-death") {
        for d in deaths.as_slice() {
            let AMQPValue::FieldTable(d) = d else {
                continue;
            };
            // Wrapping, as release builds add (a debug build would panic on absurd counts).
            death_count = death_count.wrapping_add(get(d, "count").and_then(int).unwrap_or(1));
            let same = |k: &str, want: &Option<String>| {
                want.is_none() || get(d, k).and_then(text) == *want
            };
            if routing_keys.is_empty()
                && same("queue", &original_queue)
                && same("reason", &reason)
                && let Some(AMQPValue::FieldArray(keys)) = get(d, "routing-keys")
            {
                routing_keys = keys.as_slice().iter().filter_map(text).collect();
            }
        }
    }
    let message_id = props.message_id().as_ref().map(|s| s.as_str().to_string());
    let record = NewRecord {
        stable_key,
        vhost: vhost.to_string(),
        queue: queue.to_string(),
        original_queue,
        original_exchange,
        original_routing_keys: routing_keys,
        reason,
        death_count,
        message_id,
        correlation_id: props
            .correlation_id()
            .as_ref()
            .map(|s| s.as_str().to_string()),
        key: None,
        content_type: props
            .content_type()
            .as_ref()
            .map(|s| s.as_str().to_string()),
        properties: serde_json::to_string(&properties_to_json(&props))
            .unwrap_or_else(|_| "{}".into()),
        headers: table_to_json_text(headers),
        amqp_properties: properties.0.clone(),
        payload: body,
        error_message: None,
        error_stacktrace: None,
        error_fingerprint: None,
        created_at: now_ms,
    };
    with_headers_read(record, cfg, h)
}

/// The error with what varies between occurrences taken out: numbers, hex ids and UUIDs become
/// `#`, quoted strings `"…"`; only the first line of the message, plus the first `at …` frame of
/// the stack trace.
pub fn normalise_error(message: Option<&str>, stacktrace: Option<&str>) -> Option<String> {
    let (first_line, frame) = error_parts(message, stacktrace)?;
    let mut out = String::with_capacity(first_line.len() + frame.map_or(0, |f| f.len() + 3));
    normalise_parts(first_line, frame, &mut out);
    Some(out)
}

/// What [`normalise_error`] normalises: the message's first line (trimmed; empty without a
/// message) and the stack trace's first frame; `None` when both are empty or absent.
fn error_parts<'a>(
    message: Option<&'a str>,
    stacktrace: Option<&'a str>,
) -> Option<(&'a str, Option<&'a str>)> {
    let first_line = message.map(|m| m.lines().next().unwrap_or("").trim());
    let frame = stacktrace.and_then(|s| {
        s.lines()
            .map(str::trim)
            .find(|l| l.starts_with("at ") || l.starts_with("File "))
    });
    if first_line.is_none_or(str::is_empty) && frame.is_none() {
        return None;
    }
    Some((first_line.unwrap_or(""), frame))
}

/// Writes the normalised error of `first_line` and `frame` ([`error_parts`]) to `out`.
fn normalise_parts(first_line: &str, frame: Option<&str>, out: &mut impl Out) {
    normalise_into(first_line, out);
    if let Some(f) = frame {
        out.put_str(" @ ");
        normalise_into(f, out);
    }
}

/// Where normalised text goes: a `String` ([`normalise_error`]) or straight into the
/// fingerprint's hash ([`fingerprint`]: the same octets hashed, no text built).
trait Out {
    fn put_str(&mut self, s: &str);
    fn put_char(&mut self, c: char);
}

impl Out for String {
    fn put_str(&mut self, s: &str) {
        self.push_str(s);
    }
    fn put_char(&mut self, c: char) {
        self.push(c);
    }
}

/// FNV-1a 64 over the octets written.
struct Fnv(u64);

impl Fnv {
    fn byte(&mut self, b: u8) {
        self.0 ^= u64::from(b);
        self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
    }
}

impl Out for Fnv {
    fn put_str(&mut self, s: &str) {
        for b in s.bytes() {
            self.byte(b);
        }
    }
    fn put_char(&mut self, c: char) {
        let mut buf = [0u8; 4];
        self.put_str(c.encode_utf8(&mut buf));
    }
}

/// A token's characters: words, ids, numbers.
fn is_token_char(c: char) -> bool {
    c.is_alphanumeric() || c == '-' || c == '_'
}

/// Appends `s` normalised to `out`, borrowing slices of `s` (no allocation per token).
fn normalise_into(s: &str, out: &mut impl Out) {
    if s.is_ascii() {
        return normalise_ascii(s, out);
    }
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        let w = c.len_utf8();
        if (c == '"' || c == '\'')
            && let Some(end) = rest[w..].find(c)
        {
            out.put_str("\"…\"");
            rest = &rest[w + end + w..];
            continue;
        }
        if is_token_char(c) {
            // A token: words stay, tokens with digits (ids, numbers, uuids, hex) become '#'.
            let len = rest.find(|x: char| !is_token_char(x)).unwrap_or(rest.len());
            let tok = &rest[..len];
            if tok.bytes().any(|b| b.is_ascii_digit()) {
                out.put_char('#');
            } else {
                out.put_str(tok);
            }
            rest = &rest[len..];
            continue;
        }
        out.put_char(c);
        rest = &rest[w..];
    }
}

/// Octet classes of [`normalise_ascii`]: a token's letter (`-`, `_`, letters), a digit, a quote.
const LETTER: u8 = 1;
const DIGIT: u8 = 2;
const QUOTE: u8 = 4;
const CLASS: [u8; 128] = {
    let mut t = [0u8; 128];
    let mut i = 0;
    while i < 128 {
        let b = i as u8;
        t[i] = if b.is_ascii_digit() {
            DIGIT
        } else if b.is_ascii_alphabetic() || b == b'-' || b == b'_' {
            LETTER
        } else if b == b'"' || b == b'\'' {
            QUOTE
        } else {
            0
        };
        i += 1;
    }
    t
};

fn class(b: u8) -> u8 {
    CLASS.get(usize::from(b)).copied().unwrap_or(0)
}

/// [`normalise_into`] of ASCII text, octet by octet (for ASCII, `char::is_alphanumeric` is
/// `u8::is_ascii_alphanumeric`): the same output without decoding characters; a token is read
/// in one pass that notes whether it has a digit, and a run of other octets is written at once.
fn normalise_ascii(s: &str, out: &mut impl Out) {
    let b = s.as_bytes();
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        let k = class(c);
        if k & QUOTE != 0
            && let Some(end) = b.get(i + 1..).and_then(|r| r.iter().position(|x| *x == c))
        {
            out.put_str("\"…\"");
            i += end + 2;
            continue;
        }
        if k & (LETTER | DIGIT) != 0 {
            let mut j = i + 1;
            let mut digits = k;
            while let Some(&x) = b.get(j) {
                let kx = class(x);
                if kx & (LETTER | DIGIT) == 0 {
                    break;
                }
                digits |= kx;
                j += 1;
            }
            if digits & DIGIT != 0 {
                out.put_char('#');
            } else {
                out.put_str(s.get(i..j).unwrap_or_default());
            }
            i = j;
            continue;
        }
        // Punctuation and spaces up to the next token or quote, written as they are.
        let mut j = i + 1;
        while let Some(&x) = b.get(j) {
            if class(x) != 0 {
                break;
            }
            j += 1;
        }
        out.put_str(s.get(i..j).unwrap_or_default());
        i = j;
    }
}

/// FNV-1a 64 of the normalised error, as 16 hex digits. The normalised text is hashed as it is
/// produced, not built first.
pub fn fingerprint(message: Option<&str>, stacktrace: Option<&str>) -> Option<String> {
    let (first_line, frame) = error_parts(message, stacktrace)?;
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    normalise_parts(first_line, frame, &mut h);
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(16);
    for shift in (0..16).rev() {
        let nibble = (h.0 >> (shift * 4)) & 15;
        out.push(char::from(HEX[nibble as usize]));
    }
    Some(out)
}

/// The failure reason in `headers` per `cfg`: (error message, stack trace, fingerprint), as a
/// record would carry it. The broker's per-queue error counters use it for every dead letter.
pub fn error_of(
    cfg: &ExtractConfig,
    headers: &FieldTable,
) -> (Option<String>, Option<String>, Option<String>) {
    let first = |names: &[String]| names.iter().find_map(|n| get(headers, n).and_then(text));
    let message = first(&cfg.error_message_headers);
    let stacktrace = first(&cfg.error_stacktrace_headers);
    let fp = fingerprint(message.as_deref(), stacktrace.as_deref());
    (message, stacktrace, fp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use charon_protocol::{FieldArray, LongString, ShortString};

    fn props(headers: FieldTable) -> RawProperties {
        RawProperties::encode(
            &BasicProperties::default()
                .with_message_id(ShortString::from("m-1"))
                .with_content_type(ShortString::from("application/json"))
                .with_headers(headers),
        )
    }

    fn ls(s: &str) -> AMQPValue {
        AMQPValue::LongString(LongString::from(s.as_bytes().to_vec()))
    }

    #[test]
    fn reads_first_death_x_death_and_error_headers() {
        let mut death = FieldTable::default();
        death.insert("queue".into(), ls("orders"));
        death.insert("reason".into(), ls("rejected"));
        death.insert("count".into(), AMQPValue::LongLongInt(3));
        death.insert("exchange".into(), ls("orders.x"));
        death.insert(
            "routing-keys".into(),
            AMQPValue::FieldArray(FieldArray::from(vec![ls("order.created")])),
        );
        let mut h = FieldTable::default();
        h.insert(
            "x-death".into(),
            AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(death)])),
        );
        h.insert("x-first-death-queue".into(), ls("orders"));
        h.insert("x-first-death-exchange".into(), ls("orders.x"));
        h.insert("x-first-death-reason".into(), ls("rejected"));
        h.insert("x-exception-message".into(), ls("Order 17 not found"));
        h.insert("tenant".into(), ls("acme"));
        let body = Bytes::from_static(b"{\"order\":17}");
        let cfg = ExtractConfig::default();
        let r = extract(
            &cfg,
            "k".into(),
            "/",
            "dlq",
            &props(h.clone()),
            body.clone(),
            5,
        );
        assert_eq!(r.original_queue.as_deref(), Some("orders"));
        assert_eq!(r.original_exchange.as_deref(), Some("orders.x"));
        assert_eq!(r.original_routing_keys, vec!["order.created".to_string()]);
        assert_eq!(r.reason.as_deref(), Some("rejected"));
        assert_eq!(r.death_count, 3);
        assert_eq!(r.key.as_deref(), Some("m-1"));
        assert_eq!(r.content_type.as_deref(), Some("application/json"));
        assert_eq!(r.error_message.as_deref(), Some("Order 17 not found"));
        assert_eq!(r.payload, body);
        let headers: Value = serde_json::from_str(&r.headers).expect("headers JSON");
        assert_eq!(headers["tenant"], "acme");
        let keyed = ExtractConfig {
            key_header: Some("tenant".into()),
            ..ExtractConfig::default()
        };
        let r2 = extract(&keyed, "k".into(), "/", "dlq", &props(h), body, 5);
        assert_eq!(r2.key.as_deref(), Some("acme"));
    }

    #[test]
    fn fingerprint_groups_by_cause() {
        let a = fingerprint(Some("Order 123 not found"), None);
        let b = fingerprint(Some("Order 456 not found"), None);
        let c = fingerprint(Some("Payment declined for 'bob'"), None);
        let d = fingerprint(Some("Payment declined for 'alice'"), None);
        let e = fingerprint(
            Some("id 550e8400-e29b-41d4-a716-446655440000 bad\nmore"),
            None,
        );
        let f = fingerprint(Some("id 6ba7b810-9dad-11d1-80b4-00c04fd430c8 bad"), None);
        assert_eq!(a, b);
        assert_eq!(c, d);
        assert_eq!(e, f);
        assert_ne!(a, c);
        assert_eq!(fingerprint(None, None), None);
        let s1 = fingerprint(
            Some("boom"),
            Some("java.lang.X: boom\n\tat a.B.c(B.java:12)"),
        );
        let s2 = fingerprint(
            Some("boom"),
            Some("java.lang.X: boom\n\tat a.B.c(B.java:99)"),
        );
        let s3 = fingerprint(
            Some("boom"),
            Some("java.lang.X: boom\n\tat z.Y.q(Y.java:1)"),
        );
        assert_eq!(s1, s2);
        assert_ne!(s1, s3);
    }

    /// The implementation before the seventh round (a `Vec<char>` and a `String` per token):
    /// the fingerprints already stored must not change.
    fn normalise_error_v1(message: Option<&str>, stacktrace: Option<&str>) -> Option<String> {
        let first_line = message.map(|m| m.lines().next().unwrap_or("").trim().to_string());
        let frame = stacktrace.and_then(|s| {
            s.lines()
                .map(str::trim)
                .find(|l| l.starts_with("at ") || l.starts_with("File "))
                .map(str::to_string)
        });
        if first_line.as_deref().is_none_or(str::is_empty) && frame.is_none() {
            return None;
        }
        let mut out = normalise_v1(first_line.as_deref().unwrap_or(""));
        if let Some(f) = frame {
            out.push_str(" @ ");
            out.push_str(&normalise_v1(&f));
        }
        Some(out)
    }

    fn normalise_v1(s: &str) -> String {
        let mut out = String::with_capacity(s.len());
        let chars: Vec<char> = s.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if (c == '"' || c == '\'')
                && let Some(end) = chars[i + 1..].iter().position(|&x| x == c)
            {
                out.push_str("\"…\"");
                i += end + 2;
                continue;
            }
            if c.is_alphanumeric() || c == '-' || c == '_' {
                // A token: words stay, tokens with digits (ids, numbers, uuids, hex) become '#'.
                let start = i;
                while i < chars.len()
                    && (chars[i].is_alphanumeric() || chars[i] == '-' || chars[i] == '_')
                {
                    i += 1;
                }
                let tok: String = chars[start..i].iter().collect();
                if tok.chars().any(|c| c.is_ascii_digit()) {
                    out.push('#');
                } else {
                    out.push_str(&tok);
                }
                continue;
            }
            out.push(c);
            i += 1;
        }
        out
    }

    /// The fingerprint as it was computed before the fifteenth round: FNV-1a 64 of the text of
    /// [`normalise_error_v1`], formatted with `format!`.
    fn fingerprint_v1(message: Option<&str>, stacktrace: Option<&str>) -> Option<String> {
        let n = normalise_error_v1(message, stacktrace)?;
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in n.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        Some(format!("{h:016x}"))
    }

    proptest::proptest! {
        /// Any text, ASCII (the octet path) or not: the fingerprints stored stay the same.
        #[test]
        fn normalise_is_unchanged_on_any_text(
            m in "[ -~\n\t'\"0-9a-f]{0,60}|\\PC{0,30}",
            t in proptest::option::of("[ -~\n\t]{0,40}\n\tat [ -~]{0,40}|\\PC{0,30}"),
        ) {
            proptest::prop_assert_eq!(
                normalise_error(Some(&m), t.as_deref()),
                normalise_error_v1(Some(&m), t.as_deref())
            );
            proptest::prop_assert_eq!(
                fingerprint(Some(&m), t.as_deref()),
                fingerprint_v1(Some(&m), t.as_deref())
            );
            proptest::prop_assert_eq!(fingerprint(None, t.as_deref()), fingerprint_v1(None, t.as_deref()));
        }
    }

    #[test]
    fn normalise_is_unchanged() {
        let samples = [
            "",
            "boom",
            "Order 123 not found",
            "Payment declined for 'bob' and \"x y\" then 'unterminated",
            "id 550e8400-e29b-41d4-a716-446655440000 bad",
            "ünïcödé wörds 42 «quoted» 'é' \"ß\"",
            "a_b-c 0x1F __ -- ' \"",
            "   spaced\tout  \n second line 7",
            "日本語のエラー 12 件",
            "'",
            "\"\"",
            "x'y'z\"",
            "Order 17 could not be processed: cause 7 (a-b_c, x.y/z) '' \"q",
            "--__-- 9a 'x\" y' z\"",
        ];
        let traces = [
            None,
            Some("java.lang.X: boom\n\tat a.B.c(B.java:12)"),
            Some("Traceback\n  File \"x.py\", line 3, in f"),
            Some("no frame here"),
            Some("\tat ünï.Cödé(Ä.java:9) 'q'"),
        ];
        for m in samples {
            for t in traces {
                for msg in [Some(m), None] {
                    assert_eq!(
                        normalise_error(msg, t),
                        normalise_error_v1(msg, t),
                        "{msg:?} {t:?}"
                    );
                    assert_eq!(fingerprint(msg, t), fingerprint_v1(msg, t), "{msg:?} {t:?}");
                }
            }
        }
    }
}
