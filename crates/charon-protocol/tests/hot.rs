//! `peek_hot` against `decode_frame`: whenever the in-place reader accepts a frame whose names
//! are UTF-8 (`to_class` is `Some`), the general framer decodes the same bytes to the same
//! method and consumes the same octets, and when they are not, the framer refuses the frame;
//! well-formed hot frames are always accepted; anything else is left to the framer.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use bytes::{BufMut, BytesMut};
use charon_protocol::methods::basic;
use charon_protocol::*;
use proptest::prelude::*;

/// A method frame with `class`/`method` ids and raw `args`.
fn frame(channel: u16, class: u16, method: u16, args: &[u8]) -> BytesMut {
    let mut out = BytesMut::new();
    out.put_u8(1);
    out.put_u16(channel);
    out.put_u32(u32::try_from(args.len() + 4).unwrap());
    out.put_u16(class);
    out.put_u16(method);
    out.put_slice(args);
    out.put_u8(0xCE);
    out
}

/// Whatever `peek_hot` says about `bytes` agrees with `decode_frame`.
fn agrees(bytes: &[u8], frame_max: u32) -> bool {
    let hot = peek_hot(bytes, frame_max);
    let mut buf = BytesMut::from(bytes);
    let decoded = decode_frame(&mut buf, frame_max);
    let Some(h) = hot else {
        return false;
    };
    let consumed = bytes.len() - buf.len();
    match (decoded, h.method.to_class()) {
        (Ok(Some(Frame::Method { channel, method })), Some(class)) => {
            assert_eq!(channel, h.channel);
            assert_eq!(*method, class);
            assert_eq!(consumed, h.len);
        }
        // Names that are not UTF-8: the framer's to refuse.
        (Err(_), None) => {}
        (other, class) => {
            panic!("peek_hot accepted {h:?} ({class:?}), decode_frame gave {other:?}")
        }
    }
    true
}

#[test]
fn well_formed_hot_methods_are_read_in_place() {
    let methods = [
        AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
            exchange: "amq.direct".into(),
            routing_key: "kéy".into(),
            mandatory: true,
            immediate: false,
        })),
        AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
            delivery_tag: 7,
            multiple: true,
        })),
        AMQPClass::Basic(basic::AMQPMethod::Nack(basic::Nack {
            delivery_tag: u64::MAX,
            multiple: false,
            requeue: true,
        })),
        AMQPClass::Basic(basic::AMQPMethod::Reject(basic::Reject {
            delivery_tag: 1,
            requeue: false,
        })),
    ];
    for m in methods {
        let mut out = BytesMut::new();
        encode_method(&mut out, 3, &m);
        let n = out.len();
        // Followed by more bytes: only the first frame counts.
        out.put_slice(&[8, 0, 0]);
        assert!(agrees(&out, 131_072), "{m:?}");
        assert_eq!(peek_hot(&out, 0).unwrap().len, n);
    }
}

#[test]
fn anything_unusual_is_left_to_the_framer() {
    let publish = frame(1, 60, 40, &[0, 0, 0, 1, b'k', 0]);
    assert!(peek_hot(&publish, 0).is_some());
    // Incomplete, bad end octet, over frame_max.
    assert_eq!(peek_hot(&publish[..publish.len() - 1], 0), None);
    let mut bad_end = publish.clone();
    *bad_end.last_mut().unwrap() = 0;
    assert_eq!(peek_hot(&bad_end, 0), None);
    assert_eq!(peek_hot(&publish, 4), None);
    // Trailing bytes, truncated arguments, non-UTF-8 names, other methods and frame types.
    assert_eq!(
        peek_hot(&frame(1, 60, 40, &[0, 0, 0, 1, b'k', 0, 9]), 0),
        None
    );
    assert_eq!(peek_hot(&frame(1, 60, 40, &[0, 0, 0, 5, b'k', 0]), 0), None);
    // A name that is not UTF-8: read, but `to_class` says it is the framer's (which refuses it).
    let odd = frame(1, 60, 40, &[0, 0, 0, 1, 0xff, 0]);
    assert_eq!(peek_hot(&odd, 0).unwrap().method.to_class(), None);
    assert!(decode_frame(&mut BytesMut::from(&odd[..]), 0).is_err());
    assert_eq!(peek_hot(&frame(1, 60, 80, &[0; 8]), 0), None);
    assert_eq!(peek_hot(&frame(1, 60, 10, &[0; 7]), 0), None);
    assert_eq!(peek_hot(&frame(1, 50, 40, &[0; 9]), 0), None);
    let mut header = publish.clone();
    header[0] = 2;
    assert_eq!(peek_hot(&header, 0), None);
}

/// basic.publish arguments, read by hand: ticket, two short strings, bits, nothing more.
fn parses_as_publish(args: &[u8]) -> bool {
    let mut rest = args.get(2..).unwrap_or_default();
    for _ in 0..2 {
        let Some((&len, tail)) = rest.split_first() else {
            return false;
        };
        let len = usize::from(len);
        if tail.len() < len {
            return false;
        }
        rest = &tail[len..];
    }
    args.len() >= 2 && rest.len() == 1
}

fn hot_ids() -> impl Strategy<Value = (u16, u16)> {
    prop_oneof![
        Just((60, 40)),
        Just((60, 80)),
        Just((60, 90)),
        Just((60, 120)),
        (0u16..100, 0u16..130),
    ]
}

fn name() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..8),
        "[a-zé.]{0,12}".prop_map(String::into_bytes),
    ]
}

proptest! {
    /// Random (often malformed) method frames: an accepted one decodes identically.
    #[test]
    fn peek_hot_agrees_with_decode_frame(
        channel in any::<u16>(),
        (class, method) in hot_ids(),
        ex in name(),
        key in name(),
        bits in any::<u8>(),
        tag in any::<u64>(),
        extra in proptest::collection::vec(any::<u8>(), 0..3),
        publish_shape in any::<bool>(),
        cut in 0usize..4,
        frame_max in prop_oneof![Just(0u32), Just(4096), 0u32..40],
    ) {
        let mut args = Vec::new();
        if publish_shape {
            args.extend_from_slice(&[0, 0]);
            args.push(u8::try_from(ex.len()).unwrap());
            args.extend_from_slice(&ex);
            args.push(u8::try_from(key.len()).unwrap());
            args.extend_from_slice(&key);
            args.push(bits);
        } else {
            args.extend_from_slice(&tag.to_be_bytes());
            args.push(bits);
        }
        args.extend_from_slice(&extra);
        let f = frame(channel, class, method, &args);
        let f = &f[..f.len() - cut.min(f.len())];
        let accepted = agrees(f, frame_max);
        // Complete, well-formed hot methods within frame_max are always taken.
        let expect = cut == 0
            && class == 60
            && (frame_max == 0 || u32::try_from(args.len() + 4).unwrap() <= frame_max)
            && match method {
                40 => parses_as_publish(&args),
                80 | 90 | 120 => args.len() == 9,
                _ => false,
            };
        prop_assert_eq!(accepted, expect);
    }
}
