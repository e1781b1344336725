//! `consumer_timeout`: a channel holding a delivery unacknowledged for longer than the setting
//! is closed with 406 and RabbitMQ's text; its unacked messages go back to their queues (as on
//! any channel close), so another consumer gets them.

use std::time::Duration;

use super::Connection;
use crate::error::ServerError;

/// How often a connection looks at its oldest unacked deliveries, for a timeout of `ms`.
pub(super) fn check_interval(ms: u64) -> Duration {
    if ms == 0 {
        return Duration::from_secs(3600);
    }
    Duration::from_millis((ms / 2).clamp(100, 5_000))
}

impl Connection {
    /// Closes every channel whose oldest unacked delivery is older than `consumer_timeout`.
    pub(super) async fn check_consumer_timeouts(&mut self) {
        let ms = self.broker.config().consumer_timeout;
        if ms == 0 {
            return;
        }
        let limit = Duration::from_millis(ms);
        let expired: Vec<u16> = self
            .channels
            .iter()
            .filter(|(_, ch)| !ch.closing)
            .filter(|(_, ch)| {
                // Tags grow in wire order: the first unacked is the oldest delivery.
                ch.unacked
                    .values()
                    .next()
                    .is_some_and(|u| u.at.elapsed() > limit)
            })
            .map(|(id, _)| *id)
            .collect();
        for channel in expired {
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
