//! Typed domain errors.
//!
//! Every [`CoreError`] displays as RabbitMQ 3.10.8's full reply text
//! (`"NOT_FOUND - no exchange 'x' in vhost '/'"`), and [`CoreError::kind`]
//! tells the server which AMQP reply code to use.

use thiserror::Error;

/// The AMQP error class of a [`CoreError`]; the server maps it to a reply
/// code (see [`ErrorKind::reply_code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// 404
    NotFound,
    /// 403
    AccessRefused,
    /// 405
    ResourceLocked,
    /// 406
    PreconditionFailed,
    /// 530 (connection error)
    NotAllowed,
    /// 503 (connection error)
    CommandInvalid,
    /// 540 (connection error)
    NotImplemented,
    /// 541 (connection error)
    InternalError,
}

impl ErrorKind {
    /// The AMQP 0-9-1 reply code for this kind.
    pub fn reply_code(self) -> u16 {
        match self {
            ErrorKind::NotFound => 404,
            ErrorKind::AccessRefused => 403,
            ErrorKind::ResourceLocked => 405,
            ErrorKind::PreconditionFailed => 406,
            ErrorKind::NotAllowed => 530,
            ErrorKind::CommandInvalid => 503,
            ErrorKind::NotImplemented => 540,
            ErrorKind::InternalError => 541,
        }
    }

    /// The symbolic name RabbitMQ prefixes reply texts with.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "NOT_FOUND",
            ErrorKind::AccessRefused => "ACCESS_REFUSED",
            ErrorKind::ResourceLocked => "RESOURCE_LOCKED",
            ErrorKind::PreconditionFailed => "PRECONDITION_FAILED",
            ErrorKind::NotAllowed => "NOT_ALLOWED",
            ErrorKind::CommandInvalid => "COMMAND_INVALID",
            ErrorKind::NotImplemented => "NOT_IMPLEMENTED",
            ErrorKind::InternalError => "INTERNAL_ERROR",
        }
    }

    /// True for the kinds that RabbitMQ raises as connection errors.
    pub fn is_connection_error(self) -> bool {
        matches!(
            self,
            ErrorKind::NotAllowed
                | ErrorKind::CommandInvalid
                | ErrorKind::NotImplemented
                | ErrorKind::InternalError
        )
    }
}

/// A domain error; `Display` is RabbitMQ's exact reply text.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum CoreError {
    /// Exchange does not exist.
    #[error("NOT_FOUND - no exchange '{exchange}' in vhost '{vhost}'")]
    ExchangeNotFound {
        /// Exchange name.
        exchange: String,
        /// Virtual host name.
        vhost: String,
    },
    /// Queue does not exist.
    #[error("NOT_FOUND - no queue '{queue}' in vhost '{vhost}'")]
    QueueNotFound {
        /// Queue name.
        queue: String,
        /// Virtual host name.
        vhost: String,
    },
    /// Declare/delete/bind involving the default exchange.
    #[error("ACCESS_REFUSED - operation not permitted on the default exchange")]
    DefaultExchange,
    /// Creating a resource whose name starts with `amq.`.
    #[error("ACCESS_REFUSED - {kind} name '{name}' contains reserved prefix 'amq.*'")]
    ReservedPrefix {
        /// "exchange" or "queue".
        kind: &'static str,
        /// The offending name.
        name: String,
    },
    /// Deleting an `amq.*` exchange.
    #[error(
        "ACCESS_REFUSED - deletion of system exchange '{exchange}' in vhost '{vhost}' not allowed"
    )]
    SystemExchangeDeletion {
        /// Exchange name.
        exchange: String,
        /// Virtual host name.
        vhost: String,
    },
    /// basic.publish to an internal exchange.
    #[error("ACCESS_REFUSED - cannot publish to internal exchange '{exchange}' in vhost '{vhost}'")]
    InternalExchange {
        /// Exchange name.
        exchange: String,
        /// Virtual host name.
        vhost: String,
    },
    /// basic.consume conflicting with an exclusive consumer.
    #[error("ACCESS_REFUSED - queue '{queue}' in vhost '{vhost}' in exclusive use")]
    ExclusiveConsume {
        /// Queue name.
        queue: String,
        /// Virtual host name.
        vhost: String,
    },
    /// Queue is exclusive to another connection (or exclusivity differs).
    #[error(
        "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{queue}' in vhost '{vhost}'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration."
    )]
    QueueLocked {
        /// Queue name.
        queue: String,
        /// Virtual host name.
        vhost: String,
    },
    /// exchange.declare with an unknown type: a channel error 406 as in RabbitMQ 4.x
    /// (`rabbit_exchange:check_type/1`; 3.10.8 closed the connection with 503).
    #[error("PRECONDITION_FAILED - {reason} exchange type '{kind}'")]
    InvalidExchangeType {
        /// "unknown" (no such atom in RabbitMQ) or "invalid".
        reason: &'static str,
        /// The type as received.
        kind: String,
    },
    /// Redeclaration with different properties or arguments.
    /// `received`/`current` are already formatted the RabbitMQ way
    /// (`'true'`, `the value '5' of type 'signedint'`, `none`).
    #[error(
        "PRECONDITION_FAILED - inequivalent arg '{arg}' for {resource}: received {received} but current is {current}"
    )]
    Inequivalent {
        /// Argument or property name.
        arg: String,
        /// `exchange 'x' in vhost '/'` / `queue 'q' in vhost '/'`.
        resource: String,
        /// Formatted received value.
        received: String,
        /// Formatted current value.
        current: String,
    },
    /// Queue x-argument rejected by validation; `reason` is RabbitMQ's
    /// Erlang term, e.g. `{value_negative,-1}`.
    #[error(
        "PRECONDITION_FAILED - invalid arg '{arg}' for queue '{queue}' in vhost '{vhost}': {reason}"
    )]
    InvalidQueueArg {
        /// Argument name.
        arg: String,
        /// Queue name.
        queue: String,
        /// Virtual host name.
        vhost: String,
        /// Erlang-formatted reason.
        reason: String,
    },
    /// Argument not supported by the queue type.
    #[error(
        "PRECONDITION_FAILED - invalid arg '{arg}' for queue '{queue}' in vhost '{vhost}' of queue type {queue_type}"
    )]
    UnsupportedQueueArg {
        /// RabbitMQ module of the queue type, e.g. `rabbit_quorum_queue`.
        queue_type: &'static str,
        /// Argument name.
        arg: String,
        /// Queue name.
        queue: String,
        /// Virtual host name.
        vhost: String,
    },
    /// Queue property not supported by the queue type (quorum).
    #[error(
        "PRECONDITION_FAILED - invalid property '{property}' for queue '{queue}' in vhost '{vhost}'"
    )]
    InvalidQueueProperty {
        /// e.g. `auto-delete`, `exclusive-owner`, `non-durable`.
        property: &'static str,
        /// Queue name.
        queue: String,
        /// Virtual host name.
        vhost: String,
    },
    /// Argument of the wrong type (e.g. `alternate-exchange`).
    #[error("PRECONDITION_FAILED - invalid type '{type_name}' for arg '{arg}' in {resource}")]
    InvalidArgType {
        /// Erlang type name.
        type_name: String,
        /// Argument name.
        arg: String,
        /// `exchange 'x' in vhost '/'`.
        resource: String,
    },
    /// exchange.delete if-unused on an exchange with bindings.
    #[error("PRECONDITION_FAILED - exchange '{exchange}' in vhost '{vhost}' in use")]
    ExchangeInUse {
        /// Exchange name.
        exchange: String,
        /// Virtual host name.
        vhost: String,
    },
    /// Any other precondition failure; the text follows the prefix.
    #[error("PRECONDITION_FAILED - {0}")]
    Precondition(String),
    /// Any other error, with its kind and the text after the prefix.
    #[error("{} - {text}", kind.name())]
    Other {
        /// Error class.
        kind: ErrorKind,
        /// Reply text without the `NAME - ` prefix.
        text: String,
    },
}

impl CoreError {
    /// The error class (maps to a reply code in the server).
    pub fn kind(&self) -> ErrorKind {
        match self {
            CoreError::ExchangeNotFound { .. } | CoreError::QueueNotFound { .. } => {
                ErrorKind::NotFound
            }
            CoreError::DefaultExchange
            | CoreError::ReservedPrefix { .. }
            | CoreError::SystemExchangeDeletion { .. }
            | CoreError::InternalExchange { .. }
            | CoreError::ExclusiveConsume { .. } => ErrorKind::AccessRefused,
            CoreError::QueueLocked { .. } => ErrorKind::ResourceLocked,
            CoreError::InvalidExchangeType { .. } => ErrorKind::PreconditionFailed,
            CoreError::Inequivalent { .. }
            | CoreError::InvalidQueueArg { .. }
            | CoreError::UnsupportedQueueArg { .. }
            | CoreError::InvalidQueueProperty { .. }
            | CoreError::InvalidArgType { .. }
            | CoreError::ExchangeInUse { .. }
            | CoreError::Precondition(_) => ErrorKind::PreconditionFailed,
            CoreError::Other { kind, .. } => *kind,
        }
    }

    /// The AMQP reply code (`self.kind().reply_code()`).
    pub fn reply_code(&self) -> u16 {
        self.kind().reply_code()
    }

    /// The full reply text (same as `to_string()`).
    pub fn reply_text(&self) -> String {
        self.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_rabbitmq_reply_text_with_prefix() {
        let e = CoreError::ExchangeNotFound {
            exchange: "x".into(),
            vhost: "/".into(),
        };
        assert_eq!(e.to_string(), "NOT_FOUND - no exchange 'x' in vhost '/'");
        assert_eq!(e.reply_code(), 404);
    }

    #[test]
    fn other_errors_use_the_kind_name_as_prefix() {
        let e = CoreError::Other {
            kind: ErrorKind::NotAllowed,
            text: "nope".into(),
        };
        assert_eq!(e.to_string(), "NOT_ALLOWED - nope");
        assert!(e.kind().is_connection_error());
    }
}
