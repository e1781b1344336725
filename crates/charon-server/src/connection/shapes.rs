//! What a channel's publishes share. A publisher usually sends many alike messages: consecutive
//! publishes with the same exchange, routing key or properties share one allocation of each
//! instead of one per message. Small bodies are copied out of the socket's read buffer, so a
//! queued message does not keep the frames around it (its whole read chunk) alive: a queue of a
//! million 16-byte messages holds 16 bytes of body each, not ~90 bytes of frames.

use std::sync::Arc;

use bytes::Bytes;
use charon_core::{Body, InlineBody};
use charon_protocol::RawProperties;

/// Bodies up to this size are copied into their own buffer (larger ones stay slices of the read
/// buffer, which they fill mostly by themselves).
pub(crate) const SMALL_BODY: usize = 512;

/// The last exchange, routing key and properties a channel published with.
#[derive(Debug, Default)]
pub(crate) struct Shapes {
    exchange: Option<Arc<str>>,
    routing_key: Option<Arc<str>>,
    properties: Option<RawProperties>,
}

impl Shapes {
    /// `exchange` and `routing_key` as shared names (the previous publish's when equal).
    pub(crate) fn names(&mut self, exchange: &str, routing_key: &str) -> (Arc<str>, Arc<str>) {
        (
            intern(&mut self.exchange, exchange),
            intern(&mut self.routing_key, routing_key),
        )
    }

    /// [`Shapes::names`] of names read in place as octets: `None` when one is not UTF-8 (only
    /// names other than the last ones are checked).
    pub(crate) fn names_of(
        &mut self,
        exchange: &[u8],
        routing_key: &[u8],
    ) -> Option<(Arc<str>, Arc<str>)> {
        Some((
            intern_octets(&mut self.exchange, exchange)?,
            intern_octets(&mut self.routing_key, routing_key)?,
        ))
    }

    /// `properties` in a buffer of their own, shared with the previous publish's when equal.
    pub(crate) fn properties(&mut self, properties: RawProperties) -> RawProperties {
        match &self.properties {
            // Already these (read in place, `properties_of`).
            Some(last)
                if last.0.as_ptr() == properties.0.as_ptr()
                    && last.0.len() == properties.0.len() =>
            {
                properties
            }
            _ => self.properties_of(&properties.0),
        }
    }

    /// Property octets read in place, as [`Shapes::properties`] makes them.
    pub(crate) fn properties_of(&mut self, octets: &[u8]) -> RawProperties {
        match &self.properties {
            Some(last) if last.0 == octets => last.clone(),
            _ => {
                let own = RawProperties(Bytes::copy_from_slice(octets));
                self.properties = Some(own.clone());
                own
            }
        }
    }

    /// The last properties published with (none: empty): they passed the framer's check.
    pub(crate) fn last_properties(&self) -> &[u8] {
        self.properties.as_ref().map_or(&[], |p| &p.0[..])
    }
}

fn intern(slot: &mut Option<Arc<str>>, s: &str) -> Arc<str> {
    match slot {
        Some(last) if **last == *s => last.clone(),
        _ => {
            let name: Arc<str> = Arc::from(s);
            *slot = Some(name.clone());
            name
        }
    }
}

fn intern_octets(slot: &mut Option<Arc<str>>, s: &[u8]) -> Option<Arc<str>> {
    match slot {
        Some(last) if last.as_bytes() == s => Some(last.clone()),
        _ => Some(intern(slot, std::str::from_utf8(s).ok()?)),
    }
}

/// A small body copied out of the read buffer; a larger one as it is.
pub(crate) fn own_body(body: Bytes) -> Bytes {
    if body.len() <= SMALL_BODY {
        Bytes::copy_from_slice(&body)
    } else {
        body
    }
}

/// A body frame's payload: a slice of the read buffer split off by the framer, or read in
/// place (small bodies only, `methods/fast.rs` `content_in_place`).
pub(crate) enum BodyPart<'a> {
    /// Split off the read buffer (`decode_frame`).
    Shared(Bytes),
    /// Still in the read buffer.
    InPlace(&'a [u8]),
}

impl BodyPart<'_> {
    /// The payload's octets.
    pub(crate) fn octets(&self) -> &[u8] {
        match self {
            BodyPart::Shared(b) => b,
            BodyPart::InPlace(s) => s,
        }
    }

    /// A whole body: a small one copied out of the read buffer ([`own_body`]), in place in
    /// the message when it fits there ([`charon_core::INLINE_MAX`]).
    pub(crate) fn into_body(self) -> Body {
        match self {
            BodyPart::Shared(b) => match InlineBody::new(&b) {
                Some(inline) => Body::Inline(inline),
                None => Body::Resident(own_body(b)),
            },
            BodyPart::InPlace(s) => Body::copy_from_slice(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alike_publishes_share_names_and_properties_and_others_do_not() {
        let mut s = Shapes::default();
        let (x1, k1) = s.names("x", "k");
        let (x2, k2) = s.names("x", "k");
        assert!(Arc::ptr_eq(&x1, &x2) && Arc::ptr_eq(&k1, &k2));
        let (x3, k3) = s.names("x", "other");
        assert!(Arc::ptr_eq(&x1, &x3));
        assert_eq!(&*k3, "other");
        let p1 = s.properties(RawProperties(Bytes::from_static(&[0x10, 0x00, 0x02])));
        let p2 = s.properties(RawProperties(Bytes::from_static(&[0x10, 0x00, 0x02])));
        assert_eq!(p1.0.as_ptr(), p2.0.as_ptr());
        let p3 = s.properties(RawProperties(Bytes::from_static(&[0x10, 0x00, 0x01])));
        assert_eq!(&p3.0[..], &[0x10, 0x00, 0x01]);
    }

    #[test]
    fn small_bodies_are_copied_out_of_the_read_buffer() {
        let chunk = Bytes::from(vec![7u8; 4096]);
        let small = own_body(chunk.slice(10..26));
        assert_eq!(&small[..], &[7u8; 16]);
        assert!(!std::ptr::eq(small.as_ptr(), chunk[10..].as_ptr()));
        let large = own_body(chunk.slice(0..SMALL_BODY + 1));
        assert!(std::ptr::eq(large.as_ptr(), chunk.as_ptr()));
    }
}
