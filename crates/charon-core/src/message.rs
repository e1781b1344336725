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
    /// Body (all body frames concatenated).
    pub body: Bytes,
    /// The `BCC` routing keys it was published with: the header itself is removed at publish
    /// (BCC never reaches a consumer), but dead-lettering without a dead-letter routing key
    /// routes by them again.
    pub bcc: Vec<Arc<str>>,
    /// Set when the body is not in memory (paged out to the store under memory pressure): its
    /// length. The owner reads the body back before the message leaves the broker.
    pub paged: Option<u64>,
}

impl Message {
    /// Build a message.
    pub fn new(
        exchange: impl Into<Arc<str>>,
        routing_key: impl Into<Arc<str>>,
        properties: RawProperties,
        body: Bytes,
    ) -> Self {
        Message {
            exchange: exchange.into(),
            routing_key: routing_key.into(),
            properties,
            body,
            bcc: Vec::new(),
            paged: None,
        }
    }

    /// The same message with its BCC routing keys recorded.
    #[must_use]
    pub fn with_bcc(mut self, bcc: Vec<Arc<str>>) -> Self {
        self.bcc = bcc;
        self
    }

    /// Body size in bytes (what RabbitMQ counts for `x-max-length-bytes`).
    pub fn body_size(&self) -> u64 {
        self.paged.unwrap_or(self.body.len() as u64)
    }

    /// Whether the body is on disk only.
    pub fn is_paged(&self) -> bool {
        self.paged.is_some()
    }

    /// The same message without its body in memory (same [`Self::body_size`]).
    #[must_use]
    pub fn paged_out(&self) -> Message {
        Message {
            exchange: self.exchange.clone(),
            routing_key: self.routing_key.clone(),
            properties: self.properties.clone(),
            body: Bytes::new(),
            bcc: self.bcc.clone(),
            paged: Some(self.body_size()),
        }
    }

    /// The same message with its body back in memory.
    #[must_use]
    pub fn with_body(&self, body: Bytes) -> Message {
        Message {
            exchange: self.exchange.clone(),
            routing_key: self.routing_key.clone(),
            properties: self.properties.clone(),
            body,
            bcc: self.bcc.clone(),
            paged: None,
        }
    }
}
