//! The one place where errors of every layer become AMQP replies.
//!
//! [`AmqpError`] is what a connection sends: a reply code, RabbitMQ's reply text, and the
//! method that failed. Protocol errors ([`FrameError`]), domain errors ([`CoreError`]) and
//! permission refusals ([`AccessRefused`], 403) are mapped here and nowhere else; whether an
//! error closes the channel or the whole connection follows from its code, as in the AMQP 0-9-1
//! spec (soft errors close the channel).

use charon_core::{CoreError, ErrorKind};
use charon_protocol::{FrameError, erlang};

use crate::access::AccessRefused;

/// AMQP 0-9-1 reply codes used by the broker.
pub mod code {
    /// Normal close.
    pub const REPLY_SUCCESS: u16 = 200;
    /// Mandatory message could not be routed.
    pub const NO_ROUTE: u16 = 312;
    /// Broker is shutting down or an operator closed the connection.
    pub const CONNECTION_FORCED: u16 = 320;
    /// Permission or reserved-name violation.
    pub const ACCESS_REFUSED: u16 = 403;
    /// Missing exchange or queue.
    pub const NOT_FOUND: u16 = 404;
    /// Exclusive resource held by another connection.
    pub const RESOURCE_LOCKED: u16 = 405;
    /// Request incompatible with current state.
    pub const PRECONDITION_FAILED: u16 = 406;
    /// Malformed frame.
    pub const FRAME_ERROR: u16 = 501;
    /// Malformed method arguments.
    pub const SYNTAX_ERROR: u16 = 502;
    /// Invalid command sequence or argument.
    pub const COMMAND_INVALID: u16 = 503;
    /// Bad channel use.
    pub const CHANNEL_ERROR: u16 = 504;
    /// Frame not expected in this state.
    pub const UNEXPECTED_FRAME: u16 = 505;
    /// Server resource exhausted.
    pub const RESOURCE_ERROR: u16 = 506;
    /// Operation not allowed (vhost access, consumer tag reuse, ...).
    pub const NOT_ALLOWED: u16 = 530;
    /// Feature not implemented.
    pub const NOT_IMPLEMENTED: u16 = 540;
    /// Internal error.
    pub const INTERNAL_ERROR: u16 = 541;
}

/// The name RabbitMQ puts in front of a reply text ("NOT_FOUND - ...").
pub fn code_name(code: u16) -> &'static str {
    match code {
        200 => "REPLY_SUCCESS",
        312 => "NO_ROUTE",
        320 => "CONNECTION_FORCED",
        403 => "ACCESS_REFUSED",
        404 => "NOT_FOUND",
        405 => "RESOURCE_LOCKED",
        406 => "PRECONDITION_FAILED",
        501 => "FRAME_ERROR",
        502 => "SYNTAX_ERROR",
        503 => "COMMAND_INVALID",
        504 => "CHANNEL_ERROR",
        505 => "UNEXPECTED_FRAME",
        506 => "RESOURCE_ERROR",
        530 => "NOT_ALLOWED",
        540 => "NOT_IMPLEMENTED",
        _ => "INTERNAL_ERROR",
    }
}

/// An error to report to the client with channel.close or connection.close.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text}")]
pub struct AmqpError {
    /// Reply code.
    pub code: u16,
    /// Full reply text, "CODE_NAME - detail", as RabbitMQ writes it.
    pub text: String,
    /// Class of the method that failed (0 if none).
    pub class_id: u16,
    /// Method that failed (0 if none).
    pub method_id: u16,
}

impl AmqpError {
    /// An error with `code` and a detail text; the code name is prefixed.
    pub fn new(code: u16, detail: impl AsRef<str>) -> Self {
        Self {
            code,
            text: fit_short_string(format!("{} - {}", code_name(code), detail.as_ref())),
            class_id: 0,
            method_id: 0,
        }
    }

    /// Attaches the failing method's ids, keeping ones already set.
    pub fn on(mut self, class_id: u16, method_id: u16) -> Self {
        if self.class_id == 0 && self.method_id == 0 {
            self.class_id = class_id;
            self.method_id = method_id;
        }
        self
    }

    /// Whether this error closes the whole connection rather than one channel.
    pub fn is_connection_error(&self) -> bool {
        !matches!(self.code, 311..=313 | 403..=406)
    }

    /// 406 PRECONDITION_FAILED.
    pub fn precondition(detail: impl AsRef<str>) -> Self {
        Self::new(code::PRECONDITION_FAILED, detail)
    }

    /// 505 UNEXPECTED_FRAME.
    pub fn unexpected_frame(detail: impl AsRef<str>) -> Self {
        Self::new(code::UNEXPECTED_FRAME, detail)
    }

    /// 505 UNEXPECTED_FRAME for a frame refused as a whole, quoting its octets as RabbitMQ's
    /// reader does: "type 2, all octets = <<...>>".
    pub fn unexpected_frame_octets(frame_type: u8, payload: &[u8]) -> Self {
        Self::unexpected_frame(erlang::frame_octets(
            frame_type,
            payload.len(),
            &erlang::snippet(payload),
        ))
    }

    /// 504 CHANNEL_ERROR.
    pub fn channel_error(detail: impl AsRef<str>) -> Self {
        Self::new(code::CHANNEL_ERROR, detail)
    }

    /// 540 NOT_IMPLEMENTED.
    pub fn not_implemented(detail: impl AsRef<str>) -> Self {
        Self::new(code::NOT_IMPLEMENTED, detail)
    }

    /// 530 NOT_ALLOWED.
    pub fn not_allowed(detail: impl AsRef<str>) -> Self {
        Self::new(code::NOT_ALLOWED, detail)
    }

    /// 403 ACCESS_REFUSED.
    pub fn access_refused(detail: impl AsRef<str>) -> Self {
        Self::new(code::ACCESS_REFUSED, detail)
    }

    /// 404 NOT_FOUND.
    pub fn not_found(detail: impl AsRef<str>) -> Self {
        Self::new(code::NOT_FOUND, detail)
    }

    /// 541 INTERNAL_ERROR.
    pub fn internal(detail: impl AsRef<str>) -> Self {
        Self::new(code::INTERNAL_ERROR, detail)
    }
}

/// Reply code of a domain error kind.
fn kind_code(kind: ErrorKind) -> u16 {
    match kind {
        ErrorKind::NotFound => code::NOT_FOUND,
        ErrorKind::AccessRefused => code::ACCESS_REFUSED,
        ErrorKind::ResourceLocked => code::RESOURCE_LOCKED,
        ErrorKind::PreconditionFailed => code::PRECONDITION_FAILED,
        ErrorKind::NotAllowed => code::NOT_ALLOWED,
        ErrorKind::CommandInvalid => code::COMMAND_INVALID,
        ErrorKind::NotImplemented => code::NOT_IMPLEMENTED,
        ErrorKind::InternalError => code::INTERNAL_ERROR,
    }
}

/// Prefixes the code name unless the text already carries it.
fn with_code_name(code: u16, text: String) -> String {
    let name = code_name(code);
    if text.starts_with(name) {
        fit_short_string(text)
    } else {
        fit_short_string(format!("{name} - {text}"))
    }
}

/// A reply text is a short string (at most 255 octets). Like RabbitMQ
/// (`rabbit_binary_generator`), a longer one is cut to 252 octets + "...".
fn fit_short_string(mut text: String) -> String {
    if text.len() <= 255 {
        return text;
    }
    let mut cut = 252;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str("...");
    text
}

impl From<CoreError> for AmqpError {
    fn from(err: CoreError) -> Self {
        let code = kind_code(err.kind());
        Self {
            code,
            text: with_code_name(code, err.to_string()),
            class_id: 0,
            method_id: 0,
        }
    }
}

impl From<AccessRefused> for AmqpError {
    fn from(err: AccessRefused) -> Self {
        Self::access_refused(err.to_string())
    }
}

impl From<FrameError> for AmqpError {
    fn from(err: FrameError) -> Self {
        let code = err.reply_code();
        let (class_id, method_id) = err.class_method();
        Self {
            code,
            text: with_code_name(code, err.to_string()),
            class_id,
            method_id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_texts_are_cut_like_rabbitmq() {
        let e = AmqpError::precondition("x".repeat(300));
        assert_eq!(e.text.len(), 255);
        assert!(e.text.ends_with("..."));
        let short = AmqpError::precondition("short");
        assert_eq!(short.text, "PRECONDITION_FAILED - short");
    }
}
