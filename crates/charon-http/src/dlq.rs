//! Charon's extension for operating dead-letter queues from the UI, on the ids that the peek
//! endpoint (`GET .../messages`) shows:
//! - `POST /api/queues/{vhost}/{name}/messages/remove` `{"ids": [..]}` removes ready messages
//!   without dead-lettering them;
//! - `POST /api/queues/{vhost}/{name}/messages/replay` `{"ids": [..]}` moves them inside the
//!   broker to their original exchange and routing keys (from `x-death`), or, with
//!   `"exchange"` (and `"routing_key"`), there; properties kept byte for byte
//!   (charon-server's `queue_replay`).
//!
//! Both need read permission on the queue, like `get` and purge; replay also write permission on
//! the exchange, like a publish.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use charon_server::broker::Broker;
use charon_server::queue_replay::ReplayTarget;
use serde::Deserialize;
use serde_json::Value;

use crate::auth::AuthUser;
use crate::error::ApiError;

/// The body of `POST .../messages/remove`.
#[derive(Debug, Deserialize)]
pub struct RemoveBody {
    ids: Vec<u64>,
}

/// `POST /api/queues/{vhost}/{name}/messages/remove`: `{"removed": [..], "missing": [..]}`.
pub async fn remove(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
    body: Result<Json<RemoveBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(body) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    user.check_vhost(&broker, &vhost)?;
    let removed = broker
        .remove_messages(&user.name, &vhost, &name, body.ids.clone())
        .await?;
    let missing: Vec<u64> = body
        .ids
        .iter()
        .filter(|id| !removed.contains(id))
        .copied()
        .collect();
    Ok(Json(
        serde_json::json!({"removed": removed, "missing": missing}),
    ))
}

/// The body of `POST .../messages/replay`.
#[derive(Debug, Deserialize)]
pub struct ReplayBody {
    ids: Vec<u64>,
    /// A target exchange (`""` or `amq.default`: the default exchange); absent: each message's
    /// original one.
    #[serde(default)]
    exchange: Option<String>,
    /// The routing key with `exchange` (default `""`).
    #[serde(default)]
    routing_key: Option<String>,
}

/// `POST /api/queues/{vhost}/{name}/messages/replay`:
/// `{"replayed": [{"id","exchange","queues"}], "missing": [..], "failed": [{"id","reason"}]}`.
pub async fn replay(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
    body: Result<Json<ReplayBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(body) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    user.check_vhost(&broker, &vhost)?;
    let target = match body.exchange {
        None => ReplayTarget::Original,
        Some(x) => ReplayTarget::To {
            exchange: if x == "amq.default" { String::new() } else { x },
            routing_key: body.routing_key.unwrap_or_default(),
        },
    };
    let report = broker
        .replay_messages(&user.name, &vhost, &name, body.ids, target)
        .await?;
    let replayed: Vec<Value> = report
        .replayed
        .iter()
        .map(|(id, x, n)| serde_json::json!({"id": id, "exchange": x, "queues": n}))
        .collect();
    let failed: Vec<Value> = report
        .failed
        .iter()
        .map(|(id, why)| serde_json::json!({"id": id, "reason": why}))
        .collect();
    Ok(Json(serde_json::json!({
        "replayed": replayed, "missing": report.missing, "failed": failed,
    })))
}
