//! The consumer ring of a queue: registration order, round-robin cursor,
//! per-consumer credit (prefetch vs. unacked count).

use std::collections::VecDeque;

use super::{ConsumerId, ConsumerSpec};

/// One consumer's state.
#[derive(Debug, Clone)]
pub(super) struct Consumer {
    pub(super) id: ConsumerId,
    pub(super) spec: ConsumerSpec,
    pub(super) unacked: u32,
}

impl Consumer {
    pub(super) fn has_credit(&self) -> bool {
        self.spec.no_ack || self.spec.prefetch == 0 || self.unacked < u32::from(self.spec.prefetch)
    }
}

/// Consumers in round-robin order (front = next to try).
#[derive(Debug, Default)]
pub(super) struct Consumers {
    ring: VecDeque<Consumer>,
    /// Registration order, for single-active-consumer.
    order: Vec<ConsumerId>,
}

impl Consumers {
    pub(super) fn len(&self) -> usize {
        self.ring.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    pub(super) fn any_exclusive(&self) -> bool {
        self.ring.iter().any(|c| c.spec.exclusive)
    }

    pub(super) fn add(&mut self, id: ConsumerId, spec: ConsumerSpec) {
        self.ring.push_back(Consumer {
            id,
            spec,
            unacked: 0,
        });
        self.order.push(id);
    }

    pub(super) fn remove(&mut self, id: ConsumerId) {
        self.ring.retain(|c| c.id != id);
        self.order.retain(|c| *c != id);
    }

    /// The single active consumer (the earliest registered).
    pub(super) fn active(&self) -> Option<ConsumerId> {
        self.order.first().copied()
    }

    pub(super) fn get_mut(&mut self, id: ConsumerId) -> Option<&mut Consumer> {
        self.ring.iter_mut().find(|c| c.id == id)
    }

    pub(super) fn front(&self) -> Option<&Consumer> {
        self.ring.front()
    }

    /// Move the front consumer to the back.
    pub(super) fn rotate(&mut self) {
        if let Some(c) = self.ring.pop_front() {
            self.ring.push_back(c);
        }
    }

    pub(super) fn front_mut(&mut self) -> Option<&mut Consumer> {
        self.ring.front_mut()
    }

    /// One less unacked delivery for `id` (if it still exists).
    pub(super) fn settled(&mut self, id: ConsumerId) {
        if let Some(c) = self.get_mut(id) {
            c.unacked = c.unacked.saturating_sub(1);
        }
    }
}
