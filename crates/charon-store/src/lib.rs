//! Charon's durable store: one append-only, group-commit command log shared
//! by all queues and by the definitions. The format is specified in
//! `docs/storage-format.md`; this crate implements it.
//!
//! # Layout
//! - [`storage`]: the I/O seam ([`Storage`], [`StorageFile`]) with the real
//!   [`DiskStorage`] and the crash-injecting [`MemStorage`].
//! - `record`: record framing (length, CRC32C, index, term) and payloads.
//! - `segment`: segment file names and header.
//! - [`ChunkRing`]: chunks of message ids keyed by chunk number, a ring for the current run
//!   and a B-tree for the rest (under `IdTable` here and the server's per-queue `IdMap`).
//! - `messages`: the live messages, 32 bytes each (record place, one member inline).
//! - `queue_members`: a queue's live members in id order (a ring of 24-byte slots).
//! - [`MetaReader`]: a live message's metadata read back from its record (recovery keeps
//!   none in memory).
//! - `index`: liveness of messages, members and definitions per segment; the
//!   one state machine applied both by live appends and by recovery.
//! - `recovery`: replays the segments, truncates a torn tail.
//! - `writer`: the group-commit writer thread.
//! - `compaction`: which segments to delete, what to copy forward.
//! - `compactor`: the compaction thread, and reads of bodies whose copy is not written yet.
//! - [`Store`]: the public handle.
//!
//! # Use (the broker's life cycle)
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use bytes::Bytes;
//! use charon_store::{Command, NewMessage, Store, StoreConfig};
//!
//! // Boot: open and recover. Definitions first, then each queue's members
//! // in queue-local id order; metadata and bodies stay on disk.
//! let (store, recovered) = Store::open_dir("/var/lib/charon/store", StoreConfig::default())?;
//! for ((kind, key), value) in &recovered.definitions { /* declare */ }
//! let mut reader = store.meta_reader();
//! for (queue, entries) in &recovered.queues {
//!     for e in entries {
//!         // e.id, e.msg, e.delivery_count, e.parked; the message's fields:
//!         let m = reader.read(e.msg)?; // m.{exchange, routing_key, properties, enqueue_ms, expiry_ms}
//!         let body = store.read_body(&m.body)?; // the body when needed
//!     }
//! }
//!
//! // Publish routed to two durable queues (ids chosen by the server): one
//! // record, the body stored once; confirm when the commit completes.
//! let message = NewMessage {
//!     exchange: Bytes::from_static(b"amq.fanout"),
//!     routing_key: Bytes::new(),
//!     properties: Bytes::from_static(&[0x10, 0x00, 2]),
//!     body: Bytes::from_static(b"hello"),
//!     enqueue_ms: 1_700_000_000_000,
//!     expiry_ms: None,
//! };
//! let (appended, commit) = store.append(Command::Publish {
//!     message,
//!     members: vec![(7, 1), (9, 1)],
//! })?;
//! commit.await?; // durable: send basic.ack now
//! let body_ref = appended.body; // keep this instead of the body under memory pressure
//!
//! // Ack: no need to wait (the next commit carries it).
//! store.append_nowait(Command::Settle { queue: 7, ids: vec![1] })?;
//! # Ok(()) }
//! ```

#![deny(clippy::indexing_slicing)]

mod batch_buffers;
pub mod chunk_ring;
mod compact_read;
mod compaction;
mod compactor;
mod durable;
mod error;
mod id_table;
mod index;
mod index_settle;
mod messages;
mod meta;
mod queue_members;
mod read_many;
mod record;
mod recovered_list;
mod recovery;
mod segment;
mod spare;
pub mod storage;
mod store;
mod types;
mod window;
mod writer;

pub use chunk_ring::ChunkRing;
pub use durable::DurableWatch;
pub use error::{AppendError, CommitError, OpenError, ReadError};
pub use meta::MetaReader;
pub use recovered_list::RecoveredList;
pub use storage::{DiskStorage, MemStorage, Storage, StorageFile};
pub use store::{Commit, INDEX_BYTES_PER_MESSAGE, Store, StoreConfig, StoreStats};
pub use types::{
    Appended, BodyRef, Command, DefinitionKey, Member, MessageId, MessageRef, NewMessage, QueueId,
    Recovered, RecoveredEntry, RecoveredMessage,
};
