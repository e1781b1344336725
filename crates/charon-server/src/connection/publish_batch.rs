//! A read batch's single-target publishes, gathered per queue and handed to each queue as one
//! [`QueueCmd::PublishBatch`] instead of one [`QueueCmd::Publish`] per message (one channel send,
//! one inbox count and one `ConnHandle` clone per batch instead of per publish).
//!
//! Order: a queue's publishes stay in publish order (its entries are sent in the order they were
//! made, each in order), and the gathered publishes go out before anything else this connection
//! hands a queue (settles, a multi-target or waiting publish, any other method) and before the
//! connection stops processing what it read (`Connection::flush_publishes`). The queue handles a
//! batch exactly as the same publishes one by one.

use crate::handles::{ConnHandle, Placed, QueueCmd, QueueHandle};

/// Most publishes in one command: a queue's turn takes up to 512 commands and its channel holds
/// 4,096, so at most 16 times as many publishes as before wait in a queue's inbox or are handled
/// in one turn (their bodies still count against `page_out_flow_bytes`, as one by one).
pub(crate) const MAX: usize = 16;

/// One queue's gathered publishes: each with its channel and, in confirm mode, its sequence
/// number.
#[derive(Debug)]
pub(crate) struct Gathered {
    pub(crate) q: QueueHandle,
    pub(crate) placed: Vec<(Placed, Option<(u16, u64)>)>,
}

impl Gathered {
    /// The command for the queue (`conn`: whom it confirms to, needed when any publish
    /// confirms).
    pub(crate) fn command(self, conn: &ConnHandle) -> (QueueHandle, QueueCmd) {
        let confirms = self.placed.iter().any(|(_, c)| c.is_some());
        (
            self.q,
            QueueCmd::PublishBatch {
                placed: self.placed,
                conn: confirms.then(|| conn.clone()),
            },
        )
    }
}

/// The publishes gathered so far, per queue in the order of their first publish.
#[derive(Debug, Default)]
pub(crate) struct PublishBatches {
    pending: Vec<Gathered>,
}

impl PublishBatches {
    /// Nothing gathered.
    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Gathers a publish for `q` (after the ones gathered for it before).
    pub(crate) fn add(&mut self, q: QueueHandle, placed: Placed, confirm: Option<(u16, u64)>) {
        // Few queues per batch: the last entry almost always matches.
        let at = self.pending.iter().rposition(|g| g.q.same(&q));
        match at.and_then(|i| self.pending.get_mut(i)) {
            Some(g) if g.placed.len() < MAX => g.placed.push((placed, confirm)),
            _ => {
                // Room for a full command at once (no growing step by step).
                let mut gathered = Vec::with_capacity(MAX);
                gathered.push((placed, confirm));
                self.pending.push(Gathered {
                    q,
                    placed: gathered,
                });
            }
        }
    }

    /// Everything gathered, in the order to send it.
    pub(crate) fn take(&mut self) -> Vec<Gathered> {
        std::mem::take(&mut self.pending)
    }
}
