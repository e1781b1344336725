//! Hand-encoded hot-path frames and fast parsers.
//!
//! Publishing uses a per-producer template (publish method frame + content
//! header + body frames) that is memcpy'd into a batch buffer, with the send
//! timestamp patched into the first 8 body bytes.

use super::frame_io::{FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_METHOD};

/// class basic
pub const CLASS_BASIC: u16 = 60;
/// basic.deliver
pub const BASIC_DELIVER: u16 = 60;
/// basic.ack
pub const BASIC_ACK: u16 = 80;
/// basic.nack
pub const BASIC_NACK: u16 = 120;
/// basic.reject
pub const BASIC_REJECT: u16 = 90;
/// basic.return
pub const BASIC_RETURN: u16 = 50;
/// basic.qos-ok
pub const BASIC_QOS_OK: u16 = 11;
/// class connection
pub const CLASS_CONNECTION: u16 = 10;
/// connection.close-ok
pub const CONNECTION_CLOSE_OK: u16 = 51;
/// class channel
pub const CLASS_CHANNEL: u16 = 20;

fn frame(out: &mut Vec<u8>, kind: u8, channel: u16, payload: &[u8]) {
    out.push(kind);
    out.extend_from_slice(&channel.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out.push(FRAME_END);
}

/// Pre-encoded publish of one message; `ts_offset` locates the 8 timestamp bytes.
#[derive(Debug, Clone)]
pub struct PublishTemplate {
    /// Encoded frames of one message.
    pub bytes: Vec<u8>,
    /// Offset of the body's first byte inside `bytes` (if a timestamp fits).
    pub ts_offset: Option<usize>,
}

impl PublishTemplate {
    /// Builds `basic.publish(exchange, routing_key)` + header + body frames.
    pub fn new(
        channel: u16,
        exchange: &str,
        routing_key: &str,
        body_size: usize,
        persistent: bool,
        frame_max: u32,
    ) -> Self {
        let mut bytes = Vec::with_capacity(64 + body_size + routing_key.len());
        // Method frame: class 60, method 40, ticket 0, exchange, rk, bits.
        let mut m = Vec::with_capacity(16 + exchange.len() + routing_key.len());
        m.extend_from_slice(&CLASS_BASIC.to_be_bytes());
        m.extend_from_slice(&40u16.to_be_bytes());
        m.extend_from_slice(&0u16.to_be_bytes());
        m.push(exchange.len().min(255) as u8);
        m.extend_from_slice(&exchange.as_bytes()[..exchange.len().min(255)]);
        m.push(routing_key.len().min(255) as u8);
        m.extend_from_slice(&routing_key.as_bytes()[..routing_key.len().min(255)]);
        m.push(0); // mandatory=false immediate=false
        frame(&mut bytes, FRAME_METHOD, channel, &m);
        // Content header: class, weight, body size, flags, [delivery-mode].
        let mut h = Vec::with_capacity(16);
        h.extend_from_slice(&CLASS_BASIC.to_be_bytes());
        h.extend_from_slice(&0u16.to_be_bytes());
        h.extend_from_slice(&(body_size as u64).to_be_bytes());
        if persistent {
            h.extend_from_slice(&0x1000u16.to_be_bytes());
            h.push(2);
        } else {
            h.extend_from_slice(&0u16.to_be_bytes());
        }
        frame(&mut bytes, FRAME_HEADER, channel, &h);
        // Body frames, split by frame_max (8 bytes of framing overhead).
        let max_payload = if frame_max == 0 {
            usize::MAX
        } else {
            (frame_max as usize).saturating_sub(8).max(1)
        };
        let body = vec![0u8; body_size];
        let mut ts_offset = None;
        let mut first = true;
        for chunk in body.chunks(max_payload) {
            if first && body_size >= 8 {
                ts_offset = Some(bytes.len() + 7);
            }
            first = false;
            frame(&mut bytes, FRAME_BODY, channel, chunk);
        }
        Self { bytes, ts_offset }
    }

    /// Appends one message stamped with `ts_nanos` to `out`.
    #[inline]
    pub fn append(&self, out: &mut Vec<u8>, ts_nanos: u64) {
        let base = out.len();
        out.extend_from_slice(&self.bytes);
        if let Some(off) = self.ts_offset {
            out[base + off..base + off + 8].copy_from_slice(&ts_nanos.to_le_bytes());
        }
    }
}

/// Encodes `basic.ack(delivery_tag, multiple)`.
pub fn encode_ack(out: &mut Vec<u8>, channel: u16, delivery_tag: u64, multiple: bool) {
    let mut p = [0u8; 13];
    p[0..2].copy_from_slice(&CLASS_BASIC.to_be_bytes());
    p[2..4].copy_from_slice(&BASIC_ACK.to_be_bytes());
    p[4..12].copy_from_slice(&delivery_tag.to_be_bytes());
    p[12] = u8::from(multiple);
    frame(out, FRAME_METHOD, channel, &p);
}

/// Encodes `basic.nack(delivery_tag, multiple, requeue=false)`: reject into the dead-letter
/// exchange.
pub fn encode_nack_drop(out: &mut Vec<u8>, channel: u16, delivery_tag: u64, multiple: bool) {
    let mut p = [0u8; 13];
    p[0..2].copy_from_slice(&CLASS_BASIC.to_be_bytes());
    p[2..4].copy_from_slice(&BASIC_NACK.to_be_bytes());
    p[4..12].copy_from_slice(&delivery_tag.to_be_bytes());
    p[12] = u8::from(multiple);
    frame(out, FRAME_METHOD, channel, &p);
}

/// Encodes `basic.reject(delivery_tag, requeue=false)`: one delivery into the dead-letter
/// exchange.
pub fn encode_reject_drop(out: &mut Vec<u8>, channel: u16, delivery_tag: u64) {
    let mut p = [0u8; 13];
    p[0..2].copy_from_slice(&CLASS_BASIC.to_be_bytes());
    p[2..4].copy_from_slice(&BASIC_REJECT.to_be_bytes());
    p[4..12].copy_from_slice(&delivery_tag.to_be_bytes());
    p[12] = 0; // requeue=false
    frame(out, FRAME_METHOD, channel, &p);
}

/// Encodes `basic.qos(prefetch_size 0, prefetch_count 0, global=false)`: a no-op on a
/// publishing channel whose qos-ok tells that the broker has read everything sent before it.
pub fn encode_qos_marker(out: &mut Vec<u8>, channel: u16) {
    let mut p = [0u8; 11];
    p[0..2].copy_from_slice(&CLASS_BASIC.to_be_bytes());
    p[2..4].copy_from_slice(&10u16.to_be_bytes());
    frame(out, FRAME_METHOD, channel, &p);
}

/// Class and method ids of a method frame payload.
#[inline]
pub fn method_ids(payload: &[u8]) -> Option<(u16, u16)> {
    if payload.len() < 4 {
        return None;
    }
    Some((
        u16::from_be_bytes([payload[0], payload[1]]),
        u16::from_be_bytes([payload[2], payload[3]]),
    ))
}

/// Delivery tag of a `basic.deliver` payload (after class/method ids).
#[inline]
pub fn deliver_tag(payload: &[u8]) -> Option<u64> {
    // consumer-tag shortstr, then delivery-tag u64.
    let ctag_len = *payload.get(4)? as usize;
    let off = 5 + ctag_len;
    let b = payload.get(off..off + 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Some(u64::from_be_bytes(a))
}

/// `(delivery_tag, multiple)` of a `basic.ack` / `basic.nack` payload.
#[inline]
pub fn ack_fields(payload: &[u8]) -> Option<(u64, bool)> {
    let b = payload.get(4..12)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    let bits = *payload.get(12)?;
    Some((u64::from_be_bytes(a), bits & 1 == 1))
}

/// Body size of a content header payload.
#[inline]
pub fn header_body_size(payload: &[u8]) -> Option<u64> {
    let b = payload.get(4..12)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Some(u64::from_be_bytes(a))
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::frame::{AMQPFrame, parse_frame};
    use amq_protocol::protocol::{AMQPClass, basic};

    #[test]
    fn template_parses_with_amq_protocol() {
        let t = PublishTemplate::new(1, "", "q-0", 20, true, 131072);
        let mut out = Vec::new();
        t.append(&mut out, 0x0102_0304_0506_0708);
        let (rest, f) = parse_frame(&out[..]).expect("method");
        match f {
            AMQPFrame::Method(1, AMQPClass::Basic(basic::AMQPMethod::Publish(p))) => {
                assert_eq!(p.routing_key.as_str(), "q-0");
            }
            other => panic!("unexpected {other:?}"),
        }
        let (rest, f) = parse_frame(rest).expect("header");
        match f {
            AMQPFrame::Header(1, h) => {
                assert_eq!(h.body_size, 20);
                assert_eq!(h.properties.delivery_mode(), &Some(2));
            }
            other => panic!("unexpected {other:?}"),
        }
        let (rest, f) = parse_frame(rest).expect("body");
        match f {
            AMQPFrame::Body(1, b) => {
                assert_eq!(b.len(), 20);
                assert_eq!(&b[..8], &0x0102_0304_0506_0708u64.to_le_bytes());
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(rest.is_empty());
    }

    #[test]
    fn body_split_by_frame_max() {
        let t = PublishTemplate::new(1, "", "q", 100, false, 58);
        let mut rest: &[u8] = &t.bytes;
        let mut frames = 0;
        while !rest.is_empty() {
            let (r, _) = parse_frame(rest).expect("frame");
            rest = r;
            frames += 1;
        }
        assert_eq!(frames, 2 + 2);
    }

    #[test]
    fn ack_roundtrip() {
        let mut out = Vec::new();
        encode_ack(&mut out, 3, 42, true);
        let (_, f) = parse_frame(&out[..]).expect("ack");
        match f {
            AMQPFrame::Method(3, AMQPClass::Basic(basic::AMQPMethod::Ack(a))) => {
                assert_eq!(a.delivery_tag, 42);
                assert!(a.multiple);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(ack_fields(&out[7..out.len() - 1]), Some((42, true)));
    }

    #[test]
    fn nack_and_reject_drop_roundtrip() {
        let mut out = Vec::new();
        encode_nack_drop(&mut out, 1, 7, true);
        let (rest, f) = parse_frame(&out[..]).expect("nack");
        match f {
            AMQPFrame::Method(1, AMQPClass::Basic(basic::AMQPMethod::Nack(n))) => {
                assert_eq!(n.delivery_tag, 7);
                assert!(n.multiple);
                assert!(!n.requeue);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(rest.is_empty());
        out.clear();
        encode_reject_drop(&mut out, 1, 9);
        let (_, f) = parse_frame(&out[..]).expect("reject");
        match f {
            AMQPFrame::Method(1, AMQPClass::Basic(basic::AMQPMethod::Reject(r))) => {
                assert_eq!(r.delivery_tag, 9);
                assert!(!r.requeue);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn qos_marker_parses() {
        let mut out = Vec::new();
        encode_qos_marker(&mut out, 1);
        let (rest, f) = parse_frame(&out[..]).expect("qos");
        match f {
            AMQPFrame::Method(1, AMQPClass::Basic(basic::AMQPMethod::Qos(q))) => {
                assert_eq!(q.prefetch_count, 0);
                assert!(!q.global);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(rest.is_empty());
    }
}
