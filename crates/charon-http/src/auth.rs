//! HTTP basic authentication against the broker's users, and RabbitMQ's tag rules:
//! `management` (or any of the tags below) to use the API at all, seeing only the vhosts it has
//! permissions on and its own connections; `policymaker` adds policies; `monitoring` adds every
//! vhost's objects, all connections and the node; `administrator` everything (users, vhosts,
//! permissions, definitions).

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use base64::Engine;
use charon_server::broker::Broker;

use crate::error::ApiError;

/// The authenticated user of a request and its tags.
#[derive(Debug, Clone)]
pub struct AuthUser {
    /// User name.
    pub name: String,
    /// Tags (`administrator`, `policymaker`, `management`, ...).
    pub tags: Vec<String>,
}

impl AuthUser {
    fn has(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }

    /// Administrator.
    pub fn is_admin(&self) -> bool {
        self.has("administrator")
    }

    /// Monitoring or administrator: sees everything.
    pub fn is_monitor(&self) -> bool {
        self.is_admin() || self.has("monitoring")
    }

    /// Whether the user may change policies.
    pub fn may_set_policies(&self) -> Result<(), ApiError> {
        if self.is_admin() || self.has("policymaker") {
            Ok(())
        } else {
            Err(ApiError::not_authorised("Not policymaker user"))
        }
    }

    /// Administrator only (users, vhosts, permissions, definitions).
    pub fn require_admin(&self) -> Result<(), ApiError> {
        if self.is_admin() {
            Ok(())
        } else {
            Err(ApiError::not_authorised("Not administrator user"))
        }
    }

    /// Monitoring or administrator (nodes, all connections).
    pub fn require_monitor(&self) -> Result<(), ApiError> {
        if self.is_monitor() {
            Ok(())
        } else {
            Err(ApiError::not_authorised("Not monitor user"))
        }
    }

    /// Whether the user sees `vhost`'s objects.
    pub fn sees_vhost(&self, broker: &Broker, vhost: &str) -> bool {
        self.is_monitor() || broker.may_access(&self.name, vhost)
    }

    /// The vhost exists (404) and the user may see it (401 "Access refused.").
    pub fn check_vhost(&self, broker: &Broker, vhost: &str) -> Result<(), ApiError> {
        if broker.vhost(vhost).is_none() {
            return Err(ApiError::NotFound);
        }
        if self.sees_vhost(broker, vhost) {
            Ok(())
        } else {
            Err(ApiError::not_authorised("Access refused."))
        }
    }
}

impl FromRequestParts<Arc<Broker>> for AuthUser {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        broker: &Arc<Broker>,
    ) -> Result<Self, Self::Rejection> {
        let value = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .ok_or(ApiError::LoginFailed)?;
        let encoded = value.strip_prefix("Basic ").ok_or(ApiError::LoginFailed)?;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|_| ApiError::LoginFailed)?;
        let text = String::from_utf8(decoded).map_err(|_| ApiError::LoginFailed)?;
        let (user, password) = text.split_once(':').ok_or(ApiError::LoginFailed)?;
        let Some(tags) = broker.management_login(user, password) else {
            tracing::info!(
                user,
                "HTTP access denied: user '{user}' - invalid credentials"
            );
            return Err(ApiError::LoginFailed);
        };
        let known = ["administrator", "monitoring", "policymaker", "management"];
        if !tags.iter().any(|t| known.contains(&t.as_str())) {
            return Err(ApiError::not_authorised("Not management user"));
        }
        Ok(AuthUser {
            name: user.to_string(),
            tags,
        })
    }
}
