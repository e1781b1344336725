//! The store's side of scenario b (persistent publish, consumer running) in one thread, for
//! instruction counts: N 16-byte publishes to one queue, and behind them, 100 at a time, their
//! first deliveries (`DeliveryCounts`) and, `LAG` messages later, their settles, against an
//! in-memory storage. Run under callgrind and divide `Store::push`'s inclusive count by N:
//!
//! `valgrind --tool=callgrind target/release/examples/flow_bench 200000`

use bytes::Bytes;
use charon_store::{Command, MemStorage, NewMessage, Store, StoreConfig};

/// Deliveries and settles go in batches of this many (as a queue actor's batch).
const BATCH: u64 = 100;
/// Messages published but not yet settled (the consumer's prefetch and the queue's lag).
const LAG: u64 = 2_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = std::env::args().nth(1).map_or(Ok(200_000), |s| s.parse())?;
    let mem = MemStorage::new();
    let (store, _) = Store::open(std::sync::Arc::new(mem), StoreConfig::default())?;
    let body = Bytes::from(vec![0x42u8; 16]);
    let props = Bytes::from_static(&[0x10, 0x00, 2]);
    let start = std::time::Instant::now();
    for id in 1..=n {
        store.append_nowait(Command::Publish {
            message: NewMessage {
                exchange: Bytes::new(),
                routing_key: Bytes::from_static(b"q-b"),
                properties: props.clone(),
                body: body.clone(),
                enqueue_ms: 0,
                expiry_ms: None,
            },
            members: vec![(1, id)],
        })?;
        if id % BATCH == 0 {
            let first = id - BATCH + 1;
            store.append_nowait(Command::DeliveryCounts {
                queue: 1,
                counts: (first..=id).map(|i| (i, 1)).collect(),
            })?;
            if id > LAG {
                store.append_nowait(Command::Settle {
                    queue: 1,
                    ids: (first - LAG..=id - LAG).collect(),
                })?;
            }
        }
    }
    store.sync()?.wait()?;
    let stats = store.stats();
    println!(
        "{n} messages in {:.2}s; live {}; records {}",
        start.elapsed().as_secs_f64(),
        stats.live_messages,
        stats.records
    );
    Ok(())
}
