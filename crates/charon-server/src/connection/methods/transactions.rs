//! tx.select/commit/rollback and confirm.select.

use charon_protocol::AMQPClass;
use charon_protocol::methods::{confirm, tx};

use super::super::Connection;
use super::super::channel::TxBuffer;
use crate::error::{AmqpError, ServerError};
use crate::handles::QueueCmd;
use crate::queue;

impl Connection {
    pub(super) fn on_confirm_select(
        &mut self,
        channel: u16,
        s: confirm::Select,
    ) -> Result<(), AmqpError> {
        let ch = self.channel_mut(channel)?;
        if ch.tx.is_some() {
            return Err(ServerError::TxToConfirm.into());
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
                    return Err(ServerError::ConfirmToTx.into());
                }
                ch.tx.get_or_insert_with(TxBuffer::default);
                self.reply(
                    channel,
                    AMQPClass::Tx(tx::AMQPMethod::SelectOk(tx::SelectOk {})),
                );
            }
            tx::AMQPMethod::Commit(_) => {
                let Some(buf) = ch.tx.replace(TxBuffer::default()) else {
                    return Err(ServerError::NotTransactional.into());
                };
                // commit-ok once the transaction's persistent messages are on disk.
                let mut commits = Vec::new();
                for (targets, message) in buf.publishes {
                    let (placed, stored) = queue::place(&self.vhost, targets, &message);
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
                    if !c.wait().await {
                        return Err(ServerError::TxNotStored.into());
                    }
                }
                for (tag, multiple, how) in buf.settles {
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
                    return Err(ServerError::NotTransactional.into());
                }
                self.reply(
                    channel,
                    AMQPClass::Tx(tx::AMQPMethod::RollbackOk(tx::RollbackOk {})),
                );
            }
            _ => {
                return Err(ServerError::UnimplementedMethod.into());
            }
        }
        Ok(())
    }
}
