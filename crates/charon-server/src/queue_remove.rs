//! Removing ready messages from a queue by id, for the management API: a dead letter that the
//! UI replayed to its original exchange leaves its dead-letter queue this way (not
//! dead-lettered again, settled in the store like an ack).

use charon_core::MsgId;
use tokio::sync::oneshot;

use crate::broker::Broker;
use crate::queue::QueueCmd;

/// Why messages could not be removed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoveError {
    /// No such vhost or queue.
    #[error("no queue '{queue}' in vhost '{vhost}'")]
    NotFound {
        /// Vhost.
        vhost: String,
        /// Queue.
        queue: String,
    },
}

impl Broker {
    /// Removes the ready messages `ids` from `queue` in `vhost`; returns the ids removed (ids
    /// not ready there — consumed, delivered, already removed — are left out).
    pub async fn remove_messages(
        &self,
        vhost: &str,
        queue: &str,
        ids: Vec<MsgId>,
    ) -> Result<Vec<MsgId>, RemoveError> {
        let not_found = || RemoveError::NotFound {
            vhost: vhost.to_string(),
            queue: queue.to_string(),
        };
        let v = self.vhost(vhost).ok_or_else(not_found)?;
        let handle = {
            let topo = v.topology.read().unwrap_or_else(|p| p.into_inner());
            topo.queue(queue).map(|e| e.handle.clone())
        }
        .ok_or_else(not_found)?;
        let (tx, rx) = oneshot::channel();
        if !handle.send(QueueCmd::Remove { ids, reply: tx }).await {
            return Err(not_found());
        }
        rx.await.map_err(|_| not_found())
    }
}
