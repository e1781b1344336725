//! Fuzz decode_frame: the first 4 input bytes pick frame_max and a split
//! point; the rest is fed as a stream, in two pieces, decoding repeatedly.
#![no_main]

use bytes::BytesMut;
use charon_protocol::{Frame, decode_frame};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (frame_max, split, stream) = match data {
        [a, b, c, d, rest @ ..] => {
            let fm = match a % 4 {
                0 => 0,
                1 => 4096,
                2 => 131_072,
                _ => u32::from(*b),
            };
            (fm, usize::from(u16::from_be_bytes([*c, *d])), rest)
        }
        _ => (0, 0, data),
    };
    let split = split.min(stream.len());
    let (first, second) = stream.split_at(split);
    let mut buf = BytesMut::new();
    for piece in [first, second] {
        buf.extend_from_slice(piece);
        loop {
            match decode_frame(&mut buf, frame_max) {
                Ok(Some(Frame::Header { header, .. })) => {
                    let _ = header.properties.decode();
                    let _ = header.properties.delivery_mode();
                    let _ = header.properties.expiration();
                }
                Ok(Some(e)) => {
                    if let Frame::Method { method, .. } = e {
                        // Whatever decodes must re-encode without panicking.
                        let mut out = BytesMut::new();
                        charon_protocol::encode_method(&mut out, 1, &method);
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    let _ = (e.reply_code(), e.class_method(), e.to_string());
                    return;
                }
            }
        }
    }
});
