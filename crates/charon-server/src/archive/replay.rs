//! Running a replay job: records in order, in small batches, each batch INFLIGHT (committed)
//! before publishing, the store indices recorded right after, REPLAYED/FAILED after the
//! confirms (docs/archive.md, "Replay"). `rate` spaces publishes evenly.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use charon_archive::jobs::{self, JobSpec};
use charon_archive::{ArchiveError, Record};
use charon_protocol::{AMQPValue, BasicProperties, RawProperties, ShortString};
use serde_json::Value;
use tokio::time::Instant;

use super::ArchiveService;
use super::publish::{Prepared, PublishError, prepare};

/// Headers dead-lettering adds, removed by `strip_death_headers`.
const DEATH_HEADERS: &[&str] = &[
    "x-death",
    "x-first-death-queue",
    "x-first-death-reason",
    "x-first-death-exchange",
    "x-last-death-queue",
    "x-last-death-reason",
    "x-last-death-exchange",
];

/// Runs `f` until the database answers (a job outlives a database outage).
async fn retry<T: Send + 'static>(
    svc: &Arc<ArchiveService>,
    what: &str,
    f: impl Fn(&mut dyn charon_archive::sql::Conn) -> Result<T, ArchiveError>
    + Send
    + Sync
    + Clone
    + 'static,
) -> T {
    let mut n = 0u32;
    loop {
        match svc.run(f.clone()).await {
            Ok(v) => return v,
            Err(e) => {
                if n.is_multiple_of(30) {
                    tracing::error!(error = %e, what, "replay job: archive database failed; retrying");
                }
                n += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// The message a record replays as: its properties (edited headers included) with
/// `x-replay-count`, without the death headers when asked.
pub(super) fn replay_properties(r: &Record, strip: bool) -> RawProperties {
    let props: BasicProperties = RawProperties(Bytes::from(r.amqp_properties.clone()))
        .decode()
        .unwrap_or_default();
    let mut headers = props.headers().clone().unwrap_or_default();
    let mut table = charon_protocol::FieldTable::default();
    for (k, v) in &headers {
        if strip && DEATH_HEADERS.contains(&k.as_str()) {
            continue;
        }
        if k.as_str() == "x-replay-count" {
            continue;
        }
        table.insert(k.clone(), v.clone());
    }
    table.insert(
        ShortString::from("x-replay-count"),
        AMQPValue::LongLongInt(r.replay_count + 1),
    );
    headers = table;
    RawProperties::encode(&props.with_headers(headers))
}

/// Where record `r` replays to per `request`: (exchange, routing key, properties).
/// Where record `r` goes: the request's exchange and routing key, or by default its original
/// exchange with every routing key of its `x-death` entry (the routing key and the `CC` keys it
/// was first published with, BCC excluded, as RabbitMQ's dead-lettering kept them), so a replay
/// reaches the queues the original publish reached.
fn destination(
    r: &Record,
    request: &Value,
) -> Result<(String, Vec<String>, RawProperties), PublishError> {
    let exchange = request
        .get("exchange")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| r.original_exchange.clone())
        .ok_or_else(|| PublishError::Route("no original exchange: give one".into()))?;
    let routing_keys = match request.get("routing_key").and_then(Value::as_str) {
        Some(k) => vec![k.to_string()],
        None if !r.original_routing_keys.is_empty() => r.original_routing_keys.clone(),
        None => vec![r.original_queue.clone().unwrap_or_default()],
    };
    let strip = request
        .get("strip_death_headers")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok((exchange, routing_keys, replay_properties(r, strip)))
}

fn keys(k: &[String]) -> Vec<&str> {
    k.iter().map(String::as_str).collect()
}

/// Whether record `r`'s replay (per `request`) sits in one of the queues it routes to: decides
/// a replay a restart interrupted between its publish and the record of its store index.
pub(super) async fn in_target_queues(
    svc: &Arc<ArchiveService>,
    r: &Record,
    request: &Value,
) -> bool {
    let Some(vhost) = svc.broker().and_then(|b| b.vhost(&r.vhost)) else {
        return false;
    };
    let Ok((exchange, routing_keys, props)) = destination(r, request) else {
        return false;
    };
    let decoded = props.decode().ok();
    let headers = decoded.as_ref().and_then(|d| d.headers().as_ref());
    let mut targets = Vec::new();
    {
        let topo = vhost.topology.read().unwrap_or_else(|p| p.into_inner());
        if topo
            .route(&exchange, &keys(&routing_keys), headers, &mut targets)
            .is_err()
        {
            return false;
        }
    }
    for q in targets {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if !q.send(crate::handles::QueueCmd::Browse { reply: tx }).await {
            continue;
        }
        if let Ok(msgs) = rx.await
            && msgs.iter().any(|m| m.properties.0 == props.0)
        {
            return true;
        }
    }
    false
}

/// Routes record `r` per the job's request and appends it to the store (not yet in any queue).
fn start(svc: &Arc<ArchiveService>, r: &Record, request: &Value) -> Result<Prepared, PublishError> {
    let vhost = svc
        .broker()
        .and_then(|b| b.vhost(&r.vhost))
        .ok_or_else(|| PublishError::Route(format!("NOT_FOUND - no vhost '{}'", r.vhost)))?;
    let (exchange, routing_keys, props) = destination(r, request)?;
    prepare(
        &vhost,
        &exchange,
        &keys(&routing_keys),
        props,
        Bytes::from(r.payload.clone()),
    )
}

/// Tests only: `CHARON_TEST_REPLAY_HOLD_MS` holds a replay between its store append and the
/// commit of its index, so a test can kill the broker in that window (tests/python).
fn test_hold() -> Option<Duration> {
    std::env::var("CHARON_TEST_REPLAY_HOLD_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
}

/// Commits the store indices of `prepared` (one SQL commit), then hands each to its queues.
async fn record_and_hand_over(
    svc: &Arc<ArchiveService>,
    job: i64,
    prepared: &mut Vec<(i64, Prepared, i64)>,
    pending: &mut Vec<(i64, super::publish::Pending)>,
    results: &mut Vec<(i64, Result<(), String>)>,
) {
    if prepared.is_empty() {
        return;
    }
    if let Some(hold) = test_hold() {
        tracing::warn!(
            job,
            "replay: holding between store append and index commit (test)"
        );
        tokio::time::sleep(hold).await;
    }
    let at: Vec<(i64, i64)> = prepared.iter().map(|(rid, _, at)| (*rid, *at)).collect();
    retry(svc, "store indices", move |c| jobs::stored_at(c, job, &at)).await;
    for (rid, p, _) in prepared.drain(..) {
        match p.hand_over().await {
            Ok(p) => pending.push((rid, p)),
            Err(e) => results.push((rid, Err(e.to_string()))),
        }
    }
}

/// Replays the job's records until none is left or it is cancelled.
pub(super) async fn run_job(svc: &Arc<ArchiveService>, spec: JobSpec) {
    let id = spec.id;
    let rate = spec
        .request
        .get("rate")
        .and_then(Value::as_f64)
        .filter(|r| *r > 0.0);
    // A batch is at most 1/5 s of publishes at the rate (so cancel and progress stay timely);
    // without a rate, 1000 records (a few set-based statements per batch).
    let batch = rate.map_or(1000, |r| (r / 5.0).clamp(1.0, 200.0) as u64);
    let gap = rate.map(|r| Duration::from_secs_f64(1.0 / r));
    let mut next_at = Instant::now();
    // Statistics for the steps' plans, on the readers' connection: the archivers keep the
    // writers' one meanwhile (a big archive's analyze takes about a second).
    if let Err(e) = svc
        .read(move |c| {
            jobs::gather_statistics(c, id);
            Ok(())
        })
        .await
    {
        tracing::warn!(job = id, error = %e, "replay job statistics");
    }
    tracing::info!(job = id, "replay job running");
    loop {
        if !retry(svc, "job state", move |c| jobs::is_running(c, id)).await {
            break;
        }
        let records = retry(svc, "next records", move |c| jobs::next(c, id, batch)).await;
        if records.is_empty() {
            retry(svc, "finish", {
                let spec = spec.clone();
                move |c| jobs::finish(c, &spec, &[])
            })
            .await;
            break;
        }
        let ids: Vec<i64> = records.iter().map(|r| r.id).collect();
        let watermark = svc
            .broker()
            .and_then(|b| b.persistence())
            .and_then(|p| i64::try_from(p.durable_index()).ok())
            .unwrap_or(-1);
        let inflight_ids = ids.clone();
        retry(svc, "inflight", move |c| {
            jobs::inflight(c, id, &inflight_ids, watermark)
        })
        .await;
        // Each message is appended to the store, its index committed to the archive, and only
        // then handed to its queues: no consumer can take (and ack) a replayed message whose
        // index a restart would not find (docs/archive.md, "Replay").
        let mut prepared = Vec::new();
        let mut pending = Vec::new();
        let mut results: Vec<(i64, Result<(), String>)> = Vec::new();
        for r in &records {
            if let Some(g) = gap {
                tokio::time::sleep_until(next_at).await;
                next_at = next_at.max(Instant::now() - g) + g;
            }
            match start(svc, r, &spec.request) {
                Ok(p) => {
                    let at = p
                        .store_index
                        .and_then(|i| i64::try_from(i).ok())
                        .unwrap_or(-1);
                    prepared.push((r.id, p, at));
                    // At a rate, each message is recorded and handed over at once.
                    if gap.is_some() {
                        record_and_hand_over(svc, id, &mut prepared, &mut pending, &mut results)
                            .await;
                    }
                }
                Err(e) => results.push((r.id, Err(e.to_string()))),
            }
        }
        record_and_hand_over(svc, id, &mut prepared, &mut pending, &mut results).await;
        for (rid, p) in pending {
            results.push((rid, p.wait().await.map_err(|e| e.to_string())));
        }
        let results = Arc::new(results);
        retry(svc, "finish", {
            let spec = spec.clone();
            let results = results.clone();
            move |c| jobs::finish(c, &spec, &results)
        })
        .await;
    }
    tracing::info!(job = id, "replay job finished");
}
