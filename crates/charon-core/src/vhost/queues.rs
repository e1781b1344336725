//! queue.declare, queue deletion and exclusive-access checks.

use std::sync::Arc;

use charon_protocol::{AMQPValue, FieldTable};

use super::equivalence::{self, resource};
use super::{ConnectionId, QueueDeclare, QueueEntry, QueueMeta, VHost};
use crate::arguments::{DECLARE_ARGS, QueueArgs, QueueType};
use crate::error::CoreError;
use crate::exchange::Destination;
use crate::retry::settings::RETRY_ARGS;
use crate::value::{lookup, type_name};

impl<Q: Clone> VHost<Q> {
    /// queue.declare. Returns the queue name, its entry and whether it was
    /// created; `spawn` makes the server handle and runs only on creation.
    pub fn declare_queue(
        &mut self,
        d: &QueueDeclare,
        owner: ConnectionId,
        spawn: impl FnOnce(&QueueMeta) -> Q,
    ) -> Result<(Arc<str>, &QueueEntry<Q>, bool), CoreError> {
        self.declare_queue_with(d, owner, |_, _| Ok::<(), CoreError>(()), spawn)
    }

    /// queue.declare with an authorisation hook, as `rabbit_channel` checks
    /// permissions: `authorize(name, new_args)` runs once the name is known
    /// (server-generated names included) and before equivalence checks or
    /// creation; `new_args` is `Some(arguments)` when the queue does not exist
    /// yet. Passive declares do not call it.
    pub fn declare_queue_with<E: From<CoreError>>(
        &mut self,
        d: &QueueDeclare,
        owner: ConnectionId,
        authorize: impl FnOnce(&str, Option<&FieldTable>) -> Result<(), E>,
        spawn: impl FnOnce(&QueueMeta) -> Q,
    ) -> Result<(Arc<str>, &QueueEntry<Q>, bool), E> {
        if d.passive {
            let e = self.check_queue_access(&d.name, owner)?;
            return Ok((e.meta.name.clone(), e, false));
        }
        let name: Arc<str> = if d.name.is_empty() {
            self.fresh_queue_name()
        } else if d.name.starts_with("amq.") {
            return Err(CoreError::ReservedPrefix {
                kind: "queue",
                name: d.name.clone(),
            }
            .into());
        } else {
            Arc::from(d.name.as_str())
        };
        let owner = d.exclusive.then_some(owner);
        let durable = d.durable && !d.exclusive;
        if self.queues.contains_key(&name) {
            authorize(&name, None)?;
            self.assert_queue_equivalence(&name, d, durable, owner)?;
            let e = self
                .queue(&name)
                .ok_or_else(|| self.queue_not_found(&name))?;
            return Ok((name, e, false));
        }
        authorize(&name, Some(&d.arguments))?;
        let meta = self.new_queue_meta(name.clone(), d, durable, owner)?;
        let handle = spawn(&meta);
        let entry = QueueEntry { meta, handle };
        let e = self.queues.entry(name.clone()).or_insert(entry);
        Ok((name, e, true))
    }

    fn fresh_queue_name(&mut self) -> Arc<str> {
        loop {
            let n = self.names.next_name();
            if !self.queues.contains_key(n.as_str()) {
                return Arc::from(n);
            }
        }
    }

    fn assert_queue_equivalence(
        &self,
        name: &str,
        d: &QueueDeclare,
        durable: bool,
        owner: Option<ConnectionId>,
    ) -> Result<(), CoreError> {
        let Some(e) = self.queues.get(name) else {
            return Err(self.queue_not_found(name));
        };
        if e.meta.exclusive_owner != owner {
            return Err(self.locked(name));
        }
        let res = resource("queue", name, &self.name);
        equivalence::field(e.meta.durable, durable, &res, "durable")?;
        equivalence::field(e.meta.auto_delete, d.auto_delete, &res, "auto_delete")?;
        equivalence::args(&e.meta.arguments, &d.arguments, &res, DECLARE_ARGS)?;
        // Charon's retry arguments are compared like RabbitMQ's own x- arguments.
        equivalence::args(&e.meta.arguments, &d.arguments, &res, RETRY_ARGS)
    }

    fn new_queue_meta(
        &self,
        name: Arc<str>,
        d: &QueueDeclare,
        durable: bool,
        owner: Option<ConnectionId>,
    ) -> Result<QueueMeta, CoreError> {
        let res = resource("queue", &name, &self.name);
        if let Some(v) = lookup(&d.arguments, "x-dead-letter-exchange")
            && !matches!(v, AMQPValue::LongString(_))
        {
            return Err(CoreError::InvalidArgType {
                type_name: type_name(v).to_string(),
                arg: "x-dead-letter-exchange".to_string(),
                resource: res,
            });
        }
        let args = QueueArgs::parse(&d.arguments, &name, &self.name)?;
        if args.queue_type == QueueType::Quorum {
            let bad = if d.auto_delete {
                Some("auto-delete")
            } else if owner.is_some() {
                Some("exclusive-owner")
            } else if !durable {
                Some("non-durable")
            } else {
                None
            };
            if let Some(property) = bad {
                return Err(CoreError::InvalidQueueProperty {
                    property,
                    queue: name.to_string(),
                    vhost: self.name.clone(),
                });
            }
        }
        Ok(QueueMeta {
            name,
            durable,
            exclusive_owner: owner,
            auto_delete: d.auto_delete,
            arguments: d.arguments.clone(),
            args,
        })
    }

    fn locked(&self, name: &str) -> CoreError {
        CoreError::QueueLocked {
            queue: name.to_string(),
            vhost: self.name.clone(),
        }
    }

    /// The queue, if `conn` may use it: 404 when absent, 405 when it is
    /// exclusive to another connection.
    pub fn check_queue_access(
        &self,
        name: &str,
        conn: ConnectionId,
    ) -> Result<&QueueEntry<Q>, CoreError> {
        let e = self
            .queues
            .get(name)
            .ok_or_else(|| self.queue_not_found(name))?;
        match e.meta.exclusive_owner {
            Some(o) if o != conn => Err(self.locked(name)),
            _ => Ok(e),
        }
    }

    /// Remove a queue and its bindings (auto-deleting exchanges that lose
    /// their last binding). `if_unused`/`if_empty` are the server's job.
    pub fn remove_queue(&mut self, name: &str) -> Option<QueueEntry<Q>> {
        let e = self.queues.remove(name)?;
        self.remove_destination(&Destination::Queue(e.meta.name.clone()));
        Some(e)
    }

    /// Exclusive queues owned by `conn` (to delete when it closes).
    pub fn queues_owned_by(&self, conn: ConnectionId) -> Vec<Arc<str>> {
        self.queues
            .values()
            .filter(|e| e.meta.exclusive_owner == Some(conn))
            .map(|e| e.meta.name.clone())
            .collect()
    }
}
