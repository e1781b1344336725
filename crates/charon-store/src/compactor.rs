//! The compaction thread: compaction (reading a sparse segment, parsing it and appending its
//! live items forward, `compaction::compact_one`) runs here, off the group-commit writer, so
//! confirms never wait while a segment is copied. The writer still deletes dead segments
//! (cheap, and it owns the spare file's hand-over) and wakes this thread after each batch.
//! Between compactions this thread also prepares a zeroed spare segment file ahead of the
//! writer (`spare::prepare`).
//!
//! While a copy is not written yet, a read of the message's body is served from where the
//! message was before (`Moved`): the old record stays on disk until the copy is durable (the
//! old segment is deleted only then), so a queue delivering a carried message never waits
//! for the writer.

use std::sync::Arc;

use foldhash::HashMap as FastMap;

use crate::compaction;
use crate::spare;
use crate::store::{Shared, State};
use crate::types::{BodyRef, MessageId};

/// Where carried messages were before their copies, until the copies are durable.
#[derive(Debug, Default)]
pub(crate) struct Moved {
    /// Message → its body's previous place.
    from: FastMap<MessageId, BodyRef>,
    /// Log index of the last copy noted: once it is durable, every copy is.
    until: u64,
}

impl Moved {
    /// Message `msg`, whose body was at `old`, is being copied by the record with log index
    /// `index` (not written yet).
    pub(crate) fn note(&mut self, msg: MessageId, old: BodyRef, index: u64) {
        self.from.entry(msg).or_insert(old);
        self.until = self.until.max(index);
    }

    /// Forgets every move once the copies are durable.
    pub(crate) fn durable(&mut self, durable_index: u64) {
        if !self.from.is_empty() && durable_index >= self.until {
            self.from = FastMap::default();
        }
    }

    /// Where message `msg`'s body was before a copy not yet durable.
    pub(crate) fn get(&self, msg: MessageId) -> Option<BodyRef> {
        self.from.get(&msg).copied()
    }
}

/// Thread body: compacts while there is something to compact, then waits for the writer's
/// next batch (or an idle tick); returns when the store is closed.
pub(crate) fn run(shared: Arc<Shared>) {
    loop {
        if compaction::compact_one(&shared) {
            continue;
        }
        // Off the writer: the next segment's blocks written ahead (`spare::prepare`).
        if spare::prepare(&shared) {
            continue;
        }
        let st = shared.lock();
        if st.closed {
            return;
        }
        let st = shared
            .compact_wake
            .wait_timeout(st, shared.config.idle_tick)
            .map(|(g, _)| g)
            .unwrap_or_else(|e| e.into_inner().0);
        if st.closed {
            return;
        }
    }
}

/// Wakes the writer for copies just appended.
pub(crate) fn wake_writer(shared: &Shared, st: &mut State) {
    crate::store::wake_writer(shared, st);
}
