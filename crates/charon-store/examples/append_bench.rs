//! Group-commit throughput: P publisher threads each keep a window of W
//! unconfirmed 1 KiB publishes (like a publisher with confirms), against a
//! real directory. Prints confirmed msgs/s, fsyncs/s and messages per sync.
//!
//! `cargo run --release -p charon-store --example append_bench -- DIR [PUBLISHERS] [WINDOW] [SECONDS]`
//! (`ZERO_SPARE=0`: no zeroed spare prepared ahead, every new segment a fresh `fallocate`d file.)

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use charon_store::{Command, NewMessage, Store, StoreConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let dir = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "/tmp/charon-append-bench".into());
    let publishers: u64 = args.get(2).map_or(Ok(64), |s| s.parse())?;
    let window: usize = args.get(3).map_or(Ok(256), |s| s.parse())?;
    let seconds: u64 = args.get(4).map_or(Ok(5), |s| s.parse())?;
    let _ = std::fs::remove_dir_all(&dir);
    let config = StoreConfig {
        zero_spare: std::env::var("ZERO_SPARE").map_or(true, |v| v != "0"),
        ..StoreConfig::default()
    };
    let (store, _) = Store::open_dir(&dir, config)?;
    let store = Arc::new(store);
    let stop = Arc::new(AtomicBool::new(false));
    let confirmed = Arc::new(AtomicU64::new(0));
    let body = Bytes::from(vec![0x42u8; 1024]);
    let props = Bytes::from_static(&[0x10, 0x00, 2]);

    let start = Instant::now();
    let s0 = store.stats();
    let threads: Vec<_> = (0..publishers)
        .map(|p| {
            let (store, stop, confirmed) = (store.clone(), stop.clone(), confirmed.clone());
            let (body, props) = (body.clone(), props.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let mut pending = VecDeque::with_capacity(window);
                let mut id = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    id += 1;
                    let message = NewMessage {
                        exchange: Bytes::from_static(b"amq.direct"),
                        routing_key: Bytes::from_static(b"bench"),
                        properties: props.clone(),
                        body: body.clone(),
                        enqueue_ms: 0,
                        expiry_ms: None,
                    };
                    let cmd = Command::Publish {
                        message,
                        members: vec![(p, id)],
                    };
                    let (_, commit) = store.append(cmd).map_err(|e| e.to_string())?;
                    pending.push_back(commit);
                    if pending.len() >= window
                        && let Some(c) = pending.pop_front()
                    {
                        c.wait().map_err(|e| e.to_string())?;
                        confirmed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                for c in pending {
                    c.wait().map_err(|e| e.to_string())?;
                    confirmed.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().map_err(|_| "publisher panicked")??;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let s1 = store.stats();
    let n = confirmed.load(Ordering::Relaxed);
    let syncs = s1.syncs - s0.syncs;
    let batches = s1.batches - s0.batches;
    println!(
        "publishers={publishers} window={window}: {n} confirmed 1 KiB msgs in {elapsed:.2}s = {:.0} msgs/s, {:.1} MiB/s; {syncs} syncs = {:.0} syncs/s; {:.0} msgs per batch",
        n as f64 / elapsed,
        s1.bytes_written as f64 / elapsed / (1 << 20) as f64,
        syncs as f64 / elapsed,
        n as f64 / batches.max(1) as f64,
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
