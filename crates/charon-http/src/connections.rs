//! `/api/connections` (list, get, `DELETE` to close with the `X-Reason` header's reason, as
//! RabbitMQ), `/api/connections/{name}/channels`, `/api/channels`, `/api/vhosts/{vhost}/...`,
//! and `/api/consumers`. Management users see their own connections; monitoring and
//! administrator users see all.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use charon_server::admin::now_ms;
use charon_server::admin::{ChannelStats, ConnEntry};
use charon_server::broker::Broker;
use serde_json::{Value, json};

use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::listing::{Query, details, respond, respond_one};
use crate::overview::message_stats;

fn sees(user: &AuthUser, c: &ConnEntry) -> bool {
    user.is_monitor() || c.user == user.name
}

fn conn_json(broker: &Broker, c: &ConnEntry) -> Value {
    let chans = c.channels(&broker.admin().connections.retired).len();
    let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let (recv, send) = (l(&c.recv_oct), l(&c.send_oct));
    let rates =
        broker
            .admin()
            .rates
            .rates(&format!("connection:{}", c.id), &[recv, send], now_ms());
    json!({
        "name": c.name,
        "node": charon_server::admin::node_name(),
        "type": "network",
        "protocol": "AMQP 0-9-1",
        "user": c.user,
        "user_who_performed_action": c.user,
        "vhost": c.vhost,
        "host": c.local.ip().to_string(),
        "port": c.local.port(),
        "peer_host": c.peer.ip().to_string(),
        "peer_port": c.peer.port(),
        "ssl": c.ssl,
        "auth_mechanism": c.auth_mechanism,
        "state": connection_state(c),
        "channels": chans,
        "channel_max": c.channel_max,
        "frame_max": c.frame_max,
        "timeout": c.heartbeat,
        "connected_at": c.connected_at,
        "client_properties": c.client_properties,
        "recv_oct": recv, "recv_oct_details": details(rates[0]),
        "send_oct": send, "send_oct_details": details(rates[1]),
        "recv_cnt": l(&c.recv_cnt), "send_cnt": l(&c.send_cnt),
    })
}

fn channel_json(broker: &Broker, c: &ConnEntry, n: u16, s: &ChannelStats) -> Value {
    let counters = s.counters();
    let key = format!("channel:{}:{n}", c.id);
    let values = [
        counters.publish,
        counters.deliver,
        counters.deliver_no_ack,
        counters.get,
        counters.ack,
        counters.redeliver,
        counters.confirm,
        counters.return_unroutable,
    ];
    let rates = broker.admin().rates.rates(&key, &values, now_ms());
    json!({
        "name": format!("{} ({n})", c.name),
        "number": n,
        "node": charon_server::admin::node_name(),
        "user": c.user,
        "user_who_performed_action": c.user,
        "vhost": c.vhost,
        "connection_details": {"name": c.name, "peer_host": c.peer.ip().to_string(), "peer_port": c.peer.port()},
        "state": "running",
        "confirm": s.confirm_mode.load(Ordering::Relaxed),
        "transactional": s.transactional.load(Ordering::Relaxed),
        "prefetch_count": s.prefetch.load(Ordering::Relaxed),
        "global_prefetch_count": 0,
        "consumer_count": s.consumer_list().len(),
        "messages_unacknowledged": s.unacked.load(Ordering::Relaxed),
        "messages_unconfirmed": 0,
        "messages_uncommitted": 0,
        "acks_uncommitted": 0,
        "message_stats": message_stats(&counters, &rates),
    })
}

/// `GET /api/connections`.
pub async fn list(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    let v = broker
        .admin()
        .connections
        .list()
        .iter()
        .filter(|c| sees(&user, c))
        .map(|c| conn_json(&broker, c))
        .collect();
    respond(v, &q)
}

/// `GET /api/vhosts/{vhost}/connections`.
pub async fn list_vhost(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(vhost): Path<String>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    let v = broker
        .admin()
        .connections
        .list()
        .iter()
        .filter(|c| c.vhost == vhost && sees(&user, c))
        .map(|c| conn_json(&broker, c))
        .collect();
    respond(v, &q)
}

fn find(broker: &Broker, user: &AuthUser, name: &str) -> Result<Arc<ConnEntry>, ApiError> {
    broker
        .admin()
        .connections
        .by_name(name)
        .filter(|c| sees(user, c))
        .ok_or(ApiError::NotFound)
}

/// `GET /api/connections/{name}`.
pub async fn get_one(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(name): Path<String>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    let c = find(&broker, &user, &name)?;
    Ok(respond_one(conn_json(&broker, &c), &q))
}

/// `DELETE /api/connections/{name}`: closes it with 320 CONNECTION_FORCED and the `X-Reason`
/// header's text ("Closed via management plugin" by default).
pub async fn close(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let c = find(&broker, &user, &name)?;
    let reason = headers
        .get("x-reason")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("Closed via management plugin")
        .to_string();
    tracing::info!(connection = %c.name, user = %user.name, %reason, "closing connection on request of the management API");
    c.request_close(reason);
    Ok(StatusCode::NO_CONTENT)
}

fn channels_of(
    broker: &Broker,
    user: &AuthUser,
    filter: impl Fn(&ConnEntry) -> bool,
) -> Vec<Value> {
    let retired = &broker.admin().connections.retired;
    let mut out = Vec::new();
    for c in broker.admin().connections.list() {
        if !sees(user, &c) || !filter(&c) {
            continue;
        }
        for (n, s) in c.channels(retired) {
            out.push(channel_json(broker, &c, n, &s));
        }
    }
    out
}

/// `GET /api/channels`.
pub async fn channels(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    respond(channels_of(&broker, &user, |_| true), &q)
}

/// `GET /api/vhosts/{vhost}/channels`.
pub async fn vhost_channels(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(vhost): Path<String>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    respond(channels_of(&broker, &user, |c| c.vhost == vhost), &q)
}

/// `GET /api/connections/{name}/channels`.
pub async fn connection_channels(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(name): Path<String>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    find(&broker, &user, &name)?;
    respond(channels_of(&broker, &user, |c| c.name == name), &q)
}

/// `GET /api/channels/{name}` (`"peer -> local (n)"`).
pub async fn channel(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(name): Path<String>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    channels_of(&broker, &user, |_| true)
        .into_iter()
        .find(|c| c.get("name").and_then(Value::as_str) == Some(name.as_str()))
        .map(|c| respond_one(c, &q))
        .ok_or(ApiError::NotFound)
}

/// Consumers as `/api/consumers` lists them (of one vhost, or all the user sees).
pub fn consumers_of(broker: &Broker, user: &AuthUser, vhost: Option<&str>) -> Vec<Value> {
    let retired = &broker.admin().connections.retired;
    let mut out = Vec::new();
    for c in broker.admin().connections.list() {
        if vhost.is_some_and(|v| v != c.vhost) || !user.sees_vhost(broker, &c.vhost) {
            continue;
        }
        for (n, s) in c.channels(retired) {
            for k in s.consumer_list() {
                out.push(json!({
                    "consumer_tag": k.tag,
                    "queue": {"name": k.queue, "vhost": c.vhost},
                    "channel_details": {
                        "name": format!("{} ({n})", c.name), "number": n, "user": c.user,
                        "connection_name": c.name, "peer_host": c.peer.ip().to_string(),
                        "peer_port": c.peer.port(), "node": charon_server::admin::node_name(),
                    },
                    "ack_required": k.ack_required,
                    "exclusive": k.exclusive,
                    "prefetch_count": k.prefetch,
                    "active": true,
                    "activity_status": "up",
                    "arguments": {},
                }));
            }
        }
    }
    out
}

/// `GET /api/consumers`.
pub async fn consumers(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    respond(consumers_of(&broker, &user, None), &q)
}

/// `GET /api/consumers/{vhost}`.
pub async fn vhost_consumers(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(vhost): Path<String>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    respond(consumers_of(&broker, &user, Some(&vhost)), &q)
}

/// RabbitMQ's connection states: `blocked` (a resource alarm), `flow` (a queue it publishes to
/// throttles it: page-out backpressure), else `running`.
fn connection_state(c: &ConnEntry) -> &'static str {
    if c.blocked.load(Ordering::Relaxed) {
        "blocked"
    } else if c.flow.load(Ordering::Relaxed) {
        "flow"
    } else {
        "running"
    }
}
