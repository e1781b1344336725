//! `charon-protocol`: the AMQP 0-9-1 wire format for the Charon broker.
//!
//! This crate owns *bytes on the wire* and nothing else: no I/O, no async
//! runtime. It is organised in small modules, each with one job:
//!
//! * [`header`](crate::check_protocol_header) – the 8-byte protocol header
//!   a client sends first.
//! * `frame` – [`decode_frame`]: our own framer. Body payloads stay
//!   zero-copy [`bytes::Bytes`] slices of the read buffer, and every error is
//!   a [`FrameError`] carrying the AMQP reply code RabbitMQ 3.10.8 would use.
//! * `method` – turning a method-frame payload into an [`AMQPClass`]
//!   (hand-written fast path for `basic.publish`/`basic.ack`, `amq-protocol`
//!   for everything else, guarded against hostile nesting depth).
//! * `properties` – [`RawProperties`]: content-header properties kept as
//!   raw bytes (RabbitMQ's `properties_bin`), decoded lazily.
//! * `encode` – generic encoders ([`encode_method`], [`encode_content`], …).
//! * `fastpath` – allocation-free encoders for the hottest server→client
//!   methods (`basic.deliver`, `basic.ack`, …) and fast decoders.
//! * `table` – allocation-free structural walker for field tables.
//! * `wire` – bounds-checked big-endian reader used by all of the above.
//! * `error` – [`FrameError`].
//! * [`erlang`] – Erlang term formatting (`~p`/`~w` of binaries) for the
//!   reply texts RabbitMQ writes about bad frames.
//!
//! Method *types* come from `amq-protocol` and are re-exported as
//! [`methods`].

#![deny(missing_docs)]
#![deny(clippy::indexing_slicing)]

mod encode;
pub mod erlang;
mod error;
mod fastpath;
mod frame;
mod header;
mod hot;
mod hot_content;
mod method;
mod properties;
pub mod raw_table;
mod reply_code;
mod table;
mod wire;

pub use amq_protocol::protocol::basic::AMQPProperties as BasicProperties;
pub use amq_protocol::protocol::{self as methods, AMQPClass, AMQPHardError, AMQPSoftError};
pub use amq_protocol::types::{
    AMQPType, AMQPValue, Boolean, ByteArray, DecimalValue, Double, FieldArray, FieldTable, Float,
    LongInt, LongLongInt, LongLongUInt, LongString, LongUInt, ShortInt, ShortShortInt,
    ShortShortUInt, ShortString, ShortUInt, Timestamp, Void,
};

pub use encode::{encode_content, encode_heartbeat, encode_method};
pub use error::{FrameError, MAX_ARGS_IN_TEXT};
pub use fastpath::{
    DeliveryFrames, decode_basic_ack, decode_basic_nack, decode_basic_publish, decode_basic_reject,
    delivery_len, encode_basic_ack, encode_basic_deliver, encode_basic_get_ok, encode_basic_nack,
    encode_basic_return, encode_delivery, encode_delivery_apart,
};
pub use frame::{ContentHeader, Frame, decode_frame, peek_frame};
pub use header::{ProtocolHeaderCheck, check_protocol_header};
pub use hot::{HotFrame, HotMethod, peek_hot};
pub use hot_content::{HotContent, HotContentFrame, peek_content};
pub use method::decode_method;
pub use properties::RawProperties;
pub use table::{MAX_TABLE_NESTING, decode_amqplain};

/// The protocol header an AMQP 0-9-1 client sends first (`AMQP 0 0 9 1`).
pub const PROTOCOL_HEADER: [u8; 8] = *b"AMQP\x00\x00\x09\x01";

/// FRAME-MIN-SIZE as used by RabbitMQ 3.10.8 (`?FRAME_MIN_SIZE`): the
/// frame_max in force before `connection.tune-ok`, and the lowest frame_max
/// a client may negotiate. (The 0-9-1 XML says 4096; amq-protocol's
/// generated constant says 8192.)
pub const FRAME_MIN_SIZE: u32 = 4096;

/// The octet that terminates every frame.
pub const FRAME_END: u8 = 0xCE;

/// Bytes of framing around every payload: type(1) channel(2) size(4) end(1).
pub const FRAME_OVERHEAD: u32 = 8;

/// Frame type octet of a method frame.
pub const FRAME_METHOD: u8 = 1;
/// Frame type octet of a content-header frame.
pub const FRAME_HEADER: u8 = 2;
/// Frame type octet of a content-body frame.
pub const FRAME_BODY: u8 = 3;
/// Frame type octet of a heartbeat frame.
pub const FRAME_HEARTBEAT: u8 = 8;

/// Class id of `basic`, the only content-bearing class in 0-9-1.
pub const CLASS_BASIC: u16 = 60;

pub use reply_code::ReplyCode;
