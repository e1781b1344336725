//! RabbitMQ's definitions JSON (`/api/definitions`, `rabbitmqadmin export/import`,
//! `ctl export_definitions/import_definitions`): users (salted hashes as they are), vhosts,
//! permissions, policies, exchanges, queues, bindings. A file exported by RabbitMQ 3.x imports,
//! and what Charon exports imports into RabbitMQ.
//!
//! Export leaves out what RabbitMQ leaves out: the default and `amq.*` exchanges, exclusive
//! queues, the default exchange's implicit bindings. It includes `parameters` (inert ones and
//! vhost limits as component `vhost-limits`), `global_parameters` (inert; import keeps the
//! node's own `internal_cluster_id`), user `limits` and `topic_permissions`. Import runs as the broker itself (no permission checks on the objects, as
//! RabbitMQ's import), stops at the first invalid object and reports it.

use charon_core::{DefValue, ExchangeDeclare, QueueDeclare};
use serde_json::{Map, Value, json};

use super::json::{json_to_table_opt, table_to_json};
use super::topology::{BindingSpec, DestKind};
use super::users::{AdminError, PasswordInput};
use crate::broker::Broker;
use crate::policies::{PolicyInput, PolicyKind, def_value_from_json, definition_to_json};

/// The user import acts as: no permission checks.
pub const INTERNAL_USER: &str = "\u{0}charon-internal";

/// The RabbitMQ version whose API and definitions Charon speaks.
pub const RABBIT_VERSION: &str = "3.10.8";

fn str_field<'a>(o: &'a Map<String, Value>, k: &str) -> &'a str {
    o.get(k).and_then(Value::as_str).unwrap_or("")
}

fn bool_field(o: &Map<String, Value>, k: &str, default: bool) -> bool {
    match o.get(k) {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s == "true",
        _ => default,
    }
}

/// Tags as RabbitMQ writes them: a JSON array, or a comma-separated string.
pub fn parse_tags(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .filter(|t| !t.is_empty())
            .collect(),
        Some(Value::String(s)) => s
            .split(',')
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .collect(),
        _ => Vec::new(),
    }
}

impl Broker {
    /// Exports definitions: the whole broker (`vhost = None`), or one vhost's objects without
    /// their `vhost` fields (RabbitMQ's `/api/definitions/{vhost}` shape).
    pub fn export_definitions(&self, vhost: Option<&str>) -> Value {
        let keep = |v: &str| vhost.is_none_or(|n| n == v);
        let strip = |mut o: Value| {
            if vhost.is_some()
                && let Some(m) = o.as_object_mut()
            {
                m.remove("vhost");
            }
            o
        };
        let policies_of = |kind: PolicyKind| -> Vec<Value> {
            self.list_policies_of(kind, vhost)
                .iter()
                .map(|p| {
                    strip(json!({
                        "vhost": p.vhost, "name": p.name, "pattern": p.pattern,
                        "apply-to": p.apply_to, "definition": definition_to_json(&p.definition),
                        "priority": p.priority,
                    }))
                })
                .collect()
        };
        let policies = policies_of(PolicyKind::User);
        let operator_policies = policies_of(PolicyKind::Operator);
        let mut queues = Vec::new();
        for v in self.vhosts() {
            if !keep(&v.name) {
                continue;
            }
            let topo = v.topology.read().unwrap_or_else(|p| p.into_inner());
            let mut qs: Vec<_> = topo
                .queues()
                .filter(|q| q.meta.exclusive_owner.is_none())
                .map(|q| {
                    (
                        q.meta.name.to_string(),
                        strip(json!({
                            "name": &*q.meta.name, "vhost": &*v.name, "durable": q.meta.durable,
                            "auto_delete": q.meta.auto_delete,
                            "arguments": table_to_json(&q.meta.arguments),
                        })),
                    )
                })
                .collect();
            qs.sort_by(|a, b| a.0.cmp(&b.0));
            queues.extend(qs.into_iter().map(|(_, q)| q));
        }
        let exchanges: Vec<Value> = self
            .list_exchanges(vhost)
            .into_iter()
            .filter(|x| !x.name.is_empty() && !x.name.starts_with("amq."))
            .map(|x| {
                strip(json!({
                    "name": x.name, "vhost": x.vhost, "type": x.kind, "durable": x.durable,
                    "auto_delete": x.auto_delete, "internal": x.internal,
                    "arguments": table_to_json(&x.arguments),
                }))
            })
            .collect();
        let bindings: Vec<Value> = self
            .list_bindings(vhost)
            .into_iter()
            .filter(|b| !b.source.is_empty())
            .map(|b| {
                strip(json!({
                    "source": b.source, "vhost": b.vhost, "destination": b.destination,
                    "destination_type": b.destination_type, "routing_key": b.routing_key,
                    "arguments": table_to_json(&b.arguments),
                }))
            })
            .collect();
        let mut out = json!({
            "rabbit_version": RABBIT_VERSION,
            "rabbitmq_version": RABBIT_VERSION,
            "product_name": "Charon",
            "product_version": env!("CARGO_PKG_VERSION"),
        });
        let Some(m) = out.as_object_mut() else {
            return out;
        };
        if vhost.is_none() {
            m.insert(
                "users".into(),
                self.list_users()
                    .into_iter()
                    .map(|u| {
                        json!({
                            "name": u.name, "password_hash": u.password_hash,
                            "hashing_algorithm": u.hashing_algorithm, "tags": u.tags,
                            "limits": super::params::user_limits_json(
                                &self.limits().user_limits(&u.name)),
                        })
                    })
                    .collect(),
            );
            m.insert(
                "vhosts".into(),
                self.vhosts()
                    .iter()
                    .map(|v| json!({"name": &*v.name}))
                    .collect(),
            );
            m.insert(
                "permissions".into(),
                self.list_permissions()
                    .into_iter()
                    .map(|p| {
                        json!({"user": p.user, "vhost": p.vhost, "configure": p.configure,
                               "write": p.write, "read": p.read})
                    })
                    .collect(),
            );
            m.insert(
                "topic_permissions".into(),
                self.list_topic_permissions()
                    .into_iter()
                    .map(|t| {
                        json!({"user": t.user, "vhost": t.vhost, "exchange": t.exchange,
                               "write": t.write, "read": t.read})
                    })
                    .collect(),
            );
        }
        m.insert(
            "parameters".into(),
            self.list_parameters(None, vhost)
                .iter()
                .map(super::params::Parameter::to_json)
                .collect(),
        );
        if vhost.is_none() {
            m.insert(
                "global_parameters".into(),
                self.list_global_parameters()
                    .into_iter()
                    .map(|(n, v)| json!({"name": n, "value": v}))
                    .collect(),
            );
        }
        m.insert("policies".into(), Value::Array(policies));
        // Charon also exports operator policies (RabbitMQ 4.x leaves them out; its import
        // ignores the key).
        m.insert("operator_policies".into(), Value::Array(operator_policies));
        m.insert("queues".into(), Value::Array(queues));
        m.insert("exchanges".into(), Value::Array(exchanges));
        m.insert("bindings".into(), Value::Array(bindings));
        out
    }

    /// Imports definitions (whole-broker shape, or one vhost's when `vhost` is given: objects
    /// without a `vhost` go there).
    pub async fn import_definitions(
        &self,
        defs: &Value,
        vhost: Option<&str>,
    ) -> Result<(), AdminError> {
        let Some(d) = defs.as_object() else {
            return Err(AdminError::BadRequest(
                "definitions must be a JSON object".into(),
            ));
        };
        let list = |k: &str| -> Vec<Map<String, Value>> {
            d.get(k)
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|v| v.as_object().cloned()).collect())
                .unwrap_or_default()
        };
        let vhost_of = |o: &Map<String, Value>| -> String {
            match vhost {
                Some(v) => v.to_string(),
                None => o
                    .get("vhost")
                    .and_then(Value::as_str)
                    .unwrap_or("/")
                    .to_string(),
            }
        };
        if vhost.is_none() {
            for v in list("vhosts") {
                self.add_vhost(str_field(&v, "name"), None).await?;
            }
            for u in list("users") {
                let password = match (u.get("password_hash"), u.get("password")) {
                    (Some(Value::String(h)), _) => PasswordInput::Hash {
                        hash: h.clone(),
                        algorithm: u
                            .get("hashing_algorithm")
                            .and_then(Value::as_str)
                            .map(str::to_string),
                    },
                    (_, Some(Value::String(p))) => PasswordInput::Plain(p.clone()),
                    _ => PasswordInput::None,
                };
                self.put_user(str_field(&u, "name"), password, parse_tags(u.get("tags")))
                    .await?;
                if let Some(l) = u.get("limits").filter(|l| l.is_object()) {
                    let l = super::params::parse_user_limits(l)?;
                    if l != crate::limits::UserLimits::default() {
                        self.replace_user_limits(str_field(&u, "name"), l).await?;
                    }
                }
            }
            for g in list("global_parameters") {
                let name = str_field(&g, "name");
                // The cluster id is the node's own, as RabbitMQ keeps its own on import.
                if name != "internal_cluster_id" {
                    let value = g.get("value").cloned().unwrap_or(Value::Null);
                    self.put_global_parameter(name, value).await?;
                }
            }
            for p in list("permissions") {
                self.set_permissions(
                    str_field(&p, "user"),
                    str_field(&p, "vhost"),
                    str_field(&p, "configure"),
                    str_field(&p, "write"),
                    str_field(&p, "read"),
                )
                .await?;
            }
            for t in list("topic_permissions") {
                self.set_topic_permission(crate::topic_access::TopicPermission {
                    user: str_field(&t, "user").to_string(),
                    vhost: str_field(&t, "vhost").to_string(),
                    exchange: str_field(&t, "exchange").to_string(),
                    write: str_field(&t, "write").to_string(),
                    read: str_field(&t, "read").to_string(),
                })
                .await
                .map_err(|e| match e {
                    AdminError::BadRequest(r) => AdminError::BadRequest(format!(
                        "topic permission of {} on {}: {r}",
                        str_field(&t, "user"),
                        str_field(&t, "vhost")
                    )),
                    other => other,
                })?;
            }
        } else if let Some(v) = vhost
            && self.vhost(v).is_none()
        {
            return Err(AdminError::NotFound);
        }
        for p in list("parameters") {
            let value = p.get("value").cloned().unwrap_or(Value::Null);
            self.put_parameter(
                str_field(&p, "component"),
                &vhost_of(&p),
                str_field(&p, "name"),
                value,
            )
            .await?;
        }
        let policies = (list("policies").into_iter().map(|p| (PolicyKind::User, p))).chain(
            list("operator_policies")
                .into_iter()
                .map(|p| (PolicyKind::Operator, p)),
        );
        for (kind, p) in policies {
            let definition: Vec<(String, DefValue)> = p
                .get("definition")
                .and_then(Value::as_object)
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| (k.clone(), def_value_from_json(v)))
                        .collect()
                })
                .unwrap_or_default();
            let input = PolicyInput {
                name: str_field(&p, "name").to_string(),
                pattern: str_field(&p, "pattern").to_string(),
                definition,
                priority: p.get("priority").and_then(Value::as_i64).unwrap_or(0),
                apply_to: p
                    .get("apply-to")
                    .and_then(Value::as_str)
                    .unwrap_or("all")
                    .to_string(),
            };
            self.set_policy_of(kind, &vhost_of(&p), input)
                .map_err(|e| {
                    AdminError::BadRequest(format!("policy {}: {e}", str_field(&p, "name")))
                })?;
        }
        for x in list("exchanges") {
            let arguments =
                json_to_table_opt(x.get("arguments")).map_err(AdminError::BadRequest)?;
            self.declare_exchange(
                INTERNAL_USER,
                &vhost_of(&x),
                ExchangeDeclare {
                    name: str_field(&x, "name").to_string(),
                    kind: str_field(&x, "type").to_string(),
                    passive: false,
                    durable: bool_field(&x, "durable", true),
                    auto_delete: bool_field(&x, "auto_delete", false),
                    internal: bool_field(&x, "internal", false),
                    arguments,
                },
            )
            .await?;
        }
        for q in list("queues") {
            let arguments =
                json_to_table_opt(q.get("arguments")).map_err(AdminError::BadRequest)?;
            self.declare_queue(
                INTERNAL_USER,
                &vhost_of(&q),
                QueueDeclare {
                    name: str_field(&q, "name").to_string(),
                    passive: false,
                    durable: bool_field(&q, "durable", true),
                    exclusive: false,
                    auto_delete: bool_field(&q, "auto_delete", false),
                    arguments,
                },
            )
            .await?;
        }
        for b in list("bindings") {
            let arguments =
                json_to_table_opt(b.get("arguments")).map_err(AdminError::BadRequest)?;
            let kind = if str_field(&b, "destination_type") == "exchange" {
                DestKind::Exchange
            } else {
                DestKind::Queue
            };
            self.bind(
                INTERNAL_USER,
                &vhost_of(&b),
                BindingSpec {
                    source: str_field(&b, "source"),
                    kind,
                    dest: str_field(&b, "destination"),
                    routing_key: str_field(&b, "routing_key"),
                    arguments: &arguments,
                },
            )
            .await?;
        }
        self.wait_durable().await;
        Ok(())
    }
}
