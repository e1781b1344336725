//! tx.select/commit/rollback and confirm.select.

use charon_protocol::AMQPClass;
use charon_protocol::methods::{confirm, tx};

use super::super::Connection;
use super::super::channel::TxBuffer;
use super::consume::Settle;
use crate::error::{AmqpError, code};
use crate::queue::QueueCmd;

impl Connection {
    pub(super) fn on_confirm_select(
        &mut self,
        channel: u16,
        s: confirm::Select,
    ) -> Result<(), AmqpError> {
        let ch = self.channel_mut(channel)?;
        if ch.tx.is_some() {
            return Err(AmqpError::precondition(
                "cannot switch from tx to confirm mode",
            ));
        }
        ch.confirm = true;
        ch.stats
            .confirm_mode
            .store(true, std::sync::atomic::Ordering::Relaxed);
        if !s.nowait {
            self.reply(
                channel,
                AMQPClass::Confirm(confirm::AMQPMethod::SelectOk(confirm::SelectOk {})),
            );
        }
        Ok(())
    }

    pub(super) async fn on_tx(&mut self, channel: u16, m: tx::AMQPMethod) -> Result<(), AmqpError> {
        let ch = self.channel_mut(channel)?;
        match m {
            tx::AMQPMethod::Select(_) => {
                if ch.confirm {
                    return Err(AmqpError::precondition(
                        "cannot switch from confirm to tx mode",
                    ));
                }
                ch.tx.get_or_insert_with(TxBuffer::default);
                self.reply(
                    channel,
                    AMQPClass::Tx(tx::AMQPMethod::SelectOk(tx::SelectOk {})),
                );
            }
            tx::AMQPMethod::Commit(_) => {
                let Some(buf) = ch.tx.replace(TxBuffer::default()) else {
                    return Err(AmqpError::precondition("channel is not transactional"));
                };
                // commit-ok once the transaction's persistent messages are on disk.
                let mut commits = Vec::new();
                for (targets, message) in buf.publishes {
                    let (placed, stored) = super::publish::place(&self.vhost, targets, &message);
                    commits.extend(stored);
                    for (q, placed) in placed {
                        let _ = q
                            .send(QueueCmd::Publish {
                                placed,
                                confirm: None,
                            })
                            .await;
                    }
                }
                for c in commits {
                    let ok = match c {
                        Ok(commit) => commit.await.is_ok(),
                        Err(_) => false,
                    };
                    if !ok {
                        return Err(AmqpError::internal("the transaction could not be stored"));
                    }
                }
                for (tag, multiple, how) in buf.settles {
                    let how = match how {
                        0 => Settle::Ack,
                        1 => Settle::Requeue,
                        _ => Settle::Reject,
                    };
                    self.settle_now(channel, tag, multiple, how).await?;
                }
                self.reply(
                    channel,
                    AMQPClass::Tx(tx::AMQPMethod::CommitOk(tx::CommitOk {})),
                );
            }
            tx::AMQPMethod::Rollback(_) => {
                // Publishes and settlements are dropped; the messages stay unacked.
                if ch.tx.replace(TxBuffer::default()).is_none() {
                    return Err(AmqpError::precondition("channel is not transactional"));
                }
                self.reply(
                    channel,
                    AMQPClass::Tx(tx::AMQPMethod::RollbackOk(tx::RollbackOk {})),
                );
            }
            _ => {
                return Err(AmqpError::new(
                    code::COMMAND_INVALID,
                    "unimplemented method",
                ));
            }
        }
        Ok(())
    }
}
