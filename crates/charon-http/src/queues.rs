//! `/api/queues`: queues with RabbitMQ's fields (`arguments`, `policy`,
//! `effective_policy_definition`, `state`, `type`, `node`, `messages*`, `consumers`,
//! `consumer_utilisation`, `head_message_timestamp`, `memory`, `message_stats` with rates) plus
//! Charon's dead-letter counters (`dead_lettered` per reason, `dead_letters_dropped` per cause);
//! declare (PUT), delete, purge (`DELETE .../contents`), get (`POST .../get`), actions, the
//! queue's bindings, and peek (`GET .../messages?offset=&count=`, Charon's: messages in queue
//! order without consuming them).
//! Retries (`docs/retries.md`): `messages_parked`, `messages_held` (behind a retrying message
//! of the same key) and `next_due` (ms since the epoch, or null).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use charon_core::QueueDeclare;
use charon_server::admin::REASONS;
use charon_server::admin::json::{json_to_table_opt, table_to_json};
use charon_server::admin::messages::AckMode;
use charon_server::admin::now_ms;
use charon_server::broker::Broker;
use charon_server::policies::definition_to_json;
use charon_server::queues_info::QueueInfo;
use serde_json::{Value, json};

use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::listing::{Query, body_object, details, flag, respond, respond_one, string};
use crate::msgjson::message_json;

/// A queue as RabbitMQ's API shows it.
pub fn queue_json(broker: &Broker, q: &QueueInfo) -> Value {
    let s = &q.stats;
    let c = &q.details.counters;
    let values = [c.published, c.delivered, c.get, c.acked];
    let rates = broker
        .admin()
        .rates
        .rates(&format!("queue:{}", q.id), &values, now_ms());
    let dead_lettered: serde_json::Map<String, Value> = REASONS
        .iter()
        .enumerate()
        .map(|(i, r)| (r.as_str().to_string(), Value::from(c.dead_lettered[i])))
        .collect();
    let discarded: serde_json::Map<String, Value> = REASONS
        .iter()
        .enumerate()
        .map(|(i, r)| (r.as_str().to_string(), Value::from(c.discarded[i])))
        .collect();
    let messages = u64::from(s.messages) + u64::from(s.unacked);
    json!({
        "name": q.name,
        "vhost": q.vhost,
        "durable": q.durable,
        "auto_delete": q.auto_delete,
        "exclusive": q.exclusive,
        "arguments": table_to_json(&q.arguments),
        "policy": q.policy,
        "operator_policy": q.operator_policy,
        "effective_policy_definition": definition_to_json(&q.effective_policy_definition),
        "state": "running",
        "type": q.queue_type,
        "node": charon_server::admin::node_name(),
        "messages": messages,
        "messages_details": details(0.0),
        "messages_ready": s.messages,
        "messages_ready_details": details(0.0),
        "messages_unacknowledged": s.unacked,
        "messages_unacknowledged_details": details(0.0),
        "message_bytes": q.details.ready_bytes,
        "message_bytes_ready": q.details.ready_bytes,
        "consumers": s.consumers,
        "consumer_utilisation": if s.consumers > 0 { json!(1.0) } else { Value::Null },
        "consumer_capacity": if s.consumers > 0 { 1.0 } else { 0.0 },
        "exclusive_consumer_tag": null,
        "head_message_timestamp": q.details.head_timestamp,
        "memory": q.details.ready_bytes,
        "message_stats": {
            "publish": c.published, "publish_details": details(rates[0]),
            "deliver": c.delivered, "deliver_details": details(rates[1]),
            "get": c.get, "get_details": details(rates[2]),
            "deliver_get": c.delivered + c.get, "deliver_get_details": details(rates[1] + rates[2]),
            "ack": c.acked, "ack_details": details(rates[3]),
        },
        "dead_letter_exchange": q.dead_letter_exchange,
        "dead_lettered": dead_lettered,
        "dead_lettered_errors": crate::dl_errors_json::errors_json(&q.details.errors),
        "discarded": discarded,
        "dead_letters_dropped": {
            "dlx_missing": s.dead_letters_dropped_no_dlx,
            "no_route": q.details.dropped_no_route,
        },
        "dead_letters_in": c.dead_letters_in,
        "archived_direct": c.archived_direct,
        "dead_letters_dropped_no_dlx": s.dead_letters_dropped_no_dlx,
        "messages_parked": s.parked,
        "messages_held": s.held,
        "next_due": s.next_due_ms,
        "release_lateness_ms": s.release_lateness.map(|l| l.to_json()),
    })
}

async fn visible_queues(broker: &Broker, user: &AuthUser, vhost: Option<&str>) -> Vec<Value> {
    broker
        .list_queues(vhost)
        .await
        .iter()
        .filter(|q| user.sees_vhost(broker, &q.vhost))
        .map(|q| queue_json(broker, q))
        .collect()
}

/// `GET /api/queues`.
pub async fn list_all(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    respond(visible_queues(&broker, &user, None).await, &q)
}

/// `GET /api/queues/{vhost}`.
pub async fn list_vhost(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(vhost): Path<String>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    respond(visible_queues(&broker, &user, Some(&vhost)).await, &q)
}

/// `GET /api/queues/{vhost}/{name}`.
pub async fn get_one(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    let queues = broker.list_queues(Some(&vhost)).await;
    let info = queues
        .iter()
        .find(|x| x.name == name)
        .ok_or(ApiError::NotFound)?;
    let mut v = queue_json(&broker, info);
    // The single-queue view adds its consumers, as RabbitMQ's does.
    let consumers: Vec<Value> = crate::connections::consumers_of(&broker, &user, Some(&vhost))
        .into_iter()
        .filter(|c| c.pointer("/queue/name").and_then(Value::as_str) == Some(name.as_str()))
        .collect();
    if let Some(o) = v.as_object_mut() {
        o.insert("consumer_details".into(), Value::Array(consumers));
        o.insert("deliveries".into(), json!([]));
        o.insert("incoming".into(), json!([]));
    }
    Ok(respond_one(v, &q))
}

/// `PUT /api/queues/{vhost}/{name}` `{"durable","auto_delete","arguments"}`: 201 created, 204
/// when it existed (equivalent).
pub async fn put(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    let o = body_object(&body)?;
    let arguments = json_to_table_opt(o.get("arguments")).map_err(ApiError::BadRequest)?;
    let created = broker
        .declare_queue(
            &user.name,
            &vhost,
            QueueDeclare {
                name,
                passive: false,
                durable: flag(&o, "durable", true)?,
                exclusive: false,
                auto_delete: flag(&o, "auto_delete", false)?,
                arguments,
            },
        )
        .await?;
    Ok(if created {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    })
}

/// `DELETE /api/queues/{vhost}/{name}` (`?if-unused=true`, `?if-empty=true`).
pub async fn delete(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
    q: Query,
) -> Result<StatusCode, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    let t = |k: &str| q.get(k).is_some_and(|v| v == "true");
    broker
        .delete_queue(&user.name, &vhost, &name, t("if-unused"), t("if-empty"))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /api/queues/{vhost}/{name}/contents`: purge.
pub async fn purge(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    broker.purge_queue(&user.name, &vhost, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/queues/{vhost}/{name}/get` `{"count","ackmode","encoding","truncate"}`.
pub async fn get_messages(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    let o = body_object(&body)?;
    let count = match o.get("count") {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    }
    .ok_or_else(|| ApiError::BadRequest("count is missing or not an integer".into()))?;
    let mode = string(&o, "ackmode")
        .and_then(AckMode::parse)
        .ok_or_else(|| ApiError::BadRequest("ackmode is missing or invalid".into()))?;
    let encoding = string(&o, "encoding").unwrap_or("auto");
    if encoding != "auto" && encoding != "base64" {
        return Err(ApiError::BadRequest(format!(
            "Unsupported encoding {encoding}"
        )));
    }
    let truncate = match o.get("truncate") {
        Some(Value::Number(n)) => n.as_u64().map(|n| n as usize),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    };
    let got = broker
        .get_messages(
            &user.name,
            &vhost,
            &name,
            usize::try_from(count).unwrap_or(usize::MAX),
            mode,
        )
        .await?;
    Ok(Json(Value::Array(
        got.iter()
            .map(|g| message_json(&g.message, g.redelivered, g.remaining, encoding, truncate))
            .collect(),
    )))
}

/// `GET /api/queues/{vhost}/{name}/messages?offset=0&count=50&encoding=auto&truncate=`:
/// peek, the queue unchanged. Each message carries its `id` in the queue.
pub async fn peek(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    let num = |k: &str, d: usize| -> Result<usize, ApiError> {
        q.get(k).map_or(Ok(d), |v| {
            v.parse()
                .map_err(|_| ApiError::BadRequest(format!("{k} must be a non-negative integer")))
        })
    };
    let offset = num("offset", 0)?;
    let count = num("count", 50)?.min(10_000);
    let encoding = q.get("encoding").map_or("auto", String::as_str);
    let truncate = q.get("truncate").and_then(|t| t.parse().ok());
    let msgs = broker
        .peek_messages(&user.name, &vhost, &name, offset, count)
        .await?;
    Ok(Json(Value::Array(
        msgs.iter()
            .enumerate()
            .map(|(i, p)| {
                let mut v = message_json(&p.message, p.redelivered, 0, encoding, truncate);
                if let Some(o) = v.as_object_mut() {
                    o.insert("id".into(), Value::from(p.id));
                    o.insert("position".into(), Value::from(offset + i));
                    o.remove("message_count");
                }
                v
            })
            .collect(),
    )))
}

/// `POST /api/queues/{vhost}/{name}/actions` `{"action":"sync"|"cancel_sync"}`: classic
/// mirroring does not exist in Charon; accepted and nothing to do, as RabbitMQ on an unmirrored
/// queue.
pub async fn actions(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    broker.queue_handle(&vhost, &name)?;
    let o = body_object(&body)?;
    match string(&o, "action") {
        Some("sync") | Some("cancel_sync") => Ok(StatusCode::NO_CONTENT),
        _ => Err(ApiError::BadRequest("Unknown action".into())),
    }
}
