//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use charon_store::{MemStorage, NewMessage, Recovered, Store, StoreConfig};

pub fn msg(body: &[u8]) -> NewMessage {
    NewMessage {
        exchange: Bytes::from_static(b"amq.direct"),
        routing_key: Bytes::from_static(b"key"),
        properties: Bytes::from_static(&[0x10, 0x00, 2]),
        body: Bytes::copy_from_slice(body),
        enqueue_ms: 1_700_000_000_000,
        expiry_ms: None,
    }
}

pub fn config() -> StoreConfig {
    StoreConfig {
        segment_size: 4096,
        compact_ratio: 0.3,
        idle_tick: Duration::from_millis(5),
        preallocate: true,
    }
}

pub fn open(mem: &MemStorage, config: StoreConfig) -> (Store, Recovered) {
    Store::open(Arc::new(mem.clone()), config).expect("open")
}

/// Queue → [(queue-local id, body)].
pub type Contents = Vec<(u64, Vec<(u64, Vec<u8>)>)>;

/// The queues of a recovered state, bodies read back from disk.
pub fn contents(store: &Store, rec: &Recovered) -> Contents {
    let mut out: Vec<_> = rec
        .queues
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(q, v)| {
            let items = v
                .iter()
                .map(|e| {
                    let body = store.read_body(&e.message.body).expect("body");
                    (e.id, body.to_vec())
                })
                .collect();
            (*q, items)
        })
        .collect();
    out.sort();
    out
}

/// Everything observable after recovery: queues with bodies and delivery
/// counts, and the definitions.
/// Bodies appear as (length, first 8 bytes) to keep failures readable.
pub type Snapshot = (
    Vec<(u64, Vec<(u64, (usize, Vec<u8>), u32)>)>,
    Vec<(u8, Vec<u8>, Vec<u8>)>,
);

pub fn snapshot(store: &Store, rec: &Recovered) -> Snapshot {
    let mut queues: Vec<_> = rec
        .queues
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(q, v)| {
            let items = v
                .iter()
                .map(|e| {
                    let body = store.read_body(&e.message.body).expect("body");
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
