//! Removing ready messages from a queue by id, for the management API: a dead letter that the
//! UI replayed to its original exchange leaves its dead-letter queue this way (not
//! dead-lettered again, settled in the store like an ack). Needs read permission on the queue,
//! like basic.get and purge.

use charon_core::MsgId;
use tokio::sync::oneshot;

use crate::access::{Permission, ResourceKind};
use crate::admin::users::AdminError;
use crate::broker::Broker;
use crate::handles::QueueCmd;

impl Broker {
    /// Removes the ready messages `ids` from `queue` in `vhost` as `user`; returns the ids
    /// removed (ids not ready there — consumed, delivered, already removed — are left out).
    pub async fn remove_messages(
        &self,
        user: &str,
        vhost: &str,
        queue: &str,
        ids: Vec<MsgId>,
    ) -> Result<Vec<MsgId>, AdminError> {
        let handle = self.queue_handle(vhost, queue)?;
        self.access()
            .check(user, vhost, ResourceKind::Queue, queue, Permission::Read)?;
        let (tx, rx) = oneshot::channel();
        if !handle.send(QueueCmd::Remove { ids, reply: tx }).await {
            return Err(AdminError::NotFound);
        }
        rx.await.map_err(|_| AdminError::NotFound)
    }
}
