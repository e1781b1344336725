//! The store's public vocabulary: ids, commands, body references and the
//! recovered state. Domain-agnostic: exchanges, properties and definitions
//! are bytes to the store.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

/// Queue id chosen by the server (keep it inside the queue's definition).
pub type QueueId = u64;

/// Global message id: the log index of the record that created the message.
pub type MessageId = u64;

/// One queue membership: (queue id, queue-local message id). Queue-local ids
/// must increase within a queue in the order the queue wants them back.
pub type Member = (QueueId, u64);

/// A definition's key: (kind, key). Kinds are the server's business.
pub type DefinitionKey = (u8, Bytes);

/// A new message as written to the log (once, whatever the number of queues).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMessage {
    /// Exchange it was published to (≤ 255 bytes).
    pub exchange: Bytes,
    /// Routing key (≤ 255 bytes).
    pub routing_key: Bytes,
    /// Raw content-header property bytes.
    pub properties: Bytes,
    /// Body.
    pub body: Bytes,
    /// Wall-clock enqueue time, ms since the epoch.
    pub enqueue_ms: u64,
    /// Absolute per-message expiry, ms since the epoch.
    pub expiry_ms: Option<u64>,
}

/// A new message borrowed from its owner, for [`crate::Store::publish_nowait`]: the store
/// copies its bytes once, straight into the pending batch, and keeps no reference to them (a
/// [`NewMessage`] needs owned `Bytes`, which costs the caller a clone of each, and of a
/// not-yet-shared body a promotion allocation, per message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageRef<'a> {
    /// Exchange it was published to (≤ 255 bytes).
    pub exchange: &'a [u8],
    /// Routing key (≤ 255 bytes).
    pub routing_key: &'a [u8],
    /// Raw content-header property bytes.
    pub properties: &'a [u8],
    /// Body.
    pub body: &'a [u8],
    /// Wall-clock enqueue time, ms since the epoch.
    pub enqueue_ms: u64,
    /// Absolute per-message expiry, ms since the epoch.
    pub expiry_ms: Option<u64>,
}

/// A command appended to the log. See `docs/storage-format.md` §2.3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Store a message once and enqueue it at every member (at least one:
    /// an unroutable message is not stored).
    Publish {
        /// The message.
        message: NewMessage,
        /// Where it is enqueued.
        members: Vec<Member>,
    },
    /// Enqueue an already stored message at more members.
    Enqueue {
        /// The message.
        msg: MessageId,
        /// Where it is enqueued.
        members: Vec<Member>,
    },
    /// Remove members of one queue (ack, reject without requeue, expiry).
    Settle {
        /// The queue.
        queue: QueueId,
        /// Queue-local ids.
        ids: Vec<u64>,
    },
    /// Atomically remove `source` and store a new (dead-lettered) message at
    /// `targets` (may be empty: then it is a settle and nothing is stored).
    DeadLetter {
        /// The member being dead-lettered.
        source: Member,
        /// The dead-lettered copy, with its new properties.
        message: NewMessage,
        /// Where the copy goes.
        targets: Vec<Member>,
    },
    /// Set a member's delivery count (lazy: use the non-waiting append).
    DeliveryCount {
        /// The member.
        member: Member,
        /// Deliveries so far.
        count: u32,
    },
    /// Set the delivery counts of several members of one queue in one record (format v3;
    /// lazy like [`Command::DeliveryCount`]). A member named twice gets its last count.
    DeliveryCounts {
        /// The queue.
        queue: QueueId,
        /// (queue-local id, deliveries so far).
        counts: Vec<(u64, u32)>,
    },
    /// Park a member until `due_ms` with retry `attempt` (format v2).
    Park {
        /// The member.
        member: Member,
        /// Wall-clock due time, ms since the epoch.
        due_ms: u64,
        /// Retry attempt.
        attempt: u32,
    },
    /// Atomically enqueue the message of `source` at `targets` and remove `source` (format v2).
    Route {
        /// The member being moved.
        source: Member,
        /// Where the message goes (may be empty: then it is a settle).
        targets: Vec<Member>,
    },
    /// Remove every member of a queue (purge, delete).
    Purge {
        /// The queue.
        queue: QueueId,
    },
    /// Set a definition.
    PutDefinition {
        /// Kind (exchange, queue, binding, ... as the server numbers them).
        kind: u8,
        /// Key (≤ 65535 bytes).
        key: Bytes,
        /// Value.
        value: Bytes,
    },
    /// Remove a definition.
    DeleteDefinition {
        /// Kind.
        kind: u8,
        /// Key.
        key: Bytes,
    },
}

/// Where a message body lies on disk (read it with `Store::read_body`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BodyRef {
    /// The message, so the body is still found after compaction moved it.
    pub msg: MessageId,
    /// Segment id at the time the reference was made.
    pub segment: u64,
    /// Byte offset of the body in the segment file.
    pub offset: u64,
    /// Body length.
    pub len: u32,
}

/// What an append returns at once (before the commit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Log index of the record.
    pub index: u64,
    /// For `Publish` and `DeadLetter`: the new message's id and body.
    pub body: Option<BodyRef>,
}

/// A live message's metadata, as [`crate::MetaReader`] reads it back; the body stays on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredMessage {
    /// Message id.
    pub id: MessageId,
    /// Exchange.
    pub exchange: Bytes,
    /// Routing key.
    pub routing_key: Bytes,
    /// Raw property bytes.
    pub properties: Bytes,
    /// Body location.
    pub body: BodyRef,
    /// Enqueue time, ms.
    pub enqueue_ms: u64,
    /// Per-message expiry, ms.
    pub expiry_ms: Option<u64>,
}

/// One live member of a recovered queue. Its message's metadata stays on disk: read it with
/// [`crate::Store::meta_reader`] (recovery holds no per-message metadata, so a backlog of
/// millions recovers in the memory of its index).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredEntry {
    /// Queue-local id.
    pub id: u64,
    /// The message (shared by all its members).
    pub msg: MessageId,
    /// Last recorded delivery count.
    pub delivery_count: u32,
    /// Park state (`Park`): due time (ms) and retry attempt.
    pub parked: Option<(u64, u32)>,
}

/// Everything recovery rebuilt.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Current definitions.
    pub definitions: BTreeMap<DefinitionKey, Bytes>,
    /// Live members per queue, in queue-local id order.
    pub queues: HashMap<QueueId, crate::RecoveredList>,
    /// Every log index up to this one is taken (by a valid record, or by
    /// one since reclaimed); appends continue above it. 0 for a new log.
    pub last_index: u64,
    /// Bytes cut from a torn tail (0 when the log ended cleanly).
    pub truncated_bytes: u64,
}
