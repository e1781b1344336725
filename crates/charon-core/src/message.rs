//! The published message as it travels from a channel through exchanges to
//! queues. Immutable once built and shared as `Arc<Message>`.

use std::sync::Arc;

use bytes::Bytes;
use charon_protocol::RawProperties;

/// A message as published (exchange and routing key of the publish).
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Exchange it was published to.
    pub exchange: Arc<str>,
    /// Routing key it was published with.
    pub routing_key: Arc<str>,
    /// Content-header properties, raw.
    pub properties: RawProperties,
    /// Body (all body frames concatenated), or only its length when it is paged out.
    pub body: Body,
    /// The `BCC` routing keys it was published with: the header itself is removed at publish
    /// (BCC never reaches a consumer), but dead-lettering without a dead-letter routing key
    /// routes by them again.
    pub bcc: Bcc,
}

/// A message body: in memory, or paged out to the store under memory pressure (only its length
/// is kept; the owner reads it back before the message leaves the broker).
///
/// A small body ([`INLINE_MAX`] bytes or fewer) is kept inside the message itself (`Inline`): a
/// publish of one then makes one allocation (the `Arc<Message>`) instead of two, and dropping
/// the message frees one (docs/performance.md, "part 23"). `Body` is 40 bytes either way.
/// Equality is by content: an inline body equals a resident one with the same bytes.
#[derive(Debug, Clone)]
pub enum Body {
    /// The body's bytes.
    Resident(Bytes),
    /// A small body's bytes, held in place.
    Inline(InlineBody),
    /// On disk only.
    Paged {
        /// Its length in bytes.
        len: u64,
    },
}

/// The most bytes a body kept in place ([`Body::Inline`]) holds: as many as fit beside the
/// enum's tag and the length in the 40 bytes a `Body` takes anyway (`Bytes` is 32 and the tag
/// needs a word of its own).
pub const INLINE_MAX: usize = 38;

/// A small body's bytes in place ([`Body::Inline`]).
#[derive(Clone, Copy)]
pub struct InlineBody {
    len: u8,
    bytes: [u8; INLINE_MAX],
}

impl InlineBody {
    /// `bytes` in place, when they fit ([`INLINE_MAX`]).
    pub fn new(bytes: &[u8]) -> Option<Self> {
        if bytes.len() > INLINE_MAX {
            return None;
        }
        let mut b = InlineBody {
            len: bytes.len() as u8,
            bytes: [0; INLINE_MAX],
        };
        b.bytes[..bytes.len()].copy_from_slice(bytes);
        Some(b)
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl std::fmt::Debug for InlineBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("InlineBody").field(&self.as_slice()).finish()
    }
}

impl Body {
    /// `bytes` as a body: in place when small ([`INLINE_MAX`]), else copied into a buffer of
    /// their own.
    pub fn copy_from_slice(bytes: &[u8]) -> Self {
        match InlineBody::new(bytes) {
            Some(b) => Body::Inline(b),
            None => Body::Resident(Bytes::copy_from_slice(bytes)),
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Body::Resident(b) => b.len() as u64,
            Body::Inline(b) => u64::from(b.len),
            Body::Paged { len } => *len,
        }
    }

    /// Whether the body has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes to put on the wire. The owner reads a paged body back before a message leaves
    /// the broker; one it could not read back (an I/O error, logged there) goes out empty.
    pub fn wire_bytes(&self) -> &[u8] {
        self.resident().unwrap_or(&[])
    }

    /// The bytes, when in memory.
    pub fn resident(&self) -> Option<&[u8]> {
        match self {
            Body::Resident(b) => Some(b),
            Body::Inline(b) => Some(b.as_slice()),
            Body::Paged { .. } => None,
        }
    }

    /// The bytes as a shared buffer, when in memory (an inline body is copied into one).
    pub fn to_bytes(&self) -> Option<Bytes> {
        match self {
            Body::Resident(b) => Some(b.clone()),
            Body::Inline(b) => Some(Bytes::copy_from_slice(b.as_slice())),
            Body::Paged { .. } => None,
        }
    }
}

impl PartialEq for Body {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Body::Paged { len: a }, Body::Paged { len: b }) => a == b,
            (Body::Paged { .. }, _) | (_, Body::Paged { .. }) => false,
            _ => self.resident() == other.resident(),
        }
    }
}

impl Eq for Body {}

impl From<Bytes> for Body {
    fn from(b: Bytes) -> Self {
        Body::Resident(b)
    }
}

impl PartialEq<Bytes> for Body {
    fn eq(&self, other: &Bytes) -> bool {
        self.resident() == Some(&other[..])
    }
}

/// The `BCC` routing keys of a message ([`Message::bcc`]): most messages have none, so the keys
/// sit behind one thin pointer (8 bytes in every message instead of 16).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
// A thin pointer on purpose: `Vec` alone (24 bytes) or `Box<[_]>` (16) is what this saves.
#[allow(clippy::box_collection)]
pub struct Bcc(Option<Box<Vec<Arc<str>>>>);

impl Bcc {
    /// These keys (none: no allocation).
    pub fn new(keys: Vec<Arc<str>>) -> Self {
        if keys.is_empty() {
            Bcc(None)
        } else {
            Bcc(Some(Box::new(keys)))
        }
    }
}

impl std::ops::Deref for Bcc {
    type Target = [Arc<str>];

    fn deref(&self) -> &[Arc<str>] {
        self.0.as_deref().map_or(&[], |v| &v[..])
    }
}

impl Message {
    /// Build a message.
    pub fn new(
        exchange: impl Into<Arc<str>>,
        routing_key: impl Into<Arc<str>>,
        properties: RawProperties,
        body: impl Into<Body>,
    ) -> Self {
        Message {
            exchange: exchange.into(),
            routing_key: routing_key.into(),
            properties,
            body: body.into(),
            bcc: Bcc::default(),
        }
    }

    /// The same message with its BCC routing keys recorded.
    #[must_use]
    pub fn with_bcc(mut self, bcc: Vec<Arc<str>>) -> Self {
        self.bcc = Bcc::new(bcc);
        self
    }

    /// Body size in bytes (what RabbitMQ counts for `x-max-length-bytes`).
    pub fn body_size(&self) -> u64 {
        self.body.len()
    }

    /// Whether the body is on disk only.
    pub fn is_paged(&self) -> bool {
        matches!(self.body, Body::Paged { .. })
    }

    /// The same message without its body in memory (same [`Self::body_size`]).
    #[must_use]
    pub fn paged_out(&self) -> Message {
        Message {
            exchange: self.exchange.clone(),
            routing_key: self.routing_key.clone(),
            properties: self.properties.clone(),
            body: Body::Paged {
                len: self.body_size(),
            },
            bcc: self.bcc.clone(),
        }
    }

    /// The same message with its body back in memory.
    #[must_use]
    pub fn with_body(&self, body: Bytes) -> Message {
        Message {
            exchange: self.exchange.clone(),
            routing_key: self.routing_key.clone(),
            properties: self.properties.clone(),
            body: Body::Resident(body),
            bcc: self.bcc.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_message_stays_in_mimalloc_s_128_byte_size_class() {
        // `Arc<Message>` = two counters (16) + the message: 128 bytes, the size class it was
        // in before bodies were kept in place. `Body` grew by 8 bytes, `Bcc` shrank by 8.
        assert_eq!(std::mem::size_of::<Body>(), 40);
        assert_eq!(std::mem::size_of::<Bcc>(), 8);
        assert_eq!(std::mem::size_of::<Message>(), 112);
    }

    #[test]
    fn bcc_keys_read_back_and_none_allocate_nothing() {
        assert!(Bcc::new(Vec::new()).0.is_none());
        let keys: Vec<Arc<str>> = vec![Arc::from("a"), Arc::from("b")];
        let m = Message::new("x", "k", RawProperties::default(), Bytes::new()).with_bcc(keys);
        assert_eq!(m.bcc.iter().map(|k| &**k).collect::<Vec<_>>(), ["a", "b"]);
        assert!(
            Message::new("x", "k", RawProperties::default(), Bytes::new())
                .bcc
                .is_empty()
        );
    }

    proptest! {
        /// A body made from bytes against the model (the bytes themselves): every view of it
        /// is the bytes, it is kept in place exactly when it fits, it equals the resident body
        /// of the same bytes (both ways) and differs from any other, and paging it out keeps
        /// its length. Fails on the mutation "`len > INLINE_MAX` written `len >= INLINE_MAX`"
        /// (a body of exactly INLINE_MAX bytes is not kept in place) and on "the length byte
        /// not stored" (every view empty).
        #[test]
        fn a_body_is_its_bytes_and_is_in_place_exactly_when_small(
            bytes in proptest::collection::vec(any::<u8>(), 0..=(INLINE_MAX + 24)),
            other in proptest::collection::vec(any::<u8>(), 0..=(INLINE_MAX + 24)),
        ) {
            let body = Body::copy_from_slice(&bytes);
            prop_assert_eq!(matches!(body, Body::Inline(_)), bytes.len() <= INLINE_MAX);
            prop_assert_eq!(body.len(), bytes.len() as u64);
            prop_assert_eq!(body.is_empty(), bytes.is_empty());
            prop_assert_eq!(body.wire_bytes(), &bytes[..]);
            prop_assert_eq!(body.resident(), Some(&bytes[..]));
            prop_assert_eq!(body.to_bytes(), Some(Bytes::copy_from_slice(&bytes)));
            let resident = Body::Resident(Bytes::copy_from_slice(&bytes));
            prop_assert_eq!(&body, &resident);
            prop_assert_eq!(&resident, &body);
            prop_assert!(body == Bytes::copy_from_slice(&bytes));
            prop_assert_eq!(body == Body::copy_from_slice(&other), bytes == other);
            let m = Message::new("x", "k", RawProperties::default(), body.clone());
            let paged = m.paged_out();
            prop_assert!(paged.is_paged() && !m.is_paged());
            prop_assert_eq!(paged.body_size(), bytes.len() as u64);
            prop_assert!(paged.body != body);
            prop_assert_eq!(paged.body.resident(), None);
            prop_assert_eq!(paged.with_body(Bytes::copy_from_slice(&bytes)), m);
        }
    }
}
