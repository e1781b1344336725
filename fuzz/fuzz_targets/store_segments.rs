//! Fuzz segment recovery with raw files: the input is one or two whole segment files (split
//! at a point the first two bytes choose), headers and records included, so torn headers,
//! bad lengths, CRC mismatches and foreign files are all reached. Opening may fail, never
//! panic.
#![no_main]

use std::sync::Arc;

use charon_store::{MemStorage, Store, StoreConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((head, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let at = usize::from(u16::from_le_bytes(*head)).min(rest.len());
    let (a, b) = rest.split_at(at);
    let mem = MemStorage::new();
    mem.write_file("0000000000000001.wal", a.to_vec());
    if !b.is_empty() {
        mem.write_file("0000000000000002.wal", b.to_vec());
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
