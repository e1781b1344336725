//! The streaming gather (`docs/storage-format.md` §3): while appends arrive back to back the
//! writer keeps gathering while the batch gains records that are not lazy, up to
//! `StoreConfig::gather_max` or 1 MiB pending. A lone publisher waits at most one `gather`, a
//! batch that stops growing (or only gains settles) is taken, and a batch that keeps growing
//! is taken at the byte cap. The `gather_max`s here are long (minutes), so a writer that
//! gathered on when it should not would make these tests time out or fail, never pass.

mod common;

use std::time::Duration;

use charon_store::{Command, MemStorage, Store, StoreConfig};
use common::{msg, open, publish_and_wait, wait_for};

/// Segments large enough that no rollover or compaction adds records of its own.
fn config(gather: Duration, gather_max: Duration) -> StoreConfig {
    StoreConfig {
        gather,
        gather_max,
        idle_tick: Duration::from_millis(5),
        ..StoreConfig::default()
    }
}

fn publish(store: &Store, id: u64, len: usize) -> u64 {
    store
        .append_nowait(Command::Publish {
            message: msg(&vec![id as u8; len]),
            members: vec![(1, id)],
        })
        .expect("append")
        .index
}

/// `count` publishes of `len` bytes streamed back to back (ids 1..=count); the last one's index.
fn stream(store: &Store, count: u64, len: usize) -> u64 {
    (1..=count).fold(0, |_, id| publish(store, id, len))
}

#[test]
fn a_lone_publisher_waits_at_most_one_gather() {
    let mem = MemStorage::new();
    // Each publish waits for the one before: a writer that finds it waiting (it came back from
    // the last commit after the next publish arrived) gathers once, the batch does not grow, and
    // it is taken. Gathering on to `gather_max` would make `wait_for` time out.
    let (store, _) = open(
        &mem,
        config(Duration::from_millis(1), Duration::from_secs(200)),
    );
    for id in 1..=20 {
        publish_and_wait(&store, 1, id);
    }
    assert_eq!(store.stats().batches, 20);
}

#[test]
fn a_batch_that_stops_growing_is_taken() {
    let mem = MemStorage::new();
    // Steps of 20 ms up to ten minutes: only the batch not growing ends this gather.
    let (store, _) = open(
        &mem,
        config(Duration::from_millis(20), Duration::from_secs(200)),
    );
    let watch = store.durable_watch();
    let last = stream(&store, 300, 200);
    wait_for("the stream's last record durable", || {
        watch.is_durable(last)
    });
    // The publisher now waits for its confirms: a lone publish again goes out.
    publish_and_wait(&store, 1, 301);
}

#[test]
fn a_batch_that_keeps_growing_is_taken_at_a_mebibyte() {
    let mem = MemStorage::new();
    let (store, _) = open(
        &mem,
        config(Duration::from_millis(5), Duration::from_secs(3600)),
    );
    let watch = store.durable_watch();
    // The first record wakes the idle writer and goes out alone; the records streaming behind
    // it make the next batch wait for the writer, and from then on it gathers. `mark` is
    // appended after two batches were taken, so it is in a gathered batch, and that batch
    // grows for as long as this loop runs.
    let mut id = 1;
    let mut mark = None;
    let mut appended = 0usize;
    loop {
        let index = publish(&store, id, 1024);
        id += 1;
        appended += 1024;
        match mark {
            None if store.stats().batches >= 2 => mark = Some(index),
            Some(m) if watch.is_durable(m) => break,
            _ => {}
        }
        // Without the byte cap nothing after `mark` would be durable until this loop ends (the
        // gather would last an hour). The pause every 64 KiB leaves a busy machine's writer
        // thread seconds to be scheduled before the bound is reached: no speed is assumed.
        if appended.is_multiple_of(64 << 10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(appended < 256 << 20, "a growing batch was never taken");
    }
    drop(store);
}

#[test]
fn settles_trickling_in_do_not_hold_a_gathered_batch() {
    let mem = MemStorage::new();
    let (store, _) = open(
        &mem,
        config(Duration::from_millis(20), Duration::from_secs(200)),
    );
    let watch = store.durable_watch();
    let last = stream(&store, 300, 200);
    // A consumer's settles keep arriving (one a millisecond) while the publisher waits: the
    // batch gains only lazy records, so the gather ends after one step. A gather that counted
    // them would go on until 1 MiB of settles, thousands of milliseconds later.
    let mut settles = 0u64;
    while !watch.is_durable(last) {
        store
            .append_nowait(Command::Settle {
                queue: 1,
                ids: vec![settles % 300 + 1],
            })
            .expect("settle");
        settles += 1;
        assert!(settles < 5_000, "settles held the publishes' commit");
        std::thread::sleep(Duration::from_millis(1));
    }
}
