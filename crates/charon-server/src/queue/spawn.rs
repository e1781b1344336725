//! Making a queue's actor: for a newly declared queue, and for a durable queue restored from
//! the store with its messages.

use std::sync::Arc;

use charon_core::{QueueMeta, QueueState};

use super::actor::{self, QueueContext};
use super::idset::IdSet;
use super::marks::{DeliveryMarks, Mark};
use super::stored::{PagedShapes, StoreSide};
use crate::handles::QueueHandle;
use crate::vhost::VHostState;

/// Makes the actor for a newly declared queue; passed to `VHost::declare_queue`. It runs with
/// its arguments overlaid with the vhost's applicable policy; a durable queue of a broker with a
/// store gets a new store id.
pub(crate) fn spawn_queue(
    meta: &QueueMeta,
    vhost: &Arc<VHostState>,
    vhost_name: &str,
) -> QueueHandle {
    let store_id = match vhost.persistence() {
        Some(p) if meta.durable => Some(p.new_queue_id()),
        _ => None,
    };
    spawn_queue_with(meta, vhost, vhost_name, store_id, Default::default(), None)
}

/// A recovered member's message, read back from its record (`None`, logged, when it cannot be:
/// the message stays in the store and comes back at the next start).
pub(crate) fn read_recovered(
    reader: &mut charon_store::MetaReader,
    e: &charon_store::RecoveredEntry,
) -> Option<charon_store::RecoveredMessage> {
    match reader.read(e.msg) {
        Ok(m) => Some(m),
        // Settled meanwhile (a queue purged at start): nothing to restore.
        Err(charon_store::ReadError::NotFound(_)) => None,
        Err(err) => {
            tracing::error!(id = e.id, %err, "a recovered message could not be read back");
            None
        }
    }
}

/// [`spawn_queue`] with its store id and the messages recovered from the store for it. They
/// come back with their bodies on disk (read when delivered), redelivered if they had been
/// delivered, expiring by the wall clock from their enqueue time. The entries come packed (a few
/// bytes each) and each message's metadata is read as it enters the queue (recovery never holds
/// a backlog's metadata); alike messages share one ready slot (a run).
pub(crate) fn spawn_queue_with(
    meta: &QueueMeta,
    vhost: &Arc<VHostState>,
    vhost_name: &str,
    store_id: Option<u64>,
    recovered: charon_store::RecoveredList,
    mark: Option<Mark>,
) -> QueueHandle {
    let quorum = meta.args.queue_type == charon_core::QueueType::Quorum;
    let first_id = recovered.last_id().map_or(0, |id| id + 1);
    let any_recovered = !recovered.is_empty();
    let (handle, rx) = QueueHandle::with_type(meta.name.clone(), quorum, store_id, first_id);
    let effective = vhost.effective_args(meta);
    handle.set_consumer_timeout(effective.consumer_timeout);
    let mut state = QueueState::new(meta.name.clone(), effective);
    state.set_vhost(vhost_name);
    // Every queue of a broker with a store has a store side: durable queues for their stored
    // messages, all queues to page transient bodies out under memory pressure.
    let persist = vhost.persistence().map(|p| {
        state.track_gone();
        (p.clone(), store_id)
    });
    // The recovered ids, in order: a backlog is one run of ids.
    let mut persisted = IdSet::default();
    let mut shapes = PagedShapes::default();
    let mut parked = Vec::new();
    // A recovered member the delivered mark covers comes back redelivered (`queue::marks`).
    let mut marks = DeliveryMarks::restored(mark.as_ref());
    // The store keeps no metadata per recovered message: each is read from its record here.
    let mut reader = vhost.persistence().map(|p| p.meta_reader());
    for e in &recovered {
        let Some(sm) = reader.as_mut().and_then(|r| read_recovered(r, &e)) else {
            continue;
        };
        let message = shapes.get(
            &sm.exchange,
            &sm.routing_key,
            &sm.properties,
            u64::from(sm.body.len),
        );
        let mut expires_at = state.expiry_for(&message, sm.enqueue_ms);
        if let Some(own) = sm.expiry_ms {
            expires_at = Some(expires_at.map_or(own, |q| q.min(own)));
        }
        persisted.insert(e.id);
        let delivered =
            e.delivery_count > 0 || mark.as_ref().is_some_and(|m| m.covers(e.id, e.msg));
        marks.recovered(e.id, e.msg, delivered);
        if let Some((due, attempt)) = e.parked {
            // Parked for a retry: the actor parks it again (queue/retry.rs).
            parked.push((due, e.id, message, attempt));
            continue;
        }
        state.restore(e.id, message, expires_at, delivered);
        // The store keeps failed deliveries + 1 (`DeliveryCount`, docs/storage-format.md).
        state.set_returns(e.id, e.delivery_count.saturating_sub(1));
    }
    if any_recovered {
        // Length limits hold after recovery too (a policy may have lowered them).
        let args = state.args().clone();
        state.set_args(args);
    }
    let ctx = QueueContext {
        vhost: vhost.clone(),
        auto_delete: meta.auto_delete,
        store: persist.map(|(p, sid)| {
            let shadow = p.new_queue_id();
            StoreSide::new(p, sid.unwrap_or(shadow), shadow, persisted, shapes, marks)
        }),
    };
    actor::spawn(state, &handle, rx, ctx);
    if !parked.is_empty() {
        // The channel is new and empty: this cannot be refused for lack of room.
        let _ = handle.try_send(crate::handles::QueueCmd::RestoreParked { parked });
    }
    handle
}
