//! `MetaReader`: a live message's metadata read back from its record, also after compaction
//! moved the message and deleted (and recycled) the segment a reader's window still holds.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use charon_store::{Command, MemStorage, ReadError, StoreConfig};
use common::{key_for, msg, open};

fn config() -> StoreConfig {
    StoreConfig {
        segment_size: 4096,
        compact_ratio: 0.5,
        // Exercise compaction from the first sealed segment on (the default waits for more).
        compact_min_segments: 0,
        idle_tick: Duration::from_millis(1),
        preallocate: true,
        ..StoreConfig::default()
    }
}

#[test]
fn metadata_follows_messages_compaction_moved() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    // 60 messages of 100 B in queue 1 (a few segments), each with its own routing key, expiry
    // and, for a third of them, a second member in queue 2.
    let mut ids = Vec::new();
    for i in 0..60u64 {
        let mut m = msg(&[i as u8; 100]);
        m.expiry_ms = Some(1_700_000_000_000 + i);
        let members = if i.is_multiple_of(3) {
            vec![(1, i), (2, i)]
        } else {
            vec![(1, i)]
        };
        let a = store
            .append_nowait(Command::Publish {
                message: m,
                members,
            })
            .expect("append");
        ids.push((i, a.index, a.body.expect("body").segment));
    }
    store.sync().expect("sync").wait().expect("durable");
    // A reader whose window holds the first segment, before anything moves.
    let mut early = store.meta_reader();
    let first = ids.first().expect("published").1;
    assert_eq!(
        early.read(first).expect("read").expiry_ms,
        Some(1_700_000_000_000)
    );
    // Settle all but every fourth message: the old segments become sparse and are compacted;
    // more traffic lets the compacted ones be deleted and their files recycled.
    let keep = |i: u64| i.is_multiple_of(4);
    let gone: Vec<u64> = ids.iter().map(|(i, ..)| *i).filter(|i| !keep(*i)).collect();
    store
        .append_nowait(Command::Settle {
            queue: 1,
            ids: gone.clone(),
        })
        .expect("settle");
    store
        .append_nowait(Command::Settle {
            queue: 2,
            ids: gone,
        })
        .expect("settle");
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut n = 0u64;
    while store.stats().segments_deleted == 0 || store.stats().records_carried == 0 {
        assert!(
            Instant::now() < deadline,
            "compaction never ran: {:?}",
            store.stats()
        );
        common::publish_settled(&store, 3, n, &[9; 300]);
        n += 1;
        store.sync().expect("sync").wait().expect("durable");
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut moved = 0;
    for reader in [&mut early, &mut store.meta_reader()] {
        for (i, id, seg) in &ids {
            let got = reader.read(*id);
            if !keep(*i) {
                assert!(
                    matches!(got, Err(ReadError::NotFound(x)) if x == *id),
                    "{i}: {got:?}"
                );
                continue;
            }
            let m = got.expect("metadata of a live message");
            moved += usize::from(m.body.segment != *seg);
            assert_eq!(m.id, *id);
            assert_eq!(m.expiry_ms, Some(1_700_000_000_000 + i));
            assert_eq!(m.routing_key, key_for(&[*i as u8; 100]));
            assert_eq!(m.exchange, Bytes::from_static(b"amq.direct"));
            let body = store.read_body(&m.body).expect("body");
            assert_eq!(&body[..], &[*i as u8; 100][..]);
        }
    }
    // Compaction did move live messages away from the segments they were published in.
    assert!(moved > 0, "nothing moved: {:?}", store.stats());
}
