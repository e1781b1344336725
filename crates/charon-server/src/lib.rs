//! charon-server: the tokio side of the broker.
//!
//! # Layout
//! - [`access`]: users, vhost access and resource permissions (configure/write/read).
//! - [`admin`]: the management interface (API, CLI, metrics): users/vhosts at run time,
//!   connection registry and counters, topology and message operations, definitions.
//! - [`archive`]: the dead-letter archive: archive queues handed to SQL, replays.
//! - [`config`]: the configuration file's shape and defaults.
//! - [`data_lock`]: the lock that keeps a second broker off a data directory in use.
//! - [`error`]: the one place where protocol and domain errors become AMQP replies.
//! - [`limits`]: connection/channel/queue limits (node, vhost, user) with RabbitMQ's texts.
//! - [`memory`]: the memory alarm's setting and measurement; asking the allocator to purge.
//! - [`handles`]: how tasks reach each other: queue and connection handles, queue commands,
//!   connection events, delivery credit (no lock across `.await`).
//! - [`queue`]: queue actors, placing messages in them, dead-letter dispatch.
//! - [`vhost`]: one virtual host's topology, policies and saved durable topology.
//! - [`queues_info`]: listing queues with counts (management API, CLI).
//! - [`queue_remove`]: removing ready messages by id (management: replaying dead letters).
//! - [`queue_replay`]: moving ready messages to an exchange inside the broker (DLQ replay).
//! - [`topic_access`]: topic permissions (routing keys on topic exchanges).
//! - [`persist`]: what goes to `charon-store` and how it comes back at start.
//! - [`policies`]: setting/clearing/listing policies and applying them to existing queues.
//!
//! - [`broker`]: vhosts, users, ids.
//! - [`connection`]: one task per AMQP connection (handshake, channels, methods) + its writer.
//! - [`server`]: the accept loop and shutdown.
//! - [`tls`]: rustls configuration from `[tls]`, the `EXTERNAL` login from a client certificate.

pub mod access;
pub mod admin;
pub mod archive;
pub mod broker;
pub mod config;
pub(crate) mod connection;
pub mod data_lock;
pub mod error;
pub mod exchange_delay;
pub mod handles;
pub mod lateness;
pub mod limits;
mod locks;
pub mod memory;
pub(crate) mod persist;
pub mod policies;
pub(crate) mod queue;
pub mod queue_remove;
pub mod queue_replay;
pub mod queues_info;
pub mod quiet_socket;
pub mod runtime_settings;
pub mod server;
pub mod tls;
pub mod topic_access;
pub mod topology_lock;
pub mod turn_cpu;
pub mod vhost;

pub use config::Config;
pub use error::AmqpError;
