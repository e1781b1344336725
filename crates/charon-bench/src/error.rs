//! Error type of the load tool.

use std::io;

/// Anything that can make a benchmark run fail.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Socket-level failure.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// The `--uri` could not be understood.
    #[error("invalid URI: {0}")]
    Uri(String),
    /// The peer sent something that is not valid AMQP 0-9-1 (or unexpected).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The broker closed the connection or a channel.
    #[error("broker closed {scope}: {code} {text}")]
    Closed {
        /// "connection" or "channel".
        scope: &'static str,
        /// AMQP reply code.
        code: u16,
        /// AMQP reply text.
        text: String,
    },
    /// Invalid combination of arguments.
    #[error("invalid arguments: {0}")]
    Args(String),
    /// A worker task panicked or was cancelled.
    #[error("worker task failed: {0}")]
    Task(String),
}
