//! The queue actor's retry side (`charon_core::retry`): parks what consumers reject (or nack,
//! with `retry-on-requeue`), puts it back at the tail when its delay has passed (a new id in
//! the queue; a stored message keeps its place in the store, [`StoreSide::renamed`]), holds
//! messages behind a retrying one of the same key, and reports counts for management.

use std::sync::Arc;

use charon_core::retry::{Retrier, RetryStats};
use charon_core::{Message, MsgId, QueueState};
use rand::{Rng, SeedableRng, rngs::StdRng};

use super::stored::StoreSide;
use crate::handles::QueueHandle;
use crate::lateness::{Lateness, LatenessSummary, now_us};

/// The retry side of one queue actor.
#[derive(Debug)]
pub(super) struct RetrySide {
    r: Retrier,
    rng: StdRng,
    /// Release lateness (actual release − due), measured here at the release point.
    lateness: Lateness,
    /// (parked id, new id) of the last release, reused.
    moved: Vec<(MsgId, MsgId)>,
}

/// Most parked messages released per run of the actor's loop: a mass release goes out in
/// bounded slices with commands (acks, publishes) handled in between.
const RELEASE_BATCH: usize = 4096;

impl Default for RetrySide {
    fn default() -> Self {
        RetrySide {
            r: Retrier::default(),
            rng: StdRng::from_os_rng(),
            lateness: Lateness::default(),
            moved: Vec::new(),
        }
    }
}

impl RetrySide {
    /// Consumers rejected (`requeue = false`) or nacked with requeue (`requeue = true`)
    /// messages `ids`: parked, or handled as the queue always does (dead-lettered, requeued).
    pub(super) fn failed(
        &mut self,
        state: &mut QueueState,
        ids: &[MsgId],
        requeue: bool,
        store: Option<&StoreSide>,
    ) {
        let settings = state.args().retry.clone();
        let rng = &mut self.rng;
        // Due times in µs: messages failing in the same millisecond keep distinct due times.
        let now = now_us();
        let parked = self
            .r
            .failed_us(state, settings.as_ref(), ids, requeue, now, &mut || {
                rng.random()
            });
        if let Some(s) = store {
            for p in parked {
                s.park(p.id, p.due, p.attempt);
            }
        }
    }

    /// Parked messages recovered from the store: `(due, id, message, attempt)`.
    pub(super) fn restore(
        &mut self,
        state: &mut QueueState,
        parked: Vec<(u64, MsgId, Arc<Message>, u32)>,
    ) {
        let settings = state.args().retry.clone();
        for (due, id, m, attempt) in parked {
            self.r
                .restore(state, settings.as_ref(), due, id, m, attempt);
        }
    }

    /// Whether `message` (id `id`) waits behind a retrying message of its key instead of
    /// entering the ready list.
    pub(super) fn holds(&mut self, state: &QueueState, id: MsgId, message: &Arc<Message>) -> bool {
        self.r.holds(state.args().retry.as_ref(), id, message)
    }

    /// Releases parked messages whose time has come to the tail of the queue, at most
    /// [`RELEASE_BATCH`] at a time (the actor comes back at once for the rest).
    pub(super) fn release(
        &mut self,
        state: &mut QueueState,
        me: &QueueHandle,
        store: Option<&mut StoreSide>,
    ) {
        let Some(first) = self.r.next_due_us() else {
            return;
        };
        let at = now_us();
        if first > at {
            return;
        }
        let lateness = &mut self.lateness;
        self.moved.clear();
        self.r.release_due_us(
            state,
            at,
            RELEASE_BATCH,
            &mut || me.alloc_id(),
            &mut |due| lateness.record_us(due, at),
            &mut self.moved,
        );
        if let Some(s) = store {
            for &(old, new) in &self.moved {
                s.renamed(old, new);
            }
        }
    }

    /// Messages `gone` left the queue (retrying keys may be released).
    pub(super) fn gone(&mut self, state: &mut QueueState, gone: &[MsgId], now: u64) {
        self.r.on_gone(state, gone, now);
    }

    /// New settings: start tracking departures for an order key, release holds without one.
    pub(super) fn settings_changed(&mut self, state: &mut QueueState, now: u64) {
        if Retrier::needs_gone(state.args().retry.as_ref()) {
            state.track_gone();
        } else {
            self.r.release_holds(state, now);
        }
    }

    /// queue.purge: parked and held messages go too; returns their ids.
    pub(super) fn purge(&mut self) -> Vec<MsgId> {
        self.r.purge()
    }

    /// When the actor must wake to release (µs).
    pub(super) fn next_due_us(&self) -> Option<u64> {
        self.r.next_due_us()
    }

    /// Release lateness so far (`None` before the first release).
    pub(super) fn lateness(&self) -> Option<LatenessSummary> {
        self.lateness.summary()
    }

    /// Counts for management.
    pub(super) fn stats(&self) -> RetryStats {
        self.r.stats()
    }
}
