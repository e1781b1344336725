//! basic.publish: its content frames, then route, validate, place, confirm.

use std::sync::Arc;

use charon_core::arguments::MAX_EXPIRY;
use charon_core::routing::{has_header_routes, header_routes, strip_bcc};
use charon_core::{Body, Message};
use charon_protocol::{
    BasicProperties, CLASS_BASIC, RawProperties, encode_basic_ack, encode_basic_nack,
    encode_basic_return, encode_content, erlang,
};

use super::super::Connection;
use super::super::channel::{PUBLISH_METHOD_ID, PendingPublish};
use super::super::confirms::ConfirmReply;
use super::super::shapes::BodyPart;

use crate::access::{Permission, ResourceKind};
use crate::error::{AmqpError, ReplyCode, ServerError};
use crate::handles::{ConfirmTo, Placed, QueueCmd, QueueHandle};
use crate::locks::RwLockExt;
use crate::queue;

/// Body bytes reserved at once when a body spans several frames (a larger body grows, and is
/// copied to its size when complete if that wasted more than a quarter).
const EXACT_BODY_RESERVE: u64 = 1 << 20;

impl Connection {
    /// The publish a content frame belongs to; `None` on a closing channel (frame ignored);
    /// 505 when the channel has no publish waiting for content.
    pub(super) fn pending_publish(
        &mut self,
        channel: u16,
    ) -> Result<Option<&mut PendingPublish>, (u16, AmqpError)> {
        let unexpected = || (channel, AmqpError::from(ServerError::ExpectedMethodFrame));
        let ch = self.channels.get_mut(&channel).ok_or_else(unexpected)?;
        if ch.closing {
            return Ok(None);
        }
        ch.publish.as_mut().map(Some).ok_or_else(unexpected)
    }

    /// A content header; `Ok(true)`: the content is complete (an empty body), the caller
    /// completes the publish ([`Connection::complete_publish`] or the fast path's
    /// `publish_now`).
    pub(in crate::connection) fn on_header(
        &mut self,
        channel: u16,
        header: charon_protocol::ContentHeader,
    ) -> Result<bool, (u16, AmqpError)> {
        // Read before the channel is borrowed: one channel lookup a header.
        let max = self.broker.config().max_message_size;
        let Some(p) = self.pending_publish(channel)? else {
            return Ok(false);
        };
        if p.header.is_some() {
            return Err((channel, p.content_expected()));
        }
        if header.class_id != CLASS_BASIC {
            return Err((
                channel,
                AmqpError::from(ServerError::WrongContentClass {
                    class_id: header.class_id,
                })
                .on(CLASS_BASIC, PUBLISH_METHOD_ID),
            ));
        }
        if let Err(e) = check_body_size(header.body_size, max) {
            return Err((channel, e.on(CLASS_BASIC, PUBLISH_METHOD_ID)));
        }
        p.header = Some((header.body_size, header.properties));
        Ok(header.body_size == 0)
    }

    /// A content body frame; `Ok(true)`: the content is complete, as for
    /// [`Connection::on_header`].
    pub(in crate::connection) fn on_body(
        &mut self,
        channel: u16,
        payload: BodyPart<'_>,
    ) -> Result<bool, (u16, AmqpError)> {
        let Some(p) = self.pending_publish(channel)? else {
            return Ok(false);
        };
        let Some((size, _)) = &p.header else {
            return Err((channel, p.content_expected()));
        };
        let size = *size;
        let had = p.first_body.as_ref().map_or(p.body.len() as u64, Body::len);
        let len = payload.octets().len() as u64;
        if had + len > size {
            // RabbitMQ's command assembler: a frame error, closing the connection.
            return Err((
                channel,
                AmqpError::from(ServerError::ContentBodyOverrun).on(CLASS_BASIC, PUBLISH_METHOD_ID),
            ));
        }
        if p.first_body.is_none() && p.body.is_empty() && len == size {
            // A small body copied out of the read buffer (`shapes::BodyPart::into_body`).
            p.first_body = Some(payload.into_body());
        } else {
            if p.body.is_empty() {
                // One allocation of the body's size: growing by doubling would hold up to
                // twice the bytes the memory budget counts for as long as the message is
                // queued. Capped: the size is only announced (see `complete_publish`).
                p.body
                    .reserve(usize::try_from(size.min(EXACT_BODY_RESERVE)).unwrap_or(0));
            }
            if let Some(first) = p.first_body.take() {
                p.body.extend_from_slice(first.wire_bytes());
            }
            p.body.extend_from_slice(payload.octets());
        }
        let have = p.first_body.as_ref().map_or(p.body.len() as u64, Body::len);
        Ok(have >= size)
    }

    /// The publish's content is complete: route it, check it, place it in its queues (and the
    /// store) and track its confirm; in a transaction, keep it for tx.commit.
    pub(super) async fn complete_publish(&mut self, channel: u16) -> Result<(), AmqpError> {
        match self.prepare_publish(channel)? {
            None => Ok(()),
            Some(prepared) => self.finish_prepared(channel, prepared).await,
        }
    }

    /// The waiting part of a prepared publish: the delayed exchange's hand-over, or placing it
    /// in its queues (and the store) and tracking its confirm.
    pub(super) async fn finish_prepared(
        &mut self,
        channel: u16,
        prepared: Prepared,
    ) -> Result<(), AmqpError> {
        match prepared {
            Prepared::Delayed {
                seq,
                message,
                delay,
                durable,
            } => {
                self.publish_delayed(channel, seq, message, delay, durable)
                    .await
            }
            Prepared::Place {
                seq,
                targets,
                message,
            } => self.place_and_confirm(channel, seq, targets, message).await,
        }
    }

    /// The part of [`Connection::complete_publish`] that never waits: routing, checks,
    /// basic.return, a transaction's buffer. What is left to do comes back.
    pub(super) fn prepare_publish(&mut self, channel: u16) -> Result<Option<Prepared>, AmqpError> {
        self.has_published = true;
        let ch = self.channel_mut(channel)?;
        let Some(p) = ch.publish.take() else {
            return Ok(None);
        };
        let Some((_, properties)) = p.header else {
            return Ok(None);
        };
        crate::admin::ChannelStats::bump(&ch.stats.publish, 1);
        // Routing cannot change the channel's mode: read it now, not by a second lookup.
        let in_tx = ch.tx.is_some();
        let body = match p.first_body {
            Some(b) => b,
            // A large body that outgrew its first allocation: copied once to its size.
            None if p.body.capacity() - p.body.len() > p.body.len() / 4 => {
                Body::Resident(bytes::Bytes::copy_from_slice(&p.body))
            }
            None => Body::Resident(p.body.freeze()),
        };
        let names = (p.exchange, p.routing_key);
        let properties = ch.shapes.properties(properties);
        let seq = ch.confirm.then(|| ch.confirms.next_seq());
        let targets = std::mem::take(&mut self.spare_targets);
        let (message, targets, delay) = self.route(names, properties, body, targets)?;
        if let Some((delay, durable)) = delay {
            return Ok(Some(Prepared::Delayed {
                seq,
                message,
                delay,
                durable,
            }));
        }
        if targets.is_empty() && p.mandatory {
            self.return_unroutable(channel, &message);
        }
        if in_tx && let Some(buf) = self.channel_mut(channel)?.tx.as_mut() {
            // Confirm and tx modes exclude each other: no confirm to track here.
            buf.publishes.push((targets, message));
            return Ok(None);
        }
        Ok(Some(Prepared::Place {
            seq,
            targets,
            message,
        }))
    }

    /// Routes a publish (CC/BCC included) after checking write permission on its exchange,
    /// then checks its properties; returns the message as queues get it (without BCC) and its
    /// target queues — or, for a delayed exchange and an `x-delay`, no targets and the delay
    /// (with whether the exchange is durable): it is routed when due (`exchange_delay`).
    #[allow(clippy::type_complexity)]
    fn route(
        &mut self,
        names: (Arc<str>, Arc<str>),
        properties: RawProperties,
        body: Body,
        mut targets: Vec<QueueHandle>,
    ) -> Result<(Arc<Message>, Vec<QueueHandle>, Option<(u64, bool)>), AmqpError> {
        let exchange: &str = &names.0;
        let routing_key: &str = &names.1;
        self.access
            .check(ResourceKind::Exchange, exchange, Permission::Write)?;
        // CC/BCC, headers-exchange matching, the delayed exchange's `x-delay` and the
        // user_id/expiration checks need decoded properties; decode only when one of those
        // can apply (headers without CC/BCC keys, routed where no header is read, are not).
        let flags = properties.flags();
        let decoded = if flags & (FLAG_EXPIRATION | FLAG_USER_ID) != 0
            || (flags & FLAG_HEADERS != 0 && !self.headers_unused(exchange, &properties))
        {
            properties.decode().ok()
        } else {
            None
        };
        let headers = decoded.as_ref().and_then(|d| d.headers().as_ref());
        // CC/BCC keys only when headers were decoded: the usual publish has no lists to make
        // and drop (two out-of-line drops of empty `Vec`s a publish, ~45 instructions).
        let routes = match &decoded {
            Some(d) if headers.is_some() => Some(header_routes(d)),
            _ => None,
        };
        let (cc, bcc): (&[Arc<str>], &[Arc<str>]) = match &routes {
            Some((cc, bcc)) => (cc, bcc),
            None => (&[], &[]),
        };
        // The routing key, then CC and BCC: without those (the usual case) no Vec is made.
        let with_cc: Vec<&str>;
        let keys: &[&str] = if cc.is_empty() && bcc.is_empty() {
            std::slice::from_ref(&routing_key)
        } else {
            with_cc = std::iter::once(routing_key)
                .chain(cc.iter().chain(bcc).map(|k| k.as_ref()))
                .collect();
            &with_cc
        };
        // `targets` is empty (a spare list, or new): room for the usual one target without
        // growing from empty.
        targets.clear();
        targets.reserve(1);
        // A route that depends on the topology, the exchange and the key alone (no headers
        // read, no CC/BCC, no topic permissions to check: `connection/route_cache.rs`) is
        // taken from the connection's cache while the topology is unchanged.
        let cacheable = decoded.is_none() && !self.broker.access().topics.any();
        let cached = cacheable
            && self
                .route_cache
                .route(&self.vhost.topology, &names.0, &names.1, &mut targets);
        let delay = if cached {
            None
        } else {
            let topo = self.vhost.topology.read_recover();
            // One exchange lookup for the delay check and the routing.
            let x = topo.exchange(exchange);
            let delay = x.and_then(|x| crate::exchange_delay::delay_through(x, headers));
            crate::topic_access::check_publish(&self.broker, &topo, &self.user, exchange, keys)?;
            if delay.is_none() {
                match x {
                    Some(x) => {
                        topo.route_from(x, keys, headers, &mut targets)?;
                        if cacheable && !x.delayed {
                            self.route_cache.remember(
                                self.vhost.topology.generation(),
                                &names.0,
                                &names.1,
                                &targets,
                                &x.stats,
                            );
                        }
                    }
                    None => topo.route(exchange, keys, headers, &mut targets)?,
                }
            }
            delay
        };
        if let Some(props) = &decoded {
            self.validate(props)?;
        }
        // BCC routes but never reaches a consumer: the message goes on without that header.
        // Its BCC keys are kept on the message for dead-lettering.
        let properties = match decoded.as_ref().and_then(strip_bcc) {
            Some(p) => p,
            None => properties,
        };
        let mut message = Message::new(names.0, names.1, properties, body);
        if let Some((_, bcc)) = routes
            && !bcc.is_empty()
        {
            message = message.with_bcc(bcc);
        }
        Ok((Arc::new(message), targets, delay))
    }

    /// Whether a publish's headers change nothing: no `CC`/`BCC` key (read raw) and neither a
    /// delayed exchange nor a reachable headers exchange reads them. Then routing without
    /// decoding them gives what routing with them gives.
    fn headers_unused(&self, exchange: &str, properties: &RawProperties) -> bool {
        if has_header_routes(properties) != Some(false) {
            return false;
        }
        let topo = self.vhost.topology.read_recover();
        !topo.exchange(exchange).is_some_and(|x| x.delayed) && !topo.routing_reads_headers(exchange)
    }

    /// The checks RabbitMQ's channel makes on a publish's properties (406 when refused).
    fn validate(&self, props: &BasicProperties) -> Result<(), AmqpError> {
        check_user_id(props, &self.user, self.impersonator)?;
        check_expiration(props)
    }

    /// basic.return of a mandatory publish that reached no queue.
    fn return_unroutable(&mut self, channel: u16, message: &Message) {
        if let Some(ch) = self.channels.get(&channel) {
            crate::admin::ChannelStats::bump(&ch.stats.return_unroutable, 1);
        }
        encode_basic_return(
            &mut self.out,
            channel,
            ReplyCode::NoRoute.code(),
            ReplyCode::NoRoute.name(),
            &message.exchange,
            &message.routing_key,
        );
        encode_content(
            &mut self.out,
            channel,
            CLASS_BASIC,
            &message.properties,
            message.body.wire_bytes(),
            self.frame_max,
        );
    }

    /// Places a routed message in its queues (and the store); in confirm mode (`seq`), it is
    /// confirmed once every queue took it and its store commit, if any, is on disk.
    pub(super) async fn place_and_confirm(
        &mut self,
        channel: u16,
        seq: Option<u64>,
        targets: Vec<QueueHandle>,
        message: Arc<Message>,
    ) -> Result<(), AmqpError> {
        let (placed, stored) = self.place_start(channel, seq, targets, &message)?;
        self.place_finish(channel, seq, placed, stored).await;
        Ok(())
    }

    /// The message's places (and its store write) and the confirm it expects, without waiting.
    pub(super) fn place_start(
        &mut self,
        channel: u16,
        seq: Option<u64>,
        targets: Vec<QueueHandle>,
        message: &Arc<Message>,
    ) -> Result<Placements, AmqpError> {
        let n_targets = targets.len();
        let (placed, stored) = queue::place(&self.vhost, targets, message);
        if let Some(seq) = seq {
            let ch = self.channel_mut(channel)?;
            if n_targets > 0 {
                // One answer per queue that takes it, plus one for the store's commit.
                let n = n_targets + usize::from(stored.is_some());
                ch.confirms
                    .expect(seq, u32::try_from(n).unwrap_or(u32::MAX));
            }
            self.confirm_due(channel);
        }
        Ok((placed, stored))
    }

    /// Waits for the commit waiter to take a stored message's commit (confirm mode), then hands
    /// the message to its queues, waiting while a queue's channel is full.
    pub(super) async fn place_finish(
        &mut self,
        channel: u16,
        seq: Option<u64>,
        placed: Vec<(QueueHandle, Placed)>,
        stored: Option<crate::persist::Durable>,
    ) {
        if let (Some(seq), Some(stored)) = (seq, stored) {
            self.commits.wait_for(channel, seq, stored).await;
        }
        for (q, placed) in placed {
            let confirm = seq.map(|seq| ConfirmTo {
                conn: self.handle.clone(),
                channel,
                seq,
            });
            let _ = q.send(QueueCmd::Publish { placed, confirm }).await;
            self.published_to(&q);
        }
    }

    /// A publish was handed to `q`: if the queue is behind (its page-out lags, or publishes it
    /// has not taken exceed `page_out_flow_bytes`), this connection stops reading until it has
    /// caught up (`handles::page_flow`).
    pub(super) fn published_to(&mut self, q: &QueueHandle) {
        if !q.page_flow().is_on() && q.inbox_bytes() > self.broker.config().page_out_flow_bytes {
            // The queue is behind with what was sent: it lowers the flag once it caught up
            // (the kick makes it look, should it have emptied its channel meanwhile).
            q.page_flow().set(true);
            q.kick();
        }
        if q.page_flow().is_on() {
            self.wait_for_page_out(q);
        }
    }

    /// Notes that `channel` may have confirms to send; they go out at the next flush, so the
    /// confirms of one batch of events coalesce into `multiple=true` acks.
    pub(super) fn confirm_due(&mut self, channel: u16) {
        if !self.confirms_due.contains(&channel) {
            self.confirms_due.push(channel);
        }
    }

    /// Sends what the channel's confirms allow now (see `ConfirmTracker::flush`).
    pub(crate) fn flush_confirms(&mut self, channel: u16) {
        let Some(ch) = self.channels.get_mut(&channel) else {
            return;
        };
        // The replies' room is kept for the next flush (no allocation per batch of confirms).
        let mut replies = std::mem::take(&mut self.confirm_replies);
        let start = ch.confirms.confirmed();
        ch.confirms.flush(&mut replies);
        crate::admin::ChannelStats::bump(&ch.stats.confirm, ch.confirms.confirmed() - start);
        for r in replies.drain(..) {
            match r {
                ConfirmReply::Ack { seq, multiple } => {
                    encode_basic_ack(&mut self.out, channel, seq, multiple);
                }
                ConfirmReply::Nack { seq } => {
                    encode_basic_nack(&mut self.out, channel, seq, false, false);
                }
            }
        }
        self.confirm_replies = replies;
    }
}

/// What a complete publish still has to do after [`Connection::prepare_publish`].
pub(in crate::connection) enum Prepared {
    /// Held by a delayed exchange.
    Delayed {
        seq: Option<u64>,
        message: Arc<Message>,
        delay: u64,
        durable: bool,
    },
    /// Placed in its target queues (none: unroutable, confirmed at once).
    Place {
        seq: Option<u64>,
        targets: Vec<QueueHandle>,
        message: Arc<Message>,
    },
}

/// A message at each of its queues, and its store write when it has one.
pub(super) type Placements = (Vec<(QueueHandle, Placed)>, Option<crate::persist::Durable>);

/// Property flag bits (basic class) of the properties the broker looks at.
const FLAG_HEADERS: u16 = 0x2000;
const FLAG_EXPIRATION: u16 = 0x0100;
const FLAG_USER_ID: u16 = 0x0010;

/// `rabbit_channel:check_user_id_header/2`: a user_id property must name the authenticated
/// user, unless the user is an impersonator.
fn check_user_id(props: &BasicProperties, user: &str, impersonator: bool) -> Result<(), AmqpError> {
    match props.user_id() {
        Some(claimed) if claimed.as_str() != user && !impersonator => {
            Err(ServerError::UserIdMismatch {
                claimed: claimed.as_str().to_string(),
                user: user.to_string(),
            }
            .into())
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
        Err(reason) => Err(ServerError::InvalidExpiration {
            value: expiration.as_str().to_string(),
            reason,
        }
        .into()),
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

/// Refuses a content header announcing a body over the limits before any of it is read:
/// above RabbitMQ's hard cap (512 MiB) a frame error closing the connection (501, its
/// command assembler's text); above `max` (`max_message_size`) 406 on the channel with
/// RabbitMQ's channel text (which RabbitMQ sends once the body is in; here it is sent at once
/// and the body frames that follow are dropped unread as the channel is closing).
fn check_body_size(size: u64, max: u64) -> Result<(), AmqpError> {
    use crate::config::MAX_MSG_SIZE;
    if size > MAX_MSG_SIZE {
        return Err(ServerError::ContentBodyTooLarge {
            size,
            max: MAX_MSG_SIZE,
        }
        .into());
    }
    if size > max {
        return Err(ServerError::MessageTooLarge {
            size,
            max,
            configured: max != MAX_MSG_SIZE,
        }
        .into());
    }
    Ok(())
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
