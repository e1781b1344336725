//! The one place where errors of every layer become AMQP replies.
//!
//! [`AmqpError`] is what a connection sends: a reply code, RabbitMQ's reply text, and the
//! method that failed. Protocol errors ([`FrameError`]), domain errors ([`CoreError`]), the
//! server's own refusals ([`ServerError`]) and permission refusals ([`AccessRefused`], 403) are
//! mapped here and nowhere else: each knows its
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
    /// An error with `code` and a detail text; the code name is prefixed. Prefer a typed error
    /// ([`ServerError`], [`CoreError`], ...) and its `From`: the mapping stays here.
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
        Self::new(ReplyCode::AccessRefused, err.to_string())
    }
}

impl From<FrameError> for AmqpError {
    fn from(err: FrameError) -> Self {
        let (class_id, method_id) = err.class_method();
        Self::new(err.reply(), err.to_string()).on(class_id, method_id)
    }
}

/// The server's own refusals: what the connection's state machine rejects (frames out of place,
/// channel and transaction misuse, publish checks, login). `Display` is RabbitMQ's reply text
/// after the "NAME - " prefix; [`ServerError::reply_code`] is its code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServerError {
    /// A content frame where a method frame was expected.
    #[error("expected method frame, got non method frame instead")]
    ExpectedMethodFrame,
    /// Something other than a method on channel 0 during the handshake.
    #[error("expected method frame on channel 0")]
    ExpectedMethodOnChannelZero,
    /// A frame refused as a whole; the text quotes its octets as RabbitMQ's reader does
    /// ("type 2, all octets = <<...>>").
    #[error("{octets}")]
    FrameRefused {
        /// `erlang::frame_octets` of the frame.
        octets: String,
    },
    /// Another frame while a publish waits for its content header.
    #[error("expected content header for class 60, got non content header frame instead")]
    ContentHeaderExpected,
    /// Another frame while a publish waits for body frames.
    #[error("expected content body, got non content body frame instead")]
    ContentBodyExpected,
    /// A content header of a class other than basic.
    #[error("expected content header for class 60, got one for class {class_id} instead")]
    WrongContentClass {
        /// The class announced.
        class_id: u16,
    },
    /// Wrong credentials.
    #[error(
        "Login was refused using authentication mechanism {mechanism}. For details see the broker logfile."
    )]
    LoginRefused {
        /// The SASL mechanism used.
        mechanism: String,
    },
    /// connection.open for a vhost that does not exist.
    #[error("vhost {vhost} not found")]
    VHostNotFound {
        /// The vhost asked for.
        vhost: String,
    },
    /// connection.open for a vhost the user has no permissions on.
    #[error("access to vhost '{vhost}' refused for user '{user}'")]
    VHostAccessRefused {
        /// The vhost asked for.
        vhost: String,
        /// The user.
        user: String,
    },
    /// confirm.select on a transactional channel.
    #[error("cannot switch from tx to confirm mode")]
    TxToConfirm,
    /// tx.select on a channel in confirm mode.
    #[error("cannot switch from confirm to tx mode")]
    ConfirmToTx,
    /// tx.commit/rollback without tx.select.
    #[error("channel is not transactional")]
    NotTransactional,
    /// The store refused a transaction's persistent messages.
    #[error("the transaction could not be stored")]
    TxNotStored,
    /// A method the broker does not take in this place.
    #[error("unimplemented method")]
    UnimplementedMethod,
    /// The queue went away while the channel asked it something.
    #[error("no queue '{queue}'")]
    QueueGone {
        /// Queue name.
        queue: String,
    },
    /// queue.delete if-unused on a queue with consumers.
    #[error("queue '{queue}' in vhost '{vhost}' in use")]
    QueueInUse {
        /// Queue name.
        queue: String,
        /// Vhost name.
        vhost: String,
    },
    /// queue.delete if-empty on a queue with messages.
    #[error("queue '{queue}' in vhost '{vhost}' not empty")]
    QueueNotEmpty {
        /// Queue name.
        queue: String,
        /// Vhost name.
        vhost: String,
    },
    /// basic.publish with immediate=true.
    #[error("immediate=true")]
    Immediate,
    /// basic.recover(-async) with requeue=false.
    #[error("requeue=false")]
    RecoverWithoutRequeue,
    /// channel.flow active=false.
    #[error("active=false")]
    FlowInactive,
    /// basic.consume with a tag in use on the channel.
    #[error("attempt to reuse consumer tag '{tag}'")]
    ConsumerTagReused {
        /// The tag.
        tag: String,
    },
    /// An ack/nack/reject for a tag the channel did not deliver (or already settled).
    #[error("unknown delivery tag {tag}")]
    UnknownDeliveryTag {
        /// The tag.
        tag: u64,
    },
    /// A connection-class method other than close/close-ok after the handshake.
    #[error("unexpected method in connection state running")]
    UnexpectedConnectionMethod,
    /// channel.open on an open channel.
    #[error("second 'channel.open' seen")]
    SecondChannelOpen,
    /// channel.open beyond the negotiated channel_max.
    #[error("number of channels opened ({open}) has reached the negotiated channel_max ({max})")]
    ChannelMaxReached {
        /// Channels open.
        open: usize,
        /// The negotiated channel_max.
        max: u16,
    },
    /// A method on a channel that is not open.
    #[error("expected 'channel.open'")]
    ChannelNotOpen,
    /// The broker shuts down.
    #[error("broker forced connection closure with reason 'shutdown'")]
    Shutdown,
    /// A `user_id` property naming another user (`rabbit_channel:check_user_id_header/2`).
    #[error("user_id property set to '{claimed}' but authenticated user was '{user}'")]
    UserIdMismatch {
        /// The user_id sent.
        claimed: String,
        /// The authenticated user.
        user: String,
    },
    /// An `expiration` property that is not a valid TTL (`check_expiration_header/1`).
    #[error("invalid expiration '{value}': {reason}")]
    InvalidExpiration {
        /// The property as sent.
        value: String,
        /// The Erlang error term.
        reason: String,
    },
    /// connection.open over the node's `connection_max`.
    #[error("connection refused: node connection limit ({max}) is reached")]
    NodeConnectionLimit {
        /// The limit.
        max: u64,
    },
    /// connection.open over the vhost's `max-connections`.
    #[error(
        "access to vhost '{vhost}' refused for user '{user}': connection limit ({limit}) is reached"
    )]
    VHostConnectionLimit {
        /// The vhost.
        vhost: String,
        /// The user.
        user: String,
        /// The limit.
        limit: i64,
    },
    /// connection.open over the user's `max-connections`.
    #[error("connection refused for user '{user}': user connection limit ({limit}) is reached")]
    UserConnectionLimit {
        /// The user.
        user: String,
        /// The limit.
        limit: i64,
    },
    /// channel.open over the user's `max-channels`.
    #[error(
        "number of channels opened for user '{user}' has reached the maximum allowed user limit of ({limit})"
    )]
    UserChannelLimit {
        /// The user.
        user: String,
        /// The limit.
        limit: i64,
    },
    /// queue.declare of a new queue over the vhost's `max-queues`.
    #[error("cannot declare queue '{queue}': queue limit in vhost '{vhost}' ({limit}) is reached")]
    QueueLimit {
        /// The queue.
        queue: String,
        /// The vhost.
        vhost: String,
        /// The limit.
        limit: i64,
    },
    /// A message over `max_message_size` (`rabbit_channel:check_msg_size/2`; "max size" when the
    /// limit is RabbitMQ's largest, "configured max size" otherwise).
    #[error("message size {size} is larger than {} {max}", if *configured { "configured max size" } else { "max size" })]
    MessageTooLarge {
        /// Announced body size.
        size: u64,
        /// The limit.
        max: u64,
        /// The limit is not the largest allowed.
        configured: bool,
    },
    /// A content header announcing more than RabbitMQ's largest message (command assembler).
    #[error("content body size {size} exceeds maximum allowed size {max}")]
    ContentBodyTooLarge {
        /// Announced body size.
        size: u64,
        /// The largest allowed.
        max: u64,
    },
    /// A body frame beyond the size the content header announced (command assembler).
    #[error("content body frame exceeds remaining content size")]
    ContentBodyOverrun,
    /// A delivery unacknowledged for longer than `consumer_timeout`.
    #[error(
        "delivery acknowledgement on channel {channel} timed out. Timeout value used: {ms} ms. This timeout value can be configured, see consumers doc guide to learn more"
    )]
    ConsumerTimeout {
        /// The channel.
        channel: u16,
        /// The timeout, ms.
        ms: u64,
    },
}

impl ServerError {
    /// A frame refused as a whole, quoting its octets.
    pub fn frame_refused(frame_type: u8, payload: &[u8]) -> Self {
        ServerError::FrameRefused {
            octets: erlang::frame_octets(frame_type, payload.len(), &erlang::snippet(payload)),
        }
    }

    /// The reply code this refusal is sent with.
    pub fn reply_code(&self) -> ReplyCode {
        match self {
            ServerError::ExpectedMethodFrame
            | ServerError::ExpectedMethodOnChannelZero
            | ServerError::FrameRefused { .. }
            | ServerError::ContentHeaderExpected
            | ServerError::ContentBodyExpected
            | ServerError::WrongContentClass { .. } => ReplyCode::UnexpectedFrame,
            ServerError::LoginRefused { .. } => ReplyCode::AccessRefused,
            ServerError::VHostNotFound { .. }
            | ServerError::VHostAccessRefused { .. }
            | ServerError::ConsumerTagReused { .. }
            | ServerError::ChannelMaxReached { .. }
            | ServerError::NodeConnectionLimit { .. }
            | ServerError::VHostConnectionLimit { .. }
            | ServerError::UserConnectionLimit { .. }
            | ServerError::UserChannelLimit { .. } => ReplyCode::NotAllowed,
            ServerError::QueueLimit { .. }
            | ServerError::MessageTooLarge { .. }
            | ServerError::ConsumerTimeout { .. } => ReplyCode::PreconditionFailed,
            ServerError::ContentBodyTooLarge { .. } | ServerError::ContentBodyOverrun => {
                ReplyCode::FrameError
            }
            ServerError::TxToConfirm
            | ServerError::ConfirmToTx
            | ServerError::NotTransactional
            | ServerError::QueueInUse { .. }
            | ServerError::QueueNotEmpty { .. }
            | ServerError::UnknownDeliveryTag { .. }
            | ServerError::UserIdMismatch { .. }
            | ServerError::InvalidExpiration { .. } => ReplyCode::PreconditionFailed,
            ServerError::TxNotStored => ReplyCode::InternalError,
            ServerError::UnimplementedMethod => ReplyCode::CommandInvalid,
            ServerError::QueueGone { .. } => ReplyCode::NotFound,
            ServerError::Immediate
            | ServerError::RecoverWithoutRequeue
            | ServerError::FlowInactive => ReplyCode::NotImplemented,
            ServerError::UnexpectedConnectionMethod
            | ServerError::SecondChannelOpen
            | ServerError::ChannelNotOpen => ReplyCode::ChannelError,
            ServerError::Shutdown => ReplyCode::ConnectionForced,
        }
    }
}

impl From<ServerError> for AmqpError {
    fn from(err: ServerError) -> Self {
        Self::new(err.reply_code(), err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_texts_are_cut_like_rabbitmq() {
        let e = AmqpError::new(ReplyCode::PreconditionFailed, "x".repeat(300));
        assert_eq!(e.text.len(), 255);
        assert!(e.text.ends_with("..."));
        let short = AmqpError::from(ServerError::UnknownDeliveryTag { tag: 7 });
        assert_eq!(short.text, "PRECONDITION_FAILED - unknown delivery tag 7");
        assert_eq!(short.code.code(), 406);
    }
}
