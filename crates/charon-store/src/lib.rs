//! `charon-store`: Charon's durable log (format: docs/storage-format.md).
//!
//! One append-only, checksummed, group-committed command log for all queues (the fsync is the
//! heartbeat), with a monotonically increasing index and room for a Raft term; a small
//! definitions log kept as a snapshot; recovery that truncates a torn or corrupt tail; reclamation
//! of head segments whose messages are all gone. All file I/O goes through [`Fs`], so tests inject
//! crashes with [`MemFs`].
//!
//! - [`record`]: the records and their payload encoding.
//! - `frame`: length + CRC32C + type + index + term framing, and the checking reader.
//! - `live`: which segment holds each live entry (for reclamation), kept alike in replay and writing.
//! - `recovery`: replay into [`Recovered`].
//! - `writer`: the group-commit writer thread.
//! - `store`: [`Store`] (open, append, close).
//! - [`fs`]: the file-system trait, the real one and the crash-simulating one.

mod error;
mod frame;
pub mod fs;
mod live;
pub mod record;
mod recovery;
mod store;
mod writer;

#[cfg(test)]
mod tests;

pub use error::StoreError;
pub use fs::{Fs, MemFs, RealFs};
pub use record::{Record, StoredMessage};
pub use recovery::{Recovered, RecoveredMessage};
pub use store::{Store, StoreConfig, WriterStats};
pub use writer::Ticket;
