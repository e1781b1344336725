//! Users and what they may do: login checks, vhost access, and per-vhost
//! resource permissions, as RabbitMQ's internal auth backend and
//! `rabbit_access_control:check_resource_access/4` decide them.
//!
//! A user's permissions on a vhost are three regular expressions over
//! resource names: *configure* (declare, delete), *write* (publish to an
//! exchange, bind to a destination), *read* (consume/get/purge a queue, bind
//! from a source exchange). A regex matches anywhere in the name (unanchored,
//! like Erlang's `re:run/3`); the empty pattern means `^$`; the default
//! exchange `""` is checked as `amq.default`.
//!
//! API: [`AccessControl`] is built once from the [`Config`] and held by the
//! broker. A connection resolves its user's permissions on its vhost once
//! ([`AccessControl::permissions`]) and checks each operation with
//! [`VHostAccess::check`]; code without a connection (management API, CLI)
//! uses [`AccessControl::check`]. A refusal is an [`AccessRefused`], mapped
//! to 403 ACCESS_REFUSED in `error.rs`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, RwLock};

use charon_protocol::{AMQPValue, FieldTable};
use regex::Regex;

use crate::admin::password::{HashAlg, PasswordHash};
use crate::config::{Config, PermissionConfig};

/// The three kinds of permission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// Declare and delete.
    Configure,
    /// Publish to an exchange; be the destination of a binding.
    Write,
    /// Consume from, get from or purge a queue; be the source of a binding.
    Read,
}

/// What a permission is checked on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceKind {
    /// An exchange.
    Exchange,
    /// A queue.
    Queue,
}

impl ResourceKind {
    /// The name RabbitMQ's `rs/1` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::Exchange => "exchange",
            ResourceKind::Queue => "queue",
        }
    }
}

/// A refused operation: "access to exchange 'x' in vhost '/' refused for user 'u'".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("access to {} '{name}' in vhost '{vhost}' refused for user '{user}'", kind.as_str())]
pub struct AccessRefused {
    /// Kind of the resource.
    pub kind: ResourceKind,
    /// Name of the resource (`amq.default` for the default exchange).
    pub name: String,
    /// Vhost of the resource.
    pub vhost: String,
    /// The user refused.
    pub user: String,
}

/// A permission pattern, compiled.
#[derive(Debug, Clone)]
enum Pattern {
    /// `.*`: everything (the common case, no regex run).
    All,
    /// Any other pattern.
    Regex(Regex),
}

impl Pattern {
    fn new(pattern: &str) -> Result<Self, regex::Error> {
        Ok(match pattern {
            ".*" => Pattern::All,
            "" => Pattern::Regex(Regex::new("^$")?),
            p => Pattern::Regex(Regex::new(p)?),
        })
    }

    fn matches(&self, name: &str) -> bool {
        match self {
            Pattern::All => true,
            Pattern::Regex(r) => r.is_match(name),
        }
    }
}

/// One user's permissions on one vhost.
#[derive(Debug, Clone)]
pub struct VHostAccess {
    user: String,
    vhost: String,
    /// The patterns as given (configure, write, read).
    patterns: [String; 3],
    configure: Pattern,
    write: Pattern,
    read: Pattern,
}

impl VHostAccess {
    pub(crate) fn new(user: &str, vhost: &str, p: &PermissionConfig) -> Result<Self, ConfigError> {
        let compile = |kind: &'static str, pattern: &str| {
            Pattern::new(pattern).map_err(|source| ConfigError::BadPattern {
                user: user.to_string(),
                vhost: vhost.to_string(),
                kind,
                source: Box::new(source),
            })
        };
        Ok(Self {
            user: user.to_string(),
            vhost: vhost.to_string(),
            patterns: [p.configure.clone(), p.write.clone(), p.read.clone()],
            configure: compile("configure", &p.configure)?,
            write: compile("write", &p.write)?,
            read: compile("read", &p.read)?,
        })
    }

    pub(crate) fn full(user: &str, vhost: &str) -> Self {
        Self {
            user: user.to_string(),
            vhost: vhost.to_string(),
            patterns: [".*".into(), ".*".into(), ".*".into()],
            configure: Pattern::All,
            write: Pattern::All,
            read: Pattern::All,
        }
    }

    /// Whether `perm` on the resource `name` of `kind` is granted.
    pub fn check(
        &self,
        kind: ResourceKind,
        name: &str,
        perm: Permission,
    ) -> Result<(), AccessRefused> {
        let pattern = match perm {
            Permission::Configure => &self.configure,
            Permission::Write => &self.write,
            Permission::Read => &self.read,
        };
        if pattern.matches(resource_name(kind, name)) {
            Ok(())
        } else {
            Err(refused(&self.user, &self.vhost, kind, name))
        }
    }

    /// exchange.declare (not passive) of `name`: configure on it; a new
    /// exchange (`new_args` = its arguments) with an `alternate-exchange`
    /// also needs read on itself and write on the alternate exchange.
    pub fn check_exchange_declare(
        &self,
        name: &str,
        new_args: Option<&FieldTable>,
    ) -> Result<(), AccessRefused> {
        self.check(ResourceKind::Exchange, name, Permission::Configure)?;
        if let Some(ae) = new_args.and_then(|a| longstr_arg(a, "alternate-exchange")) {
            self.check(ResourceKind::Exchange, name, Permission::Read)?;
            self.check(ResourceKind::Exchange, &ae, Permission::Write)?;
        }
        Ok(())
    }

    /// queue.declare (not passive) of `name`: configure on it; a new queue
    /// (`new_args` = its arguments) with an `x-dead-letter-exchange` also
    /// needs read on itself and write on the dead-letter exchange.
    pub fn check_queue_declare(
        &self,
        name: &str,
        new_args: Option<&FieldTable>,
    ) -> Result<(), AccessRefused> {
        self.check(ResourceKind::Queue, name, Permission::Configure)?;
        if let Some(dlx) = new_args.and_then(|a| longstr_arg(a, "x-dead-letter-exchange")) {
            self.check(ResourceKind::Queue, name, Permission::Read)?;
            self.check(ResourceKind::Exchange, &dlx, Permission::Write)?;
        }
        Ok(())
    }

    /// queue.bind/unbind and exchange.bind/unbind: write on the destination,
    /// then read on the source exchange. Bindings involving the default
    /// exchange are refused by the vhost after the write check, so the read
    /// check is skipped for them (RabbitMQ's order).
    pub fn check_bind(
        &self,
        source: &str,
        dest_kind: ResourceKind,
        dest: &str,
    ) -> Result<(), AccessRefused> {
        self.check(dest_kind, dest, Permission::Write)?;
        let dest_is_default = dest_kind == ResourceKind::Exchange && dest.is_empty();
        if !source.is_empty() && !dest_is_default {
            self.check(ResourceKind::Exchange, source, Permission::Read)?;
        }
        Ok(())
    }

    /// The user these permissions belong to.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The vhost these permissions are on.
    pub fn vhost(&self) -> &str {
        &self.vhost
    }

    /// The patterns as given: (configure, write, read).
    pub fn patterns(&self) -> &[String; 3] {
        &self.patterns
    }
}

#[derive(Debug, Clone)]
pub(crate) struct User {
    pub(crate) password: PasswordHash,
    pub(crate) loopback_only: bool,
    pub(crate) tags: Vec<String>,
    pub(crate) vhosts: HashMap<String, Arc<VHostAccess>>,
}

/// A configuration the access rules cannot be built from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A permission pattern is not a valid regular expression.
    #[error("invalid {kind} permission pattern for user '{user}' on vhost '{vhost}': {source}")]
    BadPattern {
        /// User of the entry.
        user: String,
        /// Vhost of the entry.
        vhost: String,
        /// `configure`, `write` or `read`.
        kind: &'static str,
        /// The regex error.
        source: Box<regex::Error>,
    },
    /// A permission entry names a user that is not configured.
    #[error("permissions given to unknown user '{0}'")]
    UnknownUser(String),
}

/// All users and their permissions.
#[derive(Debug)]
pub struct AccessControl {
    /// Users by name; changed at run time by [`crate::admin`] (management API, definitions).
    pub(crate) users: RwLock<HashMap<String, User>>,
    /// Topic permissions (`crate::topic_access`).
    pub topics: crate::topic_access::TopicPermissions,
}

impl AccessControl {
    /// Builds users and permissions from the configuration. Without a
    /// configured `guest`, `guest`/`guest` exists and may log in from
    /// loopback only, as in RabbitMQ; `guest` has full permissions on "/"
    /// unless an entry says otherwise.
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let mut users = HashMap::new();
        if !config.users.iter().any(|u| u.name == "guest") {
            users.insert(
                "guest".to_string(),
                User {
                    password: PasswordHash::new(HashAlg::Sha256, "guest"),
                    loopback_only: true,
                    tags: vec!["administrator".into()],
                    vhosts: HashMap::new(),
                },
            );
        }
        for u in &config.users {
            users.insert(
                u.name.clone(),
                User {
                    password: PasswordHash::new(HashAlg::Sha256, &u.password),
                    loopback_only: u.loopback_only.unwrap_or(u.name == "guest"),
                    tags: u.tags.clone(),
                    vhosts: HashMap::new(),
                },
            );
        }
        for p in &config.permissions {
            let user = users
                .get_mut(&p.user)
                .ok_or_else(|| ConfigError::UnknownUser(p.user.clone()))?;
            let access = VHostAccess::new(&p.user, &p.vhost, p)?;
            user.vhosts.insert(p.vhost.clone(), Arc::new(access));
        }
        if let Some(guest) = users.get_mut("guest") {
            guest
                .vhosts
                .entry("/".to_string())
                .or_insert_with(|| Arc::new(VHostAccess::full("guest", "/")));
        }
        Ok(Self {
            users: RwLock::new(users),
            topics: Default::default(),
        })
    }

    /// The users, read-locked (never held across an `.await`).
    pub(crate) fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, User>> {
        self.users.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The users, write-locked (never held across an `.await`).
    pub(crate) fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, User>> {
        self.users.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks a login; `peer` is the client's address (loopback-only users).
    pub fn authenticate(&self, user: &str, password: &str, peer: IpAddr) -> bool {
        self.read().get(user).is_some_and(|u| {
            u.password.verify(password) && (!u.loopback_only || peer.is_loopback())
        })
    }

    /// Checks an `EXTERNAL` login (a verified TLS client certificate named `user`): the user
    /// must exist; no password is involved.
    pub fn authenticate_external(&self, user: &str, peer: IpAddr) -> bool {
        self.read()
            .get(user)
            .is_some_and(|u| !u.loopback_only || peer.is_loopback())
    }

    /// `user`'s permissions on `vhost`; `None` when the user has no access to it.
    pub fn permissions(&self, user: &str, vhost: &str) -> Option<Arc<VHostAccess>> {
        self.read().get(user)?.vhosts.get(vhost).cloned()
    }

    /// Whether `user` may open connections to `vhost`.
    pub fn may_access_vhost(&self, user: &str, vhost: &str) -> bool {
        self.permissions(user, vhost).is_some()
    }

    /// A management API login: the user's tags when the password is right.
    pub fn management_login(&self, user: &str, password: &str) -> Option<Vec<String>> {
        self.read()
            .get(user)
            .filter(|u| u.password.verify(password))
            .map(|u| u.tags.clone())
    }

    /// Whether `user` has `tag` (`administrator`, `impersonator`, ...).
    pub fn has_tag(&self, user: &str, tag: &str) -> bool {
        self.read()
            .get(user)
            .is_some_and(|u| u.tags.iter().any(|t| t == tag))
    }

    /// Checks `perm` on a resource for `user` in `vhost` (no access to the
    /// vhost refuses everything).
    pub fn check(
        &self,
        user: &str,
        vhost: &str,
        kind: ResourceKind,
        name: &str,
        perm: Permission,
    ) -> Result<(), AccessRefused> {
        match self.permissions(user, vhost) {
            Some(p) => p.check(kind, name, perm),
            None => Err(refused(user, vhost, kind, name)),
        }
    }
}

/// A long-string argument (`rabbit_misc:r_arg/4`); other types are left to
/// argument validation.
fn longstr_arg(args: &FieldTable, key: &str) -> Option<String> {
    match args.inner().get(key) {
        Some(AMQPValue::LongString(s)) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        _ => None,
    }
}

/// rabbit_access_control checks the default exchange as `amq.default`.
fn resource_name(kind: ResourceKind, name: &str) -> &str {
    if kind == ResourceKind::Exchange && name.is_empty() {
        "amq.default"
    } else {
        name
    }
}

fn refused(user: &str, vhost: &str, kind: ResourceKind, name: &str) -> AccessRefused {
    AccessRefused {
        kind,
        name: resource_name(kind, name).to_string(),
        vhost: vhost.to_string(),
        user: user.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn control() -> AccessControl {
        let config = Config::from_toml(
            r#"
[[users]]
name = "reader"
password = "reader"

[[users]]
name = "app"
password = "app"
tags = ["impersonator"]

[[permissions]]
user = "reader"
vhost = "/"
configure = "^$"
write = ""
read = ".*"

[[permissions]]
user = "app"
vhost = "/"
configure = "^app\\."
write = "app"
read = "^app\\.in$"
"#,
        )
        .expect("valid config");
        AccessControl::from_config(&config).expect("valid permissions")
    }

    #[test]
    fn patterns_match_like_rabbitmq() {
        let ac = control();
        let app = ac.permissions("app", "/").expect("app has /");
        assert!(
            app.check(ResourceKind::Queue, "app.q", Permission::Configure)
                .is_ok()
        );
        assert!(
            app.check(ResourceKind::Queue, "x.app.q", Permission::Configure)
                .is_err()
        );
        // unanchored
        assert!(
            app.check(ResourceKind::Exchange, "my-app-x", Permission::Write)
                .is_ok()
        );
        assert!(
            app.check(ResourceKind::Queue, "app.in", Permission::Read)
                .is_ok()
        );
        assert!(
            app.check(ResourceKind::Queue, "app.in2", Permission::Read)
                .is_err()
        );
    }

    #[test]
    fn default_exchange_is_amq_default_and_empty_pattern_matches_nothing() {
        let ac = control();
        let err = ac
            .check("reader", "/", ResourceKind::Exchange, "", Permission::Write)
            .expect_err("reader cannot write");
        assert_eq!(
            err.to_string(),
            "access to exchange 'amq.default' in vhost '/' refused for user 'reader'"
        );
        assert!(
            ac.check("reader", "/", ResourceKind::Queue, "q", Permission::Read)
                .is_ok()
        );
    }

    #[test]
    fn guest_defaults_and_vhost_access() {
        let ac = control();
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let remote = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        assert!(ac.authenticate("guest", "guest", lo));
        assert!(!ac.authenticate("guest", "guest", remote));
        assert!(ac.authenticate("reader", "reader", remote));
        assert!(!ac.authenticate("reader", "nope", lo));
        assert!(ac.may_access_vhost("guest", "/"));
        assert!(!ac.may_access_vhost("reader", "other"));
        assert!(
            ac.check("guest", "other", ResourceKind::Queue, "q", Permission::Read)
                .is_err()
        );
        assert!(ac.has_tag("app", "impersonator"));
        assert!(!ac.has_tag("reader", "impersonator"));
    }

    #[test]
    fn declare_with_dlx_or_ae_needs_read_and_write_too() {
        let ac = control();
        let app = ac.permissions("app", "/").expect("app has /");
        let mut args = FieldTable::default();
        args.insert(
            "x-dead-letter-exchange".into(),
            AMQPValue::LongString("dlx".into()),
        );
        // configure ok, read on app.q refused (read is ^app\.in$)
        let err = app
            .check_queue_declare("app.q", Some(&args))
            .expect_err("no read on app.q");
        assert_eq!(
            (err.kind, err.name.as_str()),
            (ResourceKind::Queue, "app.q")
        );
        // an existing queue is not checked for the DLX
        assert!(app.check_queue_declare("app.q", None).is_ok());
        // read ok on app.in, write on 'dlx' refused (write is 'app')
        let err = app
            .check_queue_declare("app.in", Some(&args))
            .expect_err("no write on dlx");
        assert_eq!(
            (err.kind, err.name.as_str()),
            (ResourceKind::Exchange, "dlx")
        );
        let mut ae = FieldTable::default();
        ae.insert(
            "alternate-exchange".into(),
            AMQPValue::LongString("app-ae".into()),
        );
        assert!(app.check_exchange_declare("app.x", Some(&ae)).is_err());
        assert!(app.check_exchange_declare("app.x", None).is_ok());
    }

    #[test]
    fn bind_needs_write_on_destination_and_read_on_source() {
        let ac = control();
        let reader = ac.permissions("reader", "/").expect("reader has /");
        let err = reader
            .check_bind("amq.direct", ResourceKind::Queue, "q")
            .expect_err("reader cannot write");
        assert_eq!(
            err.to_string(),
            "access to queue 'q' in vhost '/' refused for user 'reader'"
        );
        let app = ac.permissions("app", "/").expect("app has /");
        let err = app
            .check_bind("amq.direct", ResourceKind::Queue, "app.q")
            .expect_err("app cannot read amq.direct");
        assert_eq!(err.name, "amq.direct");
    }

    #[test]
    fn bad_pattern_and_unknown_user_are_config_errors() {
        let bad = Config::from_toml(
            "[[permissions]]\nuser = \"guest\"\nvhost = \"/\"\nconfigure = \"(\"\n",
        )
        .expect("toml");
        assert!(matches!(
            AccessControl::from_config(&bad),
            Err(ConfigError::BadPattern { .. })
        ));
        let unknown =
            Config::from_toml("[[permissions]]\nuser = \"nobody\"\nvhost = \"/\"\n").expect("toml");
        assert!(matches!(
            AccessControl::from_config(&unknown),
            Err(ConfigError::UnknownUser(_))
        ));
    }
}
