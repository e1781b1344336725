//! Deferred publishes (`Store::publish_nowait`, issue 13 b): while the writer is busy with an
//! earlier batch, a publish waits in the pending batch without an index entry; a settle of its
//! last member cancels it — never written, its confirm (the durable watch reaching its index)
//! released with the batch it belonged to — and the rest is written as before. The writer is
//! held at a segment creation (`common::gated`) so the order of appends and batch takes is
//! fixed, not left to timing.

mod common;

use std::sync::{Arc, Condvar, Mutex};

use bytes::Bytes;
use charon_store::{Command, MemStorage, MessageRef, Store, StoreConfig};
use common::gated::{Gated, set_gate, wait_held};
use common::{contents, msg, open};

fn config() -> StoreConfig {
    StoreConfig {
        // No compaction: the segments stay as written, so the test can look at them.
        compact_ratio: 0.0,
        ..common::config()
    }
}

fn body(i: u64) -> Vec<u8> {
    vec![(i % 251) as u8; 100 + i as usize]
}

/// Publishes `body(i)` at `members` with `publish_nowait`; its index.
fn publish(store: &Store, i: u64, members: &[(u64, u64)]) -> u64 {
    let owned = msg(&body(i));
    let m = MessageRef {
        exchange: &owned.exchange,
        routing_key: &owned.routing_key,
        properties: &owned.properties,
        body: &owned.body,
        enqueue_ms: owned.enqueue_ms,
        expiry_ms: owned.expiry_ms,
    };
    let a = store.publish_nowait(m, members).expect("publish");
    assert_eq!(a.body, None, "a deferred publish has no place yet");
    a.index
}

fn settle(store: &Store, queue: u64, ids: &[u64]) {
    store
        .append_nowait(Command::Settle {
            queue,
            ids: ids.to_vec(),
        })
        .expect("settle");
}

/// A store on a gated `MemStorage` whose writer is held (at a new segment's creation) with
/// an earlier batch: what is appended next stays pending until the gate opens.
fn held_store() -> (MemStorage, Arc<common::gated::Gate>, Store) {
    let gate = Arc::new((Mutex::new((false, false)), Condvar::new()));
    let mem = MemStorage::new();
    let storage = Gated {
        mem: mem.clone(),
        gate: gate.clone(),
    };
    let (store, _) = Store::open(Arc::new(storage), config()).expect("open");
    set_gate(&gate, true);
    // Queue 9's messages (owned appends: written in place) until one opens a new segment.
    let mut i = 0;
    loop {
        let a = store
            .append_nowait(Command::Publish {
                message: msg(&[9u8; 700]),
                members: vec![(9, i)],
            })
            .expect("append");
        i += 1;
        if a.body.expect("body").segment > 1 {
            break;
        }
    }
    assert!(wait_held(&gate), "the writer never reached the new segment");
    (mem, gate, store)
}

/// Queue → ids recovered.
fn ids(c: &common::Contents, queue: u64) -> Vec<u64> {
    c.iter()
        .find(|(q, _)| *q == queue)
        .map(|(_, items)| items.iter().map(|(id, _)| *id).collect())
        .unwrap_or_default()
}

#[test]
fn a_publish_settled_before_its_batch_is_taken_is_never_written() {
    let (mem, gate, store) = held_store();
    let watch = store.durable_watch();
    let a = publish(&store, 1, &[(1, 1)]);
    let b = publish(&store, 2, &[(1, 2)]);
    let c = publish(&store, 3, &[(1, 3)]);
    let d = publish(&store, 4, &[(1, 4), (2, 4)]);
    let e = publish(&store, 5, &[(1, 5)]);
    assert!(a < b && b < c && c < d && d < e);
    // Before the batch is formed the store knows the members by the deferred publishes.
    assert_eq!(store.message_of((1, 2)), Some(b));
    assert_eq!(store.message_of((2, 4)), Some(d));
    // 1 and 3 are settled (their only member): cancelled. 4 keeps its member in queue 2.
    settle(&store, 1, &[1, 3]);
    settle(&store, 1, &[4]);
    assert_eq!(store.message_of((1, 1)), None);
    assert_eq!(store.message_of((1, 3)), None);
    assert_eq!(store.message_of((2, 4)), Some(d));
    assert!(
        !watch.is_durable(a),
        "nothing of the held batch is durable yet"
    );
    set_gate(&gate, false);
    store.sync().expect("sync").wait().expect("durable");
    let stats = store.stats();
    assert_eq!(stats.cancelled, 2);
    // Confirmed: durable or cancelled.
    for index in [a, b, c, d, e] {
        assert!(watch.is_durable(index), "index {index} not confirmed");
    }
    // The cancelled ones have no record; the others are where the index says.
    assert_eq!(store.current_body(a), None);
    assert_eq!(store.current_body(c), None);
    let mut reader = store.meta_reader();
    assert!(reader.read(a).is_err(), "a cancelled publish was written");
    let at = store.current_body(b).expect("b is live");
    assert_eq!(store.read_body(&at).expect("read").as_ref(), &body(2)[..]);
    assert_eq!(store.message_of((1, 2)), Some(b));

    // A crash now: the synced state, without the cancelled ones, 4 only in queue 2.
    let crashed = mem.crash();
    drop(store);
    let (store, rec) = open(&crashed, config());
    let got = contents(&store, &rec);
    assert_eq!(ids(&got, 1), vec![2, 5]);
    assert_eq!(ids(&got, 2), vec![4]);
    assert_eq!(
        ids(&got, 9).len(),
        rec.queues.get(&9).map_or(0, |v| v.len())
    );
    for (q, items) in &got {
        for (id, b) in items {
            if *q != 9 {
                assert_eq!(b, &body(*id), "queue {q} id {id}");
            }
        }
    }
    assert!(rec.last_index >= e);
}

#[test]
fn a_cancelled_publish_at_the_end_of_a_batch_keeps_its_index_used() {
    let (mem, gate, store) = held_store();
    let watch = store.durable_watch();
    let kept = publish(&store, 1, &[(1, 1)]);
    let last = publish(&store, 2, &[(1, 2)]);
    settle(&store, 1, &[2]);
    set_gate(&gate, false);
    store.sync().expect("sync").wait().expect("durable");
    assert_eq!(store.stats().cancelled, 1);
    assert!(watch.is_durable(last), "the cancelled publish is confirmed");
    // After a crash the log goes on above the confirmed index: it is never handed out again
    // (the batch ends with an empty settle under that index).
    let crashed = mem.crash();
    drop(store);
    let (store, rec) = open(&crashed, config());
    assert!(
        rec.last_index >= last,
        "index {last} was confirmed, the log ends at {}",
        rec.last_index
    );
    assert_eq!(ids(&contents(&store, &rec), 1), vec![1]);
    let next = store
        .append_nowait(Command::PutDefinition {
            kind: 1,
            key: Bytes::from_static(b"k"),
            value: Bytes::from_static(b"v"),
        })
        .expect("append");
    assert!(next.index > last && next.index > kept);
}

#[test]
fn other_records_after_a_deferred_publish_keep_their_order() {
    let (mem, gate, store) = held_store();
    let a = publish(&store, 1, &[(1, 1)]);
    // Deferred after it: a delivery count of it and a definition; then a park (not
    // deferrable: the region is formed first) and a settle that no longer cancels.
    store
        .append_nowait(Command::DeliveryCounts {
            queue: 1,
            counts: vec![(1, 3)],
        })
        .expect("counts");
    store
        .append_nowait(Command::PutDefinition {
            kind: 1,
            key: Bytes::from_static(b"k"),
            value: Bytes::from_static(b"v"),
        })
        .expect("def");
    let b = publish(&store, 2, &[(1, 2)]);
    store
        .append_nowait(Command::Park {
            member: (1, 2),
            due_ms: 77,
            attempt: 1,
        })
        .expect("park");
    settle(&store, 1, &[2]);
    set_gate(&gate, false);
    store.sync().expect("sync").wait().expect("durable");
    // The park formed 2's publish before it: the settle could not cancel it any more.
    assert_eq!(store.stats().cancelled, 0);
    assert!(store.current_body(b).is_none(), "settled");
    let crashed = mem.crash();
    drop(store);
    let (_store, rec) = open(&crashed, config());
    let q1 = rec.queues.get(&1).expect("queue 1");
    let entries: Vec<_> = q1.iter().map(|e| (e.id, e.msg, e.delivery_count)).collect();
    assert_eq!(entries, vec![(1, a, 3)]);
    assert_eq!(
        rec.definitions.get(&(1, Bytes::from_static(b"k"))),
        Some(&Bytes::from_static(b"v"))
    );
}
