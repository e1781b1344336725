//! The framer: [`decode_frame`] cuts one frame off the front of the read
//! buffer and classifies it as a [`Frame`].
//!
//! Frame layout: type(1) channel(2) size(4) payload(size) end(1) = 0xCE.
//! Body payloads and content-header properties are `split_to(..).freeze()`
//! slices of the read buffer: no copies.

use bytes::{Buf, Bytes, BytesMut};

use crate::erlang::snippet;
use crate::error::FrameError;
use crate::method::decode_method;
use crate::properties::RawProperties;
use crate::wire::{Reader, be_u16_at, be_u32_at};
use crate::{
    AMQPClass, CLASS_BASIC, FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD,
};

/// One decoded frame.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame {
    /// A method frame (type 1).
    Method {
        /// Channel number.
        channel: u16,
        /// The decoded method.
        method: Box<AMQPClass>,
    },
    /// A content-header frame (type 2).
    Header {
        /// Channel number.
        channel: u16,
        /// Class id, body size and raw properties.
        header: ContentHeader,
    },
    /// A content-body frame (type 3); `payload` shares the read buffer.
    Body {
        /// Channel number.
        channel: u16,
        /// Body bytes.
        payload: Bytes,
    },
    /// A heartbeat frame (type 8). RabbitMQ treats one on a channel other
    /// than 0 as UNEXPECTED_FRAME (505) once the connection is open; that
    /// check is left to the server.
    Heartbeat {
        /// Channel number (should be 0).
        channel: u16,
    },
}

/// The content header: what follows a content-bearing method.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContentHeader {
    /// Class id; 60 (basic) is the only one with content, the server refuses others.
    pub class_id: u16,
    /// Total size of the body that follows in body frames.
    pub body_size: u64,
    /// Property flags + property list, as received.
    pub properties: RawProperties,
}

impl ContentHeader {
    /// The frame payload this header was decoded from (class, weight 0,
    /// body size, properties), for error texts that quote the octets.
    pub fn payload(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(12 + self.properties.0.len());
        v.extend_from_slice(&self.class_id.to_be_bytes());
        v.extend_from_slice(&[0, 0]);
        v.extend_from_slice(&self.body_size.to_be_bytes());
        v.extend_from_slice(&self.properties.0);
        v
    }
}

/// A complete frame at the front of `buf`, without decoding it: type,
/// channel and payload. `None` while incomplete or when the end octet is
/// wrong ([`decode_frame`] reports that). Used where a refused frame's
/// octets go into the reply text.
pub fn peek_frame(buf: &[u8]) -> Option<(u8, u16, &[u8])> {
    let (&frame_type, channel, size) = (buf.first()?, be_u16_at(buf, 1)?, be_u32_at(buf, 3)?);
    let end_at = usize::try_from(size).ok()?.checked_add(7)?;
    if *buf.get(end_at)? != FRAME_END {
        return None;
    }
    Some((frame_type, channel, buf.get(7..end_at)?))
}

/// Decode one frame from the front of `buf`, advancing it past the frame.
/// `Ok(None)` = need more bytes (`buf` untouched).
///
/// `frame_max` is the negotiated maximum frame size (whole frame, including
/// the 8 bytes of overhead); 0 = no limit. Like RabbitMQ 3.10.8, the check
/// tolerates payloads up to `frame_max` itself (i.e. an 8-byte "fudge" for
/// clients that forget the overhead): the error is raised when
/// `size > frame_max`, as soon as the 7-byte frame header is buffered, so
/// nothing is ever buffered or allocated on the strength of an oversized
/// length.
///
/// On `Err` the connection must be closed (all frame errors are hard
/// errors). For errors found after the whole frame arrived (everything but
/// [`FrameError::FrameTooLarge`] and [`FrameError::BadFrameEnd`]) the frame
/// has been consumed from `buf`.
///
/// Content-header properties are structurally validated
/// ([`RawProperties::validate`]) but not decoded.
pub fn decode_frame(buf: &mut BytesMut, frame_max: u32) -> Result<Option<Frame>, FrameError> {
    let (Some(&frame_type), Some(channel), Some(size)) =
        (buf.first(), be_u16_at(buf, 1), be_u32_at(buf, 3))
    else {
        return Ok(None);
    };
    if frame_max != 0 && size > frame_max {
        return Err(FrameError::FrameTooLarge {
            frame_type,
            channel,
            size,
            frame_max,
        });
    }
    let Some(end_at) = usize::try_from(size).ok().and_then(|s| s.checked_add(7)) else {
        return Err(FrameError::FrameTooLarge {
            frame_type,
            channel,
            size,
            frame_max,
        });
    };
    let Some(&end) = buf.get(end_at) else {
        return Ok(None);
    };
    if end != FRAME_END {
        return Err(FrameError::BadFrameEnd {
            frame_type,
            channel,
            size,
            offset: end_at,
            found: end,
            head: snippet(buf.get(7..end_at).unwrap_or_default()),
        });
    }
    if frame_type == FRAME_METHOD {
        // Decoded from the buffer in place: a method keeps nothing of its frame's bytes, so
        // no split (and no shared handle on the read buffer) per method frame.
        let method = decode_method(buf.get(7..end_at).unwrap_or_default());
        buf.advance(end_at + 1);
        return method.map(|m| {
            Some(Frame::Method {
                channel,
                method: Box::new(m),
            })
        });
    }
    let mut payload = buf.split_to(end_at + 1);
    payload.advance(7);
    payload.truncate(payload.len().saturating_sub(1));
    decode_payload(frame_type, channel, size, payload).map(Some)
}

fn decode_payload(
    frame_type: u8,
    channel: u16,
    size: u32,
    payload: BytesMut,
) -> Result<Frame, FrameError> {
    match frame_type {
        FRAME_METHOD => Ok(Frame::Method {
            channel,
            method: Box::new(decode_method(&payload)?),
        }),
        FRAME_HEADER => Ok(Frame::Header {
            channel,
            header: decode_header(payload.freeze())?,
        }),
        FRAME_BODY => Ok(Frame::Body {
            channel,
            payload: payload.freeze(),
        }),
        FRAME_HEARTBEAT if payload.is_empty() => Ok(Frame::Heartbeat { channel }),
        FRAME_HEARTBEAT => Err(FrameError::HeartbeatWithPayload {
            channel,
            size,
            head: snippet(&payload),
        }),
        _ => Err(FrameError::UnknownFrameType {
            frame_type,
            channel,
            size,
            head: snippet(&payload),
        }),
    }
}

fn decode_header(mut payload: Bytes) -> Result<ContentHeader, FrameError> {
    let mut r = Reader::new(&payload);
    let (Some(class_id), Some(weight), Some(body_size)) = (r.u16(), r.u16(), r.u64()) else {
        return Err(FrameError::HeaderFrameTooShort {
            size: payload.len(),
            head: snippet(&payload),
        });
    };
    if weight != 0 {
        return Err(FrameError::NonZeroWeight { weight });
    }
    payload.advance(12);
    let properties = RawProperties(payload);
    // Only basic has content; a header of another class is refused by the
    // server (505) without looking at its properties.
    if class_id == CLASS_BASIC {
        properties.validate()?;
    }
    Ok(ContentHeader {
        class_id,
        body_size,
        properties,
    })
}
