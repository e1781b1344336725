//! The records of the logs and their payload encoding (docs/storage-format.md).

use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes};

/// A message as written once in a `Publish` (or the copy in a `DeadLetterMove`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    /// Broker-wide message id.
    pub message_id: u64,
    /// Enqueue wall-clock time (ms).
    pub enqueued_at_ms: u64,
    /// Absolute expiry (ms), if any.
    pub expires_at_ms: Option<u64>,
    /// Exchange it was published (or dead-lettered) to.
    pub exchange: Arc<str>,
    /// Its routing key.
    pub routing_key: Arc<str>,
    /// Content-header property bytes as received.
    pub properties: Bytes,
    /// Body.
    pub body: Bytes,
    /// The queues it is in, with its queue-local id in each.
    pub queues: Vec<(Arc<str>, u64)>,
}

/// One command of the logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A message enters one or more queues.
    Publish(StoredMessage),
    /// Messages leave a queue (ack, purge, removal).
    Settle {
        /// The queue.
        queue: Arc<str>,
        /// Queue-local ids.
        ids: Vec<u64>,
    },
    /// Atomically: `from_id` leaves `from_queue` and the dead-lettered copy enters its targets.
    DeadLetterMove {
        /// Source queue.
        from_queue: Arc<str>,
        /// Queue-local id in the source.
        from_id: u64,
        /// The dead-lettered copy and its target queues (may be empty: dropped).
        message: StoredMessage,
    },
    /// Messages were delivered at least once (lazy; for the redelivered flag after recovery).
    Delivered {
        /// The queue.
        queue: Arc<str>,
        /// Queue-local ids.
        ids: Vec<u64>,
    },
    /// A definition (exchange, queue, binding, policy, user...) is set; opaque to the store.
    PutDefinition {
        /// Its kind.
        kind: Arc<str>,
        /// Its key.
        key: Arc<str>,
        /// Its serialised value.
        value: Bytes,
    },
    /// A definition is removed.
    DeleteDefinition {
        /// Its kind.
        kind: Arc<str>,
        /// Its key.
        key: Arc<str>,
    },
}

pub(crate) const T_PUBLISH: u8 = 1;
pub(crate) const T_SETTLE: u8 = 2;
pub(crate) const T_MOVE: u8 = 3;
pub(crate) const T_DELIVERED: u8 = 4;
pub(crate) const T_PUT_DEF: u8 = 10;
pub(crate) const T_DEL_DEF: u8 = 11;

impl Record {
    /// Whether the record belongs to the definitions log.
    pub fn is_definition(&self) -> bool {
        matches!(
            self,
            Record::PutDefinition { .. } | Record::DeleteDefinition { .. }
        )
    }

    pub(crate) fn type_byte(&self) -> u8 {
        match self {
            Record::Publish(_) => T_PUBLISH,
            Record::Settle { .. } => T_SETTLE,
            Record::DeadLetterMove { .. } => T_MOVE,
            Record::Delivered { .. } => T_DELIVERED,
            Record::PutDefinition { .. } => T_PUT_DEF,
            Record::DeleteDefinition { .. } => T_DEL_DEF,
        }
    }

    pub(crate) fn encode_payload(&self, out: &mut Vec<u8>) {
        match self {
            Record::Publish(m) => put_message(out, m),
            Record::Settle { queue, ids } | Record::Delivered { queue, ids } => {
                put_str(out, queue);
                put_u32(out, ids.len());
                for id in ids {
                    out.put_u64_le(*id);
                }
            }
            Record::DeadLetterMove {
                from_queue,
                from_id,
                message,
            } => {
                put_str(out, from_queue);
                out.put_u64_le(*from_id);
                put_message(out, message);
            }
            Record::PutDefinition { kind, key, value } => {
                put_str(out, kind);
                put_str(out, key);
                put_bytes(out, value);
            }
            Record::DeleteDefinition { kind, key } => {
                put_str(out, kind);
                put_str(out, key);
            }
        }
    }

    /// Decodes a payload of type `t`; `payload` is a slice of the segment (bodies stay
    /// zero-copy slices of it).
    pub(crate) fn decode(t: u8, payload: Bytes) -> Option<Record> {
        let mut r = Reader(payload);
        let rec = match t {
            T_PUBLISH => Record::Publish(r.message()?),
            T_SETTLE => Record::Settle {
                queue: r.str()?,
                ids: r.ids()?,
            },
            T_DELIVERED => Record::Delivered {
                queue: r.str()?,
                ids: r.ids()?,
            },
            T_MOVE => Record::DeadLetterMove {
                from_queue: r.str()?,
                from_id: r.u64()?,
                message: r.message()?,
            },
            T_PUT_DEF => Record::PutDefinition {
                kind: r.str()?,
                key: r.str()?,
                value: r.bytes()?,
            },
            T_DEL_DEF => Record::DeleteDefinition {
                kind: r.str()?,
                key: r.str()?,
            },
            _ => return None,
        };
        r.0.is_empty().then_some(rec)
    }
}

fn put_u32(out: &mut Vec<u8>, n: usize) {
    out.put_u32_le(u32::try_from(n).unwrap_or(u32::MAX));
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u32(out, b.len());
    out.extend_from_slice(b);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_bytes(out, s.as_bytes());
}

fn put_message(out: &mut Vec<u8>, m: &StoredMessage) {
    out.put_u64_le(m.message_id);
    out.put_u64_le(m.enqueued_at_ms);
    out.put_u64_le(m.expires_at_ms.unwrap_or(0));
    put_str(out, &m.exchange);
    put_str(out, &m.routing_key);
    put_bytes(out, &m.properties);
    put_bytes(out, &m.body);
    put_u32(out, m.queues.len());
    for (q, id) in &m.queues {
        put_str(out, q);
        out.put_u64_le(*id);
    }
}

struct Reader(Bytes);

impl Reader {
    fn u64(&mut self) -> Option<u64> {
        (self.0.remaining() >= 8).then(|| self.0.get_u64_le())
    }
    fn len(&mut self) -> Option<usize> {
        (self.0.remaining() >= 4).then(|| self.0.get_u32_le() as usize)
    }
    fn bytes(&mut self) -> Option<Bytes> {
        let n = self.len()?;
        (self.0.remaining() >= n).then(|| self.0.split_to(n))
    }
    fn str(&mut self) -> Option<Arc<str>> {
        let b = self.bytes()?;
        std::str::from_utf8(&b).ok().map(Arc::from)
    }
    fn ids(&mut self) -> Option<Vec<u64>> {
        let n = self.len()?;
        if self.0.remaining() < n.checked_mul(8)? {
            return None;
        }
        Some((0..n).map(|_| self.0.get_u64_le()).collect())
    }
    fn message(&mut self) -> Option<StoredMessage> {
        let message_id = self.u64()?;
        let enqueued_at_ms = self.u64()?;
        let exp = self.u64()?;
        let exchange = self.str()?;
        let routing_key = self.str()?;
        let properties = self.bytes()?;
        let body = self.bytes()?;
        let n = self.len()?;
        let mut queues = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            let q = self.str()?;
            queues.push((q, self.u64()?));
        }
        Some(StoredMessage {
            message_id,
            enqueued_at_ms,
            expires_at_ms: (exp != 0).then_some(exp),
            exchange,
            routing_key,
            properties,
            body,
            queues,
        })
    }
}
