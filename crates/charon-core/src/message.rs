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
        self.body.len() as u64
    }
}
