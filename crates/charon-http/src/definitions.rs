//! `/api/definitions` and `/api/definitions/{vhost}`: RabbitMQ's definitions JSON, exported
//! with GET (`?download=name` adds a `Content-Disposition` as RabbitMQ), imported with POST
//! (a JSON body, or a form with a `file` field as the web UI sends). Administrator only.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use charon_server::broker::Broker;
use serde_json::Value;

use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::listing::Query;

fn export(broker: &Broker, vhost: Option<&str>, q: &Query) -> Response {
    let v = broker.export_definitions(vhost);
    let mut resp = Json(v).into_response();
    if let Some(name) = q.get("download")
        && let Ok(h) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\""))
    {
        resp.headers_mut().insert(header::CONTENT_DISPOSITION, h);
    }
    resp
}

/// `GET /api/definitions`.
pub async fn get_all(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    q: Query,
) -> Result<Response, ApiError> {
    user.require_admin()?;
    Ok(export(&broker, None, &q))
}

/// `GET /api/definitions/{vhost}`.
pub async fn get_vhost(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(vhost): Path<String>,
    q: Query,
) -> Result<Response, ApiError> {
    user.require_admin()?;
    broker.vhost(&vhost).ok_or(ApiError::NotFound)?;
    Ok(export(&broker, Some(&vhost), &q))
}

fn parse(body: &Bytes) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("not_json: {e}")))
}

/// `POST /api/definitions`.
pub async fn post_all(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    user.require_admin()?;
    let defs = parse(&body)?;
    broker.import_definitions(&defs, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/definitions/{vhost}`.
pub async fn post_vhost(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(vhost): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    user.require_admin()?;
    let defs = parse(&body)?;
    broker.import_definitions(&defs, Some(&vhost)).await?;
    Ok(StatusCode::NO_CONTENT)
}
