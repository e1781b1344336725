//! The accept loop: one task per connection, bounded by a semaphore, stopped by a token.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::connection;

/// Most concurrent connections.
pub const MAX_CONNECTIONS: usize = 10_000;

/// Serves AMQP on `listener` until `shutdown` is cancelled, then closes every connection with
/// 320 CONNECTION_FORCED and waits (up to 5 s) for them to finish.
pub async fn run(listener: TcpListener, broker: Arc<Broker>, shutdown: CancellationToken) {
    let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => {
                let Ok((stream, peer)) = accepted else { continue };
                let Ok(permit) = limit.clone().acquire_owned().await else { break };
                let broker = broker.clone();
                let token = shutdown.clone();
                tasks.spawn(async move {
                    connection::serve(stream, peer, broker, token).await;
                    drop(permit);
                });
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    drain(tasks, &broker, &shutdown).await;
}

/// Serves AMQP over TLS (`amqps_listen`) until `shutdown` is cancelled, like [`run`]. A client
/// certificate verified against `ca_file` offers the `EXTERNAL` mechanism with its CN or DN
/// (`ssl_cert_login_from`).
pub async fn run_tls(
    listener: TcpListener,
    acceptor: crate::tls::TlsAcceptor,
    broker: Arc<Broker>,
    shutdown: CancellationToken,
) {
    let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut sessions = crate::tls::accept_loop(listener, acceptor, shutdown.clone());
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = sessions.recv() => {
                let Some((stream, peer)) = accepted else { break };
                let Ok(permit) = limit.clone().acquire_owned().await else { break };
                let external = crate::tls::peer_login(stream.get_ref().1, broker.config().ssl_cert_login_from);
                let broker = broker.clone();
                let token = shutdown.clone();
                tasks.spawn(async move {
                    connection::serve_on(stream, peer, broker, token, external).await;
                    drop(permit);
                });
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    drain(tasks, &broker, &shutdown).await;
}

/// After an accept loop: on shutdown every open connection is told (`Control::Shutdown`: it
/// closes with 320 CONNECTION_FORCED), then the connection tasks get up to 5 s to finish. A
/// connection still in its handshake sees the cancelled token once it registers.
async fn drain(mut tasks: JoinSet<()>, broker: &Broker, shutdown: &CancellationToken) {
    if shutdown.is_cancelled() {
        broker
            .admin()
            .connections
            .signal_all(|| crate::handles::Control::Shutdown);
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
}
