//! Recovery time: write N 1 KiB persistent messages (default 1,000,000)
//! across Q queues, settle every `SETTLE_EVERY`-th one, close, then time
//! `Store::open_dir` (full replay: every record's CRC checked, index built,
//! per-queue lists returned; bodies stay on disk).
//!
//! `cargo run --release -p charon-store --example recovery_bench -- DIR [N] [QUEUES]`
//! Run it twice with `KEEP=1` to time a second recovery of the same data.

use std::time::Instant;

use bytes::Bytes;
use charon_store::{Command, NewMessage, Store, StoreConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let dir = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "/tmp/charon-recovery-bench".into());
    let n: u64 = args.get(2).map_or(Ok(1_000_000), |s| s.parse())?;
    let queues: u64 = args.get(3).map_or(Ok(10), |s| s.parse())?;
    let settle_every: u64 = std::env::var("SETTLE_EVERY")
        .ok()
        .map_or(Ok(0), |s| s.parse())?;

    if std::env::var_os("KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
        let (store, _) = Store::open_dir(&dir, StoreConfig::default())?;
        let body = Bytes::from(vec![0x42u8; 1024]);
        let t = Instant::now();
        for i in 0..n {
            let message = NewMessage {
                exchange: Bytes::from_static(b"amq.direct"),
                routing_key: Bytes::from_static(b"bench"),
                properties: Bytes::from_static(&[0x10, 0x00, 2]),
                body: body.clone(),
                enqueue_ms: i,
                expiry_ms: None,
            };
            store.append_nowait(Command::Publish {
                message,
                members: vec![(i % queues, i)],
            })?;
            if settle_every > 0 && i % settle_every == 0 {
                store.append_nowait(Command::Settle {
                    queue: i % queues,
                    ids: vec![i],
                })?;
            }
            if i % 10_000 == 9_999 {
                store.sync()?.wait()?;
            }
        }
        store.sync()?.wait()?;
        let s = store.stats();
        println!(
            "wrote {n} msgs in {:.2}s: {} segments, {:.0} MiB",
            t.elapsed().as_secs_f64(),
            s.segments,
            s.disk_bytes as f64 / (1 << 20) as f64
        );
    }

    let t = Instant::now();
    let (store, rec) = Store::open_dir(&dir, StoreConfig::default())?;
    let elapsed = t.elapsed().as_secs_f64();
    let live: usize = rec.queues.values().map(|q| q.len()).sum();
    println!(
        "recovered {live} live messages in {} queues (last index {}) in {elapsed:.2}s = {:.0} msgs/s",
        rec.queues.len(),
        rec.last_index,
        live as f64 / elapsed
    );
    // Spot check: bodies read back from disk.
    if let Some(e) = rec.queues.values().next().and_then(|q| q.first()) {
        let m = store.meta_reader().read(e.msg)?;
        assert_eq!(store.read_body(&m.body)?.len(), 1024);
    }
    // Includes the recovered lists; run with KEEP=1 so the writing phase
    // does not count.
    println!("RSS after recovery: {:.0} MiB", rss_mib());
    drop(rec);
    Ok(())
}

/// Resident set size from /proc (Linux), in MiB.
fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}
