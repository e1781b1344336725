//! Which segment holds each live queue entry, and how many live entries each segment holds:
//! what reclamation needs. Kept the same way during replay and while writing.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::record::Record;

/// Live queue entries by segment.
#[derive(Debug, Default)]
pub(crate) struct Liveness {
    /// (queue, queue-local id) → first index of the segment holding its record.
    locations: HashMap<(Arc<str>, u64), u64>,
    /// Segment first index → live entries in it.
    live: BTreeMap<u64, u64>,
}

impl Liveness {
    /// Makes sure `segment` is known (with no live entries yet).
    pub(crate) fn open_segment(&mut self, segment: u64) {
        self.live.entry(segment).or_default();
    }

    /// Forgets a deleted segment.
    pub(crate) fn forget_segment(&mut self, segment: u64) {
        self.live.remove(&segment);
    }

    /// Live entries in `segment`.
    pub(crate) fn live_in(&self, segment: u64) -> u64 {
        self.live.get(&segment).copied().unwrap_or(0)
    }

    fn add(&mut self, q: &Arc<str>, id: u64, segment: u64) {
        if self.locations.insert((q.clone(), id), segment).is_none() {
            *self.live.entry(segment).or_default() += 1;
        }
    }

    fn remove(&mut self, q: &Arc<str>, id: u64) {
        if let Some(seg) = self.locations.remove(&(q.clone(), id))
            && let Some(n) = self.live.get_mut(&seg)
        {
            *n = n.saturating_sub(1);
        }
    }

    /// Accounts for a message-log record written to `segment`.
    pub(crate) fn track(&mut self, r: &Record, segment: u64) {
        match r {
            Record::Publish(m) => {
                for (q, id) in &m.queues {
                    self.add(q, *id, segment);
                }
            }
            Record::Settle { queue, ids } => {
                for id in ids {
                    self.remove(queue, *id);
                }
            }
            Record::DeadLetterMove {
                from_queue,
                from_id,
                message,
            } => {
                self.remove(from_queue, *from_id);
                for (q, id) in &message.queues {
                    self.add(q, *id, segment);
                }
            }
            _ => {}
        }
    }
}
