//! charon-http: the HTTP side of the broker: the management API (RabbitMQ-compatible shapes for
//! the parts implemented), health, and later metrics and the UI. It is a client of
//! `charon-server`'s [`Broker`] interface, the same one the AMQP side uses.
//!
//! - [`auth`]: basic authentication against the broker's users.
//! - [`error`]: error JSON and status codes.
//! - [`policies`]: the `/api/policies` endpoints.
//! - [`queues`]: the `/api/queues` endpoints.

pub mod auth;
pub mod error;
pub mod policies;
pub mod queues;

use std::sync::Arc;

use axum::routing::get;
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

/// Sessions of the HTTPS listener, for axum (TLS handshakes done by
/// [`charon_server::tls::accept_loop`], concurrently).
struct TlsListener {
    sessions: tokio::sync::mpsc::Receiver<(
        charon_server::tls::TlsStream<tokio::net::TcpStream>,
        std::net::SocketAddr,
    )>,
    local: std::net::SocketAddr,
}

impl axum::serve::Listener for TlsListener {
    type Io = charon_server::tls::TlsStream<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.sessions.recv().await {
            Some(s) => s,
            // The accept loop ended (shutdown): wait for the graceful shutdown to end us.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// Serves the management API over TLS (`https_listen`) until `shutdown` is cancelled.
pub async fn run_tls(
    listener: TcpListener,
    acceptor: charon_server::tls::TlsAcceptor,
    broker: Arc<Broker>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let local = listener.local_addr()?;
    let sessions = charon_server::tls::accept_loop(listener, acceptor, shutdown.clone());
    axum::serve(TlsListener { sessions, local }, router(broker))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}
