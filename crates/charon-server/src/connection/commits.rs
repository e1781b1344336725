//! The connection's commit waiter: confirms for persistent publishes once their store commit
//! is on disk. A publish is acked once every queue took it and its commit is on disk.
//!
//! A persistent publish (appended without a completion, `Durable::index`) waits here by its
//! log index: the connection keeps them in log order and follows the store's durable index
//! with one watch (`CommitWatch`), woken once per group commit, taking everything on disk in
//! one go as one `Confirms` answer per channel. No task, channel send or wait per publish.
//! Other writes (with their own completion, e.g. a delayed exchange's) go through one task per
//! connection (started with the first), which answers them in order as before.

use std::collections::VecDeque;

use tokio::sync::mpsc;

use crate::handles::{ConfirmAnswers, ConfirmBatch, ConnHandle};
use crate::queue::{CommitWatch, Durable};

/// Store writes waiting to be confirmed, per connection (the publisher waits when it is full).
const CAPACITY: usize = 4096;

/// A store write a confirm waits for.
struct Waiting {
    channel: u16,
    seq: u64,
    durable: Durable,
}

/// The connection's commit waiter.
pub(crate) struct CommitWaiter {
    conn: ConnHandle,
    tx: Option<mpsc::Sender<Waiting>>,
    /// Publishes waiting for their log index to be on disk: (channel, seq, index), in order.
    at: VecDeque<(u16, u64, u64)>,
    /// The store's durable index (from the first such publish on).
    watch: Option<CommitWatch>,
    /// The store is gone: nothing more becomes durable.
    gone: bool,
    /// Answers known, not yet applied to the channels (`take_answers`).
    done: Vec<(u16, ConfirmAnswers)>,
}

impl CommitWaiter {
    /// A waiter reporting to `conn`.
    pub(crate) fn new(conn: ConnHandle) -> Self {
        Self {
            conn,
            tx: None,
            at: VecDeque::new(),
            watch: None,
            gone: false,
            done: Vec::new(),
        }
    }

    /// Confirms publish `seq` on `channel` (ack, or nack if the store refused it) once `durable`
    /// is on disk, after every write handed over before it.
    pub(crate) async fn wait_for(&mut self, channel: u16, seq: u64, durable: Durable) {
        if let Some(index) = durable.index() {
            if self.watch.is_none() {
                self.watch = durable.watch();
            }
            self.at.push_back((channel, seq, index));
            // Bounded: past CAPACITY the publisher waits for the next group commits.
            while self.at.len() >= CAPACITY && !self.collect() {
                self.changed().await;
            }
            return;
        }
        if durable.ready() == Some(false) {
            push_answer(&mut self.done, channel, seq, false);
            return;
        }
        let tx = self.tx.get_or_insert_with(|| start(self.conn.clone()));
        let waiting = Waiting {
            channel,
            seq,
            durable,
        };
        // The task only ends when this sender is dropped.
        let _ = tx.send(waiting).await;
    }

    /// [`CommitWaiter::wait_for`] when it would not wait: a persistent publish's log index
    /// taken while there is room. Otherwise `durable` comes back for `wait_for`.
    pub(crate) fn try_wait_for(
        &mut self,
        channel: u16,
        seq: u64,
        durable: Durable,
    ) -> Result<(), Durable> {
        match durable.index() {
            Some(index) if self.at.len() + 1 < CAPACITY => {
                if self.watch.is_none() {
                    self.watch = durable.watch();
                }
                self.at.push_back((channel, seq, index));
                Ok(())
            }
            _ => Err(durable),
        }
    }

    /// Whether publishes wait for a commit ([`CommitWaiter::changed`] then has work).
    pub(crate) fn waiting(&self) -> bool {
        !self.at.is_empty()
    }

    /// Completes after the next group commit (for the connection's `select!`).
    pub(crate) async fn changed(&mut self) {
        match self.watch.as_mut() {
            Some(w) if !self.gone => {
                if !w.changed().await {
                    self.gone = true;
                }
            }
            _ => std::future::pending().await,
        }
    }

    /// A copy of the store's durable-index watch, for a wait on the next group commit that lives
    /// across the connection loop's turns ([`next_commit`]); `None` before the first persistent
    /// publish.
    pub(crate) fn loop_watch(&self) -> Option<CommitWatch> {
        self.watch.clone()
    }

    /// The loop's wait found the store gone: nothing more becomes durable.
    pub(crate) fn store_gone(&mut self) {
        self.gone = true;
    }

    /// Moves what is on disk (or can no longer be) to the answers; whether anything moved.
    fn collect(&mut self) -> bool {
        let Some(w) = self.watch.as_mut() else {
            return false;
        };
        let (index, failed) = w.seen();
        let failed = failed || self.gone;
        let mut moved = false;
        while let Some(&(channel, seq, at)) = self.at.front() {
            let ack = if at <= index {
                true
            } else if failed {
                false
            } else {
                break;
            };
            self.at.pop_front();
            push_answer(&mut self.done, channel, seq, ack);
            moved = true;
        }
        moved
    }

    /// The answers known now, one per channel, for the connection to apply.
    pub(crate) fn take_answers(&mut self) -> Vec<(u16, ConfirmAnswers)> {
        if !self.at.is_empty() {
            self.collect();
        }
        std::mem::take(&mut self.done)
    }
}

/// Completes after the next group commit `watch` has not seen, giving the watch back and whether
/// the store is still there (the connection loop's long-lived commit wait: made again only after
/// it fired, not once per turn of the loop).
pub(crate) async fn next_commit(mut watch: CommitWatch) -> (CommitWatch, bool) {
    let alive = watch.changed().await;
    (watch, alive)
}

fn push_answer(done: &mut Vec<(u16, ConfirmAnswers)>, channel: u16, seq: u64, ack: bool) {
    match done.iter_mut().rev().find(|(c, _)| *c == channel) {
        Some((_, answers)) => answers.push(seq, ack),
        None => {
            let mut answers = ConfirmAnswers::default();
            answers.push(seq, ack);
            done.push((channel, answers));
        }
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
