//! queue.bind / queue.unbind / exchange.bind / exchange.unbind
//! (`rabbit_channel:binding_action/10`, `rabbit_binding`).

use std::sync::Arc;

use charon_protocol::FieldTable;

use super::VHost;
use crate::error::CoreError;
use crate::exchange::{Binding, Destination};

impl<Q: Clone> VHost<Q> {
    /// queue.bind. Idempotent. The server checks exclusive access to the
    /// queue (`check_queue_access`) before calling.
    pub fn bind_queue(
        &mut self,
        queue: &str,
        exchange: &str,
        routing_key: &str,
        arguments: &FieldTable,
    ) -> Result<(), CoreError> {
        let dest = self.queue_destination(queue, exchange)?;
        self.add_binding(exchange, dest, routing_key, arguments)
    }

    /// queue.unbind. As in RabbitMQ 3.10.8, unbinding is OK even when the
    /// binding, the queue or the exchange does not exist; only the default
    /// exchange is refused.
    pub fn unbind_queue(
        &mut self,
        queue: &str,
        exchange: &str,
        routing_key: &str,
        arguments: &FieldTable,
    ) -> Result<(), CoreError> {
        if exchange.is_empty() {
            return Err(CoreError::DefaultExchange);
        }
        let dest = Destination::Queue(Arc::from(queue));
        self.remove_binding(exchange, dest, routing_key, arguments);
        Ok(())
    }

    /// exchange.bind (`destination` receives what `source` routes).
    pub fn bind_exchange(
        &mut self,
        destination: &str,
        source: &str,
        routing_key: &str,
        arguments: &FieldTable,
    ) -> Result<(), CoreError> {
        let dest = self.exchange_destination(destination, source)?;
        self.add_binding(source, dest, routing_key, arguments)
    }

    /// exchange.unbind. OK even when the binding or either exchange does
    /// not exist; only the default exchange is refused.
    pub fn unbind_exchange(
        &mut self,
        destination: &str,
        source: &str,
        routing_key: &str,
        arguments: &FieldTable,
    ) -> Result<(), CoreError> {
        if destination.is_empty() || source.is_empty() {
            return Err(CoreError::DefaultExchange);
        }
        let dest = Destination::Exchange(Arc::from(destination));
        self.remove_binding(source, dest, routing_key, arguments);
        Ok(())
    }

    fn queue_destination(&self, queue: &str, exchange: &str) -> Result<Destination, CoreError> {
        if exchange.is_empty() {
            return Err(CoreError::DefaultExchange);
        }
        if !self.exchanges.contains_key(exchange) {
            return Err(self.exchange_not_found(exchange));
        }
        match self.queues.get(queue) {
            Some(e) => Ok(Destination::Queue(e.meta.name.clone())),
            None => Err(self.queue_not_found(queue)),
        }
    }

    fn exchange_destination(
        &self,
        destination: &str,
        source: &str,
    ) -> Result<Destination, CoreError> {
        if destination.is_empty() || source.is_empty() {
            return Err(CoreError::DefaultExchange);
        }
        if !self.exchanges.contains_key(source) {
            return Err(self.exchange_not_found(source));
        }
        match self.exchanges.get(destination) {
            Some(x) => Ok(Destination::Exchange(x.name.clone())),
            None => Err(self.exchange_not_found(destination)),
        }
    }

    fn add_binding(
        &mut self,
        source: &str,
        destination: Destination,
        routing_key: &str,
        arguments: &FieldTable,
    ) -> Result<(), CoreError> {
        let vhost_err = self.exchange_not_found(source);
        let x = self.exchanges.get_mut(source).ok_or(vhost_err)?;
        let b = Binding {
            destination,
            routing_key: routing_key.to_string(),
            arguments: arguments.clone(),
        };
        x.bindings.validate(&b)?;
        x.bindings.add(b);
        Ok(())
    }

    fn remove_binding(
        &mut self,
        source: &str,
        destination: Destination,
        routing_key: &str,
        arguments: &FieldTable,
    ) {
        let b = Binding {
            destination,
            routing_key: routing_key.to_string(),
            arguments: arguments.clone(),
        };
        let removed = self
            .exchanges
            .get_mut(source)
            .is_some_and(|x| x.bindings.remove(&b));
        if removed {
            self.maybe_auto_delete(source);
        }
    }
}
