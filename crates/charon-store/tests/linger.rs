//! Lazy batches linger (`docs/storage-format.md` §3): a batch of settles nobody waits for is
//! not synced at once; a publish, a waiter or closing the store takes it at once, and without
//! any of them it goes out within `StoreConfig::linger`. What a crash keeps is checked on the
//! crash image (only synced bytes survive).

mod common;

use std::time::Duration;

use charon_store::{Command, MemStorage, StoreConfig};
use common::{config, ids, open, publish_and_wait, wait_commit, wait_for};

/// A linger no test lives to see: whatever is synced was taken early for a reason.
fn forever() -> StoreConfig {
    StoreConfig {
        linger: Duration::from_secs(3600),
        ..config()
    }
}

fn ids_after_crash(mem: &MemStorage) -> Vec<u64> {
    let crashed = mem.crash();
    let (store, rec) = open(&crashed, config());
    ids(&store, &rec)
}

#[test]
fn a_lone_settle_lingers_until_a_publish_takes_it() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, forever());
    let watch = store.durable_watch();
    publish_and_wait(&store, 1, 1);
    let settle = store
        .append_nowait(Command::Settle {
            queue: 1,
            ids: vec![1],
        })
        .expect("settle");
    // It lingers: not synced (a crash now brings message 1 back).
    std::thread::sleep(Duration::from_millis(300));
    assert!(!watch.is_durable(settle.index), "a lone settle was synced");
    assert_eq!(ids_after_crash(&mem), vec![1]);
    // A publish is urgent: its commit carries the settle with it.
    let p = publish_and_wait(&store, 1, 2);
    assert!(p > settle.index);
    assert!(watch.is_durable(settle.index));
    assert_eq!(ids_after_crash(&mem), vec![2]);
}

#[test]
fn a_sync_ends_the_linger() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, forever());
    publish_and_wait(&store, 1, 1);
    publish_and_wait(&store, 1, 2);
    for id in [1, 2] {
        store
            .append_nowait(Command::DeliveryCount {
                member: (1, id),
                count: 3,
            })
            .expect("count");
    }
    store
        .append_nowait(Command::Settle {
            queue: 1,
            ids: vec![1],
        })
        .expect("settle");
    wait_commit("the barrier", store.sync().expect("sync"));
    assert_eq!(ids_after_crash(&mem), vec![2]);
}

#[test]
fn closing_writes_a_lingering_settle() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, forever());
    publish_and_wait(&store, 1, 1);
    publish_and_wait(&store, 1, 2);
    store
        .append_nowait(Command::Settle {
            queue: 1,
            ids: vec![2],
        })
        .expect("settle");
    // Dropping the store ends the linger at once (the drop joins the writer).
    drop(store);
    assert_eq!(ids_after_crash(&mem), vec![1]);
}

#[test]
fn lazy_records_go_out_within_the_linger_on_their_own() {
    let mem = MemStorage::new();
    let (store, _) = open(
        &mem,
        StoreConfig {
            linger: Duration::from_millis(20),
            ..config()
        },
    );
    let watch = store.durable_watch();
    publish_and_wait(&store, 1, 1);
    publish_and_wait(&store, 1, 2);
    let settle = store
        .append_nowait(Command::Settle {
            queue: 1,
            ids: vec![1, 2],
        })
        .expect("settle");
    wait_for("the lingering settle to be synced", || {
        watch.is_durable(settle.index)
    });
    assert!(ids_after_crash(&mem).is_empty());
}

#[test]
fn a_megabyte_of_settles_is_taken_without_lingering() {
    let mem = MemStorage::new();
    let (store, _) = open(
        &mem,
        StoreConfig {
            segment_size: 64 << 20,
            ..forever()
        },
    );
    let watch = store.durable_watch();
    publish_and_wait(&store, 1, 1);
    // Settles of ids never published are records all the same: 8 bytes an id, ~80 KB a
    // record, so the 14th brings the lingering batch past 1 MiB at the latest; what comes
    // after the batch was taken lingers again (the hour of `forever`).
    let mut indexes = Vec::new();
    for r in 0..20u64 {
        let ids = (r * 10_000 + 100..(r + 1) * 10_000 + 100).collect();
        indexes.push(
            store
                .append_nowait(Command::Settle { queue: 1, ids })
                .expect("settle")
                .index,
        );
    }
    let full = indexes[13];
    wait_for("a full lazy batch to be synced", || watch.is_durable(full));
    assert_eq!(ids_after_crash(&mem), vec![1]);
}
