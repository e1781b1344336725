//! Store behaviour through the public API: publish, settle, dead-letter,
//! definitions, restart, compaction, poisoning.

mod common;

use bytes::Bytes;
use charon_store::{AppendError, Command, CommitError, MemStorage, Store};
use common::{config, contents, msg, open};

#[test]
fn publish_to_two_queues_survives_restart_and_body_is_stored_once() {
    let mem = MemStorage::new();
    {
        let (store, rec) = open(&mem, config());
        assert!(rec.queues.is_empty());
        let (a, commit) = store
            .append(Command::Publish {
                message: msg(b"hello"),
                members: vec![(1, 10), (2, 20)],
            })
            .expect("append");
        commit.wait().expect("durable");
        let body = a.body.expect("body ref");
        assert_eq!(
            store.read_body(&body).expect("read"),
            Bytes::from_static(b"hello")
        );
        assert_eq!(store.stats().live_messages, 1);
    }
    let (store, rec) = open(&mem.crash(), config());
    assert_eq!(
        contents(&store, &rec),
        vec![
            (1, vec![(10, b"hello".to_vec())]),
            (2, vec![(20, b"hello".to_vec())])
        ]
    );
    assert_eq!(
        rec.queues[&1].first().expect("member").msg,
        rec.queues[&2].first().expect("member").msg,
        "one message shared by both queues"
    );
    let a = store
        .meta_reader()
        .read(rec.queues[&1].first().expect("member").msg)
        .expect("metadata");
    assert_eq!(a.exchange, Bytes::from_static(b"amq.direct"));
    assert_eq!(a.properties, Bytes::from_static(&[0x10, 0x00, 2]));
}

#[test]
fn settle_dead_letter_delivery_count_and_definitions() {
    let mem = MemStorage::new();
    {
        let (store, _) = open(&mem, config());
        for i in 0..5u64 {
            store
                .append_nowait(Command::Publish {
                    message: msg(&[i as u8]),
                    members: vec![(1, i)],
                })
                .expect("append");
        }
        store
            .append_nowait(Command::Settle {
                queue: 1,
                ids: vec![0, 2],
            })
            .expect("settle");
        store
            .append_nowait(Command::DeliveryCount {
                member: (1, 1),
                count: 3,
            })
            .expect("count");
        store
            .append_nowait(Command::DeadLetter {
                source: (1, 4),
                message: msg(b"dead"),
                targets: vec![(9, 1)],
            })
            .expect("dlx");
        for (k, v) in [("a", "1"), ("b", "2")] {
            store
                .append_nowait(Command::PutDefinition {
                    kind: 1,
                    key: Bytes::from(k),
                    value: Bytes::from(v),
                })
                .expect("def");
        }
        store
            .append_nowait(Command::DeleteDefinition {
                kind: 1,
                key: Bytes::from("a"),
            })
            .expect("del");
        store.sync().expect("sync").wait().expect("durable");
    }
    let (store, rec) = open(&mem.crash(), config());
    assert_eq!(
        contents(&store, &rec),
        vec![
            (1, vec![(1, vec![1]), (3, vec![3])]),
            (9, vec![(1, b"dead".to_vec())]),
        ]
    );
    assert_eq!(rec.queues[&1].first().expect("member").delivery_count, 3);
    assert_eq!(rec.definitions.len(), 1);
    assert_eq!(rec.definitions[&(1, Bytes::from("b"))], Bytes::from("2"));
}

#[test]
fn unsynced_appends_may_be_lost_synced_ones_never() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    let (_, c) = store
        .append(Command::Publish {
            message: msg(b"kept"),
            members: vec![(1, 1)],
        })
        .expect("append");
    c.wait().expect("durable");
    // Crash "now": whatever the writer has not synced yet is gone.
    let crashed = mem.crash();
    drop(store);
    let (store, rec) = open(&crashed, config());
    assert_eq!(contents(&store, &rec)[0], (1, vec![(1, b"kept".to_vec())]));
}

#[test]
fn settled_segments_are_deleted_and_live_ones_compacted() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    // One long-lived message, then lots of traffic that is settled.
    store
        .append_nowait(Command::Publish {
            message: msg(b"old"),
            members: vec![(7, 0)],
        })
        .expect("append");
    store
        .append_nowait(Command::PutDefinition {
            kind: 2,
            key: Bytes::from("q"),
            value: Bytes::from("durable"),
        })
        .expect("def");
    for i in 1..400u64 {
        common::publish_settled(&store, 1, i, &[0u8; 200]);
    }
    store.sync().expect("sync").wait().expect("durable");
    // Let the writer reclaim and compact (it does so between batches and on idle ticks).
    // Polls up to 120 s: reclamation runs when the writer gets to it.
    for _ in 0..24_000 {
        std::thread::sleep(std::time::Duration::from_millis(5));
        if store.stats().segments <= 3 {
            break;
        }
    }
    let stats = store.stats();
    assert!(stats.segments <= 3, "segments left: {stats:?}");
    assert!(stats.segments_deleted > 10, "{stats:?}");
    assert!(stats.records_carried >= 2, "{stats:?}");
    store.sync().expect("sync").wait().expect("durable");
    drop(store);
    let (store, rec) = open(&mem.crash(), config());
    assert_eq!(
        contents(&store, &rec),
        vec![(7, vec![(0, b"old".to_vec())])]
    );
    assert_eq!(rec.definitions.len(), 1);
}

#[test]
fn body_refs_follow_compaction() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    let (a, c) = store
        .append(Command::Publish {
            message: msg(b"moving"),
            members: vec![(1, 0)],
        })
        .expect("append");
    c.wait().expect("durable");
    for i in 1..100u64 {
        common::publish_settled(&store, 2, i, &[1u8; 300]);
    }
    store.sync().expect("sync").wait().expect("durable");
    let old = a.body.expect("body");
    // Polls up to 120 s: reclamation runs when the writer gets to it.
    for _ in 0..24_000 {
        std::thread::sleep(std::time::Duration::from_millis(5));
        if store
            .current_body(old.msg)
            .is_some_and(|b| b.segment != old.segment)
        {
            break;
        }
    }
    assert_ne!(
        store.current_body(old.msg).expect("live").segment,
        old.segment
    );
    assert_eq!(
        store.read_body(&old).expect("read"),
        Bytes::from_static(b"moving")
    );
}

#[test]
fn failed_sync_poisons_the_store() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    mem.fail_syncs_after(0);
    let (_, c) = store
        .append(Command::Publish {
            message: msg(b"x"),
            members: vec![(1, 1)],
        })
        .expect("append");
    assert!(matches!(c.wait(), Err(CommitError::Poisoned(_))));
    assert!(matches!(
        store.append(Command::Purge { queue: 1 }),
        Err(AppendError::Poisoned(_))
    ));
    assert!(store.poisoned().is_some());
}

#[test]
fn invalid_commands_are_refused() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    let mut m = msg(b"x");
    m.exchange = Bytes::from(vec![b'e'; 300]);
    assert!(matches!(
        store.append(Command::Publish {
            message: m,
            members: vec![]
        }),
        Err(AppendError::Invalid(_))
    ));
    assert_eq!(
        store
            .append_nowait(Command::Publish {
                message: msg(b"unroutable"),
                members: vec![]
            })
            .err(),
        Some(AppendError::Invalid("publish without members"))
    );
}

#[test]
fn commit_can_be_awaited() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    let (_, c) = store.append(Command::Purge { queue: 1 }).expect("append");
    // A minimal executor: the commit is a plain future.
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let mut c = std::pin::pin!(c);
    loop {
        if let std::task::Poll::Ready(r) = c.as_mut().poll(&mut cx) {
            r.expect("durable");
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn disk_store_reports_free_bytes_and_recovers() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (store, _) = Store::open_dir(dir.path(), config()).expect("open");
        assert!(store.free_bytes().expect("statvfs") > 0);
        let (_, c) = store
            .append(Command::Publish {
                message: msg(b"disk"),
                members: vec![(3, 1)],
            })
            .expect("append");
        c.wait().expect("durable");
    }
    let (store, rec) = Store::open_dir(dir.path(), config()).expect("reopen");
    assert_eq!(
        contents(&store, &rec),
        vec![(3, vec![(1, b"disk".to_vec())])]
    );
}

#[test]
fn log_index_never_goes_back_after_everything_is_reclaimed() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    let mut last = 0;
    for i in 0..200u64 {
        let a = store
            .append_nowait(Command::Publish {
                message: msg(&[0u8; 100]),
                members: vec![(1, i)],
            })
            .expect("append");
        last = store
            .append_nowait(Command::Settle {
                queue: 1,
                ids: vec![i],
            })
            .expect("settle")
            .index;
        assert!(a.index < last);
    }
    store.sync().expect("sync").wait().expect("durable");
    // Wait until no segment with a record is left.
    // Polls up to 120 s: reclamation runs when the writer gets to it.
    for _ in 0..24_000 {
        if store.stats().segments <= 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(store.stats().segments, 1, "{:?}", store.stats());
    drop(store);
    let (store, rec) = open(&mem.crash(), config());
    assert_eq!(rec.last_index, last);
    let (a, c) = store.append(Command::Purge { queue: 1 }).expect("append");
    c.wait().expect("durable");
    assert_eq!(a.index, last + 1);
}

#[test]
fn dead_letter_without_targets_stores_nothing_and_frees_its_segment() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    for i in 0..100u64 {
        store
            .append_nowait(Command::Publish {
                message: msg(&[0u8; 100]),
                members: vec![(1, i)],
            })
            .expect("append");
        let a = store
            .append_nowait(Command::DeadLetter {
                source: (1, i),
                message: msg(b"nowhere"),
                targets: vec![],
            })
            .expect("dead-letter");
        assert_eq!(a.body, None);
    }
    store.sync().expect("sync").wait().expect("durable");
    // Polls up to 120 s: reclamation runs when the writer gets to it.
    for _ in 0..24_000 {
        if store.stats().segments <= 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let stats = store.stats();
    assert_eq!((stats.segments, stats.live_messages), (1, 0), "{stats:?}");
    assert_eq!(stats.records_carried, 0, "{stats:?}");
}
