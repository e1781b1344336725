//! Fuzz field tables: the bounds walker (nesting cap, lengths) and amq-protocol's parser, as
//! used for AMQPLAIN responses (a table without its length prefix).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(table) = charon_protocol::decode_amqplain(data) {
        // Whatever decodes has a finite, walkable shape.
        let _ = format!("{table:?}").len();
    }
});
