//! The delayed message exchange's server side (`charon_core::exchange::delayed`): messages
//! published with `x-delay` to an `x-delayed-message` exchange wait in one task per vhost,
//! ordered by due time, and are routed through the exchange (its bindings at that moment) when
//! they are due.
//!
//! Durability (docs/storage-format.md): a persistent message on a durable delayed exchange is
//! stored once, by a `Publish` with one member `(exchange store id, sequence)`; the publisher's
//! confirm waits for that commit. When it is due, one `Route` record moves it to its durable
//! target queues (no body copy). After a restart its due time is `enqueue_ms + x-delay`; a due
//! time that passed while the broker was down routes at once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use charon_core::Message;

use charon_core::exchange::delayed;
use charon_core::vhost::VHost;
use charon_protocol::FieldTable;
use tokio::sync::mpsc;

use crate::handles::{QueueCmd, QueueHandle};
use crate::lateness::{Lateness, LatenessSummary, now_us};
use crate::locks::RwLockExt;
use crate::queue::{PagedShapes, allocate, now_ms, placed};
use crate::vhost::VHostState;

/// Capacity of the delay task's command channel.
const CAPACITY: usize = 4096;

/// A delayed message waiting for its time.
#[derive(Debug, Clone)]
pub struct Delayed {
    /// When it is routed (µs, wall clock: distinct for messages published in the same ms; a
    /// recovered one is due at its stored enqueue ms + `x-delay`).
    pub due_us: u64,
    /// The delayed exchange it was published to.
    pub exchange: Arc<str>,
    /// The message (its body may be on disk only, after a restart).
    pub message: Arc<Message>,
    /// Where the store holds it: (member, store message id).
    pub stored: Option<((u64, u64), u64)>,
}

/// The handle of a vhost's delay task.
#[derive(Debug)]
pub struct DelayHandle {
    tx: mpsc::Sender<Delayed>,
    seq: AtomicU64,
    waiting: Arc<Waiting>,
}

/// Messages waiting, per exchange (for management; the task and publishers update it), and
/// each exchange's release lateness (the task records it at the release point).
#[derive(Debug, Default)]
pub struct Waiting(
    std::sync::Mutex<std::collections::HashMap<Arc<str>, u64>>,
    std::sync::Mutex<std::collections::HashMap<Arc<str>, Lateness>>,
);

impl Waiting {
    fn add(&self, exchange: &Arc<str>, n: i64) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let e = m.entry(exchange.clone()).or_default();
        *e = e.saturating_add_signed(n);
        if *e == 0 {
            m.remove(exchange);
        }
    }

    fn released(&self, exchange: &Arc<str>, due_us: u64, at_us: u64) {
        let mut m = self.1.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(exchange.clone())
            .or_default()
            .record_us(due_us, at_us);
    }

    fn lateness(&self, exchange: &str) -> Option<LatenessSummary> {
        let m = self.1.lock().unwrap_or_else(|p| p.into_inner());
        m.get(exchange).and_then(Lateness::summary)
    }

    fn of(&self, exchange: &str) -> u64 {
        let m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.get(exchange).copied().unwrap_or(0)
    }
}

impl DelayHandle {
    /// The next member id for a stored delayed message (increasing, above every id used
    /// before, across restarts: microseconds of the clock, or above the recovered ones).
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Messages waiting for delayed exchange `exchange`.
    pub fn waiting(&self, exchange: &str) -> u64 {
        self.waiting.of(exchange)
    }

    /// Release lateness of delayed exchange `exchange` (`None` before its first release).
    pub fn lateness(&self, exchange: &str) -> Option<LatenessSummary> {
        self.waiting.lateness(exchange)
    }

    /// Hands a message over (waits while the task's channel is full).
    pub async fn add(&self, d: Delayed) {
        let x = d.exchange.clone();
        self.waiting.add(&x, 1);
        if self.tx.send(d).await.is_err() {
            self.waiting.add(&x, -1);
        }
    }
}

/// The store id of delayed exchange `name` of `vhost`: a hash with the top bit set (queue ids,
/// clock microseconds, never have it), stable across restarts.
pub fn store_id(vhost: &str, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in vhost.bytes().chain([0]).chain(name.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h | (1 << 63)
}

/// Whether a publish to `exchange` with `headers` is delayed: `Some((delay ms, durable
/// exchange))`.
pub fn delay_of(
    topo: &VHost<QueueHandle>,
    exchange: &str,
    headers: Option<&FieldTable>,
) -> Option<(u64, bool)> {
    delay_through(topo.exchange(exchange)?, headers)
}

/// [`delay_of`] for an exchange already looked up.
pub fn delay_through(
    x: &charon_core::exchange::Exchange,
    headers: Option<&FieldTable>,
) -> Option<(u64, bool)> {
    if !x.delayed {
        return None;
    }
    delayed::delay_of(headers).map(|d| (d, x.durable))
}

/// The vhost's delay task, started on first use with `recovered` messages (and member ids
/// above `first_seq`).
pub fn handle(vhost: &Arc<VHostState>) -> &DelayHandle {
    start(vhost, Vec::new(), 0)
}

/// Starts the vhost's delay task with messages recovered from the store (no-op if running).
pub fn start(vhost: &Arc<VHostState>, recovered: Vec<Delayed>, first_seq: u64) -> &DelayHandle {
    vhost.delayed.get_or_init(|| {
        let (tx, rx) = mpsc::channel(CAPACITY);
        let waiting = Arc::new(Waiting::default());
        for d in &recovered {
            waiting.add(&d.exchange, 1);
        }
        let seq = first_seq.max(now_ms().saturating_mul(1000));
        tokio::spawn(run(Arc::downgrade(vhost), rx, recovered, waiting.clone()));
        DelayHandle {
            tx,
            seq: AtomicU64::new(seq),
            waiting,
        }
    })
}

async fn run(
    vhost: std::sync::Weak<VHostState>,
    mut rx: mpsc::Receiver<Delayed>,
    recovered: Vec<Delayed>,
    waiting: Arc<Waiting>,
) {
    let mut order = 0u64;
    let mut pending: BTreeMap<(u64, u64), Delayed> = BTreeMap::new();
    for d in recovered {
        order += 1;
        pending.insert((d.due_us, order), d);
    }
    let mut batch = Vec::with_capacity(256);
    loop {
        let now = now_us();
        let sleep = pending
            .first_key_value()
            .map(|((t, _), _)| std::time::Duration::from_micros(t.saturating_sub(now)));
        tokio::select! {
            n = rx.recv_many(&mut batch, 256) => {
                if n == 0 {
                    return;
                }
                for d in batch.drain(..) {
                    order += 1;
                    pending.insert((d.due_us, order), d);
                }
            }
            () = tokio::time::sleep(sleep.unwrap_or_default()), if sleep.is_some() => {}
        }
        let Some(v) = vhost.upgrade() else {
            return;
        };
        let now = now_us();
        while let Some(entry) = pending.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let d = entry.remove();
            waiting.add(&d.exchange, -1);
            waiting.released(&d.exchange, d.due_us, now_us());
            release(&v, d, now / 1000).await;
        }
    }
}

/// Routes a due message through its exchange and hands it to the queues; the store moves it
/// with one `Route` record. A message whose exchange is gone is dropped (as the plugin does).
async fn release(vhost: &Arc<VHostState>, d: Delayed, now: u64) {
    let props = d.message.properties.decode().ok();
    let mut keys =
        charon_core::routing::publish_routing_keys(&d.message.routing_key, props.as_ref());
    keys.extend(d.message.bcc.iter().cloned());
    let keys: Vec<&str> = keys.iter().map(|k| k.as_ref()).collect();
    let headers = props.as_ref().and_then(|p| p.headers().as_ref());
    let mut targets: Vec<QueueHandle> = Vec::new();
    let routed = {
        let topo = vhost.topology.read_recover();
        topo.exchange(&d.exchange).is_some_and(|x| x.delayed)
            && topo
                .route(&d.exchange, &keys, headers, &mut targets)
                .is_ok()
    };
    if !routed {
        targets.clear();
    }
    let persistent = d.message.properties.delivery_mode() == Some(2);
    let (places, members) = allocate(targets, persistent);
    let p = vhost.persistence();
    let (stored, message) = match (d.stored, p) {
        (Some((member, msg)), Some(p)) => {
            p.route(member, members);
            let m = if d.message.is_paged() {
                match p.read_body(msg) {
                    Some(b) => Arc::new(d.message.with_body(b)),
                    None => {
                        tracing::error!(msg, "a delayed message's body could not be read back");
                        return;
                    }
                }
            } else {
                d.message.clone()
            };
            (Some(msg), m)
        }
        (None, Some(p)) if !members.is_empty() => (
            p.publish_nowait(&d.message, &members, now),
            d.message.clone(),
        ),
        _ => (None, d.message.clone()),
    };
    for (q, placed) in placed(places, &message, stored) {
        let _ = q
            .send(QueueCmd::Publish {
                placed,
                confirm: None,
            })
            .await;
    }
}

/// After the vhost's topology is restored: starts its delay task with the stored messages of
/// its durable delayed exchanges (their store ids go into `known`). Returns how many.
pub fn recover(
    vhost: &Arc<VHostState>,
    rec: &charon_store::Recovered,
    known: &mut std::collections::HashSet<u64>,
) -> usize {
    let exchanges: Vec<Arc<str>> = {
        let topo = vhost.topology.read_recover();
        topo.exchanges()
            .filter(|x| x.delayed && x.durable)
            .map(|x| x.name.clone())
            .collect()
    };
    let mut out = Vec::new();
    let mut first_seq = 0;
    let mut shapes = PagedShapes::default();
    let mut reader = vhost.persistence().map(|p| p.meta_reader());
    for x in exchanges {
        let sid = store_id(&vhost.name, &x);
        known.insert(sid);
        let Some(list) = rec.queues.get(&sid) else {
            continue;
        };
        for e in list {
            let Some(sm) = reader
                .as_mut()
                .and_then(|r| crate::queue::read_recovered(r, &e))
            else {
                continue;
            };
            let message = shapes.get(
                &sm.exchange,
                &sm.routing_key,
                &sm.properties,
                u64::from(sm.body.len),
            );
            let props = message.properties.decode().ok();
            let delay = delayed::delay_of(props.as_ref().and_then(|p| p.headers().as_ref()));
            first_seq = first_seq.max(e.id + 1);
            out.push(Delayed {
                due_us: sm
                    .enqueue_ms
                    .saturating_add(delay.unwrap_or(0))
                    .saturating_mul(1000),
                exchange: x.clone(),
                message,
                stored: Some(((sid, e.id), sm.id)),
            });
        }
    }
    let n = out.len();
    if n > 0 {
        start(vhost, out, first_seq);
    }
    n
}
