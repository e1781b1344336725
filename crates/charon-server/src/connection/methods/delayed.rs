//! basic.publish to a delayed message exchange (`crate::exchange_delay`) with an `x-delay`:
//! the message is handed to the vhost's delay task instead of being routed now. A persistent
//! message on a durable exchange is stored first (one `Publish` record); the publisher's confirm
//! waits for that commit. No basic.return: where it goes is decided when it is due.

use std::sync::Arc;

use charon_core::Message;

use super::super::Connection;
use crate::error::AmqpError;
use crate::exchange_delay::{self, Delayed};
use crate::queue::now_ms;

impl Connection {
    pub(super) async fn publish_delayed(
        &mut self,
        channel: u16,
        seq: Option<u64>,
        message: Arc<Message>,
        delay: u64,
        durable: bool,
    ) -> Result<(), AmqpError> {
        let now = now_ms();
        let handle = exchange_delay::handle(&self.vhost);
        let persistent = message.properties.delivery_mode() == Some(2);
        let mut commit = None;
        let mut stored = None;
        if let (true, true, Some(p)) = (persistent, durable, self.vhost.persistence()) {
            let member = (
                exchange_delay::store_id(&self.vhost.name, &message.exchange),
                handle.next_seq(),
            );
            let (msg, durable) = p.publish(&message, &[member], now);
            stored = msg.map(|m| (member, m));
            commit = Some(durable);
        }
        // A message the store refused is not kept (its publisher gets a nack).
        if commit.is_none() || stored.is_some() {
            handle
                .add(Delayed {
                    due_us: crate::lateness::now_us()
                        .max(now.saturating_mul(1000))
                        .saturating_add(delay.saturating_mul(1000)),
                    exchange: message.exchange.clone(),
                    message,
                    stored,
                })
                .await;
        }
        if let Some(seq) = seq {
            let ch = self.channel_mut(channel)?;
            if commit.is_some() {
                ch.confirms.expect(seq, 1);
            }
            self.flush_confirms(channel);
            if let Some(c) = commit {
                self.commits.wait_for(channel, seq, c).await;
            }
        }
        Ok(())
    }
}
