//! `/api/users`, `/api/permissions` and `/api/vhosts` (administrator for changes; a
//! management user lists the vhosts it may access): RabbitMQ's shapes, changes persisted by the
//! broker before the reply.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use charon_server::admin::definitions::parse_tags;
use charon_server::admin::params::user_limits_json;
use charon_server::admin::users::{PasswordInput, PermissionView, UserView};
use charon_server::broker::Broker;
use serde_json::{Value, json};

use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::listing::{Query, body_object, details, respond, respond_one, string};

fn user_json(broker: &Broker, u: &UserView) -> Value {
    let limits = user_limits_json(&broker.limits().user_limits(&u.name));
    json!({"name": u.name, "password_hash": u.password_hash,
           "hashing_algorithm": u.hashing_algorithm, "tags": u.tags, "limits": limits})
}

fn perm_json(p: &PermissionView) -> Value {
    json!({"user": p.user, "vhost": p.vhost, "configure": p.configure,
           "write": p.write, "read": p.read})
}

fn created(c: bool) -> StatusCode {
    if c {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    }
}

/// `GET /api/users`.
pub async fn list_users(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.require_admin()?;
    respond(
        broker
            .list_users()
            .iter()
            .map(|u| user_json(&broker, u))
            .collect(),
        &q,
    )
}

/// `GET /api/users/without-permissions`.
pub async fn users_without_permissions(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.require_admin()?;
    let perms = broker.list_permissions();
    respond(
        broker
            .list_users()
            .iter()
            .filter(|u| !perms.iter().any(|p| p.user == u.name))
            .map(|u| user_json(&broker, u))
            .collect(),
        &q,
    )
}

/// `GET /api/users/{name}`.
pub async fn get_user(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(name): Path<String>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.require_admin()?;
    let u = broker.user(&name).ok_or(ApiError::NotFound)?;
    Ok(respond_one(user_json(&broker, &u), &q))
}

/// `PUT /api/users/{name}` with `password` or `password_hash` (+ `hashing_algorithm`) and
/// `tags` (string or list).
pub async fn put_user(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    user.require_admin()?;
    let o = body_object(&body)?;
    let password = match (string(&o, "password"), string(&o, "password_hash")) {
        (Some(p), _) => PasswordInput::Plain(p.to_string()),
        (None, Some(h)) => PasswordInput::Hash {
            hash: h.to_string(),
            algorithm: string(&o, "hashing_algorithm").map(str::to_string),
        },
        (None, None) => PasswordInput::None,
    };
    let c = broker
        .put_user(&name, password, parse_tags(o.get("tags")))
        .await?;
    Ok(created(c))
}

/// `DELETE /api/users/{name}`.
pub async fn delete_user(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    user.require_admin()?;
    crate::error::deleted(broker.delete_user(&name).await)
}

/// `POST /api/users/bulk-delete` `{"users": [...]}`.
pub async fn bulk_delete_users(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    user.require_admin()?;
    let o = body_object(&body)?;
    for n in o
        .get("users")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        broker.delete_user(n).await;
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/users/{name}/permissions`.
pub async fn user_permissions(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(name): Path<String>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.require_admin()?;
    broker.user(&name).ok_or(ApiError::NotFound)?;
    respond(
        broker
            .list_permissions()
            .iter()
            .filter(|p| p.user == name)
            .map(perm_json)
            .collect(),
        &q,
    )
}

/// `GET /api/permissions`.
pub async fn list_permissions(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.require_admin()?;
    respond(
        broker.list_permissions().iter().map(perm_json).collect(),
        &q,
    )
}

/// `GET /api/vhosts/{vhost}/permissions`.
pub async fn vhost_permissions(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(vhost): Path<String>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.require_admin()?;
    broker.vhost(&vhost).ok_or(ApiError::NotFound)?;
    respond(
        broker
            .list_permissions()
            .iter()
            .filter(|p| p.vhost == vhost)
            .map(perm_json)
            .collect(),
        &q,
    )
}

/// `GET /api/permissions/{vhost}/{user}`.
pub async fn get_permission(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.require_admin()?;
    broker
        .list_permissions()
        .iter()
        .find(|p| p.vhost == vhost && p.user == name)
        .map(|p| respond_one(perm_json(p), &q))
        .ok_or(ApiError::NotFound)
}

/// `PUT /api/permissions/{vhost}/{user}` `{"configure","write","read"}`.
pub async fn put_permission(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    user.require_admin()?;
    let o = body_object(&body)?;
    let missing: Vec<String> = ["configure", "write", "read"]
        .iter()
        .filter(|k| string(&o, k).is_none())
        .map(|k| format!("{{key_missing,{k}}}"))
        .collect();
    if !missing.is_empty() {
        return Err(ApiError::BadRequest(format!("[{}]", missing.join(","))));
    }
    let c = broker
        .set_permissions(
            &name,
            &vhost,
            string(&o, "configure").unwrap_or(""),
            string(&o, "write").unwrap_or(""),
            string(&o, "read").unwrap_or(""),
        )
        .await?;
    Ok(created(c))
}

/// `DELETE /api/permissions/{vhost}/{user}`.
pub async fn delete_permission(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    user.require_admin()?;
    crate::error::deleted(broker.clear_permissions(&name, &vhost).await)
}

async fn vhost_json(broker: &Broker, name: &str) -> Value {
    let queues = broker.list_queues(Some(name)).await;
    let ready: u64 = queues.iter().map(|q| u64::from(q.stats.messages)).sum();
    let unacked: u64 = queues.iter().map(|q| u64::from(q.stats.unacked)).sum();
    json!({
        "name": name, "description": "", "tags": [], "default_queue_type": "classic",
        "metadata": {"description": "", "tags": []}, "tracing": false,
        "cluster_state": {charon_server::admin::node_name(): "running"},
        "messages": ready + unacked, "messages_details": details(0.0),
        "messages_ready": ready, "messages_ready_details": details(0.0),
        "messages_unacknowledged": unacked, "messages_unacknowledged_details": details(0.0),
    })
}

/// `GET /api/vhosts`: the vhosts the user may access (all for monitoring/administrator).
pub async fn list_vhosts(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    let mut out = Vec::new();
    for v in broker.vhosts() {
        if user.sees_vhost(&broker, &v.name) {
            out.push(vhost_json(&broker, &v.name).await);
        }
    }
    respond(out, &q)
}

/// `GET /api/vhosts/{vhost}`.
pub async fn get_vhost(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(vhost): Path<String>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    Ok(respond_one(vhost_json(&broker, &vhost).await, &q))
}

/// `PUT /api/vhosts/{vhost}`: the creator gets full permissions, as in RabbitMQ.
pub async fn put_vhost(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(vhost): Path<String>,
) -> Result<StatusCode, ApiError> {
    user.require_admin()?;
    let c = broker.add_vhost(&vhost, Some(&user.name)).await?;
    Ok(created(c))
}

/// `DELETE /api/vhosts/{vhost}`.
pub async fn delete_vhost(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(vhost): Path<String>,
) -> Result<StatusCode, ApiError> {
    user.require_admin()?;
    crate::error::deleted(broker.delete_vhost(&vhost).await)
}
