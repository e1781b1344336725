//! The one place where errors of every layer become AMQP replies.
//!
//! [`AmqpError`] is what a connection sends: a reply code, RabbitMQ's reply text, and the
//! method that failed. Protocol errors ([`FrameError`]), domain errors ([`CoreError`]) and
//! permission refusals ([`AccessRefused`], 403) are mapped here and nowhere else: each knows its
//! [`ReplyCode`] (charon-protocol: the number, the name and whether it closes the channel or the
//! connection) and its text after the name; the "NAME - " prefix is put on here only.

use charon_core::CoreError;
pub use charon_protocol::ReplyCode;
use charon_protocol::{FrameError, erlang};

use crate::access::AccessRefused;

/// An error to report to the client with channel.close or connection.close.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text}")]
pub struct AmqpError {
    /// Reply code.
    pub code: ReplyCode,
    /// Full reply text, "CODE_NAME - detail", as RabbitMQ writes it.
    pub text: String,
    /// Class of the method that failed (0 if none).
    pub class_id: u16,
    /// Method that failed (0 if none).
    pub method_id: u16,
}

impl AmqpError {
    /// An error with `code` and a detail text; the code name is prefixed.
    pub fn new(code: ReplyCode, detail: impl AsRef<str>) -> Self {
        Self {
            code,
            text: fit_short_string(format!("{} - {}", code.name(), detail.as_ref())),
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
        !self.code.is_channel_error()
    }

    /// 406 PRECONDITION_FAILED.
    pub fn precondition(detail: impl AsRef<str>) -> Self {
        Self::new(ReplyCode::PreconditionFailed, detail)
    }

    /// 505 UNEXPECTED_FRAME.
    pub fn unexpected_frame(detail: impl AsRef<str>) -> Self {
        Self::new(ReplyCode::UnexpectedFrame, detail)
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
        Self::new(ReplyCode::ChannelError, detail)
    }

    /// 540 NOT_IMPLEMENTED.
    pub fn not_implemented(detail: impl AsRef<str>) -> Self {
        Self::new(ReplyCode::NotImplemented, detail)
    }

    /// 530 NOT_ALLOWED.
    pub fn not_allowed(detail: impl AsRef<str>) -> Self {
        Self::new(ReplyCode::NotAllowed, detail)
    }

    /// 403 ACCESS_REFUSED.
    pub fn access_refused(detail: impl AsRef<str>) -> Self {
        Self::new(ReplyCode::AccessRefused, detail)
    }

    /// 404 NOT_FOUND.
    pub fn not_found(detail: impl AsRef<str>) -> Self {
        Self::new(ReplyCode::NotFound, detail)
    }

    /// 503 COMMAND_INVALID.
    pub fn command_invalid(detail: impl AsRef<str>) -> Self {
        Self::new(ReplyCode::CommandInvalid, detail)
    }

    /// 320 CONNECTION_FORCED.
    pub fn connection_forced(detail: impl AsRef<str>) -> Self {
        Self::new(ReplyCode::ConnectionForced, detail)
    }

    /// 541 INTERNAL_ERROR.
    pub fn internal(detail: impl AsRef<str>) -> Self {
        Self::new(ReplyCode::InternalError, detail)
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
        Self::new(err.reply_code(), err.to_string())
    }
}

impl From<AccessRefused> for AmqpError {
    fn from(err: AccessRefused) -> Self {
        Self::access_refused(err.to_string())
    }
}

impl From<FrameError> for AmqpError {
    fn from(err: FrameError) -> Self {
        let (class_id, method_id) = err.class_method();
        Self::new(err.reply(), err.to_string()).on(class_id, method_id)
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
