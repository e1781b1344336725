//! Resource limits with RabbitMQ's names, semantics and reply texts: the node's
//! `connection_max`, per-vhost `max-connections`/`max-queues` (RabbitMQ's vhost limits) and
//! per-user `max-connections`/`max-channels` (RabbitMQ's user limits).
//!
//! Owns the limits in force (from the config, changeable at run time with
//! [`Limits::set_vhost_limits`] / [`Limits::set_user_limits`]) and the counts they are checked
//! against. A connection holds a [`ConnectionSlot`] and each of its channels a [`ChannelSlot`];
//! dropping them gives the count back, so every way a connection or channel ends is counted.
//! A negative limit means "no limit" and 0 "none allowed", as in RabbitMQ.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use serde::{Deserialize, Serialize};

use crate::error::{AmqpError, ServerError};

/// RabbitMQ's vhost limits (`rabbitmqctl set_vhost_limits`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct VHostLimits {
    /// Most client connections to the vhost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<i64>,
    /// Most queues in the vhost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queues: Option<i64>,
}

/// RabbitMQ's user limits (`rabbitmqctl set_user_limits`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct UserLimits {
    /// Most connections of the user, all vhosts together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<i64>,
    /// Most open channels of the user, all connections together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_channels: Option<i64>,
}

/// `Some(limit)` when `count` more would go over `limit` (negative: unlimited).
fn over(limit: Option<i64>, count: u64) -> Option<i64> {
    match limit {
        Some(l) if l >= 0 && count >= l.unsigned_abs() => Some(l),
        _ => None,
    }
}

#[derive(Debug, Default)]
struct Counts {
    connections: u64,
    vhost_connections: HashMap<String, u64>,
    user_connections: HashMap<String, u64>,
    user_channels: HashMap<String, u64>,
}

fn dec(map: &mut HashMap<String, u64>, key: &str) {
    if let Some(n) = map.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(key);
        }
    }
}

/// Limits in force and what counts against them.
#[derive(Debug, Default)]
pub struct Limits {
    connection_max: Option<u64>,
    vhosts: RwLock<HashMap<String, VHostLimits>>,
    users: RwLock<HashMap<String, UserLimits>>,
    counts: Mutex<Counts>,
}

impl Limits {
    /// Limits from the configuration.
    pub fn new(
        connection_max: Option<u64>,
        vhosts: HashMap<String, VHostLimits>,
        users: HashMap<String, UserLimits>,
    ) -> Arc<Self> {
        Arc::new(Self {
            connection_max,
            vhosts: RwLock::new(vhosts),
            users: RwLock::new(users),
            counts: Mutex::default(),
        })
    }

    /// The vhost's limits (all `None` when it has none).
    pub fn vhost_limits(&self, vhost: &str) -> VHostLimits {
        let v = self.vhosts.read().unwrap_or_else(|p| p.into_inner());
        v.get(vhost).copied().unwrap_or_default()
    }

    /// Replaces the vhost's limits (`VHostLimits::default()` clears them).
    pub fn set_vhost_limits(&self, vhost: &str, limits: VHostLimits) {
        let mut v = self.vhosts.write().unwrap_or_else(|p| p.into_inner());
        if limits == VHostLimits::default() {
            v.remove(vhost);
        } else {
            v.insert(vhost.to_string(), limits);
        }
    }

    /// The user's limits.
    pub fn user_limits(&self, user: &str) -> UserLimits {
        let u = self.users.read().unwrap_or_else(|p| p.into_inner());
        u.get(user).copied().unwrap_or_default()
    }

    /// Replaces the user's limits (`UserLimits::default()` clears them).
    pub fn set_user_limits(&self, user: &str, limits: UserLimits) {
        let mut u = self.users.write().unwrap_or_else(|p| p.into_inner());
        if limits == UserLimits::default() {
            u.remove(user);
        } else {
            u.insert(user.to_string(), limits);
        }
    }

    /// Open client connections.
    pub fn connections(&self) -> u64 {
        self.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .connections
    }

    /// Counts a connection opening on `vhost` for `user`, or refuses it (530, checked in
    /// RabbitMQ's order: node, vhost, user) at connection.open.
    pub fn open_connection(
        self: &Arc<Self>,
        vhost: &str,
        user: &str,
    ) -> Result<ConnectionSlot, AmqpError> {
        let vl = self.vhost_limits(vhost);
        let ul = self.user_limits(user);
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(max) = self.connection_max
            && c.connections >= max
        {
            return Err(ServerError::NodeConnectionLimit { max }.into());
        }
        let on_vhost = c.vhost_connections.get(vhost).copied().unwrap_or(0);
        if let Some(l) = over(vl.max_connections, on_vhost) {
            return Err(ServerError::VHostConnectionLimit {
                vhost: vhost.to_string(),
                user: user.to_string(),
                limit: l,
            }
            .into());
        }
        let of_user = c.user_connections.get(user).copied().unwrap_or(0);
        if let Some(l) = over(ul.max_connections, of_user) {
            return Err(ServerError::UserConnectionLimit {
                user: user.to_string(),
                limit: l,
            }
            .into());
        }
        c.connections += 1;
        *c.vhost_connections.entry(vhost.to_string()).or_default() += 1;
        *c.user_connections.entry(user.to_string()).or_default() += 1;
        Ok(ConnectionSlot {
            limits: self.clone(),
            vhost: vhost.to_string(),
            user: user.to_string(),
        })
    }

    /// Counts a channel opening for `user`, or refuses it (530, closing the connection as
    /// RabbitMQ's reader does).
    pub fn open_channel(self: &Arc<Self>, user: &str) -> Result<ChannelSlot, AmqpError> {
        let ul = self.user_limits(user);
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let of_user = c.user_channels.get(user).copied().unwrap_or(0);
        if let Some(l) = over(ul.max_channels, of_user) {
            return Err(ServerError::UserChannelLimit {
                user: user.to_string(),
                limit: l,
            }
            .into());
        }
        *c.user_channels.entry(user.to_string()).or_default() += 1;
        Ok(ChannelSlot {
            limits: self.clone(),
            user: user.to_string(),
        })
    }

    /// 406 when a new queue would go over the vhost's `max-queues` (`existing` queues now).
    pub fn check_new_queue(&self, vhost: &str, name: &str, existing: u64) -> Result<(), AmqpError> {
        match over(self.vhost_limits(vhost).max_queues, existing) {
            Some(l) => Err(ServerError::QueueLimit {
                queue: name.to_string(),
                vhost: vhost.to_string(),
                limit: l,
            }
            .into()),
            None => Ok(()),
        }
    }
}

/// One open connection, counted until dropped.
#[derive(Debug)]
pub struct ConnectionSlot {
    limits: Arc<Limits>,
    vhost: String,
    user: String,
}

impl ConnectionSlot {
    /// The limits this slot counts against (to open channels).
    pub fn limits(&self) -> &Arc<Limits> {
        &self.limits
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut c = self.limits.counts.lock().unwrap_or_else(|p| p.into_inner());
        c.connections = c.connections.saturating_sub(1);
        dec(&mut c.vhost_connections, &self.vhost);
        dec(&mut c.user_connections, &self.user);
    }
}

/// One open channel, counted until dropped.
#[derive(Debug)]
pub struct ChannelSlot {
    limits: Arc<Limits>,
    user: String,
}

impl Drop for ChannelSlot {
    fn drop(&mut self) {
        let mut c = self.limits.counts.lock().unwrap_or_else(|p| p.into_inner());
        dec(&mut c.user_channels, &self.user);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_come_back_when_slots_drop() {
        let mut users = HashMap::new();
        users.insert(
            "u".to_string(),
            UserLimits {
                max_connections: Some(1),
                max_channels: Some(2),
            },
        );
        let l = Limits::new(Some(3), HashMap::new(), users);
        let a = l.open_connection("/", "u").expect("first");
        let e = l.open_connection("/", "u").expect_err("user limit");
        assert!(
            e.text.contains("user connection limit (1) is reached"),
            "{}",
            e.text
        );
        let c1 = l.open_channel("u").expect("ch1");
        let _c2 = l.open_channel("u").expect("ch2");
        assert!(l.open_channel("u").is_err());
        drop(c1);
        assert!(l.open_channel("u").is_ok());
        drop(a);
        assert_eq!(l.connections(), 0);
        let _b = l.open_connection("/", "u").expect("after drop");
    }

    #[test]
    fn negative_is_unlimited_and_zero_allows_none() {
        let mut vhosts = HashMap::new();
        vhosts.insert(
            "neg".to_string(),
            VHostLimits {
                max_connections: Some(-1),
                max_queues: Some(-1),
            },
        );
        vhosts.insert(
            "zero".to_string(),
            VHostLimits {
                max_connections: Some(0),
                max_queues: Some(0),
            },
        );
        let l = Limits::new(None, vhosts, HashMap::new());
        let _k: Vec<_> = (0..5).map(|_| l.open_connection("neg", "x")).collect();
        assert!(l.check_new_queue("neg", "q", 1000).is_ok());
        assert!(l.open_connection("zero", "x").is_err());
        assert!(l.check_new_queue("zero", "q", 0).is_err());
    }
}
