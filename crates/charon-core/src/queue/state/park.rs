//! The operations retries ([`crate::retry`]) need on a [`QueueState`]: taking a delivered
//! message out without settling it as gone (it is parked, still the queue's), putting a
//! message at the tail regardless of `reject-publish` (it was accepted before), and taking
//! ready messages out that must wait behind a retrying one of the same key.

use std::sync::Arc;

use super::{QueueState, Ready};
use crate::message::Message;
use crate::queue::MsgId;

impl QueueState {
    /// The unacked message `id`, if it is unacked.
    pub fn unacked_message(&self, id: MsgId) -> Option<&Arc<Message>> {
        self.unacked.get(id).map(|u| &u.message)
    }

    /// Takes unacked message `id` out of the queue's books without marking it gone (it stays
    /// the queue's: parked for a retry).
    pub fn take_unacked(&mut self, id: MsgId) -> Option<Arc<Message>> {
        self.settle(id).map(|u| u.message)
    }

    /// Puts `message` in the ready list under `id` (the tail for a new id, its old place for an
    /// old one), with its expiry counted from `now_ms`; never refused, but a drop-head queue
    /// over its limits drops heads as usual.
    pub fn enqueue_at(&mut self, id: MsgId, message: Arc<Message>, now_ms: u64) {
        self.next_id = self.next_id.max(id + 1);
        let expires_at = self.expiry_for(&message, now_ms);
        self.insert_ready(
            id,
            Ready {
                message,
                redelivered: false,
                expires_at,
                returns: 0,
            },
        );
        self.enforce_limits();
    }

    /// Sets how often ready message `id` was returned before (recovered: its stored delivery
    /// count), for `x-delivery-count` and the delivery limit.
    pub fn set_returns(&mut self, id: MsgId, returns: u32) {
        self.ready.set_returns(id, returns);
    }

    /// How often ready message `id` was returned after a failed delivery, if it is ready.
    pub fn returns_of(&self, id: MsgId) -> Option<u32> {
        self.ready.returns_of(id)
    }

    /// Takes every ready message after `after` for which `hold` is true out of the queue (not
    /// gone: the caller keeps them), in queue order.
    pub fn take_ready_after(
        &mut self,
        after: MsgId,
        hold: &mut dyn FnMut(&Message) -> bool,
    ) -> Vec<(MsgId, Arc<Message>)> {
        let ids: Vec<MsgId> = self
            .ready
            .iter_from(after.saturating_add(1))
            .filter(|(_, r)| hold(r.message))
            .map(|(id, _)| id)
            .collect();
        ids.into_iter()
            .filter_map(|id| self.remove_ready(id).map(|r| (id, r.message)))
            .collect()
    }
}
