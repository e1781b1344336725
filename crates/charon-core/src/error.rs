//! Typed domain errors.
//!
//! Every [`CoreError`] displays as RabbitMQ 3.10.8's reply text after the code name
//! (`"no exchange 'x' in vhost '/'"`); [`CoreError::reply_code`] says which AMQP reply code it
//! is, and [`CoreError::reply_text`] puts both together as RabbitMQ sends it
//! (`"no exchange 'x' in vhost '/'"`).

use charon_protocol::ReplyCode;
use thiserror::Error;

/// A domain error; `Display` is RabbitMQ's exact reply text without its `NAME - ` prefix.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum CoreError {
    /// Exchange does not exist.
    #[error("no exchange '{exchange}' in vhost '{vhost}'")]
    ExchangeNotFound {
        /// Exchange name.
        exchange: String,
        /// Virtual host name.
        vhost: String,
    },
    /// Queue does not exist.
    #[error("no queue '{queue}' in vhost '{vhost}'")]
    QueueNotFound {
        /// Queue name.
        queue: String,
        /// Virtual host name.
        vhost: String,
    },
    /// Declare/delete/bind involving the default exchange.
    #[error("operation not permitted on the default exchange")]
    DefaultExchange,
    /// Creating a resource whose name starts with `amq.`.
    #[error("{kind} name '{name}' contains reserved prefix 'amq.*'")]
    ReservedPrefix {
        /// "exchange" or "queue".
        kind: &'static str,
        /// The offending name.
        name: String,
    },
    /// Deleting an `amq.*` exchange.
    #[error("deletion of system exchange '{exchange}' in vhost '{vhost}' not allowed")]
    SystemExchangeDeletion {
        /// Exchange name.
        exchange: String,
        /// Virtual host name.
        vhost: String,
    },
    /// basic.publish to an internal exchange.
    #[error("cannot publish to internal exchange '{exchange}' in vhost '{vhost}'")]
    InternalExchange {
        /// Exchange name.
        exchange: String,
        /// Virtual host name.
        vhost: String,
    },
    /// basic.consume conflicting with an exclusive consumer.
    #[error("queue '{queue}' in vhost '{vhost}' in exclusive use")]
    ExclusiveConsume {
        /// Queue name.
        queue: String,
        /// Virtual host name.
        vhost: String,
    },
    /// Queue is exclusive to another connection (or exclusivity differs).
    #[error(
        "cannot obtain exclusive access to locked queue '{queue}' in vhost '{vhost}'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration."
    )]
    QueueLocked {
        /// Queue name.
        queue: String,
        /// Virtual host name.
        vhost: String,
    },
    /// exchange.declare with an unknown type: a channel error 406 as in RabbitMQ 4.x
    /// (`rabbit_exchange:check_type/1`; 3.10.8 closed the connection with 503).
    #[error("{reason} exchange type '{kind}'")]
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
        "inequivalent arg '{arg}' for {resource}: received {received} but current is {current}"
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
    #[error("invalid arg '{arg}' for queue '{queue}' in vhost '{vhost}': {reason}")]
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
        "invalid arg '{arg}' for queue '{queue}' in vhost '{vhost}' of queue type {queue_type}"
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
    #[error("invalid property '{property}' for queue '{queue}' in vhost '{vhost}'")]
    InvalidQueueProperty {
        /// e.g. `auto-delete`, `exclusive-owner`, `non-durable`.
        property: &'static str,
        /// Queue name.
        queue: String,
        /// Virtual host name.
        vhost: String,
    },
    /// Argument of the wrong type (e.g. `alternate-exchange`).
    #[error("invalid type '{type_name}' for arg '{arg}' in {resource}")]
    InvalidArgType {
        /// Erlang type name.
        type_name: String,
        /// Argument name.
        arg: String,
        /// `exchange 'x' in vhost '/'`.
        resource: String,
    },
    /// exchange.delete if-unused on an exchange with bindings.
    #[error("exchange '{exchange}' in vhost '{vhost}' in use")]
    ExchangeInUse {
        /// Exchange name.
        exchange: String,
        /// Virtual host name.
        vhost: String,
    },
    /// Any other precondition failure.
    #[error("{0}")]
    Precondition(String),
    /// Any other error, with its reply code and the text after the prefix.
    #[error("{text}")]
    Other {
        /// Reply code.
        code: ReplyCode,
        /// Reply text without the `NAME - ` prefix.
        text: String,
    },
}

impl CoreError {
    /// The AMQP reply code this error is sent with.
    pub fn reply_code(&self) -> ReplyCode {
        match self {
            CoreError::ExchangeNotFound { .. } | CoreError::QueueNotFound { .. } => {
                ReplyCode::NotFound
            }
            CoreError::DefaultExchange
            | CoreError::ReservedPrefix { .. }
            | CoreError::SystemExchangeDeletion { .. }
            | CoreError::InternalExchange { .. }
            | CoreError::ExclusiveConsume { .. } => ReplyCode::AccessRefused,
            CoreError::QueueLocked { .. } => ReplyCode::ResourceLocked,
            CoreError::InvalidExchangeType { .. } => ReplyCode::PreconditionFailed,
            CoreError::Inequivalent { .. }
            | CoreError::InvalidQueueArg { .. }
            | CoreError::UnsupportedQueueArg { .. }
            | CoreError::InvalidQueueProperty { .. }
            | CoreError::InvalidArgType { .. }
            | CoreError::ExchangeInUse { .. }
            | CoreError::Precondition(_) => ReplyCode::PreconditionFailed,
            CoreError::Other { code, .. } => *code,
        }
    }

    /// The full reply text as RabbitMQ sends it: `"NAME - detail"`.
    pub fn reply_text(&self) -> String {
        format!("{} - {self}", self.reply_code().name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_text_is_rabbitmq_reply_text_with_prefix() {
        let e = CoreError::ExchangeNotFound {
            exchange: "x".into(),
            vhost: "/".into(),
        };
        assert_eq!(e.to_string(), "no exchange 'x' in vhost '/'");
        assert_eq!(e.reply_text(), "NOT_FOUND - no exchange 'x' in vhost '/'");
        assert_eq!(e.reply_code().code(), 404);
    }

    #[test]
    fn other_errors_use_their_code_name_as_prefix() {
        let e = CoreError::Other {
            code: ReplyCode::NotAllowed,
            text: "nope".into(),
        };
        assert_eq!(e.reply_text(), "NOT_ALLOWED - nope");
        assert!(!e.reply_code().is_channel_error());
    }
}
