//! Charon's extension for operating dead-letter queues from the UI:
//! `POST /api/queues/{vhost}/{name}/messages/remove` with `{"ids": [..]}` removes ready messages
//! by the ids that the peek endpoint (`GET .../messages`) shows, without dead-lettering them.
//! The UI replays a dead letter by publishing a copy to its original exchange
//! (`POST /api/exchanges/{vhost}/{exchange}/publish`) and then removing it here. Needs read
//! permission on the queue, like `get` and purge.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use charon_server::broker::Broker;
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
