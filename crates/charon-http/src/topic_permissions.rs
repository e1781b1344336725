//! `/api/topic-permissions` (RabbitMQ's shapes: `{"user","vhost","exchange","write","read"}`):
//! list all, per vhost and user (GET, PUT `{"exchange","write","read"}`, DELETE), and per user or
//! vhost. Administrators only, as RabbitMQ. Enforcement is charon-server's `topic_access`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use charon_server::broker::Broker;
use charon_server::topic_access::TopicPermission;
use serde_json::{Value, json};

use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::listing::{Query, body_object, respond, string};

fn view(t: &TopicPermission) -> Value {
    json!({"user": t.user, "vhost": t.vhost, "exchange": t.exchange, "write": t.write, "read": t.read})
}

fn listed(
    user: &AuthUser,
    broker: &Broker,
    keep: impl Fn(&TopicPermission) -> bool,
    q: &Query,
) -> Result<Json<Value>, ApiError> {
    user.require_admin()?;
    let items = broker
        .list_topic_permissions()
        .iter()
        .filter(|t| keep(t))
        .map(view)
        .collect();
    respond(items, q)
}

/// `GET /api/topic-permissions`.
pub async fn list_all(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    listed(&user, &broker, |_| true, &q)
}

/// `GET /api/users/{user}/topic-permissions`.
pub async fn of_user(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(name): Path<String>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    listed(&user, &broker, |t| t.user == name, &q)
}

/// `GET /api/vhosts/{vhost}/topic-permissions`.
pub async fn of_vhost(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(vhost): Path<String>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    if broker.vhost(&vhost).is_none() {
        return Err(ApiError::NotFound);
    }
    listed(&user, &broker, |t| t.vhost == vhost, &q)
}

/// `GET /api/topic-permissions/{vhost}/{user}`: 404 when there are none.
pub async fn get_pair(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    user.require_admin()?;
    let items: Vec<Value> = broker
        .list_topic_permissions()
        .iter()
        .filter(|t| t.vhost == vhost && t.user == name)
        .map(view)
        .collect();
    if items.is_empty() {
        return Err(ApiError::NotFound);
    }
    Ok(Json(Value::Array(items)))
}

/// `PUT /api/topic-permissions/{vhost}/{user}` `{"exchange","write","read"}`: 201 new, 204 changed.
pub async fn put_pair(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    user.require_admin()?;
    let o = body_object(&body)?;
    let field = |k: &str| -> Result<String, ApiError> {
        string(&o, k)
            .map(str::to_string)
            .ok_or_else(|| ApiError::BadRequest(format!("{k} is missing")))
    };
    let created = broker
        .set_topic_permission(TopicPermission {
            user: name,
            vhost,
            exchange: field("exchange")?,
            write: field("write")?,
            read: field("read")?,
        })
        .await?;
    Ok(if created {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    })
}

/// `DELETE /api/topic-permissions/{vhost}/{user}` (all of the pair's; `?exchange=` for one).
pub async fn delete_pair(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
    q: Query,
) -> Result<StatusCode, ApiError> {
    user.require_admin()?;
    let cleared = broker
        .clear_topic_permissions(&name, &vhost, q.get("exchange").map(String::as_str))
        .await;
    crate::error::deleted(cleared)
}
