//! Round trips for every frame type and golden bytes for the fast encoders.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use bytes::BytesMut;
use charon_protocol::methods::{basic, channel, confirm, connection, exchange, queue, tx};
use charon_protocol::*;
use common::*;
use proptest::prelude::*;

fn method_roundtrip(channel_id: u16, m: AMQPClass) {
    let mut out = BytesMut::new();
    encode_method(&mut out, channel_id, &m);
    let frames = decode_all(&out, 0);
    assert_eq!(
        frames,
        vec![Frame::Method {
            channel: channel_id,
            method: Box::new(m)
        }]
    );
}

#[test]
fn method_frames_roundtrip() {
    let mut args = FieldTable::default();
    args.insert("x-message-ttl".into(), AMQPValue::LongInt(1000));
    args.insert("x-nested".into(), AMQPValue::FieldTable(args.clone()));
    let methods = vec![
        AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
            client_properties: args.clone(),
            mechanism: "PLAIN".into(),
            response: LongString::from(b"\0guest\0guest".to_vec()),
            locale: "en_US".into(),
        })),
        AMQPClass::Connection(connection::AMQPMethod::TuneOk(connection::TuneOk {
            channel_max: 2047,
            frame_max: 131072,
            heartbeat: 60,
        })),
        AMQPClass::Connection(connection::AMQPMethod::Open(connection::Open {
            virtual_host: "/".into(),
        })),
        AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
            reply_code: 200,
            reply_text: "bye".into(),
            class_id: 0,
            method_id: 0,
        })),
        AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
        AMQPClass::Exchange(exchange::AMQPMethod::Declare(exchange::Declare {
            exchange: "ex".into(),
            kind: "topic".into(),
            durable: true,
            arguments: args.clone(),
            ..Default::default()
        })),
        AMQPClass::Exchange(exchange::AMQPMethod::Bind(exchange::Bind {
            destination: "d".into(),
            source: "s".into(),
            routing_key: "k".into(),
            nowait: true,
            arguments: args.clone(),
        })),
        AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
            queue: "q".into(),
            exclusive: true,
            auto_delete: true,
            arguments: args.clone(),
            ..Default::default()
        })),
        AMQPClass::Queue(queue::AMQPMethod::Unbind(queue::Unbind {
            queue: "q".into(),
            exchange: "e".into(),
            routing_key: "k".into(),
            arguments: args.clone(),
        })),
        AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos {
            prefetch_count: 10,
            global: false,
        })),
        AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
            queue: "q".into(),
            consumer_tag: "ct".into(),
            no_ack: true,
            arguments: args,
            ..Default::default()
        })),
        AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
            exchange: "amq.direct".into(),
            routing_key: "rk".into(),
            mandatory: true,
            immediate: false,
        })),
        AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
            delivery_tag: u64::MAX,
            multiple: true,
        })),
        AMQPClass::Basic(basic::AMQPMethod::Nack(basic::Nack {
            delivery_tag: 7,
            multiple: false,
            requeue: true,
        })),
        AMQPClass::Basic(basic::AMQPMethod::Reject(basic::Reject {
            delivery_tag: 7,
            requeue: false,
        })),
        AMQPClass::Confirm(confirm::AMQPMethod::Select(confirm::Select {
            nowait: false,
        })),
        AMQPClass::Tx(tx::AMQPMethod::Commit(tx::Commit {})),
    ];
    for (i, m) in methods.into_iter().enumerate() {
        method_roundtrip(u16::try_from(i).unwrap(), m);
    }
}

#[test]
fn heartbeat_roundtrip() {
    let mut out = BytesMut::new();
    encode_heartbeat(&mut out);
    assert_eq!(&out[..], &[8, 0, 0, 0, 0, 0, 0, 0xCE]);
    assert_eq!(
        decode_all(&out, FRAME_MIN_SIZE),
        vec![Frame::Heartbeat { channel: 0 }]
    );
}

#[test]
fn empty_body_has_no_body_frames() {
    let mut out = BytesMut::new();
    encode_content(&mut out, 1, 60, &RawProperties::default(), b"", 4096);
    let frames = decode_all(&out, 4096);
    assert_eq!(frames.len(), 1);
    let Frame::Header { header, .. } = &frames[0] else {
        panic!("not a header")
    };
    assert_eq!(header.body_size, 0);
    assert_eq!(header.properties, RawProperties::empty());
}

#[test]
fn body_frames_are_zero_copy_slices() {
    let mut out = BytesMut::new();
    encode_content(
        &mut out,
        3,
        60,
        &RawProperties::empty(),
        &[7u8; 10_000],
        4096,
    );
    let start = out.as_ptr() as usize;
    let end = start + out.len();
    let mut buf = out;
    let mut n = 0;
    while let Some(f) = decode_frame(&mut buf, 4096).unwrap() {
        if let Frame::Body { payload, .. } = f {
            let p = payload.as_ptr() as usize;
            assert!(p >= start && p < end, "body payload was copied");
            assert!(payload.len() <= 4096 - 8);
            n += 1;
        }
    }
    assert_eq!(n, 3);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn content_roundtrip(channel in any::<u16>(), props in properties(), body in proptest::collection::vec(any::<u8>(), 0..20_000), frame_max in prop_oneof![Just(0u32), 4096u32..70_000, 9u32..64]) {
        let raw = RawProperties::encode(&props);
        let mut out = BytesMut::new();
        encode_content(&mut out, channel, 60, &raw, &body, frame_max);
        // Header frames are not split; decode with the limit only if it fits.
        let header_fits = frame_max == 0 || raw.0.len() + 12 <= frame_max as usize;
        let frames = decode_all(&out, if header_fits { frame_max } else { 0 });
        let Frame::Header { channel: c, header } = &frames[0] else { panic!("not a header") };
        prop_assert_eq!(*c, channel);
        prop_assert_eq!(header.class_id, 60);
        prop_assert_eq!(header.body_size, body.len() as u64);
        prop_assert_eq!(&header.properties, &raw);
        prop_assert_eq!(header.properties.decode().unwrap(), props);
        let mut got = Vec::new();
        for f in &frames[1..] {
            let Frame::Body { channel: c, payload } = f else { panic!("not a body") };
            prop_assert_eq!(*c, channel);
            prop_assert!(!payload.is_empty());
            if frame_max != 0 { prop_assert!(payload.len() + 8 <= frame_max.max(9) as usize); }
            got.extend_from_slice(payload);
        }
        prop_assert_eq!(got, body);
    }

    #[test]
    fn deliver_golden(ch in any::<u16>(), ct in short_str(255), tag in any::<u64>(), re in any::<bool>(), ex in short_str(255), rk in short_str(255)) {
        let mut fast = BytesMut::new();
        encode_basic_deliver(&mut fast, ch, &ct, tag, re, &ex, &rk);
        let mut slow = BytesMut::new();
        let m = AMQPClass::Basic(basic::AMQPMethod::Deliver(basic::Deliver { consumer_tag: ct.into(), delivery_tag: tag, redelivered: re, exchange: ex.into(), routing_key: rk.into() }));
        encode_method(&mut slow, ch, &m);
        prop_assert_eq!(&fast[..], &slow[..]);
        prop_assert_eq!(decode_all(&fast, 0), vec![Frame::Method { channel: ch, method: Box::new(m) }]);
    }

    #[test]
    fn get_ok_golden(ch in any::<u16>(), tag in any::<u64>(), re in any::<bool>(), ex in short_str(255), rk in short_str(255), count in any::<u32>()) {
        let mut fast = BytesMut::new();
        encode_basic_get_ok(&mut fast, ch, tag, re, &ex, &rk, count);
        let mut slow = BytesMut::new();
        encode_method(&mut slow, ch, &AMQPClass::Basic(basic::AMQPMethod::GetOk(basic::GetOk { delivery_tag: tag, redelivered: re, exchange: ex.into(), routing_key: rk.into(), message_count: count })));
        prop_assert_eq!(&fast[..], &slow[..]);
    }

    #[test]
    fn return_golden(ch in any::<u16>(), code in any::<u16>(), text in short_str(255), ex in short_str(255), rk in short_str(255)) {
        let mut fast = BytesMut::new();
        encode_basic_return(&mut fast, ch, code, &text, &ex, &rk);
        let mut slow = BytesMut::new();
        encode_method(&mut slow, ch, &AMQPClass::Basic(basic::AMQPMethod::Return(basic::Return { reply_code: code, reply_text: text.into(), exchange: ex.into(), routing_key: rk.into() })));
        prop_assert_eq!(&fast[..], &slow[..]);
    }

    #[test]
    fn ack_nack_golden(ch in any::<u16>(), tag in any::<u64>(), multiple in any::<bool>(), requeue in any::<bool>()) {
        let mut fast = BytesMut::new();
        encode_basic_ack(&mut fast, ch, tag, multiple);
        let mut slow = BytesMut::new();
        encode_method(&mut slow, ch, &AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack { delivery_tag: tag, multiple })));
        prop_assert_eq!(&fast[..], &slow[..]);
        let mut fast = BytesMut::new();
        encode_basic_nack(&mut fast, ch, tag, multiple, requeue);
        let mut slow = BytesMut::new();
        encode_method(&mut slow, ch, &AMQPClass::Basic(basic::AMQPMethod::Nack(basic::Nack { delivery_tag: tag, multiple, requeue })));
        prop_assert_eq!(&fast[..], &slow[..]);
    }

    /// The fast publish/ack/nack/reject decoders agree with amq-protocol's
    /// parse_class on arbitrary argument bytes (including garbage).
    #[test]
    fn fast_decode_matches_parse_class(method_id in prop_oneof![Just(40u16), Just(80u16), Just(90u16), Just(120u16)], args in proptest::collection::vec(any::<u8>(), 0..40), ex in short_str(60), rk in short_str(60), bits in any::<u8>(), tag in any::<u64>()) {
        let mut valid = Vec::new();
        if method_id == 40 {
            valid.extend_from_slice(&[0, 0, u8::try_from(ex.len()).unwrap()]);
            valid.extend_from_slice(ex.as_bytes());
            valid.push(u8::try_from(rk.len()).unwrap());
            valid.extend_from_slice(rk.as_bytes());
            valid.push(bits);
        } else {
            valid.extend_from_slice(&tag.to_be_bytes());
            valid.push(bits);
        }
        for a in [valid, args] {
            let mut payload = vec![0, 60, 0, u8::try_from(method_id).unwrap()];
            payload.extend_from_slice(&a);
            let ours = decode_method(&payload);
            match amq_protocol::protocol::parse_class(&payload[..]) {
                Ok(([], m)) => prop_assert_eq!(ours, Ok(m)),
                _ => prop_assert!(ours.is_err()),
            }
            if method_id == 40 {
                if let Some(p) = decode_basic_publish(&a) {
                    prop_assert_eq!(decode_method(&payload), Ok(AMQPClass::Basic(basic::AMQPMethod::Publish(p))));
                }
            } else if method_id == 80 {
                if let Some(p) = decode_basic_ack(&a) {
                    prop_assert_eq!(decode_method(&payload), Ok(AMQPClass::Basic(basic::AMQPMethod::Ack(p))));
                }
            } else if method_id == 90 {
                if let Some(p) = decode_basic_reject(&a) {
                    prop_assert_eq!(decode_method(&payload), Ok(AMQPClass::Basic(basic::AMQPMethod::Reject(p))));
                }
            } else if let Some(p) = decode_basic_nack(&a) {
                prop_assert_eq!(decode_method(&payload), Ok(AMQPClass::Basic(basic::AMQPMethod::Nack(p))));
            }
        }
    }
}
