//! Where a message goes in its target queues: one place allocates a message's id in each
//! target (before any of them sees it) and names its durable places, for the publishing channel
//! and for dead-lettering alike; a persistent publish is written to the store here, once for all
//! its durable targets.

use std::sync::Arc;

use charon_core::{Message, MsgId};

use super::now_ms;
use crate::handles::{Placed, QueueHandle, Stored};
use crate::persist::Durable;
use crate::vhost::VHostState;

/// A message's place in each target queue: (queue, id there).
pub(crate) type Places = Vec<(QueueHandle, MsgId)>;

/// Chooses a message's id in each of `targets` (now, before any of them sees it). Returns the
/// places and, when the message is `persistent`, its durable places as store members
/// (queue store id, id there): what one `Publish` or `DeadLetter` record names.
pub(crate) fn allocate(
    targets: impl IntoIterator<Item = QueueHandle>,
    persistent: bool,
) -> (Places, Vec<(u64, u64)>) {
    let places: Places = targets
        .into_iter()
        .map(|q| {
            let id = q.alloc_id();
            (q, id)
        })
        .collect();
    let members = places
        .iter()
        .filter(|_| persistent)
        .filter_map(|(q, id)| q.store_id().map(|s| (s, *id)))
        .collect();
    (places, members)
}

/// `message` at each of `places`; `stored` (its store id, if the store took it) goes to the
/// durable places, for a persistent message.
pub(crate) fn placed(
    places: Places,
    message: &Arc<Message>,
    stored: Stored,
) -> impl Iterator<Item = (QueueHandle, Placed)> {
    let persistent = message.properties.delivery_mode() == Some(2);
    places.into_iter().map(move |(q, id)| {
        let stored = stored.filter(|_| persistent && q.store_id().is_some());
        let placed = Placed {
            message: message.clone(),
            id,
            stored,
        };
        (q, placed)
    })
}

/// A routed message's places: its id in each target queue, and, for a persistent message, one
/// store record for all its durable targets (the body stored once). The write, when there is
/// one, tells once it is durable (or that the store refused it: the publisher gets a nack).
pub(crate) fn place(
    vhost: &VHostState,
    targets: Vec<QueueHandle>,
    message: &Arc<Message>,
) -> (Vec<(QueueHandle, Placed)>, Option<Durable>) {
    let persistent = message.properties.delivery_mode() == Some(2);
    if !persistent {
        // Transient: no store member anywhere, so ids and places in one pass (one `Vec`).
        let placed = targets.into_iter().map(|q| {
            let id = q.alloc_id();
            let placed = Placed {
                message: message.clone(),
                id,
                stored: None,
            };
            (q, placed)
        });
        return (placed.collect(), None);
    }
    let (places, members) = allocate(targets, persistent);
    let (msg, stored) = match vhost.persistence() {
        Some(p) if !members.is_empty() => {
            let (msg, durable) = p.publish(message, &members, now_ms());
            (msg, Some(durable))
        }
        _ => (None, None),
    };
    (placed(places, message, msg).collect(), stored)
}

/// [`place`] for a message routed to exactly one queue (the usual case): the same id, store
/// record and `Placed`, without `place`'s three `Vec`s (the store borrows the one member).
/// `clock` is the enqueue time (ms) of the caller's publishes handled without waiting, read here
/// when the first of them is stored (`None`: read now and kept there).
pub(crate) fn place_one(
    vhost: &VHostState,
    q: &QueueHandle,
    message: Arc<Message>,
    clock: &mut Option<u64>,
) -> (Placed, Option<Durable>) {
    let id = q.alloc_id();
    let persistent = message.properties.delivery_mode() == Some(2);
    let (stored, durable) = match (persistent, q.store_id(), vhost.persistence()) {
        (true, Some(sid), Some(p)) => {
            let now = *clock.get_or_insert_with(now_ms);
            let (msg, durable) = p.publish(&message, &[(sid, id)], now);
            (msg, Some(durable))
        }
        _ => (None, None),
    };
    let placed = Placed {
        message,
        id,
        stored,
    };
    (placed, durable)
}
