//! Broker configuration: the TOML file's shape and its defaults.
//!
//! Owns only the data; the binary layers file, `CHARON_*` environment variables and flags on top
//! of each other and hands the result to [`crate::Broker::new`].

use serde::Deserialize;

/// Everything the broker reads at start-up. Every field has a default so that an empty file
/// (or no file) gives a working broker, as `charon server` with no arguments must.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// AMQP listener address.
    pub amqp_listen: String,
    /// HTTP (management/health) listener address.
    pub http_listen: String,
    /// Prometheus listener address (rabbitmq_prometheus's port); empty disables it. `/metrics`
    /// is also served on `http_listen`.
    pub prometheus_listen: String,
    /// Directory for the broker's data.
    pub data_dir: String,
    /// Log filter (`tracing` env-filter syntax, as `RUST_LOG`: `info`, `warn,charon_server=debug`).
    pub log_level: String,
    /// Log line format: `text` (default; ANSI colours only when stderr is a terminal) or `json`
    /// (one object per line).
    pub log_format: LogFormat,
    /// Heartbeat interval, seconds, the server proposes in connection.tune (0 disables).
    pub heartbeat: u16,
    /// Largest frame the server accepts, bytes, proposed in connection.tune.
    pub frame_max: u32,
    /// Highest channel number, proposed in connection.tune.
    pub channel_max: u16,
    /// Users. When empty, the default user `guest`/`guest` (loopback only) exists.
    pub users: Vec<UserConfig>,
    /// Virtual hosts besides the default "/".
    pub vhosts: Vec<VHostConfig>,
    /// Permissions of users on vhosts. `guest` always has full permissions on "/".
    pub permissions: Vec<PermissionConfig>,
    /// Free disk space (bytes) under which publishers are blocked (RabbitMQ's
    /// `disk_free_limit`, default 50 MB).
    pub disk_free_limit: u64,
    /// Bytes of persistent message bodies kept in memory across all queues; past it, newly
    /// stored bodies stay on disk only and are read back on delivery (default 128 MiB: with it a
    /// 1M x 1 KiB backlog peaks under 512 MiB, docs/performance.md).
    pub message_memory_budget: u64,
    /// Page-out backpressure (RabbitMQ's credit flow idea): a queue with more bytes than this
    /// written to its page-out area but not yet on disk (so still in memory) throttles the
    /// connections publishing to it (state `flow`) until it is back under half (default 32 MiB).
    pub page_out_flow_bytes: u64,
    /// Tests only: a queue pages bodies out at most once per this many ms (0: whenever it
    /// can), to make page-out lag behind publishers without depending on the machine's speed.
    pub page_out_test_delay_ms: u64,
    /// The dead-letter archive's database (docs/archive.md): `sqlite:///path` or
    /// `postgresql://…`; default `<data_dir>/archive.db`. `CHARON_ARCHIVE_URL` overrides it.
    pub archive_url: Option<String>,
    /// Archived records older than this are deleted (`30d`, `12h`, `0` = never).
    pub archive_retention: String,
    /// Past this many payload bytes the oldest records are deleted (0 = no cap).
    pub archive_max_bytes: u64,
    /// Header whose value is a record's `key` (default: the `message_id` property).
    pub archive_key_header: Option<String>,
    /// Headers read, in order, for a dead letter's error message.
    pub archive_error_message_headers: Vec<String>,
    /// Headers read, in order, for a dead letter's stack trace.
    pub archive_error_stacktrace_headers: Vec<String>,
    /// Largest message body accepted, bytes (RabbitMQ's `max_message_size`, default 128 MiB, at
    /// most 512 MiB); a larger one closes the channel with 406.
    pub max_message_size: u64,
    /// Most client connections of the node (RabbitMQ's `connection_max`; absent: no limit).
    pub connection_max: Option<u64>,
    /// Milliseconds a delivery may stay unacknowledged before its channel is closed with 406
    /// (RabbitMQ's `consumer_timeout`, default 30 min; 0 disables).
    pub consumer_timeout: u64,
    /// RabbitMQ's vhost limits by vhost name: `[vhost_limits."/"] max-connections = 10`.
    pub vhost_limits: std::collections::HashMap<String, crate::limits::VHostLimits>,
    /// RabbitMQ's user limits by user name: `[user_limits.alice] max-channels = 5`.
    pub user_limits: std::collections::HashMap<String, crate::limits::UserLimits>,
    /// Memory alarm threshold (RabbitMQ's `vm_memory_high_watermark`): a number is a fraction
    /// of RAM (or of the cgroup limit), a string with a unit (`"2GiB"`, `"512MB"`) absolute.
    pub vm_memory_high_watermark: crate::memory::Watermark,
    /// AMQP over TLS listener address (e.g. `"127.0.0.1:5671"`); needs `[tls]`.
    pub amqps_listen: Option<String>,
    /// Management API over TLS listener address (e.g. `"127.0.0.1:15671"`); needs `[tls]`.
    pub https_listen: Option<String>,
    /// Certificates for the TLS listeners.
    pub tls: Option<TlsConfig>,
    /// SASL mechanisms offered, in order (RabbitMQ's `auth_mechanisms`): `PLAIN`, `AMQPLAIN`
    /// (the default, as RabbitMQ) and `EXTERNAL` (client certificates, TLS listener only;
    /// RabbitMQ's `rabbitmq_auth_mechanism_ssl`).
    pub auth_mechanisms: Vec<String>,
    /// What names the user of an `EXTERNAL` login in a client certificate (RabbitMQ's
    /// `ssl_cert_login_from`): `common_name` (Charon's default) or `distinguished_name`
    /// (RabbitMQ's default, RFC 4514 as RabbitMQ formats it: `CN=alice,O=example`).
    pub ssl_cert_login_from: crate::tls::CertLoginFrom,
    /// What the memory alarm measures (RabbitMQ's `vm_memory_calculation_strategy`): `rss`
    /// (default, the process's resident set) or `allocated` (what the allocator holds).
    pub vm_memory_calculation_strategy: crate::memory::Strategy,
    /// Threads running connections and queues (tokio workers, `multi_thread`); unset: one per
    /// core, or one thread in all (`current_thread`) on two cores or fewer
    /// (`runtime_settings::default_runtime`). Fewer
    /// threads than cores hand messages between tasks on one thread without waking another
    /// (docs/performance.md, "worker threads").
    pub worker_threads: Option<usize>,
    /// Socket reads a second from which a connection's reads are paced: a read that leaves the
    /// buffer room is followed by a pause of about a millisecond, so the next one takes many
    /// frames at once (fewer wake-ups and syscalls per message; `connection/read_pace.rs`).
    /// A stream whose reads take at least 100,000 frames a second is paced from an eighth of
    /// this. 0 turns pacing off.
    pub read_pace_min_reads: u64,
    /// The runtime's scheduler: `multi_thread` or `current_thread`; unset: `current_thread` on
    /// two cores or fewer unless `worker_threads` is set, else `multi_thread`
    /// (`runtime_settings.rs`).
    pub runtime_flavor: Option<crate::runtime_settings::RuntimeFlavor>,
    /// Scheduler ticks between polls of the I/O and timer drivers; unset: tokio's default.
    pub runtime_event_interval: Option<u32>,
    /// Scheduler ticks between looks at the shared run queue; unset: tokio's default.
    pub runtime_global_queue_interval: Option<u32>,
}

/// PEM files and peer verification for the TLS listeners (RabbitMQ's `ssl_options`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The server's certificate chain (PEM).
    pub cert_file: String,
    /// The server's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: String,
    /// CA certificates that client certificates must chain to (PEM).
    #[serde(default)]
    pub ca_file: Option<String>,
    /// Ask clients for a certificate and verify it against `ca_file` (`verify_peer`).
    #[serde(default)]
    pub verify_peer: bool,
    /// With `verify_peer`, refuse clients that send no certificate.
    #[serde(default)]
    pub fail_if_no_peer_cert: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            amqp_listen: "127.0.0.1:5672".into(),
            http_listen: "127.0.0.1:15672".into(),
            prometheus_listen: "127.0.0.1:15692".into(),
            data_dir: "./charon-data".into(),
            log_level: "info".into(),
            log_format: LogFormat::Text,
            heartbeat: 60,
            frame_max: 131_072,
            channel_max: 2047,
            users: Vec::new(),
            vhosts: Vec::new(),
            permissions: Vec::new(),
            disk_free_limit: 50_000_000,
            message_memory_budget: 128 << 20,
            page_out_flow_bytes: 32 << 20,
            page_out_test_delay_ms: 0,
            archive_url: None,
            archive_retention: "30d".into(),
            archive_max_bytes: 1 << 30,
            archive_key_header: None,
            archive_error_message_headers: vec!["x-exception-message".into()],
            archive_error_stacktrace_headers: vec!["x-exception-stacktrace".into()],
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            connection_max: None,
            consumer_timeout: 1_800_000,
            vhost_limits: std::collections::HashMap::new(),
            user_limits: std::collections::HashMap::new(),
            vm_memory_high_watermark: crate::memory::Watermark::default(),
            amqps_listen: None,
            https_listen: None,
            tls: None,
            auth_mechanisms: vec!["PLAIN".into(), "AMQPLAIN".into()],
            ssl_cert_login_from: crate::tls::CertLoginFrom::default(),
            vm_memory_calculation_strategy: crate::memory::Strategy::default(),
            worker_threads: None,
            read_pace_min_reads: 20_000,
            runtime_flavor: None,
            runtime_event_interval: None,
            runtime_global_queue_interval: None,
        }
    }
}

/// Default `max_message_size`: 128 MiB.
pub const DEFAULT_MAX_MESSAGE_SIZE: u64 = 128 << 20;

/// Largest `max_message_size` allowed (RabbitMQ's `?MAX_MSG_SIZE`, 512 MiB); a content header
/// announcing more is a frame error whatever the setting.
pub const MAX_MSG_SIZE: u64 = 536_870_912;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (timestamp, level, target, fields).
    Json,
}

/// One user account.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// Login name.
    pub name: String,
    /// Password (plain text in the file for now).
    pub password: String,
    /// Tags such as `administrator`, used by the management API.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Allow logins only from loopback addresses (RabbitMQ's `loopback_users`). Defaults to true
    /// for `guest`, false otherwise.
    #[serde(default)]
    pub loopback_only: Option<bool>,
}

/// One virtual host.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VHostConfig {
    /// Name of the vhost.
    pub name: String,
}

/// Permissions of one user on one vhost: three regular expressions over resource names.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct PermissionConfig {
    /// User name.
    pub user: String,
    /// Vhost name.
    pub vhost: String,
    /// Resources the user may declare and delete.
    #[serde(default = "match_all")]
    pub configure: String,
    /// Resources the user may publish to / bind to.
    #[serde(default = "match_all")]
    pub write: String,
    /// Resources the user may consume from / bind from.
    #[serde(default = "match_all")]
    pub read: String,
}

fn match_all() -> String {
    ".*".into()
}

impl Config {
    /// Parses a TOML document.
    pub fn from_toml(text: &str) -> Result<Self, toml::de::Error> {
        toml::from_str(text)
    }

    /// The runtime settings, to check and to build the runtime from.
    pub fn runtime(&self) -> crate::runtime_settings::RuntimeSettings {
        crate::runtime_settings::RuntimeSettings {
            flavor: self.runtime_flavor,
            worker_threads: self.worker_threads,
            event_interval: self.runtime_event_interval,
            global_queue_interval: self.runtime_global_queue_interval,
        }
    }

    /// Checks settings that parse but cannot work.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_message_size > MAX_MSG_SIZE {
            return Err(format!(
                "max_message_size {} is above the largest allowed, {MAX_MSG_SIZE}",
                self.max_message_size
            ));
        }
        self.runtime().validate()?;
        if self.auth_mechanisms.is_empty() {
            return Err("auth_mechanisms must name at least one mechanism".into());
        }
        if let Some(m) = self
            .auth_mechanisms
            .iter()
            .find(|m| !["PLAIN", "AMQPLAIN", "EXTERNAL"].contains(&m.as_str()))
        {
            return Err(format!(
                "auth_mechanisms: unknown mechanism '{m}' (PLAIN, AMQPLAIN, EXTERNAL)"
            ));
        }
        if (self.amqps_listen.is_some() || self.https_listen.is_some()) && self.tls.is_none() {
            return Err("amqps_listen and https_listen need a [tls] table".into());
        }
        self.vm_memory_high_watermark.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::Config;

    #[test]
    fn runtime_settings_read_from_the_file_and_are_checked() {
        use crate::runtime_settings::RuntimeFlavor;
        let c = Config::from_toml(
            "runtime_flavor = \"current_thread\"\nruntime_event_interval = 11\nruntime_global_queue_interval = 13",
        )
        .expect("parses");
        assert_eq!(c.runtime_flavor, Some(RuntimeFlavor::CurrentThread));
        assert_eq!(c.runtime().event_interval, Some(11));
        assert_eq!(c.runtime().global_queue_interval, Some(13));
        assert!(c.validate().is_ok());
        let d = Config::default();
        assert_eq!(d.runtime_flavor, None);
        assert_eq!(
            (d.runtime_event_interval, d.runtime_global_queue_interval),
            (None, None)
        );
        assert!(Config::from_toml("runtime_flavor = \"single\"").is_err());
        let zero = Config::from_toml("runtime_event_interval = 0").expect("parses");
        assert_eq!(
            zero.validate(),
            Err("runtime_event_interval must be at least 1".to_string())
        );
        let two = Config::from_toml("runtime_flavor = \"current_thread\"\nworker_threads = 2")
            .expect("parses");
        assert!(two.validate().is_err());
    }

    #[test]
    fn worker_threads_reads_and_refuses_zero() {
        let c = Config::from_toml("worker_threads = 1").expect("parses");
        assert_eq!(c.worker_threads, Some(1));
        assert!(c.validate().is_ok());
        assert_eq!(Config::default().worker_threads, None);
        let zero = Config::from_toml("worker_threads = 0").expect("parses");
        assert_eq!(
            zero.validate(),
            Err("worker_threads must be at least 1".to_string())
        );
    }
}
