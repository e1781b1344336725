//! The four method frames a busy connection receives most — `basic.publish`, `basic.ack`,
//! `basic.nack`, `basic.reject` — read in place from the read buffer: no [`AMQPClass`], no
//! `Box`, no `String` for the publish's names ([`peek_hot`]). The names are left as octets, not
//! checked for UTF-8 here: a publisher sends the same names again and again, and the caller
//! compares them with the ones it checked before (checking only new ones); a frame whose names
//! are not UTF-8 ([`HotMethod::to_class`] is `None`) belongs to `decode_frame`, which refuses it.
//!
//! Anything unusual (another method, a frame not complete yet, a size over `frame_max`, a bad
//! end octet, arguments that the fast decoders in `fastpath` would decline) is `None`, and the
//! caller takes [`crate::decode_frame`], which decides and reports exactly as before. When a
//! hot method has to take the general path after all, [`HotMethod::to_class`] gives the value
//! `decode_frame` would have produced (checked by proptests against it).

use amq_protocol::protocol::basic;

use crate::wire::{Reader, be_u16_at, frame_payload_at};
use crate::{AMQPClass, FRAME_END, FRAME_METHOD, ShortString};

/// A hot method, borrowing the names of a publish from the read buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HotMethod<'a> {
    /// basic.publish (60.40).
    Publish {
        /// Exchange name (at most 255 octets; not checked for UTF-8).
        exchange: &'a [u8],
        /// Routing key (at most 255 octets; not checked for UTF-8).
        routing_key: &'a [u8],
        /// The mandatory bit.
        mandatory: bool,
        /// The immediate bit.
        immediate: bool,
    },
    /// basic.ack (60.80).
    Ack {
        /// Delivery tag.
        delivery_tag: u64,
        /// The multiple bit.
        multiple: bool,
    },
    /// basic.nack (60.120).
    Nack {
        /// Delivery tag.
        delivery_tag: u64,
        /// The multiple bit.
        multiple: bool,
        /// The requeue bit.
        requeue: bool,
    },
    /// basic.reject (60.90).
    Reject {
        /// Delivery tag.
        delivery_tag: u64,
        /// The requeue bit.
        requeue: bool,
    },
}

/// A complete hot method frame at the front of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HotFrame<'a> {
    /// Channel number.
    pub channel: u16,
    /// The method.
    pub method: HotMethod<'a>,
    /// Octets of the whole frame: advance the buffer by this much once handled.
    pub len: usize,
}

impl HotMethod<'_> {
    /// The method as [`crate::decode_frame`] returns it (for the general path); `None` for a
    /// publish whose names are not UTF-8 (`decode_frame` refuses the frame).
    pub fn to_class(&self) -> Option<AMQPClass> {
        let m = match *self {
            HotMethod::Publish {
                exchange,
                routing_key,
                mandatory,
                immediate,
            } => basic::AMQPMethod::Publish(basic::Publish {
                exchange: ShortString::from(std::str::from_utf8(exchange).ok()?),
                routing_key: ShortString::from(std::str::from_utf8(routing_key).ok()?),
                mandatory,
                immediate,
            }),
            HotMethod::Ack {
                delivery_tag,
                multiple,
            } => basic::AMQPMethod::Ack(basic::Ack {
                delivery_tag,
                multiple,
            }),
            HotMethod::Nack {
                delivery_tag,
                multiple,
                requeue,
            } => basic::AMQPMethod::Nack(basic::Nack {
                delivery_tag,
                multiple,
                requeue,
            }),
            HotMethod::Reject {
                delivery_tag,
                requeue,
            } => basic::AMQPMethod::Reject(basic::Reject {
                delivery_tag,
                requeue,
            }),
        };
        Some(AMQPClass::Basic(m))
    }
}

/// The hot method frame at the front of `buf`, if there is a complete one that decodes
/// without question (but for the UTF-8 of a publish's names, see the module docs); `None` for
/// anything else. `buf` is not changed:
/// advance it by [`HotFrame::len`] once the frame is handled.
pub fn peek_hot(buf: &[u8], frame_max: u32) -> Option<HotFrame<'_>> {
    if *buf.first()? != FRAME_METHOD {
        return None;
    }
    let (channel, payload) = frame_payload_at(buf, frame_max, FRAME_END)?;
    let (class_id, method_id) = (be_u16_at(payload, 0)?, be_u16_at(payload, 2)?);
    if class_id != 60 {
        return None;
    }
    let mut r = Reader::new(payload.get(4..)?);
    let method = match method_id {
        40 => {
            r.skip(2)?; // reserved-1 (ticket)
            let exchange = r.short_str()?;
            let routing_key = r.short_str()?;
            let bits = r.u8()?;
            HotMethod::Publish {
                exchange,
                routing_key,
                mandatory: bits & 1 != 0,
                immediate: bits & 2 != 0,
            }
        }
        80 | 90 | 120 => {
            let delivery_tag = r.u64()?;
            let bits = r.u8()?;
            match method_id {
                80 => HotMethod::Ack {
                    delivery_tag,
                    multiple: bits & 1 != 0,
                },
                120 => HotMethod::Nack {
                    delivery_tag,
                    multiple: bits & 1 != 0,
                    requeue: bits & 2 != 0,
                },
                _ => HotMethod::Reject {
                    delivery_tag,
                    requeue: bits & 1 != 0,
                },
            }
        }
        _ => return None,
    };
    if r.remaining() != 0 {
        return None;
    }
    Some(HotFrame {
        channel,
        method,
        len: payload.len() + 8,
    })
}
