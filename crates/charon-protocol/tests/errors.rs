//! Malformed input → the expected FrameError and reply code.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use bytes::BytesMut;
use charon_protocol::*;

fn frame(ty: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![ty];
    v.extend_from_slice(&channel.to_be_bytes());
    v.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
    v.extend_from_slice(payload);
    v.push(0xCE);
    v
}

fn decode(bytes: &[u8], frame_max: u32) -> Result<Option<Frame>, FrameError> {
    decode_frame(&mut BytesMut::from(bytes), frame_max)
}

fn err(bytes: &[u8], frame_max: u32) -> FrameError {
    decode(bytes, frame_max).unwrap_err()
}

#[test]
fn oversized_frame_is_501_from_header_alone() {
    // Only the 7-byte header is present: the size alone triggers the error.
    let hdr = [3u8, 0, 1, 0x7F, 0xFF, 0xFF, 0xFF];
    let e = err(&hdr, 131_072);
    assert!(matches!(
        e,
        FrameError::FrameTooLarge {
            size: 0x7FFF_FFFF,
            frame_max: 131_072,
            ..
        }
    ));
    assert_eq!(e.reply_code(), 501);
    assert_eq!(e.class_method(), (0, 0));
    // RabbitMQ's 8-byte fudge: payload == frame_max is tolerated, +1 is not.
    let ok = frame(3, 1, &[0u8; 4096]);
    assert!(decode(&ok, 4096).unwrap().is_some());
    let bad = frame(3, 1, &[0u8; 4097]);
    assert_eq!(err(&bad, 4096).reply_code(), 501);
    // 0 = unlimited
    assert!(decode(&bad, 0).unwrap().is_some());
}

#[test]
fn bad_end_byte_is_501() {
    let mut f = frame(8, 0, &[]);
    *f.last_mut().unwrap() = 0xCD;
    let e = err(&f, 0);
    assert_eq!(
        e,
        FrameError::BadFrameEnd {
            frame_type: 8,
            channel: 0,
            size: 0,
            offset: 7,
            found: 0xCD,
            head: vec![],
        }
    );
    assert_eq!(e.reply_code(), 501);
    assert_eq!(
        e.to_string(),
        "type 8, all octets = <<>>: {invalid_frame_end_marker,205}"
    );
}

#[test]
fn unknown_frame_type_is_501() {
    for ty in [0u8, 4, 5, 6, 7, 9, 0xCE, 0xFF] {
        let e = err(&frame(ty, 2, b"abc"), 0);
        assert!(matches!(e, FrameError::UnknownFrameType { .. }), "{e:?}");
        assert_eq!(e.reply_code(), 501);
        assert_eq!(
            e.to_string(),
            format!("type {ty}, all octets = <<\"abc\">>: unknown_frame")
        );
    }
}

#[test]
fn heartbeat_with_payload_is_501() {
    assert_eq!(err(&frame(8, 0, b"x"), 0).reply_code(), 501);
}

#[test]
fn truncated_method_is_501_with_ids() {
    // method payload shorter than the ids
    let e = err(&frame(1, 1, &[0, 60, 0]), 0);
    assert!(matches!(e, FrameError::MethodFrameTooShort { size: 3, .. }));
    assert_eq!(
        e.to_string(),
        "type 1, all octets = <<0,60,0>>: unknown_frame"
    );
    assert_eq!(e.reply_code(), 501);
    // basic.ack missing its bits octet
    let e = err(&frame(1, 1, &[0, 60, 0, 80, 0, 0, 0, 0, 0, 0, 0, 1]), 0);
    assert!(matches!(e, FrameError::MalformedMethod { .. }), "{e:?}");
    assert_eq!(e.reply_code(), 501);
    assert_eq!(e.class_method(), (60, 80));
    // basic.publish with a routing key running past the end
    let e = err(&frame(1, 1, &[0, 60, 0, 40, 0, 0, 0, 9, b'k']), 0);
    assert_eq!(e.reply_code(), 501);
    assert_eq!(e.class_method(), (60, 40));
    // queue.declare truncated
    let e = err(&frame(1, 1, &[0, 50, 0, 10, 0, 0, 1, b'q']), 0);
    assert_eq!((e.reply_code(), e.class_method()), (501, (50, 10)));
    assert_eq!(e.to_string(), "cannot decode <<0,0,1,113>>");
}

#[test]
fn trailing_method_bytes_are_501() {
    let e = err(
        &frame(1, 1, &[0, 60, 0, 80, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0xFF]),
        0,
    );
    assert_eq!((e.reply_code(), e.class_method()), (501, (60, 80)));
    let e = err(&frame(1, 0, &[0, 10, 0, 51, 0]), 0); // connection.close-ok + junk
    assert_eq!((e.reply_code(), e.class_method()), (501, (10, 51)));
}

#[test]
fn malformed_utf8_short_string_is_501() {
    // queue.delete with a non-UTF-8 queue name (RabbitMQ: "Malformed UTF-8 in shortstr", 501)
    let e = err(&frame(1, 1, &[0, 50, 0, 40, 0, 0, 2, 0xC3, 0x28, 0]), 0);
    assert_eq!((e.reply_code(), e.class_method()), (501, (50, 40)));
}

#[test]
fn unknown_class_or_method_is_540() {
    let e = err(&frame(1, 1, &[0, 99, 0, 10]), 0);
    assert_eq!(
        e,
        FrameError::UnknownMethod {
            class_id: 99,
            method_id: 10
        }
    );
    assert_eq!((e.reply_code(), e.class_method()), (540, (99, 10)));
    let e = err(&frame(1, 1, &[0, 60, 0, 41, 1, 2, 3]), 0);
    assert_eq!((e.reply_code(), e.class_method()), (540, (60, 41)));
}

#[test]
fn malformed_argument_table_is_502() {
    // queue.declare "q", no bits, table of length 3 with an unknown type 'Z'
    let p = [0, 50, 0, 10, 0, 0, 1, b'q', 0, 0, 0, 0, 3, 1, b'a', b'Z'];
    let e = err(&frame(1, 1, &p), 0);
    assert!(
        matches!(e, FrameError::MalformedTable { offset: 15, .. }),
        "{e:?}"
    );
    assert_eq!((e.reply_code(), e.class_method()), (502, (50, 10)));
}

fn nested_table(depth: usize) -> Vec<u8> {
    let mut inner: Vec<u8> = Vec::new();
    for _ in 1..depth {
        let mut t = vec![1u8, b'k', b'F'];
        t.extend_from_slice(&u32::try_from(inner.len()).unwrap().to_be_bytes());
        t.extend_from_slice(&inner);
        inner = t;
    }
    let mut out = u32::try_from(inner.len()).unwrap().to_be_bytes().to_vec();
    out.extend_from_slice(&inner);
    out
}

#[test]
fn deeply_nested_tables_are_rejected_not_stack_overflow() {
    let mut p = vec![0, 10, 0, 11]; // connection.start-ok
    p.extend_from_slice(&nested_table(20_000));
    p.extend_from_slice(&[
        5, b'P', b'L', b'A', b'I', b'N', 0, 0, 0, 0, 5, b'e', b'n', b'_', b'U', b'S',
    ]);
    let e = err(&frame(1, 0, &p), 0);
    assert!(matches!(e, FrameError::MalformedTable { .. }), "{e:?}");
    assert_eq!(e.reply_code(), 502);
}

#[test]
fn max_nesting_decodes_on_a_small_stack() {
    // The deepest table we accept must decode through amq-protocol on a
    // 512 KiB stack (tokio workers have 2 MiB), even in debug builds.
    let handle = std::thread::Builder::new()
        .stack_size(512 * 1024)
        .spawn(|| {
            let mut p = vec![0, 10, 0, 11];
            p.extend_from_slice(&nested_table(MAX_TABLE_NESTING));
            p.extend_from_slice(&[
                5, b'P', b'L', b'A', b'I', b'N', 0, 0, 0, 0, 5, b'e', b'n', b'_', b'U', b'S',
            ]);
            decode(&frame(1, 0, &p), 0).map(|f| f.is_some())
        })
        .unwrap();
    assert_eq!(handle.join().unwrap(), Ok(true));
}

#[test]
fn content_header_errors() {
    // too short: 501
    let e = err(&frame(2, 1, &[0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0]), 0);
    assert_eq!(e.reply_code(), 501);
    // class other than basic: a well-formed frame; the server refuses it
    let f = decode(
        &frame(2, 1, &[0, 50, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0]),
        0,
    )
    .unwrap()
    .unwrap();
    let Frame::Header { header, .. } = f else {
        panic!("{f:?}")
    };
    assert_eq!(header.class_id, 50);
    assert_eq!(
        header.payload(),
        [0, 50, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0]
    );
    // weight != 0: 505
    let e = err(
        &frame(2, 1, &[0, 60, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0]),
        0,
    );
    assert_eq!(e.reply_code(), 505);
    // properties: delivery-mode flag set but value missing → 502
    let e = err(
        &frame(2, 1, &[0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x10, 0]),
        0,
    );
    assert!(matches!(e, FrameError::MalformedProperties { .. }), "{e:?}");
    assert_eq!(e.reply_code(), 502);
    // properties: trailing junk → 502
    let e = err(
        &frame(2, 1, &[0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 9]),
        0,
    );
    assert_eq!(e.reply_code(), 502);
}

#[test]
fn incomplete_input_leaves_buffer_untouched() {
    let f = frame(3, 5, b"hello");
    for n in 0..f.len() {
        let mut buf = BytesMut::from(&f[..n]);
        assert_eq!(decode_frame(&mut buf, 0), Ok(None));
        assert_eq!(buf.len(), n);
    }
}

#[test]
fn frame_too_large_text_is_rabbitmqs() {
    let e = err(&[3u8, 0, 1, 0, 0, 0x27, 0x10], 4096);
    assert_eq!(
        e.to_string(),
        "type 3, all octets = <<>>: {frame_too_large,10000,4088}"
    );
}

#[test]
fn peek_frame_sees_complete_frames_only() {
    let f = frame(1, 7, &[0, 20, 0, 10, 1, 48]);
    assert_eq!(peek_frame(&f), Some((1, 7, &[0u8, 20, 0, 10, 1, 48][..])));
    assert_eq!(peek_frame(&f[..f.len() - 1]), None);
}

#[test]
fn basic_qos_prefetch_size_is_540() {
    // basic.qos prefetch_size=1 prefetch_count=0 global=false
    let e = err(&frame(1, 1, &[0, 60, 0, 10, 0, 0, 0, 1, 0, 0, 0]), 0);
    assert_eq!(e, FrameError::PrefetchSize { prefetch_size: 1 });
    assert_eq!((e.reply_code(), e.class_method()), (540, (60, 10)));
    assert_eq!(e.to_string(), "prefetch_size!=0 (1)");
    // prefetch_size=0 decodes
    assert!(decode(&frame(1, 1, &[0, 60, 0, 10, 0, 0, 0, 0, 0, 5, 0]), 0).is_ok());
}
