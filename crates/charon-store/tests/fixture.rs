//! Format fixtures: `fixtures/v1-segment.wal` is a segment written by format
//! version 1 (every v1 record kind once), `fixtures/v2-segment.wal` one written
//! by version 2 (the same commands plus `Park` and `Route`),
//! `fixtures/v3-segment.wal` one written by version 3 (plus `DeliveryCounts`).
//! The store must still load all three, must write the v1 and v2 commands'
//! records byte for byte as they did (only the segment header's version and
//! CRC differ), and must write exactly the v3 bytes: a change to any means a
//! new format version (`docs/storage-format.md` §2.4).
//!
//! Regenerate the newest fixture (only together with a format version bump):
//! `UPDATE_FIXTURES=1 cargo test -p charon-store --test fixture`.

mod common;

use bytes::Bytes;
use charon_store::{Command, MemStorage, NewMessage};
use common::{contents, open};

/// The tests' configuration without preallocation: the written file is exactly the records.
fn config() -> charon_store::StoreConfig {
    charon_store::StoreConfig {
        preallocate: false,
        ..common::config()
    }
}

const SEG1: &str = "0000000000000001.wal";
const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/v1-segment.wal");
const FIXTURE_V2: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/v2-segment.wal");
const FIXTURE_V3: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/v3-segment.wal");
/// The version new segments are written with.
const CURRENT: u32 = 3;
/// Segment header bytes (version and CRC differ between versions).
const HEADER: usize = 24;

fn message(body: &'static [u8], expiry_ms: Option<u64>) -> NewMessage {
    NewMessage {
        exchange: Bytes::from_static(b"amq.topic"),
        routing_key: Bytes::from_static(b"a.b"),
        properties: Bytes::from_static(&[0x10, 0x00, 2]),
        body: Bytes::from_static(body),
        enqueue_ms: 1_700_000_000_123,
        expiry_ms,
    }
}

fn commands() -> Vec<Command> {
    vec![
        Command::PutDefinition {
            kind: 1,
            key: Bytes::from_static(b"/\0q1"),
            value: Bytes::from_static(b"{\"durable\":true,\"id\":1}"),
        },
        Command::PutDefinition {
            kind: 1,
            key: Bytes::from_static(b"/\0gone"),
            value: Bytes::from_static(b"{}"),
        },
        Command::DeleteDefinition {
            kind: 1,
            key: Bytes::from_static(b"/\0gone"),
        },
        Command::Publish {
            message: message(b"first", None),
            members: vec![(1, 1), (2, 1)],
        },
        Command::Publish {
            message: message(b"second", Some(1_700_000_060_000)),
            members: vec![(1, 2)],
        },
        Command::Enqueue {
            msg: 5,
            members: vec![(3, 1)],
        },
        Command::DeliveryCount {
            member: (1, 1),
            count: 2,
        },
        Command::Settle {
            queue: 2,
            ids: vec![1],
        },
        Command::DeadLetter {
            source: (1, 1),
            message: message(b"first, dead-lettered", None),
            targets: vec![(4, 1)],
        },
        Command::Publish {
            message: message(b"purged", None),
            members: vec![(5, 1)],
        },
        Command::Purge { queue: 5 },
    ]
}

fn expected(store: &charon_store::Store, rec: &charon_store::Recovered) {
    assert_eq!(
        contents(store, rec),
        vec![
            (1, vec![(2, b"second".to_vec())]),
            (3, vec![(1, b"second".to_vec())]),
            (4, vec![(1, b"first, dead-lettered".to_vec())]),
        ]
    );
    let q1 = rec.queues.get(&1).and_then(|v| v.first()).expect("q1");
    let m = store.meta_reader().read(q1.msg).expect("metadata");
    assert_eq!(m.expiry_ms, Some(1_700_000_060_000));
    assert_eq!(m.enqueue_ms, 1_700_000_000_123);
    assert_eq!(&m.exchange[..], b"amq.topic");
    assert_eq!(&m.routing_key[..], b"a.b");
    assert_eq!(rec.definitions.len(), 1);
    assert_eq!(rec.last_index, 11);
}

#[test]
fn v1_fixture_still_loads_and_its_records_are_written_unchanged() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    for cmd in commands() {
        store.append_nowait(cmd).expect("append");
    }
    drop(store);
    let written = mem.read_file(SEG1).expect("segment 1");
    let fixture = std::fs::read(FIXTURE).expect("fixture");
    assert_eq!(fixture.get(8..12), Some(&1u32.to_le_bytes()[..]));
    assert_eq!(written.get(8..12), Some(&CURRENT.to_le_bytes()[..]));
    assert!(
        written.get(HEADER..) == fixture.get(HEADER..),
        "format v1 record bytes changed"
    );

    let loaded = MemStorage::new();
    loaded.write_file(SEG1, fixture);
    let (store, rec) = open(&loaded, config());
    expected(&store, &rec);
}

fn commands_v2() -> Vec<Command> {
    let mut c = commands();
    c.push(Command::Park {
        member: (1, 2),
        due_ms: 1_700_000_090_000,
        attempt: 2,
    });
    c.push(Command::Publish {
        message: message(b"delayed", None),
        members: vec![(6, 1)],
    });
    c.push(Command::Route {
        source: (6, 1),
        targets: vec![(4, 2), (7, 1)],
    });
    c
}

#[test]
fn v2_fixture_still_loads_and_its_records_are_written_unchanged() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    for cmd in commands_v2() {
        store.append_nowait(cmd).expect("append");
    }
    drop(store);
    let written = mem.read_file(SEG1).expect("segment 1");
    let fixture = std::fs::read(FIXTURE_V2).expect("fixture");
    assert_eq!(fixture.get(8..12), Some(&2u32.to_le_bytes()[..]));
    assert_eq!(written.get(8..12), Some(&CURRENT.to_le_bytes()[..]));
    assert!(
        written.get(HEADER..) == fixture.get(HEADER..),
        "format v2 record bytes changed"
    );

    let loaded = MemStorage::new();
    loaded.write_file(SEG1, fixture);
    let (store, rec) = open(&loaded, config());
    expected_v2(&store, &rec);
    assert_eq!(rec.last_index, 14);
}

fn expected_v2(store: &charon_store::Store, rec: &charon_store::Recovered) {
    assert_eq!(
        contents(store, rec),
        vec![
            (1, vec![(2, b"second".to_vec())]),
            (3, vec![(1, b"second".to_vec())]),
            (
                4,
                vec![
                    (1, b"first, dead-lettered".to_vec()),
                    (2, b"delayed".to_vec())
                ]
            ),
            (7, vec![(1, b"delayed".to_vec())]),
        ]
    );
    let q1 = rec.queues.get(&1).and_then(|v| v.first()).expect("q1");
    assert_eq!(q1.parked, Some((1_700_000_090_000, 2)));
}

fn commands_v3() -> Vec<Command> {
    let mut c = commands_v2();
    // Counts for three members of queue 4 in one record: one that exists twice (the last
    // count wins), one that exists once, one that never existed (a no-op).
    c.push(Command::DeliveryCounts {
        queue: 4,
        counts: vec![(1, 1), (2, 1), (9, 4), (1, 3)],
    });
    // The old one-member record still works beside it.
    c.push(Command::DeliveryCount {
        member: (3, 1),
        count: 2,
    });
    c
}

#[test]
fn v3_fixture_is_written_and_read_unchanged() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    for cmd in commands_v3() {
        store.append_nowait(cmd).expect("append");
    }
    drop(store);
    let written = mem.read_file(SEG1).expect("segment 1");
    if std::env::var_os("UPDATE_FIXTURES").is_some() {
        std::fs::write(FIXTURE_V3, &written).expect("write fixture");
    }
    let fixture = std::fs::read(FIXTURE_V3).expect("fixture");
    assert!(written == fixture, "format v3 bytes changed");

    let loaded = MemStorage::new();
    loaded.write_file(SEG1, fixture);
    let (store, rec) = open(&loaded, config());
    expected_v2(&store, &rec);
    let counts = |q: u64| -> Vec<(u64, u32)> {
        rec.queues
            .get(&q)
            .map(|v| v.iter().map(|e| (e.id, e.delivery_count)).collect())
            .unwrap_or_default()
    };
    assert_eq!(counts(4), vec![(1, 3), (2, 1)]);
    assert_eq!(counts(3), vec![(1, 2)]);
    assert_eq!(counts(7), vec![(1, 0)]);
    assert_eq!(rec.last_index, 16);
}
