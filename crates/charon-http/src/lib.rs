//! charon-http: the HTTP side of the broker: the management API with RabbitMQ's paths and JSON
//! shapes, Prometheus metrics, health checks. It is a client of `charon-server`'s [`Broker`]
//! interface (`admin`, `policies`, `access`), the same one the AMQP side uses.
//!
//! - [`auth`]: basic authentication and RabbitMQ's user tags.
//! - [`dead_letters`]: the dead-letter archive's `/api/dead-letters` endpoints.
//! - [`error`]: error JSON and status codes.
//! - [`listing`]: columns, sorting, pagination; body helpers.
//! - [`overview`]: overview, nodes, whoami, health checks, aliveness test.
//! - [`users`]: users, permissions, vhosts.
//! - [`exchanges`]: exchanges, publish, bindings.
//! - [`queues`]: queues, purge, get, peek, actions.
//! - [`connections`]: connections (close), channels, consumers.
//! - [`definitions`]: definitions export/import.
//! - [`policies`]: the `/api/policies` and `/api/operator-policies` endpoints.
//! - [`topic_permissions`]: the `/api/topic-permissions` endpoints.
//! - [`metrics`]: the Prometheus exposition.
//! - [`msgjson`]: messages and properties as JSON.
//! - [`dlq`]: removing and replaying messages by id (the UI's DLQ browser).
//! - [`ui`]: the web UI's embedded files, served at `/`.

pub mod auth;
pub mod connections;
pub mod dead_letters;
pub mod definitions;
pub mod dl_errors_json;
pub mod dlq;
pub mod error;
pub mod exchanges;
pub mod listing;
pub mod memory;
pub mod metrics;
pub mod msgjson;
pub mod overview;
pub mod params;
pub mod policies;
pub mod queues;
pub mod topic_permissions;
pub mod ui;
pub mod users;

use std::sync::Arc;

use axum::routing::{get, post};
use axum::{Json, Router};
use charon_server::broker::Broker;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use topic_permissions as tp;

async fn not_found() -> error::ApiError {
    error::ApiError::NotFound
}

/// The router over `broker`.
pub fn router(broker: Arc<Broker>) -> Router {
    use connections as c;
    use exchanges as x;
    use overview as o;
    use params as pm;
    use users as u;
    Router::new()
        .route(
            "/api/health",
            get(|| async { Json(serde_json::json!({"status": "ok"})) }),
        )
        .route("/metrics", get(metrics::metrics))
        .route("/api/overview", get(o::overview))
        .route("/api/cluster-name", get(o::cluster_name))
        .route("/api/extensions", get(o::extensions))
        .route("/api/nodes", get(o::nodes))
        .route("/api/nodes/{name}", get(o::node))
        .route("/api/nodes/{name}/memory", get(memory::node_memory))
        .route("/api/whoami", get(o::whoami))
        .route("/api/charon/environment", get(o::environment))
        .route("/api/health/checks/alarms", get(o::alarms))
        .route("/api/health/checks/local-alarms", get(o::alarms))
        .route(
            "/api/health/checks/port-listener/{port}",
            get(o::port_listener),
        )
        .route("/api/health/checks/virtual-hosts", get(o::ok_check))
        .route(
            "/api/health/checks/node-is-quorum-critical",
            get(o::ok_check),
        )
        .route(
            "/api/health/checks/node-is-mirror-sync-critical",
            get(o::ok_check),
        )
        .route("/api/aliveness-test/{vhost}", get(o::aliveness))
        .route("/api/users", get(u::list_users))
        .route(
            "/api/users/without-permissions",
            get(u::users_without_permissions),
        )
        .route("/api/users/bulk-delete", post(u::bulk_delete_users))
        .route(
            "/api/users/{name}",
            get(u::get_user).put(u::put_user).delete(u::delete_user),
        )
        .route("/api/users/{name}/permissions", get(u::user_permissions))
        .route("/api/permissions", get(u::list_permissions))
        .route(
            "/api/permissions/{vhost}/{user}",
            get(u::get_permission)
                .put(u::put_permission)
                .delete(u::delete_permission),
        )
        .route("/api/vhosts", get(u::list_vhosts))
        .route(
            "/api/vhosts/{vhost}",
            get(u::get_vhost).put(u::put_vhost).delete(u::delete_vhost),
        )
        .route("/api/vhosts/{vhost}/permissions", get(u::vhost_permissions))
        .route("/api/vhosts/{vhost}/connections", get(c::list_vhost))
        .route("/api/vhosts/{vhost}/channels", get(c::vhost_channels))
        .route("/api/connections", get(c::list))
        .route("/api/connections/{name}", get(c::get_one).delete(c::close))
        .route(
            "/api/connections/{name}/channels",
            get(c::connection_channels),
        )
        .route("/api/channels", get(c::channels))
        .route("/api/channels/{name}", get(c::channel))
        .route("/api/consumers", get(c::consumers))
        .route("/api/consumers/{vhost}", get(c::vhost_consumers))
        .route("/api/exchanges", get(x::list_all))
        .route("/api/exchanges/{vhost}", get(x::list_vhost))
        .route(
            "/api/exchanges/{vhost}/{name}",
            get(x::get_one).put(x::put).delete(x::delete),
        )
        .route("/api/exchanges/{vhost}/{name}/publish", post(x::publish))
        .route(
            "/api/exchanges/{vhost}/{name}/bindings/{side}",
            get(x::exchange_bindings),
        )
        .route("/api/bindings", get(x::list_all_bindings))
        .route("/api/bindings/{vhost}", get(x::list_vhost_bindings))
        .route(
            "/api/bindings/{vhost}/e/{source}/{dtype}/{dest}",
            get(x::list_between).post(x::create),
        )
        .route(
            "/api/bindings/{vhost}/e/{source}/{dtype}/{dest}/{props}",
            get(x::get_binding).delete(x::delete_binding),
        )
        .route("/api/queues", get(queues::list_all))
        .route("/api/queues/{vhost}", get(queues::list_vhost))
        .route(
            "/api/queues/{vhost}/{name}",
            get(queues::get_one).put(queues::put).delete(queues::delete),
        )
        .route(
            "/api/queues/{vhost}/{name}/contents",
            axum::routing::delete(queues::purge),
        )
        .route("/api/queues/{vhost}/{name}/get", post(queues::get_messages))
        .route("/api/queues/{vhost}/{name}/actions", post(queues::actions))
        .route(
            "/api/queues/{vhost}/{name}/bindings",
            get(x::queue_bindings),
        )
        .route("/api/queues/{vhost}/{name}/messages", get(queues::peek))
        .route(
            "/api/definitions",
            get(definitions::get_all).post(definitions::post_all),
        )
        .route(
            "/api/definitions/{vhost}",
            get(definitions::get_vhost).post(definitions::post_vhost),
        )
        .route("/api/policies", get(policies::list_all))
        .route("/api/policies/{vhost}", get(policies::list_vhost))
        .route(
            "/api/policies/{vhost}/{name}",
            get(policies::get_one)
                .put(policies::put)
                .delete(policies::delete),
        )
        .route(
            "/api/queues/{vhost}/{name}/messages/remove",
            post(dlq::remove),
        )
        .route(
            "/api/queues/{vhost}/{name}/messages/replay",
            post(dlq::replay),
        )
        .route("/", get(ui::index))
        .route("/ui/{file}", get(ui::asset))
        .merge(dead_letters::routes())
        .route("/api/operator-policies", get(policies::op_list_all))
        .route(
            "/api/operator-policies/{vhost}",
            get(policies::op_list_vhost),
        )
        .route(
            "/api/operator-policies/{vhost}/{name}",
            get(policies::op_get_one)
                .put(policies::op_put)
                .delete(policies::op_delete),
        )
        .route("/api/parameters", get(pm::list_parameters))
        .route("/api/parameters/{component}", get(pm::component_parameters))
        .route(
            "/api/parameters/{component}/{vhost}",
            get(pm::vhost_parameters),
        )
        .route(
            "/api/parameters/{component}/{vhost}/{name}",
            get(pm::get_parameter)
                .put(pm::put_parameter)
                .delete(pm::delete_parameter),
        )
        .route("/api/global-parameters", get(pm::list_global))
        .route(
            "/api/global-parameters/{name}",
            get(pm::get_global)
                .put(pm::put_global)
                .delete(pm::delete_global),
        )
        .route("/api/vhost-limits", get(pm::list_vhost_limits))
        .route("/api/vhost-limits/{vhost}", get(pm::vhost_limits_of))
        .route(
            "/api/vhost-limits/{vhost}/{name}",
            axum::routing::put(pm::put_vhost_limit).delete(pm::delete_vhost_limit),
        )
        .route("/api/user-limits", get(pm::list_user_limits))
        .route("/api/user-limits/{user}", get(pm::user_limits_of))
        .route(
            "/api/user-limits/{user}/{name}",
            axum::routing::put(pm::put_user_limit).delete(pm::delete_user_limit),
        )
        .route("/api/topic-permissions", get(tp::list_all))
        .route(
            "/api/topic-permissions/{vhost}/{user}",
            get(tp::get_pair).put(tp::put_pair).delete(tp::delete_pair),
        )
        .route("/api/users/{name}/topic-permissions", get(tp::of_user))
        .route("/api/vhosts/{vhost}/topic-permissions", get(tp::of_vhost))
        .route("/api/feature-flags", get(o::extensions))
        .route("/api/{*rest}", axum::routing::any(not_found))
        .with_state(broker)
}

/// The router behind a path normaliser: RabbitMQ answers collection paths with a trailing slash
/// (`GET /api/connections/`, which amqp091-go's tests use) as without it.
fn app(
    broker: Arc<Broker>,
) -> axum::routing::IntoMakeService<tower_http::normalize_path::NormalizePath<Router>> {
    let svc = tower_http::normalize_path::NormalizePath::trim_trailing_slash(router(broker));
    axum::ServiceExt::<axum::extract::Request>::into_make_service(svc)
}

/// Serves HTTP on `listener` until `shutdown` is cancelled.
pub async fn run(
    listener: TcpListener,
    broker: Arc<Broker>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, app(broker))
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
    axum::serve(TlsListener { sessions, local }, app(broker))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}
