//! Compaction waits until more than `compact_min_segments` sealed segments exist
//! (`docs/storage-format.md` §5): a sparse sealed segment is left alone while it is one of the
//! last two (the consumers' lag, which dies whole shortly), and compacted once the log grows
//! past them; what it held survives a crash either way.

mod common;

use std::time::{Duration, Instant};

use charon_store::{Command, MemStorage, Store, StoreConfig};
use common::{contents, msg, open};

fn config() -> StoreConfig {
    StoreConfig {
        segment_size: 4096,
        compact_ratio: 0.5,
        idle_tick: Duration::from_millis(5),
        // The default under test.
        ..StoreConfig::default()
    }
}

/// Publishes and settles one 200-byte filler on queue 1; the segment its record went to.
fn filler(store: &Store, id: u64) -> u64 {
    let a = common::publish_settled(store, 1, id, &[0u8; 200]);
    a.body.expect("body").segment
}

/// Waits (up to 60 s) until the compaction thread looked at least `n` more times.
fn checks_pass(store: &Store, n: u64) {
    let start = store.stats().compaction_checks;
    let deadline = Instant::now() + Duration::from_secs(60);
    while store.stats().compaction_checks < start + n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        store.stats().compaction_checks >= start + n,
        "compaction never looked"
    );
}

#[test]
fn a_sparse_segment_is_compacted_only_once_more_than_two_are_sealed() {
    assert_eq!(StoreConfig::default().compact_min_segments, 2);
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    // Ten small long-lived messages at the start of the first segment.
    let first = (0..10u64)
        .map(|i| {
            store
                .append_nowait(Command::Publish {
                    message: msg(&[7, i as u8]),
                    members: vec![(7, i)],
                })
                .expect("append")
                .body
                .expect("body")
                .segment
        })
        .max()
        .expect("ten");
    // Settled traffic until the first segment and the next are sealed: the first is now
    // mostly dead, but only two segments are sealed.
    let mut id = 0;
    loop {
        id += 1;
        if filler(&store, id) >= first + 2 {
            break;
        }
    }
    store.sync().expect("sync").wait().expect("durable");
    checks_pass(&store, 3);
    assert_eq!(store.stats().records_carried, 0, "{:?}", store.stats());

    // Each further segment settles one of the first segment's messages, so it waits for the
    // first one (pinned) and the sealed log grows; the first segment is then compacted.
    let mut next = 1u64;
    let mut seg = first + 2;
    let deadline = Instant::now() + Duration::from_secs(120);
    while store.stats().records_carried == 0 && Instant::now() < deadline {
        id += 1;
        let s = filler(&store, id);
        if s > seg && next < 10 {
            seg = s;
            store
                .append_nowait(Command::Settle {
                    queue: 7,
                    ids: vec![next],
                })
                .expect("settle");
            next += 1;
        }
        if next == 10 {
            store.sync().expect("sync").wait().expect("durable");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let stats = store.stats();
    assert!(stats.records_carried > 0, "never compacted: {stats:?}");
    store.sync().expect("sync").wait().expect("durable");
    drop(store);
    let (store, rec) = open(&mem.crash(), config());
    let want: Vec<(u64, Vec<u8>)> = (0..10u64)
        .filter(|i| *i == 0 || *i >= next)
        .map(|i| (i, vec![7, i as u8]))
        .collect();
    assert_eq!(contents(&store, &rec), vec![(7, want)]);
}
