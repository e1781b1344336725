//! `/api/exchanges` (list, get, declare with PUT, delete, `.../publish`, `.../bindings/source`
//! and `.../destination`) and `/api/bindings` (list, create with POST, get and delete by
//! `properties_key`). The default exchange is `amq.default` in paths, as in RabbitMQ.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use charon_core::ExchangeDeclare;
use charon_server::admin::json::{json_to_table_opt, table_to_json};
use charon_server::admin::now_ms;
use charon_server::admin::topology::{BindingSpec, BindingView, DestKind, ExchangeView};
use charon_server::broker::Broker;
use serde_json::{Value, json};

use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::listing::{Query, body_object, details, flag, respond, respond_one, string};
use crate::msgjson::properties_from_json;

/// The exchange a path names (`amq.default` is the default exchange).
fn exchange_name(n: &str) -> &str {
    if n == "amq.default" { "" } else { n }
}

fn exchange_json(broker: &Broker, x: &ExchangeView) -> Value {
    let (publish_in, publish_out) = x.publish_in_out;
    let rates = broker.admin().rates.rates(
        &format!("exchange:{}\u{0}{}", x.vhost, x.name),
        &[publish_in, publish_out],
        now_ms(),
    );
    let mut v = json!({
        "name": x.name, "vhost": x.vhost, "type": x.kind, "durable": x.durable,
        "auto_delete": x.auto_delete, "internal": x.internal,
        "arguments": table_to_json(&x.arguments),
        "user_who_performed_action": "rmq-internal",
        "message_stats": {
            "publish_in": publish_in, "publish_in_details": details(rates[0]),
            "publish_out": publish_out, "publish_out_details": details(rates[1]),
        },
    });
    // RabbitMQ lists `policy` only when one applies.
    if let (Some(p), Some(o)) = (&x.policy, v.as_object_mut()) {
        o.insert("policy".into(), json!(p));
    }
    // The delayed-message plugin's `messages_delayed`, for x-delayed-message exchanges.
    if let (Some(n), Some(o)) = (x.messages_delayed, v.as_object_mut()) {
        o.insert("messages_delayed".into(), json!(n));
        o.insert(
            "release_lateness_ms".into(),
            x.release_lateness
                .map_or(serde_json::Value::Null, |l| l.to_json()),
        );
    }
    v
}

/// RabbitMQ's `properties_key`: the routing key (URL-escaped, `~` when empty) when there are
/// no arguments, else the key, `~` and a hash of the arguments.
pub fn properties_key(b: &BindingView) -> String {
    let rk: String = b
        .routing_key
        .bytes()
        .map(|c| {
            if c.is_ascii_alphanumeric() || b"-_.~".contains(&c) {
                (c as char).to_string()
            } else {
                format!("%{c:02X}")
            }
        })
        .collect();
    if b.arguments.inner().is_empty() {
        if rk.is_empty() { "~".into() } else { rk }
    } else {
        let text = table_to_json(&b.arguments).to_string();
        let h = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, c| {
            (h ^ u64::from(c)).wrapping_mul(0x100_0000_01b3)
        });
        let tag = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&h.to_be_bytes()[..4]);
        format!("{rk}~{tag}")
    }
}

/// A binding as RabbitMQ's API shows it.
pub fn binding_json(b: &BindingView) -> Value {
    json!({
        "source": b.source, "vhost": b.vhost, "destination": b.destination,
        "destination_type": b.destination_type, "routing_key": b.routing_key,
        "arguments": table_to_json(&b.arguments), "properties_key": properties_key(b),
    })
}

/// The exchanges of `vhost` (or of every vhost `user` sees) as RabbitMQ's API shows them.
fn visible_exchanges(broker: &Broker, user: &AuthUser, vhost: Option<&str>) -> Vec<Value> {
    broker
        .list_exchanges(vhost)
        .iter()
        .filter(|x| user.sees_vhost(broker, &x.vhost))
        .map(|x| exchange_json(broker, x))
        .collect()
}

/// `GET /api/exchanges`.
pub async fn list_all(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    respond(visible_exchanges(&broker, &user, None), &q)
}

/// `GET /api/exchanges/{vhost}`.
pub async fn list_vhost(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(vhost): Path<String>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    respond(visible_exchanges(&broker, &user, Some(&vhost)), &q)
}

/// `GET /api/exchanges/{vhost}/{name}`.
pub async fn get_one(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    let name = exchange_name(&name);
    broker
        .list_exchanges(Some(&vhost))
        .iter()
        .find(|x| x.name == name)
        .map(|x| respond_one(exchange_json(&broker, x), &q))
        .ok_or(ApiError::NotFound)
}

/// `PUT /api/exchanges/{vhost}/{name}` `{"type","durable","auto_delete","internal","arguments"}`.
pub async fn put(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    let o = body_object(&body)?;
    let kind = string(&o, "type")
        .ok_or_else(|| ApiError::BadRequest("[{key_missing,type}]".into()))?
        .to_string();
    let existed = broker
        .list_exchanges(Some(&vhost))
        .iter()
        .any(|x| x.name == name);
    let arguments = json_to_table_opt(o.get("arguments")).map_err(ApiError::BadRequest)?;
    broker
        .declare_exchange(
            &user.name,
            &vhost,
            ExchangeDeclare {
                name,
                kind,
                passive: false,
                durable: flag(&o, "durable", true)?,
                auto_delete: flag(&o, "auto_delete", false)?,
                internal: flag(&o, "internal", false)?,
                arguments,
            },
        )
        .await?;
    Ok(if existed {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::CREATED
    })
}

/// `DELETE /api/exchanges/{vhost}/{name}` (`?if-unused=true`).
pub async fn delete(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
    q: Query,
) -> Result<StatusCode, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    let if_unused = q.get("if-unused").is_some_and(|v| v == "true");
    broker
        .delete_exchange(&user.name, &vhost, exchange_name(&name), if_unused)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/exchanges/{vhost}/{name}/publish`
/// `{"routing_key","payload","payload_encoding","properties"}` → `{"routed": bool}`.
pub async fn publish(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    let o = body_object(&body)?;
    let routing_key = string(&o, "routing_key")
        .ok_or_else(|| ApiError::BadRequest("[{key_missing,routing_key}]".into()))?;
    let payload = string(&o, "payload").unwrap_or("");
    let body = match string(&o, "payload_encoding").unwrap_or("string") {
        "string" => Bytes::copy_from_slice(payload.as_bytes()),
        "base64" => Bytes::from(
            base64::engine::general_purpose::STANDARD
                .decode(payload)
                .map_err(|_| ApiError::BadRequest("payload is not valid base64".into()))?,
        ),
        other => {
            return Err(ApiError::BadRequest(format!(
                "payload_encoding {other} is not string or base64"
            )));
        }
    };
    let props = properties_from_json(o.get("properties"))?;
    let routed = broker
        .publish_message(
            &user.name,
            &vhost,
            exchange_name(&name),
            routing_key,
            props,
            body,
        )
        .await?;
    Ok(Json(json!({ "routed": routed })))
}

fn visible_bindings(broker: &Broker, user: &AuthUser, vhost: Option<&str>) -> Vec<BindingView> {
    broker
        .list_bindings(vhost)
        .into_iter()
        .filter(|b| user.sees_vhost(broker, &b.vhost))
        .collect()
}

/// `GET /api/exchanges/{vhost}/{name}/bindings/{source|destination}`.
pub async fn exchange_bindings(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name, side)): Path<(String, String, String)>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    let name = exchange_name(&name);
    if !broker
        .list_exchanges(Some(&vhost))
        .iter()
        .any(|x| x.name == name)
    {
        return Err(ApiError::NotFound);
    }
    let list = visible_bindings(&broker, &user, Some(&vhost));
    let v = list
        .iter()
        .filter(|b| match side.as_str() {
            "source" => b.source == name,
            _ => b.destination_type == "exchange" && b.destination == name,
        })
        .map(binding_json)
        .collect();
    respond(v, &q)
}

/// `GET /api/queues/{vhost}/{name}/bindings`.
pub async fn queue_bindings(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, name)): Path<(String, String)>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    broker.queue_handle(&vhost, &name)?;
    let v = visible_bindings(&broker, &user, Some(&vhost))
        .iter()
        .filter(|b| b.destination_type == "queue" && b.destination == name)
        .map(binding_json)
        .collect();
    respond(v, &q)
}

/// `GET /api/bindings`.
pub async fn list_all_bindings(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    respond(
        visible_bindings(&broker, &user, None)
            .iter()
            .map(binding_json)
            .collect(),
        &q,
    )
}

/// `GET /api/bindings/{vhost}`.
pub async fn list_vhost_bindings(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(vhost): Path<String>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    respond(
        visible_bindings(&broker, &user, Some(&vhost))
            .iter()
            .map(binding_json)
            .collect(),
        &q,
    )
}

fn dest_kind(t: &str) -> Result<DestKind, ApiError> {
    match t {
        "q" => Ok(DestKind::Queue),
        "e" => Ok(DestKind::Exchange),
        _ => Err(ApiError::NotFound),
    }
}

fn between(
    broker: &Broker,
    vhost: &str,
    source: &str,
    kind: DestKind,
    dest: &str,
) -> Vec<BindingView> {
    let t = match kind {
        DestKind::Queue => "queue",
        DestKind::Exchange => "exchange",
    };
    broker
        .list_bindings(Some(vhost))
        .into_iter()
        .filter(|b| b.source == source && b.destination_type == t && b.destination == dest)
        .collect()
}

fn check_ends(
    broker: &Broker,
    vhost: &str,
    source: &str,
    kind: DestKind,
    dest: &str,
) -> Result<(), ApiError> {
    let xs = broker.list_exchanges(Some(vhost));
    if !xs.iter().any(|x| x.name == source) {
        return Err(ApiError::Missing(format!(
            "no exchange '{source}' in vhost '{vhost}'"
        )));
    }
    match kind {
        DestKind::Queue => {
            broker
                .queue_handle(vhost, dest)
                .map_err(|_| ApiError::Missing(format!("no queue '{dest}' in vhost '{vhost}'")))?;
        }
        DestKind::Exchange => {
            if !xs.iter().any(|x| x.name == dest) {
                return Err(ApiError::Missing(format!(
                    "no exchange '{dest}' in vhost '{vhost}'"
                )));
            }
        }
    }
    Ok(())
}

/// `GET /api/bindings/{vhost}/e/{source}/{q|e}/{dest}`.
pub async fn list_between(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, source, t, dest)): Path<(String, String, String, String)>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    let kind = dest_kind(&t)?;
    let source = exchange_name(&source).to_string();
    check_ends(&broker, &vhost, &source, kind, &dest)?;
    respond(
        between(&broker, &vhost, &source, kind, &dest)
            .iter()
            .map(binding_json)
            .collect(),
        &q,
    )
}

/// `POST /api/bindings/{vhost}/e/{source}/{q|e}/{dest}` `{"routing_key","arguments"}`: 201 with
/// a `Location` naming the new binding's properties key.
pub async fn create(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, source, t, dest)): Path<(String, String, String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    let kind = dest_kind(&t)?;
    let source = exchange_name(&source).to_string();
    check_ends(&broker, &vhost, &source, kind, &dest)?;
    let o = body_object(&body)?;
    let routing_key = string(&o, "routing_key").unwrap_or("").to_string();
    let arguments = json_to_table_opt(o.get("arguments")).map_err(ApiError::BadRequest)?;
    broker
        .bind(
            &user.name,
            &vhost,
            BindingSpec {
                source: &source,
                kind,
                dest: &dest,
                routing_key: &routing_key,
                arguments: &arguments,
            },
        )
        .await?;
    let key = properties_key(&BindingView {
        vhost: vhost.clone(),
        source,
        destination: dest,
        destination_type: "queue",
        routing_key,
        arguments,
    });
    let mut resp = StatusCode::CREATED.into_response();
    if let Ok(v) = HeaderValue::from_str(&key) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    Ok(resp)
}

fn find_binding(
    broker: &Broker,
    vhost: &str,
    source: &str,
    kind: DestKind,
    dest: &str,
    props: &str,
) -> Result<BindingView, ApiError> {
    between(broker, vhost, source, kind, dest)
        .into_iter()
        .find(|b| properties_key(b) == props)
        .ok_or(ApiError::NotFound)
}

/// `GET /api/bindings/{vhost}/e/{source}/{q|e}/{dest}/{props}`.
pub async fn get_binding(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, source, t, dest, props)): Path<(String, String, String, String, String)>,
    q: Query,
) -> Result<Json<Value>, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    let kind = dest_kind(&t)?;
    let b = find_binding(&broker, &vhost, exchange_name(&source), kind, &dest, &props)?;
    Ok(respond_one(binding_json(&b), &q))
}

/// `DELETE /api/bindings/{vhost}/e/{source}/{q|e}/{dest}/{props}`.
pub async fn delete_binding(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path((vhost, source, t, dest, props)): Path<(String, String, String, String, String)>,
) -> Result<StatusCode, ApiError> {
    user.check_vhost(&broker, &vhost)?;
    let kind = dest_kind(&t)?;
    let source = exchange_name(&source);
    let b = find_binding(&broker, &vhost, source, kind, &dest, &props)?;
    broker
        .unbind(
            &user.name,
            &vhost,
            BindingSpec {
                source,
                kind,
                dest: &dest,
                routing_key: &b.routing_key,
                arguments: &b.arguments,
            },
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
