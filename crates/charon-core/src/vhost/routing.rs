//! Routing a published message to queue handles (`rabbit_exchange:route/2`):
//! follows exchange-to-exchange bindings (each exchange visited once, so
//! cycles terminate), consults `alternate-exchange` when an exchange's own
//! bindings match nothing, and returns each queue once.

use charon_protocol::FieldTable;

use super::VHost;
use crate::error::CoreError;
use crate::exchange::{Destination, Exchange};

impl<Q: Clone> VHost<Q> {
    /// Route one message. `routing_keys` is the publish routing key
    /// followed by CC/BCC values. Pushes each destination queue's handle
    /// once into `out`, and counts the publish in the exchange's stats.
    pub fn route(
        &self,
        exchange: &str,
        routing_keys: &[&str],
        headers: Option<&FieldTable>,
        out: &mut Vec<Q>,
    ) -> Result<(), CoreError> {
        let x = self
            .exchanges
            .get(exchange)
            .ok_or_else(|| self.exchange_not_found(exchange))?;
        self.route_from(x, routing_keys, headers, out)
    }

    /// [`VHost::route`] through an exchange already looked up (with [`VHost::exchange`]), so a
    /// publish that needs the exchange for other checks looks it up once.
    pub fn route_from(
        &self,
        x: &Exchange,
        routing_keys: &[&str],
        headers: Option<&FieldTable>,
        out: &mut Vec<Q>,
    ) -> Result<(), CoreError> {
        let exchange = x.name.as_ref();
        if x.internal {
            return Err(CoreError::InternalExchange {
                exchange: exchange.to_string(),
                vhost: self.name.clone(),
            });
        }
        let before = out.len();
        self.route_via(x, routing_keys, headers, out);
        x.stats.record(out.len().saturating_sub(before));
        Ok(())
    }

    /// Route a dead-lettered message through `exchange`, which may be internal (a DLX may be of
    /// any kind). Returns false when the exchange does not exist (the message is dropped).
    pub fn route_dead_letter(
        &self,
        exchange: &str,
        routing_keys: &[&str],
        headers: Option<&FieldTable>,
        out: &mut Vec<Q>,
    ) -> bool {
        match self.exchanges.get(exchange) {
            Some(x) => {
                self.route_via(x, routing_keys, headers, out);
                true
            }
            None => false,
        }
    }

    /// Whether routing through `exchange` can read a message's headers: a headers exchange is
    /// reachable from it (through exchange-to-exchange bindings or alternate exchanges). When
    /// not, a router may pass no headers and skip decoding the message's properties (the
    /// dead-letter path, whose copies are mostly routed by fanout or direct exchanges).
    pub fn routing_reads_headers(&self, exchange: &str) -> bool {
        let mut work: Vec<&str> = vec![exchange];
        let mut seen: Vec<&str> = Vec::new();
        while let Some(name) = work.pop() {
            if seen.contains(&name) {
                continue;
            }
            seen.push(name);
            let Some(x) = self.exchanges.get(name) else {
                continue;
            };
            if x.kind == crate::exchange::ExchangeKind::Headers {
                return true;
            }
            if let Some(ae) = x.alternate_exchange() {
                work.push(ae);
            }
            for b in x.bindings.bindings() {
                if let Destination::Exchange(e) = &b.destination {
                    work.push(e);
                }
            }
        }
        false
    }

    fn route_via(
        &self,
        x: &Exchange,
        routing_keys: &[&str],
        headers: Option<&FieldTable>,
        out: &mut Vec<Q>,
    ) {
        if x.name.is_empty() {
            self.route_default(routing_keys, out);
            return;
        }
        if self.route_direct_to_queues(x, routing_keys, headers, out) {
            return;
        }
        let mut queues: Vec<&str> = Vec::new();
        let mut work: Vec<&Exchange> = vec![x];
        let mut seen: Vec<&str> = vec![&x.name];
        let mut dests: Vec<&Destination> = Vec::new();
        while let Some(x) = work.pop() {
            dests.clear();
            if x.name.is_empty() {
                queues.extend(routing_keys.iter().copied());
                continue;
            }
            x.bindings.route(routing_keys, headers, &mut dests);
            if dests.is_empty()
                && let Some(ae) = x.alternate_exchange()
            {
                self.visit(ae, &mut work, &mut seen);
            }
            for d in &dests {
                match d {
                    Destination::Queue(q) => queues.push(q),
                    Destination::Exchange(e) => self.visit(e, &mut work, &mut seen),
                }
            }
        }
        self.push_queues(queues, out);
    }

    /// Pushes the handles of the named queues that exist, each once.
    fn push_queues(&self, mut queues: Vec<&str>, out: &mut Vec<Q>) {
        if queues.len() > 1 {
            queues.sort_unstable();
            queues.dedup();
        }
        for q in queues {
            if let Some(e) = self.queues.get(q) {
                out.push(e.handle.clone());
            }
        }
    }

    /// The usual case of [`VHost::route_via`] without its work lists: `x`'s bindings match only
    /// queues (no exchange-to-exchange binding) and the alternate exchange is not needed (a
    /// binding matched, or there is none). Returns false, having pushed nothing, otherwise.
    fn route_direct_to_queues(
        &self,
        x: &Exchange,
        routing_keys: &[&str],
        headers: Option<&FieldTable>,
        out: &mut Vec<Q>,
    ) -> bool {
        let mut dests: Vec<&Destination> = Vec::new();
        x.bindings.route(routing_keys, headers, &mut dests);
        if dests.is_empty() && x.alternate_exchange().is_some() {
            return false;
        }
        let mut queues: Vec<&str> = Vec::with_capacity(dests.len());
        for d in &dests {
            match d {
                Destination::Queue(q) => queues.push(q),
                Destination::Exchange(_) => return false,
            }
        }
        self.push_queues(queues, out);
        true
    }

    fn visit<'a>(&'a self, name: &'a str, work: &mut Vec<&'a Exchange>, seen: &mut Vec<&'a str>) {
        if seen.contains(&name) {
            return;
        }
        seen.push(name);
        if let Some(x) = self.exchanges.get(name) {
            work.push(x);
        }
    }

    fn route_default(&self, routing_keys: &[&str], out: &mut Vec<Q>) {
        match routing_keys {
            [one] => {
                if let Some(e) = self.queues.get(*one) {
                    out.push(e.handle.clone());
                }
            }
            _ => {
                let mut keys: Vec<&str> = routing_keys.to_vec();
                keys.sort_unstable();
                keys.dedup();
                for k in keys {
                    if let Some(e) = self.queues.get(k) {
                        out.push(e.handle.clone());
                    }
                }
            }
        }
    }
}
