//! Zeroing ahead of the writer in a fresh segment file (`docs/storage-format.md` §2.5): while
//! commits are small, the compaction thread writes and syncs zeros past the append frontier
//! of a fresh (`fallocate`d) active segment, so the commits write into written blocks. The
//! zeros never land on a record, whatever the crash: every durable record is recovered, the
//! zeros after the last record are cut quietly, and the store goes on writing into them.

mod common;

use std::time::Duration;

use charon_store::{MemStorage, Storage, StoreConfig};
use common::{contents, ids, open, publish_300, wait_for};

const SEGMENT: u64 = 1 << 20;

fn config() -> StoreConfig {
    StoreConfig {
        segment_size: SEGMENT,
        compact_ratio: 0.0,
        idle_tick: Duration::from_millis(1),
        preallocate: true,
        zero_spare: false,
        ..StoreConfig::default()
    }
}

/// Publishes `ids` in small durable commits of up to 64 records (~21 KiB: the b-like stream
/// zeroing is for; a commit can reach past the first page of a new segment).
fn publish_each_durably(store: &charon_store::Store, ids: std::ops::Range<u64>) {
    let mut n = 0;
    for id in ids {
        publish_300(store, 1, id);
        n += 1;
        if n % 64 == 0 {
            store.sync().expect("sync").wait().expect("durable");
        }
    }
    store.sync().expect("sync").wait().expect("durable");
}

#[test]
fn zeros_go_ahead_of_small_commits_and_never_over_a_record() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    // ~330 bytes a record: 12,800 records fill about four 1 MiB segments, so rollovers happen
    // while the compaction thread zeroes ahead in each fresh segment.
    let next = 12_800;
    publish_each_durably(&store, 0..next);
    wait_for("zeros ahead of the writer", || {
        store.stats().zeroed_bytes > 0
    });
    let zeroed = store.stats().zeroed_bytes;
    assert!(
        zeroed >= 256 << 10,
        "at least one chunk zeroed, got {zeroed}"
    );
    // The last segment: records, then zeros (written ahead or preallocated) to its end.
    let mut names: Vec<String> = mem
        .list()
        .expect("list")
        .into_iter()
        .filter(|n| n.ends_with(".wal"))
        .collect();
    names.sort();
    assert!(names.len() >= 3, "rolled over: {names:?}");
    let last = mem
        .read_file(names.last().expect("a segment"))
        .expect("file");
    assert_eq!(
        last.len() as u64,
        SEGMENT,
        "the active segment keeps its size"
    );

    // A crash (only synced bytes survive) inside the zeroed-ahead segment: everything durable
    // is there, the zeros after it are cut without counting as a torn tail.
    let crashed = mem.crash();
    drop(store);
    let (store, rec) = open(&crashed, config());
    assert_eq!(
        rec.truncated_bytes, 0,
        "zeros are unused space, not a torn tail"
    );
    assert_eq!(ids(&store, &rec), (0..next).collect::<Vec<_>>());
    let bodies = contents(&store, &rec);
    for (_, items) in &bodies {
        for (id, body) in items {
            assert_eq!(body, &vec![*id as u8; 300], "record {id} intact");
        }
    }
    // The recovered store writes on into a new segment (zeroed ahead too) and recovers again.
    publish_each_durably(&store, next..next + 2_000);
    let more = next + 2_000;
    let crashed = crashed.crash();
    drop(store);
    let (store, rec) = open(&crashed, config());
    assert_eq!(rec.truncated_bytes, 0);
    assert_eq!(ids(&store, &rec), (0..more).collect::<Vec<_>>());
}

#[test]
fn no_zeroing_without_preallocation() {
    let mem = MemStorage::new();
    let (store, _) = open(
        &mem,
        StoreConfig {
            preallocate: false,
            ..config()
        },
    );
    publish_each_durably(&store, 0..2_000);
    // Give the compaction thread many ticks to do what it would.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        store.stats().zeroed_bytes,
        0,
        "a growing file is never zeroed"
    );
    drop(store);
    let (store, rec) = open(&mem, config());
    assert_eq!(ids(&store, &rec), (0..2_000).collect::<Vec<_>>());
}
