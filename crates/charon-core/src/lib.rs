//! `charon-core`: the broker domain as pure state machines (no I/O, no
//! async runtime, no clock reads).
//!
//! * [`error`] – [`CoreError`] with RabbitMQ's exact reply texts.
//! * [`message`] – [`Message`], shared as `Arc<Message>`.
//! * [`value`] – field values as RabbitMQ sees them (type names, equality).
//! * [`arguments`] – queue x-argument parsing/validation ([`QueueArgs`]).
//! * [`exchange`] – exchange kinds and their binding tables.
//! * [`vhost`] – [`VHost`]: exchanges, bindings, queue registry, routing.
//! * [`policy`] – [`Policies`]: policies and the effective queue settings.
//! * [`dead_letter`] – the dead-lettered message: x-death headers, routing keys, cycles.
//! * [`queue`] – [`QueueState`]: one queue's messages and consumers.
//! * [`retry`] – retries with backoff: settings, parked messages, ordered keys.
//! * [`routing`] – publish-time `CC`/`BCC` routing keys.

pub mod arguments;
pub mod dead_letter;
pub mod error;
pub mod exchange;
pub mod message;
pub mod policy;
pub mod queue;
pub mod retry;
pub mod routing;
pub mod tag_ring;
pub mod value;
pub mod vhost;

pub use arguments::{Overflow, QueueArgs, QueueType};
pub use error::CoreError;
pub use exchange::{Binding, Destination, Exchange, ExchangeKind, ExchangePolicy};
pub use message::{Bcc, Body, INLINE_MAX, InlineBody, Message};
pub use policy::{ApplyTo, DefValue, Policies, Policy, PolicyDefinition, PolicyError};
pub use queue::{
    ConsumerId, ConsumerSpec, DeadLetter, Delivery, GetResult, MsgId, PublishOutcome, QueueState,
};
pub use vhost::{ConnectionId, ExchangeDeclare, QueueDeclare, QueueEntry, QueueMeta, VHost};
