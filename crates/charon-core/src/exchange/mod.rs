//! Exchanges: their kind, their bindings, and routing by kind.
//!
//! Each exchange type keeps its bindings in its own index (one file per
//! type: [`direct`], [`fanout`], [`topic`], [`headers`]) behind the
//! [`BindingTable`] trait.

pub mod delayed;
pub mod direct;
pub mod fanout;
pub mod headers;
mod stats;
pub mod topic;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use charon_protocol::FieldTable;

use crate::error::CoreError;

pub use stats::ExchangeStats;

/// The four AMQP 0-9-1 exchange types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExchangeKind {
    /// `direct`
    Direct,
    /// `fanout`
    Fanout,
    /// `topic`
    Topic,
    /// `headers`
    Headers,
}

impl ExchangeKind {
    /// The type name as on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ExchangeKind::Direct => "direct",
            ExchangeKind::Fanout => "fanout",
            ExchangeKind::Topic => "topic",
            ExchangeKind::Headers => "headers",
        }
    }

    /// A fresh, empty binding table for this kind.
    pub fn new_table(self) -> Box<dyn BindingTable> {
        match self {
            ExchangeKind::Direct => Box::new(direct::DirectBindings::default()),
            ExchangeKind::Fanout => Box::new(fanout::FanoutBindings::default()),
            ExchangeKind::Topic => Box::new(topic::TopicBindings::default()),
            ExchangeKind::Headers => Box::new(headers::HeadersBindings::default()),
        }
    }
}

impl fmt::Display for ExchangeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// RabbitMQ says "invalid exchange type" when the name is an existing
/// Erlang atom that is not a registered type, and "unknown exchange type"
/// otherwise. We cannot see the atom table; these common atoms were
/// checked against RabbitMQ 3.10.8 or are certain to exist.
const KNOWN_ATOMS: &[&str] = &[
    "",
    "foo",
    "bar",
    "queue",
    "exchange",
    "binding",
    "classic",
    "quorum",
    "stream",
    "true",
    "false",
    "undefined",
    "ok",
    "error",
    "none",
    "all",
    "any",
    "default",
    "local",
    "global",
    "test",
    "type",
    "name",
    "value",
    "x",
    "match",
];

impl FromStr for ExchangeKind {
    type Err = CoreError;

    fn from_str(s: &str) -> Result<Self, CoreError> {
        match s {
            "direct" => Ok(ExchangeKind::Direct),
            "fanout" => Ok(ExchangeKind::Fanout),
            "topic" => Ok(ExchangeKind::Topic),
            "headers" => Ok(ExchangeKind::Headers),
            other => Err(CoreError::InvalidExchangeType {
                reason: if KNOWN_ATOMS.contains(&other) {
                    "invalid"
                } else {
                    "unknown"
                },
                kind: other.to_string(),
            }),
        }
    }
}

/// Where a binding delivers: a queue or another exchange.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Destination {
    /// A queue, by name.
    Queue(Arc<str>),
    /// An exchange, by name (exchange-to-exchange binding).
    Exchange(Arc<str>),
}

impl Destination {
    /// The destination's name.
    pub fn name(&self) -> &str {
        match self {
            Destination::Queue(n) | Destination::Exchange(n) => n,
        }
    }
}

/// One binding of an exchange (the source) to a destination.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    /// Queue or exchange the messages go to.
    pub destination: Destination,
    /// Binding key.
    pub routing_key: String,
    /// Binding arguments.
    pub arguments: FieldTable,
}

/// A type-specific index of an exchange's bindings.
pub trait BindingTable: Send + Sync + fmt::Debug {
    /// Validate a binding before it is added (headers: `x-match`).
    fn validate(&self, _binding: &Binding) -> Result<(), CoreError> {
        Ok(())
    }
    /// Add a binding; false if an identical one already exists.
    fn add(&mut self, binding: Binding) -> bool;
    /// Remove an identical binding; false if there was none.
    fn remove(&mut self, binding: &Binding) -> bool;
    /// Remove every binding to `destination`; returns how many.
    fn remove_destination(&mut self, destination: &Destination) -> usize;
    /// Push the destinations matching a message.
    fn route<'a>(
        &'a self,
        routing_keys: &[&str],
        headers: Option<&FieldTable>,
        out: &mut Vec<&'a Destination>,
    );
    /// All bindings (unspecified order).
    fn bindings(&self) -> Box<dyn Iterator<Item = &Binding> + '_>;
    /// Number of bindings.
    fn len(&self) -> usize;
    /// True when there are no bindings.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One exchange of a virtual host.
#[derive(Debug)]
pub struct Exchange {
    /// Name.
    pub name: Arc<str>,
    /// Type.
    pub kind: ExchangeKind,
    /// Durable flag.
    pub durable: bool,
    /// Auto-delete flag (deleted when its last binding as source goes).
    pub auto_delete: bool,
    /// Internal flag (no direct publishing).
    pub internal: bool,
    /// Declare arguments.
    pub arguments: FieldTable,
    /// Bindings with this exchange as source.
    pub bindings: Box<dyn BindingTable>,
    /// Declared as `x-delayed-message` ([`delayed`]): `kind` is its `x-delayed-type`.
    pub delayed: bool,
    /// Messages published into it and routed out of it (management rates). Shared so a
    /// connection's route cache (charon-server `connection/route_cache.rs`) counts a publish it
    /// routed without the topology lock into the exchange it cached.
    pub stats: Arc<ExchangeStats>,
    /// The policy that applies to it, as last applied (charon-core `vhost/exchange_policy.rs`).
    pub policy: Option<ExchangePolicy>,
}

/// What the policy applying to an exchange sets for it (`rabbit_policy` for exchanges).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangePolicy {
    /// The policy's name (listed as the exchange's `policy`).
    pub name: Arc<str>,
    /// Its `alternate-exchange`, used when the exchange has no such argument.
    pub alternate_exchange: Option<Arc<str>>,
}

impl Exchange {
    /// A new exchange without bindings.
    pub fn new(
        name: &str,
        kind: ExchangeKind,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: FieldTable,
    ) -> Self {
        Exchange {
            name: Arc::from(name),
            kind,
            durable,
            auto_delete,
            internal,
            arguments,
            bindings: kind.new_table(),
            delayed: false,
            stats: Arc::default(),
            policy: None,
        }
    }

    /// The type as declared and listed (`x-delayed-message` for a delayed exchange).
    pub fn type_name(&self) -> &'static str {
        if self.delayed {
            delayed::DELAYED_TYPE
        } else {
            self.kind.as_str()
        }
    }

    /// The alternate exchange: the `alternate-exchange` argument if there is one (and it is a
    /// string), else the applying policy's (`rabbit_policy:get_arg/3`: the argument wins).
    pub fn alternate_exchange(&self) -> Option<&str> {
        match crate::value::lookup(&self.arguments, "alternate-exchange") {
            Some(charon_protocol::AMQPValue::LongString(s)) => {
                std::str::from_utf8(s.as_bytes()).ok()
            }
            Some(charon_protocol::AMQPValue::ShortString(s)) => Some(s.as_str()),
            Some(_) => None,
            None => self
                .policy
                .as_ref()
                .and_then(|p| p.alternate_exchange.as_deref()),
        }
    }
}

/// Remove the first binding equal to `b` from a vector.
pub(crate) fn remove_from(v: &mut Vec<Binding>, b: &Binding) -> bool {
    match v.iter().position(|x| x == b) {
        Some(i) => {
            v.swap_remove(i);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exchange_kind_parses_the_four_types() {
        for k in ["direct", "fanout", "topic", "headers"] {
            assert_eq!(k.parse::<ExchangeKind>().map(|k| k.as_str()), Ok(k));
        }
    }

    #[test]
    fn unknown_exchange_type_is_precondition_failed() {
        let e = "foo".parse::<ExchangeKind>().err();
        assert_eq!(
            e.map(|e| e.reply_text()).as_deref(),
            Some("PRECONDITION_FAILED - invalid exchange type 'foo'")
        );
        let e = "zqxwv123".parse::<ExchangeKind>().err();
        assert_eq!(
            e.map(|e| e.reply_text()).as_deref(),
            Some("PRECONDITION_FAILED - unknown exchange type 'zqxwv123'")
        );
    }
}
