//! Hand-written hot paths, no `amq-protocol`, no allocation on encode.
//!
//! Encoders write complete method frames byte-identical to what
//! `amq_protocol::protocol::gen_class` produces (checked by proptests).
//! Short strings longer than 255 bytes are **truncated** to the longest
//! prefix of at most 255 bytes that ends on a UTF-8 character boundary (they
//! cannot occur for names that arrived from a client as short strings; this
//! matters for `reply_text`). Nothing here panics.
//!
//! Decoders return `None` for anything unusual; the caller then falls back
//! to `amq-protocol`, so results are always identical to `parse_class`.

use bytes::{BufMut, BytesMut};

use crate::methods::basic::{Ack, Nack, Publish, Reject};
use crate::properties::RawProperties;
use crate::wire::Reader;
use crate::{FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_METHOD, ShortString};

/// Longest prefix of `s` of at most 255 bytes ending on a char boundary.
fn short(s: &str) -> &[u8] {
    if s.len() <= 255 {
        return s.as_bytes();
    }
    let mut end = 255;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    s.as_bytes().get(..end).unwrap_or_default()
}

fn put_short(out: &mut BytesMut, s: &[u8]) {
    // `s` comes from `short`, so it is at most 255 bytes.
    out.put_u8(u8::try_from(s.len()).unwrap_or(u8::MAX));
    out.put_slice(s);
}

/// Write the frame header for a method frame whose payload is `size` bytes.
fn method_header(out: &mut BytesMut, channel: u16, size: usize, class_id: u16, method_id: u16) {
    out.reserve(size + 8);
    out.put_u8(FRAME_METHOD);
    out.put_u16(channel);
    // Payload sizes here are bounded by 4 short strings + a few ints.
    out.put_u32(u32::try_from(size).unwrap_or(u32::MAX));
    out.put_u16(class_id);
    out.put_u16(method_id);
}

/// `basic.deliver` (60.60) method frame.
pub fn encode_basic_deliver(
    out: &mut BytesMut,
    channel: u16,
    consumer_tag: &str,
    delivery_tag: u64,
    redelivered: bool,
    exchange: &str,
    routing_key: &str,
) {
    let (ct, ex, rk) = (short(consumer_tag), short(exchange), short(routing_key));
    let size = 4 + 1 + ct.len() + 8 + 1 + 1 + ex.len() + 1 + rk.len();
    method_header(out, channel, size, 60, 60);
    put_short(out, ct);
    out.put_u64(delivery_tag);
    out.put_u8(u8::from(redelivered));
    put_short(out, ex);
    put_short(out, rk);
    out.put_u8(FRAME_END);
}

/// A delivery's frames: `basic.deliver` and the message's content.
#[derive(Clone, Copy, Debug)]
pub struct DeliveryFrames<'a> {
    /// Channel number.
    pub channel: u16,
    /// The consumer's tag.
    pub consumer_tag: &'a str,
    /// The delivery tag.
    pub delivery_tag: u64,
    /// The redelivered bit.
    pub redelivered: bool,
    /// Exchange the message was published to.
    pub exchange: &'a str,
    /// Its routing key.
    pub routing_key: &'a str,
    /// Its properties (flags + list, as sent).
    pub properties: &'a RawProperties,
    /// Its body.
    pub body: &'a [u8],
}

/// The general path of [`encode_delivery`]: [`encode_basic_deliver`], then
/// [`crate::encode_content`] (class basic), any body size and `frame_max`.
pub fn encode_delivery_apart(out: &mut BytesMut, d: &DeliveryFrames<'_>, frame_max: u32) {
    encode_basic_deliver(
        out,
        d.channel,
        d.consumer_tag,
        d.delivery_tag,
        d.redelivered,
        d.exchange,
        d.routing_key,
    );
    crate::encode_content(
        out,
        d.channel,
        crate::CLASS_BASIC,
        d.properties,
        d.body,
        frame_max,
    );
}

/// `basic.deliver` followed by the content-header frame and the body frames: byte for byte
/// what [`encode_basic_deliver`] and then [`crate::encode_content`] (class basic) write, with
/// one reservation and each frame's fixed octets written as one piece when the body fits one
/// frame (otherwise through those two).
pub fn encode_delivery(out: &mut BytesMut, d: &DeliveryFrames<'_>, frame_max: u32) {
    let props = d.properties.wire_bytes();
    let fits = frame_max == 0
        || d.body.len()
            <= usize::try_from(frame_max.saturating_sub(8).max(1)).unwrap_or(usize::MAX);
    if !fits {
        encode_delivery_apart(out, d, frame_max);
        return;
    }
    let (ct, ex, rk) = (
        short(d.consumer_tag),
        short(d.exchange),
        short(d.routing_key),
    );
    let method_size = 4 + 1 + ct.len() + 8 + 1 + 1 + ex.len() + 1 + rk.len();
    let header_size = 12 + props.len();
    let body_frame = if d.body.is_empty() {
        0
    } else {
        8 + d.body.len()
    };
    out.reserve(8 + method_size + 8 + header_size + body_frame);
    let [c0, c1] = d.channel.to_be_bytes();
    let [m0, m1, m2, m3] = frame_size(method_size);
    let ct_len = u8::try_from(ct.len()).unwrap_or(u8::MAX);
    out.extend_from_slice(&[FRAME_METHOD, c0, c1, m0, m1, m2, m3, 0, 60, 0, 60, ct_len]);
    out.extend_from_slice(ct);
    let [t0, t1, t2, t3, t4, t5, t6, t7] = d.delivery_tag.to_be_bytes();
    let ex_len = u8::try_from(ex.len()).unwrap_or(u8::MAX);
    let re = u8::from(d.redelivered);
    out.extend_from_slice(&[t0, t1, t2, t3, t4, t5, t6, t7, re, ex_len]);
    out.extend_from_slice(ex);
    out.extend_from_slice(&[u8::try_from(rk.len()).unwrap_or(u8::MAX)]);
    out.extend_from_slice(rk);
    let [h0, h1, h2, h3] = frame_size(header_size);
    let [b0, b1, b2, b3, b4, b5, b6, b7] = (d.body.len() as u64).to_be_bytes();
    out.extend_from_slice(&[
        FRAME_END,
        FRAME_HEADER,
        c0,
        c1,
        h0,
        h1,
        h2,
        h3,
        0,
        60,
        0,
        0,
        b0,
        b1,
        b2,
        b3,
        b4,
        b5,
        b6,
        b7,
    ]);
    out.extend_from_slice(props);
    if d.body.is_empty() {
        out.extend_from_slice(&[FRAME_END]);
        return;
    }
    let [s0, s1, s2, s3] = frame_size(d.body.len());
    out.extend_from_slice(&[FRAME_END, FRAME_BODY, c0, c1, s0, s1, s2, s3]);
    out.extend_from_slice(d.body);
    out.extend_from_slice(&[FRAME_END]);
}

/// How many octets [`encode_delivery`] writes for `d` (so a batch of deliveries can be given
/// its room at once: growing the output buffer delivery by delivery copies what is already
/// encoded each time it doubles).
pub fn delivery_len(d: &DeliveryFrames<'_>, frame_max: u32) -> usize {
    let method = 8
        + 4
        + 1
        + short(d.consumer_tag).len()
        + 8
        + 1
        + 1
        + short(d.exchange).len()
        + 1
        + short(d.routing_key).len();
    let header = 8 + 12 + d.properties.wire_bytes().len();
    let chunk = if frame_max == 0 {
        d.body.len().max(1)
    } else {
        usize::try_from(frame_max.saturating_sub(8).max(1)).unwrap_or(usize::MAX)
    };
    method + header + d.body.len() + 8 * d.body.len().div_ceil(chunk)
}

fn frame_size(size: usize) -> [u8; 4] {
    u32::try_from(size).unwrap_or(u32::MAX).to_be_bytes()
}

/// `basic.get-ok` (60.71) method frame.
pub fn encode_basic_get_ok(
    out: &mut BytesMut,
    channel: u16,
    delivery_tag: u64,
    redelivered: bool,
    exchange: &str,
    routing_key: &str,
    message_count: u32,
) {
    let (ex, rk) = (short(exchange), short(routing_key));
    let size = 4 + 8 + 1 + 1 + ex.len() + 1 + rk.len() + 4;
    method_header(out, channel, size, 60, 71);
    out.put_u64(delivery_tag);
    out.put_u8(u8::from(redelivered));
    put_short(out, ex);
    put_short(out, rk);
    out.put_u32(message_count);
    out.put_u8(FRAME_END);
}

/// `basic.return` (60.50) method frame.
pub fn encode_basic_return(
    out: &mut BytesMut,
    channel: u16,
    reply_code: u16,
    reply_text: &str,
    exchange: &str,
    routing_key: &str,
) {
    let (rt, ex, rk) = (short(reply_text), short(exchange), short(routing_key));
    let size = 4 + 2 + 1 + rt.len() + 1 + ex.len() + 1 + rk.len();
    method_header(out, channel, size, 60, 50);
    out.put_u16(reply_code);
    put_short(out, rt);
    put_short(out, ex);
    put_short(out, rk);
    out.put_u8(FRAME_END);
}

/// `basic.ack` (60.80) method frame (sent by the server in confirm mode).
pub fn encode_basic_ack(out: &mut BytesMut, channel: u16, delivery_tag: u64, multiple: bool) {
    method_header(out, channel, 4 + 8 + 1, 60, 80);
    out.put_u64(delivery_tag);
    out.put_u8(u8::from(multiple));
    out.put_u8(FRAME_END);
}

/// `basic.nack` (60.120) method frame (sent by the server in confirm mode).
pub fn encode_basic_nack(
    out: &mut BytesMut,
    channel: u16,
    delivery_tag: u64,
    multiple: bool,
    requeue: bool,
) {
    method_header(out, channel, 4 + 8 + 1, 60, 120);
    out.put_u64(delivery_tag);
    out.put_u8(u8::from(multiple) | (u8::from(requeue) << 1));
    out.put_u8(FRAME_END);
}

fn utf8_short(b: &[u8]) -> Option<ShortString> {
    let s = std::str::from_utf8(b).ok()?;
    ShortString::try_new(s).ok()
}

/// Fast decode of `basic.publish` arguments (the method payload after the
/// 4 id bytes). `None` if anything is off (truncated, trailing bytes,
/// non-UTF-8 names); the caller falls back to `amq-protocol`.
pub fn decode_basic_publish(args: &[u8]) -> Option<Publish> {
    let mut r = Reader::new(args);
    r.skip(2)?; // reserved-1 (ticket)
    let exchange = r.short_str()?;
    let routing_key = r.short_str()?;
    let bits = r.u8()?;
    if r.remaining() != 0 {
        return None;
    }
    Some(Publish {
        exchange: utf8_short(exchange)?,
        routing_key: utf8_short(routing_key)?,
        mandatory: bits & 1 != 0,
        immediate: bits & 2 != 0,
    })
}

/// Fast decode of `basic.ack` arguments (payload after the 4 id bytes).
/// `None` if the length is not exactly 9 bytes.
pub fn decode_basic_ack(args: &[u8]) -> Option<Ack> {
    let mut r = Reader::new(args);
    let delivery_tag = r.u64()?;
    let bits = r.u8()?;
    if r.remaining() != 0 {
        return None;
    }
    Some(Ack {
        delivery_tag,
        multiple: bits & 1 != 0,
    })
}

/// Fast decode of `basic.nack` arguments (payload after the 4 id bytes):
/// delivery tag, then bits multiple (0) and requeue (1). `None` if the
/// length is not exactly 9 bytes.
pub fn decode_basic_nack(args: &[u8]) -> Option<Nack> {
    let (delivery_tag, bits) = tag_and_bits(args)?;
    Some(Nack {
        delivery_tag,
        multiple: bits & 1 != 0,
        requeue: bits & 2 != 0,
    })
}

/// Fast decode of `basic.reject` arguments (payload after the 4 id bytes):
/// delivery tag, then bit requeue (0). `None` if the length is not exactly
/// 9 bytes.
pub fn decode_basic_reject(args: &[u8]) -> Option<Reject> {
    let (delivery_tag, bits) = tag_and_bits(args)?;
    Some(Reject {
        delivery_tag,
        requeue: bits & 1 != 0,
    })
}

fn tag_and_bits(args: &[u8]) -> Option<(u64, u8)> {
    let mut r = Reader::new(args);
    let tag = r.u64()?;
    let bits = r.u8()?;
    (r.remaining() == 0).then_some((tag, bits))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_is_char_boundary_safe() {
        let s = "é".repeat(200); // 400 bytes, 2-byte chars
        let t = short(&s);
        assert_eq!(t.len(), 254);
        assert!(std::str::from_utf8(t).is_ok());
        let mut out = BytesMut::new();
        encode_basic_return(&mut out, 1, 312, &s, "x", "y");
        assert_eq!(out.get(13).copied(), Some(254));
    }
}
