//! `/api/overview`, `/api/nodes`, `/api/whoami`, the health checks and the aliveness test:
//! the node as RabbitMQ's management plugin shows it (message rates, queue and object totals,
//! listeners, memory, file descriptors, disk and the resource alarms).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use charon_server::admin::Counters;
use charon_server::admin::definitions::RABBIT_VERSION;
use charon_server::admin::node::AlarmKind;
use charon_server::admin::now_ms;
use charon_server::broker::Broker;
use serde_json::{Value, json};

use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::listing::{Query, details, respond, respond_one};

/// RabbitMQ's `message_stats` object from counts and their rates.
pub fn message_stats(c: &Counters, rates: &[f64]) -> Value {
    let r = |i: usize| rates.get(i).copied().unwrap_or(0.0);
    let deliver_get = c.deliver + c.deliver_no_ack + c.get;
    json!({
        "publish": c.publish, "publish_details": details(r(0)),
        "deliver": c.deliver, "deliver_details": details(r(1)),
        "deliver_no_ack": c.deliver_no_ack, "deliver_no_ack_details": details(r(2)),
        "get": c.get, "get_details": details(r(3)),
        "get_no_ack": 0, "get_no_ack_details": details(0.0),
        "deliver_get": deliver_get, "deliver_get_details": details(r(1) + r(2) + r(3)),
        "ack": c.ack, "ack_details": details(r(4)),
        "redeliver": c.redeliver, "redeliver_details": details(r(5)),
        "confirm": c.confirm, "confirm_details": details(r(6)),
        "return_unroutable": c.return_unroutable, "return_unroutable_details": details(r(7)),
    })
}

/// The broker-wide counts and rates.
pub fn broker_stats(broker: &Broker) -> Value {
    let c = broker.admin().connections.totals();
    let values = [
        c.publish,
        c.deliver,
        c.deliver_no_ack,
        c.get,
        c.ack,
        c.redeliver,
        c.confirm,
        c.return_unroutable,
    ];
    let rates = broker.admin().rates.rates("overview", &values, now_ms());
    message_stats(&c, &rates)
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}

/// The node's listeners as (protocol, address, port).
pub fn listeners(broker: &Broker) -> Vec<(&'static str, String, u16)> {
    let c = broker.config();
    let mut v = vec![
        ("amqp", c.amqp_listen.clone(), port_of(&c.amqp_listen)),
        ("http", c.http_listen.clone(), port_of(&c.http_listen)),
    ];
    if let Some(p) = crate::metrics::prometheus_listen(broker) {
        v.push(("http/prometheus", p.clone(), port_of(&p)));
    }
    v
}

/// `GET /api/overview`.
pub async fn overview(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    let node = charon_server::admin::node_name();
    let queues = broker.list_queues(None).await;
    let visible: Vec<_> = queues
        .iter()
        .filter(|x| user.sees_vhost(&broker, &x.vhost))
        .collect();
    let ready: u64 = visible.iter().map(|x| u64::from(x.stats.messages)).sum();
    let unacked: u64 = visible.iter().map(|x| u64::from(x.stats.unacked)).sum();
    let conns = broker.admin().connections.list();
    let retired = &broker.admin().connections.retired;
    let channels: usize = conns.iter().map(|c| c.channels(retired).len()).sum();
    let consumers: u64 = visible.iter().map(|x| u64::from(x.stats.consumers)).sum();
    let exchanges = broker
        .list_exchanges(None)
        .iter()
        .filter(|x| user.sees_vhost(&broker, &x.vhost))
        .count();
    let listeners: Vec<Value> = listeners(&broker)
        .into_iter()
        .map(|(proto, addr, port)| {
            let ip = addr.rsplit_once(':').map_or("::", |(h, _)| h).to_string();
            json!({"node": node, "protocol": proto, "ip_address": ip, "port": port,
                   "socket_opts": {}})
        })
        .collect();
    let v = json!({
        "management_version": RABBIT_VERSION,
        "rates_mode": "basic",
        "sample_retention_policies": {"global": [600, 3600, 28800, 86400], "basic": [600, 3600], "detailed": [600]},
        "exchange_types": [
            {"name": "direct", "description": "AMQP direct exchange, as per the AMQP specification", "enabled": true},
            {"name": "fanout", "description": "AMQP fanout exchange, as per the AMQP specification", "enabled": true},
            {"name": "headers", "description": "AMQP headers exchange, as per the AMQP specification", "enabled": true},
            {"name": "topic", "description": "AMQP topic exchange, as per the AMQP specification", "enabled": true},
        ],
        "product_version": env!("CARGO_PKG_VERSION"),
        "product_name": "Charon",
        "rabbitmq_version": RABBIT_VERSION,
        "cluster_name": node,
        "erlang_version": "none (Charon is written in Rust)",
        "erlang_full_version": "none",
        "disable_stats": false,
        "enable_queue_totals": true,
        "message_stats": broker_stats(&broker),
        "churn_rates": {
            "connection_created": broker.admin().connections.opened_total.load(std::sync::atomic::Ordering::Relaxed),
            "connection_closed": broker.admin().connections.closed_total.load(std::sync::atomic::Ordering::Relaxed),
        },
        "queue_totals": {
            "messages": ready + unacked, "messages_details": details(0.0),
            "messages_ready": ready, "messages_ready_details": details(0.0),
            "messages_unacknowledged": unacked, "messages_unacknowledged_details": details(0.0),
        },
        "object_totals": {
            "channels": channels, "connections": conns.len(), "consumers": consumers,
            "exchanges": exchanges, "queues": visible.len(),
        },
        "statistics_db_event_queue": 0,
        "node": node,
        "listeners": listeners,
        "contexts": [{"node": node, "description": "Charon Management", "path": "/",
                      "port": port_of(&broker.config().http_listen).to_string()}],
    });
    Ok(respond_one(v, &q))
}

/// One node's JSON.
fn node_json(broker: &Broker, with_memory: bool) -> Value {
    let f = broker.node_facts();
    let alarms = broker.alarms();
    let c = &broker.admin().connections;
    let auth_mechanisms: Vec<Value> = ["PLAIN", "AMQPLAIN", "EXTERNAL"]
        .iter()
        .map(|m| {
            let enabled = broker.config().auth_mechanisms.iter().any(|a| a == m);
            json!({"name": m, "enabled": enabled})
        })
        .collect();
    let mut v = json!({
        "name": charon_server::admin::node_name(),
        "type": "disc",
        "running": true,
        "os_pid": f.os_pid.to_string(),
        "mem_used": f.mem_used, "mem_used_details": details(0.0),
        "mem_limit": f.mem_limit,
        "mem_alarm": alarms.contains(&AlarmKind::Memory),
        "disk_free": f.disk_free.unwrap_or(0), "disk_free_details": details(0.0),
        "disk_free_limit": f.disk_free_limit,
        "disk_free_alarm": alarms.contains(&AlarmKind::Disk),
        "fd_used": f.fd_used, "fd_used_details": details(0.0),
        "fd_total": f.fd_total,
        "sockets_used": c.list().len(), "sockets_total": f.fd_total,
        "proc_used": 0, "proc_total": 0,
        "uptime": f.uptime_ms,
        "processors": f.processors,
        "run_queue": 0,
        "rates_mode": "basic",
        "net_ticktime": 60,
        "partitions": [],
        "applications": [{"name": "charon", "description": "Charon", "version": env!("CARGO_PKG_VERSION")}],
        "enabled_plugins": ["rabbitmq_management", "rabbitmq_prometheus"],
        "exchange_types": [],
        "auth_mechanisms": auth_mechanisms,
        "connection_created": c.opened_total.load(std::sync::atomic::Ordering::Relaxed),
        "connection_closed": c.closed_total.load(std::sync::atomic::Ordering::Relaxed),
        "alarms": alarms.iter().map(|a| a.resource()).collect::<Vec<_>>(),
        "db_dir": broker.config().data_dir,
    });
    if let (Some(o), Value::Object(m)) = (v.as_object_mut(), crate::memory::node_fields(&f)) {
        o.extend(m);
        if with_memory {
            o.insert("memory".into(), crate::memory::breakdown(&f));
        }
    }
    v
}

/// `GET /api/nodes`.
pub async fn nodes(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.require_monitor()?;
    respond(vec![node_json(&broker, false)], &q)
}

/// `GET /api/nodes/{name}`.
pub async fn node(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(name): Path<String>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.require_monitor()?;
    if name != charon_server::admin::node_name() {
        return Err(ApiError::NotFound);
    }
    let with_memory = q.get("memory").is_some_and(|m| m == "true");
    Ok(respond_one(node_json(&broker, with_memory), &q))
}

/// `GET /api/whoami`.
pub async fn whoami(user: AuthUser) -> Json<Value> {
    Json(json!({"name": user.name, "tags": user.tags}))
}

/// `GET /api/cluster-name`.
pub async fn cluster_name(_user: AuthUser) -> Json<Value> {
    Json(json!({"name": charon_server::admin::node_name()}))
}

/// `GET /api/extensions`: no UI extensions.
pub async fn extensions(_user: AuthUser) -> Json<Value> {
    Json(json!([]))
}

/// `GET /api/health/checks/alarms` and `.../local-alarms`: 503 while an alarm is in force.
pub async fn alarms(
    _user: AuthUser,
    State(broker): State<Arc<Broker>>,
) -> Result<Json<Value>, ApiError> {
    let alarms = broker.alarms();
    if alarms.is_empty() {
        return Ok(Json(json!({"status": "ok"})));
    }
    let node = charon_server::admin::node_name();
    Err(ApiError::Unavailable(json!({
        "status": "failed",
        "reason": "resource alarm(s) in effect in the cluster",
        "alarms": alarms.iter().map(|a| json!({"node": node, "resource": a.resource()})).collect::<Vec<_>>(),
    })))
}

/// `GET /api/health/checks/port-listener/{port}`.
pub async fn port_listener(
    _user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(port): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let port: u16 = port
        .parse()
        .map_err(|_| ApiError::BadRequest(format!("invalid port {port}")))?;
    let ports: Vec<u16> = listeners(&broker).iter().map(|l| l.2).collect();
    if ports.contains(&port) {
        Ok(Json(json!({"status": "ok", "port": port})))
    } else {
        Err(ApiError::Unavailable(json!({
            "status": "failed", "reason": "No active listener", "missing": port, "ports": ports,
        })))
    }
}

/// `GET /api/health/checks/virtual-hosts`, `node-is-quorum-critical` etc.: always fine on a
/// single node.
pub async fn ok_check(_user: AuthUser) -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /api/aliveness-test/{vhost}`: declares `aliveness-test`, publishes to it and gets the
/// message back, as RabbitMQ does.
pub async fn aliveness(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    let name = "aliveness-test";
    broker
        .declare_queue(
            &user.name,
            &vhost,
            charon_core::QueueDeclare {
                name: name.into(),
                durable: false,
                ..Default::default()
            },
        )
        .await?;
    broker
        .publish_message(
            &user.name,
            &vhost,
            "",
            name,
            charon_protocol::BasicProperties::default(),
            bytes::Bytes::from_static(b"test_message"),
        )
        .await?;
    let got = broker
        .get_messages(
            &user.name,
            &vhost,
            name,
            1,
            charon_server::admin::messages::AckMode::AckRequeueFalse,
        )
        .await?;
    if got
        .first()
        .is_some_and(|g| g.message.body.wire_bytes() == b"test_message")
    {
        Ok(Json(json!({"status": "ok"})))
    } else {
        Err(ApiError::Unavailable(
            json!({"status": "failed", "reason": "the test message did not come back"}),
        ))
    }
}

/// `GET /api/charon/environment` (Charon's, for `ctl environment`): the effective
/// configuration, without passwords. Administrator only.
pub async fn environment(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
) -> Result<Json<Value>, ApiError> {
    user.require_admin()?;
    let c = broker.config();
    Ok(Json(json!({
        "amqp_listen": c.amqp_listen,
        "http_listen": c.http_listen,
        "prometheus_listen": c.prometheus_listen,
        "data_dir": c.data_dir,
        "log_level": c.log_level,
        "heartbeat": c.heartbeat,
        "frame_max": c.frame_max,
        "channel_max": c.channel_max,
        "disk_free_limit": c.disk_free_limit,
        "message_memory_budget": c.message_memory_budget,
    })))
}
