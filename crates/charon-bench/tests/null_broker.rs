//! End-to-end runs of the load tool against the in-process null broker.

use charon_bench::{BenchArgs, BenchError, run};
use tokio::net::TcpListener;

async fn start() -> Result<String, BenchError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(charon_bench::null_broker::serve(listener, 16));
    Ok(format!("amqp://guest:guest@127.0.0.1:{port}/%2f"))
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
    assert!(r.published > 1000, "{r}");
    assert!(r.consumed > 1000, "{r}");
    assert!(r.publish_rate > 0.0 && r.consume_rate > 0.0);
    assert!(r.to_json().contains("\"published\""));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirms_and_message_limit() -> Result<(), BenchError> {
    let uri = start().await?;
    let args = BenchArgs {
        uri,
        duration: 5,
        pmessages: 5000,
        consumers: 0,
        confirm: 10,
        persistent: true,
        size: 300_000,
        quiet: true,
        ..BenchArgs::default()
    };
    let r = run(args).await?;
    assert_eq!(r.published, 5000, "{r}");
    assert_eq!(r.confirmed, 5000, "{r}");
    assert!(r.duration.as_secs() < 5, "{r}");
    Ok(())
}

#[tokio::test]
async fn rejects_unknown_scenario() {
    let args = BenchArgs {
        scenario: "nope".into(),
        ..BenchArgs::default()
    };
    assert!(matches!(run(args).await, Err(BenchError::Args(_))));
}
