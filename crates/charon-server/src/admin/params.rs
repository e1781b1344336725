//! Vhost and user limits set at run time, runtime parameters and global parameters, with
//! RabbitMQ 3.10's names and shapes. Every change is saved with the users/vhosts record
//! ([`super::store`]) before the call returns.
//!
//! Limits are enforced by [`crate::limits::Limits`]; this module only validates and changes
//! them. Runtime parameters (`/api/parameters/{component}/{vhost}/{name}`) and global
//! parameters are inert JSON: Charon has no federation or shovel, so they are stored, listed
//! and exported in definitions but do nothing. Vhost limits also show as RabbitMQ's
//! `vhost-limits` runtime parameter (name `limits`), as RabbitMQ lists and exports them.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::admin::users::AdminError;
use crate::broker::Broker;
use crate::limits::{UserLimits, VHostLimits};

/// The runtime component RabbitMQ stores vhost limits under.
pub const VHOST_LIMITS: &str = "vhost-limits";

/// Runtime and global parameters (inert JSON).
#[derive(Debug, Default)]
pub struct ParamState {
    /// `(component, vhost, name)` → value.
    pub(crate) parameters: BTreeMap<(String, String, String), Value>,
    /// name → value.
    pub(crate) global: BTreeMap<String, Value>,
}

/// A runtime parameter as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct Parameter {
    /// Component (`federation-upstream`, `shovel`, `vhost-limits`, ...).
    pub component: String,
    /// Vhost.
    pub vhost: String,
    /// Name.
    pub name: String,
    /// Value as given.
    pub value: Value,
}

impl Parameter {
    /// RabbitMQ's JSON shape.
    pub fn to_json(&self) -> Value {
        json!({"value": self.value, "vhost": self.vhost,
               "component": self.component, "name": self.name})
    }
}

fn limit_value(name: &str, value: &Value) -> Result<i64, AdminError> {
    value.as_i64().ok_or_else(|| {
        AdminError::BadRequest(format!(
            "Validation failed\n\n{name} must be an integer, got {value}"
        ))
    })
}

fn unknown_limit(name: &str) -> AdminError {
    AdminError::BadRequest(format!(
        "Validation failed\n\n[{{<<\"{name}\">>}}] are not recognised limit properties"
    ))
}

/// A vhost's limits as RabbitMQ's JSON object (`{"max-connections": 10}`).
pub fn vhost_limits_json(l: &VHostLimits) -> Value {
    serde_json::to_value(l).unwrap_or_else(|_| json!({}))
}

/// A user's limits as RabbitMQ's JSON object (`{"max-channels": 10}`).
pub fn user_limits_json(l: &UserLimits) -> Value {
    serde_json::to_value(l).unwrap_or_else(|_| json!({}))
}

/// Parses a limits object (definitions import); unknown names are refused.
pub fn parse_vhost_limits(v: &Value) -> Result<VHostLimits, AdminError> {
    let mut l = VHostLimits::default();
    for (k, val) in v.as_object().into_iter().flatten() {
        let n = limit_value(k, val)?;
        match k.as_str() {
            "max-connections" => l.max_connections = Some(n),
            "max-queues" => l.max_queues = Some(n),
            _ => return Err(unknown_limit(k)),
        }
    }
    Ok(l)
}

/// Parses a user limits object (definitions import).
pub fn parse_user_limits(v: &Value) -> Result<UserLimits, AdminError> {
    let mut l = UserLimits::default();
    for (k, val) in v.as_object().into_iter().flatten() {
        let n = limit_value(k, val)?;
        match k.as_str() {
            "max-connections" => l.max_connections = Some(n),
            "max-channels" => l.max_channels = Some(n),
            _ => return Err(unknown_limit(k)),
        }
    }
    Ok(l)
}

impl Broker {
    fn params(&self) -> std::sync::MutexGuard<'_, ParamState> {
        self.admin()
            .params
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Vhosts with limits, by name, as `(vhost, limits)`.
    pub fn list_vhost_limits(&self) -> Vec<(String, VHostLimits)> {
        let mut v: Vec<(String, VHostLimits)> = self
            .vhosts()
            .iter()
            .map(|v| (v.name.to_string(), self.limits().vhost_limits(&v.name)))
            .filter(|(_, l)| *l != VHostLimits::default())
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Users with limits, by name, as `(user, limits)`.
    pub fn list_user_limits(&self) -> Vec<(String, UserLimits)> {
        self.list_users()
            .into_iter()
            .map(|u| {
                let l = self.limits().user_limits(&u.name);
                (u.name, l)
            })
            .filter(|(_, l)| *l != UserLimits::default())
            .collect()
    }

    /// Sets one vhost limit (`max-connections`, `max-queues`); `None` clears it.
    pub async fn set_vhost_limit(
        &self,
        vhost: &str,
        name: &str,
        value: Option<&Value>,
    ) -> Result<(), AdminError> {
        if self.vhost(vhost).is_none() {
            return Err(AdminError::NotFound);
        }
        let mut l = self.limits().vhost_limits(vhost);
        let n = value.map(|v| limit_value(name, v)).transpose()?;
        match name {
            "max-connections" => l.max_connections = n,
            "max-queues" => l.max_queues = n,
            _ => return Err(unknown_limit(name)),
        }
        self.limits().set_vhost_limits(vhost, l);
        self.save_access().await;
        Ok(())
    }

    /// Replaces all of a vhost's limits (ctl `set_vhost_limits`, definitions import).
    pub async fn replace_vhost_limits(
        &self,
        vhost: &str,
        limits: VHostLimits,
    ) -> Result<(), AdminError> {
        if self.vhost(vhost).is_none() {
            return Err(AdminError::NotFound);
        }
        self.limits().set_vhost_limits(vhost, limits);
        self.save_access().await;
        Ok(())
    }

    /// Sets one user limit (`max-connections`, `max-channels`); `None` clears it.
    pub async fn set_user_limit(
        &self,
        user: &str,
        name: &str,
        value: Option<&Value>,
    ) -> Result<(), AdminError> {
        if self.user(user).is_none() {
            return Err(AdminError::NotFound);
        }
        let mut l = self.limits().user_limits(user);
        let n = value.map(|v| limit_value(name, v)).transpose()?;
        match name {
            "max-connections" => l.max_connections = n,
            "max-channels" => l.max_channels = n,
            _ => return Err(unknown_limit(name)),
        }
        self.limits().set_user_limits(user, l);
        self.save_access().await;
        Ok(())
    }

    /// Replaces all of a user's limits.
    pub async fn replace_user_limits(
        &self,
        user: &str,
        limits: UserLimits,
    ) -> Result<(), AdminError> {
        if self.user(user).is_none() {
            return Err(AdminError::NotFound);
        }
        self.limits().set_user_limits(user, limits);
        self.save_access().await;
        Ok(())
    }

    /// Runtime parameters (incl. vhost limits as component `vhost-limits`), filtered.
    pub fn list_parameters(&self, component: Option<&str>, vhost: Option<&str>) -> Vec<Parameter> {
        let mut out: Vec<Parameter> = self
            .list_vhost_limits()
            .into_iter()
            .map(|(v, l)| Parameter {
                component: VHOST_LIMITS.into(),
                vhost: v,
                name: "limits".into(),
                value: vhost_limits_json(&l),
            })
            .collect();
        out.extend(
            self.params()
                .parameters
                .iter()
                .map(|((c, v, n), val)| Parameter {
                    component: c.clone(),
                    vhost: v.clone(),
                    name: n.clone(),
                    value: val.clone(),
                }),
        );
        out.retain(|p| {
            component.is_none_or(|c| c == p.component) && vhost.is_none_or(|v| v == p.vhost)
        });
        out.sort_by(|a, b| {
            (&a.component, &a.vhost, &a.name).cmp(&(&b.component, &b.vhost, &b.name))
        });
        out
    }

    /// Stores a runtime parameter (inert); returns whether it was created. Component
    /// `vhost-limits` sets the vhost's limits instead.
    pub async fn put_parameter(
        &self,
        component: &str,
        vhost: &str,
        name: &str,
        value: Value,
    ) -> Result<bool, AdminError> {
        if self.vhost(vhost).is_none() {
            return Err(AdminError::NotFound);
        }
        if component == VHOST_LIMITS {
            let l = parse_vhost_limits(&value)?;
            let created = self.limits().vhost_limits(vhost) == VHostLimits::default();
            self.replace_vhost_limits(vhost, l).await?;
            return Ok(created);
        }
        if component.is_empty() || name.is_empty() {
            return Err(AdminError::BadRequest(
                "component and name must not be empty".into(),
            ));
        }
        let created = self
            .params()
            .parameters
            .insert((component.into(), vhost.into(), name.into()), value)
            .is_none();
        self.save_access().await;
        Ok(created)
    }

    /// Forgets vhost `vhost`'s limits and runtime parameters (the vhost is deleted; the caller
    /// saves the record).
    pub(crate) fn forget_vhost_settings(&self, vhost: &str) {
        self.limits()
            .set_vhost_limits(vhost, VHostLimits::default());
        self.params().parameters.retain(|(_, v, _), _| v != vhost);
    }

    /// Deletes a runtime parameter; false when there is none.
    pub async fn delete_parameter(&self, component: &str, vhost: &str, name: &str) -> bool {
        if component == VHOST_LIMITS {
            if self.limits().vhost_limits(vhost) == VHostLimits::default() {
                return false;
            }
            self.limits()
                .set_vhost_limits(vhost, VHostLimits::default());
        } else if self
            .params()
            .parameters
            .remove(&(component.into(), vhost.into(), name.into()))
            .is_none()
        {
            return false;
        }
        self.save_access().await;
        true
    }

    /// Global parameters: the stored ones and `internal_cluster_id`, by name.
    pub fn list_global_parameters(&self) -> Vec<(String, Value)> {
        let mut g = self.params().global.clone();
        g.entry("internal_cluster_id".into())
            .or_insert_with(|| Value::String(self.admin().cluster_id.clone()));
        g.into_iter().collect()
    }

    /// Stores a global parameter (inert); returns whether it was created.
    pub async fn put_global_parameter(&self, name: &str, value: Value) -> Result<bool, AdminError> {
        if name.is_empty() {
            return Err(AdminError::BadRequest("name must not be empty".into()));
        }
        let created = self.params().global.insert(name.into(), value).is_none();
        self.save_access().await;
        Ok(created)
    }

    /// Deletes a global parameter; false when there is none.
    pub async fn delete_global_parameter(&self, name: &str) -> bool {
        if self.params().global.remove(name).is_none() {
            return false;
        }
        self.save_access().await;
        true
    }

    /// Runtime parameters stored by Charon (not the vhost limits), for the store record.
    pub(crate) fn stored_parameters(&self) -> (Vec<Value>, Map<String, Value>) {
        let p = self.params();
        let params = p
            .parameters
            .iter()
            .map(|((c, v, n), val)| json!({"component": c, "vhost": v, "name": n, "value": val}))
            .collect();
        let global = p
            .global
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        (params, global)
    }

    /// Restores stored parameters (at start).
    pub(crate) fn restore_parameters(&self, params: &[Value], global: &Map<String, Value>) {
        let mut p = self.params();
        for v in params {
            let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
            if let (Some(c), Some(vh), Some(n)) = (s("component"), s("vhost"), s("name")) {
                p.parameters
                    .insert((c, vh, n), v.get("value").cloned().unwrap_or(Value::Null));
            }
        }
        for (k, v) in global {
            p.global.insert(k.clone(), v.clone());
        }
    }
}
