//! charon-http: the HTTP side of the broker. For now the health endpoint; the management API,
//! metrics and UI come with their issues.

use axum::{Json, Router, routing::get};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The router: `GET /api/health` → `{"status":"ok"}`.
pub fn router() -> Router {
    Router::new().route(
        "/api/health",
        get(|| async { Json(serde_json::json!({"status": "ok"})) }),
    )
}

/// Serves HTTP on `listener` until `shutdown` is cancelled.
pub async fn run(listener: TcpListener, shutdown: CancellationToken) -> std::io::Result<()> {
    axum::serve(listener, router())
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}
