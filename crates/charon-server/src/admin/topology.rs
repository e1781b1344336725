//! Exchanges, queues and bindings for the management API: listed from the vhosts' topology,
//! declared and deleted through the same `VHost` methods and permission checks as the AMQP
//! methods (the API's user must have configure/write/read as a connection would), each change
//! saved to the store before the call returns.

use std::sync::Arc;

use charon_core::{Destination, ExchangeDeclare, ExchangeKind, QueueDeclare};
use charon_protocol::FieldTable;
use tokio::sync::oneshot;

use super::definitions::INTERNAL_USER;
use super::users::AdminError;
use crate::access::{Permission, ResourceKind, VHostAccess};
use crate::broker::{Broker, VHostState};
use crate::handles::{QueueCmd, QueueHandle};
use crate::queue::spawn_queue;

/// The connection id the management API declares with (never a real connection: it owns no
/// exclusive queue).
const API_CONNECTION: u64 = 0;

/// An exchange as listed.
#[derive(Debug, Clone)]
pub struct ExchangeView {
    /// Vhost.
    pub vhost: String,
    /// Name (`""` for the default exchange).
    pub name: String,
    /// Type name.
    pub kind: String,
    /// Durable.
    pub durable: bool,
    /// Auto-delete.
    pub auto_delete: bool,
    /// Internal.
    pub internal: bool,
    /// Declare arguments.
    pub arguments: FieldTable,
    /// A delayed exchange's messages waiting for their time (`docs/retries.md`).
    pub messages_delayed: Option<u64>,
    /// A delayed exchange's release lateness (`crate::lateness`).
    pub release_lateness: Option<crate::lateness::LatenessSummary>,
    /// Messages published into it (`publish_in`) and routed out of it to queues (`publish_out`).
    pub publish_in_out: (u64, u64),
    /// The policy that applies to it.
    pub policy: Option<String>,
}

/// A binding as listed.
#[derive(Debug, Clone)]
pub struct BindingView {
    /// Vhost.
    pub vhost: String,
    /// Source exchange (`""`: the default exchange's implicit binding).
    pub source: String,
    /// Destination name.
    pub destination: String,
    /// `"queue"` or `"exchange"`.
    pub destination_type: &'static str,
    /// Binding key.
    pub routing_key: String,
    /// Binding arguments.
    pub arguments: FieldTable,
}

/// An exchange or queue destination of a binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestKind {
    /// A queue.
    Queue,
    /// An exchange.
    Exchange,
}

/// A binding to add or remove: exchange `source` → `dest` (a queue or an exchange).
#[derive(Debug, Clone, Copy)]
pub struct BindingSpec<'a> {
    /// The source exchange (`""`: the default exchange).
    pub source: &'a str,
    /// What `dest` is.
    pub kind: DestKind,
    /// The destination queue or exchange.
    pub dest: &'a str,
    /// Routing (binding) key.
    pub routing_key: &'a str,
    /// Binding arguments.
    pub arguments: &'a FieldTable,
}

impl Broker {
    fn vhost_or_missing(&self, vhost: &str) -> Result<Arc<VHostState>, AdminError> {
        self.vhost(vhost)
            .ok_or_else(|| AdminError::Missing("vhost_not_found".into()))
    }

    /// `user`'s permissions on `vhost` (full for the broker's own imports).
    fn user_access(&self, user: &str, vhost: &str) -> Result<Arc<VHostAccess>, AdminError> {
        if user == INTERNAL_USER {
            return Ok(Arc::new(VHostAccess::full(user, vhost)));
        }
        self.access()
            .permissions(user, vhost)
            .ok_or_else(|| AdminError::AccessRefused("Access refused.".into()))
    }

    fn check(
        &self,
        user: &str,
        vhost: &str,
        kind: ResourceKind,
        name: &str,
        perm: Permission,
    ) -> Result<(), AdminError> {
        Ok(self.user_access(user, vhost)?.check(kind, name, perm)?)
    }

    /// Exchanges of one vhost (or all), by vhost then name.
    pub fn list_exchanges(&self, vhost: Option<&str>) -> Vec<ExchangeView> {
        let mut out = Vec::new();
        for v in self.vhosts() {
            if vhost.is_some_and(|n| n != &*v.name) {
                continue;
            }
            let topo = v.topology.read().unwrap_or_else(|p| p.into_inner());
            out.extend(topo.exchanges().map(|x| {
                ExchangeView {
                    vhost: v.name.to_string(),
                    name: x.name.to_string(),
                    kind: x.type_name().to_string(),
                    durable: x.durable,
                    auto_delete: x.auto_delete,
                    internal: x.internal,
                    arguments: x.arguments.clone(),
                    messages_delayed: x
                        .delayed
                        .then(|| v.delayed.get().map_or(0, |h| h.waiting(&x.name))),
                    release_lateness: v.delayed.get().and_then(|h| h.lateness(&x.name)),
                    publish_in_out: x.stats.get(),
                    policy: x.policy.as_ref().map(|p| p.name.to_string()),
                }
            }));
        }
        out.sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
        out
    }

    /// Bindings of one vhost (or all), including the default exchange's implicit binding of
    /// every queue, as RabbitMQ lists them.
    pub fn list_bindings(&self, vhost: Option<&str>) -> Vec<BindingView> {
        let mut out = Vec::new();
        for v in self.vhosts() {
            if vhost.is_some_and(|n| n != &*v.name) {
                continue;
            }
            let topo = v.topology.read().unwrap_or_else(|p| p.into_inner());
            let mut implicit: Vec<BindingView> = topo
                .queues()
                .map(|q| BindingView {
                    vhost: v.name.to_string(),
                    source: String::new(),
                    destination: q.meta.name.to_string(),
                    destination_type: "queue",
                    routing_key: q.meta.name.to_string(),
                    arguments: FieldTable::default(),
                })
                .collect();
            implicit.sort_by(|a, b| a.destination.cmp(&b.destination));
            let mut explicit: Vec<BindingView> = topo
                .bindings()
                .filter(|(x, _)| !x.name.is_empty())
                .map(|(x, b)| {
                    let (destination, destination_type) = match &b.destination {
                        Destination::Queue(q) => (q.to_string(), "queue"),
                        Destination::Exchange(e) => (e.to_string(), "exchange"),
                    };
                    BindingView {
                        vhost: v.name.to_string(),
                        source: x.name.to_string(),
                        destination,
                        destination_type,
                        routing_key: b.routing_key.clone(),
                        arguments: b.arguments.clone(),
                    }
                })
                .collect();
            explicit.sort_by(|a, b| {
                (
                    &a.source,
                    a.destination_type,
                    &a.destination,
                    &a.routing_key,
                )
                    .cmp(&(
                        &b.source,
                        b.destination_type,
                        &b.destination,
                        &b.routing_key,
                    ))
            });
            out.extend(implicit);
            out.extend(explicit);
        }
        out
    }

    /// Declares an exchange as `user` (configure permission; `alternate-exchange` needs read
    /// on it and write on the AE, as exchange.declare).
    pub async fn declare_exchange(
        &self,
        user: &str,
        vhost: &str,
        d: ExchangeDeclare,
    ) -> Result<(), AdminError> {
        let v = self.vhost_or_missing(vhost)?;
        {
            let mut topo = v.topology.write().unwrap_or_else(|p| p.into_inner());
            if !d.name.is_empty() && d.kind.parse::<ExchangeKind>().is_ok() {
                let new_args = (topo.exchange(&d.name).is_none() && !d.name.starts_with("amq."))
                    .then_some(&d.arguments);
                self.user_access(user, vhost)?
                    .check_exchange_declare(&d.name, new_args)?;
            }
            topo.declare_exchange(&d)?;
            v.apply_exchange_policy(&mut topo, &d.name);
        }
        save(&v).await;
        Ok(())
    }

    /// Deletes an exchange as `user` (configure permission).
    pub async fn delete_exchange(
        &self,
        user: &str,
        vhost: &str,
        name: &str,
        if_unused: bool,
    ) -> Result<(), AdminError> {
        let v = self.vhost_or_missing(vhost)?;
        if name.is_empty() || name.starts_with("amq.") {
            return Err(AdminError::AccessRefused("Access refused.".into()));
        }
        self.check(
            user,
            vhost,
            ResourceKind::Exchange,
            name,
            Permission::Configure,
        )?;
        {
            let mut topo = v.topology.write().unwrap_or_else(|p| p.into_inner());
            if topo.exchange(name).is_none() {
                return Err(AdminError::NotFound);
            }
            topo.delete_exchange(name, if_unused)?;
        }
        save(&v).await;
        Ok(())
    }

    /// Declares a queue as `user` (configure; a new queue with a DLX also read on itself and
    /// write on the DLX). Returns whether it was created. Exclusive queues cannot be declared
    /// through the API (there is no connection to own them).
    pub async fn declare_queue(
        &self,
        user: &str,
        vhost: &str,
        d: QueueDeclare,
    ) -> Result<bool, AdminError> {
        let v = self.vhost_or_missing(vhost)?;
        let access = self.user_access(user, vhost)?;
        let limits = self.limits().clone();
        let (handle, created) = {
            let mut topo = v.topology.write().unwrap_or_else(|p| p.into_inner());
            let vname = v.name.clone();
            // The vhost's `max-queues`, as for queue.declare (counted only when a limit is set).
            let existing = if limits.vhost_limits(&vname).max_queues.is_some() {
                topo.queues().count() as u64
            } else {
                0
            };
            let (_, entry, created) = topo.declare_queue_with(
                &d,
                API_CONNECTION,
                |name, new_args| {
                    access
                        .check_queue_declare(name, new_args)
                        .map_err(crate::error::AmqpError::from)?;
                    if new_args.is_some() {
                        limits.check_new_queue(&vname, name, existing)?;
                    }
                    Ok::<(), crate::error::AmqpError>(())
                },
                |meta| spawn_queue(meta, &v, &vname),
            )?;
            (entry.handle.clone(), created)
        };
        if !created {
            let _ = handle.try_send(QueueCmd::Touch);
        }
        save(&v).await;
        Ok(created)
    }

    /// The handle of queue `name` in `vhost`.
    pub fn queue_handle(&self, vhost: &str, name: &str) -> Result<QueueHandle, AdminError> {
        let v = self.vhost_or_missing(vhost)?;
        let topo = v.topology.read().unwrap_or_else(|p| p.into_inner());
        topo.queue(name)
            .map(|e| e.handle.clone())
            .ok_or(AdminError::NotFound)
    }

    /// Deletes a queue as `user` (configure permission); returns its ready message count.
    pub async fn delete_queue(
        &self,
        user: &str,
        vhost: &str,
        name: &str,
        if_unused: bool,
        if_empty: bool,
    ) -> Result<u32, AdminError> {
        let v = self.vhost_or_missing(vhost)?;
        let handle = self.queue_handle(vhost, name)?;
        self.check(
            user,
            vhost,
            ResourceKind::Queue,
            name,
            Permission::Configure,
        )?;
        let stats = ask(&handle, |reply| QueueCmd::Stats { reply })
            .await
            .ok_or(AdminError::NotFound)?;
        if if_unused && stats.consumers > 0 {
            return Err(AdminError::BadRequest(format!(
                "queue '{name}' in vhost '{vhost}' in use"
            )));
        }
        if if_empty && stats.messages > 0 {
            return Err(AdminError::BadRequest(format!(
                "queue '{name}' in vhost '{vhost}' not empty"
            )));
        }
        let removed = {
            let mut topo = v.topology.write().unwrap_or_else(|p| p.into_inner());
            if topo.queue(name).is_some_and(|e| e.handle.same(&handle)) {
                topo.remove_queue(name)
            } else {
                None
            }
        };
        let mut count = 0;
        if let Some(e) = removed {
            count = ask(&e.handle, |reply| QueueCmd::Delete { reply })
                .await
                .unwrap_or(0);
            self.admin()
                .rates
                .forget(&format!("queue:{}", e.handle.id()));
        }
        save(&v).await;
        Ok(count)
    }

    /// Binds `b.dest` to exchange `b.source` as `user` (write on the destination, read on the
    /// source).
    pub async fn bind(
        &self,
        user: &str,
        vhost: &str,
        b: BindingSpec<'_>,
    ) -> Result<(), AdminError> {
        self.change_binding(user, vhost, b, true).await
    }

    /// Removes a binding as `user`.
    pub async fn unbind(
        &self,
        user: &str,
        vhost: &str,
        b: BindingSpec<'_>,
    ) -> Result<(), AdminError> {
        self.change_binding(user, vhost, b, false).await
    }

    async fn change_binding(
        &self,
        user: &str,
        vhost: &str,
        b: BindingSpec<'_>,
        add: bool,
    ) -> Result<(), AdminError> {
        let BindingSpec {
            source,
            kind,
            dest,
            routing_key,
            arguments,
        } = b;
        let v = self.vhost_or_missing(vhost)?;
        let access = self.user_access(user, vhost)?;
        let rk = match kind {
            DestKind::Queue => ResourceKind::Queue,
            DestKind::Exchange => ResourceKind::Exchange,
        };
        access.check_bind(source, rk, dest)?;
        {
            let mut topo = v.topology.write().unwrap_or_else(|p| p.into_inner());
            crate::topic_access::check_bind(self, &topo, user, source, routing_key)?;
            match (kind, add) {
                (DestKind::Queue, true) => topo.bind_queue(dest, source, routing_key, arguments)?,
                (DestKind::Queue, false) => {
                    topo.unbind_queue(dest, source, routing_key, arguments)?
                }
                (DestKind::Exchange, true) => {
                    topo.bind_exchange(dest, source, routing_key, arguments)?
                }
                (DestKind::Exchange, false) => {
                    topo.unbind_exchange(dest, source, routing_key, arguments)?
                }
            }
        }
        save(&v).await;
        Ok(())
    }
}

/// Saves the vhost's durable topology and waits for the disk.
async fn save(v: &VHostState) {
    if let Some(c) = v.save_topology() {
        c.wait().await;
    }
}

/// Asks a queue actor; `None` when it is gone.
pub(crate) async fn ask<T>(
    q: &QueueHandle,
    make: impl FnOnce(oneshot::Sender<T>) -> QueueCmd,
) -> Option<T> {
    let (tx, rx) = oneshot::channel();
    if !q.send(make(tx)).await {
        return None;
    }
    rx.await.ok()
}
