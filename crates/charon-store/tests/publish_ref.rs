//! `Store::publish_nowait` (a publish with the message borrowed, copied once into the batch)
//! writes what `append_nowait(Command::Publish)` writes, survives a crash like it, and refuses
//! what it refuses without damaging the batch.

mod common;

use bytes::Bytes;
use charon_store::{AppendError, Command, MemStorage, MessageRef, NewMessage, Store};
use common::{config, contents, open};

/// Message `i`: bodies of varying length (the 4 KiB segments roll every few messages), every
/// third with an expiry, every other to two queues.
fn message(i: u64) -> (NewMessage, Vec<(u64, u64)>) {
    let m = NewMessage {
        exchange: Bytes::from_static(b"orders"),
        routing_key: Bytes::from(format!("key-{i}")),
        properties: Bytes::from(vec![0x10, 0x00, i as u8]),
        body: Bytes::from(vec![i as u8; 200 + (i as usize * 37) % 900]),
        enqueue_ms: 1_700_000_000_000 + i,
        expiry_ms: i.is_multiple_of(3).then_some(1_800_000_000_000 + i),
    };
    let members = if i.is_multiple_of(2) {
        vec![(1, i), (2, i)]
    } else {
        vec![(1, i)]
    };
    (m, members)
}

fn borrowed(m: &NewMessage) -> MessageRef<'_> {
    MessageRef {
        exchange: &m.exchange,
        routing_key: &m.routing_key,
        properties: &m.properties,
        body: &m.body,
        enqueue_ms: m.enqueue_ms,
        expiry_ms: m.expiry_ms,
    }
}

/// Every recovered message's metadata (with where its body lies) and body, by queue.
fn recovered(mem: &MemStorage) -> (Vec<charon_store::RecoveredMessage>, common::Contents) {
    let (store, rec) = open(&mem.crash(), config());
    let mut reader = store.meta_reader();
    let mut metas: Vec<_> = rec
        .queues
        .values()
        .flatten()
        .map(|e| reader.read(e.msg).expect("metadata"))
        .collect();
    metas.sort_by_key(|m| m.id);
    metas.dedup_by_key(|m| m.id);
    let c = contents(&store, &rec);
    (metas, c)
}

fn publish_all(store: &Store, owned: bool, ids: std::ops::Range<u64>) {
    for i in ids {
        let (m, members) = message(i);
        let a = if owned {
            store.append_nowait(Command::Publish {
                message: m.clone(),
                members,
            })
        } else {
            store.publish_nowait(borrowed(&m), &members)
        }
        .expect("publish");
        let body = a.body.expect("a publish stores a body");
        assert_eq!(body.len as usize, m.body.len());
    }
}

#[test]
fn borrowed_publish_stores_what_an_owned_one_stores_and_survives_a_crash() {
    let mut results = Vec::new();
    for owned in [true, false] {
        let mem = MemStorage::new();
        let (store, _) = open(&mem, config());
        publish_all(&store, owned, 0..40);
        store.sync().expect("sync").wait().expect("durable");
        // Read back before the crash, from where the append said the body is.
        let (m, members) = message(40);
        let a = if owned {
            store.append(Command::Publish {
                message: m.clone(),
                members,
            })
        } else {
            store
                .publish_nowait(borrowed(&m), &members)
                .map(|a| (a, store.sync().expect("sync")))
        };
        let (a, commit) = a.expect("publish");
        commit.wait().expect("durable");
        let body = store.read_body(&a.body.expect("body")).expect("read");
        assert_eq!(body, m.body);
        drop(store);
        let (metas, c) = recovered(&mem);
        assert_eq!(metas.len(), 41, "every synced message recovered");
        for meta in &metas {
            let (m, _) = message(which(meta));
            assert_eq!(meta.exchange, m.exchange);
            assert_eq!(meta.routing_key, m.routing_key);
            assert_eq!(meta.properties, m.properties);
            assert_eq!(meta.enqueue_ms, m.enqueue_ms);
            assert_eq!(meta.expiry_ms, m.expiry_ms);
        }
        results.push((metas, c));
    }
    // The same records at the same places: same ids, same body locations, same bodies.
    assert_eq!(results[0], results[1]);
    // Queue 2 holds the even messages only, each queue its bodies in order.
    let (_, c) = &results[1];
    let q2: Vec<u64> = c
        .iter()
        .find(|(q, _)| *q == 2)
        .map(|(_, items)| items.iter().map(|(id, _)| *id).collect())
        .unwrap_or_default();
    assert_eq!(
        q2,
        (0..=40)
            .filter(|i: &u64| i.is_multiple_of(2))
            .collect::<Vec<_>>()
    );
    for (_, items) in c {
        for (id, body) in items {
            assert_eq!(body, &message(*id).0.body.to_vec());
        }
    }
}

/// Which message `i` a recovered one is: [`message`] puts `i` in its properties' last byte.
fn which(m: &charon_store::RecoveredMessage) -> u64 {
    u64::from(m.properties.get(2).copied().unwrap_or(u8::MAX))
}

#[test]
fn unsynced_borrowed_publishes_may_be_lost_synced_ones_never() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    publish_all(&store, false, 0..10);
    store.sync().expect("sync").wait().expect("durable");
    // Appended without waiting after the last sync: the crash may keep them or not.
    publish_all(&store, false, 10..15);
    let crashed = mem.crash();
    drop(store);
    let (store, rec) = open(&crashed, config());
    let c = contents(&store, &rec);
    let q1: Vec<u64> = c
        .iter()
        .find(|(q, _)| *q == 1)
        .map(|(_, items)| items.iter().map(|(id, _)| *id).collect())
        .unwrap_or_default();
    assert!(q1.len() >= 10, "synced publishes lost: {q1:?}");
    assert_eq!(q1, (0..q1.len() as u64).collect::<Vec<_>>(), "a prefix");
}

#[test]
fn refused_borrowed_publishes_leave_the_batch_intact() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    publish_all(&store, false, 0..3);
    let (m, _) = message(3);
    assert!(matches!(
        store.publish_nowait(borrowed(&m), &[]),
        Err(AppendError::Invalid(_))
    ));
    let long = vec![b'x'; 256];
    let bad = MessageRef {
        exchange: &long,
        ..borrowed(&m)
    };
    assert!(matches!(
        store.publish_nowait(bad, &[(1, 3)]),
        Err(AppendError::Invalid(_))
    ));
    publish_all(&store, false, 3..6);
    store.sync().expect("sync").wait().expect("durable");
    drop(store);
    let (metas, c) = recovered(&mem);
    assert_eq!(metas.len(), 6);
    let q1: Vec<u64> = c
        .iter()
        .find(|(q, _)| *q == 1)
        .map(|(_, items)| items.iter().map(|(id, _)| *id).collect())
        .unwrap_or_default();
    assert_eq!(q1, (0..6).collect::<Vec<_>>());
}
