//! Bodies read back together from real files (`DiskStorage`): a dense run's bodies are
//! slices of one buffer read without zero-filling it first (`StorageFile::read_vec_at`), a
//! sparse run's are copied out of the thread's kept buffer. Either way each body is exactly
//! its own bytes, and stays so after the store has deleted the segment it came from.

mod common;

use std::sync::Arc;

use charon_store::{Command, DiskStorage, Storage, Store, StoreConfig};
use common::msg;

fn disk_config() -> StoreConfig {
    StoreConfig {
        segment_size: 256 << 10,
        compact_min_segments: 0,
        ..StoreConfig::default()
    }
}

#[test]
fn read_vec_at_reads_exactly_the_asked_bytes_and_fails_past_the_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = DiskStorage::new(dir.path()).expect("storage");
    let file = storage.create("f.bin").expect("create");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 31 % 251) as u8).collect();
    file.write_all_at(&data, 0).expect("write");
    for (len, at) in [
        (0usize, 0u64),
        (1, 0),
        (4096, 1),
        (100_000, 123_457),
        (300_000, 0),
    ] {
        let got = file.read_vec_at(len, at).expect("read");
        assert_eq!(got.len(), len);
        assert_eq!(got.as_slice(), &data[at as usize..at as usize + len]);
    }
    let past = file.read_vec_at(10, 299_995);
    assert_eq!(
        past.map_err(|e| e.kind()).err(),
        Some(std::io::ErrorKind::UnexpectedEof)
    );
}

#[test]
fn dense_and_sparse_runs_from_disk_are_exact_and_outlive_their_segment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage: Arc<dyn Storage> = Arc::new(DiskStorage::new(dir.path()).expect("storage"));
    let (store, _) = Store::open(storage, disk_config()).expect("open");
    // Queue 1: 1 KiB bodies back to back (dense runs). Queue 2: small bodies with a 6 KiB
    // body of queue 3 between each two (sparse runs: the gaps are read but not kept).
    let mut dense = Vec::new();
    let mut sparse = Vec::new();
    for i in 0..600u64 {
        let body: Vec<u8> = (0..1024u64).map(|j| ((i * 7 + j) % 253) as u8).collect();
        let a = store
            .append_nowait(Command::Publish {
                message: msg(&body),
                members: vec![(1, i)],
            })
            .expect("append");
        dense.push((a.index, body));
    }
    for i in 0..100u64 {
        let body = vec![(i % 200) as u8 + 1; 40 + i as usize];
        let a = store
            .append_nowait(Command::Publish {
                message: msg(&body),
                members: vec![(2, i)],
            })
            .expect("append");
        sparse.push((a.index, body));
        store
            .append_nowait(Command::Publish {
                message: msg(&vec![0xee; 6 << 10]),
                members: vec![(3, i)],
            })
            .expect("append");
    }
    store.sync().expect("sync").wait().expect("durable");

    let ask: Vec<u64> = dense.iter().chain(&sparse).map(|(id, _)| *id).collect();
    let got = store.read_bodies(&ask);
    assert_eq!(got.len(), ask.len());
    for ((id, want), got) in dense.iter().chain(&sparse).zip(&got) {
        assert_eq!(got.as_deref(), Some(want.as_slice()), "message {id}");
    }

    // Neighbouring dense bodies lie in one buffer as they lie in the segment (sliced, not
    // copied); neighbouring sparse ones do not (copied out, the gap between them dropped).
    let apart = |k: usize, l: usize| {
        let (a, b) = (
            store.current_body(ask[k]).expect("stored"),
            store.current_body(ask[l]).expect("stored"),
        );
        assert_eq!(a.segment, b.segment);
        let in_memory = (got[l].as_ref().expect("read").as_ptr() as usize)
            .wrapping_sub(got[k].as_ref().expect("read").as_ptr() as usize);
        (in_memory, (b.offset - a.offset) as usize)
    };
    let (mem, file) = apart(0, 1);
    assert_eq!(mem, file, "dense bodies are slices of one run");
    let (mem, file) = apart(697, 698);
    assert_ne!(mem, file, "sparse bodies are copied out");

    // Settle everything: the segments die and their files are deleted (or recycled and
    // overwritten); the bodies read before are still their own bytes.
    for q in 1..=3u64 {
        store
            .append_nowait(Command::Settle {
                queue: q,
                ids: (0..600).collect(),
            })
            .expect("settle");
    }
    store.sync().expect("sync").wait().expect("durable");
    for i in 0..50u64 {
        store
            .append_nowait(Command::Publish {
                message: msg(&vec![0x55; 4096]),
                members: vec![(4, i)],
            })
            .expect("append");
    }
    store.sync().expect("sync").wait().expect("durable");
    common::wait_for("a dead segment deleted", || {
        store.stats().segments_deleted > 0
    });
    for ((id, want), got) in dense.iter().chain(&sparse).zip(&got) {
        assert_eq!(
            got.as_deref(),
            Some(want.as_slice()),
            "message {id} after its segment died"
        );
    }
    assert_eq!(store.read_bodies(&ask[..3]), vec![None, None, None]);
}
