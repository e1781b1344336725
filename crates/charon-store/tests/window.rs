//! Recovery reads segments through a window of a few MiB: records that straddle the window's
//! end, records larger than the window, and a torn tail after them all come back as written.

mod common;

use std::time::Duration;

use charon_store::storage::Storage;
use charon_store::{Command, MemStorage, StoreConfig};
use common::{contents, msg, open};

fn config(preallocate: bool) -> StoreConfig {
    StoreConfig {
        segment_size: 64 << 20,
        compact_ratio: 0.3,
        idle_tick: Duration::from_millis(5),
        preallocate,
        ..StoreConfig::default()
    }
}

fn sizes() -> Vec<usize> {
    (0..40)
        .map(|i| {
            if i == 7 || i == 30 {
                5 << 20
            } else {
                300_000 + i
            }
        })
        .collect()
}

fn body(i: usize, n: usize) -> Vec<u8> {
    (0..n).map(|j| (i * 31 + j) as u8).collect()
}

fn write_all(mem: &MemStorage, preallocate: bool) {
    let (store, _) = open(mem, config(preallocate));
    for (i, n) in sizes().iter().enumerate() {
        let (_, commit) = store
            .append(Command::Publish {
                message: msg(&body(i, *n)),
                members: vec![(1, i as u64)],
            })
            .expect("append");
        commit.wait().expect("durable");
    }
}

#[test]
fn records_across_and_larger_than_the_window_recover_from_a_preallocated_segment() {
    let mem = MemStorage::new();
    write_all(&mem, true);
    let (store, rec) = open(&mem.crash(), config(true));
    let want: Vec<(u64, Vec<u8>)> = sizes()
        .iter()
        .enumerate()
        .map(|(i, n)| (i as u64, body(i, *n)))
        .collect();
    assert_eq!(contents(&store, &rec), vec![(1, want)]);
    // The preallocated zeros after the last record (tens of MiB, scanned through the window,
    // not read whole) are unused space, not a torn tail.
    assert_eq!(rec.truncated_bytes, 0);
}

#[test]
fn records_across_and_larger_than_the_read_window_recover() {
    let mem = MemStorage::new();
    let config = || config(false);
    // ~13 MiB in one segment: many 300 KiB bodies (records straddle every 4 MiB boundary)
    // and two of 5 MiB (larger than the window).
    let sizes: Vec<usize> = (0..40)
        .map(|i| {
            if i == 7 || i == 30 {
                5 << 20
            } else {
                300_000 + i
            }
        })
        .collect();
    let body = |i: usize, n: usize| -> Vec<u8> { (0..n).map(|j| (i * 31 + j) as u8).collect() };
    {
        let (store, _) = open(&mem, config());
        for (i, n) in sizes.iter().enumerate() {
            let (_, commit) = store
                .append(Command::Publish {
                    message: msg(&body(i, *n)),
                    members: vec![(1, i as u64)],
                })
                .expect("append");
            commit.wait().expect("durable");
        }
    }
    // A torn tail: the last 100 bytes of the segment lost.
    let torn = mem.crash();
    let names = torn.list().expect("list");
    let seg = names.iter().max().expect("a segment");
    let data = torn.read_file(seg).expect("segment");
    torn.write_file(seg, data[..data.len() - 100].to_vec());
    let (store, rec) = open(&torn, config());
    let want: Vec<(u64, Vec<u8>)> = sizes[..sizes.len() - 1]
        .iter()
        .enumerate()
        .map(|(i, n)| (i as u64, body(i, *n)))
        .collect();
    assert_eq!(contents(&store, &rec), vec![(1, want)]);
    assert!(rec.truncated_bytes > 0);
}
