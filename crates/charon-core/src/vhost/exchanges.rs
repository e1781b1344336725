//! exchange.declare / exchange.delete, and auto-delete of exchanges whose
//! last binding (as source) went away.

use charon_protocol::AMQPValue;

use super::VHost;
use super::equivalence::{self, resource};
use crate::error::CoreError;
use crate::exchange::{Destination, Exchange, ExchangeKind};
use crate::value::{lookup, type_name};

impl<Q: Clone> VHost<Q> {
    /// exchange.declare, following `rabbit_channel` 3.10.8: type check,
    /// default-exchange check, then lookup; `amq.*` names are only refused
    /// when the exchange does not exist yet.
    pub fn declare_exchange(&mut self, d: &super::ExchangeDeclare) -> Result<(), CoreError> {
        if d.passive {
            if d.name.is_empty() {
                return Err(CoreError::DefaultExchange);
            }
            return match self.exchanges.contains_key(d.name.as_str()) {
                true => Ok(()),
                false => Err(self.exchange_not_found(&d.name)),
            };
        }
        let delayed = d.kind == crate::exchange::delayed::DELAYED_TYPE;
        let kind: ExchangeKind = if delayed {
            crate::exchange::delayed::routing_kind(&d.arguments)?
        } else {
            d.kind.parse()?
        };
        if d.name.is_empty() {
            return Err(CoreError::DefaultExchange);
        }
        let res = resource("exchange", &d.name, &self.name);
        if let Some(x) = self.exchanges.get(d.name.as_str()) {
            equivalence::field(x.type_name(), d.kind.as_str(), &res, "type")?;
            if delayed {
                equivalence::field(x.kind, kind, &res, "x-delayed-type")?;
            }
            equivalence::field(x.durable, d.durable, &res, "durable")?;
            equivalence::field(x.auto_delete, d.auto_delete, &res, "auto_delete")?;
            equivalence::field(x.internal, d.internal, &res, "internal")?;
            return equivalence::args(&x.arguments, &d.arguments, &res, &["alternate-exchange"]);
        }
        if d.name.starts_with("amq.") {
            return Err(CoreError::ReservedPrefix {
                kind: "exchange",
                name: d.name.clone(),
            });
        }
        if let Some(v) = lookup(&d.arguments, "alternate-exchange")
            && !matches!(v, AMQPValue::LongString(_))
        {
            return Err(CoreError::InvalidArgType {
                type_name: type_name(v).to_string(),
                arg: "alternate-exchange".to_string(),
                resource: res,
            });
        }
        let mut x = Exchange::new(
            &d.name,
            kind,
            d.durable,
            d.auto_delete,
            d.internal,
            d.arguments.clone(),
        );
        x.delayed = delayed;
        self.exchanges.insert(x.name.clone(), x);
        Ok(())
    }

    /// exchange.delete. Deleting a missing exchange is not an error (as in
    /// RabbitMQ 3.10); `amq.*` and the default exchange are refused.
    pub fn delete_exchange(&mut self, name: &str, if_unused: bool) -> Result<(), CoreError> {
        if name.is_empty() {
            return Err(CoreError::DefaultExchange);
        }
        if name.starts_with("amq.") {
            return Err(CoreError::SystemExchangeDeletion {
                exchange: name.to_string(),
                vhost: self.name.clone(),
            });
        }
        let Some(x) = self.exchanges.get(name) else {
            return Ok(());
        };
        if if_unused && !x.bindings.is_empty() {
            return Err(CoreError::ExchangeInUse {
                exchange: name.to_string(),
                vhost: self.name.clone(),
            });
        }
        self.remove_exchange(name);
        Ok(())
    }

    /// Remove an exchange and every binding it is part of (cascading
    /// auto-delete of sources that lose their last binding).
    pub(super) fn remove_exchange(&mut self, name: &str) {
        if let Some(x) = self.exchanges.remove(name) {
            self.remove_destination(&Destination::Exchange(x.name));
        }
    }

    /// Remove all bindings to `dest`, then auto-delete emptied sources.
    pub(super) fn remove_destination(&mut self, dest: &Destination) {
        let mut emptied = Vec::new();
        for x in self.exchanges.values_mut() {
            if x.bindings.remove_destination(dest) > 0 && x.auto_delete && x.bindings.is_empty() {
                emptied.push(x.name.clone());
            }
        }
        for x in emptied {
            self.remove_exchange(&x);
        }
    }

    /// Auto-delete `source` if it is auto-delete and has no bindings left.
    pub(super) fn maybe_auto_delete(&mut self, source: &str) {
        if self
            .exchanges
            .get(source)
            .is_some_and(|x| x.auto_delete && x.bindings.is_empty())
        {
            self.remove_exchange(source);
        }
    }
}
