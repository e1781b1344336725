//! Waiting for durability by log index: the writer publishes, once per group commit, the last
//! index on disk (or that the store is poisoned); a caller that appended without a completion
//! ([`crate::Store::append_nowait`]) waits for its record's index with a [`DurableWatch`]. No
//! allocation and no completion per record: a confirm costs one look at the watch when its
//! batch is already on disk.

use tokio::sync::watch;

use crate::error::CommitError;

/// What the writer publishes after each batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Durability {
    /// Every record at or below this index is on disk.
    pub(crate) index: u64,
    /// The store failed writing: nothing later becomes durable.
    pub(crate) poisoned: bool,
    /// The store was closed: nothing later becomes durable.
    pub(crate) closed: bool,
}

/// A handle to wait until a log index is durable. Cheap to clone.
#[derive(Debug, Clone)]
pub struct DurableWatch(pub(crate) watch::Receiver<Durability>);

impl DurableWatch {
    /// Whether everything up to `index` is on disk now.
    pub fn is_durable(&self, index: u64) -> bool {
        self.0.borrow().index >= index
    }

    /// The durable index now, and whether nothing later will become durable (the store was
    /// poisoned or closed). Marks the state seen for [`DurableWatch::changed`].
    pub fn seen(&mut self) -> (u64, bool) {
        let d = *self.0.borrow_and_update();
        (d.index, d.poisoned || d.closed)
    }

    /// Completes when the writer published a state not [`DurableWatch::seen`] yet (once per
    /// group commit); `false` when the store is gone (nothing will change any more).
    pub async fn changed(&mut self) -> bool {
        self.0.changed().await.is_ok()
    }

    /// Completes once every record up to `index` is on disk; an error if the store was
    /// poisoned or closed first. (Completed ⇒ durable, exactly as a [`crate::Commit`].)
    pub async fn reached(&mut self, index: u64) -> Result<(), CommitError> {
        let state = self
            .0
            .wait_for(|d| d.index >= index || d.poisoned || d.closed)
            .await
            .map(|d| *d)
            .map_err(|_| CommitError::Closed)?;
        if state.index >= index {
            Ok(())
        } else if state.poisoned {
            Err(CommitError::Poisoned("store write failed".into()))
        } else {
            Err(CommitError::Closed)
        }
    }
}
