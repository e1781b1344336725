//! The handle through which everything else reaches a queue actor.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::mpsc;

/// Capacity of a queue's command channel: publishers wait (TCP backpressure) when it is full.
pub(crate) const QUEUE_COMMAND_CAPACITY: usize = 4096;

/// Commands a queue actor accepts. Extended as the actor lands (publish, consume, ack, ...).
#[derive(Debug)]
pub enum QueueCmd {
    /// Credit became available (connection backlog drained, channel acks, channel.flow on):
    /// run the delivery loop again.
    Kick,
}

#[derive(Debug)]
struct Shared {
    id: u64,
    name: Arc<str>,
    tx: mpsc::Sender<QueueCmd>,
}

/// A cheap, clonable reference to one queue actor.
#[derive(Debug, Clone)]
pub struct QueueHandle {
    shared: Arc<Shared>,
}

static NEXT_QUEUE_ID: AtomicU64 = AtomicU64::new(1);

impl QueueHandle {
    /// Creates a handle and the receiving end its actor will own.
    pub fn new(name: Arc<str>) -> (Self, mpsc::Receiver<QueueCmd>) {
        let (tx, rx) = mpsc::channel(QUEUE_COMMAND_CAPACITY);
        let id = NEXT_QUEUE_ID.fetch_add(1, Ordering::Relaxed);
        (
            Self {
                shared: Arc::new(Shared { id, name, tx }),
            },
            rx,
        )
    }

    /// The queue's name.
    pub fn name(&self) -> &Arc<str> {
        &self.shared.name
    }

    /// Broker-unique id of this queue instance (a redeclared queue gets a new one).
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// Whether both handles reach the same actor.
    pub fn same(&self, other: &QueueHandle) -> bool {
        self.shared.id == other.shared.id
    }

    /// Sends a command, waiting while the queue's channel is full.
    /// Returns false if the queue is gone (deleted).
    pub async fn send(&self, cmd: QueueCmd) -> bool {
        self.shared.tx.send(cmd).await.is_ok()
    }

    /// Asks the actor to retry deliveries. Never blocks: if the channel is full the actor is
    /// busy anyway and will run its delivery loop after the batch.
    pub fn kick(&self) {
        let _ = self.shared.tx.try_send(QueueCmd::Kick);
    }
}
