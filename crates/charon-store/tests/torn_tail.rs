//! Torn and corrupt tails: cut the last segment at every byte offset of its
//! last record, flip every byte of it, append garbage; recovery must serve
//! exactly the records before it, truncate, and never fail. Corruption in a
//! sealed segment must be refused, not served or skipped.

mod common;

use charon_store::{Command, MemStorage, OpenError, Store};
use common::{config, msg, open, snapshot as contents};

const SEG1: &str = "0000000000000001.wal";

type Contents = common::Snapshot;

/// A log whose last record is `last`; returns storage, the length before
/// the last record, and the contents with and without it.
fn log_ending_with(last: Command) -> (MemStorage, usize, Contents, Contents) {
    let mem = MemStorage::new();
    let mut cfg = config();
    cfg.segment_size = 1 << 20;
    // These tests cut and damage the file byte by byte: it must end at its last record.
    cfg.preallocate = false;
    let (store, _) = open(&mem, cfg.clone());
    for i in 0..3u64 {
        store
            .append_nowait(Command::Publish {
                message: msg(&[i as u8; 10]),
                members: vec![(1, i)],
            })
            .expect("append");
    }
    store.sync().expect("sync").wait().expect("durable");
    let before = mem.read_file(SEG1).expect("segment").len();
    let (_, c) = store.append(last).expect("append");
    c.wait().expect("durable");
    drop(store);
    let full = mem.read_file(SEG1).expect("segment");
    assert!(full.len() > before);

    let expect = |bytes: &[u8]| {
        let m = MemStorage::new();
        m.write_file(SEG1, bytes.to_vec());
        let (s, rec) = open(&m, cfg.clone());
        contents(&s, &rec)
    };
    let without = expect(full.get(..before).expect("prefix"));
    let with = expect(&full);
    assert_ne!(without, with);
    (mem, before, without, with)
}

fn recover(bytes: Vec<u8>) -> (Store, charon_store::Recovered, MemStorage) {
    let m = MemStorage::new();
    m.write_file(SEG1, bytes);
    let (s, rec) = open(&m, config());
    (s, rec, m)
}

fn dead_letter() -> Command {
    Command::DeadLetter {
        source: (1, 1),
        message: msg(b"dead-lettered copy"),
        targets: vec![(2, 100), (3, 100)],
    }
}

#[test]
fn cut_at_every_offset_of_a_dead_letter_record() {
    let (mem, before, without, with) = log_ending_with(dead_letter());
    let full = mem.read_file(SEG1).expect("segment");
    for cut in before..full.len() {
        let (s, rec, m) = recover(full.get(..cut).expect("prefix").to_vec());
        // Source still there, targets empty: never neither, never both.
        assert_eq!(contents(&s, &rec), without, "cut at {cut}");
        assert_eq!(rec.truncated_bytes, (cut - before) as u64);
        drop(s);
        assert_eq!(
            m.read_file(SEG1).expect("seg").len(),
            before,
            "tail truncated"
        );
    }
    let (s, rec, _) = recover(full.clone());
    assert_eq!(contents(&s, &rec), with);
    assert_eq!(rec.truncated_bytes, 0);
}

#[test]
fn torn_tail_with_garbage_is_cut() {
    let (mem, before, without, _) = log_ending_with(dead_letter());
    let full = mem.read_file(SEG1).expect("segment");
    for cut in before..full.len() {
        for fill in [0x00u8, 0xff, 0x5a] {
            let mut torn = full.get(..cut).expect("prefix").to_vec();
            torn.resize(full.len() + 7, fill);
            let (s, rec, _) = recover(torn);
            assert_eq!(contents(&s, &rec), without, "cut at {cut} fill {fill:#x}");
        }
    }
}

#[test]
fn every_flipped_byte_of_the_last_record_is_detected() {
    let last = Command::Publish {
        message: msg(b"last one"),
        members: vec![(1, 50), (4, 1)],
    };
    let (mem, before, without, _) = log_ending_with(last);
    let full = mem.read_file(SEG1).expect("segment");
    for at in before..full.len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = full.clone();
            if let Some(b) = bad.get_mut(at) {
                *b ^= bit;
            }
            let (s, rec, _) = recover(bad);
            assert_eq!(contents(&s, &rec), without, "flip {bit:#x} at {at}");
        }
    }
}

#[test]
fn cut_definitions_and_settles_too() {
    for last in [
        Command::Settle {
            queue: 1,
            ids: vec![0, 2],
        },
        Command::PutDefinition {
            kind: 3,
            key: "k".into(),
            value: "v".into(),
        },
        Command::Purge { queue: 1 },
        Command::DeliveryCount {
            member: (1, 0),
            count: 2,
        },
    ] {
        let (mem, before, without, _) = log_ending_with(last);
        let full = mem.read_file(SEG1).expect("segment");
        for cut in before..full.len() {
            let (s, rec, _) = recover(full.get(..cut).expect("prefix").to_vec());
            assert_eq!(contents(&s, &rec), without, "cut at {cut}");
        }
    }
}

#[test]
fn torn_segment_header_is_treated_as_empty() {
    let (mem, _, _, with) = log_ending_with(dead_letter());
    let seg1 = mem.read_file(SEG1).expect("segment");
    let header = seg1.get(..24).expect("header").to_vec();
    // A second, newer segment torn inside its header: cut at every byte,
    // or cut and followed by garbage.
    for n in 0..header.len() {
        for garbage in [0usize, 13, 40] {
            let m = MemStorage::new();
            m.write_file(SEG1, seg1.clone());
            let mut torn = header.get(..n).unwrap_or(&[]).to_vec();
            torn.extend(std::iter::repeat_n(0x5a, garbage));
            m.write_file("0000000000000002.wal", torn.clone());
            let (s, rec) = open(&m, config());
            assert_eq!(contents(&s, &rec), with, "cut at {n}, garbage {garbage}");
            assert_eq!(rec.truncated_bytes, torn.len() as u64);
        }
    }
}

#[test]
fn corruption_in_a_sealed_segment_is_refused() {
    let (mem, before, _, _) = log_ending_with(dead_letter());
    // Reopen once so a newer segment exists and segment 1 is sealed.
    {
        let (s, _) = open(&mem, config());
        s.append(Command::Purge { queue: 99 })
            .expect("append")
            .1
            .wait()
            .expect("durable");
    }
    let mut bad = mem.read_file(SEG1).expect("segment");
    if let Some(b) = bad.get_mut(before + 40) {
        *b ^= 1;
    }
    mem.write_file(SEG1, bad);
    match Store::open(std::sync::Arc::new(mem), config()) {
        Err(OpenError::Corrupt {
            segment: 1, offset, ..
        }) => assert_eq!(offset, before as u64),
        other => panic!("expected corruption error, got {other:?}"),
    }
}

#[test]
fn an_emptied_segment_below_a_newer_one_is_accepted() {
    // Recovery empties a segment torn at creation, then the store creates a
    // newer one; a crash before the empty one is deleted leaves both.
    let (mem, _, _, with) = log_ending_with(dead_letter());
    mem.write_file("0000000000000002.wal", Vec::new());
    mem.write_file("0000000000000003.wal", b"CHAR".to_vec());
    let (s, rec) = open(&mem, config());
    assert_eq!(contents(&s, &rec), with);
    drop(s);
    // A non-empty torn header below a newer segment is corruption.
    mem.write_file("0000000000000002.wal", b"CHAR".to_vec());
    let err = Store::open(std::sync::Arc::new(mem.clone()), config()).err();
    assert!(
        matches!(err, Some(OpenError::Corrupt { segment: 2, .. })),
        "{err:?}"
    );
}
