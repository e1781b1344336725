//! [`RawProperties`]: content-header properties kept as the raw bytes the
//! publisher sent (RabbitMQ's `properties_bin`).
//!
//! The broker forwards them to consumers byte-for-byte and only looks inside
//! when it needs a field: [`RawProperties::delivery_mode`] and
//! [`RawProperties::expiration`] walk the flags and skip fields without
//! allocating; [`RawProperties::decode`] does a full decode via
//! `amq-protocol`.
//!
//! Layout (basic class): a 16-bit flag word, bit 15 = first property, then
//! the present properties in order. Bits 1 and 0 (bit 0 is the
//! "continuation" flag) are ignored, as RabbitMQ and amq-protocol do.

use amq_protocol::frame::WriteContext;
use amq_protocol::protocol::basic::{gen_properties, parse_properties};
use bytes::Bytes;

use crate::BasicProperties;
use crate::error::FrameError;
use crate::table::skip_table;
use crate::wire::Reader;

/// Property flags + property list exactly as received (everything after
/// class-id, weight, body-size).
///
/// `Default` is [`RawProperties::empty`] (flags `0x0000`). A zero-length
/// value (e.g. `RawProperties(Bytes::new())`) is treated as "no properties"
/// everywhere, and encoded as flags `0x0000`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawProperties(pub Bytes);

impl Default for RawProperties {
    fn default() -> Self {
        Self::empty()
    }
}

/// What kind of value a basic property is, indexed by property number
/// (0 = content-type = flag bit 15).
#[derive(Clone, Copy)]
enum Kind {
    Short,
    Table,
    Octet,
    Timestamp,
}

const KINDS: [Kind; 14] = [
    Kind::Short,     // content-type
    Kind::Short,     // content-encoding
    Kind::Table,     // headers
    Kind::Octet,     // delivery-mode
    Kind::Octet,     // priority
    Kind::Short,     // correlation-id
    Kind::Short,     // reply-to
    Kind::Short,     // expiration
    Kind::Short,     // message-id
    Kind::Timestamp, // timestamp
    Kind::Short,     // type
    Kind::Short,     // user-id
    Kind::Short,     // app-id
    Kind::Short,     // cluster-id
];

const DELIVERY_MODE: usize = 3;
const PRIORITY: usize = 4;
const EXPIRATION: usize = 7;

fn malformed(offset: usize, reason: &'static str) -> FrameError {
    FrameError::MalformedProperties { offset, reason }
}

impl RawProperties {
    /// No properties: flags `0x0000`.
    pub fn empty() -> Self {
        RawProperties(Bytes::from_static(&[0, 0]))
    }

    /// Bytes to put on the wire (never empty: a zero-length value becomes
    /// flags `0x0000`).
    pub fn wire_bytes(&self) -> &[u8] {
        if self.0.is_empty() { &[0, 0] } else { &self.0 }
    }

    /// The 16-bit property flags (0 if absent).
    pub fn flags(&self) -> u16 {
        crate::wire::be_u16_at(&self.0, 0).unwrap_or(0)
    }

    /// Walk the present properties up to (not including) property number
    /// `target`; returns a reader positioned at it if it is present.
    fn seek(&self, target: usize) -> Option<Reader<'_>> {
        let flags = self.flags();
        if flags & (1 << (15 - target)) == 0 {
            return None;
        }
        let mut r = Reader::new(&self.0);
        r.skip(2)?;
        for (i, kind) in KINDS.iter().enumerate().take(target) {
            if flags & (1 << (15 - i)) != 0 {
                match kind {
                    Kind::Short => r.short_str().map(|_| ())?,
                    Kind::Octet => r.skip(1)?,
                    Kind::Timestamp => r.skip(8)?,
                    Kind::Table => r.long_str().map(|_| ())?,
                }
            }
        }
        Some(r)
    }

    /// `delivery-mode` without a full decode (None if absent or if the
    /// bytes before it are malformed).
    pub fn delivery_mode(&self) -> Option<u8> {
        self.seek(DELIVERY_MODE)?.u8()
    }

    /// `priority` without a full decode (None if absent or if the bytes before it are
    /// malformed).
    pub fn priority(&self) -> Option<u8> {
        self.seek(PRIORITY)?.u8()
    }

    /// `expiration` (raw short-string bytes) without a full decode (None if
    /// absent or if the bytes up to it are malformed).
    pub fn expiration(&self) -> Option<&[u8]> {
        self.seek(EXPIRATION)?.short_str()
    }

    /// Check the structure without allocating: every present property fits,
    /// the headers table is well formed and not nested deeper than
    /// [`MAX_TABLE_NESTING`](crate::MAX_TABLE_NESTING), no trailing bytes.
    /// Short strings are not checked for UTF-8 (RabbitMQ does not either);
    /// [`decode`](Self::decode) still fails on invalid UTF-8.
    pub fn validate(&self) -> Result<(), FrameError> {
        validate_properties(&self.0)
    }

    /// Full decode via `amq-protocol`.
    pub fn decode(&self) -> Result<BasicProperties, FrameError> {
        if self.0.is_empty() {
            return Ok(BasicProperties::default());
        }
        self.validate()?;
        match parse_properties(self.0.as_ref()) {
            Ok(([], props)) => Ok(props),
            Ok((rest, _)) => Err(malformed(
                self.0.len().saturating_sub(rest.len()),
                "trailing bytes after the last property",
            )),
            Err(_) => Err(malformed(
                0,
                "property value does not decode (malformed UTF-8 in a short string?)",
            )),
        }
    }

    /// Encode via `amq-protocol`.
    pub fn encode(props: &BasicProperties) -> Self {
        match gen_properties(props)(WriteContext::from(Vec::with_capacity(64))) {
            Ok(ctx) => RawProperties(Bytes::from(ctx.into_inner().0)),
            // Writing to a Vec cannot fail; fall back to "no properties".
            Err(_) => RawProperties::empty(),
        }
    }
}

/// [`RawProperties::validate`] of property octets (flags + property list).
pub(crate) fn validate_properties(bytes: &[u8]) -> Result<(), FrameError> {
    if bytes.is_empty() {
        return Ok(());
    }
    let mut r = Reader::new(bytes);
    let flags = r
        .u16()
        .ok_or_else(|| malformed(0, "property flags truncated"))?;
    for (i, kind) in KINDS.iter().enumerate() {
        if flags & (1 << (15 - i)) == 0 {
            continue;
        }
        let at = r.pos();
        let ok = match kind {
            Kind::Short => r.short_str().map(|_| ()),
            Kind::Octet => r.skip(1),
            Kind::Timestamp => r.skip(8),
            Kind::Table => {
                skip_table(&mut r, 0, 0).map_err(|e| malformed(e.offset, e.reason))?;
                Some(())
            }
        };
        if ok.is_none() {
            return Err(malformed(at, "property value truncated"));
        }
    }
    if r.remaining() != 0 {
        return Err(malformed(r.pos(), "trailing bytes after the last property"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ShortString;

    #[test]
    fn empty_and_default() {
        assert_eq!(RawProperties::default(), RawProperties::empty());
        assert_eq!(
            RawProperties::empty().decode(),
            Ok(BasicProperties::default())
        );
        assert_eq!(
            RawProperties(Bytes::new()).decode(),
            Ok(BasicProperties::default())
        );
        assert_eq!(RawProperties::empty().delivery_mode(), None);
        assert_eq!(
            RawProperties::encode(&BasicProperties::default()),
            RawProperties::empty()
        );
    }

    #[test]
    fn fast_readers() {
        let p = BasicProperties::default()
            .with_content_type(ShortString::from("text/plain"))
            .with_delivery_mode(2)
            .with_expiration(ShortString::from("60000"));
        let raw = RawProperties::encode(&p);
        assert_eq!(raw.delivery_mode(), Some(2));
        assert_eq!(raw.expiration(), Some(&b"60000"[..]));
        assert!(raw.validate().is_ok());
        assert_eq!(raw.decode(), Ok(p));
    }

    #[test]
    fn trailing_and_truncated() {
        let raw = RawProperties(Bytes::from_static(&[0x10, 0x00, 2, 9]));
        assert!(raw.validate().is_err());
        assert!(raw.decode().is_err());
        assert_eq!(raw.delivery_mode(), Some(2));
        let raw = RawProperties(Bytes::from_static(&[0x10, 0x00]));
        assert!(raw.validate().is_err());
        assert_eq!(raw.delivery_mode(), None);
        let raw = RawProperties(Bytes::from_static(&[0x10]));
        assert!(raw.validate().is_err());
    }
}
