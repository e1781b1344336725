//! `--scenario archive` (Charon's dead-letter archive, docs/archive.md): publishes
//! `--pmessages` persistent messages of `--size` bytes into a queue with
//! `x-dead-letter-archive`, and measures
//! - archived/s: from the first publish until the management API counts every record;
//! - replay/s: one replay job of all of them to another queue, until the job is done;
//! - the API's latency for a filtered list page, a sorted page, a group query and one record,
//!   over every record the archive holds (run it repeatedly to grow the archive to 1,000,000).

use std::time::{Duration, Instant};

use amq_protocol::types::{AMQPValue, FieldTable};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::client::Connection;
use crate::client::wire::PublishTemplate;
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

async fn records_in(args: &BenchArgs, queue: &str) -> Result<u64, BenchError> {
    let v = api(
        args,
        "GET",
        format!("/api/dead-letters?queue={queue}&page_size=1"),
        None,
    )
    .await?;
    Ok(v["total"].as_u64().unwrap_or(0))
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

    // Archive: publish everything, wait for every record.
    let mut publisher = Connection::open(&uri).await?;
    let tpl = PublishTemplate::new(1, "", &queue, args.size, true, publisher.frame_max);
    let start = Instant::now();
    let mut sent = 0u64;
    let mut buf = Vec::with_capacity(tpl.bytes.len() * PUBLISH_BATCH as usize);
    while sent < n {
        buf.clear();
        let k = PUBLISH_BATCH.min(n - sent);
        for _ in 0..k {
            tpl.append(&mut buf, sent);
        }
        publisher
            .writer
            .write_all(&buf)
            .await
            .map_err(BenchError::Io)?;
        sent += k;
    }
    let published = start.elapsed();
    let mut last_print = Instant::now();
    loop {
        let have = records_in(&args, &queue).await?;
        if have >= n {
            break;
        }
        if !args.quiet && last_print.elapsed() >= Duration::from_secs(1) {
            eprintln!(
                "archive: {have}/{n} records after {:.1}s",
                start.elapsed().as_secs_f64()
            );
            last_print = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let archived = start.elapsed();
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
    let replayed = info["replayed"].as_u64().unwrap_or(0);
    admin.delete_queue(&target).await?;

    // Query latency over the whole archive.
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
        "records_queried": total,
        "latency_ms": {
            "list_filtered_page": list_filtered,
            "list_sorted_page": list_sorted,
            "list_page_1000": list_deep,
            "groups": groups,
            "get_one": get_one,
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
            "  API latency over {total} records (median of {runs}, ms): list filtered {list_filtered:.1}, list sorted {list_sorted:.1}, page 1000 {list_deep:.1}, groups {groups:.1}, get {get_one:.1}"
        );
    }
    Ok(report)
}
