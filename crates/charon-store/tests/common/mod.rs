//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

pub mod gated;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use charon_store::{
    Appended, Command, Commit, MemStorage, NewMessage, Recovered, Store, StoreConfig,
};

/// Publishes `body` as message `id` of `queue` and settles it at once (short-lived traffic
/// that leaves garbage behind for reclamation and compaction); what the publish's append gave.
pub fn publish_settled(store: &Store, queue: u64, id: u64, body: &[u8]) -> Appended {
    let a = store
        .append_nowait(Command::Publish {
            message: msg(body),
            members: vec![(queue, id)],
        })
        .expect("append");
    store
        .append_nowait(Command::Settle {
            queue,
            ids: vec![id],
        })
        .expect("settle");
    a
}

pub fn msg(body: &[u8]) -> NewMessage {
    NewMessage {
        exchange: Bytes::from_static(b"amq.direct"),
        routing_key: key_for(body),
        properties: Bytes::from_static(&[0x10, 0x00, 2]),
        body: Bytes::copy_from_slice(body),
        enqueue_ms: 1_700_000_000_000,
        expiry_ms: None,
    }
}

/// The routing key [`msg`] gives a body (3 bytes, as the fixed key it replaces, so record sizes
/// do not vary): recovered metadata (read from disk by the store's `MetaReader`) is checked
/// against the recovered body with it.
pub fn key_for(body: &[u8]) -> Bytes {
    let first = body.first().map_or(0, |b| usize::from(*b));
    Bytes::from(format!("{:03x}", (body.len() * 31 + first) % 4096))
}

/// A recovered member's metadata, read from disk, checked to be its message's; its body.
pub fn read_entry(
    store: &Store,
    reader: &mut charon_store::MetaReader,
    e: &charon_store::RecoveredEntry,
) -> (charon_store::RecoveredMessage, Bytes) {
    let m = reader.read(e.msg).expect("metadata");
    assert_eq!((m.id, m.body.msg), (e.msg, e.msg));
    let body = store.read_body(&m.body).expect("body");
    assert_eq!(m.body.len as usize, body.len());
    if m.exchange == Bytes::from_static(b"amq.direct") {
        assert_eq!(m.routing_key, key_for(&body), "metadata of another record");
        assert_eq!(m.properties, Bytes::from_static(&[0x10, 0x00, 2]));
    }
    (m, body)
}

pub fn config() -> StoreConfig {
    StoreConfig {
        segment_size: 4096,
        compact_ratio: 0.3,
        // Exercise compaction from the first sealed segment on (the default waits for more).
        compact_min_segments: 0,
        idle_tick: Duration::from_millis(5),
        preallocate: true,
        ..StoreConfig::default()
    }
}

pub fn open(mem: &MemStorage, config: StoreConfig) -> (Store, Recovered) {
    Store::open(Arc::new(mem.clone()), config).expect("open")
}

/// Queue → [(queue-local id, body)].
pub type Contents = Vec<(u64, Vec<(u64, Vec<u8>)>)>;

/// The queues of a recovered state, bodies read back from disk.
pub fn contents(store: &Store, rec: &Recovered) -> Contents {
    let mut reader = store.meta_reader();
    let mut out: Vec<_> = rec
        .queues
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(q, v)| {
            let items = v
                .iter()
                .map(|e| {
                    let (_, body) = read_entry(store, &mut reader, &e);
                    (e.id, body.to_vec())
                })
                .collect();
            (*q, items)
        })
        .collect();
    out.sort();
    out
}

/// Every queue's ids, in order (the queues in [`contents`]'s order).
pub fn ids(store: &Store, rec: &Recovered) -> Vec<u64> {
    contents(store, rec)
        .into_iter()
        .flat_map(|(_, items)| items.into_iter().map(|(id, _)| id))
        .collect()
}

/// Everything observable after recovery: queues with bodies and delivery
/// counts, and the definitions.
/// Bodies appear as (length, first 8 bytes) to keep failures readable.
pub type Snapshot = (
    Vec<(u64, Vec<(u64, (usize, Vec<u8>), u32)>)>,
    Vec<(u8, Vec<u8>, Vec<u8>)>,
);

pub fn snapshot(store: &Store, rec: &Recovered) -> Snapshot {
    let mut reader = store.meta_reader();
    let mut queues: Vec<_> = rec
        .queues
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(q, v)| {
            let items = v
                .iter()
                .map(|e| {
                    let (_, body) = read_entry(store, &mut reader, &e);
                    (e.id, digest(&body), e.delivery_count)
                })
                .collect();
            (*q, items)
        })
        .collect();
    queues.sort();
    let defs = rec
        .definitions
        .iter()
        .map(|((k, key), v)| (*k, key.to_vec(), v.to_vec()))
        .collect();
    (queues, defs)
}

pub fn digest(body: &[u8]) -> (usize, Vec<u8>) {
    (body.len(), body.iter().take(8).copied().collect())
}

/// Waits (bounded generously, never a rate) until `done`.
pub fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Appends message `id` (a 300-byte body of its low byte) to queue `q` without waiting.
pub fn publish_300(store: &Store, q: u64, id: u64) {
    store
        .append_nowait(Command::Publish {
            message: msg(&[id as u8; 300]),
            members: vec![(q, id)],
        })
        .expect("append");
}

/// Publishes `ids` to queue `q` as [`publish_300`] does, then waits until they are durable.
pub fn publish_300_durably(store: &Store, q: u64, ids: std::ops::Range<u64>) {
    for id in ids {
        publish_300(store, q, id);
    }
    store.sync().expect("sync").wait().expect("durable");
}

/// Publishes a 100-byte message `id` to queue `q` with a completion and waits for its commit
/// (bounded); the publish's index.
pub fn publish_and_wait(store: &Store, q: u64, id: u64) -> u64 {
    let (a, commit) = store
        .append(Command::Publish {
            message: msg(&[id as u8; 100]),
            members: vec![(q, id)],
        })
        .expect("append");
    wait_commit("the publish's commit", commit);
    a.index
}

/// Waits for `commit` on a thread with [`wait_for`]'s generous bound, so a commit held back (a
/// batch that lingered or gathered in spite of the waiter) fails the test, not hangs it.
pub fn wait_commit(what: &str, commit: Commit) {
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let t = std::thread::spawn(move || {
        commit.wait().expect("commit");
        d.store(true, Ordering::SeqCst);
    });
    wait_for(what, || done.load(Ordering::SeqCst));
    t.join().expect("commit thread");
}
