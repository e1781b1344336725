//! `/api/policies`: list, get, set (PUT) and clear (DELETE) policies, with the JSON shapes of
//! RabbitMQ's management API (`{"pattern","definition","priority","apply-to"}`).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use charon_server::broker::Broker;
use charon_server::policies::{
    PolicyChangeError, PolicyInput, PolicySetOutcome, PolicyView, def_value_from_json,
    definition_to_json,
};
use serde::Deserialize;
use serde_json::Value;

use crate::auth::AuthUser;
use crate::error::ApiError;

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

fn list_json(list: Vec<PolicyView>) -> Value {
    Value::Array(list.iter().map(view_json).collect())
}

/// `GET /api/policies`.
pub async fn list_all(
    _user: AuthUser,
    State(broker): State<Arc<Broker>>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(list_json(broker.list_policies(None))))
}

/// `GET /api/policies/{vhost}`.
pub async fn list_vhost(
    _user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    if broker.vhost(&vhost).is_none() {
        return Err(ApiError::NotFound);
    }
    Ok(Json(list_json(broker.list_policies(Some(&vhost)))))
}

/// `GET /api/policies/{vhost}/{name}`.
pub async fn get_one(
    _user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    broker
        .list_policies(Some(&vhost))
        .iter()
        .find(|p| p.name == name)
        .map(|p| Json(view_json(p)))
        .ok_or(ApiError::NotFound)
}

/// `PUT /api/policies/{vhost}/{name}`: 201 when created, 204 when updated.
pub async fn put(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
    body: Result<Json<PolicyBody>, axum::extract::rejection::JsonRejection>,
) -> Result<StatusCode, ApiError> {
    user.may_set_policies()?;
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
    let priority = match body.priority {
        None | Some(Value::Null) => 0,
        Some(Value::Number(n)) => n.as_i64().ok_or_else(|| {
            ApiError::BadRequest(format!("Validation failed\n\n{n} is not a valid integer"))
        })?,
        Some(Value::String(s)) => s.parse().map_err(|_| {
            ApiError::BadRequest(format!(
                "Validation failed\n\n\"{s}\" is not a valid integer"
            ))
        })?,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "Validation failed\n\n{other} is not a valid integer"
            )));
        }
    };
    let input = PolicyInput {
        name,
        pattern,
        definition: definition
            .iter()
            .map(|(k, v)| (k.clone(), def_value_from_json(v)))
            .collect(),
        priority,
        apply_to: body.apply_to.unwrap_or_else(|| "all".into()),
    };
    let outcome = broker.set_policy(&vhost, input);
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

/// `DELETE /api/policies/{vhost}/{name}`.
pub async fn delete(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    user.may_set_policies()?;
    let cleared = broker.clear_policy(&vhost, &name);
    broker.wait_durable().await;
    if cleared {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound)
    }
}
