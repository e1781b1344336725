//! Errors, one enum per operation (open, append, commit, read).

use std::io;

/// Opening (and recovering) the store failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// An I/O call failed.
    #[error("{op} {name}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// File name.
        name: String,
        /// Cause.
        source: io::Error,
    },
    /// A sealed segment holds an invalid record: not a torn tail, real corruption.
    #[error("segment {segment:016x} corrupt at offset {offset}: {reason}")]
    Corrupt {
        /// Segment id.
        segment: u64,
        /// Byte offset of the bad record.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// The writer thread could not be started.
    #[error("spawn writer thread: {0}")]
    Spawn(io::Error),
}

/// An append was refused.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum AppendError {
    /// A write or sync failed earlier; restart and recover.
    #[error("store poisoned: {0}")]
    Poisoned(String),
    /// The store is shut down.
    #[error("store closed")]
    Closed,
    /// A field does not fit its encoding.
    #[error("invalid command: {0}")]
    Invalid(&'static str),
}

/// A waiting append did not become durable.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum CommitError {
    /// The write or sync of its batch failed; the store is poisoned.
    #[error("store poisoned: {0}")]
    Poisoned(String),
    /// The store shut down before the batch was written.
    #[error("store closed before commit")]
    Closed,
}

/// Reading a body back failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The message is gone (settled everywhere and reclaimed).
    #[error("message {0} not found")]
    NotFound(u64),
    /// The read failed.
    #[error("read segment {segment:016x}: {source}")]
    Io {
        /// Segment id.
        segment: u64,
        /// Cause.
        source: io::Error,
    },
}
