//! One virtual host: its exchanges (with their bindings) and its queue
//! registry. The queues themselves live elsewhere (one actor each in the
//! server); the vhost only stores their metadata and a handle `Q`.
//!
//! Split by concern: [`exchanges`](self) declare/delete, `exchange_policy`, `queues`
//! declare/delete/access, `bindings`, `routing`, plus `equivalence` checks
//! and `naming` of server-named queues.

mod bindings;
mod equivalence;
mod exchange_policy;
mod exchanges;
mod naming;
mod queues;
mod routing;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use charon_protocol::FieldTable;

use crate::arguments::QueueArgs;
use crate::exchange::{Exchange, ExchangeKind};

pub use naming::NameGen;

/// Identifies a client connection (owner of exclusive queues).
pub type ConnectionId = u64;

/// exchange.declare as received.
#[derive(Debug, Clone, Default)]
pub struct ExchangeDeclare {
    /// Exchange name.
    pub name: String,
    /// Type name as received (`"direct"`, …).
    pub kind: String,
    /// Passive flag.
    pub passive: bool,
    /// Durable flag.
    pub durable: bool,
    /// Auto-delete flag.
    pub auto_delete: bool,
    /// Internal flag.
    pub internal: bool,
    /// Arguments.
    pub arguments: FieldTable,
}

/// queue.declare as received.
#[derive(Debug, Clone, Default)]
pub struct QueueDeclare {
    /// Queue name; `""` asks for a server-generated name.
    pub name: String,
    /// Passive flag.
    pub passive: bool,
    /// Durable flag.
    pub durable: bool,
    /// Exclusive flag.
    pub exclusive: bool,
    /// Auto-delete flag.
    pub auto_delete: bool,
    /// Arguments.
    pub arguments: FieldTable,
}

/// What the vhost knows about a queue.
#[derive(Debug, Clone)]
pub struct QueueMeta {
    /// Queue name.
    pub name: Arc<str>,
    /// Durable (always false for exclusive queues, as in RabbitMQ).
    pub durable: bool,
    /// The owning connection of an exclusive queue.
    pub exclusive_owner: Option<ConnectionId>,
    /// Auto-delete flag (the server deletes it after the last consumer).
    pub auto_delete: bool,
    /// Arguments as declared.
    pub arguments: FieldTable,
    /// Parsed, validated x-arguments.
    pub args: QueueArgs,
}

/// A registered queue: metadata plus the server's handle.
#[derive(Debug, Clone)]
pub struct QueueEntry<Q> {
    /// Metadata.
    pub meta: QueueMeta,
    /// Server handle (e.g. the queue actor's mailbox).
    pub handle: Q,
}

/// Exchanges, bindings and queues of one virtual host.
#[derive(Debug)]
pub struct VHost<Q> {
    name: String,
    /// foldhash (seeded per map): both are looked up for every routed message, where SipHash
    /// cost ~300 instructions a publish.
    exchanges: foldhash::HashMap<Arc<str>, Exchange>,
    queues: foldhash::HashMap<Arc<str>, QueueEntry<Q>>,
    names: NameGen,
}

/// The exchanges every vhost starts with.
const STANDARD_EXCHANGES: &[(&str, ExchangeKind)] = &[
    ("", ExchangeKind::Direct),
    ("amq.direct", ExchangeKind::Direct),
    ("amq.fanout", ExchangeKind::Fanout),
    ("amq.topic", ExchangeKind::Topic),
    ("amq.headers", ExchangeKind::Headers),
    ("amq.match", ExchangeKind::Headers),
];

impl<Q: Clone> VHost<Q> {
    /// A vhost with the default exchange and the `amq.*` exchanges.
    pub fn new(name: &str) -> Self {
        let mut exchanges = foldhash::HashMap::default();
        for (x, kind) in STANDARD_EXCHANGES {
            let e = Exchange::new(x, *kind, true, false, false, FieldTable::default());
            exchanges.insert(e.name.clone(), e);
        }
        let seed = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        VHost {
            name: name.to_string(),
            exchanges,
            queues: foldhash::HashMap::default(),
            names: NameGen::new(seed),
        }
    }

    /// Seed the generator of server-named queue names (call once at start
    /// with some entropy so names differ across broker restarts).
    pub fn seed_names(&mut self, seed: u64) {
        self.names = NameGen::new(seed);
    }

    /// The vhost name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Look up an exchange.
    pub fn exchange(&self, name: &str) -> Option<&Exchange> {
        self.exchanges.get(name)
    }

    /// All exchanges (unspecified order).
    pub fn exchanges(&self) -> impl Iterator<Item = &Exchange> {
        self.exchanges.values()
    }

    /// Look up a queue.
    pub fn queue(&self, name: &str) -> Option<&QueueEntry<Q>> {
        self.queues.get(name)
    }

    /// All queues (unspecified order).
    pub fn queues(&self) -> impl Iterator<Item = &QueueEntry<Q>> {
        self.queues.values()
    }

    /// Every binding as (source exchange, binding), for listings.
    pub fn bindings(&self) -> impl Iterator<Item = (&Exchange, &crate::exchange::Binding)> {
        self.exchanges
            .values()
            .flat_map(|x| x.bindings.bindings().map(move |b| (x, b)))
    }

    fn exchange_not_found(&self, name: &str) -> crate::CoreError {
        crate::CoreError::ExchangeNotFound {
            exchange: name.to_string(),
            vhost: self.name.clone(),
        }
    }

    fn queue_not_found(&self, name: &str) -> crate::CoreError {
        crate::CoreError::QueueNotFound {
            queue: name.to_string(),
            vhost: self.name.clone(),
        }
    }
}
