//! exchange.declare/delete/bind/unbind.

use charon_core::{ExchangeDeclare, ExchangeKind};
use charon_protocol::AMQPClass;
use charon_protocol::methods::exchange;

use super::super::Connection;
use crate::access::{Permission, ResourceKind};
use crate::error::{AmqpError, ServerError};
use crate::locks::RwLockExt;

impl Connection {
    pub(super) fn on_exchange(
        &mut self,
        channel: u16,
        m: exchange::AMQPMethod,
    ) -> Result<(), AmqpError> {
        let mut topo = self.vhost.topology.write_recover();
        let (reply, nowait) = match m {
            exchange::AMQPMethod::Declare(d) => {
                // rabbit_channel: type and default-exchange checks come first (the vhost
                // reports those), then configure permission.
                let name = d.exchange.as_str();
                let known_type = d.kind.as_str().parse::<ExchangeKind>().is_ok()
                    || d.kind.as_str() == charon_core::exchange::delayed::DELAYED_TYPE;
                if !d.passive && !name.is_empty() && known_type {
                    let new_args = (topo.exchange(name).is_none() && !name.starts_with("amq."))
                        .then_some(&d.arguments);
                    self.access.check_exchange_declare(name, new_args)?;
                }
                topo.declare_exchange(&ExchangeDeclare {
                    name: d.exchange.as_str().into(),
                    kind: d.kind.as_str().into(),
                    passive: d.passive,
                    durable: d.durable,
                    auto_delete: d.auto_delete,
                    internal: d.internal,
                    arguments: d.arguments,
                })?;
                self.vhost
                    .apply_exchange_policy(&mut topo, d.exchange.as_str());
                (
                    exchange::AMQPMethod::DeclareOk(exchange::DeclareOk {}),
                    d.nowait,
                )
            }
            exchange::AMQPMethod::Delete(d) => {
                // The default and amq.* exchanges are refused by the vhost first.
                let name = d.exchange.as_str();
                if !name.is_empty() && !name.starts_with("amq.") {
                    self.permit(ResourceKind::Exchange, name, Permission::Configure)?;
                }
                topo.delete_exchange(d.exchange.as_str(), d.if_unused)?;
                (
                    exchange::AMQPMethod::DeleteOk(exchange::DeleteOk {}),
                    d.nowait,
                )
            }
            exchange::AMQPMethod::Bind(b) => {
                self.access.check_bind(
                    b.source.as_str(),
                    ResourceKind::Exchange,
                    b.destination.as_str(),
                )?;
                crate::topic_access::check_bind(
                    &self.broker,
                    &topo,
                    &self.user,
                    b.source.as_str(),
                    b.routing_key.as_str(),
                )?;
                topo.bind_exchange(
                    b.destination.as_str(),
                    b.source.as_str(),
                    b.routing_key.as_str(),
                    &b.arguments,
                )?;
                (exchange::AMQPMethod::BindOk(exchange::BindOk {}), b.nowait)
            }
            exchange::AMQPMethod::Unbind(b) => {
                self.access.check_bind(
                    b.source.as_str(),
                    ResourceKind::Exchange,
                    b.destination.as_str(),
                )?;
                crate::topic_access::check_bind(
                    &self.broker,
                    &topo,
                    &self.user,
                    b.source.as_str(),
                    b.routing_key.as_str(),
                )?;
                topo.unbind_exchange(
                    b.destination.as_str(),
                    b.source.as_str(),
                    b.routing_key.as_str(),
                    &b.arguments,
                )?;
                (
                    exchange::AMQPMethod::UnbindOk(exchange::UnbindOk {}),
                    b.nowait,
                )
            }
            _ => {
                return Err(ServerError::UnimplementedMethod.into());
            }
        };
        drop(topo);
        if !nowait {
            self.reply(channel, AMQPClass::Exchange(reply));
        }
        Ok(())
    }
}
