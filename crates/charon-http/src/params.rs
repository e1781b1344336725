//! `/api/vhost-limits`, `/api/user-limits`, `/api/parameters` and `/api/global-parameters`
//! with RabbitMQ 3.10's shapes. Limits are enforced by the broker; runtime and global
//! parameters are stored and exported but inert (Charon has no federation or shovel).
//! Changes need administrator (limits, global parameters) or policymaker (parameters), reads
//! show only the vhosts the user sees.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use charon_server::admin::params::{user_limits_json, vhost_limits_json};
use charon_server::broker::Broker;
use serde_json::{Value, json};

use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::listing::{Query, body_object, respond};

fn value_of(body: &Bytes) -> Result<Value, ApiError> {
    let o = body_object(body)?;
    o.get("value").cloned().ok_or_else(|| {
        charon_server::admin::users::AdminError::BadRequest("value is mandatory".into()).into()
    })
}

fn created(c: bool) -> StatusCode {
    if c {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    }
}

fn vhost_limits(user: &AuthUser, broker: &Broker, vhost: Option<&str>) -> Vec<Value> {
    broker
        .list_vhost_limits()
        .into_iter()
        .filter(|(v, _)| vhost.is_none_or(|x| x == v) && user.sees_vhost(broker, v))
        .map(|(v, l)| json!({"vhost": v, "value": vhost_limits_json(&l)}))
        .collect()
}

/// `GET /api/vhost-limits`.
pub async fn list_vhost_limits(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    respond(vhost_limits(&user, &broker, None), &q)
}

/// `GET /api/vhost-limits/{vhost}`.
pub async fn vhost_limits_of(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(vhost): Path<String>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    respond(vhost_limits(&user, &broker, Some(&vhost)), &q)
}

/// `PUT /api/vhost-limits/{vhost}/{name}` `{"value": N}`.
pub async fn put_vhost_limit(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    user.require_admin()?;
    let v = value_of(&body)?;
    broker.set_vhost_limit(&vhost, &name, Some(&v)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /api/vhost-limits/{vhost}/{name}`.
pub async fn delete_vhost_limit(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    user.require_admin()?;
    broker.set_vhost_limit(&vhost, &name, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn user_limits(broker: &Broker, name: Option<&str>) -> Vec<Value> {
    broker
        .list_user_limits()
        .into_iter()
        .filter(|(u, _)| name.is_none_or(|x| x == u))
        .map(|(u, l)| json!({"user": u, "value": user_limits_json(&l)}))
        .collect()
}

/// `GET /api/user-limits`.
pub async fn list_user_limits(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.require_admin()?;
    respond(user_limits(&broker, None), &q)
}

/// `GET /api/user-limits/{user}`.
pub async fn user_limits_of(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(name): Path<String>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.require_admin()?;
    broker.user(&name).ok_or(ApiError::NotFound)?;
    respond(user_limits(&broker, Some(&name)), &q)
}

/// `PUT /api/user-limits/{user}/{name}` `{"value": N}`.
pub async fn put_user_limit(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((name, limit)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    user.require_admin()?;
    let v = value_of(&body)?;
    broker.set_user_limit(&name, &limit, Some(&v)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /api/user-limits/{user}/{name}`.
pub async fn delete_user_limit(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((name, limit)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    user.require_admin()?;
    broker.set_user_limit(&name, &limit, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn parameters(user: &AuthUser, broker: &Broker, c: Option<&str>, v: Option<&str>) -> Vec<Value> {
    broker
        .list_parameters(c, v)
        .into_iter()
        .filter(|p| user.sees_vhost(broker, &p.vhost))
        .map(|p| p.to_json())
        .collect()
}

/// `GET /api/parameters`.
pub async fn list_parameters(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.may_set_policies()?;
    respond(parameters(&user, &broker, None, None), &q)
}

/// `GET /api/parameters/{component}`.
pub async fn component_parameters(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(component): Path<String>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.may_set_policies()?;
    respond(parameters(&user, &broker, Some(&component), None), &q)
}

/// `GET /api/parameters/{component}/{vhost}`.
pub async fn vhost_parameters(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((component, vhost)): Path<(String, String)>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.may_set_policies()?;
    user.check_vhost(&broker, &vhost)?;
    respond(
        parameters(&user, &broker, Some(&component), Some(&vhost)),
        &q,
    )
}

/// `GET /api/parameters/{component}/{vhost}/{name}`.
pub async fn get_parameter(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((component, vhost, name)): Path<(String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    user.may_set_policies()?;
    user.check_vhost(&broker, &vhost)?;
    parameters(&user, &broker, Some(&component), Some(&vhost))
        .into_iter()
        .find(|p| p.get("name").and_then(Value::as_str) == Some(name.as_str()))
        .map(Json)
        .ok_or(ApiError::NotFound)
}

/// `PUT /api/parameters/{component}/{vhost}/{name}` `{"value": ...}`.
pub async fn put_parameter(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((component, vhost, name)): Path<(String, String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    user.may_set_policies()?;
    user.check_vhost(&broker, &vhost)?;
    let v = value_of(&body)?;
    Ok(created(
        broker.put_parameter(&component, &vhost, &name, v).await?,
    ))
}

/// `DELETE /api/parameters/{component}/{vhost}/{name}`.
pub async fn delete_parameter(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((component, vhost, name)): Path<(String, String, String)>,
) -> Result<StatusCode, ApiError> {
    user.may_set_policies()?;
    user.check_vhost(&broker, &vhost)?;
    crate::error::deleted(broker.delete_parameter(&component, &vhost, &name).await)
}

/// `GET /api/global-parameters`.
pub async fn list_global(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.require_admin()?;
    let items = broker
        .list_global_parameters()
        .into_iter()
        .map(|(n, v)| json!({"name": n, "value": v}))
        .collect();
    respond(items, &q)
}

/// `GET /api/global-parameters/{name}`.
pub async fn get_global(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    user.require_admin()?;
    broker
        .list_global_parameters()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(n, v)| Json(json!({"name": n, "value": v})))
        .ok_or(ApiError::NotFound)
}

/// `PUT /api/global-parameters/{name}` `{"value": ...}`.
pub async fn put_global(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    user.require_admin()?;
    let v = value_of(&body)?;
    Ok(created(broker.put_global_parameter(&name, v).await?))
}

/// `DELETE /api/global-parameters/{name}`.
pub async fn delete_global(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    user.require_admin()?;
    crate::error::deleted(broker.delete_global_parameter(&name).await)
}
