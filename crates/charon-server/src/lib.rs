//! charon-server: the tokio side of the broker.
//!
//! # Layout
//! - [`config`]: the configuration file's shape and defaults.
//! - [`error`]: the one place where protocol and domain errors become AMQP replies.
//! - [`flow`]: delivery credit between queue actors and connections (no lock across `.await`).
//! - [`outbound`]: events queue actors send to connections.
//! - [`queue`]: queue actors, their handles and commands.
//!
//! Connections, channels and the accept loop are not written yet; docs/ARCHITECTURE.md
//! describes the design they follow.

pub mod config;
pub mod error;
pub mod flow;
pub mod outbound;
pub mod queue;

pub use config::Config;
pub use error::AmqpError;
