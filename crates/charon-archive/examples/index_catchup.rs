//! Measures the SQLite search indexer's catch-up alone (docs/archive.md "Thirteenth round,
//! ingest"): `cargo run --release -p charon-archive --example index_catchup -- FILE` runs
//! `indexer::batch` (500 records, no time budget) on the archive at FILE until the watermark
//! reaches the last record, and prints the records indexed and this process's CPU µs per record.
//! Fill FILE first with `CHARON_ARCHIVE_INDEXER=off examples/ingest FILE N` (the bench's dead
//! letters); copy it to repeat a run. Under `valgrind --tool=callgrind` it gives the indexer's
//! instructions per record (`indexer::batch` inclusive / records).

use std::time::Duration;

#[path = "support/proc_cpu.rs"]
mod proc_cpu;
use proc_cpu::cpu_us;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: index_catchup FILE")?;
    let c = rusqlite::Connection::open(&path)?;
    c.pragma_update(None, "synchronous", "NORMAL")?;
    c.pragma_update(None, "cache_size", -16384)?;
    let (c0, t0) = (cpu_us(), std::time::Instant::now());
    let mut n = 0usize;
    loop {
        let k = charon_archive::indexer::batch(&c, 500, Duration::from_secs(3600))?;
        if k == 0 {
            break;
        }
        n += k;
    }
    let cpu = cpu_us() - c0;
    println!(
        "{n} records indexed in {:.2}s; CPU {:.1} µs/record (load {})",
        t0.elapsed().as_secs_f64(),
        cpu as f64 / n.max(1) as f64,
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    Ok(())
}
