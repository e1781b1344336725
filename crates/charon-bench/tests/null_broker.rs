//! End-to-end runs of the load tool against the in-process null broker.

use std::sync::Arc;

use amq_protocol::types::{AMQPValue, FieldTable};
use charon_bench::null_broker::{Event, Observed};
use charon_bench::{BenchArgs, BenchError, Scenario, run};
use clap::Parser;
use tokio::net::TcpListener;

async fn start() -> Result<String, BenchError> {
    Ok(start_observed().await?.0)
}

async fn start_observed() -> Result<(String, Arc<Observed>), BenchError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let obs = Arc::new(Observed::default());
    tokio::spawn(charon_bench::null_broker::serve_observed(
        listener,
        16,
        obs.clone(),
    ));
    Ok((format!("amqp://guest:guest@127.0.0.1:{port}/%2f"), obs))
}

fn text(t: &FieldTable, key: &str) -> Option<String> {
    t.inner()
        .get(key)
        .and_then(AMQPValue::as_long_string)
        .map(|s| s.to_string())
}

/// The dead-letter scenarios' setup: both queues deleted, the DLQ declared plain, the main
/// queue with a dead-letter exchange "" and routing key `<queue>-dlq`; returns the main
/// queue's arguments.
fn assert_dead_letter_setup(events: &[Event]) -> FieldTable {
    let q = "charon-bench-0";
    let dlq = "charon-bench-0-dlq";
    assert_eq!(events[0], Event::Delete(q.into()), "{events:?}");
    assert_eq!(events[1], Event::Delete(dlq.into()), "{events:?}");
    assert_eq!(
        events[2],
        Event::Declare {
            queue: dlq.into(),
            arguments: FieldTable::default()
        }
    );
    let Event::Declare { queue, arguments } = &events[3] else {
        panic!("expected the main queue's declare: {events:?}");
    };
    assert_eq!(queue, q);
    assert_eq!(
        text(arguments, "x-dead-letter-exchange").as_deref(),
        Some("")
    );
    assert_eq!(
        text(arguments, "x-dead-letter-routing-key").as_deref(),
        Some(dlq)
    );
    assert!(!events.iter().any(|e| matches!(e, Event::Purge(_))));
    arguments.clone()
}

/// The queues consumed from, sorted: the tool starts its consumers concurrently, so the order in
/// which the broker sees them is not part of what it promises.
fn consumed_queues(events: &[Event]) -> Vec<&str> {
    let mut qs: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::Consume(q) => Some(q.as_str()),
            _ => None,
        })
        .collect();
    qs.sort_unstable();
    qs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_and_consumes() -> Result<(), BenchError> {
    let uri = start().await?;
    let args = BenchArgs {
        uri,
        duration: 1,
        quiet: true,
        producers: 2,
        consumers: 2,
        queues: 2,
        ..BenchArgs::default()
    };
    let r = run(args).await?;
    // Counts, not rates: a busy machine may move few messages in the second.
    assert!(r.published > 0, "{r}");
    assert!(r.consumed > 0, "{r}");
    assert!(r.publish_rate > 0.0 && r.consume_rate > 0.0);
    assert!(r.to_json().contains("\"published\""));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirms_and_message_limit() -> Result<(), BenchError> {
    let uri = start().await?;
    let args = BenchArgs {
        uri,
        // The message limit ends the run; the duration is only a generous bound.
        duration: 600,
        pmessages: 1000,
        consumers: 0,
        confirm: 10,
        persistent: true,
        size: 300_000,
        quiet: true,
        ..BenchArgs::default()
    };
    let r = run(args).await?;
    assert_eq!(r.published, 1000, "{r}");
    assert_eq!(r.confirmed, 1000, "{r}");
    assert!(
        r.duration.as_secs() < 600,
        "stopped by the message limit: {r}"
    );
    Ok(())
}

// The null broker streams deliveries to every consumer and never dead-letters: these tests
// check what the tool sends (queue arguments, nack/reject frames) and that the reports are
// filled in, not any dead-lettering figure.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letter_nacks_in_batches_and_drains_dlqs() -> Result<(), BenchError> {
    let (uri, obs) = start_observed().await?;
    let args = BenchArgs {
        uri,
        duration: 1,
        quiet: true,
        scenario: Scenario::DeadLetter,
        multi_ack: 10,
        ..BenchArgs::default()
    };
    let r = run(args).await?;
    assert!(r.rejected > 0 && r.reject_rate > 0.0, "{r}");
    assert!(r.consumed > 0, "{r}");
    assert!(r.to_json().contains("\"reject_rate\""));
    let events = obs.events();
    let args = assert_dead_letter_setup(&events);
    assert!(!args.contains_key("x-message-ttl"));
    assert_eq!(
        consumed_queues(&events),
        ["charon-bench-0", "charon-bench-0-dlq"]
    );
    assert!(Observed::count(&obs.nacks_dropped) > 0);
    assert_eq!(Observed::count(&obs.rejects_dropped), 0);
    assert_eq!(Observed::count(&obs.requeues), 0);
    assert!(Observed::count(&obs.acks) > 0, "the DLQ consumer acks");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letter_rejects_one_by_one_with_multi_ack_1() -> Result<(), BenchError> {
    let (uri, obs) = start_observed().await?;
    let args = BenchArgs {
        uri,
        duration: 1,
        quiet: true,
        scenario: Scenario::DeadLetter,
        multi_ack: 1,
        ..BenchArgs::default()
    };
    let r = run(args).await?;
    assert!(r.rejected > 0, "{r}");
    assert!(Observed::count(&obs.rejects_dropped) > 0);
    assert_eq!(Observed::count(&obs.nacks_dropped), 0);
    assert_eq!(Observed::count(&obs.requeues), 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_declares_ttl_and_consumes_only_the_dlq() -> Result<(), BenchError> {
    let (uri, obs) = start_observed().await?;
    let args = BenchArgs {
        uri,
        quiet: true,
        scenario: Scenario::Expiry,
        pmessages: 2000,
        ttl_ms: 60_000,
        ..BenchArgs::default()
    };
    let r = run(args).await?;
    assert_eq!(r.published, 2000, "{r}");
    assert!(r.publish_s.is_some_and(|s| s > 0.0), "{r}");
    assert!(r.dlq_drain_rate.is_some(), "{r}");
    // The null broker "dead-letters" at once: the DLQ is complete before the TTL deadline.
    assert!(r.expiry_drain_s.is_some_and(|s| s < 0.0), "{r}");
    let events = obs.events();
    let args = assert_dead_letter_setup(&events);
    assert_eq!(
        args.inner()
            .get("x-message-ttl")
            .and_then(AMQPValue::as_long_long_int),
        Some(60_000)
    );
    assert_eq!(consumed_queues(&events), ["charon-bench-0-dlq"]);
    Ok(())
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

#[test]
fn parses_scenarios_and_ttl() {
    let cli = Cli::try_parse_from(["bench", "--scenario", "expiry", "--ttl-ms", "5000"]);
    let args = cli.map(|c| c.args).expect("valid arguments");
    assert_eq!(args.scenario, Scenario::Expiry);
    assert_eq!(args.ttl_ms, 5000);
    let args = Cli::try_parse_from(["bench", "--scenario", "dead-letter"])
        .map(|c| c.args)
        .expect("valid arguments");
    assert_eq!(args.scenario, Scenario::DeadLetter);
    assert!(Cli::try_parse_from(["bench", "--scenario", "nope"]).is_err());
}

#[tokio::test]
async fn expiry_needs_a_message_count() {
    let args = BenchArgs {
        scenario: Scenario::Expiry,
        ..BenchArgs::default()
    };
    assert!(matches!(run(args).await, Err(BenchError::Args(_))));
}
