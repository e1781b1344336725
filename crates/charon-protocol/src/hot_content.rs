//! Content frames read in place ([`peek_content`]): a content header's body size and
//! properties, or a body frame's payload, as slices of the read buffer — no `split_to`, no
//! shared handle on the buffer, and no walk over properties the caller has already checked
//! (a publisher's consecutive messages usually carry the very same properties).
//!
//! What [`peek_content`] accepts, [`crate::decode_frame`] decodes to the same frame (the same
//! channel, body size, property octets and payload, consuming the same octets); anything else
//! (another frame type, an incomplete frame, a size over `frame_max`, a bad end octet, a header
//! of another class, with a weight, too short, or with malformed properties) is `None`, and the
//! caller takes `decode_frame`, which decides and reports exactly as before. Checked by
//! proptests against `decode_frame` (`tests/hot_content.rs`).

use crate::properties::validate_properties;
use crate::wire::{Reader, frame_payload_at};
use crate::{CLASS_BASIC, FRAME_BODY, FRAME_END, FRAME_HEADER};

/// A content frame's content, borrowed from the read buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HotContent<'a> {
    /// A basic content header (class 60, weight 0) with well-formed properties.
    Header {
        /// Total size of the body that follows.
        body_size: u64,
        /// Property flags + property list, as received.
        properties: &'a [u8],
    },
    /// A body frame's payload.
    Body(&'a [u8]),
}

/// A complete content frame at the front of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HotContentFrame<'a> {
    /// Channel number.
    pub channel: u16,
    /// The content.
    pub content: HotContent<'a>,
    /// Octets of the whole frame: advance the buffer by this much once handled.
    pub len: usize,
}

/// The content frame at the front of `buf`, if there is a complete one that decodes without
/// question; `None` for anything else (see the module docs). A header's properties are
/// validated as `decode_frame` does unless they are octet for octet `checked` (properties the
/// caller has seen pass before; `&[]` when there are none). `buf` is not changed: advance it
/// by [`HotContentFrame::len`] once the frame is handled.
pub fn peek_content<'a>(
    buf: &'a [u8],
    frame_max: u32,
    checked: &[u8],
) -> Option<HotContentFrame<'a>> {
    let frame_type = *buf.first()?;
    if frame_type != FRAME_HEADER && frame_type != FRAME_BODY {
        return None;
    }
    let (channel, payload) = frame_payload_at(buf, frame_max, FRAME_END)?;
    let content = if frame_type == FRAME_BODY {
        HotContent::Body(payload)
    } else {
        let mut r = Reader::new(payload);
        let (class_id, weight, body_size) = (r.u16()?, r.u16()?, r.u64()?);
        if class_id != CLASS_BASIC || weight != 0 {
            return None;
        }
        let properties = payload.get(12..)?;
        if properties != checked && validate_properties(properties).is_err() {
            return None;
        }
        HotContent::Header {
            body_size,
            properties,
        }
    };
    Some(HotContentFrame {
        channel,
        content,
        len: payload.len() + 8,
    })
}
