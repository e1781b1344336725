//! charon-http: the HTTP side of the broker: the management API (RabbitMQ-compatible shapes for
//! the parts implemented), health, and later metrics and the UI. It is a client of
//! `charon-server`'s [`Broker`] interface, the same one the AMQP side uses.
//!
//! - [`auth`]: basic authentication against the broker's users.
//! - [`error`]: error JSON and status codes.
//! - [`policies`]: the `/api/policies` endpoints.
//! - [`queues`]: the `/api/queues` endpoints.
//! - [`dlq`]: removing messages by id (replaying dead letters from the UI).
//! - [`ui`]: the web UI's embedded files, served at `/`.

pub mod auth;
pub mod dlq;
pub mod error;
pub mod policies;
pub mod queues;
pub mod ui;

use std::sync::Arc;

use axum::routing::{get, post};
use axum::{Json, Router};
use charon_server::broker::Broker;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The router over `broker`.
pub fn router(broker: Arc<Broker>) -> Router {
    Router::new()
        .route(
            "/api/health",
            get(|| async { Json(serde_json::json!({"status": "ok"})) }),
        )
        .route("/api/policies", get(policies::list_all))
        .route("/api/policies/{vhost}", get(policies::list_vhost))
        .route(
            "/api/policies/{vhost}/{name}",
            get(policies::get_one)
                .put(policies::put)
                .delete(policies::delete),
        )
        .route("/api/queues", get(queues::list_all))
        .route("/api/queues/{vhost}", get(queues::list_vhost))
        .route("/api/queues/{vhost}/{name}", get(queues::get_one))
        .route(
            "/api/queues/{vhost}/{name}/messages/remove",
            post(dlq::remove),
        )
        .route("/", get(ui::index))
        .route("/ui/{file}", get(ui::asset))
        .with_state(broker)
}

/// Serves HTTP on `listener` until `shutdown` is cancelled.
pub async fn run(
    listener: TcpListener,
    broker: Arc<Broker>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router(broker))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}
