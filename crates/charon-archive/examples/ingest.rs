//! Measures the archive's insert path alone (no broker): `cargo run --release -p charon-archive
//! --example ingest -- URL N [BATCH]` extracts N dead letters shaped as `charon bench --scenario
//! archive` publishes them (x-death, x-first/last-death-*, error message, 400-byte stack trace,
//! 1 KiB body) and inserts them in transactions of BATCH (default 4000), then prints records/s and
//! this process's CPU µs per record (extraction and insert separately) and, on PostgreSQL, the
//! CPU µs per record of the backend serving the connection (from /proc: same machine only).
//! `INGEST_GENERAL=1` extracts by the general path (`extract_general`: properties decoded with
//! `amq-protocol`) instead of the one-pass walk, for an A/B in one build. `INGEST_SYNC_LATER=1`
//! commits as the archiver does (without the fsync, `wal_sync`) and syncs the WAL after each
//! batch; the insert wall time then leaves the sync out (the archiver overlaps it).

use bytes::Bytes;
use charon_archive::extract::extract_general;
use charon_archive::{Archive, ExtractConfig, extract, ingest};
use charon_protocol::{
    AMQPValue, BasicProperties, FieldArray, FieldTable, LongString, RawProperties,
};

#[path = "support/proc_cpu.rs"]
mod proc_cpu;
use proc_cpu::{cpu_us, cpu_us_of};

fn ls(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s))
}

fn props(i: u64) -> RawProperties {
    let q = format!("orders-{}", i % 20);
    let mut death = FieldTable::default();
    death.insert("count".into(), AMQPValue::LongLongInt(1));
    death.insert("reason".into(), ls("rejected"));
    death.insert("queue".into(), ls(&q));
    death.insert("time".into(), AMQPValue::Timestamp(1_764_000_000));
    death.insert("exchange".into(), ls("orders"));
    death.insert(
        "routing-keys".into(),
        AMQPValue::FieldArray(FieldArray::from(vec![ls(&q)])),
    );
    let mut h = FieldTable::default();
    h.insert(
        "x-death".into(),
        AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(death)])),
    );
    for (k, v) in [
        ("x-first-death-queue", q.as_str()),
        ("x-first-death-reason", "rejected"),
        ("x-first-death-exchange", "orders"),
        ("x-last-death-queue", q.as_str()),
        ("x-last-death-reason", "rejected"),
        ("x-last-death-exchange", "orders"),
    ] {
        h.insert(k.into(), ls(v));
    }
    let cause = i % 10;
    h.insert(
        "x-exception-message".into(),
        ls(&format!("Order {i} could not be processed: cause {cause}")),
    );
    h.insert("x-exception-stacktrace".into(), ls(&format!(
        "com.example.OrderException: Order {i} could not be processed: cause {cause}\n\tat com.example.Orders.handle{cause}(Orders.java:{})\n\tat org.springframework.amqp.rabbit.listener.AbstractMessageListenerContainer.doInvokeListener(AbstractMessageListenerContainer.java:1651)\n\tat org.springframework.amqp.rabbit.listener.AbstractMessageListenerContainer.actualInvokeListener(AbstractMessageListenerContainer.java:1574)",
        100 + cause
    )));
    let p = BasicProperties::default()
        .with_message_id(format!("m-{i}").into())
        .with_content_type("application/json".into())
        .with_delivery_mode(2)
        .with_headers(h);
    RawProperties::encode(&p)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let url = args.get(1).ok_or("usage: ingest URL N [BATCH]")?;
    let n: u64 = args.get(2).map_or(Ok(100_000), |s| s.parse())?;
    let batch: u64 = args.get(3).map_or(Ok(4000), |s| s.parse())?;
    let archive = Archive::open(url)?;
    // Experiments: SQL run after the migrations (e.g. `INGEST_SQL="DROP INDEX dead_letters_key"`).
    if let Ok(sql) = std::env::var("INGEST_SQL") {
        archive.with(|c| c.batch(&sql))?;
    }
    // PostgreSQL: the backend serving this connection (same machine), for its CPU time.
    let backend = if url.starts_with("postgres") {
        archive
            .with(|c| c.query("SELECT pg_backend_pid()", &[]))?
            .first()
            .map(|r| r[0].int().to_string())
    } else {
        None
    };
    let db0 = backend.as_deref().map_or(0, cpu_us_of);
    let cfg = ExtractConfig::default();
    let how = if std::env::var_os("INGEST_GENERAL").is_some() {
        extract_general
    } else {
        extract
    };
    let raw: Vec<RawProperties> = (0..n).map(props).collect();
    let body = Bytes::from(vec![b'x'; 1024]);
    let boot = charon_archive::time::now_ms();
    let (mut t_extract, mut t_insert) = (0u64, 0u64);
    let mut w_insert = std::time::Duration::ZERO;
    let mut w_sync = std::time::Duration::ZERO;
    let later = std::env::var_os("INGEST_SYNC_LATER").is_some();
    let start = std::time::Instant::now();
    let mut i = 0;
    while i < n {
        let k = batch.min(n - i);
        let c0 = cpu_us();
        let now = charon_archive::time::now_ms();
        // Extraction and each record's parameters, as the archiver does while the previous
        // batch is written; the insert is what the writer's thread does.
        let mut recs = ingest::Batch::default();
        for j in i..i + k {
            recs.push(how(
                &cfg,
                format!("t:{boot}:1:{j}"),
                "/",
                "ingest",
                &raw[j as usize],
                body.clone(),
                now,
            ));
        }
        let c1 = cpu_us();
        let w0 = std::time::Instant::now();
        if later {
            // As the archiver: COMMIT without the fsync, then the WAL synced (here on the
            // same thread; the archiver syncs on another while the next batch is written).
            let (_, sync) = archive.with(|c| ingest::insert_prepared_sync_later(c, &recs))?;
            let s0 = std::time::Instant::now();
            if let Some(s) = sync {
                s.sync()?;
            }
            w_sync += s0.elapsed();
        } else {
            archive.with(|c| ingest::insert_prepared(c, &recs))?;
        }
        w_insert += w0.elapsed();
        w_insert -= w_sync;
        w_sync = std::time::Duration::ZERO;
        let c2 = cpu_us();
        t_extract += c1 - c0;
        t_insert += c2 - c1;
        i += k;
    }
    let secs = start.elapsed().as_secs_f64();
    let db = backend.as_deref().map_or(0, cpu_us_of) - db0;
    println!(
        "{n} records in {secs:.2}s = {:.0}/s; insert wall {:.1} µs/record; CPU µs/record: extract {:.1}, insert {:.1}, database backend {:.1} (load {})",
        n as f64 / secs,
        w_insert.as_secs_f64() * 1e6 / n as f64,
        t_extract as f64 / n as f64,
        t_insert as f64 / n as f64,
        db as f64 / n as f64,
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    Ok(())
}
