//! basic.ack/nack/reject beside the general frame dispatch, gathered per queue.
//!
//! A settle on an open channel (no transaction, no content expected) is taken off the channel
//! at once, exactly as [`Connection::settle_now`] does, but its queue command is not sent
//! yet: consecutive settles of one read batch are gathered into one command per queue and
//! kind (a consumer that nacks message by message, scenario d, sends dozens per read), sent
//! when a frame of another kind comes or the batch ends ([`Connection::send_settles`]). So the
//! queue sees the same ids in the same order, in fewer commands, and no settle costs a future.
//! Anything else (an unknown tag, a closing channel, a transaction) takes the general path,
//! after the gathered commands went out, and gets its error or buffering there.

use charon_core::MsgId;
use charon_protocol::methods::basic;
use charon_protocol::{AMQPClass, Frame};

use super::super::Connection;
use super::super::channel::Settle;
use crate::handles::{QueueCmd, QueueHandle};

/// Settles taken off their channels whose queue commands are not sent yet: (queue, how, ids).
pub(crate) type Gathered = Vec<(QueueHandle, Settle, Vec<MsgId>)>;

impl Connection {
    /// Settles `frame` if it is a basic.ack/nack/reject the fast path takes; gives anything
    /// else back.
    pub(in crate::connection) fn settle_fast(&mut self, frame: Frame) -> Option<Frame> {
        if self.closing {
            return Some(frame);
        }
        let Frame::Method { channel, method } = &frame else {
            return Some(frame);
        };
        let (tag, multiple, how) = match &**method {
            AMQPClass::Basic(basic::AMQPMethod::Ack(a)) => {
                (a.delivery_tag, a.multiple, Settle::Ack)
            }
            AMQPClass::Basic(basic::AMQPMethod::Nack(n)) => {
                (n.delivery_tag, n.multiple, requeue_or_reject(n.requeue))
            }
            AMQPClass::Basic(basic::AMQPMethod::Reject(r)) => {
                (r.delivery_tag, false, requeue_or_reject(r.requeue))
            }
            _ => return Some(frame),
        };
        let channel = *channel;
        if self.settle_parts(channel, tag, multiple, how) {
            None
        } else {
            Some(frame)
        }
    }

    /// Settles `tag` (`multiple`) on `channel` as the fast path does: true when taken, false
    /// when the general path must answer it (nothing changed then).
    pub(in crate::connection) fn settle_parts(
        &mut self,
        channel: u16,
        tag: u64,
        multiple: bool,
        how: Settle,
    ) -> bool {
        if self.closing || channel == 0 {
            return false;
        }
        let Some(ch) = self.channels.get_mut(&channel) else {
            return false;
        };
        if ch.closing || ch.publish.is_some() || ch.tx.is_some() {
            return false;
        }
        if !multiple {
            // One tag (scenario d's nacks): `take_tags` without its per-call `Vec`s.
            // An unknown tag changes nothing here: the general path answers it (406).
            let Some(u) = ch.unacked.remove(tag) else {
                return false;
            };
            ch.limit.settle(1);
            if how == Settle::Ack {
                crate::admin::ChannelStats::bump(&ch.stats.ack, 1);
            }
            ch.stats.set_unacked(ch.unacked.len());
            match self.settles.last_mut() {
                Some((last, kind, gathered)) if *kind == how && last.same(&u.queue) => {
                    gathered.push(u.id);
                }
                _ => self.settles.push((u.queue, how, vec![u.id])),
            }
            return true;
        }
        // An unknown tag changes nothing here: the general path answers it (406).
        let Some(groups) = ch.take_tags(tag, multiple) else {
            return false;
        };
        if how == Settle::Ack {
            let n: usize = groups.iter().map(|(_, ids)| ids.len()).sum();
            crate::admin::ChannelStats::bump(&ch.stats.ack, n as u64);
        }
        ch.stats.set_unacked(ch.unacked.len());
        for (q, ids) in groups {
            match self.settles.last_mut() {
                Some((last, kind, gathered)) if *kind == how && last.same(&q) => {
                    gathered.extend_from_slice(&ids);
                }
                _ => self.settles.push((q, how, ids)),
            }
        }
        true
    }

    /// Sends the gathered settles' commands, in order (waiting while a queue's channel is
    /// full, as `settle_now` does).
    pub(in crate::connection) async fn send_settles(&mut self) {
        // Publishes gathered before these settles go first.
        if !self.publish_batches.is_empty() {
            self.flush_publishes().await;
        }
        let mut gathered = std::mem::take(&mut self.settles);
        for (q, how, ids) in gathered.drain(..) {
            let cmd = command(how, ids);
            if let Err(Some(cmd)) = q.try_send(cmd) {
                let _ = q.send(cmd).await;
            }
        }
        if self.settles.is_empty() {
            // Keep the room for the next batch.
            self.settles = gathered;
        }
    }
}

pub(super) fn requeue_or_reject(requeue: bool) -> Settle {
    if requeue {
        Settle::Requeue
    } else {
        Settle::Reject
    }
}

/// The queue command for settled ids (as `settle_now`).
pub(super) fn command(how: Settle, ids: Vec<MsgId>) -> QueueCmd {
    match how {
        Settle::Ack => QueueCmd::Ack { ids },
        Settle::Requeue => QueueCmd::Requeue { ids },
        Settle::Return => QueueCmd::Return { ids },
        Settle::Reject => QueueCmd::Reject { ids },
    }
}
