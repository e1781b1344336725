//! AMQP 0-9-1 reply codes, once for the whole broker: the number, the name RabbitMQ puts in
//! front of a reply text ("NOT_FOUND - ..."), and whether the error closes a channel or the
//! whole connection.

/// A reply code of `channel.close`, `connection.close` or `basic.return`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplyCode {
    /// 200: normal close.
    ReplySuccess,
    /// 311: content too large (channel).
    ContentTooLarge,
    /// 312: a mandatory message could not be routed (`basic.return`).
    NoRoute,
    /// 313: an immediate message found no consumer (channel).
    NoConsumers,
    /// 320: the broker or an operator closed the connection.
    ConnectionForced,
    /// 402: invalid virtual host path.
    InvalidPath,
    /// 403: permission or reserved-name violation (channel).
    AccessRefused,
    /// 404: missing exchange or queue (channel).
    NotFound,
    /// 405: exclusive resource held by another connection (channel).
    ResourceLocked,
    /// 406: request incompatible with the current state (channel).
    PreconditionFailed,
    /// 501: malformed frame.
    FrameError,
    /// 502: malformed method arguments.
    SyntaxError,
    /// 503: invalid command sequence or argument.
    CommandInvalid,
    /// 504: bad channel use.
    ChannelError,
    /// 505: frame not expected in this state.
    UnexpectedFrame,
    /// 506: server resource exhausted.
    ResourceError,
    /// 530: operation not allowed (vhost access, channel_max, ...).
    NotAllowed,
    /// 540: feature not implemented.
    NotImplemented,
    /// 541: internal error.
    InternalError,
}

impl ReplyCode {
    /// Every reply code, in numeric order.
    pub const ALL: [ReplyCode; 19] = [
        ReplyCode::ReplySuccess,
        ReplyCode::ContentTooLarge,
        ReplyCode::NoRoute,
        ReplyCode::NoConsumers,
        ReplyCode::ConnectionForced,
        ReplyCode::InvalidPath,
        ReplyCode::AccessRefused,
        ReplyCode::NotFound,
        ReplyCode::ResourceLocked,
        ReplyCode::PreconditionFailed,
        ReplyCode::FrameError,
        ReplyCode::SyntaxError,
        ReplyCode::CommandInvalid,
        ReplyCode::ChannelError,
        ReplyCode::UnexpectedFrame,
        ReplyCode::ResourceError,
        ReplyCode::NotAllowed,
        ReplyCode::NotImplemented,
        ReplyCode::InternalError,
    ];

    /// The number on the wire.
    pub const fn code(self) -> u16 {
        match self {
            ReplyCode::ReplySuccess => 200,
            ReplyCode::ContentTooLarge => 311,
            ReplyCode::NoRoute => 312,
            ReplyCode::NoConsumers => 313,
            ReplyCode::ConnectionForced => 320,
            ReplyCode::InvalidPath => 402,
            ReplyCode::AccessRefused => 403,
            ReplyCode::NotFound => 404,
            ReplyCode::ResourceLocked => 405,
            ReplyCode::PreconditionFailed => 406,
            ReplyCode::FrameError => 501,
            ReplyCode::SyntaxError => 502,
            ReplyCode::CommandInvalid => 503,
            ReplyCode::ChannelError => 504,
            ReplyCode::UnexpectedFrame => 505,
            ReplyCode::ResourceError => 506,
            ReplyCode::NotAllowed => 530,
            ReplyCode::NotImplemented => 540,
            ReplyCode::InternalError => 541,
        }
    }

    /// The name RabbitMQ puts in front of a reply text ("NOT_FOUND - ...").
    pub const fn name(self) -> &'static str {
        match self {
            ReplyCode::ReplySuccess => "REPLY_SUCCESS",
            ReplyCode::ContentTooLarge => "CONTENT_TOO_LARGE",
            ReplyCode::NoRoute => "NO_ROUTE",
            ReplyCode::NoConsumers => "NO_CONSUMERS",
            ReplyCode::ConnectionForced => "CONNECTION_FORCED",
            ReplyCode::InvalidPath => "INVALID_PATH",
            ReplyCode::AccessRefused => "ACCESS_REFUSED",
            ReplyCode::NotFound => "NOT_FOUND",
            ReplyCode::ResourceLocked => "RESOURCE_LOCKED",
            ReplyCode::PreconditionFailed => "PRECONDITION_FAILED",
            ReplyCode::FrameError => "FRAME_ERROR",
            ReplyCode::SyntaxError => "SYNTAX_ERROR",
            ReplyCode::CommandInvalid => "COMMAND_INVALID",
            ReplyCode::ChannelError => "CHANNEL_ERROR",
            ReplyCode::UnexpectedFrame => "UNEXPECTED_FRAME",
            ReplyCode::ResourceError => "RESOURCE_ERROR",
            ReplyCode::NotAllowed => "NOT_ALLOWED",
            ReplyCode::NotImplemented => "NOT_IMPLEMENTED",
            ReplyCode::InternalError => "INTERNAL_ERROR",
        }
    }

    /// Whether an error with this code closes only its channel (the spec's soft errors:
    /// 311–313, 403–406); all others close the connection.
    pub const fn is_channel_error(self) -> bool {
        matches!(
            self,
            ReplyCode::ContentTooLarge
                | ReplyCode::NoRoute
                | ReplyCode::NoConsumers
                | ReplyCode::AccessRefused
                | ReplyCode::NotFound
                | ReplyCode::ResourceLocked
                | ReplyCode::PreconditionFailed
        )
    }

    /// The reply code with this number, if it is one.
    pub fn from_code(code: u16) -> Option<ReplyCode> {
        ReplyCode::ALL.into_iter().find(|c| c.code() == code)
    }
}

impl std::fmt::Display for ReplyCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::ReplyCode;

    #[test]
    fn codes_names_and_scopes_agree_with_the_spec() {
        for c in ReplyCode::ALL {
            assert_eq!(ReplyCode::from_code(c.code()), Some(c));
            let soft = matches!(c.code(), 311..=313 | 403..=406);
            assert_eq!(c.is_channel_error(), soft, "{c}");
        }
        assert_eq!(ReplyCode::NotFound.code(), 404);
        assert_eq!(ReplyCode::NotFound.name(), "NOT_FOUND");
        assert_eq!(ReplyCode::from_code(999), None);
        let codes: Vec<u16> = ReplyCode::ALL.iter().map(|c| c.code()).collect();
        let mut sorted = codes.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(codes, sorted, "ALL is in strictly increasing order");
    }
}
