//! Listing queues with their counts for the management API and the CLI (the same interface for
//! both). Counts come from each queue actor (`QueueCmd::Stats`), asked without holding any lock.

use tokio::sync::oneshot;

use crate::broker::Broker;
use crate::handles::{QueueCmd, QueueHandle, QueueStats};
use crate::locks::RwLockExt;
use crate::queue::admin::{AdminQuery, QueueDetails};

/// A queue as listed.
#[derive(Debug, Clone)]
pub struct QueueInfo {
    /// Vhost.
    pub vhost: String,
    /// Name.
    pub name: String,
    /// Durable flag.
    pub durable: bool,
    /// Auto-delete flag.
    pub auto_delete: bool,
    /// Exclusive to a connection.
    pub exclusive: bool,
    /// The policy that applies, if any.
    pub policy: Option<String>,
    /// The operator policy that applies, if any.
    pub operator_policy: Option<String>,
    /// Effective dead-letter exchange (argument or policy).
    pub dead_letter_exchange: Option<String>,
    /// Counts (ready, unacked, consumers, dead letters dropped for a missing DLX).
    pub stats: QueueStats,
    /// Arguments as declared.
    pub arguments: charon_protocol::FieldTable,
    /// The applying policy's definition entries, merged with the operator policy's.
    pub effective_policy_definition: Vec<(String, charon_core::DefValue)>,
    /// `classic` or `quorum`.
    pub queue_type: &'static str,
    /// Counters and head facts (management, metrics).
    pub details: QueueDetails,
    /// Broker-unique id of the queue instance (rate samples).
    pub id: u64,
}

impl Broker {
    /// Queues of one vhost (or all), sorted by vhost then name, with their current counts.
    pub async fn list_queues(&self, vhost: Option<&str>) -> Vec<QueueInfo> {
        let mut pending: Vec<(QueueInfo, QueueHandle)> = Vec::new();
        for v in self.vhosts() {
            if vhost.is_some_and(|n| n != &*v.name) {
                continue;
            }
            let entries: Vec<_> = {
                let topo = v.topology.read_recover();
                topo.queues().cloned().collect()
            };
            for e in entries {
                let applied = v.policy_for(&e.meta);
                let effective = v.effective_args(&e.meta);
                pending.push((
                    QueueInfo {
                        vhost: v.name.to_string(),
                        name: e.meta.name.to_string(),
                        durable: e.meta.durable,
                        auto_delete: e.meta.auto_delete,
                        exclusive: e.meta.exclusive_owner.is_some(),
                        policy: applied.policy,
                        operator_policy: applied.operator_policy,
                        dead_letter_exchange: effective.dead_letter_exchange,
                        stats: QueueStats::default(),
                        arguments: e.meta.arguments.clone(),
                        effective_policy_definition: applied
                            .definition
                            .map(|d| d.raw)
                            .unwrap_or_default(),
                        queue_type: if e.handle.is_quorum() {
                            "quorum"
                        } else {
                            "classic"
                        },
                        details: QueueDetails::default(),
                        id: e.handle.id(),
                    },
                    e.handle,
                ));
            }
        }
        let mut out = Vec::with_capacity(pending.len());
        for (mut info, handle) in pending {
            let (tx, rx) = oneshot::channel();
            if handle
                .send(QueueCmd::Admin(AdminQuery::Details { reply: tx }))
                .await
                && let Ok(details) = rx.await
            {
                info.stats = details.stats;
                info.details = details;
                out.push(info);
            }
        }
        out.sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
        out
    }
}
