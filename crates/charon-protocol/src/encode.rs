//! Generic frame encoders. Every function appends complete frames to `out`.
//!
//! [`encode_method`] goes through `amq_protocol::protocol::gen_class`; the
//! hot server→client methods have allocation-free twins in `fastpath`.

use amq_protocol::frame::WriteContext;
use amq_protocol::protocol::gen_class;
use bytes::{BufMut, BytesMut};

use crate::properties::RawProperties;
use crate::{
    AMQPClass, FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD, FRAME_OVERHEAD,
};

fn put_frame_header(out: &mut BytesMut, frame_type: u8, channel: u16, size: usize) {
    out.put_u8(frame_type);
    out.put_u16(channel);
    out.put_u32(u32::try_from(size).unwrap_or(u32::MAX));
}

/// Append a method frame for `method` on `channel`.
pub fn encode_method(out: &mut BytesMut, channel: u16, method: &AMQPClass) {
    // Writing into a Vec cannot fail (amq-protocol short strings are at
    // most 255 bytes by construction).
    let payload = match gen_class(method)(WriteContext::from(Vec::with_capacity(64))) {
        Ok(ctx) => ctx.into_inner().0,
        Err(_) => {
            debug_assert!(false, "gen_class failed writing to a Vec");
            return;
        }
    };
    out.reserve(payload.len() + FRAME_OVERHEAD as usize);
    put_frame_header(out, FRAME_METHOD, channel, payload.len());
    out.put_slice(&payload);
    out.put_u8(FRAME_END);
}

/// Append a heartbeat frame (channel 0, empty payload).
pub fn encode_heartbeat(out: &mut BytesMut) {
    out.put_slice(&[FRAME_HEARTBEAT, 0, 0, 0, 0, 0, 0, FRAME_END]);
}

/// Append a content-header frame and the body frames for `body`, split so
/// that no body frame exceeds `frame_max` (whole frame incl. 8 bytes
/// overhead; 0 = unlimited). An empty body produces no body frame (as
/// RabbitMQ does). The header frame itself is not split: the caller must
/// not pass properties larger than `frame_max - 20`.
pub fn encode_content(
    out: &mut BytesMut,
    channel: u16,
    class_id: u16,
    properties: &RawProperties,
    body: &[u8],
    frame_max: u32,
) {
    let props = properties.wire_bytes();
    let chunk = if frame_max == 0 {
        body.len().max(1)
    } else {
        usize::try_from(frame_max.saturating_sub(FRAME_OVERHEAD).max(1)).unwrap_or(usize::MAX)
    };
    let n_body_frames = body.len().div_ceil(chunk);
    out.reserve(
        12 + props.len()
            + FRAME_OVERHEAD as usize
            + body.len()
            + n_body_frames * FRAME_OVERHEAD as usize,
    );
    put_frame_header(out, FRAME_HEADER, channel, 12 + props.len());
    out.put_u16(class_id);
    out.put_u16(0);
    out.put_u64(body.len() as u64);
    out.put_slice(props);
    out.put_u8(FRAME_END);
    for piece in body.chunks(chunk) {
        put_frame_header(out, FRAME_BODY, channel, piece.len());
        out.put_slice(piece);
        out.put_u8(FRAME_END);
    }
}
