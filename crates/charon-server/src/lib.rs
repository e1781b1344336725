//! charon-server: the tokio side of the broker.
//!
//! # Layout
//! - [`access`]: users, vhost access and resource permissions (configure/write/read).
//! - [`admin`]: the management interface (API, CLI, metrics): users/vhosts at run time,
//!   connection registry and counters, topology and message operations, definitions.
//! - [`config`]: the configuration file's shape and defaults.
//! - [`error`]: the one place where protocol and domain errors become AMQP replies.
//! - [`handles`]: how tasks reach each other: queue and connection handles, queue commands,
//!   connection events, delivery credit (no lock across `.await`).
//! - [`queue`]: queue actors, placing messages in them, dead-letter dispatch.
//! - [`vhost`]: one virtual host's topology, policies and saved durable topology.
//! - [`queues_info`]: listing queues with counts (management API, CLI).
//! - [`persist`]: what goes to `charon-store` and how it comes back at start.
//! - [`policies`]: setting/clearing/listing policies and applying them to existing queues.
//!
//! - [`broker`]: vhosts, users, ids.
//! - [`connection`]: one task per AMQP connection (handshake, channels, methods) + its writer.
//! - [`server`]: the accept loop and shutdown.

pub mod access;
pub mod admin;
pub mod broker;
pub mod config;
pub(crate) mod connection;
pub mod error;
pub mod exchange_delay;
pub mod handles;
pub mod lateness;
mod locks;
pub(crate) mod persist;
pub mod policies;
pub(crate) mod queue;
pub mod queues_info;
pub mod server;
pub mod vhost;

pub use config::Config;
pub use error::AmqpError;
