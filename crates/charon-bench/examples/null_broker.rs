//! A "null" AMQP broker (see `charon_bench::null_broker`) to measure the load
//! tool's own ceiling: `null_broker [addr]` (default 127.0.0.1:5699), body
//! size of the generated deliveries from `NULL_BROKER_SIZE` (default 16).

use charon_bench::BenchError;
use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> Result<(), BenchError> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:5699".into());
    let size: usize = std::env::var("NULL_BROKER_SIZE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16);
    let listener = TcpListener::bind(&addr).await?;
    eprintln!("null broker on {addr} (delivery body {size} B)");
    charon_bench::null_broker::serve(listener, size).await
}
