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
    pub bcc: Box<[Arc<str>]>,
}

/// A message body: in memory, or paged out to the store under memory pressure (only its length
/// is kept; the owner reads it back before the message leaves the broker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// The body's bytes.
    Resident(Bytes),
    /// On disk only.
    Paged {
        /// Its length in bytes.
        len: u64,
    },
}

impl Body {
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Body::Resident(b) => b.len() as u64,
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
        self.resident().map_or(&[], |b| &b[..])
    }

    /// The bytes, when in memory.
    pub fn resident(&self) -> Option<&Bytes> {
        match self {
            Body::Resident(b) => Some(b),
            Body::Paged { .. } => None,
        }
    }
}

impl From<Bytes> for Body {
    fn from(b: Bytes) -> Self {
        Body::Resident(b)
    }
}

impl PartialEq<Bytes> for Body {
    fn eq(&self, other: &Bytes) -> bool {
        self.resident() == Some(other)
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
            bcc: Box::default(),
        }
    }

    /// The same message with its BCC routing keys recorded.
    #[must_use]
    pub fn with_bcc(mut self, bcc: Vec<Arc<str>>) -> Self {
        self.bcc = bcc.into_boxed_slice();
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
