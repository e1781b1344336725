//! decode_frame never panics, and stream splitting never changes the result.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use bytes::BytesMut;
use charon_protocol::methods::basic;
use charon_protocol::*;
use common::*;
use proptest::prelude::*;

/// Decode until error / need-more; returns frames and whether it errored.
fn drain(buf: &mut BytesMut, frame_max: u32) -> (Vec<Frame>, Option<FrameError>) {
    let mut frames = Vec::new();
    loop {
        match decode_frame(buf, frame_max) {
            Ok(Some(f)) => frames.push(f),
            Ok(None) => return (frames, None),
            Err(e) => return (frames, Some(e)),
        }
    }
}

fn stream() -> impl Strategy<Value = Vec<u8>> {
    let one = prop_oneof![
        (any::<u16>(), short_str(40), short_str(40), any::<bool>()).prop_map(|(ch, ex, rk, m)| {
            let mut out = BytesMut::new();
            encode_method(
                &mut out,
                ch,
                &AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
                    exchange: ex.into(),
                    routing_key: rk.into(),
                    mandatory: m,
                    immediate: false,
                })),
            );
            out.to_vec()
        }),
        (any::<u16>(), any::<u64>(), any::<bool>()).prop_map(|(ch, t, m)| {
            let mut out = BytesMut::new();
            encode_basic_ack(&mut out, ch, t, m);
            out.to_vec()
        }),
        (
            any::<u16>(),
            properties(),
            proptest::collection::vec(any::<u8>(), 0..5000)
        )
            .prop_map(|(ch, p, body)| {
                let mut out = BytesMut::new();
                encode_content(&mut out, ch, 60, &RawProperties::encode(&p), &body, 0);
                out.to_vec()
            }),
        (any::<u16>(), short_str(30), any::<u64>()).prop_map(|(ch, ct, t)| {
            let mut out = BytesMut::new();
            encode_basic_deliver(&mut out, ch, &ct, t, false, "ex", "rk");
            out.to_vec()
        }),
        Just({
            let mut out = BytesMut::new();
            encode_heartbeat(&mut out);
            out.to_vec()
        }),
    ];
    proptest::collection::vec(one, 1..8).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048), frame_max in prop_oneof![Just(0u32), Just(4096u32), 0u32..100]) {
        let mut buf = BytesMut::from(&bytes[..]);
        let _ = drain(&mut buf, frame_max);
    }

    /// Valid-looking frame header + arbitrary payload: exercises every
    /// payload decoder, including amq-protocol for every method id.
    #[test]
    fn arbitrary_payloads_never_panic(ty in prop_oneof![Just(1u8), Just(2u8), Just(3u8), Just(8u8)], class_method in prop_oneof![
            (prop_oneof![Just(10u16), Just(20), Just(30), Just(40), Just(50), Just(60), Just(85), Just(90)], 0u16..130),
            (any::<u16>(), any::<u16>())],
            payload in proptest::collection::vec(any::<u8>(), 0..600)) {
        let mut p = class_method.0.to_be_bytes().to_vec();
        p.extend_from_slice(&class_method.1.to_be_bytes());
        p.extend_from_slice(&payload);
        let mut f = vec![ty, 0, 1];
        f.extend_from_slice(&u32::try_from(p.len()).unwrap().to_be_bytes());
        f.extend_from_slice(&p);
        f.push(0xCE);
        let mut buf = BytesMut::from(&f[..]);
        let r = decode_frame(&mut buf, 0);
        if let Err(e) = r {
            prop_assert!(matches!(e.reply_code(), 501 | 502 | 505 | 540));
        }
    }

    #[test]
    fn corrupted_streams_never_panic(s in stream(), flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)) {
        let mut s = s;
        for (i, b) in flips {
            let i = i.index(s.len());
            s[i] = b;
        }
        let mut buf = BytesMut::from(&s[..]);
        let _ = drain(&mut buf, 0);
    }

    #[test]
    fn splitting_does_not_change_frames(s in stream(), cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..10)) {
        let whole = decode_all(&s, 0);
        // byte by byte
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for b in &s {
            buf.extend_from_slice(&[*b]);
            let (f, e) = drain(&mut buf, 0);
            prop_assert!(e.is_none());
            got.extend(f);
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(&got, &whole);
        // arbitrary cut points
        let mut cuts: Vec<usize> = cuts.into_iter().map(|i| i.index(s.len() + 1)).collect();
        cuts.push(s.len());
        cuts.sort_unstable();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        let mut at = 0;
        for c in cuts {
            buf.extend_from_slice(&s[at..c]);
            at = c;
            let (f, e) = drain(&mut buf, 0);
            prop_assert!(e.is_none());
            got.extend(f);
        }
        prop_assert_eq!(&got, &whole);
    }
}
