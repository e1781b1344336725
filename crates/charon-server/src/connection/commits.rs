//! The connection's commit waiter: one task per connection (started with its first persistent
//! publish in confirm mode) waits for the store commits of those publishes and reports each as
//! one more confirm for its channel and sequence number. Commits complete in log order, so the
//! task takes what is waiting in one go and goes through it in order; everything already on
//! disk is answered together: one `ConnEvent::Confirms` per channel and group commit, not one
//! event per publish. A publish is acked once every queue took it and its commit is on disk.

use tokio::sync::mpsc;

use crate::handles::{ConfirmBatch, ConnHandle};
use crate::queue::Durable;

/// Store writes waiting to be confirmed, per connection (the publisher waits when it is full).
const CAPACITY: usize = 4096;

/// A store write a confirm waits for.
struct Waiting {
    channel: u16,
    seq: u64,
    durable: Durable,
}

/// The sending side of a connection's commit waiter.
pub(crate) struct CommitWaiter {
    conn: ConnHandle,
    tx: Option<mpsc::Sender<Waiting>>,
}

impl CommitWaiter {
    /// A waiter reporting to `conn`; its task starts with the first write.
    pub(crate) fn new(conn: ConnHandle) -> Self {
        Self { conn, tx: None }
    }

    /// Confirms publish `seq` on `channel` (ack, or nack if the store refused it) once `durable`
    /// is on disk, after every write handed over before it.
    pub(crate) async fn wait_for(&mut self, channel: u16, seq: u64, durable: Durable) {
        let tx = self.tx.get_or_insert_with(|| start(self.conn.clone()));
        let waiting = Waiting {
            channel,
            seq,
            durable,
        };
        // The task only ends when this sender is dropped.
        let _ = tx.send(waiting).await;
    }
}

fn start(conn: ConnHandle) -> mpsc::Sender<Waiting> {
    let (tx, mut rx) = mpsc::channel::<Waiting>(CAPACITY);
    tokio::spawn(async move {
        let mut waiting = Vec::with_capacity(256);
        let mut answers = ConfirmBatch::default();
        while rx.recv_many(&mut waiting, CAPACITY).await > 0 {
            for w in waiting.drain(..) {
                let ack = match w.durable.ready() {
                    Some(ack) => ack,
                    None => {
                        // What is already on disk goes out before waiting for the next commit.
                        answers.flush();
                        w.durable.wait().await
                    }
                };
                answers.add(&conn, w.channel, w.seq, ack);
            }
            answers.flush();
        }
    });
    tx
}
