//! `--scenario archive` (Charon's dead-letter archive, docs/archive.md): publishes
//! `--pmessages` persistent messages of `--size` bytes into a queue with
//! `x-dead-letter-archive`, and measures
//! - archived/s: from the first publish until the management API counts every record;
//! - replay/s: one replay job of all of them to another queue, until the job is done;
//! - the API's latency for a filtered list page, a sorted page, a group query and one record,
//!   over every record the archive holds (`--archive-preload 1000000` fills it first);
//! - the CPU time per record of the broker (`--broker-pid`) and of the database server
//!   (`--db-pid`) while archiving and while replaying.
//!
//! The messages look like dead letters: `x-death`, `x-first-death-*`, `x-exception-message` and
//! a stack trace (20 original queues, 10 error causes), a unique `message_id`.

use std::time::{Duration, Instant};

use amq_protocol::protocol::basic::AMQPProperties;
use amq_protocol::types::{AMQPValue, FieldArray, FieldTable, LongString};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::client::Connection;
use crate::proc_stats;
use crate::uri::AmqpUri;
use crate::{BenchArgs, BenchError};

/// Messages written to the socket per syscall.
const PUBLISH_BATCH: u64 = 500;

fn http_err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Protocol(format!("management API: {e}"))
}

/// Calls the management API (blocking, off the runtime).
async fn api(
    args: &BenchArgs,
    method: &'static str,
    path: String,
    body: Option<Value>,
) -> Result<Value, BenchError> {
    let url = format!("{}{}", args.http_url.trim_end_matches('/'), path);
    let (user, pass) = args.http_auth.split_once(':').unwrap_or(("guest", "guest"));
    let auth = format!(
        "Basic {}",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("{user}:{pass}")
        )
    );
    tokio::task::spawn_blocking(move || -> Result<Value, BenchError> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let resp = match (method, body) {
            ("POST", Some(b)) => agent
                .post(&url)
                .header("Authorization", &auth)
                .send_json(&b),
            _ => agent.get(&url).header("Authorization", &auth).call(),
        };
        let mut resp = resp.map_err(http_err)?;
        let status = resp.status();
        let text = resp.body_mut().read_to_string().map_err(http_err)?;
        if !status.is_success() {
            return Err(http_err(format!("{url}: HTTP {}: {text}", status.as_u16())));
        }
        serde_json::from_str(&text).map_err(http_err)
    })
    .await
    .map_err(http_err)?
}

/// Records of archive queue `queue`: its groups' counts (answered from the maintained summary,
/// so that polling every 2–50 ms costs the broker next to nothing, as a dashboard's would).
async fn records_in(args: &BenchArgs, queue: &str) -> Result<u64, BenchError> {
    let v = api(
        args,
        "GET",
        format!("/api/dead-letters/groups?by=queue&queue={queue}"),
        None,
    )
    .await?;
    Ok(v.as_array()
        .map_or(0, |g| g.iter().filter_map(|g| g["count"].as_u64()).sum()))
}

fn ls(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s))
}

/// The properties of dead letter `i`: as a queue's dead-lettering and a Spring consumer leave
/// them (original queue one of 20, error cause one of 10).
fn dead_letter_props(i: u64, persistent: bool) -> AMQPProperties {
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
    h.insert(
        "x-exception-stacktrace".into(),
        ls(&format!(
            "com.example.OrderException: Order {i} could not be processed: cause {cause}\n\tat com.example.Orders.handle{cause}(Orders.java:{})\n\tat org.springframework.amqp.rabbit.listener.AbstractMessageListenerContainer.doInvokeListener(AbstractMessageListenerContainer.java:1651)\n\tat org.springframework.amqp.rabbit.listener.AbstractMessageListenerContainer.actualInvokeListener(AbstractMessageListenerContainer.java:1574)",
            100 + cause
        )),
    );
    let p = AMQPProperties::default()
        .with_message_id(format!("m-{i}").into())
        .with_content_type("application/json".into())
        .with_headers(h);
    if persistent {
        p.with_delivery_mode(2)
    } else {
        p
    }
}

/// Publishes `n` dead letters of `size` bytes to `queue` (ids from `first`).
async fn publish_dead_letters(
    c: &mut Connection,
    queue: &str,
    n: u64,
    first: u64,
    size: usize,
    persistent: bool,
) -> Result<(), BenchError> {
    let mut sent = 0u64;
    let mut buf = Vec::new();
    while sent < n {
        buf.clear();
        let k = PUBLISH_BATCH.min(n - sent);
        for j in 0..k {
            let i = first + sent + j;
            crate::retry_scenarios::publish(
                &mut buf,
                "",
                queue,
                dead_letter_props(i, persistent),
                vec![b'x'; size],
            )?;
        }
        c.writer.write_all(&buf).await.map_err(BenchError::Io)?;
        sent += k;
    }
    Ok(())
}

/// Longest pause between two polls of [`wait_records`].
const POLL_MAX: Duration = Duration::from_millis(50);
/// Shortest pause between two polls of [`wait_records`].
const POLL_MIN: Duration = Duration::from_millis(2);

/// The pause before the next poll of [`wait_records`]: a quarter of the time the `missing`
/// records take at the rate seen since the first poll (`gained` in `since`), within
/// [`POLL_MIN`, `POLL_MAX`]. Far from the end the poll stays at 50 ms (next to nothing for the
/// broker); in the last ~200 ms it comes every 2–12 ms, so that the time measured ends a few ms
/// after the last batch's commit instead of up to 50 ms (5 % of a 1 s run). Nothing gained yet:
/// 10 ms.
fn next_poll(missing: u64, gained: u64, since: Duration) -> Duration {
    if gained == 0 {
        return Duration::from_millis(10);
    }
    let left = since.mul_f64(missing as f64 / gained as f64);
    (left / 4).clamp(POLL_MIN, POLL_MAX)
}

/// Waits until archive queue `queue` has `n` records.
async fn wait_records(
    args: &BenchArgs,
    queue: &str,
    n: u64,
    start: Instant,
) -> Result<(), BenchError> {
    let mut last_print = Instant::now();
    // The first poll's count and time: the rate the pauses are reckoned from.
    let mut first: Option<(u64, Instant)> = None;
    loop {
        let have = records_in(args, queue).await?;
        if have >= n {
            return Ok(());
        }
        let (had, at) = *first.get_or_insert((have, Instant::now()));
        let pause = next_poll(n - have, have.saturating_sub(had), at.elapsed());
        if !args.quiet && last_print.elapsed() >= Duration::from_secs(1) {
            eprintln!(
                "archive {queue}: {have}/{n} records after {:.1}s",
                start.elapsed().as_secs_f64()
            );
            last_print = Instant::now();
        }
        tokio::time::sleep(pause).await;
    }
}

/// CPU µs of (broker, database server) now.
fn cpu(args: &BenchArgs) -> (Option<u64>, Option<u64>) {
    (
        args.broker_pid
            .and_then(|p| proc_stats::sample(Some(p)))
            .map(|s| s.cpu_us),
        args.db_pid.and_then(proc_stats::tree_cpu_us),
    )
}

/// µs per record between two [`cpu`] samples.
fn per_record(a: Option<u64>, b: Option<u64>, n: u64) -> Value {
    match (a, b) {
        (Some(a), Some(b)) if n > 0 => json!(((b.saturating_sub(a)) as f64 / n as f64).round()),
        _ => Value::Null,
    }
}

/// Median of `runs` timings of GET `path`, in ms.
async fn latency(args: &BenchArgs, path: &str, runs: usize) -> Result<f64, BenchError> {
    let mut t = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        api(args, "GET", path.to_string(), None).await?;
        t.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    t.sort_by(f64::total_cmp);
    Ok(t[t.len() / 2])
}

/// Runs the scenario and prints its figures (one JSON line with `--json`).
pub async fn run_archive(args: BenchArgs) -> Result<Value, BenchError> {
    let n = if args.pmessages == 0 {
        100_000
    } else {
        args.pmessages
    };
    let uri = AmqpUri::parse(&args.uri)?;
    let queue = format!("{}-archive", args.queue_prefix);
    let target = format!("{}-replayed", args.queue_prefix);
    let mut admin = Connection::open(&uri).await?;
    admin.delete_queue(&queue).await?;
    admin.delete_queue(&target).await?;
    let mut a = FieldTable::default();
    a.insert("x-dead-letter-archive".into(), AMQPValue::Boolean(true));
    admin.declare_queue_with(&queue, true, a).await?;
    admin.declare_queue(&target, true).await?;
    api(
        &args,
        "POST",
        "/api/dead-letters/delete".into(),
        Some(json!({"filter": {"queue": queue}})),
    )
    .await?;
    let before_total =
        api(&args, "GET", "/api/dead-letters?page_size=1".into(), None).await?["total"]
            .as_u64()
            .unwrap_or(0);

    // A big archive first (transient dead letters through a second archive queue).
    if args.archive_preload > 0 {
        let pre = format!("{}-archive-preload", args.queue_prefix);
        let mut a = FieldTable::default();
        a.insert("x-dead-letter-archive".into(), AMQPValue::Boolean(true));
        admin.declare_queue_with(&pre, false, a).await?;
        let have = records_in(&args, &pre).await?;
        let mut p = Connection::open(&uri).await?;
        let t = Instant::now();
        publish_dead_letters(
            &mut p,
            &pre,
            args.archive_preload,
            1_000_000_000 + have,
            args.size,
            false,
        )
        .await?;
        wait_records(&args, &pre, have + args.archive_preload, t).await?;
        p.close().await;
        if !args.quiet {
            eprintln!(
                "preloaded {} records in {:.1}s",
                args.archive_preload,
                t.elapsed().as_secs_f64()
            );
        }
    }

    // Archive: publish everything, wait for every record.
    let mut publisher = Connection::open(&uri).await?;
    let cpu0 = cpu(&args);
    let start = Instant::now();
    publish_dead_letters(&mut publisher, &queue, n, 0, args.size, true).await?;
    let published = start.elapsed();
    wait_records(&args, &queue, n, start).await?;
    let archived = start.elapsed();
    let cpu1 = cpu(&args);
    publisher.close().await;

    // Replay all of them to `target`.
    let job = api(
        &args,
        "POST",
        "/api/dead-letters/replay".into(),
        Some(json!({"filter": {"queue": queue}, "exchange": "", "routing_key": target})),
    )
    .await?;
    let job_id = job["job"].as_i64().unwrap_or(0);
    let rstart = Instant::now();
    let info = loop {
        let info = api(
            &args,
            "GET",
            format!("/api/dead-letters/jobs/{job_id}"),
            None,
        )
        .await?;
        if info["state"] != "RUNNING" {
            break info;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let replayed_in = rstart.elapsed();
    let cpu2 = cpu(&args);
    let replayed = info["replayed"].as_u64().unwrap_or(0);
    admin.delete_queue(&target).await?;

    // Query latency over the whole archive. First, right after the replay (whose status
    // changes left old index entries behind until the database cleans them): one page by status.
    let status_first = latency(&args, "/api/dead-letters?status=PENDING&page_size=100", 1).await?;
    let total = api(&args, "GET", "/api/dead-letters?page_size=1".into(), None).await?["total"]
        .as_u64()
        .unwrap_or(0);
    let one = api(
        &args,
        "GET",
        format!("/api/dead-letters?queue={queue}&page_size=1"),
        None,
    )
    .await?;
    let id = one["items"][0]["id"].as_i64().unwrap_or(1);
    let runs = 5;
    let list_filtered = latency(
        &args,
        &format!("/api/dead-letters?queue={queue}&status=REPLAYED&page_size=100"),
        runs,
    )
    .await?;
    let list_sorted = latency(
        &args,
        "/api/dead-letters?page_size=100&sort=-created_at",
        runs,
    )
    .await?;
    let list_deep = latency(
        &args,
        "/api/dead-letters?page_size=100&page=1000&sort=id",
        runs,
    )
    .await?;
    let groups = latency(
        &args,
        "/api/dead-letters/groups?by=original_queue,reason,error_fingerprint,status",
        runs,
    )
    .await?;
    let get_one = latency(&args, &format!("/api/dead-letters/{id}"), runs).await?;
    let status_page = latency(
        &args,
        "/api/dead-letters?status=PENDING&page_size=100",
        runs,
    )
    .await?;
    // A queue filter alone, for the queue of the oldest record (with `--archive-preload` or the
    // script's FILL: a queue whose records are all older than this run's).
    let oldest = api(
        &args,
        "GET",
        "/api/dead-letters?sort=id&page_size=1".into(),
        None,
    )
    .await?;
    let oldest_queue = oldest["items"][0]["queue"]
        .as_str()
        .unwrap_or(queue.as_str())
        .to_string();
    let queue_page = latency(
        &args,
        &format!("/api/dead-letters?queue={oldest_queue}&page_size=100"),
        runs,
    )
    .await?;
    admin.close().await;

    let secs = |d: Duration| d.as_secs_f64().max(1e-9);
    let report = json!({
        "scenario": "archive",
        "messages": n,
        "body_bytes": args.size,
        "publish_seconds": secs(published),
        "archive_seconds": secs(archived),
        "archived_per_sec": (n as f64 / secs(archived)).round(),
        "replayed": replayed,
        "replay_seconds": secs(replayed_in),
        "replayed_per_sec": (replayed as f64 / secs(replayed_in)).round(),
        "records_before": before_total,
        "cpu_us_per_record": {
            "archive_broker": per_record(cpu0.0, cpu1.0, n),
            "archive_db": per_record(cpu0.1, cpu1.1, n),
            "replay_broker": per_record(cpu1.0, cpu2.0, replayed),
            "replay_db": per_record(cpu1.1, cpu2.1, replayed),
        },
        "records_queried": total,
        "latency_ms": {
            "list_filtered_page": list_filtered,
            "list_sorted_page": list_sorted,
            "list_page_1000": list_deep,
            "groups": groups,
            "get_one": get_one,
            "status_page_first_after_replay": status_first,
            "status_page": status_page,
            "queue_only_page": queue_page,
        },
    });
    if args.json {
        println!("{report}");
    } else {
        println!(
            "scenario archive: {n} persistent messages of {} bytes",
            args.size
        );
        println!(
            "  archived:  {:.0}/s ({:.2}s; publishing took {:.2}s)",
            n as f64 / secs(archived),
            secs(archived),
            secs(published)
        );
        println!(
            "  replayed:  {:.0}/s ({replayed} in {:.2}s)",
            replayed as f64 / secs(replayed_in),
            secs(replayed_in)
        );
        println!(
            "  CPU µs per record: archive broker {} db {}, replay broker {} db {}",
            report["cpu_us_per_record"]["archive_broker"],
            report["cpu_us_per_record"]["archive_db"],
            report["cpu_us_per_record"]["replay_broker"],
            report["cpu_us_per_record"]["replay_db"]
        );
        println!(
            "  API latency over {total} records (median of {runs}, ms): list filtered {list_filtered:.1}, list sorted {list_sorted:.1}, page 1000 {list_deep:.1}, groups {groups:.1}, get {get_one:.1}, \
             status=PENDING {status_page:.1} (first, right after the replay: {status_first:.1}), queue={oldest_queue} only {queue_page:.1}"
        );
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_poll_comes_sooner_near_the_end() {
        let ms = Duration::from_millis;
        // 10,000 of 50,000 in 200 ms: 800 ms left, polled every 50 ms.
        assert_eq!(next_poll(40_000, 10_000, ms(200)), POLL_MAX);
        // 4,000 missing at 50 records a ms: 80 ms left, polled in 20 ms.
        assert_eq!(next_poll(4_000, 40_000, ms(800)), ms(20));
        // One record missing: at the floor.
        assert_eq!(next_poll(1, 40_000, ms(800)), POLL_MIN);
        // Nothing archived since the first poll: 10 ms.
        assert_eq!(next_poll(50_000, 0, ms(100)), ms(10));
    }
}
