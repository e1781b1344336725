//! Topic permissions (RabbitMQ's `topic_permission`s): per user, vhost and topic exchange, a
//! `write` and a `read` regular expression over routing keys. Publishing to a topic exchange
//! checks every routing key of the message (key, CC, BCC) against `write`; binding to or from a
//! topic exchange (and unbinding) checks the binding key against `read`. A user without a topic
//! permission for the exchange may do both (as RabbitMQ's internal backend). Patterns may use
//! `{username}` and `{vhost}`, expanded at check time; `""` means `^$`.
//!
//! Changed through `admin::topic` (management API, `charon ctl`, definitions), saved in the
//! users/permissions record (docs/storage-format.md). The hot path pays one relaxed load while
//! no topic permission exists anywhere.

use std::collections::BTreeMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

use regex::Regex;

use crate::error::AmqpError;
use charon_protocol::ReplyCode;

/// What a topic permission guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicPerm {
    /// Publishing (routing keys).
    Write,
    /// Binding (binding keys).
    Read,
}

impl TopicPerm {
    fn as_str(self) -> &'static str {
        match self {
            TopicPerm::Write => "write",
            TopicPerm::Read => "read",
        }
    }
}

/// One topic permission as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPermission {
    /// User.
    pub user: String,
    /// Vhost.
    pub vhost: String,
    /// Topic exchange name.
    pub exchange: String,
    /// Pattern for publishing.
    pub write: String,
    /// Pattern for binding.
    pub read: String,
}

/// (user, vhost, exchange) → (write, read) patterns.
type Table = BTreeMap<(String, String, String), (String, String)>;

/// Every topic permission, keyed by (user, vhost, exchange).
#[derive(Debug, Default)]
pub struct TopicPermissions {
    by_key: RwLock<Table>,
    any: AtomicBool,
}

fn compile(pattern: &str, user: &str, vhost: &str) -> Result<Regex, regex::Error> {
    let expanded = pattern
        .replace("{username}", &regex::escape(user))
        .replace("{vhost}", &regex::escape(vhost));
    Regex::new(if expanded.is_empty() { "^$" } else { &expanded })
}

impl TopicPermissions {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Table> {
        self.by_key.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Table> {
        self.by_key.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether any topic permission exists (else no check is needed anywhere).
    pub fn any(&self) -> bool {
        self.any.load(Ordering::Relaxed)
    }

    /// Validates and sets one; true when it is new.
    pub fn set(&self, p: TopicPermission) -> Result<bool, String> {
        for pattern in [&p.write, &p.read] {
            compile(pattern, &p.user, &p.vhost)
                .map_err(|e| format!("invalid_regexp: \"{pattern}\": {e}"))?;
        }
        let mut map = self.write();
        let created = map
            .insert((p.user, p.vhost, p.exchange), (p.write, p.read))
            .is_none();
        self.any.store(true, Ordering::Relaxed);
        Ok(created)
    }

    /// Removes `user`'s topic permissions on `vhost` (only for `exchange` when given); returns
    /// how many went.
    pub fn clear(&self, user: &str, vhost: &str, exchange: Option<&str>) -> usize {
        self.retain(|(u, v, x)| !(u == user && v == vhost && exchange.is_none_or(|e| e == x)))
    }

    /// Removes every topic permission of `user` (deleted).
    pub fn forget_user(&self, user: &str) {
        self.retain(|(u, _, _)| u != user);
    }

    /// Removes every topic permission on `vhost` (deleted).
    pub fn forget_vhost(&self, vhost: &str) {
        self.retain(|(_, v, _)| v != vhost);
    }

    fn retain(&self, keep: impl Fn(&(String, String, String)) -> bool) -> usize {
        let mut map = self.write();
        let before = map.len();
        map.retain(|k, _| keep(k));
        self.any.store(!map.is_empty(), Ordering::Relaxed);
        before - map.len()
    }

    /// All of them, by user, vhost, exchange.
    pub fn list(&self) -> Vec<TopicPermission> {
        self.read()
            .iter()
            .map(|((user, vhost, exchange), (write, read))| TopicPermission {
                user: user.clone(),
                vhost: vhost.clone(),
                exchange: exchange.clone(),
                write: write.clone(),
                read: read.clone(),
            })
            .collect()
    }

    /// Checks `keys` on topic exchange `exchange` of `vhost` for `user`: 403 ACCESS_REFUSED with
    /// RabbitMQ's text for the first key refused.
    pub fn check<'a>(
        &self,
        user: &str,
        vhost: &str,
        exchange: &str,
        perm: TopicPerm,
        keys: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), AmqpError> {
        if !self.any() {
            return Ok(());
        }
        let pattern = {
            let map = self.read();
            let key = (user.to_string(), vhost.to_string(), exchange.to_string());
            match (map.get(&key), perm) {
                (None, _) => return Ok(()),
                (Some((w, _)), TopicPerm::Write) => w.clone(),
                (Some((_, r)), TopicPerm::Read) => r.clone(),
            }
        };
        let re = compile(&pattern, user, vhost).ok();
        for k in keys {
            if !re.as_ref().is_some_and(|re| re.is_match(k)) {
                return Err(AmqpError::new(
                    ReplyCode::AccessRefused,
                    format!(
                        "{} access to topic '{k}' in exchange '{exchange}' in vhost '{vhost}' refused for user '{user}'",
                        perm.as_str()
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The publish-time check (connection and management publish): `keys` (key, CC, BCC) sent to
/// `exchange` of `topo` by `user`, when it is a topic exchange and a topic permission exists.
pub fn check_publish<Q: Clone>(
    broker: &crate::broker::Broker,
    topo: &charon_core::VHost<Q>,
    user: &str,
    exchange: &str,
    keys: &[&str],
) -> Result<(), AmqpError> {
    let topics = &broker.access().topics;
    if !topics.any() || !is_topic(topo, exchange) {
        return Ok(());
    }
    topics.check(
        user,
        topo.name(),
        exchange,
        TopicPerm::Write,
        keys.iter().copied(),
    )
}

/// The bind/unbind-time check: `key` on source `exchange` for `user`.
pub fn check_bind<Q: Clone>(
    broker: &crate::broker::Broker,
    topo: &charon_core::VHost<Q>,
    user: &str,
    exchange: &str,
    key: &str,
) -> Result<(), AmqpError> {
    let topics = &broker.access().topics;
    if !topics.any() || !is_topic(topo, exchange) {
        return Ok(());
    }
    topics.check(user, topo.name(), exchange, TopicPerm::Read, [key])
}

fn is_topic<Q: Clone>(topo: &charon_core::VHost<Q>, exchange: &str) -> bool {
    topo.exchange(exchange)
        .is_some_and(|x| x.kind == charon_core::ExchangeKind::Topic && !x.delayed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perm(x: &str, write: &str, read: &str) -> TopicPermission {
        TopicPermission {
            user: "u".into(),
            vhost: "/".into(),
            exchange: x.into(),
            write: write.into(),
            read: read.into(),
        }
    }

    #[test]
    fn keys_are_checked_only_where_a_permission_exists() {
        let t = TopicPermissions::default();
        assert!(
            t.check("u", "/", "amq.topic", TopicPerm::Write, ["x"])
                .is_ok()
        );
        assert_eq!(t.set(perm("amq.topic", "^{username}\\.", "")), Ok(true));
        assert!(
            t.check("u", "/", "amq.topic", TopicPerm::Write, ["u.a"])
                .is_ok()
        );
        let e = t.check("u", "/", "amq.topic", TopicPerm::Write, ["u.a", "v.a"]);
        assert_eq!(
            e.map_err(|e| e.text),
            Err("ACCESS_REFUSED - write access to topic 'v.a' in exchange 'amq.topic' in vhost '/' refused for user 'u'".into())
        );
        // "" is ^$: only the empty key.
        assert!(
            t.check("u", "/", "amq.topic", TopicPerm::Read, ["a"])
                .is_err()
        );
        assert!(
            t.check("u", "/", "amq.topic", TopicPerm::Read, [""])
                .is_ok()
        );
        // Other users, vhosts, exchanges: unrestricted.
        assert!(
            t.check("w", "/", "amq.topic", TopicPerm::Write, ["v.a"])
                .is_ok()
        );
        assert!(
            t.check("u", "/", "other", TopicPerm::Write, ["v.a"])
                .is_ok()
        );
        assert_eq!(t.clear("u", "/", None), 1);
        assert!(!t.any());
        assert!(t.set(perm("x", "(", ".*")).is_err());
    }
}
