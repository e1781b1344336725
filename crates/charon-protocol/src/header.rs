//! The 8-byte protocol header that opens every AMQP connection.

use crate::PROTOCOL_HEADER;

/// Result of looking at the first 8 bytes a client sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtocolHeaderCheck {
    /// Fewer than 8 bytes so far, and all of them match `AMQP 0 0 9 1`.
    Incomplete,
    /// Exactly `AMQP 0 0 9 1` (the 8 bytes; anything after is not looked at).
    Valid,
    /// Anything else. The server should answer with [`PROTOCOL_HEADER`] and
    /// close, as the spec (and RabbitMQ) does for unsupported versions.
    /// Reported as soon as one byte differs, without waiting for all 8.
    Invalid,
}

/// Check the protocol header at the front of `buf`.
///
/// Only `AMQP 0 0 9 1` is [`Valid`](ProtocolHeaderCheck::Valid). (RabbitMQ
/// also accepts the 0-8/0-9 headers `AMQP 1 1 8 0`, `1 1 9 1` and `1 1 0 9`;
/// Charon speaks only 0-9-1.) `buf` is not consumed.
pub fn check_protocol_header(buf: &[u8]) -> ProtocolHeaderCheck {
    let n = buf.len().min(PROTOCOL_HEADER.len());
    let (Some(seen), Some(want)) = (buf.get(..n), PROTOCOL_HEADER.get(..n)) else {
        return ProtocolHeaderCheck::Invalid;
    };
    if seen != want {
        ProtocolHeaderCheck::Invalid
    } else if n < PROTOCOL_HEADER.len() {
        ProtocolHeaderCheck::Incomplete
    } else {
        ProtocolHeaderCheck::Valid
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_states() {
        assert_eq!(check_protocol_header(b""), ProtocolHeaderCheck::Incomplete);
        assert_eq!(
            check_protocol_header(b"AMQ"),
            ProtocolHeaderCheck::Incomplete
        );
        assert_eq!(
            check_protocol_header(b"AMQP\0\0\x09"),
            ProtocolHeaderCheck::Incomplete
        );
        assert_eq!(
            check_protocol_header(b"AMQP\0\0\x09\x01"),
            ProtocolHeaderCheck::Valid
        );
        assert_eq!(
            check_protocol_header(b"AMQP\0\0\x09\x01xyz"),
            ProtocolHeaderCheck::Valid
        );
        assert_eq!(
            check_protocol_header(b"AMQP\x01\x01\x00\x09"),
            ProtocolHeaderCheck::Invalid
        );
        assert_eq!(
            check_protocol_header(b"GET / HTTP/1.1"),
            ProtocolHeaderCheck::Invalid
        );
        assert_eq!(check_protocol_header(b"X"), ProtocolHeaderCheck::Invalid);
    }
}
