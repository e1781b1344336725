//! Users, permissions and vhosts created, changed and deleted at run time (management API,
//! `charon ctl`, definitions import). Every change is saved to the store ([`super::store`]) and
//! the call returns once it is on disk.
//!
//! RabbitMQ's rules: creating a vhost through the API gives its creator full permissions on it;
//! deleting a vhost deletes its queues, exchanges, policies and permissions and closes its
//! connections; deleting a user deletes its permissions and closes its connections; a `PUT` of a
//! user without password or hash leaves it without a usable password.

use std::sync::Arc;

use crate::access::{User, VHostAccess};
use crate::admin::password::{HashAlg, PasswordHash};
use crate::broker::{Broker, VHostState};
use crate::config::PermissionConfig;
use crate::handles::QueueCmd;

/// A user as listed (`/api/users`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserView {
    /// Name.
    pub name: String,
    /// Base64 salted hash.
    pub password_hash: String,
    /// `rabbit_password_hashing_sha256`, ...
    pub hashing_algorithm: &'static str,
    /// Tags.
    pub tags: Vec<String>,
    /// Logins from loopback addresses only.
    pub loopback_only: bool,
}

/// A user's permissions on a vhost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionView {
    /// User.
    pub user: String,
    /// Vhost.
    pub vhost: String,
    /// Configure pattern.
    pub configure: String,
    /// Write pattern.
    pub write: String,
    /// Read pattern.
    pub read: String,
}

/// How a `PUT` of a user sets its password.
#[derive(Debug, Clone)]
pub enum PasswordInput {
    /// A clear-text password, hashed with SHA-256 and a new salt.
    Plain(String),
    /// A hash as RabbitMQ exports it, with its algorithm name.
    Hash {
        /// Base64 hash.
        hash: String,
        /// Algorithm name (`rabbit_password_hashing_sha256` when absent).
        algorithm: Option<String>,
    },
    /// Neither: no usable password.
    None,
}

/// Why a management change was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    /// The object does not exist (HTTP 404).
    #[error("Not Found")]
    NotFound,
    /// Bad input (HTTP 400 with this reason).
    #[error("{0}")]
    BadRequest(String),
    /// A named object is missing (HTTP 404 `not_found` with this reason).
    #[error("{0}")]
    Missing(String),
    /// The user may not do this (HTTP 401 `not_authorised`).
    #[error("{0}")]
    AccessRefused(String),
}

impl From<crate::error::AmqpError> for AdminError {
    fn from(e: crate::error::AmqpError) -> Self {
        // The reply text without its "CODE_NAME - " prefix, as the management API shows it.
        let text = e
            .text
            .split_once(" - ")
            .map_or(e.text.as_str(), |(_, t)| t)
            .to_string();
        match e.code.code() {
            404 => AdminError::Missing(text),
            403 => AdminError::AccessRefused(text),
            _ => AdminError::BadRequest(text),
        }
    }
}

impl From<charon_core::CoreError> for AdminError {
    fn from(e: charon_core::CoreError) -> Self {
        crate::error::AmqpError::from(e).into()
    }
}

impl From<crate::access::AccessRefused> for AdminError {
    fn from(e: crate::access::AccessRefused) -> Self {
        AdminError::AccessRefused(e.to_string())
    }
}

impl Broker {
    /// All users, by name.
    pub fn list_users(&self) -> Vec<UserView> {
        let users = self.access().read();
        let mut v: Vec<UserView> = users
            .iter()
            .map(|(name, u)| UserView {
                name: name.clone(),
                password_hash: u.password.to_base64(),
                hashing_algorithm: u.password.alg.name(),
                tags: u.tags.clone(),
                loopback_only: u.loopback_only,
            })
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// One user.
    pub fn user(&self, name: &str) -> Option<UserView> {
        self.list_users().into_iter().find(|u| u.name == name)
    }

    /// Creates or replaces a user (its permissions stay). Returns whether it was created.
    pub async fn put_user(
        &self,
        name: &str,
        password: PasswordInput,
        tags: Vec<String>,
    ) -> Result<bool, AdminError> {
        let hash = match password {
            PasswordInput::Plain(p) => PasswordHash::new(HashAlg::Sha256, &p),
            PasswordInput::Hash { hash, algorithm } => {
                let alg = match algorithm.as_deref() {
                    None | Some("") => HashAlg::Sha256,
                    Some(a) => HashAlg::from_name(a).ok_or_else(|| {
                        AdminError::BadRequest(format!("unsupported hashing_algorithm {a}"))
                    })?,
                };
                PasswordHash::from_base64(alg, &hash)
                    .map_err(|_| AdminError::BadRequest("invalid password_hash".into()))?
            }
            PasswordInput::None => {
                let random: [u8; 16] = rand::random();
                PasswordHash::new(HashAlg::Sha256, &format!("{random:?}"))
            }
        };
        if name.is_empty() {
            return Err(AdminError::BadRequest("user name must not be empty".into()));
        }
        let created = {
            let mut users = self.access().write();
            match users.get_mut(name) {
                Some(u) => {
                    u.password = hash;
                    u.tags = tags;
                    false
                }
                None => {
                    users.insert(
                        name.to_string(),
                        User {
                            password: hash,
                            loopback_only: false,
                            tags,
                            vhosts: Default::default(),
                        },
                    );
                    true
                }
            }
        };
        self.save_access().await;
        Ok(created)
    }

    /// Deletes a user with its permissions and closes its connections. False: no such user.
    pub async fn delete_user(&self, name: &str) -> bool {
        let removed = self.access().write().remove(name).is_some();
        if removed {
            self.access().topics.forget_user(name);
            for c in self.admin().connections.list() {
                if c.user == name {
                    c.request_close("user deleted".into());
                }
            }
            self.save_access().await;
        }
        removed
    }

    /// Every user's permissions, by vhost then user.
    pub fn list_permissions(&self) -> Vec<PermissionView> {
        let users = self.access().read();
        let mut v: Vec<PermissionView> = users
            .values()
            .flat_map(|u| u.vhosts.values())
            .map(|a| view(a))
            .collect();
        v.sort_by(|a, b| (&a.vhost, &a.user).cmp(&(&b.vhost, &b.user)));
        v
    }

    /// Sets `user`'s permissions on `vhost`; returns whether they were new.
    pub async fn set_permissions(
        &self,
        user: &str,
        vhost: &str,
        configure: &str,
        write: &str,
        read: &str,
    ) -> Result<bool, AdminError> {
        if self.vhost(vhost).is_none() {
            return Err(AdminError::BadRequest("vhost_or_user_not_found".into()));
        }
        let p = PermissionConfig {
            user: user.to_string(),
            vhost: vhost.to_string(),
            configure: configure.to_string(),
            write: write.to_string(),
            read: read.to_string(),
        };
        let access = VHostAccess::new(user, vhost, &p)
            .map_err(|e| AdminError::BadRequest(format!("invalid_regexp: {e}")))?;
        let created = {
            let mut users = self.access().write();
            let u = users
                .get_mut(user)
                .ok_or_else(|| AdminError::BadRequest("vhost_or_user_not_found".into()))?;
            u.vhosts
                .insert(vhost.to_string(), Arc::new(access))
                .is_none()
        };
        self.save_access().await;
        Ok(created)
    }

    /// Clears `user`'s permissions on `vhost`; false when there were none.
    pub async fn clear_permissions(&self, user: &str, vhost: &str) -> bool {
        let removed = self
            .access()
            .write()
            .get_mut(user)
            .and_then(|u| u.vhosts.remove(vhost))
            .is_some();
        if removed {
            self.save_access().await;
        }
        removed
    }

    /// Creates a vhost (with the standard exchanges); `creator` gets full permissions on it,
    /// as with RabbitMQ's API. Returns whether it was created.
    pub async fn add_vhost(&self, name: &str, creator: Option<&str>) -> Result<bool, AdminError> {
        if name.is_empty() {
            return Err(AdminError::BadRequest(
                "vhost name must not be empty".into(),
            ));
        }
        let created = self.insert_vhost(name);
        if created {
            if let Some(user) = creator {
                let _ = self.set_permissions(user, name, ".*", ".*", ".*").await;
            }
            self.save_access().await;
        }
        Ok(created)
    }

    /// Adds an empty vhost to the registry (sharing the store); false if it exists.
    pub(crate) fn insert_vhost(&self, name: &str) -> bool {
        let mut map = self.vhosts.write().unwrap_or_else(|p| p.into_inner());
        if map.contains_key(name) {
            return false;
        }
        let v = Arc::new(VHostState::with_store(
            name,
            rand::random(),
            self.store.clone(),
        ));
        map.insert(name.to_string(), v);
        true
    }

    /// Deletes a vhost: closes its connections, deletes its queues (with their messages),
    /// exchanges, policies and the permissions on it. False: no such vhost.
    pub async fn delete_vhost(&self, name: &str) -> bool {
        let removed = self
            .vhosts
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        let Some(v) = removed else {
            return false;
        };
        for c in self.admin().connections.list() {
            if c.vhost == name {
                c.request_close(format!("vhost '{name}' is deleted"));
            }
        }
        let queues: Vec<_> = {
            let mut topo = v.topology.write().unwrap_or_else(|p| p.into_inner());
            let names: Vec<Arc<str>> = topo.queues().map(|e| e.meta.name.clone()).collect();
            names.iter().filter_map(|n| topo.remove_queue(n)).collect()
        };
        for e in queues {
            let (tx, rx) = tokio::sync::oneshot::channel();
            if e.handle.send(QueueCmd::Delete { reply: tx }).await {
                let _ = rx.await;
            }
        }
        {
            let mut users = self.access().write();
            for u in users.values_mut() {
                u.vhosts.remove(name);
            }
        }
        if let Some(p) = self.persistence()
            && let Some(c) = p.forget_vhost(name)
        {
            c.wait().await;
        }
        // As RabbitMQ: a vhost's limits and runtime parameters go with it (a vhost created again
        // under the same name starts without them).
        self.forget_vhost_settings(name);
        self.access().topics.forget_vhost(name);
        self.save_access().await;
        true
    }
}

fn view(a: &VHostAccess) -> PermissionView {
    let [c, w, r] = a.patterns().clone();
    PermissionView {
        user: a.user().to_string(),
        vhost: a.vhost().to_string(),
        configure: c,
        write: w,
        read: r,
    }
}
