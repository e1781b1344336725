//! basic.publish: its content frames, routing, confirms.

use std::sync::Arc;

use charon_core::arguments::MAX_EXPIRY;
use charon_core::{Message, dead_letter};
use charon_protocol::{
    BasicProperties, CLASS_BASIC, encode_basic_ack, encode_basic_nack, encode_basic_return,
    encode_content, erlang,
};
use charon_store::{AppendError, Commit};

use super::super::Connection;
use super::super::channel::{PUBLISH_METHOD_ID, PendingPublish};
use crate::access::{Permission, ResourceKind};
use crate::broker::VHostState;
use crate::error::{AmqpError, code};
use crate::outbound::ConnEvent;
use crate::queue::{ConfirmTo, Placed, QueueCmd, QueueHandle, allocate, now_ms, placed};

/// The store's commit for a persistent publish, or why it could not be stored.
pub(super) type StoreCommit = Option<Result<Commit, AppendError>>;

/// A routed message's places: its id in each target queue, and, for a persistent message, one
/// store record for all its durable targets (the body stored once). `Some(Err)`: it had to be
/// stored and could not be (the store refuses writes); the publisher gets a nack.
pub(super) fn place(
    vhost: &VHostState,
    targets: Vec<QueueHandle>,
    message: &Arc<Message>,
) -> (Vec<(QueueHandle, Placed)>, StoreCommit) {
    let persistent = message.properties.delivery_mode() == Some(2);
    let (places, members) = allocate(targets, persistent);
    let (msg, stored) = match vhost.persist.get() {
        Some(p) if !members.is_empty() => match p.publish(message, members, now_ms()) {
            Ok((msg, commit)) => (Some(msg), Some(Ok(commit))),
            Err(e) => {
                tracing::warn!(error = %e, "a persistent message could not be stored");
                (None, Some(Err(e)))
            }
        },
        _ => (None, None),
    };
    (placed(places, message, msg).collect(), stored)
}

impl Connection {
    /// The publish a content frame belongs to; `None` on a closing channel (frame ignored);
    /// 505 when the channel has no publish waiting for content.
    pub(super) fn pending_publish(
        &mut self,
        channel: u16,
    ) -> Result<Option<&mut PendingPublish>, (u16, AmqpError)> {
        let unexpected = || {
            (
                channel,
                AmqpError::unexpected_frame("expected method frame, got non method frame instead"),
            )
        };
        let ch = self.channels.get_mut(&channel).ok_or_else(unexpected)?;
        if ch.closing {
            return Ok(None);
        }
        ch.publish.as_mut().map(Some).ok_or_else(unexpected)
    }

    pub(super) async fn on_header(
        &mut self,
        channel: u16,
        header: charon_protocol::ContentHeader,
    ) -> Result<(), (u16, AmqpError)> {
        let Some(p) = self.pending_publish(channel)? else {
            return Ok(());
        };
        if p.header.is_some() {
            return Err((channel, p.content_expected()));
        }
        if header.class_id != CLASS_BASIC {
            return Err((
                channel,
                AmqpError::unexpected_frame(format!(
                    "expected content header for class 60, got one for class {} instead",
                    header.class_id
                ))
                .on(CLASS_BASIC, PUBLISH_METHOD_ID),
            ));
        }
        p.header = Some((header.body_size, header.properties));
        if header.body_size == 0 {
            return self
                .complete_publish(channel)
                .await
                .map_err(|e| (channel, e.on(CLASS_BASIC, PUBLISH_METHOD_ID)));
        }
        Ok(())
    }

    pub(super) async fn on_body(
        &mut self,
        channel: u16,
        payload: bytes::Bytes,
    ) -> Result<(), (u16, AmqpError)> {
        let Some(p) = self.pending_publish(channel)? else {
            return Ok(());
        };
        let Some((size, _)) = &p.header else {
            return Err((channel, p.content_expected()));
        };
        let size = *size;
        if p.first_body.is_none() && p.body.is_empty() && payload.len() as u64 == size {
            p.first_body = Some(payload);
        } else {
            if let Some(first) = p.first_body.take() {
                p.body.extend_from_slice(&first);
            }
            p.body.extend_from_slice(&payload);
        }
        let have = p.first_body.as_ref().map_or(p.body.len(), |b| b.len()) as u64;
        if have >= size {
            return self
                .complete_publish(channel)
                .await
                .map_err(|e| (channel, e.on(CLASS_BASIC, PUBLISH_METHOD_ID)));
        }
        Ok(())
    }

    pub(super) async fn complete_publish(&mut self, channel: u16) -> Result<(), AmqpError> {
        self.has_published = true;
        let ch = self.channel_mut(channel)?;
        let Some(p) = ch.publish.take() else {
            return Ok(());
        };
        let Some((_, properties)) = p.header else {
            return Ok(());
        };
        crate::admin::ChannelStats::bump(&ch.stats.publish, 1);
        let body = match p.first_body {
            Some(b) => b,
            None => p.body.freeze(),
        };
        let seq = if ch.confirm {
            ch.next_seq += 1;
            Some(ch.next_seq)
        } else {
            None
        };
        let exchange = p.method.exchange.as_str();
        let routing_key = p.method.routing_key.as_str();
        self.access
            .check(ResourceKind::Exchange, exchange, Permission::Write)?;
        // CC/BCC, headers-exchange matching and the user_id/expiration checks need decoded
        // properties; decode only when one of those is present.
        let decoded = if properties.flags() & (FLAG_HEADERS | FLAG_EXPIRATION | FLAG_USER_ID) != 0 {
            properties.decode().ok()
        } else {
            None
        };
        let headers = decoded.as_ref().and_then(|d| d.headers().as_ref());
        let (cc, bcc) = match &decoded {
            Some(d) if headers.is_some() => dead_letter::header_routes(d),
            _ => (Vec::new(), Vec::new()),
        };
        let mut keys: Vec<&str> = vec![routing_key];
        keys.extend(cc.iter().chain(&bcc).map(|k| k.as_ref()));
        let mut targets: Vec<QueueHandle> = Vec::new();
        {
            let topo = self
                .vhost
                .topology
                .read()
                .unwrap_or_else(|p| p.into_inner());
            topo.route(exchange, &keys, headers, &mut targets)?;
        }
        if let Some(props) = &decoded {
            check_user_id(props, &self.user, self.impersonator)?;
            check_expiration(props)?;
        }
        // BCC routes but never reaches a consumer: the message goes on without that header.
        // Its BCC keys are kept on the message for dead-lettering.
        let properties = match decoded.as_ref().and_then(dead_letter::strip_bcc) {
            Some(p) => p,
            None => properties,
        };
        let message = Arc::new(
            Message::new(
                Arc::from(exchange),
                Arc::from(routing_key),
                properties,
                body,
            )
            .with_bcc(bcc),
        );
        if targets.is_empty() && p.method.mandatory {
            if let Some(ch) = self.channels.get(&channel) {
                crate::admin::ChannelStats::bump(&ch.stats.return_unroutable, 1);
            }
            encode_basic_return(
                &mut self.out,
                channel,
                code::NO_ROUTE,
                "NO_ROUTE",
                exchange,
                routing_key,
            );
            encode_content(
                &mut self.out,
                channel,
                CLASS_BASIC,
                &message.properties,
                &message.body,
                self.frame_max,
            );
        }
        if let Some(buf) = self.channel_mut(channel)?.tx.as_mut() {
            // Confirm and tx modes exclude each other: no confirm to track here.
            buf.publishes.push((targets, message));
            return Ok(());
        }
        let n_targets = targets.len();
        let (placed, stored) = place(&self.vhost, targets, &message);
        if let Some(seq) = seq {
            let ch = self.channel_mut(channel)?;
            if n_targets > 0 {
                // One confirm per queue that takes it, plus one for the store's commit.
                let n = n_targets + usize::from(stored.is_some());
                ch.pending_confirms
                    .insert(seq, u32::try_from(n).unwrap_or(u32::MAX));
            }
            self.flush_confirms(channel);
            if let Some(stored) = stored {
                let conn = self.handle.clone();
                tokio::spawn(async move {
                    let ack = match stored {
                        Ok(commit) => commit.await.is_ok(),
                        Err(_) => false,
                    };
                    let _ = conn.send(ConnEvent::Confirm { channel, seq, ack });
                });
            }
        }
        for (q, placed) in placed {
            let confirm = seq.map(|seq| ConfirmTo {
                conn: self.handle.clone(),
                channel,
                seq,
            });
            let _ = q.send(QueueCmd::Publish { placed, confirm }).await;
        }
        Ok(())
    }

    /// Acks (multiple) everything below the smallest still-pending publish.
    pub(super) fn flush_confirms(&mut self, channel: u16) {
        let Some(ch) = self.channels.get_mut(&channel) else {
            return;
        };
        let start = ch.acked_upto;
        let upto = match ch.pending_confirms.keys().next() {
            Some(first) => first - 1,
            None => ch.next_seq,
        };
        // Refused publishes: ack what precedes each, then nack it alone.
        while let Some(&n) = ch.nacked.first() {
            if n > upto {
                break;
            }
            ch.nacked.remove(&n);
            if n - 1 > ch.acked_upto {
                encode_basic_ack(&mut self.out, channel, n - 1, n - 1 - ch.acked_upto > 1);
            }
            encode_basic_nack(&mut self.out, channel, n, false, false);
            ch.acked_upto = n;
        }
        if upto > ch.acked_upto {
            let multiple = upto - ch.acked_upto > 1;
            ch.acked_upto = upto;
            encode_basic_ack(&mut self.out, channel, upto, multiple);
        }
        crate::admin::ChannelStats::bump(&ch.stats.confirm, ch.acked_upto - start);
    }
}

/// Property flag bits (basic class) of the properties the broker looks at.
const FLAG_HEADERS: u16 = 0x2000;
const FLAG_EXPIRATION: u16 = 0x0100;
const FLAG_USER_ID: u16 = 0x0010;

/// `rabbit_channel:check_user_id_header/2`: a user_id property must name the authenticated
/// user, unless the user is an impersonator.
fn check_user_id(props: &BasicProperties, user: &str, impersonator: bool) -> Result<(), AmqpError> {
    match props.user_id() {
        Some(claimed) if claimed.as_str() != user && !impersonator => {
            Err(AmqpError::precondition(format!(
                "user_id property set to '{}' but authenticated user was '{user}'",
                claimed.as_str()
            )))
        }
        _ => Ok(()),
    }
}

/// `rabbit_channel:check_expiration_header/1`: an expiration property must be a non-negative
/// integer (as Erlang's `string:to_integer/1` reads it) no larger than the TTL limit.
fn check_expiration(props: &BasicProperties) -> Result<(), AmqpError> {
    let Some(expiration) = props.expiration() else {
        return Ok(());
    };
    match parse_expiration(expiration.as_str()) {
        Ok(()) => Ok(()),
        Err(reason) => Err(AmqpError::precondition(format!(
            "invalid expiration '{}': {reason}",
            expiration.as_str()
        ))),
    }
}

/// The Erlang error term for an invalid expiration, or `Ok`.
fn parse_expiration(s: &str) -> Result<(), String> {
    let (negative, rest) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let digits_end = rest
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(rest.len());
    if digits_end == 0 {
        return Err("no_integer".to_string());
    }
    let (digits, leftover) = rest.split_at(digits_end);
    if !leftover.is_empty() {
        return Err(format!(
            "{{leftover_string,{}}}",
            erlang::string_p(leftover)
        ));
    }
    let trimmed = digits.trim_start_matches('0');
    let magnitude = if trimmed.is_empty() { "0" } else { trimmed };
    let value = magnitude.parse::<i64>().ok();
    if negative && magnitude != "0" {
        return Err(format!("{{value_negative,-{magnitude}}}"));
    }
    match value {
        Some(v) if v <= MAX_EXPIRY => Ok(()),
        _ => Err(format!("{{value_too_large,{magnitude}}}")),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_expiration;

    #[test]
    fn expiration_parses_like_erlang_string_to_integer() {
        assert_eq!(parse_expiration("1000"), Ok(()));
        assert_eq!(parse_expiration("+0"), Ok(()));
        assert_eq!(parse_expiration("-0"), Ok(()));
        assert_eq!(parse_expiration("abc"), Err("no_integer".into()));
        assert_eq!(parse_expiration(""), Err("no_integer".into()));
        assert_eq!(parse_expiration("-"), Err("no_integer".into()));
        assert_eq!(
            parse_expiration("12ab"),
            Err("{leftover_string,\"ab\"}".into())
        );
        assert_eq!(parse_expiration("-5"), Err("{value_negative,-5}".into()));
        assert_eq!(
            parse_expiration("315360000001"),
            Err("{value_too_large,315360000001}".into())
        );
        assert_eq!(
            parse_expiration("99999999999999999999999"),
            Err("{value_too_large,99999999999999999999999}".into())
        );
    }
}
