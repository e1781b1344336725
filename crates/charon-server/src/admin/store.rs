//! Users, vhosts, permissions, vhost/user limits and runtime/global parameters in the store: one definition record (kind 3, see
//! docs/storage-format.md) holding all of them as JSON, rewritten whole after every change.
//!
//! At start the record is applied over what the configuration file built: users and
//! permissions in the record replace the configured ones of the same name, vhosts in it are
//! created; configured users, vhosts and permissions that the record lacks stay (so a user
//! deleted at run time that the config file names comes back at the next start, as RabbitMQ's
//! definitions-at-boot do).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::access::{User, VHostAccess};
use crate::admin::password::{HashAlg, PasswordHash};
use crate::broker::Broker;
use crate::config::PermissionConfig;
use crate::limits::{UserLimits, VHostLimits};
use crate::persist;

#[derive(Debug, Serialize, Deserialize)]
struct StoredUser {
    name: String,
    password_hash: String,
    hashing_algorithm: String,
    tags: Vec<String>,
    #[serde(default)]
    loopback_only: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct StoredVHost {
    name: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct StoredAccess {
    users: Vec<StoredUser>,
    vhosts: Vec<StoredVHost>,
    permissions: Vec<PermissionConfig>,
    /// Vhost limits set at run time (or imported), by vhost.
    #[serde(default)]
    vhost_limits: BTreeMap<String, VHostLimits>,
    /// User limits, by user.
    #[serde(default)]
    user_limits: BTreeMap<String, UserLimits>,
    /// Runtime parameters (`component`, `vhost`, `name`, `value`).
    #[serde(default)]
    parameters: Vec<serde_json::Value>,
    /// Global parameters by name.
    #[serde(default)]
    global_parameters: serde_json::Map<String, serde_json::Value>,
    /// Topic permissions (`user`, `vhost`, `exchange`, `write`, `read`).
    #[serde(default)]
    topic_permissions: Vec<StoredTopicPermission>,
}

#[derive(Debug, Serialize, Deserialize)]
struct StoredTopicPermission {
    user: String,
    vhost: String,
    exchange: String,
    write: String,
    read: String,
}

impl Broker {
    /// Saves users, vhosts and permissions; returns once they are on disk (no-op without a
    /// store).
    pub(crate) async fn save_access(&self) {
        let Some(p) = self.persistence() else {
            return;
        };
        let durable = {
            let _order = self
                .admin()
                .access_save
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.snapshot_access(&p)
        };
        if let Some(d) = durable {
            d.wait().await;
        }
    }

    /// Snapshots users, vhosts and permissions and appends them to the store.
    fn snapshot_access(&self, p: &crate::persist::Persistence) -> Option<crate::persist::Durable> {
        let (parameters, global_parameters) = self.stored_parameters();
        let data = StoredAccess {
            vhost_limits: self.list_vhost_limits().into_iter().collect(),
            user_limits: self.list_user_limits().into_iter().collect(),
            parameters,
            global_parameters,
            topic_permissions: self
                .list_topic_permissions()
                .into_iter()
                .map(|t| StoredTopicPermission {
                    user: t.user,
                    vhost: t.vhost,
                    exchange: t.exchange,
                    write: t.write,
                    read: t.read,
                })
                .collect(),
            users: self
                .list_users()
                .into_iter()
                .map(|u| StoredUser {
                    name: u.name,
                    password_hash: u.password_hash,
                    hashing_algorithm: u.hashing_algorithm.to_string(),
                    tags: u.tags,
                    loopback_only: u.loopback_only,
                })
                .collect(),
            vhosts: self
                .vhosts()
                .iter()
                .map(|v| StoredVHost {
                    name: v.name.to_string(),
                })
                .collect(),
            permissions: self
                .list_permissions()
                .into_iter()
                .map(|p| PermissionConfig {
                    user: p.user,
                    vhost: p.vhost,
                    configure: p.configure,
                    write: p.write,
                    read: p.read,
                })
                .collect(),
        };
        let json = serde_json::to_vec(&data).ok()?;
        p.save_access(Bytes::from(json))
    }

    /// Applies the saved users, vhosts and permissions (called by `open_store`).
    pub(crate) fn restore_access(&self, rec: &charon_store::Recovered) {
        let Some(data) = persist::access_of(rec) else {
            return;
        };
        let stored: StoredAccess = match serde_json::from_slice(&data) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "the saved users and vhosts cannot be read; using the configuration's");
                return;
            }
        };
        for v in &stored.vhosts {
            self.insert_vhost(&v.name);
        }
        for (v, l) in &stored.vhost_limits {
            self.limits().set_vhost_limits(v, *l);
        }
        for (u, l) in &stored.user_limits {
            self.limits().set_user_limits(u, *l);
        }
        self.restore_parameters(&stored.parameters, &stored.global_parameters);
        for t in stored.topic_permissions {
            let p = crate::topic_access::TopicPermission {
                user: t.user,
                vhost: t.vhost,
                exchange: t.exchange,
                write: t.write,
                read: t.read,
            };
            if let Err(e) = self.access().topics.set(p) {
                tracing::error!(error = %e, "a saved topic permission cannot be used");
            }
        }
        let mut users = self.access().write();
        for u in stored.users {
            let alg = HashAlg::from_name(&u.hashing_algorithm).unwrap_or(HashAlg::Sha256);
            let password = PasswordHash::from_base64(alg, &u.password_hash)
                .unwrap_or_else(|_| PasswordHash::none());
            users.insert(
                u.name,
                User {
                    password,
                    loopback_only: u.loopback_only,
                    tags: u.tags,
                    vhosts: Default::default(),
                },
            );
        }
        for perm in stored.permissions {
            let Some(u) = users.get_mut(&perm.user) else {
                continue;
            };
            match VHostAccess::new(&perm.user, &perm.vhost, &perm) {
                Ok(a) => {
                    u.vhosts.insert(perm.vhost.clone(), Arc::new(a));
                }
                Err(e) => tracing::error!(error = %e, "a saved permission cannot be used"),
            }
        }
    }
}
