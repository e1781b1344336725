//! Orchestration: declare/purge queues, connect every worker, release them
//! together, measure for `--duration`, print progress, collect the report and
//! clean up.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::task::JoinHandle;

use crate::client::Connection;
use crate::consumer::{ConsumerCfg, run_consumer};
use crate::histogram::new_latency_histogram;
use crate::proc_stats::{self, ProcSample};
use crate::producer::{ProducerCfg, run_producer};
use crate::report::{LatencyUs, Report};
use crate::scenario::{Scenario, Topology};
use crate::stats::Shared;
use crate::uri::AmqpUri;
use crate::{BenchArgs, BenchError};

const TICK: Duration = Duration::from_millis(50);

async fn connect_all<F, Fut>(
    n: usize,
    uri: &AmqpUri,
    setup: F,
) -> Result<Vec<Connection>, BenchError>
where
    F: Fn(usize, Connection) -> Fut,
    Fut: std::future::Future<Output = Result<Connection, BenchError>> + Send + 'static,
{
    let mut handles: Vec<JoinHandle<Result<Connection, BenchError>>> = Vec::with_capacity(n);
    for i in 0..n {
        let uri = uri.clone();
        let conn = Connection::open(&uri).await?;
        handles.push(tokio::spawn(setup(i, conn)));
    }
    let mut out = Vec::with_capacity(n);
    for h in handles {
        out.push(h.await.map_err(|e| BenchError::Task(e.to_string()))??);
    }
    Ok(out)
}

/// Runs a benchmark and prints its report on stdout (one JSON line with
/// `--json`, the human summary otherwise): the whole `charon bench` command.
pub async fn run_and_print(args: BenchArgs) -> Result<Report, BenchError> {
    if matches!(args.scenario, Scenario::Retry | Scenario::Delayed) {
        let r = crate::retry_scenarios::run_and_print(&args).await?;
        return Ok(Report::for_retry_scenario(&r));
    }
    let json = args.json;
    let report = run(args).await?;
    if json {
        println!("{}", report.to_json());
    } else {
        print!("{report}");
    }
    Ok(report)
}

/// Runs a benchmark described by `args` and returns its report.
pub async fn run(args: BenchArgs) -> Result<Report, BenchError> {
    args.validate()?;
    let uri = AmqpUri::parse(&args.uri)?;
    let topo = Topology::new(&args);

    let mut admin = Connection::open(&uri).await?;
    topo.declare(&mut admin, &args).await?;
    // Connect consumers first (so that nothing is published to an unconsumed queue).
    let (consumers, rejecting) = connect_consumers(&args, &topo, &uri).await?;
    let producers = connect_producers(&args, &uri).await?;

    // Without producers (draining a backlog), --pmessages is how many to receive.
    let expected = if args.producers == 0 {
        args.pmessages
    } else {
        args.pmessages.saturating_mul(args.producers as u64)
    };
    let shared = Arc::new(Shared::new(expected));
    let broker_before = args.broker_pid.and_then(|p| {
        proc_stats::reset_peak_rss(p);
        proc_stats::sample(Some(p))
    });
    let tool_before = proc_stats::sample(None);
    let t0 = Instant::now();
    let t0_ns = shared.now_nanos();
    let workers = Workers::start(&args, &topo, consumers, rejecting, producers, &shared);
    let peak_rss = broker_before.map(|s| s.rss_kib).unwrap_or(0);
    let measured = measure(&args, &shared, t0, expected, peak_rss).await;

    let totals = Totals {
        elapsed: t0.elapsed(),
        published: shared.load(&shared.published),
        consumed: shared.load(&shared.consumed),
        confirmed: shared.load(&shared.confirmed),
        nacked: shared.load(&shared.nacked),
        rejected: shared.load(&shared.rejected),
        broker: (
            broker_before,
            args.broker_pid.and_then(|p| proc_stats::sample(Some(p))),
        ),
        tool: (tool_before, proc_stats::sample(None)),
    };
    shared.stop.cancel();
    let timings = Timings::of(&args, &shared, t0_ns, expected, measured.all_published);
    let hist = workers.join(&shared).await;
    if let Some(e) = shared.take_error() {
        return Err(e);
    }

    // Cleanup.
    if !args.keep_queues {
        topo.delete(&mut admin).await?;
    }
    admin.close().await;
    Ok(report(&args, &totals, &timings, &hist, measured.peak_rss))
}

/// Connects one consumer per consumer spec; returns them and whether each rejects.
async fn connect_consumers(
    args: &BenchArgs,
    topo: &Topology,
    uri: &AmqpUri,
) -> Result<(Vec<Connection>, Vec<bool>), BenchError> {
    let no_ack = args.multi_ack == 0;
    let specs = topo.consumers(args);
    let rejecting: Vec<bool> = specs.iter().map(|s| s.reject).collect();
    let queues: Vec<String> = specs.into_iter().map(|s| s.queue).collect();
    let prefetch = args.prefetch;
    let consumers = connect_all(queues.len(), uri, move |i, mut c| {
        let q = queues[i].clone();
        async move {
            if !no_ack {
                c.qos(prefetch).await?;
            }
            c.consume(&q, no_ack).await?;
            Ok(c)
        }
    })
    .await?;
    Ok((consumers, rejecting))
}

/// Connects the producers (in confirm mode with `--confirm`).
async fn connect_producers(args: &BenchArgs, uri: &AmqpUri) -> Result<Vec<Connection>, BenchError> {
    let confirm = args.confirm;
    connect_all(args.producers, uri, move |_, mut c| async move {
        if confirm > 0 {
            c.confirm_select().await?;
        }
        Ok(c)
    })
    .await
}

/// The running consumer and producer tasks.
struct Workers {
    consumers: Vec<JoinHandle<Histogram<u64>>>,
    producers: Vec<JoinHandle<Result<(), BenchError>>>,
}

impl Workers {
    /// Releases every consumer and producer at once.
    fn start(
        args: &BenchArgs,
        topo: &Topology,
        consumers: Vec<Connection>,
        rejecting: Vec<bool>,
        producers: Vec<Connection>,
        shared: &Arc<Shared>,
    ) -> Self {
        let multi_ack = match (args.multi_ack, args.prefetch) {
            (0, _) => 0,
            (n, 0) => n,
            (n, p) => n.min(u32::from(p).div_ceil(2)).max(1),
        };
        let ccfg = ConsumerCfg {
            multi_ack,
            timestamps: args.size >= 8,
            reject: false,
        };
        let consumers = consumers
            .into_iter()
            .zip(rejecting)
            .map(|(c, reject)| {
                let cfg = ConsumerCfg { reject, ..ccfg };
                tokio::spawn(run_consumer(c, cfg, shared.clone()))
            })
            .collect();
        let queue_names = &topo.queues;
        let producers = producers
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let cfg = ProducerCfg {
                    queue: queue_names[i % queue_names.len()].clone(),
                    size: args.size,
                    persistent: args.persistent,
                    rate: args.rate,
                    confirm: args.confirm,
                    limit: args.pmessages,
                };
                tokio::spawn(run_producer(c, cfg, shared.clone()))
            })
            .collect();
        Self {
            consumers,
            producers,
        }
    }

    /// Waits for the workers (bounded) and merges the consumers' latency histograms.
    async fn join(self, shared: &Shared) -> Histogram<u64> {
        let mut hist = new_latency_histogram();
        for t in self.consumers {
            match tokio::time::timeout(Duration::from_secs(5), t).await {
                Ok(Ok(h)) => {
                    let _ = hist.add(&h);
                }
                Ok(Err(e)) => shared.fail(BenchError::Task(e.to_string())),
                Err(_) => {}
            }
        }
        for t in self.producers {
            if let Ok(Err(e)) = tokio::time::timeout(Duration::from_secs(30), t).await {
                shared.fail(BenchError::Task(e.to_string()));
            }
        }
        hist
    }
}

/// What the measurement loop saw.
struct Measured {
    all_published: bool,
    peak_rss: u64,
}

/// The measurement loop with per-second progress, until `--duration`, the expected count, or a
/// worker's stop. "expiry" has no deadline until publishing is over: then it waits up to
/// --duration past the last message's TTL deadline.
async fn measure(
    args: &BenchArgs,
    shared: &Shared,
    t0: Instant,
    expected: u64,
    mut peak_rss: u64,
) -> Measured {
    let expiry = args.scenario == Scenario::Expiry;
    let mut deadline =
        (!expiry && args.duration > 0).then(|| t0 + Duration::from_secs(args.duration));
    let mut next_print = t0 + Duration::from_secs(1);
    let (mut last_pub, mut last_cons) = (0u64, 0u64);
    let mut sec = 0u64;
    let mut all_published = false;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = shared.stop.cancelled() => break,
        }
        let now = Instant::now();
        if now >= next_print {
            sec += 1;
            let p = shared.load(&shared.published);
            let c = shared.load(&shared.consumed);
            if !args.quiet {
                eprintln!(
                    "time: {sec:>3} s, sent: {} msg/s, received: {} msg/s",
                    p - last_pub,
                    c - last_cons
                );
            }
            (last_pub, last_cons) = (p, c);
            next_print += Duration::from_secs(1);
            if let Some(s) = args.broker_pid.and_then(|p| proc_stats::sample(Some(p))) {
                peak_rss = peak_rss.max(s.rss_kib);
            }
        }
        if !all_published && shared.load(&shared.producers_done) >= args.producers as u64 {
            all_published = true;
            if expiry && args.duration > 0 {
                let last = Duration::from_nanos(shared.load(&shared.publish_done_ns));
                let wait = Duration::from_millis(args.ttl_ms) + Duration::from_secs(args.duration);
                deadline = Some(shared.origin + last + wait);
            }
        }
        if deadline.is_some_and(|d| now >= d) {
            break;
        }
        if expected > 0 && all_published {
            let done = if args.consumers > 0 {
                shared.load(&shared.consumed) >= expected
            } else {
                args.confirm == 0 || shared.load(&shared.confirmed) >= expected
            };
            if done {
                break;
            }
        }
    }
    Measured {
        all_published,
        peak_rss,
    }
}

/// Counts and resource samples at the end of the measurement.
struct Totals {
    elapsed: Duration,
    published: u64,
    consumed: u64,
    confirmed: u64,
    nacked: u64,
    rejected: u64,
    /// Broker (before, after).
    broker: (Option<ProcSample>, Option<ProcSample>),
    /// This tool (before, after).
    tool: (Option<ProcSample>, Option<ProcSample>),
}

/// Publish time, and for "expiry" the mass-expiry time and the DLQ drain rate.
struct Timings {
    publish_s: Option<f64>,
    expiry_drain_s: Option<f64>,
    dlq_drain_rate: Option<f64>,
}

impl Timings {
    fn of(
        args: &BenchArgs,
        shared: &Shared,
        t0_ns: u64,
        expected: u64,
        all_published: bool,
    ) -> Self {
        let expiry = args.scenario == Scenario::Expiry;
        let publish_done = if all_published && args.producers > 0 {
            shared.load(&shared.publish_done_ns)
        } else {
            0
        };
        let publish_s = Shared::secs_between(t0_ns, publish_done);
        let (first_dl, all_dl) = (
            shared.load(&shared.first_consumed_ns),
            shared.load(&shared.all_consumed_ns),
        );
        let ttl_deadline = publish_done
            .checked_add(args.ttl_ms.saturating_mul(1_000_000))
            .filter(|_| publish_done > 0)
            .unwrap_or(0);
        let expiry_drain_s = expiry
            .then(|| Shared::secs_between(ttl_deadline, all_dl))
            .flatten();
        let dlq_drain_rate = expiry
            .then(|| Shared::secs_between(first_dl, all_dl))
            .flatten()
            .map(|s| expected as f64 / s.max(1e-9));
        Self {
            publish_s,
            expiry_drain_s,
            dlq_drain_rate,
        }
    }
}

/// The report from what was measured.
fn report(
    args: &BenchArgs,
    t: &Totals,
    timings: &Timings,
    hist: &Histogram<u64>,
    mut peak_rss: u64,
) -> Report {
    let secs = t.elapsed.as_secs_f64().max(1e-9);
    let msgs = t.published.max(t.consumed).max(1) as f64;
    let cpu = |(b, a): (Option<ProcSample>, Option<ProcSample>)| {
        b.zip(a)
            .map(|(b, a)| a.cpu_us.saturating_sub(b.cpu_us) as f64)
    };
    let broker_cpu = cpu(t.broker);
    let tool_cpu = cpu(t.tool);
    let (broker_before, broker_after) = t.broker;
    if let Some(a) = broker_after {
        peak_rss = peak_rss.max(a.rss_kib).max(a.hwm_kib);
    }
    Report {
        scenario: args.scenario.as_str().to_string(),
        params: args.describe(),
        published: t.published,
        confirmed: t.confirmed,
        nacked: t.nacked,
        consumed: t.consumed,
        rejected: t.rejected,
        expiry_drain_s: timings.expiry_drain_s,
        dlq_drain_rate: timings.dlq_drain_rate,
        publish_s: timings.publish_s,
        duration: t.elapsed,
        publish_rate: t.published as f64 / secs,
        consume_rate: t.consumed as f64 / secs,
        reject_rate: t.rejected as f64 / secs,
        latency_us: LatencyUs::from_histogram(hist),
        broker_cpu_us_per_msg: broker_cpu.map(|c| c / msgs),
        broker_cpu_cores: broker_cpu.map(|c| c / 1e6 / secs),
        broker_peak_rss_kib: broker_after.map(|_| peak_rss),
        broker_rss_before_kib: broker_before.map(|s| s.rss_kib),
        broker_rss_after_kib: broker_after.map(|s| s.rss_kib),
        tool_cpu_us_per_msg: tool_cpu.map(|c| c / msgs),
        tool_cpu_cores: tool_cpu.map(|c| c / 1e6 / secs),
    }
}
