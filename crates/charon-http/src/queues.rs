//! `/api/queues`: queues with their counts, in the shape of RabbitMQ's management API
//! (`name`, `vhost`, `durable`, `auto_delete`, `exclusive`, `policy`, `messages`,
//! `messages_ready`, `messages_unacknowledged`, `consumers`), plus Charon's
//! `dead_letters_dropped_no_dlx` (dead letters dropped because the DLX did not exist) and the
//! retry counts (`docs/retries.md`): `messages_parked`, `messages_held` (behind a retrying
//! message of the same key) and `next_due` (ms since the epoch, or null).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use charon_server::broker::Broker;
use charon_server::queues_info::QueueInfo;
use serde_json::Value;

use crate::auth::AuthUser;
use crate::error::ApiError;

fn json(q: &QueueInfo) -> Value {
    let s = &q.stats;
    serde_json::json!({
        "name": q.name,
        "vhost": q.vhost,
        "durable": q.durable,
        "auto_delete": q.auto_delete,
        "exclusive": q.exclusive,
        "policy": q.policy,
        "dead_letter_exchange": q.dead_letter_exchange,
        "messages": u64::from(s.messages) + u64::from(s.unacked),
        "messages_ready": s.messages,
        "messages_unacknowledged": s.unacked,
        "consumers": s.consumers,
        "dead_letters_dropped_no_dlx": s.dead_letters_dropped_no_dlx,
        "messages_parked": s.parked,
        "messages_held": s.held,
        "next_due": s.next_due_ms,
    })
}

/// `GET /api/queues`.
pub async fn list_all(_user: AuthUser, State(broker): State<Arc<Broker>>) -> Json<Value> {
    Json(Value::Array(
        broker.list_queues(None).await.iter().map(json).collect(),
    ))
}

/// `GET /api/queues/{vhost}`.
pub async fn list_vhost(
    _user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    if broker.vhost(&vhost).is_none() {
        return Err(ApiError::NotFound);
    }
    Ok(Json(Value::Array(
        broker
            .list_queues(Some(&vhost))
            .await
            .iter()
            .map(json)
            .collect(),
    )))
}

/// `GET /api/queues/{vhost}/{name}`.
pub async fn get_one(
    _user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    broker
        .list_queues(Some(&vhost))
        .await
        .iter()
        .find(|q| q.name == name)
        .map(|q| Json(json(q)))
        .ok_or(ApiError::NotFound)
}
