//! The broker's management interface: what the HTTP API (`charon-http`), `charon ctl` (through
//! that API) and the Prometheus endpoint ask of the broker and tell it to do. Nothing here is a
//! back door: every command goes through the same vhost, queue-actor and access-control code
//! as the AMQP side.
//!
//! - [`password`]: RabbitMQ's salted password hashes.
//! - [`users`]: users, permissions and vhosts changed at run time.
//! - [`store`]: persisting users, vhosts and permissions in `charon-store`.
//! - [`connections`]: the registry of open connections and channels with their counters
//!   (cheap on the hot path: one owner per counter, summed when asked), and closing one.
//! - [`rates`]: message counts sampled into rates (`message_stats`).
//! - [`topology`]: exchanges, queues and bindings listed, declared and deleted.
//! - [`messages`]: publish, get (with RabbitMQ's ack modes), purge and peek.
//! - [`definitions`]: RabbitMQ's definitions JSON, export and import.
//! - [`params`]: vhost/user limits, runtime and global parameters set at run time.
//! - [`node`]: node facts (memory, fds, disk, alarms, uptime).

pub mod connections;
pub mod definitions;
pub mod json;
pub mod messages;
pub mod node;
pub mod params;
pub mod password;
pub mod rates;
pub mod store;
pub mod topic;
pub mod topology;
pub mod users;

use std::time::Instant;

pub use crate::queue::admin::{Peeked, QueueCounters, QueueDetails, REASONS};
pub use crate::queue::dl_errors::{ErrorCount, MAX_FINGERPRINTS};
pub use connections::{ChannelStats, ConnEntry, ConnRegistry, Counters};

/// Wall-clock milliseconds, the clock queue TTLs and rates use.
pub fn now_ms() -> u64 {
    crate::queue::now_ms()
}

/// What the broker keeps for management: open connections, counters of closed channels,
/// rate samples, start time.
#[derive(Debug)]
pub struct AdminState {
    /// Open connections and their channels.
    pub connections: ConnRegistry,
    /// Rate samples (overview, queues).
    pub rates: rates::Rates,
    /// When the broker started.
    pub started: Instant,
    /// Wall-clock ms at start.
    pub started_ms: u64,
    /// A random cluster name suffix (RabbitMQ's `internal_cluster_id`).
    pub cluster_id: String,
    /// Held while users/vhosts/permissions are snapshotted and appended to the store, so that
    /// saves reach the log in the order of the changes (never held across an `.await`).
    pub(crate) access_save: std::sync::Mutex<()>,
    /// Runtime and global parameters (inert JSON).
    pub(crate) params: std::sync::Mutex<params::ParamState>,
}

impl AdminState {
    /// A fresh state; `seed` varies the cluster id.
    pub fn new(seed: u64) -> Self {
        Self {
            connections: ConnRegistry::default(),
            rates: rates::Rates::default(),
            started: Instant::now(),
            started_ms: crate::queue::now_ms(),
            cluster_id: format!("charon-cluster-id-{seed:016x}"),
            access_save: std::sync::Mutex::new(()),
            params: std::sync::Mutex::default(),
        }
    }
}

/// The node name shown by the API (RabbitMQ's `rabbit@host`).
pub fn node_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    format!("charon@{host}")
}
