//! Payload encodings per record kind (`docs/storage-format.md` §2.3):
//! [`encode_command`] turns a [`Command`] into payload bytes,
//! [`Payload::decode`] reads them back without copying.

use crate::error::AppendError;
use crate::types::{Command, Member, MessageId, MessageRef, NewMessage};

/// Record kinds; the numbers are the on-disk format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Publish = 1,
    Enqueue = 2,
    Settle = 3,
    DeadLetter = 4,
    DeliveryCount = 5,
    Carry = 6,
    PutDefinition = 7,
    DeleteDefinition = 8,
    Purge = 9,
    Park = 10,
    Route = 11,
    DeliveryCounts = 12,
}

const NO_EXPIRY: u64 = u64::MAX;

/// A message as it lies in a record (borrowed from the read buffer).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MsgBody<'a> {
    pub(crate) enqueue_ms: u64,
    pub(crate) expiry_ms: Option<u64>,
    pub(crate) exchange: &'a [u8],
    pub(crate) routing_key: &'a [u8],
    pub(crate) properties: &'a [u8],
    pub(crate) body: &'a [u8],
    /// Offset of `body` from the start of the payload.
    pub(crate) body_offset: usize,
}

/// A decoded payload.
#[derive(Debug)]
pub(crate) enum Payload<'a> {
    Publish {
        members: Vec<Member>,
        msg: MsgBody<'a>,
    },
    Enqueue {
        msg: MessageId,
        members: Vec<Member>,
    },
    Settle {
        queue: u64,
        ids: Vec<u64>,
    },
    DeadLetter {
        source: Member,
        members: Vec<Member>,
        msg: MsgBody<'a>,
    },
    DeliveryCount {
        member: Member,
        count: u32,
    },
    Carry {
        msg_id: MessageId,
        members: Vec<(Member, u32)>,
        msg: MsgBody<'a>,
    },
    PutDefinition {
        kind: u8,
        key: &'a [u8],
        value: &'a [u8],
    },
    DeleteDefinition {
        kind: u8,
        key: &'a [u8],
    },
    Purge {
        queue: u64,
    },
    Park {
        member: Member,
        due_ms: u64,
        attempt: u32,
    },
    Route {
        source: Member,
        members: Vec<Member>,
    },
    DeliveryCounts {
        queue: u64,
        counts: Vec<(u64, u32)>,
    },
}

// ---- encoding ----

fn put_members(out: &mut Vec<u8>, members: &[Member]) -> Result<(), AppendError> {
    let n = u32::try_from(members.len()).map_err(|_| AppendError::Invalid("too many members"))?;
    out.extend_from_slice(&n.to_le_bytes());
    for (q, id) in members {
        out.extend_from_slice(&q.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    Ok(())
}

fn put_short(out: &mut Vec<u8>, b: &[u8], what: &'static str) -> Result<(), AppendError> {
    let n = u8::try_from(b.len()).map_err(|_| AppendError::Invalid(what))?;
    out.push(n);
    out.extend_from_slice(b);
    Ok(())
}

fn put_long(out: &mut Vec<u8>, b: &[u8], what: &'static str) -> Result<(), AppendError> {
    let n = u32::try_from(b.len()).map_err(|_| AppendError::Invalid(what))?;
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(b);
    Ok(())
}

fn put_msg(out: &mut Vec<u8>, m: &MsgBody<'_>) -> Result<usize, AppendError> {
    out.extend_from_slice(&m.enqueue_ms.to_le_bytes());
    out.extend_from_slice(&m.expiry_ms.unwrap_or(NO_EXPIRY).to_le_bytes());
    put_short(out, m.exchange, "exchange longer than 255 bytes")?;
    put_short(out, m.routing_key, "routing key longer than 255 bytes")?;
    put_long(out, m.properties, "properties too long")?;
    put_long(out, m.body, "body too long")?;
    Ok(out.len() - m.body.len())
}

impl<'a> MsgBody<'a> {
    pub(crate) fn of(m: &'a NewMessage) -> Self {
        MsgBody {
            enqueue_ms: m.enqueue_ms,
            expiry_ms: m.expiry_ms,
            exchange: &m.exchange,
            routing_key: &m.routing_key,
            properties: &m.properties,
            body: &m.body,
            body_offset: 0,
        }
    }

    /// The borrowed message's fields, as [`Self::of`].
    pub(crate) fn of_ref(m: &MessageRef<'a>) -> Self {
        MsgBody {
            enqueue_ms: m.enqueue_ms,
            expiry_ms: m.expiry_ms,
            exchange: m.exchange,
            routing_key: m.routing_key,
            properties: m.properties,
            body: m.body,
            body_offset: 0,
        }
    }
}

/// Appends a publish payload (`members`, then `msg`) to `out`; returns the body's offset from
/// where the payload starts.
pub(crate) fn encode_publish_into(
    out: &mut Vec<u8>,
    msg: &MsgBody<'_>,
    members: &[Member],
) -> Result<usize, AppendError> {
    if members.is_empty() {
        return Err(AppendError::Invalid("publish without members"));
    }
    let start = out.len();
    out.reserve(64 + msg.body.len() + msg.properties.len() + 16 * members.len());
    put_members(out, members)?;
    Ok(put_msg(out, msg)? - start)
}

/// A whole publish record (header and payload, the format [`encode_publish_into`] and
/// `record::encode_record_with` write together) appended to `out` in one pass: every length
/// checked first (on an error `out` is left as it was), one `reserve`, the header and the
/// fixed-size fields each written as one block. Index, term and CRC are left to
/// `record::seal` and the writer, as for `encode_record`. Returns the record's length and the
/// body's offset inside the record. The publish hot path (`Store::publish_nowait`).
pub(crate) fn encode_publish_record(
    out: &mut Vec<u8>,
    msg: &MsgBody<'_>,
    members: &[Member],
) -> Result<(usize, usize), AppendError> {
    if members.is_empty() {
        return Err(AppendError::Invalid("publish without members"));
    }
    let n = u32::try_from(members.len()).map_err(|_| AppendError::Invalid("too many members"))?;
    let ex = u8::try_from(msg.exchange.len())
        .map_err(|_| AppendError::Invalid("exchange longer than 255 bytes"))?;
    let rk = u8::try_from(msg.routing_key.len())
        .map_err(|_| AppendError::Invalid("routing key longer than 255 bytes"))?;
    let pl = u32::try_from(msg.properties.len())
        .map_err(|_| AppendError::Invalid("properties too long"))?;
    let bl = u32::try_from(msg.body.len()).map_err(|_| AppendError::Invalid("body too long"))?;
    // Payload: member count, members, enqueue and expiry times, exchange, routing key,
    // properties, body (`put_members` then `put_msg`).
    let body_at = (4 + 16 * n as u64 + 8 + 8 + 1 + u64::from(ex) + 1 + u64::from(rk))
        + (4 + u64::from(pl) + 4);
    let payload_len = body_at + u64::from(bl);
    let (Ok(body_at), Ok(payload_len)) = (usize::try_from(body_at), usize::try_from(payload_len))
    else {
        return Err(AppendError::Invalid("record larger than 1 GiB"));
    };
    if !super::fits(payload_len) {
        return Err(AppendError::Invalid("record larger than 1 GiB"));
    }
    out.reserve(super::HEADER_LEN + payload_len);
    // The header (length, CRC, index and term set later) and the member count.
    let mut head = [0u8; super::HEADER_LEN + 4];
    head[super::KIND_AT] = Kind::Publish as u8;
    head[super::HEADER_LEN..].copy_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&head);
    for (q, id) in members {
        let mut m = [0u8; 16];
        m[..8].copy_from_slice(&q.to_le_bytes());
        m[8..].copy_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&m);
    }
    let mut times = [0u8; 17];
    times[..8].copy_from_slice(&msg.enqueue_ms.to_le_bytes());
    times[8..16].copy_from_slice(&msg.expiry_ms.unwrap_or(NO_EXPIRY).to_le_bytes());
    times[16] = ex;
    out.extend_from_slice(&times);
    out.extend_from_slice(msg.exchange);
    out.push(rk);
    out.extend_from_slice(msg.routing_key);
    out.extend_from_slice(&pl.to_le_bytes());
    out.extend_from_slice(msg.properties);
    out.extend_from_slice(&bl.to_le_bytes());
    out.extend_from_slice(msg.body);
    Ok((super::HEADER_LEN + payload_len, super::HEADER_LEN + body_at))
}

/// Payload bytes for `cmd`, its kind, and for message-creating commands the
/// offset of the body inside the payload.
pub(crate) fn encode_command(cmd: &Command) -> Result<(Kind, Vec<u8>, Option<usize>), AppendError> {
    let mut out = Vec::new();
    let (kind, body_at) = encode_command_into(&mut out, cmd)?;
    Ok((kind, out, body_at))
}

/// Appends `cmd`'s payload to `out` (the body copied once, straight into the batch buffer);
/// returns its kind and, for message-creating commands, the body's offset from where the
/// payload starts. On an error `out` may hold a partial payload: the caller cuts it off.
pub(crate) fn encode_command_into(
    out: &mut Vec<u8>,
    cmd: &Command,
) -> Result<(Kind, Option<usize>), AppendError> {
    let start = out.len();
    let (kind, body_at) = match cmd {
        Command::Publish { message, members } => {
            let at = encode_publish_into(out, &MsgBody::of(message), members)?;
            (Kind::Publish, Some(start + at))
        }
        Command::Enqueue { msg, members } => {
            out.extend_from_slice(&msg.to_le_bytes());
            put_members(out, members)?;
            (Kind::Enqueue, None)
        }
        Command::Settle { queue, ids } => {
            out.extend_from_slice(&queue.to_le_bytes());
            let n = u32::try_from(ids.len()).map_err(|_| AppendError::Invalid("too many ids"))?;
            out.extend_from_slice(&n.to_le_bytes());
            for id in ids {
                out.extend_from_slice(&id.to_le_bytes());
            }
            (Kind::Settle, None)
        }
        Command::DeadLetter {
            source,
            message,
            targets,
        } => {
            out.reserve(64 + message.body.len() + message.properties.len() + 16 * targets.len());
            out.extend_from_slice(&source.0.to_le_bytes());
            out.extend_from_slice(&source.1.to_le_bytes());
            put_members(out, targets)?;
            (Kind::DeadLetter, Some(put_msg(out, &MsgBody::of(message))?))
        }
        Command::DeliveryCount { member, count } => {
            out.extend_from_slice(&member.0.to_le_bytes());
            out.extend_from_slice(&member.1.to_le_bytes());
            out.extend_from_slice(&count.to_le_bytes());
            (Kind::DeliveryCount, None)
        }
        Command::DeliveryCounts { queue, counts } => {
            if counts.is_empty() {
                return Err(AppendError::Invalid("delivery counts without members"));
            }
            let n =
                u32::try_from(counts.len()).map_err(|_| AppendError::Invalid("too many counts"))?;
            out.reserve(12 + 12 * counts.len());
            out.extend_from_slice(&queue.to_le_bytes());
            out.extend_from_slice(&n.to_le_bytes());
            for (id, count) in counts {
                out.extend_from_slice(&id.to_le_bytes());
                out.extend_from_slice(&count.to_le_bytes());
            }
            (Kind::DeliveryCounts, None)
        }
        Command::Purge { queue } => {
            out.extend_from_slice(&queue.to_le_bytes());
            (Kind::Purge, None)
        }
        Command::Park {
            member,
            due_ms,
            attempt,
        } => {
            out.extend_from_slice(&member.0.to_le_bytes());
            out.extend_from_slice(&member.1.to_le_bytes());
            out.extend_from_slice(&due_ms.to_le_bytes());
            out.extend_from_slice(&attempt.to_le_bytes());
            (Kind::Park, None)
        }
        Command::Route { source, targets } => {
            out.extend_from_slice(&source.0.to_le_bytes());
            out.extend_from_slice(&source.1.to_le_bytes());
            put_members(out, targets)?;
            (Kind::Route, None)
        }
        Command::PutDefinition { kind, key, value } => {
            out.push(*kind);
            put_key(out, key)?;
            put_long(out, value, "definition value too long")?;
            (Kind::PutDefinition, None)
        }
        Command::DeleteDefinition { kind, key } => {
            out.push(*kind);
            put_key(out, key)?;
            (Kind::DeleteDefinition, None)
        }
    };
    Ok((kind, body_at.map(|at| at - start)))
}

fn put_key(out: &mut Vec<u8>, key: &[u8]) -> Result<(), AppendError> {
    let n =
        u16::try_from(key.len()).map_err(|_| AppendError::Invalid("definition key too long"))?;
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(key);
    Ok(())
}

/// Payload of a `Carry` record and the body offset inside it.
pub(crate) fn encode_carry(
    msg_id: MessageId,
    members: &[(Member, u32)],
    msg: &MsgBody<'_>,
) -> Result<(Vec<u8>, usize), AppendError> {
    let mut out = Vec::with_capacity(64 + msg.body.len() + msg.properties.len());
    out.extend_from_slice(&msg_id.to_le_bytes());
    let n = u32::try_from(members.len()).map_err(|_| AppendError::Invalid("too many members"))?;
    out.extend_from_slice(&n.to_le_bytes());
    for ((q, id), count) in members {
        out.extend_from_slice(&q.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
    }
    let at = put_msg(&mut out, msg)?;
    Ok((out, at))
}

// ---- decoding ----

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

type R<T> = Result<T, &'static str>;

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> R<&'a [u8]> {
        let end = self.pos.checked_add(n).ok_or("length overflow")?;
        let s = self.buf.get(self.pos..end).ok_or("payload too short")?;
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> R<u8> {
        Ok(*self.bytes(1)?.first().ok_or("payload too short")?)
    }
    fn u16(&mut self) -> R<u16> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    fn u32(&mut self) -> R<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> R<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn array<const N: usize>(&mut self) -> R<[u8; N]> {
        self.bytes(N)?.try_into().map_err(|_| "payload too short")
    }
    fn count(&mut self, item_size: usize) -> R<usize> {
        let n = self.u32()? as usize;
        // Bound the allocation by what the payload can hold.
        if n.saturating_mul(item_size) > self.buf.len().saturating_sub(self.pos) {
            return Err("count exceeds payload");
        }
        Ok(n)
    }
    fn members(&mut self) -> R<Vec<Member>> {
        let n = self.count(16)?;
        (0..n).map(|_| Ok((self.u64()?, self.u64()?))).collect()
    }
    fn msg(&mut self) -> R<MsgBody<'a>> {
        let enqueue_ms = self.u64()?;
        let expiry = self.u64()?;
        let n = self.u8()? as usize;
        let exchange = self.bytes(n)?;
        let n = self.u8()? as usize;
        let routing_key = self.bytes(n)?;
        let n = self.u32()? as usize;
        let properties = self.bytes(n)?;
        let n = self.u32()? as usize;
        let body_offset = self.pos;
        let body = self.bytes(n)?;
        Ok(MsgBody {
            enqueue_ms,
            expiry_ms: (expiry != NO_EXPIRY).then_some(expiry),
            exchange,
            routing_key,
            properties,
            body,
            body_offset,
        })
    }
    fn finish<T>(self, v: T) -> R<T> {
        if self.pos == self.buf.len() {
            Ok(v)
        } else {
            Err("trailing bytes")
        }
    }
}

/// The message fields of a message record's payload cut just before the body (`buf` ends with
/// the body's length): the id the record names (`Carry`) or `None` (`Publish`, `DeadLetter`:
/// the record's own index), and the fields with an empty `body` whose length is returned.
/// Other kinds are refused.
pub(crate) fn message_prefix(kind: u8, buf: &[u8]) -> R<(Option<MessageId>, MsgBody<'_>, u32)> {
    let mut r = Reader { buf, pos: 0 };
    let carried = match kind {
        1 => {
            r.members()?;
            None
        }
        4 => {
            r.u64()?;
            r.u64()?;
            r.members()?;
            None
        }
        6 => {
            let id = r.u64()?;
            let n = r.count(20)?;
            r.bytes(n * 20)?;
            Some(id)
        }
        _ => return Err("not a message record"),
    };
    let enqueue_ms = r.u64()?;
    let expiry = r.u64()?;
    let n = r.u8()? as usize;
    let exchange = r.bytes(n)?;
    let n = r.u8()? as usize;
    let routing_key = r.bytes(n)?;
    let n = r.u32()? as usize;
    let properties = r.bytes(n)?;
    let body_len = r.u32()?;
    let msg = MsgBody {
        enqueue_ms,
        expiry_ms: (expiry != NO_EXPIRY).then_some(expiry),
        exchange,
        routing_key,
        properties,
        body: &[],
        body_offset: r.pos,
    };
    r.finish((carried, msg, body_len))
}

impl<'a> Payload<'a> {
    /// Decode a payload of `kind`; every byte must be consumed.
    pub(crate) fn decode(kind: u8, buf: &'a [u8]) -> R<Self> {
        let mut r = Reader { buf, pos: 0 };
        let p = match kind {
            1 => {
                let members = r.members()?;
                Payload::Publish {
                    members,
                    msg: r.msg()?,
                }
            }
            2 => Payload::Enqueue {
                msg: r.u64()?,
                members: r.members()?,
            },
            3 => {
                let queue = r.u64()?;
                let n = r.count(8)?;
                let ids = (0..n).map(|_| r.u64()).collect::<R<_>>()?;
                Payload::Settle { queue, ids }
            }
            4 => {
                let source = (r.u64()?, r.u64()?);
                let members = r.members()?;
                Payload::DeadLetter {
                    source,
                    members,
                    msg: r.msg()?,
                }
            }
            5 => Payload::DeliveryCount {
                member: (r.u64()?, r.u64()?),
                count: r.u32()?,
            },
            6 => {
                let msg_id = r.u64()?;
                let n = r.count(20)?;
                let members = (0..n)
                    .map(|_| Ok(((r.u64()?, r.u64()?), r.u32()?)))
                    .collect::<R<_>>()?;
                Payload::Carry {
                    msg_id,
                    members,
                    msg: r.msg()?,
                }
            }
            7 => {
                let kind = r.u8()?;
                let n = r.u16()? as usize;
                let key = r.bytes(n)?;
                let n = r.u32()? as usize;
                Payload::PutDefinition {
                    kind,
                    key,
                    value: r.bytes(n)?,
                }
            }
            8 => {
                let kind = r.u8()?;
                let n = r.u16()? as usize;
                Payload::DeleteDefinition {
                    kind,
                    key: r.bytes(n)?,
                }
            }
            9 => Payload::Purge { queue: r.u64()? },
            10 => Payload::Park {
                member: (r.u64()?, r.u64()?),
                due_ms: r.u64()?,
                attempt: r.u32()?,
            },
            11 => Payload::Route {
                source: (r.u64()?, r.u64()?),
                members: r.members()?,
            },
            12 => {
                let queue = r.u64()?;
                let n = r.count(12)?;
                let counts = (0..n).map(|_| Ok((r.u64()?, r.u32()?))).collect::<R<_>>()?;
                Payload::DeliveryCounts { queue, counts }
            }
            _ => return Err("unknown record kind"),
        };
        r.finish(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn msg() -> NewMessage {
        NewMessage {
            exchange: Bytes::from_static(b"ex"),
            routing_key: Bytes::from_static(b"rk"),
            properties: Bytes::from_static(&[0x80, 0, 5, b'a']),
            body: Bytes::from_static(b"hello"),
            enqueue_ms: 5,
            expiry_ms: Some(9),
        }
    }

    #[test]
    fn a_message_prefix_reads_the_fields_before_the_body() {
        let members = vec![(1, 2), (3, 4)];
        let cmds = [
            Command::Publish {
                message: msg(),
                members: members.clone(),
            },
            Command::DeadLetter {
                source: (9, 9),
                message: msg(),
                targets: members.clone(),
            },
        ];
        for cmd in cmds {
            let (kind, bytes, at) = encode_command(&cmd).expect("encode");
            let at = at.expect("body offset");
            let cut = |n: usize| bytes.get(..n).expect("in range");
            let (carried, m, len) = message_prefix(kind as u8, cut(at)).expect("prefix");
            assert_eq!(carried, None);
            assert_eq!((m.exchange, m.routing_key), (&b"ex"[..], &b"rk"[..]));
            assert_eq!(m.properties, &[0x80, 0, 5, b'a'][..]);
            assert_eq!((m.enqueue_ms, m.expiry_ms, len), (5, Some(9), 5));
            assert_eq!(m.body_offset, at);
            // Cut anywhere else, or with the body, it is refused.
            assert!(message_prefix(kind as u8, cut(at - 1)).is_err());
            assert!(message_prefix(kind as u8, &bytes).is_err());
        }
        let m = msg();
        let (carry, at) = encode_carry(77, &[((1, 2), 3)], &MsgBody::of(&m)).expect("carry");
        let prefix = carry.get(..at).expect("in range");
        let (carried, m, len) = message_prefix(Kind::Carry as u8, prefix).expect("carry");
        assert_eq!((carried, m.routing_key, len), (Some(77), &b"rk"[..], 5));
        assert!(message_prefix(Kind::Settle as u8, &[0; 12]).is_err());
    }

    #[test]
    fn publish_round_trips_with_body_offset() {
        let cmd = Command::Publish {
            message: msg(),
            members: vec![(1, 2), (3, 4)],
        };
        let (kind, bytes, at) = encode_command(&cmd).expect("encodes");
        let Payload::Publish { members, msg: m } = Payload::decode(kind as u8, &bytes).expect("ok")
        else {
            panic!("wrong kind")
        };
        assert_eq!(members, vec![(1, 2), (3, 4)]);
        assert_eq!(m.body, b"hello");
        assert_eq!(m.expiry_ms, Some(9));
        assert_eq!(Some(m.body_offset), at);
    }

    #[test]
    fn too_long_routing_key_is_refused() {
        let mut m = msg();
        m.routing_key = Bytes::from(vec![b'k'; 256]);
        let cmd = Command::Publish {
            message: m,
            members: vec![],
        };
        assert!(matches!(encode_command(&cmd), Err(AppendError::Invalid(_))));
    }

    #[test]
    fn huge_count_is_refused_without_allocating() {
        let mut b = 1u64.to_le_bytes().to_vec();
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(Payload::decode(2, &b).is_err());
    }
}
