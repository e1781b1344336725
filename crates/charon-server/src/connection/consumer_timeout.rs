//! `consumer_timeout`: a channel holding a delivery unacknowledged for longer than its timeout
//! is closed with 406 and RabbitMQ's text; its unacked messages go back to their queues (as on
//! any channel close), so another consumer gets them.
//!
//! The timeout is RabbitMQ 3.12+/4.x's (`rabbit_channel:evaluate_consumer_timeout/1`): the
//! channel's oldest unacked delivery is checked against the timeout of the queue it came from
//! (`x-consumer-timeout` argument and `consumer-timeout` policy, the smaller when both are set),
//! or the broker's `consumer_timeout` when the queue sets none (0: no broker-wide timeout).

use std::time::Duration;

use super::Connection;
use crate::error::ServerError;

/// How often a connection looks at its oldest unacked deliveries, for a broker-wide timeout of
/// `ms`: every 5 s at most, so that queues' own (shorter) timeouts are seen too.
pub(super) fn check_interval(ms: u64) -> Duration {
    if ms == 0 {
        return Duration::from_secs(5);
    }
    Duration::from_millis((ms / 2).clamp(100, 5_000))
}

impl Connection {
    /// Closes every channel whose oldest unacked delivery is older than its timeout.
    pub(super) async fn check_consumer_timeouts(&mut self) {
        let global = self.broker.config().consumer_timeout;
        let expired: Vec<(u16, u64)> = self
            .channels
            .iter()
            .filter(|(_, ch)| !ch.closing)
            .filter_map(|(id, ch)| {
                // Tags grow in wire order: the first unacked is the oldest delivery.
                let u = ch.unacked.first()?;
                let ms = u
                    .queue
                    .consumer_timeout()
                    .or((global > 0).then_some(global))?;
                (u.at.elapsed() > Duration::from_millis(ms)).then_some((id, ms))
            })
            .collect();
        for (channel, ms) in expired {
            tracing::warn!(
                conn = self.id,
                channel,
                timeout_ms = ms,
                "consumer timed out waiting for an acknowledgement; closing the channel"
            );
            let err = ServerError::ConsumerTimeout { channel, ms };
            self.close_channel(channel, err.into()).await;
        }
    }
}
