//! The handle through which everything else reaches a queue actor, and the commands it takes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use charon_core::{ConsumerId, ConsumerSpec, CoreError, GetResult, Message, MsgId};
use tokio::sync::{mpsc, oneshot};

use super::conn::ConnHandle;
use super::flow::ChannelLimit;

/// Capacity of a queue's command channel: publishers wait (TCP backpressure) when it is full.
pub(crate) const QUEUE_COMMAND_CAPACITY: usize = 4096;

/// A message's place in the store as one queue sees it: the store's message id (to read the
/// body back). `None`: the message is not in the store for this queue.
pub type Stored = Option<u64>;

/// A message handed to a queue: its id there (allocated ahead by the sender with
/// [`QueueHandle::alloc_id`]) and whether the store already holds it for this queue.
#[derive(Debug, Clone)]
pub struct Placed {
    /// The message.
    pub message: Arc<Message>,
    /// Its id in the receiving queue.
    pub id: MsgId,
    /// Whether the store holds it as a member of the receiving queue (the sender wrote it).
    pub stored: Stored,
}

/// Where a publisher wants its confirm.
#[derive(Debug)]
pub struct ConfirmTo {
    /// The publishing connection.
    pub conn: ConnHandle,
    /// Its channel.
    pub channel: u16,
    /// The publish sequence number.
    pub seq: u64,
}

/// Where a consumer's deliveries go.
#[derive(Debug, Clone)]
pub struct ConsumerTarget {
    /// The consuming connection.
    pub conn: ConnHandle,
    /// Its channel.
    pub channel: u16,
    /// The channel's flow/prefetch gate.
    pub limit: Arc<ChannelLimit>,
    /// Consumer tag.
    pub tag: Arc<str>,
}

/// Counts a queue reports (declare-ok, delete checks, management).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Ready messages.
    pub messages: u32,
    /// Delivered, not yet acked.
    pub unacked: u32,
    /// Consumers.
    pub consumers: u32,
    /// Dead letters dropped because the dead-letter exchange did not exist.
    pub dead_letters_dropped_no_dlx: u64,
    /// Messages parked for a retry (`queue::retry`).
    pub parked: u64,
    /// Messages held behind a retrying message of the same key.
    pub held: u64,
    /// When the next parked message is due (ms since the epoch).
    pub next_due_ms: Option<u64>,
    /// Release lateness of parked messages (`crate::lateness`).
    pub release_lateness: Option<crate::lateness::LatenessSummary>,
}

/// What [`QueueCmd::Take`] asks of a message: the message to publish in its place and the
/// queues it goes to, or why it stays.
pub type TakeRouteFn =
    Box<dyn FnOnce(&Arc<Message>) -> Result<(Arc<Message>, Vec<QueueHandle>), String> + Send>;

/// A [`TakeRouteFn`] in a command.
pub struct TakeRoute(pub TakeRouteFn);

impl std::fmt::Debug for TakeRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TakeRoute")
    }
}

/// The answer to [`QueueCmd::Take`].
#[derive(Debug)]
pub enum Taken {
    /// No ready message with that id.
    Missing,
    /// The route refused it (the reason); it stays in the queue.
    Refused(String),
    /// Taken out.
    Out {
        /// What to publish (from the route).
        message: Arc<Message>,
        /// Where (from the route).
        targets: Vec<QueueHandle>,
        /// Its member in the store, when stored (to move it).
        source: Option<(u64, u64)>,
        /// Its store message id, when stored.
        store_msg: Option<u64>,
    },
}

/// Commands a queue actor accepts.
#[derive(Debug)]
pub enum QueueCmd {
    /// Enqueue a routed message.
    Publish {
        /// The message (shared by every queue it was routed to), its id here, and whether the
        /// publishing channel stored it for this queue (then the channel confirms durability
        /// itself; the queue only reports whether it accepted the message).
        placed: Placed,
        /// Confirm target when the channel is in confirm mode.
        confirm: Option<ConfirmTo>,
    },
    /// Several routed messages from one connection, in publish order, each handled as a
    /// [`QueueCmd::Publish`] (a read batch's publishes to this queue: `connection/publish_batch.rs`).
    PublishBatch {
        /// The messages, each with its publishing channel and sequence number when that channel
        /// is in confirm mode.
        placed: Vec<(Placed, Option<(u16, u64)>)>,
        /// The publishing connection, when any of them confirms.
        conn: Option<ConnHandle>,
    },
    /// Register a consumer.
    Consume {
        /// Broker-unique consumer id.
        id: ConsumerId,
        /// no-ack, prefetch, exclusive.
        spec: ConsumerSpec,
        /// Where deliveries go.
        target: ConsumerTarget,
        /// Accepted, or refused (exclusive use).
        reply: oneshot::Sender<Result<(), CoreError>>,
    },
    /// Remove a consumer (its unacked messages stay with its channel).
    Cancel {
        /// The consumer.
        id: ConsumerId,
    },
    /// Settle delivered messages.
    Ack {
        /// Message ids.
        ids: Vec<MsgId>,
    },
    /// Return delivered messages to their original positions after a failed delivery
    /// (reject/nack requeue=true: counts towards a quorum queue's delivery limit), or retry
    /// them with backoff under `retry-on-requeue` (`queue/retry.rs`).
    Requeue {
        /// Message ids.
        ids: Vec<MsgId>,
    },
    /// Return delivered messages whose consumer went (channel closed, basic.recover) to their
    /// original positions, without counting a failed delivery.
    Return {
        /// Message ids.
        ids: Vec<MsgId>,
    },
    /// Discard delivered messages (dead-lettering hooks in here).
    Reject {
        /// Message ids.
        ids: Vec<MsgId>,
    },
    /// basic.get.
    Get {
        /// Settle at once.
        no_ack: bool,
        /// The message, or None when empty.
        reply: oneshot::Sender<Option<GetResult>>,
    },
    /// queue.purge: drop ready messages, reply with how many.
    Purge {
        /// Count purged.
        reply: oneshot::Sender<u32>,
    },
    /// Remove ready messages by id without dead-lettering them (management: a dead letter
    /// replayed elsewhere leaves its DLQ). Replies with the ids that were removed.
    Remove {
        /// Message ids.
        ids: Vec<MsgId>,
        /// The ids found ready and removed.
        reply: oneshot::Sender<Vec<MsgId>>,
    },
    /// Takes ready message `id` out of the queue if `route` finds it somewhere to go (the
    /// management API's replay, `queue_replay.rs`). A taken message is not settled in the store:
    /// the caller moves its stored copy (one `Route` record). Replies what happened.
    Take {
        /// Message id.
        id: MsgId,
        /// Decides, with the message (body loaded), what to publish and where.
        route: TakeRoute,
        /// The outcome.
        reply: oneshot::Sender<Taken>,
    },
    /// The ready messages (bodies possibly paged out), in queue order: the dead-letter archive
    /// looks for replays a restart interrupted.
    Browse {
        /// The messages.
        reply: oneshot::Sender<Vec<Arc<Message>>>,
    },
    /// Report counts.
    Stats {
        /// The counts.
        reply: oneshot::Sender<QueueStats>,
    },
    /// The queue was removed from its vhost: cancel consumers, reply with the message count, stop.
    Delete {
        /// Ready messages at deletion.
        reply: oneshot::Sender<u32>,
    },
    /// A dead-lettered message routed here from another queue. When this queue refuses it
    /// (full, `reject-publish`), it goes back to `from`, which keeps it and retries: a dead
    /// letter is never dropped for lack of room.
    EnqueueDeadLetters {
        /// The dead-lettered copies (x-death already updated), in dead-lettering order. The
        /// source already wrote the move to the store (one record for all targets): the target
        /// only keeps them.
        messages: Vec<Placed>,
        /// The source queue.
        from: QueueHandle,
    },
    /// Dead letters this queue sent were refused by `target`; keep them and retry later.
    DeadLettersRefused {
        /// The dead-lettered copies.
        messages: Vec<Placed>,
        /// The queue that refused it.
        target: QueueHandle,
    },
    /// New effective settings (a policy changed).
    SetArgs {
        /// Declared arguments overlaid with the policy.
        args: Box<charon_core::QueueArgs>,
    },
    /// Parked messages recovered from the store (sent once, right after spawn):
    /// `(due ms, id, message, retry attempt)`.
    RestoreParked {
        /// The parked messages.
        parked: Vec<(u64, MsgId, Arc<Message>, u32)>,
    },
    /// The queue was used (redeclared): restarts its `x-expires` countdown.
    Touch,
    /// Credit became available (connection backlog drained, channel acks, channel.flow on):
    /// run the delivery loop again.
    Kick,
    /// A management query (peek, details), see [`crate::queue::admin`].
    Admin(crate::queue::admin::AdminQuery),
    /// The queue's archiver takes messages directly while the queue is empty and it keeps up
    /// (docs/archive.md, "Sixteenth round": the direct hand-over); replaces an earlier sender.
    ArchiveDirect {
        /// Where direct messages go, a batch per actor turn (bounded).
        tx: mpsc::Sender<Vec<Placed>>,
    },
    /// Direct messages whose archive batch is durable: settled in the store, out of flight.
    DirectArchived {
        /// How many.
        count: usize,
        /// Their body bytes.
        bytes: u64,
        /// The ids in this queue of those the store holds (settled there).
        stored: Vec<MsgId>,
    },
    /// Direct messages the archiver could not write (it stopped): queued as if just published.
    DirectReturned {
        /// The messages, in hand-over order.
        placed: Vec<Placed>,
    },
}

#[derive(Debug)]
struct Shared {
    id: u64,
    name: Arc<str>,
    tx: mpsc::Sender<QueueCmd>,
    quorum: bool,
    /// The queue's id in the store, when it keeps its persistent messages there (durable).
    store_id: Option<u64>,
    /// Next message id in this queue: ids are handed out here so that senders can name a
    /// message's place before the actor sees it.
    next_msg: AtomicU64,
    /// The queue's own consumer timeout, ms (`x-consumer-timeout` / `consumer-timeout`
    /// policy; [`NO_QUEUE_TIMEOUT`]: the broker's `consumer_timeout` applies). Read by the
    /// channels holding its deliveries.
    consumer_timeout: AtomicU64,
    /// Raised while the queue's page-out lags (publishers to it wait, `handles::page_flow`).
    page_flow: super::PageFlow,
    /// Body bytes of publishes sent to the queue and not yet taken by its actor.
    inbox_bytes: AtomicU64,
}

/// [`QueueHandle::consumer_timeout`] when the queue sets none.
const NO_QUEUE_TIMEOUT: u64 = u64::MAX;

/// A cheap, clonable reference to one queue actor.
#[derive(Debug, Clone)]
pub struct QueueHandle {
    shared: Arc<Shared>,
}

static NEXT_QUEUE_ID: AtomicU64 = AtomicU64::new(1);

impl QueueHandle {
    /// Creates a handle and the receiving end its actor will own.
    pub fn new(name: Arc<str>) -> (Self, mpsc::Receiver<QueueCmd>) {
        Self::with_type(name, false, None, 0)
    }

    /// A handle for a queue of the given type (`quorum`: deliveries carry `x-delivery-count`),
    /// with its store id when durable, handing out message ids from `first_id`.
    pub fn with_type(
        name: Arc<str>,
        quorum: bool,
        store_id: Option<u64>,
        first_id: MsgId,
    ) -> (Self, mpsc::Receiver<QueueCmd>) {
        let (tx, rx) = mpsc::channel(QUEUE_COMMAND_CAPACITY);
        let id = NEXT_QUEUE_ID.fetch_add(1, Ordering::Relaxed);
        (
            Self {
                shared: Arc::new(Shared {
                    id,
                    name,
                    tx,
                    quorum,
                    store_id,
                    next_msg: AtomicU64::new(first_id),
                    consumer_timeout: AtomicU64::new(NO_QUEUE_TIMEOUT),
                    page_flow: super::PageFlow::default(),
                    inbox_bytes: AtomicU64::new(0),
                }),
            },
            rx,
        )
    }

    /// Whether this is a quorum queue.
    pub fn is_quorum(&self) -> bool {
        self.shared.quorum
    }

    /// The queue's id in the store (durable queues of a broker with a store).
    pub fn store_id(&self) -> Option<u64> {
        self.shared.store_id
    }

    /// Allocates the id the next message sent to this queue will have there.
    pub fn alloc_id(&self) -> MsgId {
        self.shared.next_msg.fetch_add(1, Ordering::Relaxed)
    }

    /// The queue's own consumer timeout (ms) from its effective arguments, if any.
    pub fn consumer_timeout(&self) -> Option<u64> {
        let ms = self.shared.consumer_timeout.load(Ordering::Relaxed);
        (ms != NO_QUEUE_TIMEOUT).then_some(ms)
    }

    /// Records the queue's consumer timeout (at spawn and whenever a policy changes).
    pub fn set_consumer_timeout(&self, ms: Option<u64>) {
        let v = ms.map_or(NO_QUEUE_TIMEOUT, |m| m.min(NO_QUEUE_TIMEOUT - 1));
        self.shared.consumer_timeout.store(v, Ordering::Relaxed);
    }

    /// The queue's page-out backpressure flag (raised: publishers to it wait).
    pub fn page_flow(&self) -> &super::PageFlow {
        &self.shared.page_flow
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
        let bytes = inbox_bytes_of(&cmd);
        if bytes > 0 {
            self.shared.inbox_bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        let sent = self.shared.tx.send(cmd).await.is_ok();
        if !sent {
            self.took_from_inbox(bytes);
        }
        sent
    }

    /// Sends a command without waiting; gives it back if the queue's channel is full, drops it
    /// (returning None) if the queue is gone.
    pub fn try_send(&self, cmd: QueueCmd) -> Result<(), Option<QueueCmd>> {
        let bytes = inbox_bytes_of(&cmd);
        if bytes > 0 {
            self.shared.inbox_bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        match self.shared.tx.try_send(cmd) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.took_from_inbox(bytes);
                match e {
                    mpsc::error::TrySendError::Full(c) => Err(Some(c)),
                    mpsc::error::TrySendError::Closed(_) => Err(None),
                }
            }
        }
    }

    /// Body bytes of publishes sent to the queue that its actor has not taken yet (page-out
    /// backpressure bounds them too: `handles::page_flow`).
    pub fn inbox_bytes(&self) -> u64 {
        self.shared.inbox_bytes.load(Ordering::Relaxed)
    }

    /// The actor took publishes of `bytes` body bytes from its channel.
    pub fn took_from_inbox(&self, bytes: u64) {
        if bytes > 0 {
            self.shared.inbox_bytes.fetch_sub(bytes, Ordering::Relaxed);
        }
    }

    /// Asks the actor to retry deliveries. Never blocks: if the channel is full the actor is
    /// busy anyway and will run its delivery loop after the batch.
    pub fn kick(&self) {
        let _ = self.shared.tx.try_send(QueueCmd::Kick);
    }
}

/// The body bytes a command brings to a queue's inbox (publishes only).
pub fn inbox_bytes_of(cmd: &QueueCmd) -> u64 {
    match cmd {
        QueueCmd::Publish { placed, .. } => placed.message.body_size(),
        QueueCmd::PublishBatch { placed, .. } => {
            placed.iter().map(|(p, _)| p.message.body_size()).sum()
        }
        _ => 0,
    }
}
