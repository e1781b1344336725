//! Space reclamation under workloads that pin segments: a backlog queue
//! consumed slowly while another queue runs hot. Settles of backlog
//! messages are tombstones that must outlive the backlog's segments; the
//! store must still keep disk use bounded (by compacting the backlog's
//! segments when they pin enough dead segments), not grow with traffic.

mod common;

use std::time::Duration;

use charon_store::{Command, MemStorage, Store, StoreConfig};
use common::{contents, msg, open};

fn config() -> StoreConfig {
    StoreConfig {
        segment_size: 8192,
        compact_ratio: 0.3,
        idle_tick: Duration::from_millis(1),
        preallocate: true,
        ..StoreConfig::default()
    }
}

fn settle_until_quiet(store: &Store) {
    store.sync().expect("sync").wait().expect("durable");
}

/// Syncs, then waits (generously bounded, never a rate) until reclamation, which runs in the
/// writer between batches and on idle ticks, has brought the store's stats to `done`.
fn settle_until(store: &Store, done: impl Fn(&charon_store::StoreStats) -> bool) {
    settle_until_quiet(store);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !done(&store.stats()) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn slow_consumer_on_a_backlog_does_not_pin_the_log() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    const BACKLOG: u64 = 200;
    // Queue 1: a backlog of 200 × 100 B (about 3 segments, all live).
    for i in 0..BACKLOG {
        store
            .append_nowait(Command::Publish {
                message: msg(&[1u8; 100]),
                members: vec![(1, i)],
            })
            .expect("append");
    }
    settle_until_quiet(&store);
    let backlog_segments = store.stats().segments;
    // Queue 2 runs hot; every 30 messages one backlog message is acked.
    let mut max_segments = 0;
    let mut acked = 0u64;
    for i in 0..6000u64 {
        common::publish_settled(&store, 2, i, &[2u8; 200]);
        if i % 30 == 0 && acked < BACKLOG / 2 {
            store
                .append_nowait(Command::Settle {
                    queue: 1,
                    ids: vec![acked],
                })
                .expect("settle");
            acked += 1;
        }
        if i % 100 == 0 {
            settle_until(&store, |s| s.segments <= 3 * backlog_segments + 4);
            max_segments = max_segments.max(store.stats().segments);
        }
    }
    settle_until(&store, |s| s.segments_deleted > 150);
    let stats = store.stats();
    if std::env::var_os("RECLAIM_STATS").is_some() {
        eprintln!("peak {max_segments} segments, backlog {backlog_segments}; {stats:?}");
    }
    // About 2 MiB of hot traffic went through 8 KiB segments (~230 of them).
    assert!(stats.segments_deleted > 150, "{stats:?}");
    assert!(
        max_segments <= 3 * backlog_segments + 4,
        "disk use grew with traffic: {max_segments} segments at peak, backlog {backlog_segments}; {stats:?}"
    );
    drop(store);
    let (store, rec) = open(&mem.crash(), config());
    let got = contents(&store, &rec);
    let ids: Vec<u64> = got
        .iter()
        .flat_map(|(q, v)| v.iter().map(move |(id, _)| (*q, *id)))
        .map(|(q, id)| {
            assert_eq!(q, 1);
            id
        })
        .collect();
    assert_eq!(ids, (acked..BACKLOG).collect::<Vec<_>>());
}
