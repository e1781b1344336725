//! `peek_content` against `decode_frame`: whenever the in-place reader accepts a content frame,
//! the general framer decodes the same bytes to the same header (class, body size, property
//! octets) or body payload and consumes the same octets; well-formed content frames are always
//! accepted, whether their properties are the caller's `checked` ones or not; anything else is
//! left to the framer.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use bytes::{BufMut, BytesMut};
use charon_protocol::*;
use proptest::prelude::*;

fn raw_frame(frame_type: u8, channel: u16, payload: &[u8]) -> BytesMut {
    let mut out = BytesMut::new();
    out.put_u8(frame_type);
    out.put_u16(channel);
    out.put_u32(u32::try_from(payload.len()).unwrap());
    out.put_slice(payload);
    out.put_u8(0xCE);
    out
}

fn header_payload(class: u16, weight: u16, body_size: u64, props: &[u8]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&class.to_be_bytes());
    p.extend_from_slice(&weight.to_be_bytes());
    p.extend_from_slice(&body_size.to_be_bytes());
    p.extend_from_slice(props);
    p
}

/// Whatever `peek_content` says about `bytes` agrees with `decode_frame`; true if accepted.
fn agrees(bytes: &[u8], frame_max: u32, checked: &[u8]) -> bool {
    let hot = peek_content(bytes, frame_max, checked);
    let mut buf = BytesMut::from(bytes);
    let decoded = decode_frame(&mut buf, frame_max);
    let Some(h) = hot else {
        return false;
    };
    let consumed = bytes.len() - buf.len();
    assert_eq!(consumed, h.len);
    match (decoded, h.content) {
        (
            Ok(Some(Frame::Header { channel, header })),
            HotContent::Header {
                body_size,
                properties,
            },
        ) => {
            assert_eq!(channel, h.channel);
            assert_eq!(header.class_id, CLASS_BASIC);
            assert_eq!(header.body_size, body_size);
            assert_eq!(&header.properties.0[..], properties);
        }
        (Ok(Some(Frame::Body { channel, payload })), HotContent::Body(p)) => {
            assert_eq!(channel, h.channel);
            assert_eq!(&payload[..], p);
        }
        (other, content) => {
            panic!("peek_content accepted {content:?}, decode_frame gave {other:?}")
        }
    }
    true
}

/// Properties a publisher sends (valid), encoded by amq-protocol.
fn valid_props(n: u8) -> Vec<u8> {
    let mut p = BasicProperties::default();
    if n & 1 != 0 {
        p = p.with_delivery_mode(2);
    }
    if n & 2 != 0 {
        p = p.with_content_type("text/plain".into());
    }
    if n & 4 != 0 {
        let mut t = FieldTable::default();
        t.insert("k".into(), AMQPValue::LongString("v".into()));
        t.insert("n".into(), AMQPValue::LongInt(7));
        p = p.with_headers(t);
    }
    if n & 8 != 0 {
        p = p.with_expiration("60000".into()).with_timestamp(5);
    }
    RawProperties::encode(&p).0.to_vec()
}

#[test]
fn well_formed_content_is_read_in_place() {
    for n in 0..16 {
        let props = valid_props(n);
        let f = raw_frame(2, 1, &header_payload(60, 0, 16, &props));
        for checked in [&[][..], &props[..], &valid_props(15 - n)[..]] {
            assert!(agrees(&f, 131_072, checked), "{n}");
        }
    }
    let mut body = raw_frame(3, 2, b"0123456789abcdef");
    assert!(agrees(&body, 0, &[]));
    // Only the first frame counts.
    body.put_slice(&[3, 0]);
    assert!(agrees(&body, 4096, &[]));
    assert!(agrees(&raw_frame(3, 0, b""), 4096, &[]));
}

#[test]
fn anything_unusual_is_left_to_the_framer() {
    let props = valid_props(5);
    let header = raw_frame(2, 1, &header_payload(60, 0, 3, &props));
    assert!(peek_content(&header, 0, &[]).is_some());
    assert_eq!(peek_content(&header[..header.len() - 1], 0, &[]), None);
    let mut bad_end = header.clone();
    *bad_end.last_mut().unwrap() = 0;
    assert_eq!(peek_content(&bad_end, 0, &[]), None);
    assert_eq!(peek_content(&header, 8, &[]), None);
    // Another class, a weight, too short, malformed or trailing properties.
    for payload in [
        header_payload(50, 0, 3, &props),
        header_payload(60, 1, 3, &props),
        vec![0, 60, 0, 0, 0, 0, 0],
        header_payload(60, 0, 3, &[0x10, 0x00]),
        header_payload(60, 0, 3, &[0x10, 0x00, 2, 9]),
    ] {
        assert_eq!(peek_content(&raw_frame(2, 1, &payload), 0, &[]), None);
    }
    // Malformed properties are taken only as the caller's checked ones (it saw them pass).
    let odd = [0x10, 0x00, 2, 9];
    let f = raw_frame(2, 1, &header_payload(60, 0, 3, &odd));
    assert!(peek_content(&f, 0, &odd).is_some());
    for t in [1u8, 8, 9, 0] {
        assert_eq!(peek_content(&raw_frame(t, 1, b"x"), 0, &[]), None);
    }
}

proptest! {
    /// Random (often malformed) content frames: an accepted one decodes identically, and the
    /// well-formed ones are always accepted.
    #[test]
    fn peek_content_agrees_with_decode_frame(
        frame_type in prop_oneof![Just(2u8), Just(3u8), 0u8..10],
        channel in any::<u16>(),
        class in prop_oneof![Just(60u16), any::<u16>()],
        weight in prop_oneof![Just(0u16), any::<u16>()],
        body_size in any::<u64>(),
        shape in any::<u8>(),
        random_props in proptest::collection::vec(any::<u8>(), 0..24),
        use_random in any::<bool>(),
        checked_shape in prop_oneof![Just(None), any::<u8>().prop_map(Some)],
        body in proptest::collection::vec(any::<u8>(), 0..40),
        extra in proptest::collection::vec(any::<u8>(), 0..3),
        cut in 0usize..4,
        frame_max in prop_oneof![Just(0u32), Just(4096), 0u32..60],
    ) {
        let props = if use_random { random_props } else { valid_props(shape) };
        let payload = if frame_type == 3 {
            body.clone()
        } else {
            header_payload(class, weight, body_size, &props)
        };
        let mut f = raw_frame(frame_type, channel, &payload);
        f.put_slice(&extra);
        let f = &f[..f.len() - cut.min(f.len())];
        let checked = checked_shape.map(valid_props).unwrap_or_default();
        let accepted = agrees(f, frame_max, &checked);
        let props_ok = RawProperties(bytes::Bytes::from(props.clone())).validate().is_ok();
        let expect = (cut == 0 || cut <= extra.len())
            && (frame_max == 0 || u32::try_from(payload.len()).unwrap() <= frame_max)
            && match frame_type {
                3 => true,
                2 => class == 60 && weight == 0 && props_ok,
                _ => false,
            };
        prop_assert_eq!(accepted, expect);
    }
}
