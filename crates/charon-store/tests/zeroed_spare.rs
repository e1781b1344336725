//! The zeroed spare prepared ahead of the writer (`docs/storage-format.md` §2.5): once the
//! active segment is half full and there is no spare, the compaction thread writes a file of
//! zeros (`spare.wal.zero`), syncs it and renames it to the spare, which the next rollover
//! adopts. A crash while zeroing leaves nothing that recovery takes for a segment or a spare;
//! a zeroed spare found at start is adopted; there is never more than one spare. Only a
//! backlog (live items of at least a quarter of a segment) is worth one: a stream whose
//! messages are settled as they come gets none.

mod common;

use std::time::{Duration, Instant};

use charon_store::{Command, MemStorage, Storage, StoreConfig};
use common::{
    contents, ids, open, publish_300 as publish, publish_300_durably, publish_settled, wait_for,
};

const SPARE: &str = "spare.wal.free";
const ZEROING: &str = "spare.wal.zero";
const SEGMENT: usize = 4096;

fn config() -> StoreConfig {
    StoreConfig {
        segment_size: SEGMENT as u64,
        compact_ratio: 0.0,
        idle_tick: Duration::from_millis(1),
        preallocate: true,
        zero_spare: true,
        ..StoreConfig::default()
    }
}

fn segment_names(mem: &MemStorage) -> Vec<String> {
    let mut names: Vec<String> = mem
        .list()
        .expect("list")
        .into_iter()
        .filter(|n| n.ends_with(".wal"))
        .collect();
    names.sort();
    names
}

#[test]
fn a_zeroed_spare_is_prepared_ahead_and_becomes_the_next_segment() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    // Half a segment (300-byte bodies): the compaction thread prepares the spare.
    let mut next = 0;
    for _ in 0..8 {
        publish(&store, 1, next);
        next += 1;
    }
    store.sync().expect("sync").wait().expect("durable");
    wait_for("a zeroed spare", || mem.read_file(SPARE).is_some());
    let spare = mem.read_file(SPARE).expect("spare");
    assert_eq!(spare.len(), SEGMENT, "zeroed to the segment size");
    assert!(spare.iter().all(|b| *b == 0), "all zeros");
    assert!(mem.read_file(ZEROING).is_none(), "renamed, not copied");
    let before = segment_names(&mem);
    // The next rollover takes it: the spare disappears and a new segment, as long as a whole
    // segment from its creation (zeros after its records), appears.
    let deadline = Instant::now() + Duration::from_secs(120);
    while mem.read_file(SPARE).is_some() {
        assert!(Instant::now() < deadline, "the spare was never used");
        publish(&store, 1, next);
        next += 1;
        store.sync().expect("sync").wait().expect("durable");
    }
    let after = segment_names(&mem);
    let new: Vec<&String> = after.iter().filter(|n| !before.contains(n)).collect();
    assert!(!new.is_empty(), "{before:?} -> {after:?}");
    drop(store);

    // The zeros after the last record are unused space: cut quietly, nothing lost.
    let (store, rec) = open(&mem, config());
    assert_eq!(rec.truncated_bytes, 0);
    assert_eq!(ids(&store, &rec), (0..next).collect::<Vec<_>>());
    assert!(
        contents(&store, &rec)
            .iter()
            .all(|(_, v)| v.iter().all(|(id, body)| body == &vec![*id as u8; 300]))
    );
}

#[test]
fn a_stream_settled_as_it_comes_gets_no_zeroed_spare_and_a_backlog_does() {
    // Consumers keeping up: the segments die whole soon after they are written and their files
    // come back as spares by recycling, so zeroing one would be CPU spent for nothing.
    const BIG: u64 = 4 * SEGMENT as u64;
    let mem = MemStorage::new();
    let cfg = StoreConfig {
        segment_size: BIG,
        // Compaction on (nothing to compact in one segment) so that its checks count the
        // compaction thread's rounds, each of which also looks at the spare.
        compact_ratio: 0.5,
        ..config()
    };
    let (store, _) = open(&mem, cfg);
    let mut next = 0;
    // Past half the segment, every message settled: live bytes stay near zero.
    while store.stats().disk_bytes < BIG * 5 / 8 {
        publish_settled(&store, 1, next, &[next as u8; 300]);
        next += 1;
        store.sync().expect("sync").wait().expect("durable");
    }
    let checks = store.stats().compaction_checks;
    wait_for("three more rounds of the compaction thread", || {
        store.stats().compaction_checks >= checks + 3
    });
    assert!(
        mem.read_file(SPARE).is_none(),
        "a zeroed spare for a stream with nothing live"
    );
    assert!(mem.read_file(ZEROING).is_none(), "a spare being zeroed");
    // A backlog of a quarter of the segment builds in the same segment: now one is zeroed.
    let first_kept = next;
    while store.stats().live_bytes < BIG / 4 {
        publish(&store, 1, next);
        next += 1;
    }
    store.sync().expect("sync").wait().expect("durable");
    assert_eq!(store.stats().segments, 1, "still in the first segment");
    wait_for("a zeroed spare once a backlog is live", || {
        mem.read_file(SPARE).is_some()
    });
    let spare = mem.read_file(SPARE).expect("spare");
    assert_eq!(spare.len() as u64, BIG, "zeroed to the segment size");
    assert!(spare.iter().all(|b| *b == 0), "all zeros");
    drop(store);
    let (store, rec) = open(&mem, config_big(BIG));
    assert_eq!(ids(&store, &rec), (first_kept..next).collect::<Vec<_>>());
}

fn config_big(size: u64) -> StoreConfig {
    StoreConfig {
        segment_size: size,
        ..config()
    }
}

#[test]
fn no_spare_is_zeroed_while_less_than_two_segments_are_free() {
    // A spare takes a whole segment at once: on a nearly full disk it would take the room the
    // writer's next appends need (an append failing with ENOSPC poisons the store).
    let mem = MemStorage::new();
    mem.set_free_bytes(2 * SEGMENT as u64 - 1);
    let (store, _) = open(&mem, config());
    let mut next = 0;
    for _ in 0..8 {
        publish(&store, 1, next);
        next += 1;
    }
    store.sync().expect("sync").wait().expect("durable");
    // The compaction thread ticks every millisecond: give it many chances.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        mem.read_file(SPARE).is_none(),
        "a spare was zeroed on a full disk"
    );
    assert!(
        mem.read_file(ZEROING).is_none(),
        "a spare was being zeroed on a full disk"
    );
    // With room again, the same store makes one (so it was the free space that held it back).
    mem.set_free_bytes(2 * SEGMENT as u64);
    publish(&store, 1, next);
    store.sync().expect("sync").wait().expect("durable");
    wait_for("a zeroed spare once two segments are free", || {
        mem.read_file(SPARE).is_some()
    });
}

#[test]
fn a_file_left_half_zeroed_by_a_crash_is_removed_and_never_adopted() {
    for left in [0usize, 1, 100, SEGMENT / 2, SEGMENT] {
        let mem = MemStorage::new();
        let (store, _) = open(&mem, config());
        publish_300_durably(&store, 1, 0..3);
        drop(store);
        // What a crash while zeroing can leave (on a real disk the creation may reach the
        // directory without a sync): part of the zeros, or garbage that never reached the disk.
        let mut half = vec![0u8; left];
        if let Some(b) = half.last_mut() {
            *b = 0x5a;
        }
        mem.write_file(ZEROING, half);
        let crashed = mem.crash();
        let (store, rec) = open(&crashed, config());
        assert_eq!(rec.truncated_bytes, 0, "left {left}");
        assert_eq!(ids(&store, &rec), vec![0, 1, 2], "left {left}");
        assert!(crashed.read_file(ZEROING).is_none(), "removed at start");
        // And the store goes on (and may prepare a spare of its own later).
        publish_300_durably(&store, 1, 3..20);
        drop(store);
        let (store, rec) = open(&crashed, config());
        assert_eq!(
            ids(&store, &rec),
            (0..20).collect::<Vec<_>>(),
            "left {left}"
        );
    }
}

#[test]
fn a_power_cut_at_any_moment_of_streaming_with_zeroed_spares_loses_nothing_committed() {
    // Crash images taken while the writer rolls over and the compaction thread zeroes spares
    // concurrently: every one recovers to a prefix of what was written that holds everything
    // committed before the image was taken.
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    let mut next = 0;
    let mut images = Vec::new();
    for round in 0..60 {
        for _ in 0..3 {
            publish(&store, 1, next);
            next += 1;
        }
        store.sync().expect("sync").wait().expect("durable");
        // One more, not waited for: may or may not be in the image.
        publish(&store, 1, next);
        next += 1;
        images.push((next - 1, mem.crash()));
        if round % 7 == 0 {
            std::thread::sleep(Duration::from_millis(3));
        }
    }
    drop(store);
    let mut saw_spare = false;
    for (committed, crashed) in images {
        saw_spare |= crashed.read_file(SPARE).is_some();
        let (store, rec) = open(&crashed, config());
        let got = ids(&store, &rec);
        assert!(
            got.len() as u64 >= committed && got.iter().copied().eq(0..got.len() as u64),
            "committed {committed}: {got:?}"
        );
        assert!(crashed.read_file(ZEROING).is_none());
        publish(&store, 2, 1);
        store.sync().expect("sync").wait().expect("durable");
    }
    assert!(saw_spare, "no image held a spare: the test did not test it");
}

#[test]
fn a_zeroed_spare_found_at_start_becomes_the_first_new_segment() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    publish_300_durably(&store, 1, 0..3);
    drop(store);
    mem.remove(SPARE).ok();
    mem.write_file(SPARE, vec![0u8; SEGMENT]);
    mem.sync_dir().expect("sync dir");
    let before = segment_names(&mem);
    let (store, rec) = open(&mem, config());
    assert!(mem.read_file(SPARE).is_none(), "adopted");
    let after = segment_names(&mem);
    let new: Vec<&String> = after.iter().filter(|n| !before.contains(n)).collect();
    assert_eq!(new.len(), 1, "{before:?} -> {after:?}");
    let adopted = mem.read_file(new[0]).expect("new segment");
    assert_eq!(
        adopted.len(),
        SEGMENT,
        "the spare's file, not a new one grown"
    );
    assert_eq!(ids(&store, &rec), vec![0, 1, 2]);
    publish_300_durably(&store, 1, 3..6);
    drop(store);
    let (store, rec) = open(&mem, config());
    assert_eq!(rec.truncated_bytes, 0);
    assert_eq!(ids(&store, &rec), (0..6).collect::<Vec<_>>());
}

#[test]
fn there_is_never_more_than_one_spare() {
    // Settled traffic: segments die (recycling wants the slot) while the compaction thread
    // zeroes spares (it wants the slot too). The files besides segments are at most one spare
    // and one file being zeroed, and once quiet at most the spare.
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    let mut next = 0;
    for _ in 0..40 {
        let first = next;
        for _ in 0..10 {
            publish(&store, 1, next);
            next += 1;
        }
        store
            .append_nowait(Command::Settle {
                queue: 1,
                ids: (first..next).collect(),
            })
            .expect("settle");
        store.sync().expect("sync").wait().expect("durable");
        let others: Vec<String> = mem
            .list()
            .expect("list")
            .into_iter()
            .filter(|n| !n.ends_with(".wal"))
            .collect();
        assert!(
            others.iter().all(|n| n == SPARE || n == ZEROING) && others.len() <= 2,
            "{others:?}"
        );
    }
    drop(store);
    let others: Vec<String> = mem
        .list()
        .expect("list")
        .into_iter()
        .filter(|n| !n.ends_with(".wal"))
        .collect();
    assert!(
        others.iter().all(|n| n == SPARE) && others.len() <= 1,
        "{others:?}"
    );
}
