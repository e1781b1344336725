//! Topic permissions through the management interface (`/api/topic-permissions`, `charon ctl
//! set_topic_permissions`, definitions): set, clear, list, each change saved before the call
//! returns (the users/permissions record). The rules themselves are in `crate::topic_access`.

use super::users::AdminError;
use crate::broker::Broker;
use crate::topic_access::TopicPermission;

impl Broker {
    /// Sets `p` (the user and vhost must exist); true when it is new.
    pub async fn set_topic_permission(&self, p: TopicPermission) -> Result<bool, AdminError> {
        if self.vhost(&p.vhost).is_none() || !self.access().read().contains_key(&p.user) {
            return Err(AdminError::BadRequest("vhost_or_user_not_found".into()));
        }
        if p.exchange.is_empty() {
            return Err(AdminError::BadRequest("exchange is missing".into()));
        }
        let created = self
            .access()
            .topics
            .set(p)
            .map_err(AdminError::BadRequest)?;
        self.save_access().await;
        Ok(created)
    }

    /// Clears `user`'s topic permissions on `vhost` (only for `exchange` when given); false
    /// when there were none.
    pub async fn clear_topic_permissions(
        &self,
        user: &str,
        vhost: &str,
        exchange: Option<&str>,
    ) -> bool {
        let n = self.access().topics.clear(user, vhost, exchange);
        if n > 0 {
            self.save_access().await;
        }
        n > 0
    }

    /// Every topic permission, by user, vhost and exchange.
    pub fn list_topic_permissions(&self) -> Vec<TopicPermission> {
        self.access().topics.list()
    }
}
