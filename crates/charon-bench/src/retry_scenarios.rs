//! `--scenario retry` and `--scenario delayed` (issue 10), with their own report.
//!
//! **retry**: `--pmessages` messages (default 10,000) each fail `--retry-limit` times (default
//! 3) before a consumer acks them. `--retry-mode native` (Charon): one queue with
//! `x-retry-limit` / `x-retry-delays [--retry-delay-ms]`, attempts read from `x-retry-count`.
//! `--retry-mode manual` (any broker, seed 003's topology): main queue dead-letters into a retry
//! queue with `x-message-ttl = --retry-delay-ms` that dead-letters back into main; attempts read
//! from the retry queue's `x-death` count. Reports retry cycles per second (pmessages × limit /
//! time from the first publish to the last ack) and, with `--broker-pid`, the broker's CPU time
//! (utime + stime from /proc) per cycle. In native mode with `--broker-pid --retry-memory` it
//! first parks every message (one rejection each, with a 10-minute delay) and reports the
//! broker's RSS per parked message beyond the same messages queued (`park_extra_bytes_per_msg`).
//!
//! **delayed**: `--pmessages` messages (default 100,000) to an `x-delayed-message` exchange with
//! distinct delays spread evenly over `--delay-spread-ms` after `--delay-base-ms`; reports the
//! lateness of each arrival (receive time − send time − its delay), p50/p99/max. Measured at the
//! client, it includes publish and delivery latency: an upper bound of the broker's release
//! lateness. `--rate` paces the publisher (msg/s) so that publishing lag does not count.
//!
//! With `--api http://host:port` (Charon) both reports add the broker-side release lateness
//! (`broker_lateness_ms_*`: release time − due time, measured where the broker releases the
//! message) read from the queue's / delayed exchange's `release_lateness_ms`.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use amq_protocol::frame::{AMQPContentHeader, AMQPFrame};
use amq_protocol::protocol::basic::{self, AMQPProperties};
use amq_protocol::protocol::{AMQPClass, exchange, queue};
use amq_protocol::types::{AMQPValue, FieldArray, FieldTable, LongString, ShortString};
use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::io::AsyncWriteExt;

use crate::client::Connection;
use crate::client::connection::{CHANNEL, decode, encode};
use crate::client::frame_io::{FRAME_BODY, FRAME_HEADER, FRAME_METHOD};
use crate::client::wire;
use crate::uri::AmqpUri;
use crate::{BenchArgs, BenchError, Scenario, api_lateness, proc_stats};

/// How the retry scenario builds its retries.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetryMode {
    /// Charon's retry policy (`x-retry-*`).
    #[default]
    Native,
    /// Seed 003's hand-built topology: retry queue with TTL + DLX back to the main queue.
    Manual,
}

/// The report of the retry and delayed scenarios.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RetryReport {
    /// "retry" or "delayed".
    pub scenario: String,
    /// Parameters.
    pub params: String,
    /// Messages.
    pub messages: u64,
    /// retry: retry cycles completed (messages × limit).
    pub retry_cycles: u64,
    /// retry: cycles per second.
    pub retry_cycles_per_s: Option<f64>,
    /// Seconds from the first publish to the last ack.
    pub elapsed_s: f64,
    /// delayed: lateness percentiles (ms).
    pub lateness_ms_p50: Option<f64>,
    /// delayed: p99 lateness (ms).
    pub lateness_ms_p99: Option<f64>,
    /// delayed: max lateness (ms).
    pub lateness_ms_max: Option<f64>,
    /// With --api: releases the broker measured (parked or delayed messages).
    pub broker_lateness_count: Option<u64>,
    /// With --api: broker-side release lateness p50 (ms), measured at the release point.
    pub broker_lateness_ms_p50: Option<f64>,
    /// With --api: broker-side p99 (ms).
    pub broker_lateness_ms_p99: Option<f64>,
    /// With --api: broker-side max (ms).
    pub broker_lateness_ms_max: Option<f64>,
    /// retry/native with --broker-pid: broker RSS per parked message beyond a queued one (bytes).
    pub park_extra_bytes_per_msg: Option<f64>,
    /// Broker RSS with the messages queued / parked (KiB), for the figure above.
    pub rss_queued_kib: Option<u64>,
    /// Broker RSS with every message parked (KiB).
    pub rss_parked_kib: Option<u64>,
    /// retry with --broker-pid: broker CPU time (utime + stime) per retry cycle (µs).
    pub broker_cpu_us_per_cycle: Option<f64>,
}

fn s(v: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(v))
}

fn table(entries: Vec<(&str, AMQPValue)>) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in entries {
        t.insert(ShortString::from(k), v);
    }
    t
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

async fn open(uri: &AmqpUri, prefetch: u16) -> Result<Connection, BenchError> {
    let mut c = Connection::open(uri).await?;
    c.qos(prefetch).await?;
    Ok(c)
}

async fn rpc_ok(c: &mut Connection, class: AMQPClass) -> Result<(), BenchError> {
    match c.rpc(class).await? {
        AMQPClass::Exchange(_) | AMQPClass::Queue(_) => Ok(()),
        other => Err(BenchError::Protocol(format!("unexpected reply {other:?}"))),
    }
}

/// Appends one publish with `props` and `body` to `out`.
pub(crate) fn publish(
    out: &mut Vec<u8>,
    exchange: &str,
    key: &str,
    props: AMQPProperties,
    body: Vec<u8>,
) -> Result<(), BenchError> {
    let m = AMQPFrame::Method(
        CHANNEL,
        AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
            exchange: exchange.into(),
            routing_key: key.into(),
            mandatory: false,
            immediate: false,
        })),
    );
    out.extend(encode(&m)?);
    let h = AMQPFrame::Header(
        CHANNEL,
        AMQPContentHeader {
            class_id: 60,
            body_size: body.len() as u64,
            properties: props,
        },
    );
    out.extend(encode(&h)?);
    out.extend(encode(&AMQPFrame::Body(CHANNEL, body))?);
    Ok(())
}

/// One delivery as the scenarios see it.
struct Delivery {
    tag: u64,
    headers: Option<FieldTable>,
    body: Vec<u8>,
}

/// Reads deliveries from a consuming connection, calling `f` for each (it appends acks to the
/// buffer it is given) until `f` says stop.
async fn consume(
    c: &mut Connection,
    mut f: impl FnMut(Delivery, &mut Vec<u8>) -> bool,
) -> Result<(), BenchError> {
    let mut out = Vec::with_capacity(4096);
    let mut cur: Option<Delivery> = None;
    loop {
        c.reader.fill().await?;
        let mut stop = false;
        while let Some(fr) = c.reader.next_frame()? {
            match fr.kind {
                FRAME_METHOD => {
                    if let Some((wire::CLASS_BASIC, wire::BASIC_DELIVER)) =
                        wire::method_ids(fr.payload)
                    {
                        let tag = wire::deliver_tag(fr.payload).unwrap_or(0);
                        cur = Some(Delivery {
                            tag,
                            headers: None,
                            body: Vec::new(),
                        });
                    }
                }
                FRAME_HEADER => {
                    if let (Some(d), AMQPFrame::Header(_, h)) = (cur.as_mut(), decode(fr.full)?) {
                        d.headers = h.properties.headers().clone();
                        if h.body_size == 0
                            && let Some(d) = cur.take()
                        {
                            stop |= !f(d, &mut out);
                        }
                    }
                }
                FRAME_BODY => {
                    if let Some(d) = cur.as_mut() {
                        d.body.extend_from_slice(fr.payload);
                        if d.body.len() >= 16
                            && let Some(d) = cur.take()
                        {
                            stop |= !f(d, &mut out);
                        }
                    }
                }
                _ => {}
            }
        }
        if !out.is_empty() {
            c.writer.write_all(&out).await?;
            out.clear();
        }
        if stop {
            return Ok(());
        }
    }
}

fn int_of(v: &AMQPValue) -> Option<i64> {
    match v {
        AMQPValue::LongLongInt(i) => Some(*i),
        AMQPValue::LongInt(i) => Some(i64::from(*i)),
        AMQPValue::LongUInt(i) => Some(i64::from(*i)),
        AMQPValue::ShortInt(i) => Some(i64::from(*i)),
        AMQPValue::ShortUInt(i) => Some(i64::from(*i)),
        AMQPValue::ShortShortInt(i) => Some(i64::from(*i)),
        AMQPValue::ShortShortUInt(i) => Some(i64::from(*i)),
        _ => None,
    }
}

/// Attempts so far: `x-retry-count` (native) or the retry queue's `x-death` count (manual).
fn attempts(h: Option<&FieldTable>, mode: RetryMode, retry_q: &str) -> u32 {
    let Some(h) = h else { return 0 };
    let inner = h.inner();
    let n = match mode {
        RetryMode::Native => inner.get("x-retry-count").and_then(int_of),
        RetryMode::Manual => match inner.get("x-death") {
            Some(AMQPValue::FieldArray(a)) => a.as_slice().iter().find_map(|e| match e {
                AMQPValue::FieldTable(t) => {
                    let q = t.inner().get("queue");
                    let is_retry = matches!(q, Some(AMQPValue::LongString(s)) if s.as_bytes() == retry_q.as_bytes());
                    if is_retry { t.inner().get("count").and_then(int_of) } else { None }
                }
                _ => None,
            }),
            _ => None,
        },
    };
    n.and_then(|n| u32::try_from(n).ok()).unwrap_or(0)
}

/// Polls `queue.declare passive` until `queue` holds `n` ready messages.
async fn wait_count(c: &mut Connection, queue_name: &str, n: u64) -> Result<(), BenchError> {
    loop {
        let reply = c
            .rpc(AMQPClass::Queue(queue::AMQPMethod::Declare(
                queue::Declare {
                    queue: queue_name.into(),
                    passive: true,
                    durable: false,
                    exclusive: false,
                    auto_delete: false,
                    nowait: false,
                    arguments: FieldTable::default(),
                },
            )))
            .await?;
        if let AMQPClass::Queue(queue::AMQPMethod::DeclareOk(ok)) = reply
            && u64::from(ok.message_count) >= n
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn sample_rss(pid: Option<u32>) -> Option<u64> {
    tokio::time::sleep(Duration::from_millis(500)).await;
    proc_stats::sample(pid).map(|s| s.rss_kib)
}

async fn retry(args: &BenchArgs, uri: &AmqpUri) -> Result<RetryReport, BenchError> {
    let n = if args.pmessages == 0 {
        10_000
    } else {
        args.pmessages
    };
    let limit = args.retry_limit;
    let mode = args.retry_mode;
    let main = format!("{}-retry-main", args.queue_prefix);
    let retry_q = format!("{}-retry-wait", args.queue_prefix);
    let mut admin = Connection::open(uri).await?;
    for q in [&main, &retry_q] {
        admin.delete_queue(q).await?;
    }
    let declare = |name: &str, arguments: FieldTable| {
        AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
            queue: name.into(),
            passive: false,
            durable: args.persistent,
            exclusive: false,
            auto_delete: false,
            nowait: false,
            arguments,
        }))
    };
    let delay = i64::try_from(args.retry_delay_ms).unwrap_or(i64::MAX);
    let mut report = RetryReport {
        scenario: "retry".into(),
        params: format!(
            "mode={mode:?} messages={n} limit={limit} delay_ms={delay} persistent={} prefetch={} message_ids={}",
            args.persistent, args.prefetch, args.message_ids
        ),
        messages: n,
        ..RetryReport::default()
    };
    let props = || {
        let p = AMQPProperties::default();
        if args.persistent {
            p.with_delivery_mode(2)
        } else {
            p
        }
    };
    match mode {
        RetryMode::Native => {
            if args.broker_pid.is_some() && args.retry_memory {
                // Memory: n queued, then n parked (10 minutes), same messages.
                let park = format!("{}-retry-park", args.queue_prefix);
                admin.delete_queue(&park).await?;
                let a = table(vec![
                    ("x-retry-limit", AMQPValue::LongLongInt(1)),
                    (
                        "x-retry-delays",
                        AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::LongLongInt(
                            600_000,
                        )])),
                    ),
                ]);
                rpc_ok(&mut admin, declare(&park, a)).await?;
                let before = sample_rss(args.broker_pid).await;
                let mut out = Vec::new();
                for i in 0..n {
                    publish(&mut out, "", &park, props(), i.to_le_bytes().repeat(2))?;
                    if out.len() > 1 << 20 {
                        admin.writer.write_all(&out).await?;
                        out.clear();
                    }
                }
                admin.writer.write_all(&out).await?;
                wait_count(&mut admin, &park, n).await?;
                let queued = sample_rss(args.broker_pid).await;
                let mut c = open(uri, args.prefetch).await?;
                c.consume(&park, false).await?;
                let mut seen = 0u64;
                consume(&mut c, |d, out| {
                    wire::encode_reject_drop(out, CHANNEL, d.tag);
                    seen += 1;
                    seen < n
                })
                .await?;
                c.close().await;
                let parked = sample_rss(args.broker_pid).await;
                if let (Some(b), Some(q), Some(p)) = (before, queued, parked) {
                    let _ = b;
                    report.rss_queued_kib = Some(q);
                    report.rss_parked_kib = Some(p);
                    report.park_extra_bytes_per_msg =
                        Some((p as f64 - q as f64) * 1024.0 / n as f64);
                }
                admin.delete_queue(&park).await?;
            }
            let a = table(vec![
                ("x-retry-limit", AMQPValue::LongLongInt(i64::from(limit))),
                (
                    "x-retry-delays",
                    AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::LongLongInt(delay)])),
                ),
            ]);
            rpc_ok(&mut admin, declare(&main, a)).await?;
        }
        RetryMode::Manual => {
            let a = table(vec![
                ("x-dead-letter-exchange", s("")),
                ("x-dead-letter-routing-key", s(&retry_q)),
            ]);
            rpc_ok(&mut admin, declare(&main, a)).await?;
            let a = table(vec![
                ("x-message-ttl", AMQPValue::LongLongInt(delay)),
                ("x-dead-letter-exchange", s("")),
                ("x-dead-letter-routing-key", s(&main)),
            ]);
            rpc_ok(&mut admin, declare(&retry_q, a)).await?;
        }
    }
    let mut c = open(uri, args.prefetch).await?;
    c.consume(&main, false).await?;
    let cpu_before = args.broker_pid.and_then(|p| proc_stats::sample(Some(p)));
    let start = Instant::now();
    let mut out = Vec::new();
    for i in 0..n {
        let p = if args.message_ids {
            props().with_message_id(ShortString::from(format!("m-{i}")))
        } else {
            props()
        };
        publish(&mut out, "", &main, p, i.to_le_bytes().repeat(2))?;
        if out.len() > 1 << 20 {
            admin.writer.write_all(&out).await?;
            out.clear();
        }
    }
    admin.writer.write_all(&out).await?;
    let mut done = 0u64;
    consume(&mut c, |d, out| {
        if attempts(d.headers.as_ref(), mode, &retry_q) < limit {
            wire::encode_reject_drop(out, CHANNEL, d.tag);
        } else {
            wire::encode_ack(out, CHANNEL, d.tag, false);
            done += 1;
        }
        done < n
    })
    .await?;
    let elapsed = start.elapsed().as_secs_f64();
    let cpu_after = args.broker_pid.and_then(|p| proc_stats::sample(Some(p)));
    if let (Some(b), Some(a)) = (cpu_before, cpu_after) {
        let cycles = (n * u64::from(limit)).max(1) as f64;
        report.broker_cpu_us_per_cycle = Some(a.cpu_us.saturating_sub(b.cpu_us) as f64 / cycles);
    }
    c.close().await;
    if let (Some(api), RetryMode::Native) = (&args.api, mode) {
        broker_side(
            &mut report,
            api_lateness::fetch(api, uri, "queues", &main).await?,
        );
    }
    for q in [&main, &retry_q] {
        admin.delete_queue(q).await?;
    }
    admin.close().await;
    report.retry_cycles = n * u64::from(limit);
    report.elapsed_s = elapsed;
    report.retry_cycles_per_s = Some(report.retry_cycles as f64 / elapsed.max(1e-9));
    Ok(report)
}

async fn delayed(args: &BenchArgs, uri: &AmqpUri) -> Result<RetryReport, BenchError> {
    let n = if args.pmessages == 0 {
        100_000
    } else {
        args.pmessages
    };
    let x = format!("{}-delayed", args.queue_prefix);
    let q = format!("{}-delayed-q", args.queue_prefix);
    let mut admin = Connection::open(uri).await?;
    admin.delete_queue(&q).await?;
    rpc_ok(
        &mut admin,
        AMQPClass::Exchange(exchange::AMQPMethod::Declare(exchange::Declare {
            exchange: x.as_str().into(),
            kind: "x-delayed-message".into(),
            passive: false,
            durable: args.persistent,
            auto_delete: false,
            internal: false,
            nowait: false,
            arguments: table(vec![("x-delayed-type", s("direct"))]),
        })),
    )
    .await?;
    admin.declare_queue(&q, args.persistent).await?;
    rpc_ok(
        &mut admin,
        AMQPClass::Queue(queue::AMQPMethod::Bind(queue::Bind {
            queue: q.as_str().into(),
            exchange: x.as_str().into(),
            routing_key: "k".into(),
            nowait: false,
            arguments: FieldTable::default(),
        })),
    )
    .await?;
    let mut c = open(uri, args.prefetch).await?;
    c.consume(&q, true).await?;
    // The consumer runs while the producer publishes: messages due early are read on time.
    let consumer = tokio::spawn(async move {
        let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)
            .map_err(|e| BenchError::Protocol(e.to_string()))?;
        let mut seen = 0u64;
        consume(&mut c, |d, _| {
            let now = now_nanos();
            let mut a = [0u8; 8];
            let mut b = [0u8; 8];
            a.copy_from_slice(&d.body[..8]);
            b.copy_from_slice(&d.body[8..16]);
            let due = u64::from_le_bytes(a) + u64::from_le_bytes(b) * 1_000_000;
            hist.saturating_record((now.saturating_sub(due) / 1000).max(1));
            seen += 1;
            seen < n
        })
        .await?;
        Ok::<_, BenchError>((hist, c))
    });
    let base = args.delay_base_ms;
    let spread = args.delay_spread_ms.max(1);
    let start = Instant::now();
    let mut out = Vec::new();
    for i in 0..n {
        let d = base + i * spread / n;
        let mut body = now_nanos().to_le_bytes().to_vec();
        body.extend_from_slice(&d.to_le_bytes());
        let mut p = AMQPProperties::default().with_headers(table(vec![(
            "x-delay",
            AMQPValue::LongLongInt(i64::try_from(d).unwrap_or(i64::MAX)),
        )]));
        if args.persistent {
            p = p.with_delivery_mode(2);
        }
        publish(&mut out, &x, "k", p, body)?;
        // With --rate: paced in batches of 1/100 s, so the broker takes each message close to
        // its send time (the delay counts from the broker's receipt).
        let batch = (args.rate / 100).max(1);
        if out.len() > 1 << 20 || (args.rate > 0 && (i + 1) % batch == 0) {
            admin.writer.write_all(&out).await?;
            out.clear();
        }
        if args.rate > 0 && (i + 1) % batch == 0 {
            let due = start + Duration::from_secs_f64((i + 1) as f64 / args.rate as f64);
            tokio::time::sleep_until(due.into()).await;
        }
    }
    admin.writer.write_all(&out).await?;
    let (hist, c) = consumer
        .await
        .map_err(|e| BenchError::Task(e.to_string()))??;
    let elapsed = start.elapsed().as_secs_f64();
    c.close().await;
    let broker = match &args.api {
        Some(api) => api_lateness::fetch(api, uri, "exchanges", &x).await?,
        None => None,
    };
    admin.delete_queue(&q).await?;
    admin.close().await;
    let ms = |p: f64| Some(hist.value_at_quantile(p) as f64 / 1000.0);
    let mut report = RetryReport {
        scenario: "delayed".into(),
        params: format!(
            "messages={n} base_ms={base} spread_ms={spread} persistent={}",
            args.persistent
        ),
        messages: n,
        elapsed_s: elapsed,
        lateness_ms_p50: ms(0.5),
        lateness_ms_p99: ms(0.99),
        lateness_ms_max: Some(hist.max() as f64 / 1000.0),
        ..RetryReport::default()
    };
    broker_side(&mut report, broker);
    Ok(report)
}

fn broker_side(report: &mut RetryReport, broker: Option<api_lateness::Broker>) {
    if let Some((count, p50, p99, max)) = broker {
        report.broker_lateness_count = Some(count);
        report.broker_lateness_ms_p50 = Some(p50);
        report.broker_lateness_ms_p99 = Some(p99);
        report.broker_lateness_ms_max = Some(max);
    }
}

/// Runs `--scenario retry` or `--scenario delayed` and prints the report (JSON with --json).
pub async fn run_and_print(args: &BenchArgs) -> Result<RetryReport, BenchError> {
    let uri = AmqpUri::parse(&args.uri)?;
    let r = match args.scenario {
        Scenario::Delayed => delayed(args, &uri).await?,
        _ => retry(args, &uri).await?,
    };
    let json = serde_json::to_string(&r).map_err(|e| BenchError::Protocol(e.to_string()))?;
    if args.json {
        println!("{json}");
    } else {
        println!("{} ({})", r.scenario, r.params);
        println!("{json}");
    }
    Ok(r)
}
