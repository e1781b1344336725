//! Fuzz the store's record payloads and recovery: the input is cut into records, each framed
//! correctly (length, CRC32C, index, kind) so that the payload decoders and the index's
//! replay see it, written as segments of a `MemStorage`, then the store is opened (recovery)
//! and every recovered body read back. Recovery may refuse (corruption is an error), never
//! panic. A few raw bytes may follow the last record (a torn tail).
#![no_main]

use std::sync::Arc;

use charon_store::{MemStorage, Store, StoreConfig};
use libfuzzer_sys::fuzz_target;

fn segment_header(first_index: u64) -> Vec<u8> {
    let mut mv = Vec::with_capacity(12);
    mv.extend_from_slice(b"CHARONWL");
    mv.extend_from_slice(&1u32.to_le_bytes());
    let first = first_index.to_le_bytes();
    let crc = crc32c::crc32c_append(crc32c::crc32c(&mv), &first);
    let mut h = mv;
    h.extend_from_slice(&crc.to_le_bytes());
    h.extend_from_slice(&first);
    h
}

fn frame(out: &mut Vec<u8>, index: u64, kind: u8, payload: &[u8]) {
    let len = 20 + payload.len() as u32;
    let start = out.len();
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&[kind, 0, 0, 0]);
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out[start + 8..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

fuzz_target!(|data: &[u8]| {
    // [segments-split][records...][tail]; each record: kind, len(u16 LE), payload.
    let Some((&split, mut rest)) = data.split_first() else {
        return;
    };
    let mut segs: Vec<Vec<u8>> = vec![segment_header(1)];
    let mut index = 1u64;
    let mut n = 0u8;
    while let [kind, l0, l1, tail @ ..] = rest {
        let len = usize::from(u16::from_le_bytes([*l0, *l1])).min(tail.len());
        let (payload, after) = tail.split_at(len);
        if split != 0 && n == split {
            segs.push(segment_header(index));
        }
        let seg = segs.last_mut().expect("one segment at least");
        frame(seg, index, *kind % 12, payload);
        index += 1;
        n = n.wrapping_add(1);
        rest = after;
    }
    if let Some(seg) = segs.last_mut() {
        seg.extend_from_slice(rest);
    }
    let mem = MemStorage::new();
    for (i, seg) in segs.into_iter().enumerate() {
        mem.write_file(&format!("{:016x}.wal", i + 1), seg);
    }
    let config = StoreConfig {
        compact_ratio: 0.0,
        // Small segments: with preallocation a default 64 MiB segment costs every input 64 MiB.
        segment_size: 1 << 20,
        ..StoreConfig::default()
    };
    if let Ok((store, recovered)) = Store::open(Arc::new(mem), config) {
        let mut reader = store.meta_reader();
        for entries in recovered.queues.values() {
            for e in entries {
                // Metadata read back from the record (fuzzed bytes), then the body.
                if let Ok(m) = reader.read(e.msg) {
                    let _ = store.read_body(&m.body);
                }
            }
        }
    }
});
