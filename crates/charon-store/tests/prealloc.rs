//! Preallocated and recycled segment files (`docs/storage-format.md` §2.5): new segments are
//! reserved to `segment_size`, a deleted segment's file becomes the spare and then the next
//! segment. Recovery must cut the zeros or stale records after the last record quietly, sealed
//! segments must end at their last record, and a power cut at any point while a recycled file
//! is being written must give back exactly what was committed.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use charon_store::{Command, MemStorage, Store, StoreConfig};
use common::{contents, open, publish_300 as publish, publish_300_durably, wait_for};

const SPARE: &str = "spare.wal.free";

fn config() -> StoreConfig {
    StoreConfig {
        segment_size: 4096,
        compact_ratio: 0.0,
        idle_tick: Duration::from_millis(1),
        preallocate: true,
        ..StoreConfig::default()
    }
}

fn segments(mem: &MemStorage) -> Vec<(String, usize)> {
    let mut names: Vec<String> = charon_store::Storage::list(mem)
        .expect("list")
        .into_iter()
        .filter(|n| n.ends_with(".wal"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let len = mem.read_file(&n).map_or(0, |d| d.len());
            (n, len)
        })
        .collect()
}

#[test]
fn new_segments_are_preallocated_and_cut_back_quietly_at_recovery() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    publish_300_durably(&store, 1, 0..3);
    // One segment (the recovery of an empty store made it), reserved whole.
    assert_eq!(segments(&mem), vec![("0000000000000001.wal".into(), 4096)]);
    // Past one segment: the sealed one ends at its last record.
    publish_300_durably(&store, 1, 3..20);
    let segs = segments(&mem);
    assert!(segs.len() >= 2, "{segs:?}");
    for (name, len) in segs.iter().take(segs.len() - 1) {
        assert!(
            *len < 4096,
            "sealed {name} keeps its preallocated tail: {len}"
        );
    }
    assert_eq!(segs.last().map(|s| s.1), Some(4096));
    drop(store);

    let (store, rec) = open(&mem, config());
    assert_eq!(rec.truncated_bytes, 0, "unused space is not a torn tail");
    let ids: Vec<u64> = contents(&store, &rec)
        .into_iter()
        .flat_map(|(_, v)| v.into_iter().map(|(id, _)| id))
        .collect();
    assert_eq!(ids, (0..20).collect::<Vec<_>>());
}

/// [`config`] without the zeroed spare prepared ahead: only deleted segments' files become the
/// spare (the recycling tests below).
fn recycling() -> StoreConfig {
    StoreConfig {
        zero_spare: false,
        ..config()
    }
}

/// Fills segments with messages of queue 1, settles them, and waits until a deleted segment's
/// file has become the spare.
fn with_a_spare(mem: &MemStorage) -> (Store, u64) {
    let (store, _) = open(mem, recycling());
    let mut next = 0;
    for _ in 0..40 {
        publish(&store, 1, next);
        next += 1;
    }
    store
        .append_nowait(Command::Settle {
            queue: 1,
            ids: (0..next).collect(),
        })
        .expect("settle");
    // Queue 2 goes on until reclamation (between batches) has made a spare: the settled
    // segments must first be older than the newest durable one.
    for _ in 0..200 {
        publish(&store, 2, next);
        next += 1;
        store.sync().expect("sync").wait().expect("durable");
        if mem.read_file(SPARE).is_some() {
            return (store, next);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    wait_for("a spare", || mem.read_file(SPARE).is_some());
    (store, next)
}

#[test]
fn a_deleted_segment_becomes_the_next_one() {
    let mem = MemStorage::new();
    let (store, mut next) = with_a_spare(&mem);
    let spare = mem.read_file(SPARE).expect("spare");
    // A recycled file holds the old segment's records, not zeros.
    assert!(spare.iter().skip(24).any(|b| *b != 0));
    let before: BTreeSet<String> = segments(&mem).into_iter().map(|s| s.0).collect();
    // Write until the next rollover takes the spare.
    let deadline = Instant::now() + Duration::from_secs(120);
    while mem.read_file(SPARE).is_some() {
        assert!(Instant::now() < deadline, "the spare was never used");
        publish(&store, 2, next);
        next += 1;
        store.sync().expect("sync").wait().expect("durable");
    }
    let after: BTreeSet<String> = segments(&mem).into_iter().map(|s| s.0).collect();
    let new: Vec<&String> = after.difference(&before).collect();
    assert!(!new.is_empty());
    drop(store);

    // Recovery cuts the recycled file's stale records quietly and serves exactly queue 2.
    let (store, rec) = open(&mem, config());
    assert_eq!(rec.truncated_bytes, 0);
    let got = contents(&store, &rec);
    assert_eq!(got.len(), 1, "only queue 2 is left");
    let ids: Vec<u64> = got[0].1.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, (40..next).collect::<Vec<_>>());
    assert!(
        got[0]
            .1
            .iter()
            .all(|(id, body)| body == &vec![*id as u8; 300])
    );
}

#[test]
fn a_power_cut_while_writing_into_a_recycled_file_loses_only_the_unsynced() {
    for garbage in [false, true] {
        for keep in [0usize, 1, 29, 300, 1000, 5000] {
            let mem = MemStorage::new();
            let (store, mut next) = with_a_spare(&mem);
            // Committed: everything so far, then records into the recycled file, synced.
            let mut committed: Vec<u64> = (40..next).collect();
            while mem.read_file(SPARE).is_some() {
                publish(&store, 2, next);
                committed.push(next);
                next += 1;
                store.sync().expect("sync").wait().expect("durable");
            }
            // Unsynced: more records the crash tears after `keep` bytes.
            for _ in 0..5 {
                publish(&store, 2, next);
                next += 1;
            }
            let crashed = mem.crash_with(|_, unsynced| {
                let mut kept: Vec<u8> = unsynced.iter().copied().take(keep).collect();
                // A file with nothing unsynced cannot be torn.
                if garbage && !unsynced.is_empty() {
                    kept.extend(std::iter::repeat_n(0x5a, 17));
                }
                kept
            });
            drop(store);
            let (store, rec) = open(&crashed, config());
            let got = contents(&store, &rec);
            let ids: Vec<u64> = got
                .iter()
                .flat_map(|(_, v)| v.iter().map(|(id, _)| *id))
                .collect();
            // Exactly a prefix of what was written, at least what was committed.
            assert!(
                ids.len() >= committed.len() && ids.iter().copied().eq(40..40 + ids.len() as u64),
                "keep {keep} garbage {garbage}: {ids:?}"
            );
            assert!(
                got.iter()
                    .all(|(_, v)| v.iter().all(|(id, body)| body == &vec![*id as u8; 300]))
            );
            // And it keeps working after recovery.
            publish(&store, 3, 1);
            store.sync().expect("sync").wait().expect("durable");
        }
    }
}
