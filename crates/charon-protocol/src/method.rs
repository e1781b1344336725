//! Method-frame payload → [`AMQPClass`].
//!
//! `basic.publish`, `basic.ack`, `basic.nack` and `basic.reject` go through the hand-written fast path in
//! `fastpath`; everything else (and anything the fast path declines) goes
//! through `amq_protocol::protocol::parse_class`. Before that, ids are
//! checked against the 0-9-1 method list (unknown → 540) and any field
//! table in the arguments is walked with a nesting limit (see `table`).

use amq_protocol::protocol::{basic, parse_class};

use crate::AMQPClass;
use crate::error::{FrameError, MAX_ARGS_IN_TEXT};
use crate::fastpath::{
    decode_basic_ack, decode_basic_nack, decode_basic_publish, decode_basic_reject,
};
use crate::table::skip_table;
use crate::wire::{Reader, be_u16_at};

/// Is `(class_id, method_id)` a method AMQP 0-9-1 (as amq-protocol and
/// RabbitMQ know it) defines?
pub(crate) fn is_known_method(class_id: u16, method_id: u16) -> bool {
    match class_id {
        10 => matches!(
            method_id,
            10 | 11 | 20 | 21 | 30 | 31 | 40 | 41 | 50 | 51 | 60 | 61 | 70 | 71
        ),
        20 => matches!(method_id, 10 | 11 | 20 | 21 | 40 | 41),
        30 => matches!(method_id, 10 | 11),
        40 => matches!(method_id, 10 | 11 | 20 | 21 | 30 | 31 | 40 | 51),
        50 => matches!(method_id, 10 | 11 | 20 | 21 | 30 | 31 | 40 | 41 | 50 | 51),
        60 => matches!(
            method_id,
            10 | 11
                | 20
                | 21
                | 30
                | 31
                | 40
                | 50
                | 60
                | 70
                | 71
                | 72
                | 80
                | 90
                | 100
                | 110
                | 111
                | 120
        ),
        85 => matches!(method_id, 10 | 11),
        90 => matches!(method_id, 10 | 11 | 20 | 21 | 30 | 31),
        _ => false,
    }
}

/// Argument fields that precede the (single) field table of a method.
#[derive(Clone, Copy)]
enum Pre {
    Octet,
    Short,
    ShortStr,
    Bits,
}

/// Fields before the field table, for every method that has one.
fn table_prefix(class_id: u16, method_id: u16) -> Option<&'static [Pre]> {
    use Pre::*;
    Some(match (class_id, method_id) {
        (10, 10) => &[Octet, Octet],                    // connection.start
        (10, 11) => &[],                                // connection.start-ok
        (40, 10) => &[Short, ShortStr, ShortStr, Bits], // exchange.declare
        (40, 30) | (40, 40) => &[Short, ShortStr, ShortStr, ShortStr, Bits], // exchange.(un)bind
        (50, 10) => &[Short, ShortStr, Bits],           // queue.declare
        (50, 20) => &[Short, ShortStr, ShortStr, ShortStr, Bits], // queue.bind
        (50, 50) => &[Short, ShortStr, ShortStr, ShortStr], // queue.unbind
        (60, 20) => &[Short, ShortStr, ShortStr, Bits], // basic.consume
        _ => return None,
    })
}

/// Walk the field table of `args` (if the method has one) with the nesting
/// limit. A prefix that does not fit is left for `parse_class` to report.
fn check_table(class_id: u16, method_id: u16, args: &[u8]) -> Result<(), FrameError> {
    let Some(prefix) = table_prefix(class_id, method_id) else {
        return Ok(());
    };
    let mut r = Reader::new(args);
    for p in prefix {
        let ok = match p {
            Pre::Octet | Pre::Bits => r.skip(1),
            Pre::Short => r.skip(2),
            Pre::ShortStr => r.short_str().map(|_| ()),
        };
        if ok.is_none() {
            return Ok(());
        }
    }
    skip_table(&mut r, 4, 0).map_err(|e| FrameError::MalformedTable {
        class_id,
        method_id,
        offset: e.offset,
        reason: e.reason,
    })
}

/// Decode a complete method-frame payload (class-id, method-id, arguments).
///
/// Errors: payload under 4 bytes → 501; unknown ids → 540; arguments that
/// do not decode exactly (truncated, trailing bytes, invalid UTF-8) → 501;
/// malformed or too deeply nested field table → 502.
pub fn decode_method(payload: &[u8]) -> Result<AMQPClass, FrameError> {
    let (Some(class_id), Some(method_id)) = (be_u16_at(payload, 0), be_u16_at(payload, 2)) else {
        return Err(FrameError::MethodFrameTooShort {
            size: payload.len(),
            head: payload.to_vec(),
        });
    };
    let args = payload.get(4..).unwrap_or_default();
    match (class_id, method_id) {
        (60, 40) => {
            if let Some(p) = decode_basic_publish(args) {
                return Ok(AMQPClass::Basic(basic::AMQPMethod::Publish(p)));
            }
        }
        (60, 80) => {
            if let Some(a) = decode_basic_ack(args) {
                return Ok(AMQPClass::Basic(basic::AMQPMethod::Ack(a)));
            }
        }
        (60, 120) => {
            if let Some(n) = decode_basic_nack(args) {
                return Ok(AMQPClass::Basic(basic::AMQPMethod::Nack(n)));
            }
        }
        (60, 90) => {
            if let Some(r) = decode_basic_reject(args) {
                return Ok(AMQPClass::Basic(basic::AMQPMethod::Reject(r)));
            }
        }
        (60, 10) => {
            // basic.qos: amq-protocol does not keep prefetch_size.
            if let Some(prefetch_size) = crate::wire::be_u32_at(args, 0)
                && prefetch_size != 0
            {
                return Err(FrameError::PrefetchSize { prefetch_size });
            }
        }
        _ => {}
    }
    if !is_known_method(class_id, method_id) {
        return Err(FrameError::UnknownMethod {
            class_id,
            method_id,
        });
    }
    check_table(class_id, method_id, args)?;
    let malformed = |reason| FrameError::MalformedMethod {
        class_id,
        method_id,
        size: args.len(),
        reason,
        args: args.iter().take(MAX_ARGS_IN_TEXT).copied().collect(),
    };
    match parse_class(payload) {
        Ok(([], class)) => Ok(class),
        Ok(_) => Err(malformed("trailing bytes after the method arguments")),
        Err(e) if e.is_incomplete() => Err(malformed("method arguments truncated")),
        Err(_) => Err(malformed(
            "method arguments do not decode (malformed UTF-8 in a short string or bad field value)",
        )),
    }
}
