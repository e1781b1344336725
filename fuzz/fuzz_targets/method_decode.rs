//! Fuzz method-frame payloads (class id, method id, arguments): the hand-written fast paths
//! (basic.publish, basic.ack, basic.qos) and amq-protocol's decoder. Whatever decodes must
//! re-encode and decode again to the same method.
#![no_main]

use bytes::BytesMut;
use charon_protocol::{decode_basic_ack, decode_basic_publish, decode_method, encode_method};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let args = data.get(4..).unwrap_or_default();
    let _ = decode_basic_publish(args);
    let _ = decode_basic_ack(args);
    match decode_method(data) {
        Ok(method) => {
            let mut out = BytesMut::new();
            encode_method(&mut out, 1, &method);
            // frame: type(1) channel(2) size(4) payload end(1)
            let payload = out.get(7..out.len().saturating_sub(1)).unwrap_or_default();
            let again = decode_method(payload);
            assert!(again.is_ok(), "re-encoded method does not decode: {method:?}");
            if let Ok(m2) = again {
                assert_eq!(
                    (method.get_amqp_class_id(), method.get_amqp_method_id()),
                    (m2.get_amqp_class_id(), m2.get_amqp_method_id())
                );
            }
        }
        Err(e) => {
            let _ = (e.reply_code(), e.class_method(), e.to_string());
        }
    }
});
