//! queue.declare/bind/unbind/purge/delete (one function each), and asking queue actors.

use charon_core::QueueDeclare;
use charon_protocol::AMQPClass;
use charon_protocol::methods::queue;
use tokio::sync::oneshot;

use super::super::Connection;
use crate::access::{Permission, ResourceKind};

use crate::error::{AmqpError, ServerError};
use crate::handles::{QueueCmd, QueueHandle};
use crate::locks::RwLockExt;
use crate::queue::spawn_queue;

impl Connection {
    /// The queue `name` (or the channel's... RabbitMQ's "last declared" is not tracked yet).
    pub(super) fn queue_handle(&self, name: &str) -> Result<QueueHandle, AmqpError> {
        let topo = self.vhost.topology.read_recover();
        Ok(topo.check_queue_access(name, self.id)?.handle.clone())
    }

    pub(super) async fn ask<T>(
        q: &QueueHandle,
        make: impl FnOnce(oneshot::Sender<T>) -> QueueCmd,
    ) -> Result<T, AmqpError> {
        let (tx, rx) = oneshot::channel();
        if !q.send(make(tx)).await {
            return Err(ServerError::QueueGone {
                queue: q.name().to_string(),
            }
            .into());
        }
        rx.await.map_err(|_| {
            ServerError::QueueGone {
                queue: q.name().to_string(),
            }
            .into()
        })
    }

    /// Declares (or finds) a queue and asks it for its counts. A queue that stops while being
    /// asked (its auto-delete or exclusive owner went a moment ago) is no longer registered
    /// then: the declare runs again and creates it, so a declare never fails because a queue
    /// of that name is being deleted.
    async fn declare_queue(
        &mut self,
        d: &queue::Declare,
    ) -> Result<(std::sync::Arc<str>, crate::handles::QueueStats), AmqpError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let vhost_name = self.vhost_name.clone();
            let vhost = self.vhost.clone();
            let access = self.access.clone();
            let limits = self.slot.limits().clone();
            let (name, handle, created) = {
                let mut topo = self.vhost.topology.write_recover();
                // The vhost's `max-queues`: counted only when a limit is set.
                let existing = if limits.vhost_limits(&vhost_name).max_queues.is_some() {
                    topo.queues().count() as u64
                } else {
                    0
                };
                let (name, entry, created) = topo.declare_queue_with(
                    &QueueDeclare {
                        name: d.queue.as_str().into(),
                        passive: d.passive,
                        durable: d.durable,
                        exclusive: d.exclusive,
                        auto_delete: d.auto_delete,
                        arguments: d.arguments.clone(),
                    },
                    self.id,
                    |name, new_args| {
                        access
                            .check_queue_declare(name, new_args)
                            .map_err(AmqpError::from)?;
                        if new_args.is_some() {
                            limits.check_new_queue(&vhost_name, name, existing)?;
                        }
                        Ok::<(), AmqpError>(())
                    },
                    |meta| spawn_queue(meta, &vhost, &vhost_name),
                )?;
                (name, entry.handle.clone(), created)
            };
            if !created {
                // A redeclare counts as use for `x-expires`.
                let _ = handle.try_send(QueueCmd::Touch);
            }
            match Self::ask(&handle, |reply| QueueCmd::Stats { reply }).await {
                Ok(stats) => return Ok((name, stats)),
                Err(e) if created || attempt >= 3 => return Err(e),
                Err(_) => continue,
            }
        }
    }

    pub(super) async fn on_queue(
        &mut self,
        channel: u16,
        m: queue::AMQPMethod,
    ) -> Result<(), AmqpError> {
        match m {
            queue::AMQPMethod::Declare(d) => self.queue_declare(channel, d).await,
            queue::AMQPMethod::Bind(b) => self.queue_bind(channel, b),
            queue::AMQPMethod::Unbind(b) => self.queue_unbind(channel, b),
            queue::AMQPMethod::Purge(p) => self.queue_purge(channel, p).await,
            queue::AMQPMethod::Delete(d) => self.queue_delete(channel, d).await,
            _ => Err(ServerError::UnimplementedMethod.into()),
        }
    }

    async fn queue_declare(&mut self, channel: u16, d: queue::Declare) -> Result<(), AmqpError> {
        let (name, stats) = self.declare_queue(&d).await?;
        if !d.nowait {
            self.reply(
                channel,
                AMQPClass::Queue(queue::AMQPMethod::DeclareOk(queue::DeclareOk {
                    queue: name.as_ref().into(),
                    message_count: stats.messages,
                    consumer_count: stats.consumers,
                })),
            );
        }
        Ok(())
    }

    fn queue_bind(&mut self, channel: u16, b: queue::Bind) -> Result<(), AmqpError> {
        self.access
            .check_bind(b.exchange.as_str(), ResourceKind::Queue, b.queue.as_str())?;
        {
            let mut topo = self.vhost.topology.write_recover();
            if topo.queue(b.queue.as_str()).is_some() {
                topo.check_queue_access(b.queue.as_str(), self.id)?;
            }
            crate::topic_access::check_bind(
                &self.broker,
                &topo,
                &self.user,
                b.exchange.as_str(),
                b.routing_key.as_str(),
            )?;
            topo.bind_queue(
                b.queue.as_str(),
                b.exchange.as_str(),
                b.routing_key.as_str(),
                &b.arguments,
            )?;
        }
        if !b.nowait {
            self.reply(
                channel,
                AMQPClass::Queue(queue::AMQPMethod::BindOk(queue::BindOk {})),
            );
        }
        Ok(())
    }

    fn queue_unbind(&mut self, channel: u16, b: queue::Unbind) -> Result<(), AmqpError> {
        self.access
            .check_bind(b.exchange.as_str(), ResourceKind::Queue, b.queue.as_str())?;
        {
            let mut topo = self.vhost.topology.write_recover();
            crate::topic_access::check_bind(
                &self.broker,
                &topo,
                &self.user,
                b.exchange.as_str(),
                b.routing_key.as_str(),
            )?;
            topo.unbind_queue(
                b.queue.as_str(),
                b.exchange.as_str(),
                b.routing_key.as_str(),
                &b.arguments,
            )?;
        }
        self.reply(
            channel,
            AMQPClass::Queue(queue::AMQPMethod::UnbindOk(queue::UnbindOk {})),
        );
        Ok(())
    }

    async fn queue_purge(&mut self, channel: u16, p: queue::Purge) -> Result<(), AmqpError> {
        self.permit(ResourceKind::Queue, p.queue.as_str(), Permission::Read)?;
        let q = self.queue_handle(p.queue.as_str())?;
        let n = Self::ask(&q, |reply| QueueCmd::Purge { reply }).await?;
        if !p.nowait {
            self.reply(
                channel,
                AMQPClass::Queue(queue::AMQPMethod::PurgeOk(queue::PurgeOk {
                    message_count: n,
                })),
            );
        }
        Ok(())
    }

    async fn queue_delete(&mut self, channel: u16, d: queue::Delete) -> Result<(), AmqpError> {
        let name = d.queue.as_str().to_string();
        self.permit(ResourceKind::Queue, &name, Permission::Configure)?;
        let exists = {
            let topo = self.vhost.topology.read_recover();
            topo.queue(&name).is_some()
        };
        let mut count = 0;
        if exists {
            let q = self.queue_handle(&name)?;
            let stats = Self::ask(&q, |reply| QueueCmd::Stats { reply }).await?;
            if d.if_unused && stats.consumers > 0 {
                return Err(ServerError::QueueInUse {
                    queue: name,
                    vhost: self.vhost_name.clone(),
                }
                .into());
            }
            if d.if_empty && stats.messages > 0 {
                return Err(ServerError::QueueNotEmpty {
                    queue: name,
                    vhost: self.vhost_name.clone(),
                }
                .into());
            }
            let removed = {
                let mut topo = self.vhost.topology.write_recover();
                topo.remove_queue(&name)
            };
            if let Some(entry) = removed {
                count = Self::ask(&entry.handle, |reply| QueueCmd::Delete { reply })
                    .await
                    .unwrap_or(0);
            }
        }
        if !d.nowait {
            self.reply(
                channel,
                AMQPClass::Queue(queue::AMQPMethod::DeleteOk(queue::DeleteOk {
                    message_count: count,
                })),
            );
        }
        Ok(())
    }
}
