//! Measures the store on the real file system: group-commit throughput with many concurrent
//! appenders (1 KiB messages), then recovery time of the resulting backlog.
//!
//! `cargo run --release -p charon-store --example store_bench -- /tmp/store-bench 1000000`

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use charon_store::{RealFs, Record, Store, StoreConfig, StoredMessage};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .unwrap_or_else(|| "/tmp/charon-store-bench".into());
    let n: u64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let _ = std::fs::remove_dir_all(&dir);
    let config = StoreConfig::new(&dir);
    let (store, _) = Store::open(Arc::new(RealFs), &config)?;
    let body = Bytes::from(vec![b'x'; 1024]);
    let props = Bytes::from_static(&[0x10, 0x00, 0x02]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()?;
    let store = Arc::new(store);
    let t0 = Instant::now();
    rt.block_on(async {
        // 64 appenders, each keeping one append in flight (a confirm window of 1 per publisher).
        let mut tasks = Vec::new();
        for w in 0..64u64 {
            let store = store.clone();
            let body = body.clone();
            let props = props.clone();
            tasks.push(tokio::spawn(async move {
                let mut i = w;
                while i < n {
                    let m = StoredMessage {
                        message_id: i + 1,
                        enqueued_at_ms: 0,
                        expires_at_ms: None,
                        exchange: Arc::from(""),
                        routing_key: Arc::from("q"),
                        properties: props.clone(),
                        body: body.clone(),
                        queues: vec![(Arc::from("q"), i)],
                    };
                    if store.append(Record::Publish(m)).await.is_err() {
                        return;
                    }
                    i += 64;
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    });
    let secs = t0.elapsed().as_secs_f64();
    let (appends, syncs) = (store.stats().appends(), store.stats().syncs());
    println!(
        "appended {appends} x 1 KiB durably in {secs:.2} s: {:.0} msg/s, {syncs} fdatasyncs ({:.0}/s, {:.1} msgs per sync)",
        appends as f64 / secs,
        syncs as f64 / secs,
        appends as f64 / syncs.max(1) as f64
    );
    drop(store);
    let t1 = Instant::now();
    let (_store, rec) = Store::open(Arc::new(RealFs), &config)?;
    let live: usize = rec.queues.values().map(|q| q.len()).sum();
    println!(
        "recovered {live} messages in {:.2} s",
        t1.elapsed().as_secs_f64()
    );
    Ok(())
}
