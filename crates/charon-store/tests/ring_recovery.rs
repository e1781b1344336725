//! The message table's chunk ring (`ChunkRing`) across restarts: a dense queue, a sparse one
//! and stragglers left far behind the stream (their chunks spill out of the ring), settled in
//! an order that is neither the publish order nor its reverse. Every restart must recover
//! exactly the unsettled members, and the store must go on taking publishes and settles of old
//! and new members after it.

mod common;

use std::collections::BTreeMap;

use charon_store::{Command, MemStorage, StoreConfig};
use common::{msg, open};

const DENSE: u64 = 1;
const SPARSE: u64 = 2;

fn config() -> StoreConfig {
    StoreConfig {
        segment_size: 64 << 10,
        ..common::config()
    }
}

/// Queue → live queue-local ids.
type Model = BTreeMap<u64, Vec<u64>>;

/// The recovered members, each body read back through the message table (where its record
/// is) and checked to be its own.
fn recovered(store: &charon_store::Store, rec: &charon_store::Recovered) -> Model {
    let mut m: Model = BTreeMap::new();
    for (q, items) in common::contents(store, rec) {
        for (id, body) in items {
            assert_eq!(
                body,
                id.to_le_bytes().to_vec(),
                "body of member ({q}, {id})"
            );
            m.entry(q).or_default().push(id);
        }
    }
    m
}

fn model(live: &BTreeMap<(u64, u64), ()>) -> Model {
    let mut m: Model = BTreeMap::new();
    for (q, id) in live.keys() {
        m.entry(*q).or_default().push(*id);
    }
    m
}

/// Publishes `n` messages from `first`: each to the dense queue, every 37th also to the sparse.
fn publish(store: &charon_store::Store, live: &mut BTreeMap<(u64, u64), ()>, first: u64, n: u64) {
    for id in first..first + n {
        let mut members = vec![(DENSE, id)];
        if id % 37 == 0 {
            members.push((SPARSE, id));
        }
        for m in &members {
            live.insert(*m, ());
        }
        store
            .append_nowait(Command::Publish {
                message: msg(&id.to_le_bytes()),
                members,
            })
            .expect("publish");
    }
}

fn settle(store: &charon_store::Store, live: &mut BTreeMap<(u64, u64), ()>, q: u64, ids: Vec<u64>) {
    for id in &ids {
        live.remove(&(q, *id));
    }
    store
        .append_nowait(Command::Settle { queue: q, ids })
        .expect("settle");
}

#[test]
fn stragglers_sparse_and_out_of_order_settles_survive_restarts() {
    let mem = MemStorage::new();
    let mut live = BTreeMap::new();
    let (store, _) = open(&mem, config());
    publish(&store, &mut live, 0, 6000);
    // The dense queue settles in blocks of 50 taken from both ends of each 1000, keeping every
    // 500th (stragglers the stream leaves behind).
    for block in 0..6u64 {
        let base = block * 1000;
        let mut order: Vec<u64> = Vec::new();
        for k in 0..10u64 {
            order.extend((base + k * 50)..(base + k * 50 + 50));
            order.extend((base + 950 - k * 50)..(base + 1000 - k * 50));
        }
        order.retain(|id| id % 500 != 7);
        order.dedup();
        let mut seen = std::collections::BTreeSet::new();
        order.retain(|id| seen.insert(*id));
        for chunk in order.chunks(50) {
            settle(&store, &mut live, DENSE, chunk.to_vec());
        }
    }
    // The sparse queue: all but one in 20, newest first (what is left is too sparse for the
    // ring: its chunks spill).
    let sparse: Vec<u64> = live
        .keys()
        .filter(|(q, _)| *q == SPARSE)
        .map(|(_, id)| *id)
        .rev()
        .filter(|id| (id / 37) % 20 != 3)
        .collect();
    settle(&store, &mut live, SPARSE, sparse);
    common::wait_commit("sync", store.sync().expect("sync"));
    drop(store);

    let (store, rec) = open(&mem, config());
    assert_eq!(recovered(&store, &rec), model(&live), "first restart");
    // After the restart: new publishes far above the stragglers, then the stragglers settle.
    publish(&store, &mut live, 100_000, 3000);
    let stragglers: Vec<u64> = live
        .keys()
        .filter(|(q, id)| *q == DENSE && *id < 100_000)
        .map(|(_, id)| *id)
        .collect();
    assert!(!stragglers.is_empty());
    settle(
        &store,
        &mut live,
        DENSE,
        stragglers.into_iter().rev().collect(),
    );
    settle(&store, &mut live, DENSE, (100_000..101_000).collect());
    common::wait_commit("sync", store.sync().expect("sync"));
    drop(store);

    let (store, rec) = open(&mem, config());
    assert_eq!(recovered(&store, &rec), model(&live), "second restart");
    drop(store);
}
