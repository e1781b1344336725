//! `/api/policies` and `/api/operator-policies`: list, get, set (PUT) and clear (DELETE)
//! policies and operator policies, with the JSON shapes of RabbitMQ's management API
//! (`{"pattern","definition","priority","apply-to"}`). Listing shows the vhosts the user sees;
//! policies change with `policymaker`, operator policies with `administrator` (as RabbitMQ).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use charon_server::broker::Broker;
use charon_server::policies::{
    PolicyChangeError, PolicyInput, PolicyKind, PolicySetOutcome, PolicyView, def_value_from_json,
    definition_to_json,
};
use serde::Deserialize;
use serde_json::Value;

use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::listing::{Query, respond, respond_one};

/// The body of `PUT /api/policies/{vhost}/{name}`.
#[derive(Debug, Deserialize)]
pub struct PolicyBody {
    pattern: Option<String>,
    definition: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    priority: Option<Value>,
    #[serde(rename = "apply-to", default)]
    apply_to: Option<String>,
}

/// A policy in the management API's JSON shape.
fn view_json(p: &PolicyView) -> Value {
    let definition = definition_to_json(&p.definition);
    serde_json::json!({
        "vhost": p.vhost,
        "name": p.name,
        "pattern": p.pattern,
        "apply-to": p.apply_to,
        "definition": definition,
        "priority": p.priority,
    })
}

fn list_json(user: &AuthUser, broker: &Broker, list: Vec<PolicyView>) -> Vec<Value> {
    list.iter()
        .filter(|p| user.sees_vhost(broker, &p.vhost))
        .map(view_json)
        .collect()
}

/// Who may change policies of `kind`.
fn may_change(user: &AuthUser, kind: PolicyKind) -> Result<(), ApiError> {
    match kind {
        PolicyKind::User => user.may_set_policies(),
        PolicyKind::Operator => user.require_admin(),
    }
}

/// Who may read one policy of `kind` (lists are filtered by vhost instead).
fn may_read(
    user: &AuthUser,
    broker: &Broker,
    kind: PolicyKind,
    vhost: &str,
) -> Result<(), ApiError> {
    match kind {
        PolicyKind::User => user.check_vhost(broker, vhost),
        PolicyKind::Operator => user.require_admin(),
    }
}

fn parse_priority(priority: Option<Value>) -> Result<i64, ApiError> {
    match priority {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => n.as_i64().ok_or_else(|| {
            ApiError::BadRequest(format!("Validation failed\n\n{n} is not a valid integer"))
        }),
        Some(Value::String(s)) => s.parse().map_err(|_| {
            ApiError::BadRequest(format!(
                "Validation failed\n\n\"{s}\" is not a valid integer"
            ))
        }),
        Some(other) => Err(ApiError::BadRequest(format!(
            "Validation failed\n\n{other} is not a valid integer"
        ))),
    }
}

async fn list_of(
    kind: PolicyKind,
    user: &AuthUser,
    broker: &Broker,
    vhost: Option<&str>,
    q: &Query,
) -> Result<Json<Value>, ApiError> {
    if let Some(v) = vhost {
        user.check_vhost(broker, v)?;
    }
    respond(
        list_json(user, broker, broker.list_policies_of(kind, vhost)),
        q,
    )
}

fn get_of(
    kind: PolicyKind,
    user: &AuthUser,
    broker: &Broker,
    vhost: &str,
    name: &str,
    q: &Query,
) -> Result<Json<Value>, ApiError> {
    may_read(user, broker, kind, vhost)?;
    broker
        .list_policies_of(kind, Some(vhost))
        .iter()
        .find(|p| p.name == name)
        .map(|p| respond_one(view_json(p), q))
        .ok_or(ApiError::NotFound)
}

async fn put_of(
    kind: PolicyKind,
    user: &AuthUser,
    broker: &Broker,
    (vhost, name): (String, String),
    body: Result<Json<PolicyBody>, axum::extract::rejection::JsonRejection>,
) -> Result<StatusCode, ApiError> {
    may_change(user, kind)?;
    let Json(body) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    if broker.vhost(&vhost).is_none() {
        return Err(ApiError::NotFound);
    }
    let pattern = body
        .pattern
        .ok_or_else(|| ApiError::BadRequest("Validation failed\n\npattern is missing".into()))?;
    let definition = body
        .definition
        .ok_or_else(|| ApiError::BadRequest("Validation failed\n\ndefinition is missing".into()))?;
    let input = PolicyInput {
        name,
        pattern,
        definition: definition
            .iter()
            .map(|(k, v)| (k.clone(), def_value_from_json(v)))
            .collect(),
        priority: parse_priority(body.priority)?,
        apply_to: body.apply_to.unwrap_or_else(|| "all".into()),
    };
    let outcome = broker.set_policy_of(kind, &vhost, input);
    broker.wait_durable().await;
    match outcome {
        Ok(PolicySetOutcome::Created) => Ok(StatusCode::CREATED),
        Ok(PolicySetOutcome::Updated) => Ok(StatusCode::NO_CONTENT),
        Err(PolicyChangeError::NoVHost) => Err(ApiError::NotFound),
        Err(PolicyChangeError::Invalid(e)) => {
            Err(ApiError::BadRequest(format!("Validation failed\n\n{e}")))
        }
    }
}

async fn delete_of(
    kind: PolicyKind,
    user: &AuthUser,
    broker: &Broker,
    vhost: &str,
    name: &str,
) -> Result<StatusCode, ApiError> {
    may_change(user, kind)?;
    let cleared = broker.clear_policy_of(kind, vhost, name);
    broker.wait_durable().await;
    crate::error::deleted(cleared)
}

/// `GET /api/policies`.
pub async fn list_all(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    list_of(PolicyKind::User, &user, &broker, None, &q).await
}

/// `GET /api/policies/{vhost}`.
pub async fn list_vhost(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(vhost): Path<String>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    list_of(PolicyKind::User, &user, &broker, Some(&vhost), &q).await
}

/// `GET /api/policies/{vhost}/{name}`.
pub async fn get_one(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    get_of(PolicyKind::User, &user, &broker, &vhost, &name, &q)
}

/// `PUT /api/policies/{vhost}/{name}`: 201 when created, 204 when updated.
pub async fn put(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(key): Path<(String, String)>,
    body: Result<Json<PolicyBody>, axum::extract::rejection::JsonRejection>,
) -> Result<StatusCode, ApiError> {
    put_of(PolicyKind::User, &user, &broker, key, body).await
}

/// `DELETE /api/policies/{vhost}/{name}`.
pub async fn delete(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    delete_of(PolicyKind::User, &user, &broker, &vhost, &name).await
}

/// `GET /api/operator-policies`.
pub async fn op_list_all(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    list_of(PolicyKind::Operator, &user, &broker, None, &q).await
}

/// `GET /api/operator-policies/{vhost}`.
pub async fn op_list_vhost(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(vhost): Path<String>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    list_of(PolicyKind::Operator, &user, &broker, Some(&vhost), &q).await
}

/// `GET /api/operator-policies/{vhost}/{name}`.
pub async fn op_get_one(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    get_of(PolicyKind::Operator, &user, &broker, &vhost, &name, &q)
}

/// `PUT /api/operator-policies/{vhost}/{name}`: 201 when created, 204 when updated.
pub async fn op_put(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(key): Path<(String, String)>,
    body: Result<Json<PolicyBody>, axum::extract::rejection::JsonRejection>,
) -> Result<StatusCode, ApiError> {
    put_of(PolicyKind::Operator, &user, &broker, key, body).await
}

/// `DELETE /api/operator-policies/{vhost}/{name}`.
pub async fn op_delete(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    delete_of(PolicyKind::Operator, &user, &broker, &vhost, &name).await
}
