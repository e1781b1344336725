//! [`FrameError`]: everything that can be wrong with bytes a peer sent, each
//! mapped to the AMQP reply code RabbitMQ 3.10.8 uses for it.
//!
//! What RabbitMQ 3.10.8 does (`rabbit_reader`, `rabbit_command_assembler`,
//! generated `rabbit_framing_amqp_0_9_1`, `rabbit_binary_parser`):
//!
//! * payload size > frame_max (with an 8-byte tolerance), bad end octet,
//!   unknown frame type, method payload shorter than 4 bytes, header payload
//!   shorter than 12 bytes, heartbeat with a payload: `frame_error` (501).
//! * method arguments that do not decode (truncated, trailing bytes,
//!   malformed UTF-8 in a short string of a non-content method):
//!   `frame_error` (501) "cannot decode …", carrying the method's ids. So a
//!   malformed method is 501, *not* 502 SYNTAX_ERROR.
//! * unknown class/method id: RabbitMQ's reader crashes on
//!   `exit({unknown_method_id, …})` and drops the TCP connection without a
//!   `connection.close`. Charon reports 540 NOT_IMPLEMENTED instead.
//! * malformed field tables inside method arguments: RabbitMQ crashes
//!   (function_clause in `rabbit_binary_parser:parse_table`) and drops the
//!   connection. Charon reports 502 SYNTAX_ERROR.
//! * content header with a non-zero weight: `unexpected_frame` (505). A
//!   header for a class other than the pending method's is a well-formed
//!   frame; the server refuses it (505) knowing what it waits for.
//!
//! The `Display` texts of the RabbitMQ-compatible variants are RabbitMQ's
//! reply texts (Erlang-formatted, see [`crate::erlang`]) without the
//! "FRAME_ERROR - " prefix.
//! * malformed properties: RabbitMQ crashes the channel when it decodes them
//!   (541 INTERNAL_ERROR). Charon reports 502 SYNTAX_ERROR.

use crate::erlang::{binary_w, frame_octets};

use crate::ReplyCode;

/// A frame (or a part of one) that cannot be accepted. All of these are
/// connection errors: the server should send `connection.close` with
/// [`reply_code`](Self::reply_code) and [`class_method`](Self::class_method)
/// and stop reading.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The frame header announces a payload larger than the negotiated
    /// frame_max allows. Detected from the 7-byte header alone, before any
    /// of the payload is buffered.
    #[error("type {frame_type}, all octets = <<>>: {{frame_too_large,{size},{}}}", frame_max.saturating_sub(crate::FRAME_OVERHEAD))]
    FrameTooLarge {
        /// Frame type octet.
        frame_type: u8,
        /// Channel number from the header.
        channel: u16,
        /// Announced payload size.
        size: u32,
        /// Negotiated frame_max (whole frame, including 8 bytes overhead).
        frame_max: u32,
    },
    /// The octet after the payload is not 0xCE.
    #[error("{}: {{invalid_frame_end_marker,{found}}}", frame_octets(*frame_type, *size as usize, head))]
    BadFrameEnd {
        /// Frame type octet.
        frame_type: u8,
        /// Channel number from the header.
        channel: u16,
        /// Announced payload size.
        size: u32,
        /// Offset of the bad octet from the start of the frame (7 + size).
        offset: usize,
        /// The octet found instead of 0xCE.
        found: u8,
        /// The payload's first octets ([`crate::erlang::snippet`]).
        head: Vec<u8>,
    },
    /// Frame type other than 1 (method), 2 (header), 3 (body), 8 (heartbeat).
    #[error("{}: unknown_frame", frame_octets(*frame_type, *size as usize, head))]
    UnknownFrameType {
        /// Frame type octet.
        frame_type: u8,
        /// Channel number from the header.
        channel: u16,
        /// Payload size.
        size: u32,
        /// The payload's first octets.
        head: Vec<u8>,
    },
    /// A heartbeat frame must have an empty payload.
    #[error("{}: unknown_frame", frame_octets(crate::FRAME_HEARTBEAT, *size as usize, head))]
    HeartbeatWithPayload {
        /// Channel number from the header.
        channel: u16,
        /// Payload size.
        size: u32,
        /// The payload's first octets.
        head: Vec<u8>,
    },
    /// Method payload shorter than class-id + method-id (4 bytes).
    #[error("{}: unknown_frame", frame_octets(crate::FRAME_METHOD, *size, head))]
    MethodFrameTooShort {
        /// Payload size.
        size: usize,
        /// The payload (under 4 octets).
        head: Vec<u8>,
    },
    /// Class/method id pair that AMQP 0-9-1 does not define.
    #[error("unknown method: class-id {class_id}, method-id {method_id}")]
    UnknownMethod {
        /// Class id.
        class_id: u16,
        /// Method id.
        method_id: u16,
    },
    /// Method arguments that do not decode: `cannot decode <<...>>` (the
    /// arguments with `~w`, as RabbitMQ's generated framing code writes them).
    #[error("cannot decode {}", binary_w(args))]
    MalformedMethod {
        /// Class id.
        class_id: u16,
        /// Method id.
        method_id: u16,
        /// Size of the arguments (payload after the 4 id bytes).
        size: usize,
        /// What was wrong (for logs).
        reason: &'static str,
        /// The arguments' first [`MAX_ARGS_IN_TEXT`] octets.
        args: Vec<u8>,
    },
    /// A field table inside method arguments is malformed or nested too deeply.
    #[error(
        "malformed field table in method {class_id}.{method_id} at payload offset {offset}: {reason}"
    )]
    MalformedTable {
        /// Class id.
        class_id: u16,
        /// Method id.
        method_id: u16,
        /// Offset of the problem from the start of the method payload.
        offset: usize,
        /// What was wrong.
        reason: &'static str,
    },
    /// Content-header payload shorter than class-id + weight + body-size (12 bytes).
    #[error("{}: unknown_frame", frame_octets(crate::FRAME_HEADER, *size, head))]
    HeaderFrameTooShort {
        /// Payload size.
        size: usize,
        /// The payload's first octets.
        head: Vec<u8>,
    },
    /// Content header with a non-zero weight (RabbitMQ's command assembler
    /// does not take it for a content header).
    #[error("expected content header for class 60, got non content header frame instead")]
    NonZeroWeight {
        /// Weight found.
        weight: u16,
    },
    /// basic.qos with a non-zero prefetch_size. The method decodes, but
    /// `amq-protocol` drops the field, so the framer refuses it here the way
    /// RabbitMQ's channel does: 540 NOT_IMPLEMENTED, a connection error.
    #[error("prefetch_size!=0 ({prefetch_size})")]
    PrefetchSize {
        /// The prefetch_size sent.
        prefetch_size: u32,
    },
    /// Content-header property flags / property list that do not decode.
    #[error("malformed content properties at offset {offset}: {reason}")]
    MalformedProperties {
        /// Offset of the problem from the start of the property flags.
        offset: usize,
        /// What was wrong.
        reason: &'static str,
    },
}

/// How many argument octets [`FrameError::MalformedMethod`] keeps: enough to
/// fill a reply text (255 octets) written with `~w`.
pub const MAX_ARGS_IN_TEXT: usize = 64;

impl FrameError {
    /// The AMQP reply code number for `connection.close` ([`Self::reply`]).
    pub fn reply_code(&self) -> u16 {
        self.reply().code()
    }

    /// The AMQP reply code for `connection.close`, as RabbitMQ 3.10.8 uses
    /// them (see the module docs for where Charon deviates and why).
    pub fn reply(&self) -> ReplyCode {
        match self {
            FrameError::FrameTooLarge { .. }
            | FrameError::BadFrameEnd { .. }
            | FrameError::UnknownFrameType { .. }
            | FrameError::HeartbeatWithPayload { .. }
            | FrameError::MethodFrameTooShort { .. }
            | FrameError::MalformedMethod { .. }
            | FrameError::HeaderFrameTooShort { .. } => ReplyCode::FrameError,
            FrameError::MalformedTable { .. } | FrameError::MalformedProperties { .. } => {
                ReplyCode::SyntaxError
            }
            FrameError::NonZeroWeight { .. } => ReplyCode::UnexpectedFrame,
            FrameError::UnknownMethod { .. } | FrameError::PrefetchSize { .. } => {
                ReplyCode::NotImplemented
            }
        }
    }

    /// The class and method ids involved, for `connection.close`; `(0, 0)`
    /// if none.
    pub fn class_method(&self) -> (u16, u16) {
        match *self {
            FrameError::UnknownMethod {
                class_id,
                method_id,
            }
            | FrameError::MalformedMethod {
                class_id,
                method_id,
                ..
            }
            | FrameError::MalformedTable {
                class_id,
                method_id,
                ..
            } => (class_id, method_id),
            FrameError::PrefetchSize { .. } => (60, 10),
            _ => (0, 0),
        }
    }

    /// The reply code as an [`AMQPHardError`](crate::AMQPHardError).
    pub fn hard_error(&self) -> crate::AMQPHardError {
        crate::AMQPHardError::from_id(self.reply_code()).unwrap_or(crate::AMQPHardError::FRAMEERROR)
    }
}
